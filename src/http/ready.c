/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ready.c: readiness from a cache (router.h, struct http_ready). A ticker
 * thread asks the store for the outbox counts and makes a write probe
 * (store_write_probe: a store that refuses writes, a full disk, is down too,
 * as is one whose last commit failed under WRITE_FAIL_WINDOW_MS ago) every
 * every_ms, or every 10 x the query's duration when that is longer (a big
 * outbox); /readyz and the
 * /metrics outbox gauges read the last answer. So a /readyz flood costs no
 * query, and the public answer is one reason word: "starting" (no check yet),
 * "store" (the last check failed), "stale" (the next check is over 5 intervals late: the store
 * hangs). The admin listener adds the counts and the store's error text.
 */
#include "http/router.h"

#include "cluster/health.h"

#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/secret.h"
#include "core/xmalloc.h"
#include "http/ticker.h"
#include "store/store.h"

#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STALE_INTERVALS 5
#define WRITE_FAIL_WINDOW_MS 2500 /* a failed commit this recent makes the store down */

struct http_ready {
    struct store *store;
    const struct node_health *health; /* the node's other checks (cluster/health.h); may be NULL */
    struct ticker *ticker;
    int64_t every_ms;
    pthread_mutex_t mu;
    bool checked;            /* one check answered */
    bool ok;                 /* the last check succeeded */
    int64_t checked_mono_ms; /* when the last check answered */
    int64_t gap_ms;          /* until the next check: max(every_ms, 10 x its duration) */
    struct outbox_counts oc; /* of the last successful check */
    bool have_counts;
    char error[256]; /* the last store failure (admin only) */
    int status;      /* node_health_eval's: 200 or 503 */
    json_t *checks;  /* its answer {"status":..,"checks":{..}} (admin only) */
    char word[16];   /* "ready" | "degraded" | "unavailable" */
    char reason[32]; /* the first check down ("store", "lease", "broker"), or "" */
};

/* The first check of the node_health answer that is down, into reason. */
static void
first_down(json_t *checks, char *reason, size_t len)
{
    const char *k;
    json_t *v;

    reason[0] = '\0';
    json_object_foreach(json_object_get(checks, "checks"), k, v)
    {
        if (json_is_string(v) && strncmp(json_string_value(v), "down", 4) == 0) {
            strlcpy_(reason, k, len);
            return;
        }
    }
}

/* The ticker: one count query, then none until gap_ms has passed (at most a
 * tenth of the time goes to counting: 3M rows take ~2 s on SQLite). */
static void
refresh(void *arg)
{
    struct http_ready *r = arg;
    struct outbox_counts oc;
    int64_t t0 = clock_mono_us() / 1000, took;
    int rc;

    log_flush_suppressed(); /* the counts of rate-limited log lines, every tick */
    if (r->checked && t0 - r->checked_mono_ms < r->gap_ms)
        return;
    rc = store_outbox_counts(r->store, &oc);
    bool counted = rc == 0; /* the figures hold even when a write below fails */
    char msg[sizeof(r->error)] = "", *hj = NULL;
    if (rc != 0) {
        snprintf(msg, sizeof(msg), "%s: %s", roomd_strerror(rc), store_errmsg());
    } else if ((rc = store_write_probe(r->store)) != 0) { /* reads work, writes may not */
        snprintf(msg, sizeof(msg), "write probe: %s: %s", roomd_strerror(rc), store_errmsg());
    } else if (store_writes_failing(r->store, WRITE_FAIL_WINDOW_MS)) {
        rc = ROOMD_EIO; /* the probe's small write passed, the commands' writes do not */
        snprintf(msg, sizeof(msg), "writes: the last commit failed (less than %d s ago)",
                 WRITE_FAIL_WINDOW_MS / 1000);
    }
    took = clock_mono_us() / 1000 - t0;
    /* 503 when this node cannot serve commands; "degraded" for the rest */
    int status = node_health_eval(r->health, rc != 0 ? msg : NULL, &hj);
    char *masked = xmalloc(strlen(hj) * 3 + 1); /* "down: nats://u:***@h": no secret */
    secret_redact(hj, masked, strlen(hj) * 3 + 1);
    json_t *checks = json_loads(masked, 0, NULL);
    free(masked);
    free(hj);
    pthread_mutex_lock(&r->mu);
    json_decref(r->checks);
    r->checks = checks;
    r->status = status;
    strlcpy_(r->word, json_string_value(json_object_get(checks, "status")) ?: "unavailable",
             sizeof(r->word));
    first_down(checks, r->reason, sizeof(r->reason));
    r->checked = true;
    r->ok = rc == 0;
    r->checked_mono_ms = t0 + took;
    r->gap_ms = took * 10 > r->every_ms ? took * 10 : r->every_ms;
    if (counted) {
        r->oc = oc;
        r->have_counts = true;
    }
    if (rc == 0) {
        r->error[0] = '\0';
    } else {
        secret_redact(msg, r->error, sizeof(r->error));
    }
    pthread_mutex_unlock(&r->mu);
}

int
http_ready_start(struct http_ready **out, struct store *st, const struct node_health *health,
                 int64_t every_ms)
{
    struct http_ready *r = xcalloc(1, sizeof(*r));

    *out = NULL;
    r->store = st;
    r->health = health;
    r->every_ms = every_ms;
    pthread_mutex_init(&r->mu, NULL);
    if (ticker_start(&r->ticker, every_ms, refresh, r) == 0) {
        *out = r;
        return 0;
    }
    http_ready_stop(r); /* no ticker: what was set up goes */
    return ROOMD_ENOMEM;
}

void
http_ready_stop(struct http_ready *r)
{
    if (r == NULL)
        return;
    ticker_stop(r->ticker);
    json_decref(r->checks);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

bool
http_ready_counts(struct http_ready *r, struct outbox_counts *oc)
{
    bool have;

    if (r == NULL)
        return false;
    pthread_mutex_lock(&r->mu);
    have = r->have_counts;
    if (have)
        *oc = r->oc;
    pthread_mutex_unlock(&r->mu);
    return have;
}

bool
http_ready_store_up(struct http_ready *r, int64_t *age_ms)
{
    int64_t now = clock_mono_us() / 1000;
    bool up;

    *age_ms = -1;
    if (r == NULL)
        return false;
    pthread_mutex_lock(&r->mu);
    if (r->checked)
        *age_ms = now - r->checked_mono_ms;
    up = r->checked && r->ok && *age_ms <= STALE_INTERVALS * r->gap_ms;
    pthread_mutex_unlock(&r->mu);
    return up;
}

void
http_ready_reply(struct http_ready *r, bool details, struct http_response *resp)
{
    const char *reason = NULL, *word;
    int status;
    json_t *j;
    int64_t age_ms;

    if (r == NULL) {
        http_response_take(resp, 503,
                           xstrdup("{\"status\":\"unavailable\",\"reason\":\"starting\"}"));
        return;
    }
    pthread_mutex_lock(&r->mu);
    age_ms = clock_mono_us() / 1000 - r->checked_mono_ms;
    if (!r->checked)
        reason = "starting";
    else if (age_ms > r->gap_ms + STALE_INTERVALS * r->every_ms)
        reason = "stale";
    if (reason != NULL) {
        status = 503;
        word = "unavailable";
    } else {
        status = r->status;
        word = r->word;
        reason = r->reason[0] ? r->reason : NULL;
    }
    if (details && r->checks != NULL) /* the checks and their errors: operators only */
        j = json_deep_copy(r->checks);
    else
        j = json_object();
    json_object_set_new(j, "status", json_string(word));
    if (reason)
        json_object_set_new(j, "reason", json_string(reason));
    if (details) {
        char server[300];
        uint64_t moves;

        json_object_set_new(j, "checked_ms_ago", json_integer(r->checked ? age_ms : -1));
        if (store_server_info(r->store, server, sizeof(server), &moves) == 0) {
            /* which database server this node uses (store.mysql.hosts, docs/ha.md) */
            json_object_set_new(j, "store_server", json_string(server));
            json_object_set_new(j, "store_failovers", json_integer((json_int_t)moves));
        }
        if (r->error[0] != '\0')
            json_object_set_new(j, "error", json_string(r->error));
        if (r->have_counts)
            json_object_set_new(
                j, "outbox",
                json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}", "pending", (json_int_t)r->oc.pending,
                          "delivering", (json_int_t)r->oc.delivering, "delivered",
                          (json_int_t)r->oc.delivered, "retryable", (json_int_t)r->oc.retryable,
                          "failed", (json_int_t)r->oc.failed, "oldest_undelivered_ms",
                          (json_int_t)r->oc.oldest_undelivered_ms));
    }
    pthread_mutex_unlock(&r->mu);
    http_response_take(resp, status, json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER));
    json_decref(j);
}
