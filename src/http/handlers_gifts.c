/* SPDX-License-Identifier: Apache-2.0 */
/*
 * handlers_gifts.c: the gift catalog over HTTP (docs/room.md, Gift
 * catalog): GET /v1/gifts (both listeners: what a client shows and must
 * pay) and POST /v1/gifts (admin listener: create or change one gift,
 * conditional on its version when the body names one). The store holds
 * the catalog (store_gift_*); SendGift reads it in room/service.c.
 */
#include "http/router.h"

#include "conf/conf.h"
#include "core/err.h"
#include "core/log.h"
#include "core/xmalloc.h"
#include "store/store.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The gift as its JSON object (the answer of both routes). */
static json_t *
gift_json(const struct gift_item *g)
{
    return json_pack("{s:s, s:I, s:I, s:b, s:I, s:I}", "gift_id", g->gift_id, "unit_price",
                     (json_int_t)g->unit_price, "energy_per_unit", (json_int_t)g->energy_per_unit,
                     "enabled", g->enabled != 0, "version", (json_int_t)g->version, "updated_at_ms",
                     (json_int_t)g->updated_at_ms);
}

static void
take_json(struct http_response *resp, int status, json_t *o)
{
    char *body = json_dumps(o, JSON_SORT_KEYS | JSON_COMPACT);

    json_decref(o);
    if (body == NULL)
        abort();
    http_response_take(resp, status, body);
}

static void
store_error(struct http_response *resp, int rc)
{
    http_response_error(resp, rc == ROOMD_EINTERNAL ? 500 : 503,
                        rc == ROOMD_EINTERNAL ? "internal" : "unavailable", "gift catalog: %s",
                        roomd_strerror(rc));
}

void
handle_gifts_list(const struct http_deps *d, const struct http_request *req, const char *app,
                  struct http_response *resp)
{
    struct gift_item *rows = NULL;
    size_t n = 0;
    json_t *arr;
    int rc;

    (void)req;
    if ((rc = store_gift_list(d->store, app, &rows, &n)) != 0) {
        store_error(resp, rc);
        return;
    }
    arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, gift_json(&rows[i]));
    free(rows);
    take_json(resp, 200,
              json_pack("{s:s, s:s, s:o}", "app_code", app, "catalog", d->conf->room.gift_catalog,
                        "gifts", arr));
}

/* Reads integer field name of j into *out when present: lo..hi. False and
 * a 400 naming it otherwise; absent keeps *out (required: a 400). */
static bool
int_field(json_t *j, const char *name, int64_t lo, int64_t hi, bool required, int64_t *out,
          struct http_response *resp)
{
    json_t *v = json_object_get(j, name);

    if (v == NULL && !required)
        return true;
    if (json_is_integer(v) && json_integer_value(v) >= lo && json_integer_value(v) <= hi) {
        *out = json_integer_value(v);
        return true;
    }
    char msg[160];
    snprintf(msg, sizeof(msg), "%s: %s %lld..%lld", name,
             v == NULL ? "is required, an integer" : "must be an integer in", (long long)lo,
             (long long)hi);
    http_response_field_error(resp, "invalid_argument", name, msg);
    return false;
}

/* True when s is 1..63 characters of the id charset [A-Za-z0-9_.:-] (a
 * gift_id as SendGift takes it). */
static bool
gift_id_ok(const char *s)
{
    size_t n = strlen(s);

    if (n < 1 || n >= STORE_ID_MAX)
        return false;
    return strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:-") == n;
}

void
handle_gift_put(const struct http_deps *d, const struct http_request *req, const char *app,
                struct http_response *resp)
{
    static const char *const known[] = {"gift_id", "unit_price", "energy_per_unit",
                                        "enabled", "version",    NULL};
    json_error_t je;
    json_t *j = json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &je), *v;
    struct gift_item g;
    const char *key;
    int64_t expect = -1;
    int rc;

    memset(&g, 0, sizeof(g));
    if (!json_is_object(j)) {
        http_response_field_error(resp, j == NULL ? "invalid_json" : "invalid_argument", "body",
                                  "body: must be a JSON object");
        goto out;
    }
    json_object_foreach(j, key, v)
    {
        size_t k = 0;
        while (known[k] != NULL && strcmp(known[k], key) != 0)
            k++;
        if (known[k] == NULL) {
            char msg[96];
            snprintf(msg, sizeof(msg), "%.60s: unknown field", key);
            http_response_field_error(resp, "invalid_argument", key, msg);
            goto out;
        }
    }
    v = json_object_get(j, "gift_id");
    if (!json_is_string(v) || !gift_id_ok(json_string_value(v))) {
        http_response_field_error(resp, "invalid_argument", "gift_id",
                                  "gift_id: must be a string of 1..63 characters [A-Za-z0-9_.:-]");
        goto out;
    }
    strlcpy_(g.app_code, app, sizeof(g.app_code));
    strlcpy_(g.gift_id, json_string_value(v), sizeof(g.gift_id));
    if (!int_field(j, "unit_price", 1, STORE_GIFT_VALUE_MAX, true, &g.unit_price, resp))
        goto out;
    g.energy_per_unit = g.unit_price; /* default: energy follows the price */
    if (!int_field(j, "energy_per_unit", 0, STORE_GIFT_VALUE_MAX, false, &g.energy_per_unit,
                   resp) ||
        !int_field(j, "version", 0, INT64_MAX, false, &expect, resp))
        goto out;
    v = json_object_get(j, "enabled");
    if (v != NULL && !json_is_boolean(v)) {
        http_response_field_error(resp, "invalid_argument", "enabled",
                                  "enabled: must be true or false");
        goto out;
    }
    g.enabled = v == NULL || json_is_true(v);
    rc = store_gift_put(d->store, &g, expect);
    if (rc == ROOMD_ECONFLICT) {
        http_response_error(resp, 409, "version_conflict",
                            "gift %s is at version %lld, the request named %lld: read it again",
                            g.gift_id, (long long)g.version, (long long)expect);
        goto out;
    }
    if (rc != 0) {
        store_error(resp, rc);
        goto out;
    }
    /* the catalog is money: every change is logged (the operator's trail) */
    log_info("http", "gift catalog changed",
             "app=%s gift_id=%s unit_price=%lld energy_per_unit=%lld enabled=%d version=%lld",
             g.app_code, g.gift_id, (long long)g.unit_price, (long long)g.energy_per_unit,
             g.enabled, (long long)g.version);
    take_json(resp, 200, gift_json(&g));
out:
    json_decref(j);
}
