/* SPDX-License-Identifier: Apache-2.0 */
/*
 * handlers_ops.c: the operational endpoints (/healthz, /readyz from the
 * readiness cache of ready.c, /metrics and the collector feeding it with the
 * outbox counts of that cache, group commit batches and cells in memory) and
 * the wallet endpoints (POST /v1/wallet/topup on the admin listener when
 * wallet.allow_topup, GET /v1/wallet/{uid}).
 */
#include "http/router.h"

#include "cluster/health.h"

#include "conf/conf.h"
#include "core/err.h"
#include "core/xmalloc.h"
#include "metrics/metrics.h"
#include "outbox/outbox.h"
#include "room/service.h"
#include "store/group_commit.h"
#include "store/store.h"
#include "wallet/wallet.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

void
handle_healthz(const struct http_deps *d, struct http_response *resp)
{
    (void)d;
    http_response_take(resp, 200, xstrdup("{\"status\":\"ok\"}"));
}

void
handle_readyz(const struct http_deps *d, const struct http_request *req, struct http_response *resp)
{
    http_ready_reply(d->ready, req->listener == HTTP_ADMIN, resp);
}

void
handle_metrics(const struct http_deps *d, struct http_response *resp)
{
    (void)d;
    http_response_take(resp, 200, metrics_render());
    resp->content_type = "text/plain; version=0.0.4; charset=utf-8";
}

/* The collector of http_metrics_register: arg is the server's http_deps. The
 * outbox writes its table's lines; group commit and the cells are counted
 * here, where their handles are. */
static void
collect(void *arg, struct metrics_text *t)
{
    const struct http_deps *d = arg;

    struct outbox_counts oc;
    int64_t age_ms;

    if (http_ready_counts(d->ready, &oc)) /* refreshed in the background: no scan here */
        outbox_metrics_rows(&oc, t);
    http_ready_store_up(d->ready, &age_ms);
    if (age_ms >= 0) {
        metrics_family(t, "roomd_outbox_store_figures_age_seconds", "gauge",
                       "Seconds since the readiness check last answered: the age of the "
                       "store-wide figures (roomd_outbox_rows, the oldest undelivered ages, "
                       "roomd_dependency_up{dependency=\"store\"}); a scrape never queries "
                       "the store.");
        metrics_value(t, "roomd_outbox_store_figures_age_seconds", "scope=\"store\"",
                      (double)age_ms / 1000.0);
    }
    if (d->gc != NULL) {
        uint64_t batches = 0, muts = 0;
        group_commit_stats(d->gc, &batches, &muts);
        metrics_counter(t, "roomd_group_commit_batches_total",
                        "Transactions of the group committer.", batches);
        metrics_counter(t, "roomd_group_commit_mutations_total",
                        "Mutations committed by the group committer.", muts);
    }
    if (d->rooms != NULL) {
        metrics_family(t, "roomd_room_cells", "gauge", "Room cells in memory.");
        metrics_count(t, "roomd_room_cells", "", room_service_cells(d->rooms));
    }
}

void
http_metrics_register(const struct http_deps *d)
{
    metrics_add_collector(collect, (void *)d);
}

void
http_metrics_unregister(const struct http_deps *d)
{
    metrics_remove_collector(collect, (void *)d);
}

bool
http_parse_digits(const char *s, int64_t *out)
{
    char *end;
    long long v;

    if (s[0] < '0' || s[0] > '9')
        return false;
    errno = 0;
    v = strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0')
        return false;
    *out = v;
    return true;
}

bool
http_parse_uid(const char *s, int64_t *out)
{
    return s[0] != '0' && http_parse_digits(s, out);
}

bool
http_acting_uid(const struct http_deps *d, const struct http_request *req,
                const struct auth_principal *p, const char *app, const char *uid_text, int64_t *uid,
                struct http_response *resp)
{
    enum auth_reason ar;

    if (!http_parse_uid(uid_text, uid)) {
        http_response_field_error(resp, "invalid_argument", "uid",
                                  "uid: must be a positive integer");
        return false;
    }
    if ((ar = auth_may_act_as(p, app, *uid)) != AUTH_OK) { /* the user itself or a service */
        http_refuse(d, req, ar, resp);
        return false;
    }
    return true;
}

static void
wallet_reply(struct http_response *resp, const char *app, int64_t uid, int64_t balance)
{
    json_t *j = json_pack("{s:s, s:I, s:I}", "app_code", app, "uid", (json_int_t)uid, "balance",
                          (json_int_t)balance);
    http_response_take(resp, 200, json_dumps(j, JSON_COMPACT));
    json_decref(j);
}

static void
wallet_error(struct http_response *resp, int rc)
{
    http_response_error(resp, roomd_err_http_status(rc), roomd_err_code(rc), "wallet: %s",
                        roomd_strerror(rc));
}

/* A positive JSON integer field, or a 400 naming it. */
static bool
positive_field(json_t *j, const char *name, int64_t *out, struct http_response *resp)
{
    json_t *v = json_object_get(j, name);
    char msg[128];

    if (json_is_integer(v) && json_integer_value(v) > 0) {
        *out = json_integer_value(v);
        return true;
    }
    snprintf(msg, sizeof(msg), "%s: %s", name,
             v == NULL ? "required" : "must be a positive integer");
    http_response_field_error(resp, "invalid_argument", name, msg);
    return false;
}

void
handle_wallet_topup(const struct http_deps *d, const struct http_request *req, const char *app,
                    struct http_response *resp)
{
    json_error_t je;
    json_t *j = json_loadb(req->body, req->body_len, 0, &je);
    json_t *cid;
    const char *key;
    json_t *val;
    int64_t uid, amount, balance = 0;
    int rc;

    if (j == NULL) {
        char msg[320];
        snprintf(msg, sizeof(msg), "body: invalid JSON: %s", je.text);
        http_response_field_error(resp, "invalid_json", "body", msg);
        return;
    }
    if (!json_is_object(j)) {
        http_response_field_error(resp, "invalid_argument", "body", "body: must be a JSON object");
        goto out;
    }
    json_object_foreach(j, key, val)
    {
        if (strcmp(key, "command_id") != 0 && strcmp(key, "uid") != 0 &&
            strcmp(key, "amount") != 0) {
            char msg[128];
            snprintf(msg, sizeof(msg), "%.60s: unknown field", key);
            http_response_field_error(resp, "invalid_argument", key, msg);
            goto out;
        }
    }
    cid = json_object_get(j, "command_id");
    if (!json_is_string(cid) || json_string_length(cid) < 1 ||
        json_string_length(cid) >= STORE_ID_MAX) {
        http_response_field_error(resp, "invalid_argument", "command_id",
                                  "command_id: must be a string of 1..63 bytes");
        goto out;
    }
    if (!positive_field(j, "uid", &uid, resp) || !positive_field(j, "amount", &amount, resp))
        goto out;
    rc = d->wallet->ops->topup(d->wallet, app, uid, amount, json_string_value(cid), &balance);
    if (rc == ROOMD_ERANGE) {
        http_response_field_error(resp, "out_of_range", "amount",
                                  "amount: the balance would pass INT64_MAX");
        goto out;
    }
    if (rc != 0) {
        wallet_error(resp, rc);
        goto out;
    }
    wallet_reply(resp, app, uid, balance);
out:
    json_decref(j);
}

void
handle_wallet_get(const struct http_deps *d, const struct http_request *req,
                  const struct auth_principal *p, const char *app, const char *uid_text,
                  struct http_response *resp)
{
    int64_t uid, balance = 0;
    int rc;

    if (!http_acting_uid(d, req, p, app, uid_text, &uid, resp))
        return;
    rc = d->wallet->ops->balance(d->wallet, app, uid, &balance);
    if (rc != 0) {
        wallet_error(resp, rc);
        return;
    }
    wallet_reply(resp, app, uid, balance);
}
