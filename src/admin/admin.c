/* SPDX-License-Identifier: Apache-2.0 */
/*
 * admin/admin.c: the operator's operations (admin/admin.h) over the admin
 * store (store/admin.h). Read top-down: replies, rows as JSON, then one
 * function per operation; the bulk replay last.
 */
#include "admin/admin.h"

#include "admin/internal.h"
#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/xmalloc.h"
#include "outbox/outbox.h"
#include "publish/sink.h"
#include "store/admin.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIST_DEFAULT 50
#define LIST_MAX 500
#define SAMPLE_DEFAULT 10
#define SAMPLE_MAX 100
#define CHUNK_DEFAULT 500
#define CHUNK_MAX 5000

/* ==== replies ==== */

void
admin_reply_clear(struct admin_reply *r)
{
    free(r->body);
    r->body = NULL;
    r->status = 0;
}

void
admin_reply_ok(struct admin_reply *r, json_t *o)
{
    r->status = 200;
    r->body = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
}

void
admin_reply_error(struct admin_reply *r, int status, const char *code, const char *field,
                  const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    json_t *e = json_pack("{s:s, s:s}", "code", code, "message", msg);
    if (field != NULL)
        json_object_set_new(e, "field", json_string(field));
    json_t *o = json_pack("{s:o}", "error", e);
    r->status = status;
    r->body = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
}

void
admin_reply_store(struct admin *a, struct admin_reply *r, int rc)
{
    if (rc == ROOMD_ENOTFOUND) {
        admin_reply_error(r, 404, "not_found", NULL, "no such row");
        return;
    }
    admin_reply_error(r, rc == ROOMD_EUNAVAIL ? 503 : 500,
                      rc == ROOMD_EUNAVAIL ? "unavailable" : "internal", NULL, "store: %s: %s",
                      roomd_strerror(rc), admin_store_errmsg(a->store));
}

/* Reads an integer query key in [lo, hi] (dflt when absent); false and a
 * 400 in r when it is not one. */
bool
admin_query_int(admin_lookup_fn q, void *ctx, const char *key, int64_t lo, int64_t hi, int64_t dflt,
                int64_t *out, struct admin_reply *r)
{
    const char *v = q != NULL ? q(ctx, key) : NULL;
    char *end;

    *out = dflt;
    if (v == NULL || *v == '\0')
        return true;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || x < lo || x > hi) {
        admin_reply_error(r, 400, "invalid_argument", key, "%s: want an integer in %lld..%lld", key,
                          (long long)lo, (long long)hi);
        return false;
    }
    *out = x;
    return true;
}

/* ==== rows as JSON ==== */

static json_t *
sink_names(uint32_t bits)
{
    json_t *a = json_array();

    for (int b = 0; b < OUTBOX_SINK_BITS; b++)
        if (bits & (1u << b)) {
            const char *n = sink_bit_name(1u << b);
            json_array_append_new(a, json_string(*n ? n : "?"));
        }
    return a;
}

json_t *
admin_row_json(const struct outbox_row *r)
{
    json_t *o = json_pack(
        "{s:I, s:s, s:s, s:s, s:s, s:s, s:I, s:s, s:i, s:o, s:I, s:I}", "id", (json_int_t)r->id,
        "event_id", r->event_id, "app_code", r->app_code, "room_id", r->room_id, "command_id",
        r->command_id, "event_type", r->event_type, "room_version", (json_int_t)r->room_version,
        "status", outbox_status_name(r->status), "retry_count", r->retry_count, "sinks_done",
        sink_names(r->sinks_done), "next_retry_at_ms", (json_int_t)r->next_retry_at_ms,
        "created_at_ms", (json_int_t)r->created_at_ms);
    json_object_set_new(o, "delivered_at_ms", json_integer(r->delivered_at_ms));
    json_object_set_new(o, "last_error", r->last_error ? json_string(r->last_error) : json_null());
    if (strncmp(r->command_id, "repair:", 7) == 0)
        json_object_set_new(o, "repair_of", json_string(r->command_id + 7));
    return o;
}

/* ==== open ==== */

static uint32_t
configured_sinks(const struct conf *c)
{
    const struct conf_outbox *ob = &c->outbox_worker;
    bool direct = ob->publish_mode == PUBLISH_DIRECT || ob->publish_mode == PUBLISH_DUAL;
    bool mq = ob->publish_mode == PUBLISH_MQ || ob->publish_mode == PUBLISH_DUAL;
    uint32_t s = 0;

    if (direct && ob->log_sink_enabled)
        s |= SINK_BIT_LOG;
    if (direct && c->tencent_im.enabled)
        s |= SINK_BIT_TIM;
    if (direct && c->activity.enabled)
        s |= SINK_BIT_ACTIVITY;
    if (mq && c->rocketmq.enabled && c->rocketmq.room_outbox.enabled)
        s |= SINK_BIT_BUS;
    if (c->rocketmq.enabled && c->rocketmq.rocket_launch.enabled)
        s |= SINK_BIT_ROCKET;
    return s;
}

int
admin_open(struct admin **out, const struct conf *conf, struct outbox *outbox, bool readonly,
           char *err, size_t errlen)
{
    struct admin *a = xcalloc(1, sizeof(*a));
    int rc;

    *out = NULL;
    if ((rc = admin_store_open(&a->store, &conf->store, readonly, err, errlen)) != 0) {
        free(a);
        return rc;
    }
    a->conf = conf;
    a->outbox = outbox;
    a->readonly = readonly;
    a->sinks = configured_sinks(conf);
    *out = a;
    return 0;
}

void
admin_close(struct admin *a)
{
    if (a == NULL)
        return;
    admin_store_close(a->store);
    free(a);
}

/* ==== summary, list, show ==== */

/* Seconds since ms (0 when ms is 0). */
static double
age_s(int64_t now, int64_t ms)
{
    return ms > 0 && now > ms ? (double)(now - ms) / 1000.0 : 0.0;
}

void
admin_summary(struct admin *a, struct admin_reply *r)
{
    struct admin_summary s;
    int64_t now = clock_wall_ms();
    int rc;

    if ((rc = admin_store_summary(a->store, &s)) != 0) {
        admin_reply_store(a, r, rc);
        return;
    }
    json_t *by_status = json_object();
    for (int st = 0; st < 5; st++)
        json_object_set_new(by_status, outbox_status_name(st), json_integer(s.by_status[st]));
    /* the publish mode's sinks, and any other sink rows still lack */
    json_t *sinks = json_object();
    for (int b = 0; b < OUTBOX_SINK_BITS; b++) {
        uint32_t bit = 1u << b;
        const char *name = sink_bit_name(bit);
        if (*name == '\0' || !(a->sinks & bit))
            continue;
        /* failed rows apart: the undelivered age is of the rows a claim may
         * still take, the failed age of the dead letters */
        json_object_set_new(sinks, name,
                            json_pack("{s:I, s:I, s:f, s:f}", "undelivered",
                                      (json_int_t)s.lacking[b], "failed",
                                      (json_int_t)s.failed_lacking[b], "oldest_undelivered_s",
                                      age_s(now, s.oldest.oldest_missing_ms[b]), "oldest_failed_s",
                                      age_s(now, s.oldest_failed_ms[b])));
    }
    admin_reply_ok(r,
                   json_pack("{s:o, s:o, s:f}", "by_status", by_status, "sinks", sinks,
                             "oldest_undelivered_s", age_s(now, s.oldest.oldest_undelivered_ms)));
}

void
admin_list(struct admin *a, admin_lookup_fn q, void *ctx, struct admin_reply *r)
{
    struct admin_filter f;
    const char *field = NULL;
    char why[256];
    int64_t after, limit;
    struct outbox_row *rows;
    size_t n;
    int rc;

    if (admin_filter_from_lookup(&f, q, ctx, &field, why, sizeof(why)) != 0) {
        admin_reply_error(r, 400, "invalid_argument", field, "%s", why);
        return;
    }
    if (!admin_query_int(q, ctx, "after", 0, INT64_MAX, 0, &after, r) ||
        !admin_query_int(q, ctx, "limit", 1, LIST_MAX, LIST_DEFAULT, &limit, r))
        return;
    if ((rc = admin_store_search(a->store, &f, after, (int)limit, &rows, &n)) != 0) {
        admin_reply_store(a, r, rc);
        return;
    }
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, admin_row_json(&rows[i]));
    json_t *o = json_pack("{s:o, s:o}", "rows", arr, "filter", admin_filter_to_json(&f));
    /* a full page may have more after it */
    json_object_set_new(o, "next_after",
                        n == (size_t)limit ? json_integer(rows[n - 1].id) : json_null());
    outbox_rows_free(rows, n);
    admin_reply_ok(r, o);
}

void
admin_show(struct admin *a, const char *event_id, struct admin_reply *r)
{
    struct outbox_row row;
    uint8_t *env = NULL;
    size_t envlen = 0;
    char *json = NULL;
    int rc;

    if ((rc = admin_store_get(a->store, event_id, &row)) != 0) {
        if (rc == ROOMD_ENOTFOUND)
            admin_reply_error(r, 404, "not_found", "event_id", "no outbox row with event_id %.40s",
                              event_id);
        else
            admin_reply_store(a, r, rc);
        return;
    }
    json_t *o = admin_row_json(&row);
    json_t *sinks = json_object();
    for (int b = 0; b < OUTBOX_SINK_BITS; b++) {
        uint32_t bit = 1u << b;
        if ((a->sinks | row.sinks_done) & bit)
            json_object_set_new(sinks, sink_bit_name(bit),
                                json_string(row.sinks_done & bit             ? "delivered"
                                            : row.status == OUTBOX_FAILED    ? "failed"
                                            : row.status == OUTBOX_DELIVERED ? "not needed"
                                                                             : "pending"));
    }
    json_object_set_new(o, "sinks", sinks);
    json_object_set_new(o, "attempts", json_integer(row.retry_count));
    if (outbox_event_build(&row, &env, &envlen, &json) == 0 && json != NULL) {
        json_t *ev = json_loads(json, 0, NULL);
        json_object_set_new(o, "event", ev ? ev : json_null());
    } else {
        json_object_set_new(o, "event", json_null());
        json_object_set_new(o, "event_error",
                            json_string("the payload does not decode as its event_type"));
    }
    free(env);
    free(json);
    free(row.payload);
    free(row.last_error);
    admin_reply_ok(r, o);
}

/* ==== bulk replay ==== */

/* Runs the chunks of audit id until it is done (or a chunk fails). Returns 0
 * or the store's error; *done gets the rows replayed by this call. */
static int
run_replay(struct admin *a, int64_t id, const struct admin_filter *f, bool repair, int chunk,
           int64_t total, admin_progress_fn progress, void *arg, int64_t *done)
{
    bool finished = false;
    int rc = 0;

    *done = 0;
    while (!finished) {
        int64_t n = 0;
        if ((rc = admin_store_replay_chunk(a->store, id, f, repair, chunk, clock_wall_ms(), &n,
                                           &finished)) != 0)
            return rc;
        *done += n;
        if (n > 0)
            outbox_wake(a->outbox); /* the rows are pending now: deliver them */
        if (progress != NULL)
            progress(arg, *done, total);
    }
    return 0;
}

/* Reads the replay body into *f, *dry, *repair, *sample, *chunk; false and
 * a 400 in r when it is not a valid one. */
static bool
read_replay_body(const char *body, size_t len, struct admin_filter *f, bool *dry, bool *repair,
                 int *sample, int *chunk, struct admin_reply *r)
{
    json_error_t je;
    const char *field = NULL, *key;
    char why[256];
    json_t *o, *v;

    o = json_loadb(body != NULL ? body : "", len, 0, &je);
    if (o == NULL || !json_is_object(o)) {
        admin_reply_error(r, 400, "invalid_json", NULL, "body: want a JSON object (%s)",
                          o ? "not an object" : je.text);
        json_decref(o);
        return false;
    }
    *dry = false;
    *repair = false;
    *sample = SAMPLE_DEFAULT;
    *chunk = CHUNK_DEFAULT;
    admin_filter_init(f);
    json_object_foreach(o, key, v)
    {
        bool ok = true;
        if (strcmp(key, "filter") == 0) {
            if (admin_filter_from_json(f, v, &field, why, sizeof(why)) != 0) {
                admin_reply_error(r, 400, "invalid_argument", field, "%s", why);
                json_decref(o);
                return false;
            }
        } else if (strcmp(key, "dry_run") == 0 || strcmp(key, "repair") == 0) {
            ok = json_is_boolean(v);
            *(strcmp(key, "dry_run") == 0 ? dry : repair) = json_is_true(v);
        } else if (strcmp(key, "sample") == 0 || strcmp(key, "chunk") == 0) {
            bool is_sample = strcmp(key, "sample") == 0;
            json_int_t x = json_integer_value(v);
            ok = json_is_integer(v) && x >= (is_sample ? 0 : 1) &&
                 x <= (is_sample ? SAMPLE_MAX : CHUNK_MAX);
            *(is_sample ? sample : chunk) = (int)x;
        } else {
            admin_reply_error(r, 400, "invalid_argument", key, "%.64s: unknown key", key);
            json_decref(o);
            return false;
        }
        if (!ok) {
            admin_reply_error(r, 400, "invalid_argument", key, "%s: want %s", key,
                              strcmp(key, "sample") == 0  ? "an integer in 0..100"
                              : strcmp(key, "chunk") == 0 ? "an integer in 1..5000"
                                                          : "true or false");
            json_decref(o);
            return false;
        }
    }
    json_decref(o);
    if (f->status >= 0 && f->status != OUTBOX_FAILED) {
        admin_reply_error(r, 400, "invalid_argument", "status",
                          "status: a replay takes failed rows (dead letters) only");
        return false;
    }
    f->replayable = true;
    return true;
}

/* Marks f as a replay's: failed rows, none a repair copied already. */
static void
replay_rows_only(struct admin *a, struct admin_filter *f)
{
    f->replayable = true;
    f->not_repaired = admin_store_has_audit(a->store);
}

void
admin_replay(struct admin *a, const char *actor, const char *body, size_t len,
             admin_progress_fn progress, void *arg, struct admin_reply *r)
{
    struct admin_filter f;
    bool dry, repair;
    int sample, chunk, rc;
    int64_t count = 0, max_id = 0, id = 0, done = 0;

    if (!read_replay_body(body, len, &f, &dry, &repair, &sample, &chunk, r))
        return;
    replay_rows_only(a, &f);
    if (!dry && a->readonly) {
        admin_reply_error(r, 405, "read_only", NULL, "this handle is read-only: only dry_run");
        return;
    }
    if ((rc = admin_store_count(a->store, &f, &count, &max_id)) != 0) {
        admin_reply_store(a, r, rc);
        return;
    }
    json_t *filter = admin_filter_to_json(&f);
    if (dry) {
        struct outbox_row *rows = NULL;
        size_t n = 0;
        if (sample > 0 && (rc = admin_store_search(a->store, &f, 0, sample, &rows, &n)) != 0) {
            json_decref(filter);
            admin_reply_store(a, r, rc);
            return;
        }
        json_t *arr = json_array();
        for (size_t i = 0; i < n; i++)
            json_array_append_new(arr, admin_row_json(&rows[i]));
        outbox_rows_free(rows, n);
        admin_reply_ok(r, json_pack("{s:b, s:b, s:I, s:o, s:o}", "dry_run", true, "repair", repair,
                                    "count", (json_int_t)count, "filter", filter, "sample", arr));
        return;
    }
    char *fj = json_dumps(filter, JSON_COMPACT | JSON_SORT_KEYS);
    rc = admin_store_audit_begin(a->store, actor, repair, fj, max_id, clock_wall_ms(), &id);
    free(fj);
    if (rc == 0) {
        log_info("admin", repair ? "bulk repair started" : "bulk replay started",
                 "audit_id=%lld actor=%s rows=%lld", (long long)id, actor, (long long)count);
        rc = run_replay(a, id, &f, repair, chunk, count, progress, arg, &done);
    }
    if (rc != 0) {
        json_decref(filter);
        if (id > 0)
            log_warn("admin", "bulk replay interrupted; it resumes at the next start",
                     "audit_id=%lld done=%lld err=\"%s\"", (long long)id, (long long)done,
                     admin_store_errmsg(a->store));
        admin_reply_store(a, r, rc);
        return;
    }
    log_info("admin", repair ? "bulk repair done" : "bulk replay done",
             "audit_id=%lld actor=%s rows=%lld", (long long)id, actor, (long long)done);
    admin_reply_ok(r, json_pack("{s:I, s:b, s:I, s:o}", "audit_id", (json_int_t)id, "repair",
                                repair, "replayed", (json_int_t)done, "filter", filter));
}

int
admin_resume(struct admin *a)
{
    struct admin_audit *au = NULL;
    size_t n = 0;
    int finished = 0;

    if (a->readonly || admin_store_audit_list(a->store, 0, 1000, &au, &n) != 0)
        return 0;
    for (size_t i = 0; i < n; i++) {
        struct admin_filter f;
        const char *field;
        char why[256];
        int64_t done = 0;
        if (strcmp(au[i].state, "running") != 0)
            continue;
        json_t *fj = json_loads(au[i].filter ? au[i].filter : "{}", 0, NULL);
        int ok = admin_filter_from_json(&f, fj, &field, why, sizeof(why));
        json_decref(fj);
        if (ok != 0) {
            log_error("admin", "cannot resume a bulk replay: bad filter",
                      "audit_id=%lld err=\"%s\"", (long long)au[i].id, why);
            continue;
        }
        replay_rows_only(a, &f);
        bool repair = strcmp(au[i].action, "repair") == 0;
        log_info("admin", "resuming a bulk replay cut short", "audit_id=%lld actor=%s done=%lld",
                 (long long)au[i].id, au[i].actor, (long long)au[i].count);
        if (run_replay(a, au[i].id, &f, repair, CHUNK_DEFAULT, 0, NULL, NULL, &done) == 0) {
            log_info("admin", "bulk replay resumed and done", "audit_id=%lld rows=%lld",
                     (long long)au[i].id, (long long)(au[i].count + done));
            finished++;
        }
    }
    admin_audits_free(au, n);
    return finished;
}

/* ==== the audit log ==== */

static json_t *
audit_json(const struct admin_audit *x)
{
    json_t *filter = json_loads(x->filter ? x->filter : "{}", 0, NULL);

    return json_pack("{s:I, s:s, s:s, s:o, s:s, s:I, s:I, s:I, s:I, s:I}", "id", (json_int_t)x->id,
                     "actor", x->actor, "action", x->action, "filter",
                     filter ? filter : json_object(), "state", x->state, "count",
                     (json_int_t)x->count, "max_id", (json_int_t)x->max_id, "created_at_ms",
                     (json_int_t)x->created_at_ms, "updated_at_ms", (json_int_t)x->updated_at_ms,
                     "finished_at_ms", (json_int_t)x->finished_at_ms);
}

void
admin_audits(struct admin *a, admin_lookup_fn q, void *ctx, struct admin_reply *r)
{
    struct admin_audit *au = NULL;
    size_t n = 0;
    int64_t before, limit;
    int rc;

    if (!admin_query_int(q, ctx, "before", 0, INT64_MAX, 0, &before, r) ||
        !admin_query_int(q, ctx, "limit", 1, LIST_MAX, LIST_DEFAULT, &limit, r))
        return;
    if ((rc = admin_store_audit_list(a->store, before, (int)limit, &au, &n)) != 0) {
        admin_reply_store(a, r, rc);
        return;
    }
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, audit_json(&au[i]));
    json_t *o = json_pack("{s:o}", "audits", arr);
    json_object_set_new(o, "next_before",
                        n == (size_t)limit ? json_integer(au[n - 1].id) : json_null());
    admin_audits_free(au, n);
    admin_reply_ok(r, o);
}

void
admin_audit(struct admin *a, int64_t id, admin_lookup_fn q, void *ctx, struct admin_reply *r)
{
    struct admin_audit au;
    struct admin_audit_row *rows = NULL;
    size_t n = 0;
    int64_t after, limit;
    int rc;

    if (!admin_query_int(q, ctx, "after", 0, INT64_MAX, 0, &after, r) ||
        !admin_query_int(q, ctx, "limit", 1, 5000, 1000, &limit, r))
        return;
    if ((rc = admin_store_audit_get(a->store, id, &au)) != 0) {
        if (rc == ROOMD_ENOTFOUND)
            admin_reply_error(r, 404, "not_found", "id", "no audit entry %lld", (long long)id);
        else
            admin_reply_store(a, r, rc);
        return;
    }
    if ((rc = admin_store_audit_rows(a->store, id, after, (int)limit, &rows, &n)) != 0) {
        free(au.filter);
        admin_reply_store(a, r, rc);
        return;
    }
    json_t *o = audit_json(&au);
    json_t *ids = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_pack("{s:I, s:s}", "id", (json_int_t)rows[i].outbox_id, "event_id",
                              rows[i].event_id);
        if (rows[i].new_event_id[0])
            json_object_set_new(x, "new_event_id", json_string(rows[i].new_event_id));
        json_array_append_new(ids, x);
    }
    json_object_set_new(o, "rows", ids);
    json_object_set_new(o, "next_after",
                        n == (size_t)limit ? json_integer(rows[n - 1].outbox_id) : json_null());
    free(rows);
    free(au.filter);
    admin_reply_ok(r, o);
}
