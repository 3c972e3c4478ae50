/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_outbox_worker.c: the outbox worker (src/outbox/worker.c) and the
 * retention purge against a real SQLite store in a temp dir, with scriptable
 * test sinks (struct sink implementations that succeed, fail transiently or
 * permanently on demand): retry schedule within the jittered backoff bounds,
 * dead letter at max_retry_count, permanent errors, fenced completion,
 * reclaim after lock expiry, per-sink state, poison events with bounded log
 * lines, wake-up latency, full batches, several workers, deep claims split
 * into sink calls of batch_size (order, hold-back, kill -9 mid-claim), purge.
 */
#include "helpers.h"

#include "conf/conf.h"
#include "core/backoff.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/uuid.h"
#include "core/xmalloc.h"
#include "outbox/handoff.h"
#include "outbox/outbox.h"
#include "outbox/retention.h"
#include "publish/sink.h"
#include "room_events.pb-c.h"
#include "store/store.h"

#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* ==== fixture ==== */

struct fx {
    char *dir;
    char *log_path;
    struct conf *conf;
    struct store *store;
};

static struct fx fx;

static int
setup(void **state)
{
    char err[512];

    fx.dir = th_tmpdir();
    fx.log_path = xasprintf("%s/roomd.log", fx.dir);
    fx.conf = th_conf_sqlite(fx.dir);
    fx.conf->store.retention_delivered_ms = 0; /* tests that purge turn it on */
    fx.conf->store.retention_command_log_ms = 0;
    struct conf_outbox *ob = &fx.conf->outbox_worker;
    ob->workers = 1;
    ob->batch_size = 100;
    ob->poll_interval_ms = 50;
    ob->publish_timeout_ms = 1000;
    ob->lock_timeout_ms = 5000;
    ob->max_retry_count = 3;
    ob->initial_backoff_ms = 50;
    ob->max_backoff_ms = 100;
    log_close();
    assert_int_equal(log_open(fx.log_path, LOG_DEBUG), 0);
    assert_int_equal(store_open(&fx.store, &fx.conf->store, err, sizeof(err)), 0);
    return 0;
}

static int
teardown(void **state)
{
    store_close(fx.store);
    log_close();
    conf_free(fx.conf);
    char *cmd = xasprintf("rm -rf '%s'", fx.dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", fx.dir);
    free(cmd);
    free(fx.log_path);
    free(fx.dir);
    memset(&fx, 0, sizeof(fx));
    return 0;
}

/* ==== a scriptable sink ==== */

#define TSINK_MAX_CALLS 4096

struct tsink {
    struct sink super;
    pthread_mutex_t mu;
    int rc;              /* what publish returns once fail_first is used up */
    int fail_first;      /* the first n calls return ROOMD_ERETRY */
    int64_t delay_ms;    /* sleep inside publish (ignoring the deadline) */
    const char *message; /* err text on failure */
    int calls;
    int returned; /* calls that finished */
    int64_t call_wall_ms[TSINK_MAX_CALLS];
    char event_ids[TSINK_MAX_CALLS][37];
    bool closed;
    /* publish_batch (tsink_batch_new): one call per batch, each event
     * counted in calls as above */
    int batch_calls;
    int batch_sizes[TSINK_MAX_CALLS];
    int single_calls;     /* publish() calls */
    const char *perm_id;  /* this event_id answers ROOMD_EPERM */
    const char *retry_id; /* this one ROOMD_ERETRY */
    int limit_from;       /* calls [limit_from, limit_from + limit_n) answer ROOMD_ELIMIT */
    int limit_n;
    int with_json; /* events that came with their JSON */
    /* publish_start/finish (tsink_window_new): batches started, not finished */
    int in_air, max_in_air;
};

/* Records one event's call and returns its scripted outcome. Holds t->mu. */
static int
tsink_record(struct tsink *t, const struct outbox_event *ev)
{
    int k = t->calls++;

    if (k < TSINK_MAX_CALLS) {
        t->call_wall_ms[k] = clock_wall_ms();
        strlcpy_(t->event_ids[k], ev->row->event_id, 37);
    }
    if (t->perm_id != NULL && strcmp(ev->row->event_id, t->perm_id) == 0)
        return ROOMD_EPERM;
    if (t->retry_id != NULL && strcmp(ev->row->event_id, t->retry_id) == 0)
        return ROOMD_ERETRY;
    if (k >= t->limit_from && k < t->limit_from + t->limit_n)
        return ROOMD_ELIMIT; /* throttled: the peer's rate limit */
    return k < t->fail_first ? ROOMD_ERETRY : t->rc;
}

static int
tsink_publish(struct sink *s, const struct outbox_event *ev, int64_t deadline, char *err,
              size_t errlen)
{
    struct tsink *t = (struct tsink *)s;
    int rc;

    pthread_mutex_lock(&t->mu);
    t->single_calls++;
    rc = tsink_record(t, ev);
    int64_t delay = t->delay_ms;
    pthread_mutex_unlock(&t->mu);
    if (delay > 0)
        usleep((useconds_t)delay * 1000);
    if (rc != 0)
        snprintf(err, errlen, "%s", t->message ? t->message : "scripted failure");
    pthread_mutex_lock(&t->mu);
    t->returned++;
    pthread_mutex_unlock(&t->mu);
    return rc;
}

/* Counts one batch call of n events. Holds t->mu. */
static void
tsink_batch_call(struct tsink *t, size_t n)
{
    if (t->batch_calls < TSINK_MAX_CALLS)
        t->batch_sizes[t->batch_calls] = (int)n;
    t->batch_calls++;
}

/* Records and answers evs[0..n) into rcs/errs. Holds t->mu. */
static void
tsink_answer(struct tsink *t, const struct outbox_event *evs, size_t n, int *rcs, char *errs,
             size_t errlen)
{
    for (size_t i = 0; i < n; i++) {
        t->with_json += evs[i].json != NULL;
        rcs[i] = tsink_record(t, &evs[i]);
        snprintf(errs + i * errlen, errlen, "%s",
                 rcs[i] == 0             ? ""
                 : rcs[i] == ROOMD_EPERM ? "batch refused"
                                         : "batch busy");
    }
    t->returned += (int)n;
}

static void
tsink_publish_batch(struct sink *s, const struct outbox_event *evs, size_t n, int64_t deadline,
                    int *rcs, char *errs, size_t errlen)
{
    struct tsink *t = (struct tsink *)s;

    (void)deadline;
    pthread_mutex_lock(&t->mu);
    tsink_batch_call(t, n);
    tsink_answer(t, evs, n, rcs, errs, errlen);
    pthread_mutex_unlock(&t->mu);
}

/* A batch between tsink_publish_start and tsink_publish_finish. */
struct tflight {
    const struct outbox_event *evs;
    size_t n;
    int *rcs;
    char *errs;
    size_t errlen;
};

static void *
tsink_publish_start(struct sink *s, const struct outbox_event *evs, size_t n, int64_t deadline,
                    int *rcs, char *errs, size_t errlen)
{
    struct tsink *t = (struct tsink *)s;
    struct tflight *f = xcalloc(1, sizeof(*f));

    (void)deadline;
    *f = (struct tflight){evs, n, rcs, errs, errlen};
    pthread_mutex_lock(&t->mu);
    tsink_batch_call(t, n);
    if (++t->in_air > t->max_in_air)
        t->max_in_air = t->in_air;
    pthread_mutex_unlock(&t->mu);
    return f;
}

/* The answers come only now: the events must still be the worker's. */
static void
tsink_publish_finish(struct sink *s, void *handle)
{
    struct tsink *t = (struct tsink *)s;
    struct tflight *f = handle;

    pthread_mutex_lock(&t->mu);
    tsink_answer(t, f->evs, f->n, f->rcs, f->errs, f->errlen);
    t->in_air--;
    pthread_mutex_unlock(&t->mu);
    free(f);
}

static void
tsink_close(struct sink *s)
{
    ((struct tsink *)s)->closed = true;
}

static struct tsink *
tsink_new(const char *name, uint32_t bit, int rc)
{
    struct tsink *t = xcalloc(1, sizeof(*t));

    t->super.name = name;
    t->super.bit = bit;
    t->super.publish = tsink_publish;
    t->super.close = tsink_close;
    t->rc = rc;
    pthread_mutex_init(&t->mu, NULL);
    return t;
}

/* A sink offering publish_batch (its publish() stays for a fallback). */
static struct tsink *
tsink_batch_new(const char *name, uint32_t bit, int rc)
{
    struct tsink *t = tsink_new(name, bit, rc);

    t->super.publish_batch = tsink_publish_batch;
    t->super.no_json = true; /* as the bus sink */
    return t;
}

/* A batch sink that answers in two halves (publish_start/finish, as the
 * bus sink's asynchronous publish). */
static struct tsink *
tsink_window_new(const char *name, uint32_t bit, int rc)
{
    struct tsink *t = tsink_batch_new(name, bit, rc);

    t->super.publish_start = tsink_publish_start;
    t->super.publish_finish = tsink_publish_finish;
    return t;
}

static int
tsink_calls(struct tsink *t)
{
    pthread_mutex_lock(&t->mu);
    int n = t->calls;
    pthread_mutex_unlock(&t->mu);
    return n;
}

static int
tsink_returned(struct tsink *t)
{
    pthread_mutex_lock(&t->mu);
    int n = t->returned;
    pthread_mutex_unlock(&t->mu);
    return n;
}

static void
tsink_free(struct tsink *t)
{
    pthread_mutex_destroy(&t->mu);
    free(t);
}

/* ==== rows ==== */

static uint8_t *
gift_payload(size_t *len)
{
    Roomd__V1__RoomGiftSent g = ROOMD__V1__ROOM_GIFT_SENT__INIT;
    g.uid = 1;
    g.to_uid = 2;
    g.gift_id = "rose";
    g.count = 1;
    g.unit_price = 10;
    g.total = 10;
    *len = roomd__v1__room_gift_sent__get_packed_size(&g);
    uint8_t *b = xmalloc(*len);
    roomd__v1__room_gift_sent__pack(&g, b);
    return b;
}

/*
 * Commits one CreateRoom-like mutation of a new room carrying n events of
 * type with payload (a valid gift when payload is NULL). Event ids go to
 * ids[0..n).
 */
static void
insert_events(int n, const char *type, const uint8_t *payload, size_t plen, char (*ids)[37])
{
    static int seq;
    size_t glen;
    uint8_t *gift = gift_payload(&glen);
    struct outbox_new *ev = xcalloc((size_t)n, sizeof(*ev));
    struct mutation m;
    int64_t now = clock_wall_ms();

    memset(&m, 0, sizeof(m));
    seq++;
    snprintf(m.app_code, sizeof(m.app_code), "hyapp");
    snprintf(m.room_id, sizeof(m.room_id), "room-%d-%d", (int)getpid(), seq);
    snprintf(m.command_id, sizeof(m.command_id), "cmd-%d-%d", (int)getpid(), seq);
    m.command_type = "CreateRoom";
    m.request = "{}";
    m.response = "{}";
    m.version = 1;
    m.created_at_ms = now;
    m.create = true;
    m.meta = (struct room_meta){.owner_uid = 1,
                                .title = "t",
                                .status = "open",
                                .version = 1,
                                .rocket_status = "idle",
                                .rocket_id = "",
                                .created_at_ms = now,
                                .updated_at_ms = now};
    for (int i = 0; i < n; i++) {
        uuid_v7(now, ev[i].event_id);
        ev[i].event_type = type;
        ev[i].payload = payload ? (uint8_t *)payload : gift;
        ev[i].payload_len = payload ? plen : glen;
        if (ids != NULL)
            memcpy(ids[i], ev[i].event_id, 37);
    }
    m.events = ev;
    m.nevents = (size_t)n;
    m.snapshots_keep = 3;
    struct mutation *mp = &m;
    assert_int_equal(store_save(fx.store, &mp, 1), 0);
    assert_int_equal(m.rc, 0);
    free(ev);
    free(gift);
}

static void
insert_one(char id[37])
{
    char ids[1][37];

    insert_events(1, "RoomGiftSent", NULL, 0, ids);
    memcpy(id, ids[0], 37);
}

/* Reads a row; the caller frees with row_clear. */
static void
get_row(const char *event_id, struct outbox_row *r)
{
    memset(r, 0, sizeof(*r));
    assert_int_equal(store_outbox_get(fx.store, event_id, r), 0);
}

static void
row_clear(struct outbox_row *r)
{
    free(r->payload);
    free(r->last_error);
    memset(r, 0, sizeof(*r));
}

static enum outbox_status
row_status(const char *event_id)
{
    struct outbox_row r;

    get_row(event_id, &r);
    enum outbox_status s = r.status;
    row_clear(&r);
    return s;
}

/* Polls until status(event_id) == want or timeout_ms; returns whether it got there. */
static bool
wait_status(const char *event_id, enum outbox_status want, int64_t timeout_ms)
{
    int64_t end = clock_mono_ms() + timeout_ms;

    while (clock_mono_ms() < end) {
        if (row_status(event_id) == want)
            return true;
        usleep(5000);
    }
    return row_status(event_id) == want;
}

static bool
wait_calls(struct tsink *t, int n, int64_t timeout_ms)
{
    int64_t end = clock_mono_ms() + timeout_ms;

    while (tsink_calls(t) < n && clock_mono_ms() < end)
        usleep(2000);
    return tsink_calls(t) >= n;
}

/* Lines of the log file containing needle. */
static int
log_lines_with(const char *needle)
{
    FILE *f = fopen(fx.log_path, "r");
    char line[4096];
    int n = 0;

    if (f == NULL)
        return 0;
    while (fgets(line, sizeof(line), f) != NULL)
        if (strstr(line, needle) != NULL)
            n++;
    fclose(f);
    return n;
}

static struct outbox *
open_outbox(struct tsink **sinks, size_t n)
{
    struct sink *s[8];
    struct outbox *ob = NULL;

    for (size_t i = 0; i < n; i++)
        s[i] = &sinks[i]->super;
    assert_int_equal(
        outbox_open(&ob, &fx.conf->outbox_worker, &fx.conf->store, fx.store, "node-a", s, n), 0);
    return ob;
}

/* ==== tests ==== */

/* Transient failures: retry_count counts attempts, next_retry_at_ms lies in
 * the equal-jitter window [d/2, d] after the attempt, attempts never come
 * early, and at max_retry_count the row is failed. */
static void
test_retry_schedule(void **state)
{
    struct conf_outbox *c = &fx.conf->outbox_worker;
    c->max_retry_count = 4;
    c->initial_backoff_ms = 400; /* >= 200 ms to observe each retryable state */
    c->max_backoff_ms = 800;
    c->poll_interval_ms = 20;
    struct tsink *t = tsink_new("flaky", SINK_BIT_TIM, ROOMD_ERETRY);
    t->message = "peer said 503";
    char id[37];
    insert_one(id);
    struct outbox *ob = open_outbox(&t, 1);

    int64_t prev_next = 0;
    for (int attempt = 1; attempt <= 3; attempt++) {
        assert_true(wait_calls(t, attempt, 5000));
        int64_t call_ms = t->call_wall_ms[attempt - 1];
        if (attempt > 1)
            assert_true(call_ms >= prev_next); /* never before next_retry_at_ms */
        /* wait until the attempt's outcome is stored */
        struct outbox_row r;
        int64_t end = clock_mono_ms() + 3000;
        for (;;) {
            get_row(id, &r);
            if (r.retry_count == attempt || clock_mono_ms() > end)
                break;
            row_clear(&r);
            usleep(2000);
        }
        int64_t seen_ms = clock_wall_ms();
        assert_int_equal(r.retry_count, attempt);
        assert_int_equal(r.status, OUTBOX_RETRYABLE);
        int64_t d = backoff_ceiling_ms(attempt, 400, 800);
        assert_true(r.next_retry_at_ms >= call_ms + d / 2);
        assert_true(r.next_retry_at_ms <= seen_ms + d);
        assert_non_null(r.last_error);
        assert_non_null(strstr(r.last_error, "flaky: peer said 503"));
        prev_next = r.next_retry_at_ms;
        row_clear(&r);
    }
    assert_true(wait_status(id, OUTBOX_FAILED, 5000));
    assert_int_equal(tsink_calls(t), 4);
    assert_true(t->call_wall_ms[3] >= prev_next);
    struct outbox_row r;
    get_row(id, &r);
    assert_int_equal(r.retry_count, 4);
    row_clear(&r);
    outbox_close(ob);
    assert_true(t->closed);
    tsink_free(t);
}

/* A dead letter is never retried automatically: not by the worker, not by
 * any claim however late. */
static void
test_dead_letter_never_reclaimed(void **state)
{
    struct conf_outbox *c = &fx.conf->outbox_worker;
    c->max_retry_count = 2;
    c->initial_backoff_ms = 10;
    c->max_backoff_ms = 20;
    c->poll_interval_ms = 10;
    struct tsink *t = tsink_new("down", SINK_BIT_TIM, ROOMD_ERETRY);
    char id[37];
    insert_one(id);
    struct outbox *ob = open_outbox(&t, 1);

    assert_true(wait_status(id, OUTBOX_FAILED, 5000));
    usleep(300 * 1000); /* 30 poll intervals */
    assert_int_equal(tsink_calls(t), 2);
    outbox_close(ob);

    struct outbox_row *rows = NULL;
    size_t n = 99;
    int64_t later = clock_wall_ms() + 86400000LL * 365;
    assert_int_equal(store_outbox_claim(fx.store, later, later + 1000, "x/w0", 100, &rows, &n), 0);
    assert_int_equal(n, 0);
    outbox_rows_free(rows, n);
    assert_int_equal(row_status(id), OUTBOX_FAILED);
    tsink_free(t);
}

/* ROOMD_EPERM from a sink fails the row on its first attempt. */
static void
test_permanent_error_fails_at_once(void **state)
{
    fx.conf->outbox_worker.max_retry_count = 10;
    struct tsink *t = tsink_new("im", SINK_BIT_TIM, ROOMD_EPERM);
    t->message = "ErrorCode 10004 invalid parameter";
    char id[37];
    insert_one(id);
    struct outbox *ob = open_outbox(&t, 1);

    assert_true(wait_status(id, OUTBOX_FAILED, 5000));
    usleep(200 * 1000);
    assert_int_equal(tsink_calls(t), 1);
    struct outbox_row r;
    get_row(id, &r);
    assert_int_equal(r.retry_count, 1);
    assert_non_null(r.last_error);
    assert_non_null(strstr(r.last_error, "im: ErrorCode 10004"));
    row_clear(&r);
    assert_int_equal(log_lines_with(id), 1);
    outbox_close(ob);
    tsink_free(t);
}

/* A worker whose lock expired mid-publish loses the row to a second claimer;
 * its completion is refused (ESTALE, logged) and does not overwrite. */
static void
test_fenced_completion(void **state)
{
    struct conf_outbox *c = &fx.conf->outbox_worker;
    c->lock_timeout_ms = 300;
    c->publish_timeout_ms = 100;
    struct tsink *t = tsink_new("slow", SINK_BIT_TIM, ROOMD_ERETRY);
    t->delay_ms = 900; /* misbehaves: ignores its deadline */
    char id[37];
    insert_one(id);
    struct outbox *ob = open_outbox(&t, 1);

    assert_true(wait_calls(t, 1, 5000));
    struct outbox_row r;
    get_row(id, &r);
    assert_int_equal(r.status, OUTBOX_DELIVERING);
    assert_string_equal(r.locked_by, "node-a/w0");
    int64_t lock_until = r.lock_until_ms;
    row_clear(&r);
    while (clock_wall_ms() <= lock_until)
        usleep(5000);

    struct outbox_row *rows = NULL;
    size_t n = 0;
    int64_t now = clock_wall_ms();
    assert_int_equal(store_outbox_claim(fx.store, now, now + 60000, "other/w0", 10, &rows, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(rows[0].event_id, id);
    struct outbox_result res = {.id = rows[0].id,
                                .locked_by = "other/w0",
                                .status = OUTBOX_DELIVERED,
                                .sinks_done = SINK_BIT_TIM,
                                .now_ms = clock_wall_ms()};
    assert_int_equal(store_outbox_complete(fx.store, &res, 1), 0);
    assert_int_equal(res.rc, 0);
    outbox_rows_free(rows, n);

    /* the first worker's sink returns a failure; its completion is fenced */
    int64_t end = clock_mono_ms() + 5000;
    while (tsink_returned(t) == 0 && clock_mono_ms() < end)
        usleep(5000);
    while (log_lines_with("completion refused") == 0 && clock_mono_ms() < end)
        usleep(5000);
    assert_int_equal(log_lines_with("completion refused"), 1);
    get_row(id, &r);
    assert_int_equal(r.status, OUTBOX_DELIVERED);
    assert_int_equal(r.retry_count, 0);
    assert_null(r.last_error);
    row_clear(&r);
    outbox_close(ob);
    assert_int_equal(tsink_calls(t), 1);
    tsink_free(t);
}

/* Rows claimed by a process that died are delivered after their lock expires,
 * not before. */
static void
test_reclaim_after_lock_expiry(void **state)
{
    char id[37];
    insert_one(id);
    struct outbox_row *rows = NULL;
    size_t n = 0;
    int64_t now = clock_wall_ms();
    int64_t lock_until = now + 400;
    assert_int_equal(store_outbox_claim(fx.store, now, lock_until, "crashed/w0", 10, &rows, &n), 0);
    assert_int_equal(n, 1);
    outbox_rows_free(rows, n);

    fx.conf->outbox_worker.poll_interval_ms = 20;
    struct tsink *t = tsink_new("ok", SINK_BIT_TIM, 0);
    struct outbox *ob = open_outbox(&t, 1);
    assert_true(wait_status(id, OUTBOX_DELIVERED, 5000));
    assert_int_equal(tsink_calls(t), 1);
    assert_true(t->call_wall_ms[0] >= lock_until);
    outbox_close(ob);
    tsink_free(t);
}

/* A sink that succeeded is recorded in sinks_done and not called again when
 * the row is retried for another sink. */
static void
test_per_sink_state(void **state)
{
    struct tsink *ts[2];
    ts[0] = tsink_new("a", SINK_BIT_TIM, 0);
    ts[1] = tsink_new("b", SINK_BIT_ACTIVITY, 0);
    ts[1]->fail_first = 2;
    fx.conf->outbox_worker.max_retry_count = 5;
    fx.conf->outbox_worker.initial_backoff_ms = 400;
    fx.conf->outbox_worker.max_backoff_ms = 400;
    char id[37];
    insert_one(id);
    struct outbox *ob = open_outbox(ts, 2);

    assert_true(wait_calls(ts[1], 1, 5000));
    struct outbox_row r;
    int64_t end = clock_mono_ms() + 3000;
    do {
        get_row(id, &r);
        if (r.status == OUTBOX_RETRYABLE)
            break;
        row_clear(&r);
        usleep(2000);
    } while (clock_mono_ms() < end);
    assert_int_equal(r.status, OUTBOX_RETRYABLE);
    assert_int_equal(r.sinks_done, SINK_BIT_TIM);
    assert_non_null(strstr(r.last_error, "b: "));
    row_clear(&r);

    assert_true(wait_status(id, OUTBOX_DELIVERED, 5000));
    assert_int_equal(tsink_calls(ts[0]), 1);
    assert_int_equal(tsink_calls(ts[1]), 3);
    get_row(id, &r);
    assert_int_equal(r.sinks_done, SINK_BIT_TIM | SINK_BIT_ACTIVITY);
    assert_int_equal(r.retry_count, 2);
    row_clear(&r);
    outbox_close(ob);
    tsink_free(ts[0]);
    tsink_free(ts[1]);
}

/* Undecodable payloads and unknown types are dead letters at once, with one
 * log line each however many polls follow; good rows of the same batch go on. */
static void
test_poison_event(void **state)
{
    static const uint8_t garbage[] = {0x08}; /* truncated varint */
    fx.conf->outbox_worker.poll_interval_ms = 10;
    fx.conf->outbox_worker.max_retry_count = 10;
    struct tsink *t = tsink_new("ok", SINK_BIT_TIM, 0);
    char bad[1][37], unknown[1][37], good[1][37];
    insert_events(1, "RoomGiftSent", garbage, sizeof(garbage), bad);
    insert_events(1, "RoomNoSuchThing", NULL, 0, unknown);
    insert_events(1, "RoomGiftSent", NULL, 0, good);
    struct outbox *ob = open_outbox(&t, 1);

    assert_true(wait_status(bad[0], OUTBOX_FAILED, 5000));
    assert_true(wait_status(unknown[0], OUTBOX_FAILED, 5000));
    assert_true(wait_status(good[0], OUTBOX_DELIVERED, 5000));
    usleep(500 * 1000); /* ~50 polls */
    assert_int_equal(log_lines_with(bad[0]), 1);
    assert_int_equal(log_lines_with(unknown[0]), 1);
    assert_int_equal(log_lines_with(good[0]), 0);
    assert_int_equal(tsink_calls(t), 1);
    struct outbox_row r;
    get_row(bad[0], &r);
    assert_non_null(strstr(r.last_error, "poison"));
    row_clear(&r);
    outbox_close(ob);
    tsink_free(t);
}

/* An event that keeps failing (the seed's poison event) logs one line per
 * attempt, max_retry_count lines in all, then nothing more. */
static void
test_failing_event_bounded_logs(void **state)
{
    struct conf_outbox *c = &fx.conf->outbox_worker;
    c->max_retry_count = 3;
    c->initial_backoff_ms = 20;
    c->max_backoff_ms = 40;
    c->poll_interval_ms = 10;
    struct tsink *t = tsink_new("im", SINK_BIT_TIM, ROOMD_ERETRY);
    char id[37];
    insert_one(id);
    struct outbox *ob = open_outbox(&t, 1);

    assert_true(wait_status(id, OUTBOX_FAILED, 5000));
    usleep(500 * 1000);
    assert_int_equal(tsink_calls(t), 3);
    assert_int_equal(log_lines_with(id), 3);
    assert_int_equal(log_lines_with("dead letter"), 1);
    outbox_close(ob);
    tsink_free(t);
}

/* Woken right after a commit: delivery does not wait for poll_interval (10 s
 * here), also when the wake-up arrives while the worker is busy. Closing does
 * not wait for the poll either. */
static void
test_wake_latency(void **state)
{
    fx.conf->outbox_worker.poll_interval_ms = 10000;
    struct tsink *t = tsink_new("ok", SINK_BIT_TIM, 0);
    struct outbox *ob = open_outbox(&t, 1);
    usleep(300 * 1000); /* the start-up claim found nothing; now idle */

    char id[37];
    insert_one(id);
    int64_t t0 = clock_mono_ms();
    outbox_wake(ob);
    assert_true(wait_calls(t, 1, 3000));
    int64_t latency = clock_mono_ms() - t0;
    assert_true(wait_status(id, OUTBOX_DELIVERED, 3000));
    fprintf(stderr, "# commit -> publish latency after outbox_wake: %lld ms\n", (long long)latency);
    assert_true(latency < 1000);

    /* a wake-up while the only worker is busy is not lost */
    t->delay_ms = 300;
    char id2[37], id3[37];
    insert_one(id2);
    outbox_wake(ob);
    assert_true(wait_calls(t, 2, 3000));
    insert_one(id3); /* the worker is inside publish now */
    outbox_wake(ob);
    t0 = clock_mono_ms();
    assert_true(wait_status(id3, OUTBOX_DELIVERED, 3000));
    assert_true(clock_mono_ms() - t0 < 2000);
    assert_int_equal(row_status(id2), OUTBOX_DELIVERED);

    t0 = clock_mono_ms();
    outbox_close(ob);
    assert_true(clock_mono_ms() - t0 < 2000);
    tsink_free(t);
}

/* A full batch is followed by another claim at once (no poll wait). */
static void
test_full_batches_drain(void **state)
{
    fx.conf->outbox_worker.poll_interval_ms = 10000;
    fx.conf->outbox_worker.batch_size = 5;
    char ids[23][37];
    insert_events(23, "RoomGiftSent", NULL, 0, ids);
    struct tsink *t = tsink_new("ok", SINK_BIT_TIM, 0);
    struct outbox *ob = open_outbox(&t, 1);

    for (int i = 0; i < 23; i++)
        assert_true(wait_status(ids[i], OUTBOX_DELIVERED, 3000));
    assert_int_equal(tsink_calls(t), 23);
    outbox_close(ob);
    tsink_free(t);
}

/* outbox_worker.ordering per_room: a room's events reach the sink in commit
 * order across retries. The second of five keeps failing: the later three
 * are not sent while it is retried (held, no attempt counted), and go on in
 * order once it is failed (poison policy). */
static void
test_per_room_order_across_retries(void **state)
{
    struct conf_outbox *c = &fx.conf->outbox_worker;
    c->ordering = ORDERING_PER_ROOM;
    c->workers = 2;
    struct tsink *t = tsink_new("tim", SINK_BIT_TIM, 0);
    char ids[5][37];
    insert_events(5, "RoomGiftSent", NULL, 0, ids);
    t->retry_id = ids[1];
    struct outbox *ob = open_outbox(&t, 1);

    struct outbox_stats st;

    assert_true(wait_status(ids[4], OUTBOX_DELIVERED, 5000));
    outbox_stats(ob, &st);
    outbox_close(ob);
    assert_int_equal(row_status(ids[1]), OUTBOX_FAILED);
    assert_int_equal(st.order_failed, 1); /* counted: roomd_outbox_order_failed_total */
    assert_true(st.order_held >= 3);
    /* e0, then e1 max_retry_count times, then e2 e3 e4 */
    assert_int_equal(t->calls, 1 + c->max_retry_count + 3);
    assert_string_equal(t->event_ids[0], ids[0]);
    for (int k = 1; k <= c->max_retry_count; k++)
        assert_string_equal(t->event_ids[k], ids[1]);
    for (int k = 0; k < 3; k++)
        assert_string_equal(t->event_ids[1 + c->max_retry_count + k], ids[2 + k]);
    for (int k = 2; k < 5; k++) {
        struct outbox_row r;

        get_row(ids[k], &r);
        assert_int_equal(r.retry_count, 0); /* held, never an attempt */
        row_clear(&r);
    }
    tsink_free(t);
}

/* ordering per_room is per sink (issue 26, dual mode): IM ("tim", row by
 * row) answering "not now" for e1 holds the room's later events for IM
 * only; the broker ("bus", a batch sink) gets all five at once, in order,
 * while e1 is still retried. IM still sees e0, e1 x max_retry_count, then
 * e2 e3 e4, and the held rows never count an attempt. */
static void
test_per_room_order_per_sink(void **state)
{
    struct conf_outbox *c = &fx.conf->outbox_worker;
    c->ordering = ORDERING_PER_ROOM;
    c->workers = 2;
    c->max_retry_count = 4;
    c->initial_backoff_ms = 300;
    c->max_backoff_ms = 400;
    struct tsink *sinks[2] = {tsink_new("tim", SINK_BIT_TIM, 0),
                              tsink_window_new("bus", SINK_BIT_BUS, 0)};
    char ids[5][37];
    insert_events(5, "RoomGiftSent", NULL, 0, ids);
    sinks[0]->retry_id = ids[1];
    struct outbox *ob = open_outbox(sinks, 2);

    assert_true(wait_calls(sinks[1], 5, 5000));
    struct outbox_row r;
    get_row(ids[1], &r);
    assert_true(r.status != OUTBOX_FAILED); /* the broker did not wait for IM's retries */
    assert_true(r.retry_count < c->max_retry_count);
    row_clear(&r);
    assert_true(wait_status(ids[4], OUTBOX_DELIVERED, 10000));
    outbox_close(ob);
    assert_int_equal(row_status(ids[1]), OUTBOX_FAILED);
    assert_int_equal(sinks[1]->calls, 5); /* the broker: each once, in order */
    for (int k = 0; k < 5; k++)
        assert_string_equal(sinks[1]->event_ids[k], ids[k]);
    assert_int_equal(sinks[0]->calls, 1 + c->max_retry_count + 3);
    assert_string_equal(sinks[0]->event_ids[0], ids[0]);
    for (int k = 1; k <= c->max_retry_count; k++)
        assert_string_equal(sinks[0]->event_ids[k], ids[1]);
    for (int k = 0; k < 3; k++)
        assert_string_equal(sinks[0]->event_ids[1 + c->max_retry_count + k], ids[2 + k]);
    for (int k = 0; k < 5; k++) {
        get_row(ids[k], &r);
        assert_true(r.sinks_done & SINK_BIT_BUS);
        if (k >= 2)
            assert_int_equal(r.retry_count, 0); /* held for IM, never an attempt */
        row_clear(&r);
    }
    tsink_free(sinks[0]);
    tsink_free(sinks[1]);
}

/* The same with ordering none: the later events do not wait. */
static void
test_no_order_does_not_wait(void **state)
{
    struct conf_outbox *c = &fx.conf->outbox_worker;
    c->ordering = ORDERING_NONE;
    struct tsink *t = tsink_new("tim", SINK_BIT_TIM, 0);
    char ids[3][37];
    insert_events(3, "RoomGiftSent", NULL, 0, ids);
    t->retry_id = ids[0];
    struct outbox *ob = open_outbox(&t, 1);

    assert_true(wait_status(ids[2], OUTBOX_DELIVERED, 5000));
    assert_true(row_status(ids[0]) != OUTBOX_DELIVERED);
    outbox_close(ob);
    tsink_free(t);
}

/* outbox_worker.handoff_queue sizes the hand-off queue: 0 turns it off, n
 * admits n rows (reserved + queued), -1 is max(1024, 4 x workers x batch). */
static void
test_handoff_queue_conf(void **state)
{
    static const int sizes[] = {0, 3, -1};
    struct conf_outbox *c = &fx.conf->outbox_worker;
    c->workers = 2;
    c->batch_size = 100;
    for (int i = 0; i < 3; i++) {
        size_t cap = sizes[i] >= 0 ? (size_t)sizes[i] : 1024;
        struct tsink *t = tsink_new("ok", SINK_BIT_TIM, 0);

        c->handoff_queue = sizes[i];
        struct outbox *ob = open_outbox(&t, 1);
        struct mutation all = {.nevents = cap}, one = {.nevents = 1};
        if (cap > 0)
            assert_true(outbox_handoff_begin(ob, &all));
        assert_false(outbox_handoff_begin(ob, &one));
        assert_null(one.locked_by);
        outbox_handoff_end(ob, &all, ROOMD_EUNAVAIL); /* not committed: places given back */
        if (cap > 0)
            assert_true(outbox_handoff_begin(ob, &all));
        outbox_handoff_end(ob, &all, ROOMD_EUNAVAIL);
        outbox_close(ob);
        tsink_free(t);
    }
}

/* Several workers claiming at once deliver every row exactly once. */
static void
test_workers_deliver_once(void **state)
{
    enum { N = 300 };
    fx.conf->outbox_worker.workers = 4;
    fx.conf->outbox_worker.batch_size = 7;
    fx.conf->outbox_worker.poll_interval_ms = 20;
    struct tsink *t = tsink_new("ok", SINK_BIT_TIM, 0);
    struct outbox *ob = open_outbox(&t, 1);
    char(*ids)[37] = xcalloc(N, 37);
    for (int i = 0; i < N; i += 10) {
        insert_events(10, "RoomUserJoined", NULL, 0, &ids[i]);
        outbox_wake(ob);
    }
    for (int i = 0; i < N; i++)
        assert_true(wait_status(ids[i], OUTBOX_DELIVERED, 10000));
    outbox_close(ob);
    assert_int_equal(t->calls, N);
    for (int i = 0; i < N; i++) {
        int seen = 0;
        for (int k = 0; k < t->calls; k++)
            seen += strcmp(t->event_ids[k], ids[i]) == 0;
        assert_int_equal(seen, 1);
    }
    free(ids);
    tsink_free(t);
}

/* A sink offering publish_batch is called once per claimed batch with the
 * rows that need it, never publish() per row. */
static void
test_batch_sink_one_call_per_batch(void **state)
{
    fx.conf->outbox_worker.poll_interval_ms = 10000;
    fx.conf->outbox_worker.batch_size = 10;
    char ids[23][37];
    insert_events(23, "RoomGiftSent", NULL, 0, ids);
    struct tsink *t = tsink_batch_new("bus", SINK_BIT_BUS, 0);
    struct outbox *ob = open_outbox(&t, 1);

    for (int i = 0; i < 23; i++)
        assert_true(wait_status(ids[i], OUTBOX_DELIVERED, 3000));
    outbox_close(ob);
    assert_int_equal(t->single_calls, 0);
    assert_int_equal(t->calls, 23);
    assert_int_equal(t->with_json, 0);   /* no sink reads the JSON: not built */
    assert_int_equal(t->batch_calls, 3); /* claims of 10, 10, 3 */
    int sum = 0;
    for (int i = 0; i < t->batch_calls; i++) {
        assert_true(t->batch_sizes[i] <= 10);
        sum += t->batch_sizes[i];
    }
    assert_int_equal(sum, 23);
    struct outbox_row r;
    get_row(ids[22], &r);
    assert_int_equal(r.sinks_done, SINK_BIT_BUS);
    assert_int_equal(r.retry_count, 0);
    row_clear(&r);
    tsink_free(t);
}

/*
 * The window of outstanding answers across batches: one worker starts batch
 * k+1 before it collects k's answers (two batches in the air at once), every
 * row is published once, and the outcomes that arrive in the second half
 * are the rows' (a transient failure: retryable, then delivered).
 */
static void
test_batch_sink_window(void **state)
{
    /* 23 rows of one room, each on its own (per_room would hold 8.. behind 7) */
    fx.conf->outbox_worker.ordering = ORDERING_NONE;
    fx.conf->outbox_worker.poll_interval_ms = 10000;
    fx.conf->outbox_worker.batch_size = 5;
    fx.conf->outbox_worker.initial_backoff_ms = 2000; /* retryable for >= 1 s */
    fx.conf->outbox_worker.max_backoff_ms = 2000;
    char ids[23][37];
    insert_events(23, "RoomGiftSent", NULL, 0, ids);
    struct tsink *t = tsink_window_new("bus", SINK_BIT_BUS, 0);
    t->retry_id = ids[7];
    struct outbox *ob = open_outbox(&t, 1);

    for (int i = 0; i < 23; i++)
        assert_true(wait_status(ids[i], i == 7 ? OUTBOX_RETRYABLE : OUTBOX_DELIVERED, 3000));
    outbox_close(ob);
    struct outbox_row r;
    get_row(ids[7], &r);
    assert_int_equal(r.retry_count, 1);
    assert_non_null(strstr(r.last_error, "batch busy"));
    row_clear(&r);
    assert_int_equal(t->in_air, 0);  /* every start finished */
    assert_true(t->max_in_air >= 2); /* k+1 published while k was in the air */
    assert_int_equal(t->single_calls, 0);
    assert_int_equal(t->calls, 23);
    assert_int_equal(t->batch_calls, 5); /* 5, 5, 5, 5, 3 */
    tsink_free(t);
}

/*
 * Per-row outcomes with a batch sink are those of calling the sinks row by
 * row (dual mode: a direct sink, then the batch sink, then a per-row sink):
 * a row the direct sink refuses for good never reaches the batch sink; a row
 * the batch sink refuses fails; a row it fails transiently is retryable with
 * the other sinks in sinks_done, and its retry calls only the batch sink.
 */
static void
test_batch_sink_row_outcomes(void **state)
{
    struct conf_outbox *c = &fx.conf->outbox_worker;
    c->poll_interval_ms = 20;
    c->max_retry_count = 5;
    c->initial_backoff_ms = 300;
    c->max_backoff_ms = 300;
    c->ordering = ORDERING_NONE; /* four rows of one room, each on its own */
    char ids[4][37];             /* ok, direct refuses, batch refuses, batch busy once */
    insert_events(4, "RoomGiftSent", NULL, 0, ids);
    struct tsink *ts[3];
    ts[0] = tsink_new("direct", SINK_BIT_TIM, 0);
    ts[0]->perm_id = ids[1];
    ts[1] = tsink_batch_new("bus", SINK_BIT_BUS, 0);
    ts[1]->perm_id = ids[2];
    ts[1]->retry_id = ids[3];
    ts[2] = tsink_new("after", SINK_BIT_ROCKET, 0);
    struct outbox *ob = open_outbox(ts, 3);

    assert_true(wait_status(ids[0], OUTBOX_DELIVERED, 3000));
    assert_true(wait_status(ids[1], OUTBOX_FAILED, 3000));
    assert_true(wait_status(ids[2], OUTBOX_FAILED, 3000));
    struct outbox_row r;
    int64_t end = clock_mono_ms() + 3000;
    do {
        get_row(ids[3], &r);
        if (r.status == OUTBOX_RETRYABLE)
            break;
        row_clear(&r);
        usleep(2000);
    } while (clock_mono_ms() < end);
    assert_int_equal(r.status, OUTBOX_RETRYABLE);
    assert_int_equal(r.sinks_done, SINK_BIT_TIM | SINK_BIT_ROCKET); /* a transient failure
                                                                       does not stop the rest */
    assert_int_equal(r.retry_count, 1);
    assert_non_null(strstr(r.last_error, "bus: batch busy"));
    row_clear(&r);
    get_row(ids[1], &r);
    /* a sink's permanent refusal fails that sink only: the others still deliver (issue 26) */
    assert_int_equal(r.sinks_done, SINK_BIT_BUS | SINK_BIT_ROCKET);
    assert_int_equal(r.retry_count, 1);
    assert_non_null(strstr(r.last_error, "direct: scripted failure"));
    row_clear(&r);
    get_row(ids[2], &r);
    assert_int_equal(r.sinks_done, SINK_BIT_TIM | SINK_BIT_ROCKET);
    assert_non_null(strstr(r.last_error, "bus: batch refused"));
    row_clear(&r);
    get_row(ids[0], &r);
    assert_int_equal(r.sinks_done, SINK_BIT_TIM | SINK_BIT_BUS | SINK_BIT_ROCKET);
    row_clear(&r);

    pthread_mutex_lock(&ts[1]->mu);
    ts[1]->retry_id = NULL;
    pthread_mutex_unlock(&ts[1]->mu);
    assert_true(wait_status(ids[3], OUTBOX_DELIVERED, 3000));
    outbox_close(ob);
    get_row(ids[3], &r);
    assert_int_equal(r.sinks_done, SINK_BIT_TIM | SINK_BIT_BUS | SINK_BIT_ROCKET);
    assert_int_equal(r.retry_count, 1);
    row_clear(&r);
    assert_int_equal(ts[0]->calls, 4); /* once per row, not again on the retry */
    assert_int_equal(ts[1]->single_calls, 0);
    assert_int_equal(ts[1]->calls, 4 + 1); /* every id (1 too: refused by direct only); 3 again */
    assert_int_equal(ts[1]->batch_calls, 2);
    assert_int_equal(ts[1]->with_json, 5); /* the direct sink reads it: built */
    assert_int_equal(ts[1]->batch_sizes[0], 4);
    assert_int_equal(ts[1]->batch_sizes[1], 1);
    assert_int_equal(ts[2]->calls, 4); /* ids 0, 1, 2 (each refused by another sink) and 3 */
    for (int i = 0; i < 3; i++)
        tsink_free(ts[i]);
}

/* Where event_id is among t's calls from `from` on, or -1. */
static int
call_index(struct tsink *t, const char *event_id, int from)
{
    for (int k = from; k < t->calls && k < TSINK_MAX_CALLS; k++)
        if (strcmp(t->event_ids[k], event_id) == 0)
            return k;
    return -1;
}

/* Every batch call of t got at most max events; returns their sum. */
static int
batch_calls_within(struct tsink *t, int max)
{
    int sum = 0;

    for (int i = 0; i < t->batch_calls && i < TSINK_MAX_CALLS; i++) {
        assert_true(t->batch_sizes[i] >= 1);
        assert_true(t->batch_sizes[i] <= max);
        sum += t->batch_sizes[i];
    }
    return sum;
}

/*
 * A deep backlog: after a full claim the next ones take claim_batches
 * batches (10, then 30, 30, 25 rows: 4-5 claims, not 10), yet no sink call
 * gets more than batch_size rows; every row once, each room in order.
 */
static void
test_deep_claim_split(void **state)
{
    enum { ROOMS = 19, PER = 5, N = ROOMS * PER };
    struct conf_outbox *c = &fx.conf->outbox_worker;
    c->poll_interval_ms = 10000;
    c->batch_size = 10;
    c->claim_batches = 3;
    char ids[N][37];
    for (int r = 0; r < ROOMS; r++)
        insert_events(PER, "RoomGiftSent", NULL, 0, &ids[r * PER]);
    struct tsink *t = tsink_window_new("bus", SINK_BIT_BUS, 0);
    struct outbox *ob = open_outbox(&t, 1);
    struct outbox_stats st;

    for (int i = 0; i < N; i++)
        assert_true(wait_status(ids[i], OUTBOX_DELIVERED, 5000));
    outbox_stats(ob, &st);
    outbox_close(ob);
    assert_int_equal(t->single_calls, 0);
    assert_int_equal(t->calls, N);
    assert_int_equal(batch_calls_within(t, 10), N);
    assert_true(t->batch_calls >= N / 10);
    assert_int_equal(st.claimed_rows, N);
    print_message("deep claims: %llu claims, %d sink calls for %d rows\n",
                  (unsigned long long)st.claims, t->batch_calls, N);
    assert_true(st.claims <= 6); /* batch_size alone: 10 claims or more */
    for (int i = 0; i < N; i++) {
        int k = call_index(t, ids[i], 0);
        assert_true(k >= 0);
        assert_int_equal(call_index(t, ids[i], k + 1), -1); /* once */
        if (i % PER > 0)
            assert_true(k > call_index(t, ids[i - 1], 0)); /* after its room's previous */
    }
    tsink_free(t);
}

/*
 * Throttled (sink.h ROOMD_ELIMIT, the peer's rate limit) starting in the
 * middle of a batch: six rows of six rooms, the batch sink answers the first
 * call and throttles the next 15 (three rounds, more than circuit_failures):
 * though the sink answered in the same batch, no attempt is counted for any
 * row (no poison check), the circuit never opens, and every row is delivered
 * once the throttling ends, each throttled call retried, nothing else.
 */
static void
test_throttled_costs_no_attempt(void **state)
{
    enum { N = 6, LIMITED = 15 };
    struct conf_outbox *c = &fx.conf->outbox_worker;
    c->poll_interval_ms = 20;
    c->batch_size = 10;
    c->max_retry_count = 2;
    c->circuit_failures = 2;
    c->circuit_probe_ms = 50;
    char ids[N][37];
    for (int i = 0; i < N; i++)
        insert_events(1, "RoomGiftSent", NULL, 0, &ids[i]);
    struct tsink *t = tsink_batch_new("tim", SINK_BIT_TIM, 0);
    t->limit_from = 1;
    t->limit_n = LIMITED;
    struct outbox *ob = open_outbox(&t, 1);
    int64_t end = clock_mono_ms() + 10000;
    bool all = false;
    char why[256];

    while (!all && clock_mono_ms() < end) {
        assert_int_equal(outbox_sinks_ready(ob, why, sizeof(why)), 0); /* never open */
        all = true;
        for (int i = 0; i < N; i++) {
            struct outbox_row r;
            get_row(ids[i], &r);
            assert_int_equal(r.retry_count, 0);
            assert_int_not_equal(r.status, OUTBOX_FAILED);
            all = all && r.status == OUTBOX_DELIVERED;
            row_clear(&r);
        }
        usleep(5000);
    }
    assert_true(all);
    outbox_close(ob);
    assert_int_equal(tsink_calls(t), N + LIMITED);
    tsink_free(t);
}

/*
 * The seed's batch_size (每轮最大抢占条数) caps every claim with the default
 * claim_batches 1, also through a deep backlog (issue 26).
 */
static void
test_claim_capped_by_batch_size(void **state)
{
    enum { ROOMS = 7, PER = 5, N = ROOMS * PER };
    struct conf_outbox *c = &fx.conf->outbox_worker;
    c->poll_interval_ms = 10000;
    c->batch_size = 10;
    c->claim_batches = 1;
    char ids[N][37];
    for (int r = 0; r < ROOMS; r++)
        insert_events(PER, "RoomGiftSent", NULL, 0, &ids[r * PER]);
    struct tsink *t = tsink_window_new("bus", SINK_BIT_BUS, 0);
    struct outbox *ob = open_outbox(&t, 1);
    struct outbox_stats st;

    for (int i = 0; i < N; i++)
        assert_true(wait_status(ids[i], OUTBOX_DELIVERED, 5000));
    outbox_stats(ob, &st);
    outbox_close(ob);
    assert_int_equal(st.claimed_rows, N);
    assert_int_equal(st.claim_max, 10);
    assert_true(st.claims >= 4);
    assert_int_equal(batch_calls_within(t, 10), N);
    tsink_free(t);
}

/*
 * ordering per_room across the sink calls of one deep claim: a room's 30
 * rows, batch 10: the first claim takes e0..e9, the deep one e10..e29 in
 * two calls. e19, the last row of the first call, is answered "not now":
 * e20..e29, in the second call, are held (never sent, no attempt counted)
 * and reach the sink after e19's retry, in order, each once.
 */
static void
test_deep_claim_holds_across_batches(void **state)
{
    struct conf_outbox *c = &fx.conf->outbox_worker;
    c->poll_interval_ms = 20;
    c->batch_size = 10;
    c->claim_batches = 3;
    c->initial_backoff_ms = 1000; /* e19 waits >= 500 ms for its retry */
    c->max_backoff_ms = 1000;
    char ids[30][37];
    insert_events(30, "RoomGiftSent", NULL, 0, ids);
    struct tsink *t = tsink_batch_new("bus", SINK_BIT_BUS, 0);
    t->retry_id = ids[19];
    struct outbox *ob = open_outbox(&t, 1);
    struct outbox_row r;

    assert_true(wait_status(ids[29], OUTBOX_RETRYABLE, 5000));
    pthread_mutex_lock(&t->mu);
    for (int i = 20; i < 30; i++)
        assert_int_equal(call_index(t, ids[i], 0), -1); /* held: not sent */
    t->retry_id = NULL;
    pthread_mutex_unlock(&t->mu);
    get_row(ids[19], &r);
    assert_int_equal(r.retry_count, 1);
    row_clear(&r);
    for (int i = 20; i < 30; i++) {
        get_row(ids[i], &r);
        assert_int_equal(r.retry_count, 0);
        assert_non_null(r.last_error);
        assert_non_null(strstr(r.last_error, "held"));
        row_clear(&r);
    }

    assert_true(wait_status(ids[29], OUTBOX_DELIVERED, 5000));
    outbox_close(ob);
    for (int i = 0; i < 30; i++)
        assert_int_equal(row_status(ids[i]), OUTBOX_DELIVERED);
    /* e0..e19, then e19 again (once more per failed retry), then e20..e29 */
    for (int k = 0; k < 20; k++)
        assert_string_equal(t->event_ids[k], ids[k]);
    int k = 20;
    while (k < t->calls && strcmp(t->event_ids[k], ids[19]) == 0)
        k++;
    assert_true(k > 20);
    assert_int_equal(t->calls, k + 10);
    for (int i = 20; i < 30; i++)
        assert_string_equal(t->event_ids[k + i - 20], ids[i]);
    assert_int_equal(batch_calls_within(t, 10), t->calls);
    tsink_free(t);
}

/* A batch sink for a child process: each call sleeps delay_ms, then writes
 * the call's event ids (37 bytes each) to fd in one write, and delivers. */
struct psink {
    struct sink super;
    int fd;
    int64_t delay_ms;
};

static void
psink_publish_batch(struct sink *s, const struct outbox_event *evs, size_t n, int64_t deadline,
                    int *rcs, char *errs, size_t errlen)
{
    struct psink *p = (struct psink *)s;
    char *buf = xcalloc(n, 37);

    (void)deadline;
    usleep((useconds_t)p->delay_ms * 1000);
    for (size_t i = 0; i < n; i++) {
        memcpy(buf + i * 37, evs[i].row->event_id, 37);
        rcs[i] = 0;
        errs[i * errlen] = '\0';
    }
    if (write(p->fd, buf, n * 37) != (ssize_t)(n * 37)) /* n <= 110: one atomic pipe write */
        _exit(5);
    free(buf);
}

static int
psink_publish(struct sink *s, const struct outbox_event *ev, int64_t deadline, char *err,
              size_t errlen)
{
    int rc;

    psink_publish_batch(s, ev, 1, deadline, &rc, err, errlen);
    return rc;
}

/*
 * kill -9 mid-claim: a child process claims e0..e9 (delivered, completed
 * with its next claim), then the deep claim e10..e29, publishes its first
 * call (e10..e19) and is killed during the second one. Nothing of the claim
 * was completed: e10..e29 stay delivering under the child's lock, and
 * another claimer delivers all twenty after the lock, in order, each once
 * (e10..e19 twice in all: at least once). The child's calls were 10 rows.
 */
static void
test_deep_claim_kill9(void **state)
{
    struct conf_outbox *c = &fx.conf->outbox_worker;
    c->poll_interval_ms = 20;
    c->batch_size = 10;
    c->claim_batches = 3;
    c->lock_timeout_ms = 2000;
    c->publish_timeout_ms = 500;
    char ids[30][37], got[31][37];
    insert_events(30, "RoomGiftSent", NULL, 0, ids);
    int fds[2], status;
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* The child opens its own store; it never touches the parent's handle. */
        struct psink ps = {.super = {.name = "bus",
                                     .bit = SINK_BIT_BUS,
                                     .publish = psink_publish,
                                     .publish_batch = psink_publish_batch,
                                     .no_json = true},
                           .fd = fds[1],
                           .delay_ms = 300};
        struct sink *sp = &ps.super;
        struct store *st = NULL;
        struct outbox *ob = NULL;
        char err[256];

        close(fds[0]);
        if (store_open(&st, &fx.conf->store, err, sizeof(err)) != 0)
            _exit(2);
        if (outbox_open(&ob, c, &fx.conf->store, st, "node-k", &sp, 1) != 0)
            _exit(3);
        sleep(30); /* killed long before; never outlives a failed parent */
        _exit(6);
    }
    close(fds[1]);
    size_t have = 0;
    while (have < 20 * 37) {
        ssize_t r = read(fds[0], (char *)got + have, 20 * 37 - have);
        if (r <= 0)
            break; /* the child died early: asserted below, after it is reaped */
        have += (size_t)r;
    }
    kill(pid, SIGKILL);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_int_equal(have, 20 * 37);
    assert_true(WIFSIGNALED(status));
    /* nothing more was written: the second call of the deep claim never returned */
    assert_int_equal(read(fds[0], got[20], 37), 0);
    close(fds[0]);
    for (int i = 0; i < 20; i++)
        assert_string_equal(got[i], ids[i]);

    struct outbox_row r;
    int64_t lock_until = 0;
    for (int i = 0; i < 10; i++)
        assert_int_equal(row_status(ids[i]), OUTBOX_DELIVERED);
    for (int i = 10; i < 30; i++) {
        get_row(ids[i], &r);
        assert_int_equal(r.status, OUTBOX_DELIVERING); /* the deep claim took all twenty */
        assert_string_equal(r.locked_by, "node-k/w0");
        assert_int_equal(r.retry_count, 0);
        lock_until = r.lock_until_ms;
        row_clear(&r);
    }

    struct tsink *t = tsink_batch_new("bus", SINK_BIT_BUS, 0);
    struct outbox *ob = open_outbox(&t, 1);
    for (int i = 10; i < 30; i++)
        assert_true(wait_status(ids[i], OUTBOX_DELIVERED, 10000));
    outbox_close(ob);
    assert_int_equal(t->calls, 20);
    assert_true(t->call_wall_ms[0] >= lock_until); /* not inside the child's lock */
    for (int i = 10; i < 30; i++)
        assert_string_equal(t->event_ids[i - 10], ids[i]);
    assert_int_equal(batch_calls_within(t, 10), 20);
    tsink_free(t);
}

/* Delivered rows older than the retention are purged in batches by the
 * thread outbox_open starts; failed and pending rows stay. */
static void
test_purge(void **state)
{
    static const uint8_t garbage[] = {0x08};
    fx.conf->store.retention_delivered_ms = 1;
    fx.conf->store.purge_batch = 2;
    fx.conf->store.purge_interval_ms = 50;
    char good[7][37], bad[1][37];
    insert_events(7, "RoomGiftSent", NULL, 0, good);
    insert_events(1, "RoomGiftSent", garbage, sizeof(garbage), bad);
    struct tsink *t = tsink_new("ok", SINK_BIT_TIM, 0);
    struct outbox *ob = open_outbox(&t, 1);

    struct outbox_counts oc;
    int64_t end = clock_mono_ms() + 5000;
    do {
        assert_int_equal(store_outbox_counts(fx.store, &oc), 0);
        if (tsink_calls(t) == 7 && oc.delivered == 0 && oc.failed == 1)
            break;
        usleep(10000);
    } while (clock_mono_ms() < end);
    assert_int_equal(tsink_calls(t), 7);
    assert_int_equal(oc.delivered, 0);
    assert_int_equal(oc.failed, 1);
    struct outbox_row r;
    memset(&r, 0, sizeof(r));
    assert_int_equal(store_outbox_get(fx.store, good[0], &r), ROOMD_ENOTFOUND);
    assert_int_equal(row_status(bad[0]), OUTBOX_FAILED);
    outbox_close(ob);
    tsink_free(t);

    /* the pass function itself: bounded batches, reports what it purged */
    insert_events(5, "RoomGiftSent", NULL, 0, NULL);
    struct outbox_row *rows = NULL;
    size_t n = 0;
    int64_t now = clock_wall_ms();
    assert_int_equal(store_outbox_claim(fx.store, now, now + 1000, "p/w0", 10, &rows, &n), 0);
    assert_int_equal(n, 5);
    struct outbox_result res[5];
    for (size_t i = 0; i < n; i++)
        res[i] = (struct outbox_result){
            .id = rows[i].id, .locked_by = "p/w0", .status = OUTBOX_DELIVERED, .now_ms = now};
    assert_int_equal(store_outbox_complete(fx.store, res, n), 0);
    outbox_rows_free(rows, n);
    size_t purged = 0;
    assert_int_equal(retention_purge(fx.store, now - 60000, 2, 100, &purged), 0);
    assert_int_equal(purged, 0); /* delivered just now: not old enough */
    assert_int_equal(retention_purge(fx.store, now + 1, 2, 2, &purged), 0);
    assert_int_equal(purged, 4); /* two batches of two */
    assert_int_equal(retention_purge(fx.store, now + 1, 2, 100, &purged), 0);
    assert_int_equal(purged, 1);
}

/* While the store is unavailable (another process holds SQLite's write lock
 * past busy_timeout) the worker backs off and logs the outage once, not per
 * poll; when the lock goes it resumes by itself and delivers. */
static void
test_store_outage_backoff(void **state)
{
    char err[512];
    store_close(fx.store);
    fx.conf->store.sqlite.busy_timeout_ms = 30;
    assert_int_equal(store_open(&fx.store, &fx.conf->store, err, sizeof(err)), 0);
    fx.conf->outbox_worker.poll_interval_ms = 20;
    char id[37];
    insert_one(id);

    sqlite3 *db;
    assert_int_equal(sqlite3_open(fx.conf->store.sqlite.path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
    struct tsink *t = tsink_new("ok", SINK_BIT_TIM, 0);
    struct outbox *ob = open_outbox(&t, 1);
    usleep(800 * 1000);
    assert_int_equal(tsink_calls(t), 0);
    assert_int_equal(log_lines_with("store unavailable"), 1);
    assert_int_equal(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);

    assert_true(wait_status(id, OUTBOX_DELIVERED, 5000));
    assert_int_equal(tsink_calls(t), 1);
    assert_int_equal(log_lines_with("store unavailable"), 1);
    assert_int_equal(log_lines_with("store available again"), 1);
    outbox_close(ob);
    tsink_free(t);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_retry_schedule, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dead_letter_never_reclaimed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_permanent_error_fails_at_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fenced_completion, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reclaim_after_lock_expiry, setup, teardown),
        cmocka_unit_test_setup_teardown(test_per_sink_state, setup, teardown),
        cmocka_unit_test_setup_teardown(test_poison_event, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failing_event_bounded_logs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wake_latency, setup, teardown),
        cmocka_unit_test_setup_teardown(test_full_batches_drain, setup, teardown),
        cmocka_unit_test_setup_teardown(test_handoff_queue_conf, setup, teardown),
        cmocka_unit_test_setup_teardown(test_per_room_order_across_retries, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_order_does_not_wait, setup, teardown),
        cmocka_unit_test_setup_teardown(test_per_room_order_per_sink, setup, teardown),
        cmocka_unit_test_setup_teardown(test_workers_deliver_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batch_sink_one_call_per_batch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batch_sink_window, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batch_sink_row_outcomes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deep_claim_split, setup, teardown),
        cmocka_unit_test_setup_teardown(test_claim_capped_by_batch_size, setup, teardown),
        cmocka_unit_test_setup_teardown(test_throttled_costs_no_attempt, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deep_claim_holds_across_batches, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deep_claim_kill9, setup, teardown),
        cmocka_unit_test_setup_teardown(test_purge, setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_outage_backoff, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
