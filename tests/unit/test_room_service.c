/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_room_service.c: the command path end to end on a real SQLite store
 * (a file in a temp dir), real group commit, embedded wallet and local
 * lease: replies and error codes, outbox rows per command, idempotent replay
 * and key reuse (also across a restart), atomicity under an injected
 * SaveMutation failure, per-room ordering under concurrent threads, cell
 * eviction and reload, snapshot + replay after a restart, the in-process
 * rocket timer (and its rebuild), the UTC-day reset, the timing line; the
 * outbox hand-off (rows go from the commit to the outbox workers without a
 * claim; a full queue falls back to pending rows; a failed commit releases
 * its reservation).
 */
#include "helpers.h"

#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/xmalloc.h"
#include "lease/lease.h"
#include "outbox/handoff.h"
#include "outbox/outbox.h"
#include "publish/sink.h"
#include "room/command.h"
#include "room/service.h"
#include "store/group_commit.h"
#include "store/store.h"
#include "wallet/wallet.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define APP "app1"

struct fx {
    char *dir;
    char *log_path;
    struct conf *conf;
    struct store *store;
    struct group_commit *gc;
    struct wallet *wallet;
    struct lease *lease;
    struct room_service *svc;
    bool timer;
    struct gsink *sink; /* with an outbox (test_outbox_handoff*) when set */
    struct outbox *ob;
};

/* ---- a sink that records what it delivers and can hold the worker ---- */

#define GSINK_MAX 256

struct gsink {
    struct sink super;
    struct fx *f;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool hold; /* publish waits while set */
    int calls;
    int waiting; /* calls inside publish, held */
    char ids[GSINK_MAX][37];
    char status_seen[GSINK_MAX][16]; /* the row's status and locked_by while published */
    char locked_by_seen[GSINK_MAX][64];
    int64_t room_seq[GSINK_MAX];
    int rc[GSINK_MAX];
    int64_t fail_seq; /* > 0: the first call for the row of this room_seq answers "not now" */
};

static int
gsink_publish(struct sink *s, const struct outbox_event *ev, int64_t deadline, char *err,
              size_t errlen)
{
    struct gsink *g = (struct gsink *)s;
    struct outbox_row r;
    int k;

    memset(&r, 0, sizeof(r));
    assert_int_equal(store_outbox_get(g->f->store, ev->row->event_id, &r), 0);
    pthread_mutex_lock(&g->mu);
    k = g->calls++;
    if (k < GSINK_MAX) {
        strlcpy_(g->ids[k], ev->row->event_id, 37);
        strlcpy_(g->status_seen[k], outbox_status_name(r.status), 16);
        strlcpy_(g->locked_by_seen[k], r.locked_by, 64);
        g->room_seq[k] = ev->row->room_seq;
    }
    g->waiting++;
    pthread_cond_broadcast(&g->cv);
    while (g->hold)
        pthread_cond_wait(&g->cv, &g->mu);
    g->waiting--;
    int rc = 0;
    if (g->fail_seq > 0 && ev->row->room_seq == g->fail_seq) {
        g->fail_seq = 0;
        rc = ROOMD_ERETRY;
        snprintf(err, errlen, "not now (test)");
    }
    if (k < GSINK_MAX)
        g->rc[k] = rc;
    pthread_mutex_unlock(&g->mu);
    free(r.payload);
    free(r.last_error);
    return rc;
}

static void
gsink_close(struct sink *s)
{
    (void)s;
}

static struct gsink *
gsink_new(struct fx *f)
{
    struct gsink *g = xcalloc(1, sizeof(*g));

    g->super.name = "rec";
    g->super.bit = SINK_BIT_LOG;
    g->super.publish = gsink_publish;
    g->super.close = gsink_close;
    g->f = f;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    return g;
}

static void
gsink_hold(struct gsink *g, bool hold)
{
    pthread_mutex_lock(&g->mu);
    g->hold = hold;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

/* Waits until n publish calls are inside the (held) sink. */
static void
gsink_wait_inside(struct gsink *g, int n)
{
    int64_t end = clock_mono_ms() + 5000;

    pthread_mutex_lock(&g->mu);
    while (g->waiting < n && clock_mono_ms() < end) {
        pthread_mutex_unlock(&g->mu);
        usleep(2000);
        pthread_mutex_lock(&g->mu);
    }
    assert_int_equal(g->waiting, n);
    pthread_mutex_unlock(&g->mu);
}

static void
svc_open(struct fx *f)
{
    char err[512];
    struct room_deps d;

    if (store_open(&f->store, &f->conf->store, err, sizeof(err)) != 0)
        fail_msg("store_open: %s", err);
    assert_int_equal(group_commit_open(&f->gc, f->store, f->conf->store.group_commit_max), 0);
    assert_int_equal(wallet_open(&f->wallet, &f->conf->wallet, f->store, err, sizeof(err)), 0);
    assert_int_equal(lease_open(&f->lease, f->conf, err, sizeof(err)), 0);
    memset(&d, 0, sizeof(d));
    d.conf = f->conf;
    d.store = f->store;
    d.gc = f->gc;
    d.wallet = f->wallet;
    d.lease = f->lease;
    d.rocket_timer = f->timer;
    if (f->sink != NULL) {
        struct sink *s = &f->sink->super;

        assert_int_equal(outbox_open(&f->ob, &f->conf->outbox_worker, &f->conf->store, f->store,
                                     "node-t", &s, 1),
                         0);
        d.outbox = f->ob;
    }
    assert_int_equal(room_service_open(&f->svc, &d), 0);
}

static void
svc_close(struct fx *f)
{
    room_service_close(f->svc);
    outbox_close(f->ob);
    f->ob = NULL;
    lease_close(f->lease);
    wallet_close(f->wallet);
    group_commit_close(f->gc);
    store_close(f->store);
    f->svc = NULL;
}

static int
setup(void **state)
{
    struct fx *f = xcalloc(1, sizeof(*f));

    f->dir = th_tmpdir();
    f->conf = th_conf_sqlite(f->dir);
    f->conf->store.sqlite.synchronous_full = false;
    f->conf->room.seat_count = 3;
    f->conf->room.max_members = 50;
    f->conf->room.snapshot_every_n = 5;
    f->conf->room.kick_ban_ms = 60000;
    f->conf->room.rocket.thresholds[0] = 100;
    f->conf->room.rocket.thresholds[1] = 200;
    f->conf->room.rocket.nthresholds = 2;
    f->conf->room.rocket.countdown_ms = 60000;
    f->conf->wallet.initial_balance = 1000;
    f->log_path = xasprintf("%s/roomd.log", f->dir);
    log_close();
    assert_int_equal(log_open(f->log_path, LOG_INFO), 0);
    *state = f;
    return 0;
}

static int
teardown(void **state)
{
    struct fx *f = *state;

    if (f->svc != NULL)
        svc_close(f);
    clock_set_offset_ms(0);
    log_close();
    conf_free(f->conf);
    free(f->log_path);
    free(f->dir);
    free(f);
    return 0;
}

/* Parses body and executes it; returns the HTTP status. *r is cleared first. */
static int
run(struct fx *f, enum room_cmd_type t, const char *room, const char *body, struct room_reply *r)
{
    struct room_cmd cmd;
    struct cmd_error e;

    room_reply_clear(r);
    if (room_cmd_parse(t, APP, room, body, strlen(body), &cmd, &e) != 0)
        fail_msg("parse %s: %s", body, e.message);
    room_service_execute(f->svc, &cmd, r);
    room_cmd_clear(&cmd);
    assert_non_null(r->body);
    return r->status;
}

/* Runs a command that must answer 200 and returns the new version. */
static int64_t
ok(struct fx *f, enum room_cmd_type t, const char *room, const char *body)
{
    struct room_reply r = {0};
    json_t *j;
    int64_t v;

    if (run(f, t, room, body, &r) != 200)
        fail_msg("%s: %d %s", body, r.status, r.body);
    j = json_loads(r.body, 0, NULL);
    assert_non_null(j);
    v = json_integer_value(json_object_get(j, "version"));
    json_decref(j);
    room_reply_clear(&r);
    return v;
}

/* Runs a command that must fail with status and error code. */
static void
refused(struct fx *f, enum room_cmd_type t, const char *room, const char *body, int status,
        const char *code)
{
    struct room_reply r = {0};
    json_t *j;

    run(f, t, room, body, &r);
    if (r.status != status)
        fail_msg("%s: want %d, got %d %s", body, status, r.status, r.body);
    j = json_loads(r.body, 0, NULL);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "error"), "code")),
                        code);
    assert_non_null(json_string_value(json_object_get(json_object_get(j, "error"), "message")));
    json_decref(j);
    assert_false(r.replay);
    room_reply_clear(&r);
}

static char *
get_room(struct fx *f, const char *room)
{
    struct room_reply r = {0};
    char *body;

    room_service_get(f->svc, APP, room, NULL, &r);
    if (r.status != 200)
        fail_msg("GET %s: %d %s", room, r.status, r.body);
    body = r.body;
    r.body = NULL;
    room_reply_clear(&r);
    return body;
}

static size_t
outbox_rows(struct fx *f)
{
    struct outbox_row *rows = NULL;
    size_t n = 0;

    assert_int_equal(store_outbox_list(f->store, -1, 0, 100000, &rows, &n), 0);
    outbox_rows_free(rows, n);
    return n;
}

static bool
logged(struct fx *f, const char *command_id)
{
    struct command_record rec;
    int rc;

    memset(&rec, 0, sizeof(rec));
    rc = store_find_command(f->store, APP, command_id, &rec);
    command_record_clear(&rec);
    assert_true(rc == 0 || rc == ROOMD_ENOTFOUND);
    return rc == 0;
}

static void
create(struct fx *f, const char *room, int64_t owner)
{
    char body[256];

    snprintf(body, sizeof(body),
             "{\"command_id\":\"create-%s\",\"room_id\":\"%s\",\"owner_uid\":%lld,"
             "\"title\":\"room %s\"}",
             room, room, (long long)owner, room);
    assert_int_equal(ok(f, CMD_CREATE_ROOM, NULL, body), 1);
}

static void
join(struct fx *f, const char *room, int64_t uid)
{
    char body[128];

    snprintf(body, sizeof(body), "{\"command_id\":\"join-%s-%lld\",\"uid\":%lld}", room,
             (long long)uid, (long long)uid);
    ok(f, CMD_JOIN_ROOM, room, body);
}

/* ---- tests ------------------------------------------------------------------------ */

/* Status of the row of event_id. */
static enum outbox_status
row_status(struct fx *f, const char *event_id)
{
    struct outbox_row r;

    memset(&r, 0, sizeof(r));
    assert_int_equal(store_outbox_get(f->store, event_id, &r), 0);
    free(r.payload);
    free(r.last_error);
    return r.status;
}

/* Waits until every outbox row is delivered; returns how many there are. */
static size_t
wait_all_delivered(struct fx *f)
{
    int64_t end = clock_mono_ms() + 5000;
    struct outbox_counts c;

    for (;;) {
        assert_int_equal(store_outbox_counts(f->store, &c), 0);
        if ((c.pending + c.delivering + c.retryable == 0 && c.delivered > 0) ||
            clock_mono_ms() > end)
            break;
        usleep(5000);
    }
    assert_int_equal(c.pending + c.delivering + c.retryable + c.failed, 0);
    return (size_t)c.delivered;
}

/* The hand-off tests' outbox settings and sink (svc_open opens it). They
 * look at the hand-off alone: ordering none (with per_room a room with
 * undelivered rows goes to the ordered claim, see
 * test_outbox_handoff_per_room). */
static void
outbox_conf(struct fx *f, enum outbox_ordering ordering, int workers)
{
    struct conf_outbox *o = &f->conf->outbox_worker;

    o->ordering = ordering;
    o->workers = workers;
    o->batch_size = 100;
    o->poll_interval_ms = 50;
    o->publish_timeout_ms = 2000;
    o->lock_timeout_ms = 20000;
    f->conf->store.retention_delivered_ms = 0;
    f->conf->store.retention_command_log_ms = 0;
    f->sink = gsink_new(f);
}

static void
open_with_outbox_ordered(struct fx *f, enum outbox_ordering ordering, int workers)
{
    outbox_conf(f, ordering, workers);
    svc_open(f);
}

static void
open_with_outbox(struct fx *f)
{
    open_with_outbox_ordered(f, ORDERING_NONE, 1);
}

static void
close_with_outbox(struct fx *f)
{
    struct gsink *g = f->sink;

    gsink_hold(g, false);
    svc_close(f);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g);
    f->sink = NULL;
}

/*
 * Rows of committed commands reach the outbox worker without any claim:
 * while the sink publishes a row it is already delivering, locked by the
 * hand-off claimer "node-t/h" (inserted claimed); no claim ever returned a
 * row; every event is delivered once.
 */
static void
test_outbox_handoff(void **state)
{
    struct fx *f = *state;
    struct outbox_stats st;

    open_with_outbox(f);
    create(f, "h1", 1);
    for (int uid = 2; uid < 12; uid++)
        join(f, "h1", uid);
    size_t n = wait_all_delivered(f);
    assert_int_equal(n, 11);
    outbox_stats(f->ob, &st);
    assert_int_equal(st.claimed_rows, 0);
    assert_int_equal(st.handoff_rows, 11);
    assert_int_equal(st.handoff_full, 0);
    uint64_t lat_n = 0;
    for (int b = 0; b < OUTBOX_LAT_BUCKETS; b++)
        lat_n += st.handoff_lat[b];
    assert_int_equal(lat_n, 11); /* commit -> sinks returned, per handed-off row */
    assert_true(outbox_stats_handoff_pct_us(&st, 0.5) > 0);
    assert_int_equal(f->sink->calls, 11);
    for (int i = 0; i < f->sink->calls; i++) {
        assert_string_equal(f->sink->status_seen[i], "delivering");
        assert_string_equal(f->sink->locked_by_seen[i], "node-t/h");
        for (int j = 0; j < i; j++)
            assert_string_not_equal(f->sink->ids[i], f->sink->ids[j]);
    }
    close_with_outbox(f);
}

/*
 * ordering per_room with the hand-off, several workers: a room whose
 * earlier rows are still in this process's hand-off (o1's first event held
 * inside the sink) hands its next commits' rows off behind them (room
 * affinity, counted), and no other worker takes them while that row is in
 * a worker's hands; an idle room (o2) is handed off and delivered
 * meanwhile. The sink sees each room's events in commit order, room_seq 1,
 * 2, ... without a gap, each once, no claim needed.
 */
static void
test_outbox_handoff_per_room(void **state)
{
    struct fx *f = *state;
    struct outbox_stats st;

    open_with_outbox_ordered(f, ORDERING_PER_ROOM, 3);
    gsink_hold(f->sink, true);
    create(f, "o1", 1);
    gsink_wait_inside(f->sink, 1);
    for (int uid = 2; uid < 10; uid++)
        join(f, "o1", uid); /* o1's rows are all in memory: queued behind */
    create(f, "o2", 1);     /* idle: handed off, and goes past o1's queued rows */
    gsink_wait_inside(f->sink, 2);
    usleep(100 * 1000);
    pthread_mutex_lock(&f->sink->mu);
    int inside = f->sink->waiting;
    pthread_mutex_unlock(&f->sink->mu);
    gsink_hold(f->sink, false);
    assert_int_equal(inside, 2); /* no worker took o1's later rows */
    assert_int_equal(wait_all_delivered(f), 10);
    outbox_stats(f->ob, &st);
    assert_int_equal(st.claimed_rows, 0);
    assert_int_equal(st.handoff_rows, 10);
    assert_int_equal(st.order_affine, 8);
    assert_int_equal(st.order_busy, 0);
    assert_int_equal(f->sink->calls, 10);
    int64_t last = 0;
    for (int i = 0; i < f->sink->calls; i++) {
        if (f->sink->room_seq[i] == 1 && last > 0)
            continue; /* o2's one event */
        assert_int_equal(f->sink->room_seq[i], last + 1);
        last = f->sink->room_seq[i];
    }
    assert_int_equal(last, 9);
    close_with_outbox(f);
}

/*
 * Room affinity's hold-back: o1's first event fails ("not now") while the
 * room's next events are queued behind it in the hand-off. They are not
 * published: they go back to the store held (retryable now, no attempt
 * counted), commits made while the room is blocked go pending, and the
 * ordered claim delivers the room from its head once the retry is due. The
 * sink sees seq 1 (refused), then 1, 2, ... 9 in order, each once: nothing
 * published ahead of the failed one, nothing lost. Without the hold-back
 * seq 2.. would reach the sink before the retry of seq 1.
 */
static void
test_outbox_handoff_hold_back(void **state)
{
    struct fx *f = *state;
    struct outbox_stats st;

    f->conf->outbox_worker.initial_backoff_ms = 200;
    f->conf->outbox_worker.max_backoff_ms = 200;
    open_with_outbox_ordered(f, ORDERING_PER_ROOM, 2);
    f->sink->fail_seq = 1;
    gsink_hold(f->sink, true);
    create(f, "o1", 1);
    gsink_wait_inside(f->sink, 1);
    for (int uid = 2; uid < 7; uid++)
        join(f, "o1", uid); /* queued behind seq 1 (room affinity) */
    outbox_stats(f->ob, &st);
    assert_int_equal(st.order_affine, 5);
    gsink_hold(f->sink, false); /* seq 1 is refused */
    for (int uid = 7; uid < 10; uid++)
        join(f, "o1", uid); /* the room is blocked or busy: pending */
    assert_int_equal(wait_all_delivered(f), 9);
    assert_int_equal(f->sink->room_seq[0], 1);
    assert_int_equal(f->sink->rc[0], ROOMD_ERETRY);
    for (int i = 1; i < f->sink->calls; i++) {
        assert_int_equal(f->sink->room_seq[i], i); /* seq 1 again, then 2 .. 9 */
        assert_int_equal(f->sink->rc[i], 0);
    }
    assert_int_equal(f->sink->calls, 10);
    outbox_stats(f->ob, &st);
    assert_true(st.order_held >= 5); /* 2 .. 6, held from the start */
    assert_true(st.claimed_rows >= 8);
    close_with_outbox(f);
}

/*
 * A full hand-off queue: the command's rows are inserted pending and a
 * worker claims them (the normal way). A commit that fails releases its
 * reservation. Capacity 1, the only worker held inside the sink.
 */
static void
test_outbox_handoff_full_and_failure(void **state)
{
    struct fx *f = *state;
    struct outbox_stats st;
    struct outbox_row *rows = NULL;
    size_t n = 0;

    open_with_outbox(f);
    outbox_handoff_set_capacity(f->ob, 1);
    gsink_hold(f->sink, true);
    create(f, "h2", 1); /* handed off; the worker takes it and is held */
    gsink_wait_inside(f->sink, 1);
    join(f, "h2", 2); /* handed off, waits in the queue (1 of 1) */
    join(f, "h2", 3); /* queue full: pending */
    outbox_stats(f->ob, &st);
    assert_int_equal(st.handoff_rows, 2);
    assert_int_equal(st.handoff_full, 1);
    assert_int_equal(store_outbox_list(f->store, -1, 0, 100, &rows, &n), 0);
    assert_int_equal(n, 3);
    assert_int_equal(rows[0].status, OUTBOX_DELIVERING);
    assert_string_equal(rows[0].locked_by, "node-t/h");
    assert_int_equal(rows[1].status, OUTBOX_DELIVERING);
    assert_string_equal(rows[1].locked_by, "node-t/h");
    assert_int_equal(rows[2].status, OUTBOX_PENDING);
    assert_string_equal(rows[2].locked_by, "");
    char pending_id[37];
    strlcpy_(pending_id, rows[2].event_id, sizeof(pending_id));
    outbox_rows_free(rows, n);

    /* a failed commit gives its reservation back: the next command still
     * finds the queue full (1 queued), never more than full */
    store_fail_next_saves(1);
    refused(f, CMD_JOIN_ROOM, "h2", "{\"command_id\":\"jf\",\"uid\":4}", 503, "unavailable");
    outbox_stats(f->ob, &st);
    assert_int_equal(st.handoff_full, 2);

    gsink_hold(f->sink, false);
    assert_int_equal(wait_all_delivered(f), 3);
    assert_int_equal(row_status(f, pending_id), OUTBOX_DELIVERED);
    outbox_stats(f->ob, &st);
    assert_int_equal(st.claimed_rows, 1); /* the pending row, claimed */
    assert_int_equal(st.handoff_rows, 2);

    /* queue empty now: a commit that fails releases its reservation, so
     * the next command is handed off again */
    store_fail_next_saves(1);
    refused(f, CMD_JOIN_ROOM, "h2", "{\"command_id\":\"jf2\",\"uid\":4}", 503, "unavailable");
    join(f, "h2", 5);
    assert_int_equal(wait_all_delivered(f), 4);
    outbox_stats(f->ob, &st);
    assert_int_equal(st.handoff_rows, 3);
    assert_int_equal(st.handoff_full, 2);
    assert_int_equal(st.claimed_rows, 1);
    assert_int_equal(f->sink->calls, 4);
    close_with_outbox(f);
}

static void *
unhold_later(void *arg)
{
    usleep(300 * 1000);
    gsink_hold(arg, false);
    return NULL;
}

/* Waits (up to 3 s) until g was called n times; returns its calls. */
static int
gsink_wait_calls(struct gsink *g, int n)
{
    int calls = 0;

    for (int64_t end = clock_mono_ms() + 3000; clock_mono_ms() < end; usleep(2000)) {
        pthread_mutex_lock(&g->mu);
        calls = g->calls;
        pthread_mutex_unlock(&g->mu);
        if (calls >= n)
            break;
    }
    return calls;
}

/*
 * outbox_worker.complete_gather: the completions of batches that land
 * within it are written in one store transaction. Rows whose batch landed
 * stay delivering (claimed by "node-t/h") until that write; then every row
 * is delivered, in one completion for several batches (without the gather:
 * one per batch). A stop inside the window writes them at once.
 */
static void
test_outbox_handoff_gather(void **state)
{
    struct fx *f = *state;
    struct outbox_stats st;
    struct outbox_row r;
    char first[64];

    outbox_conf(f, ORDERING_NONE, 1);
    f->conf->outbox_worker.poll_interval_ms = 10000; /* no claim (it writes the gather first) */
    f->conf->outbox_worker.complete_gather_ms = 1500;
    svc_open(f);
    gsink_hold(f->sink, true);
    create(f, "g1", 1);
    gsink_wait_inside(f->sink, 1); /* the first batch is the create's alone */
    gsink_hold(f->sink, false);
    for (int uid = 2; uid < 7; uid++)
        join(f, "g1", uid);
    assert_int_equal(gsink_wait_calls(f->sink, 6), 6);
    strlcpy_(first, f->sink->ids[0], sizeof(first));
    memset(&r, 0, sizeof(r));
    assert_int_equal(store_outbox_get(f->store, first, &r), 0);
    free(r.payload);
    free(r.last_error);
    assert_int_equal(r.status, OUTBOX_DELIVERING); /* published, its completion gathered */
    assert_string_equal(r.locked_by, "node-t/h");
    assert_int_equal(wait_all_delivered(f), 6);
    outbox_stats(f->ob, &st);
    assert_int_equal(st.handoff_rows, 6);
    assert_true(st.batches >= 2);
    assert_int_equal(st.completions, 1);

    join(f, "g1", 7); /* landed, gathered, then the stop writes it */
    assert_int_equal(gsink_wait_calls(f->sink, 7), 7);
    outbox_close(f->ob);
    f->ob = NULL;
    struct outbox_counts c;
    assert_int_equal(store_outbox_counts(f->store, &c), 0);
    assert_int_equal(c.delivered, 7);
    assert_int_equal(c.delivering, 0);
    close_with_outbox(f);
}

/* A clean stop hands rows still waiting in the hand-off queue back at once
 * (retryable now, no attempt counted, lock cleared) instead of leaving them
 * locked until lock_timeout; the row a worker holds is completed first. */
static void
test_outbox_handoff_close(void **state)
{
    struct fx *f = *state;
    struct outbox_row *rows = NULL;
    size_t n = 0;
    pthread_t th;

    open_with_outbox(f);
    gsink_hold(f->sink, true);
    create(f, "h3", 1); /* the worker takes it and is held */
    gsink_wait_inside(f->sink, 1);
    join(f, "h3", 2); /* waits in the queue */
    join(f, "h3", 3);
    assert_int_equal(pthread_create(&th, NULL, unhold_later, f->sink), 0);
    outbox_close(f->ob); /* stops the worker once the sink lets it go */
    f->ob = NULL;
    pthread_join(th, NULL);
    assert_int_equal(store_outbox_list(f->store, -1, 0, 100, &rows, &n), 0);
    assert_int_equal(n, 3);
    assert_int_equal(rows[0].status, OUTBOX_DELIVERED);
    for (size_t i = 1; i < n; i++) {
        assert_int_equal(rows[i].status, OUTBOX_RETRYABLE);
        assert_int_equal(rows[i].retry_count, 0);
        assert_string_equal(rows[i].locked_by, "");
        assert_true(rows[i].next_retry_at_ms <= clock_wall_ms());
    }
    outbox_rows_free(rows, n);
    assert_int_equal(f->sink->calls, 1);
    close_with_outbox(f);
}

static void
test_happy_path(void **state)
{
    struct fx *f = *state;
    struct room_reply r = {0};
    json_t *j, *ev;
    int64_t bal;

    svc_open(f);
    assert_int_equal(run(f, CMD_CREATE_ROOM, NULL,
                         "{\"command_id\":\"c1\",\"room_id\":\"r1\",\"owner_uid\":1,"
                         "\"title\":\"Hello\"}",
                         &r),
                     200);
    j = json_loads(r.body, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(j, "room_id")), "r1");
    assert_int_equal(json_integer_value(json_object_get(j, "version")), 1);
    ev = json_object_get(j, "events");
    assert_int_equal(json_array_size(ev), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(ev, 0), "event_type")),
                        "RoomCreated");
    assert_int_equal(strlen(json_string_value(json_object_get(json_array_get(ev, 0), "event_id"))),
                     36);
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "room"), "title")),
                        "Hello");
    json_decref(j);
    assert_int_equal(outbox_rows(f), 1);
    assert_true(logged(f, "c1"));

    join(f, "r1", 1);
    join(f, "r1", 2);
    assert_int_equal(ok(f, CMD_MIC_UP, "r1", "{\"command_id\":\"m1\",\"uid\":2,\"seat\":1}"), 4);
    assert_int_equal(ok(f, CMD_SEND_GIFT, "r1",
                        "{\"command_id\":\"g1\",\"uid\":2,\"to_uid\":1,\"gift_id\":\"rose\","
                        "\"count\":2,\"unit_price\":10}"),
                     5);
    assert_int_equal(f->wallet->ops->balance(f->wallet, APP, 2, &bal), 0);
    assert_int_equal(bal, 980);
    assert_int_equal(ok(f, CMD_LEAVE_ROOM, "r1", "{\"command_id\":\"l1\",\"uid\":2}"), 6);
    assert_int_equal(outbox_rows(f), 1 + 1 + 1 + 1 + 1 + 2); /* leave: mic down + left */
    assert_int_equal(room_service_cells(f->svc), 1);

    /* a create without room_id gets a generated one */
    assert_int_equal(run(f, CMD_CREATE_ROOM, NULL,
                         "{\"command_id\":\"c2\",\"owner_uid\":1,\"title\":\"gen\"}", &r),
                     200);
    j = json_loads(r.body, 0, NULL);
    assert_int_equal(strlen(json_string_value(json_object_get(j, "room_id"))), 32);
    json_decref(j);
    room_reply_clear(&r);
}

static void
test_rejections(void **state)
{
    struct fx *f = *state;
    size_t rows;

    svc_open(f);
    refused(f, CMD_JOIN_ROOM, "nope", "{\"command_id\":\"x1\",\"uid\":1}", 404, "not_found");
    assert_int_equal(room_service_cells(f->svc), 0); /* no cell for a room that is not there */
    create(f, "r1", 1);
    refused(f, CMD_CREATE_ROOM, NULL,
            "{\"command_id\":\"x2\",\"room_id\":\"r1\",\"owner_uid\":1,\"title\":\"t\"}", 409,
            "room_exists");
    join(f, "r1", 1);
    join(f, "r1", 2);
    rows = outbox_rows(f);
    refused(f, CMD_JOIN_ROOM, "r1", "{\"command_id\":\"x3\",\"uid\":2}", 409, "already_member");
    refused(f, CMD_LEAVE_ROOM, "r1", "{\"command_id\":\"x4\",\"uid\":9}", 409, "not_member");
    refused(f, CMD_MIC_UP, "r1", "{\"command_id\":\"x5\",\"uid\":2,\"seat\":7}", 400,
            "invalid_argument");
    ok(f, CMD_MIC_UP, "r1", "{\"command_id\":\"m1\",\"uid\":2,\"seat\":0}");
    refused(f, CMD_MIC_UP, "r1", "{\"command_id\":\"x6\",\"uid\":1,\"seat\":0}", 409, "seat_taken");
    refused(f, CMD_MIC_UP, "r1", "{\"command_id\":\"x7\",\"uid\":2}", 409, "already_on_mic");
    refused(f, CMD_MIC_DOWN, "r1", "{\"command_id\":\"x8\",\"uid\":1}", 409, "not_on_mic");
    refused(f, CMD_SEND_GIFT, "r1",
            "{\"command_id\":\"x9\",\"uid\":1,\"to_uid\":7,\"gift_id\":\"g\",\"count\":1,"
            "\"unit_price\":1}",
            409, "not_member");
    refused(f, CMD_SEND_GIFT, "r1",
            "{\"command_id\":\"x10\",\"uid\":1,\"to_uid\":2,\"gift_id\":\"g\",\"count\":2,"
            "\"unit_price\":600}",
            402, "insufficient_balance");
    refused(f, CMD_KICK_USER, "r1", "{\"command_id\":\"x11\",\"operator_uid\":2,\"uid\":1}", 409,
            "forbidden");
    ok(f, CMD_KICK_USER, "r1", "{\"command_id\":\"k1\",\"operator_uid\":1,\"uid\":2}");
    rows = outbox_rows(f);
    refused(f, CMD_JOIN_ROOM, "r1", "{\"command_id\":\"x12\",\"uid\":2}", 409, "banned");
    refused(f, CMD_CLOSE_ROOM, "r1", "{\"command_id\":\"x13\",\"operator_uid\":2}", 409,
            "forbidden");
    ok(f, CMD_CLOSE_ROOM, "r1", "{\"command_id\":\"close\",\"operator_uid\":1}");
    refused(f, CMD_JOIN_ROOM, "r1", "{\"command_id\":\"x14\",\"uid\":5}", 409, "room_closed");
    /* refusals wrote nothing */
    assert_int_equal(outbox_rows(f), rows + 1);
    for (int i = 1; i <= 14; i++) {
        char id[16];
        snprintf(id, sizeof(id), "x%d", i);
        assert_false(logged(f, id));
    }
}

/* room.max_rooms_per_owner: a CreateRoom past it is 429 too_many_rooms with
 * Retry-After, writes nothing, leaves no cell; closing a room frees a slot;
 * the limit is per owner. */
static void
test_max_rooms_per_owner(void **state)
{
    struct fx *f = *state;
    struct room_reply r = {0};
    size_t rows;

    f->conf->room.max_rooms_per_owner = 2;
    svc_open(f);
    create(f, "o1", 5);
    create(f, "o2", 5);
    rows = outbox_rows(f);
    refused(f, CMD_CREATE_ROOM, NULL,
            "{\"command_id\":\"o3\",\"room_id\":\"o3\",\"owner_uid\":5,\"title\":\"t\"}", 429,
            "too_many_rooms");
    assert_int_equal(run(f, CMD_CREATE_ROOM, NULL,
                         "{\"command_id\":\"o3\",\"room_id\":\"o3\",\"owner_uid\":5,"
                         "\"title\":\"t\"}",
                         &r),
                     429);
    assert_int_equal(r.retry_after, 60);
    assert_non_null(strstr(r.body, "room.max_rooms_per_owner (2)"));
    assert_int_equal(outbox_rows(f), rows);
    assert_false(logged(f, "o3"));
    assert_int_equal(room_service_cells(f->svc), 2);
    room_reply_clear(&r);
    room_service_get(f->svc, APP, "o3", NULL, &r);
    assert_int_equal(r.status, 404);
    create(f, "o4", 6); /* another owner */
    ok(f, CMD_CLOSE_ROOM, "o1", "{\"command_id\":\"close-o1\",\"operator_uid\":5}");
    create(f, "o3", 5);
    room_reply_clear(&r);
}

static void
test_idempotency(void **state)
{
    struct fx *f = *state;
    struct room_reply r = {0};
    char *first, *gen_room, *before, *after;
    const char *gift = "{\"command_id\":\"g1\",\"uid\":2,\"to_uid\":1,\"gift_id\":\"rose\","
                       "\"count\":1,\"unit_price\":30}";
    json_t *j;
    int64_t bal;
    size_t rows;

    svc_open(f);
    create(f, "r1", 1);
    join(f, "r1", 1);
    join(f, "r1", 2);
    assert_int_equal(run(f, CMD_SEND_GIFT, "r1", gift, &r), 200);
    assert_false(r.replay);
    first = xstrdup(r.body);
    rows = outbox_rows(f);
    before = get_room(f, "r1");
    /* the same command again: the first answer, flagged, nothing new written or charged.
     * It is applied to a clone and refused by the log's unique key at commit: the
     * cell's state stays as it was (no second gift_total, no version) */
    assert_int_equal(run(f, CMD_SEND_GIFT, "r1", gift, &r), 200);
    assert_true(r.replay);
    assert_string_equal(r.body, first);
    assert_int_equal(outbox_rows(f), rows);
    after = get_room(f, "r1");
    assert_string_equal(before, after);
    free(before);
    free(after);
    /* then the room goes on from the state before the replay */
    join(f, "r1", 7);
    assert_int_equal(f->wallet->ops->balance(f->wallet, APP, 2, &bal), 0);
    assert_int_equal(bal, 970);
    /* same id, other body: 409 */
    refused(f, CMD_SEND_GIFT, "r1",
            "{\"command_id\":\"g1\",\"uid\":2,\"to_uid\":1,\"gift_id\":\"rose\",\"count\":2,"
            "\"unit_price\":30}",
            409, "idempotency_key_reused");
    refused(f, CMD_JOIN_ROOM, "r1", "{\"command_id\":\"g1\",\"uid\":3}", 409,
            "idempotency_key_reused");
    /* refused before the commit (no such room): still the log's answer */
    refused(f, CMD_JOIN_ROOM, "nowhere", "{\"command_id\":\"g1\",\"uid\":3}", 409,
            "idempotency_key_reused");
    /* a create without room_id, retried: the same (generated) room */
    assert_int_equal(run(f, CMD_CREATE_ROOM, NULL,
                         "{\"command_id\":\"cg\",\"owner_uid\":4,\"title\":\"gen\"}", &r),
                     200);
    j = json_loads(r.body, 0, NULL);
    gen_room = xstrdup(json_string_value(json_object_get(j, "room_id")));
    json_decref(j);
    assert_int_equal(run(f, CMD_CREATE_ROOM, NULL,
                         "{\"command_id\":\"cg\",\"owner_uid\":4,\"title\":\"gen\"}", &r),
                     200);
    assert_true(r.replay);
    assert_non_null(strstr(r.body, gen_room));
    refused(f, CMD_CREATE_ROOM, NULL, "{\"command_id\":\"cg\",\"owner_uid\":4,\"title\":\"other\"}",
            409, "idempotency_key_reused");

    /* restart: the log still answers, and the state reloads the same */
    before = get_room(f, "r1");
    svc_close(f);
    svc_open(f);
    assert_int_equal(room_service_cells(f->svc), 0);
    assert_int_equal(run(f, CMD_SEND_GIFT, "r1", gift, &r), 200);
    assert_true(r.replay);
    assert_string_equal(r.body, first);
    after = get_room(f, "r1");
    assert_string_equal(before, after);
    assert_int_equal(f->wallet->ops->balance(f->wallet, APP, 2, &bal), 0);
    assert_int_equal(bal, 970);
    room_reply_clear(&r);
    free(first);
    free(gen_room);
    free(before);
    free(after);
}

static void
test_atomicity(void **state)
{
    struct fx *f = *state;
    char *before, *after;
    size_t rows;
    int64_t bal;

    svc_open(f);
    create(f, "r1", 1);
    join(f, "r1", 1);
    join(f, "r1", 2);
    before = get_room(f, "r1");
    rows = outbox_rows(f);
    store_fail_next_saves(1);
    refused(f, CMD_MIC_UP, "r1", "{\"command_id\":\"m1\",\"uid\":2}", 503, "unavailable");
    assert_false(logged(f, "m1"));
    assert_int_equal(outbox_rows(f), rows);
    after = get_room(f, "r1");
    assert_string_equal(before, after);
    free(after);
    /* a gift whose commit fails is refunded */
    store_fail_next_saves(1);
    refused(f, CMD_SEND_GIFT, "r1",
            "{\"command_id\":\"g1\",\"uid\":2,\"to_uid\":1,\"gift_id\":\"rose\",\"count\":1,"
            "\"unit_price\":30}",
            503, "unavailable");
    assert_int_equal(f->wallet->ops->balance(f->wallet, APP, 2, &bal), 0);
    assert_int_equal(bal, 1000);
    assert_false(logged(f, "g1"));
    assert_int_equal(outbox_rows(f), rows);
    after = get_room(f, "r1");
    assert_string_equal(before, after);
    free(after);
    /* the next command works, and the same command_id may now be used */
    assert_int_equal(ok(f, CMD_MIC_UP, "r1", "{\"command_id\":\"m1\",\"uid\":2}"), 4);
    assert_int_equal(outbox_rows(f), rows + 1);
    /* and a restart agrees with memory */
    free(before);
    before = get_room(f, "r1");
    svc_close(f);
    svc_open(f);
    after = get_room(f, "r1");
    assert_string_equal(before, after);
    free(before);
    free(after);
}

#define NTHREADS 6
#define PER_THREAD 40

struct worker {
    struct fx *f;
    int id;
    int64_t versions[PER_THREAD * 2];
    int n;
    int failures;
};

/* Each thread joins and leaves its own uids on room "hot" and on its own room. */
static void *
worker_main(void *arg)
{
    struct worker *w = arg;
    char body[128], room[32];
    struct room_reply r = {0};

    snprintf(room, sizeof(room), "own%d", w->id);
    for (int i = 0; i < PER_THREAD; i++) {
        int64_t uid = 1000 * (w->id + 1) + i;
        struct room_cmd cmd;
        struct cmd_error e;
        json_t *j;

        snprintf(body, sizeof(body), "{\"command_id\":\"t%d-%d\",\"uid\":%lld}", w->id, i,
                 (long long)uid);
        if (room_cmd_parse(CMD_JOIN_ROOM, APP, "hot", body, strlen(body), &cmd, &e) != 0)
            abort();
        room_service_execute(w->f->svc, &cmd, &r);
        room_cmd_clear(&cmd);
        if (r.status != 200) {
            w->failures++;
        } else {
            j = json_loads(r.body, 0, NULL);
            w->versions[w->n++] = json_integer_value(json_object_get(j, "version"));
            json_decref(j);
        }
        room_reply_clear(&r);
        snprintf(body, sizeof(body), "{\"command_id\":\"o%d-%d\",\"uid\":%lld}", w->id, i,
                 (long long)uid);
        if (room_cmd_parse(CMD_JOIN_ROOM, APP, room, body, strlen(body), &cmd, &e) != 0)
            abort();
        room_service_execute(w->f->svc, &cmd, &r);
        room_cmd_clear(&cmd);
        if (r.status != 200)
            w->failures++;
        room_reply_clear(&r);
    }
    return NULL;
}

static void
test_concurrency(void **state)
{
    struct fx *f = *state;
    struct worker w[NTHREADS];
    pthread_t th[NTHREADS];
    char room[32], *before, *after;
    bool seen[NTHREADS * PER_THREAD + 2] = {0};
    json_t *j;

    f->conf->room.max_members = NTHREADS * PER_THREAD + 1;
    svc_open(f);
    create(f, "hot", 1);
    for (int i = 0; i < NTHREADS; i++) {
        snprintf(room, sizeof(room), "own%d", i);
        create(f, room, 1);
    }
    memset(w, 0, sizeof(w));
    for (int i = 0; i < NTHREADS; i++) {
        w[i].f = f;
        w[i].id = i;
        assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(th[i], NULL);
    /* every command applied once, each on its own version, per thread in order */
    for (int i = 0; i < NTHREADS; i++) {
        assert_int_equal(w[i].failures, 0);
        for (int k = 0; k < w[i].n; k++) {
            int64_t v = w[i].versions[k];
            assert_true(v >= 2 && v <= NTHREADS * PER_THREAD + 1);
            assert_false(seen[v]);
            seen[v] = true;
            if (k > 0)
                assert_true(v > w[i].versions[k - 1]);
        }
    }
    before = get_room(f, "hot");
    j = json_loads(before, 0, NULL);
    assert_int_equal(json_integer_value(json_object_get(j, "version")), NTHREADS * PER_THREAD + 1);
    assert_int_equal(json_integer_value(json_object_get(j, "member_count")), NTHREADS * PER_THREAD);
    assert_int_equal(json_array_size(json_object_get(j, "members")), NTHREADS * PER_THREAD);
    json_decref(j);
    {
        /* a command's answer carries the room's summary (no member list,
         * docs/http.md), the one stored in the log and replayed byte for
         * byte; GET lists every member */
        struct room_reply r = {0};
        struct command_record rec = {0};
        json_t *rj;
        char *first;
        const char *big = "{\"command_id\":\"big\",\"uid\":1}";
        assert_int_equal(run(f, CMD_JOIN_ROOM, "hot", big, &r), 200);
        j = json_loads(r.body, 0, NULL);
        rj = json_object_get(j, "room");
        assert_null(json_object_get(rj, "members"));
        assert_null(json_object_get(rj, "bans"));
        assert_int_equal(json_integer_value(json_object_get(rj, "member_count")),
                         NTHREADS * PER_THREAD + 1);
        json_decref(j);
        assert_int_equal(store_find_command(f->store, APP, "big", &rec), 0);
        assert_string_equal(rec.response, r.body);
        /* its size does not grow with the room: ~0.5 KB here (bench/log_row.py) */
        assert_true(strlen(rec.request) + strlen(rec.response) < 1024);
        command_record_clear(&rec);
        first = r.body;
        r.body = NULL;
        assert_int_equal(run(f, CMD_JOIN_ROOM, "hot", big, &r), 200);
        assert_true(r.replay);
        assert_string_equal(r.body, first);
        free(first);
        room_reply_clear(&r);
        free(before);
        before = get_room(f, "hot");
    }
    /* the log (snapshots every 5 + tail) replays to the same state */
    svc_close(f);
    svc_open(f);
    after = get_room(f, "hot");
    assert_string_equal(before, after);
    free(before);
    free(after);
}

struct same {
    struct fx *f;
    enum room_cmd_type type;
    const char *body;
    int status;
    bool replay;
    char *reply;
};

static void *
same_main(void *arg)
{
    struct same *s = arg;
    struct room_reply r = {0};

    run(s->f, s->type, "r1", s->body, &r);
    s->status = r.status;
    s->replay = r.replay;
    s->reply = r.body;
    r.body = NULL;
    room_reply_clear(&r);
    return NULL;
}

/* Concurrent retries of one command: one applies, the others replay it. */
static void
race_same(struct fx *f, enum room_cmd_type type, const char *body)
{
    struct same s[NTHREADS];
    pthread_t th[NTHREADS];
    int fresh = 0;

    for (int i = 0; i < NTHREADS; i++) {
        s[i] = (struct same){.f = f, .type = type, .body = body};
        assert_int_equal(pthread_create(&th[i], NULL, same_main, &s[i]), 0);
    }
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < NTHREADS; i++) {
        if (s[i].status != 200)
            fail_msg("%s: %d %s", body, s[i].status, s[i].reply);
        if (!s[i].replay)
            fresh++;
        assert_string_equal(s[i].reply, s[0].reply);
    }
    assert_int_equal(fresh, 1);
    for (int i = 0; i < NTHREADS; i++)
        free(s[i].reply);
}

static void
test_concurrent_retries(void **state)
{
    struct fx *f = *state;
    int64_t bal;
    size_t rows;

    svc_open(f);
    race_same(f, CMD_CREATE_ROOM,
              "{\"command_id\":\"c\",\"room_id\":\"r1\",\"owner_uid\":1,\"title\":\"t\"}");
    race_same(f, CMD_JOIN_ROOM, "{\"command_id\":\"j1\",\"uid\":1}");
    race_same(f, CMD_JOIN_ROOM, "{\"command_id\":\"j2\",\"uid\":2}");
    race_same(f, CMD_MIC_UP, "{\"command_id\":\"m2\",\"uid\":2}");
    rows = outbox_rows(f);
    race_same(f, CMD_SEND_GIFT,
              "{\"command_id\":\"g\",\"uid\":2,\"to_uid\":1,\"gift_id\":\"rose\",\"count\":1,"
              "\"unit_price\":50}");
    assert_int_equal(outbox_rows(f), rows + 1);
    assert_int_equal(f->wallet->ops->balance(f->wallet, APP, 2, &bal), 0);
    assert_int_equal(bal, 950); /* charged once */
}

/* Two services on one database each think they own r1: the one committing on
 * a stale state is fenced (503), drops its cell, and reloads on the next command. */
static void
test_fenced_commit_reloads(void **state)
{
    struct fx *f = *state;
    struct room_service *other;
    struct room_deps d;
    struct room_cmd cmd;
    struct cmd_error e;
    struct room_reply r = {0};
    const char *body = "{\"command_id\":\"j6\",\"uid\":6}";
    char *a;

    svc_open(f);
    memset(&d, 0, sizeof(d));
    d.conf = f->conf;
    d.store = f->store;
    d.gc = f->gc;
    d.wallet = f->wallet;
    d.lease = f->lease;
    assert_int_equal(room_service_open(&other, &d), 0);
    create(f, "r1", 1);
    a = get_room(f, "r1");
    free(a);
    {
        /* the other service loads r1 at version 1 */
        room_service_get(other, APP, "r1", NULL, &r);
        assert_int_equal(r.status, 200);
        room_reply_clear(&r);
    }
    join(f, "r1", 5); /* version 2, through the first service */
    assert_int_equal(room_cmd_parse(CMD_JOIN_ROOM, APP, "r1", body, strlen(body), &cmd, &e), 0);
    room_service_execute(other, &cmd, &r);
    assert_int_equal(r.status, 503);
    assert_non_null(strstr(r.body, "fenced"));
    assert_false(logged(f, "j6"));
    room_reply_clear(&r);
    /* the next try reloads and succeeds on top of version 2 */
    room_service_execute(other, &cmd, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"version\":3"));
    room_cmd_clear(&cmd);
    room_reply_clear(&r);
    room_service_close(other);
}

static void
test_eviction(void **state)
{
    struct fx *f = *state;
    char *before, *after;
    int waited = 0;

    f->conf->room.idle_evict_ms = 100;
    f->conf->room.member_idle_timeout_ms = 0; /* else members' clocks keep the cell (below) */
    svc_open(f);
    create(f, "r1", 1);
    join(f, "r1", 1);
    join(f, "r1", 2);
    before = get_room(f, "r1");
    assert_int_equal(room_service_cells(f->svc), 1);
    while (room_service_cells(f->svc) > 0 && waited < 5000) {
        usleep(20000);
        waited += 20;
    }
    assert_int_equal(room_service_cells(f->svc), 0);
    /* reload on demand: the same state, and commands go on from there */
    after = get_room(f, "r1");
    assert_string_equal(before, after);
    assert_int_equal(room_service_cells(f->svc), 1);
    assert_int_equal(ok(f, CMD_MIC_UP, "r1", "{\"command_id\":\"m1\",\"uid\":2}"), 4);
    free(before);
    free(after);
}

/* The room's version, and the id and type of its last log row (the store's). */
static int64_t
last_logged(struct fx *f, const char *room, char *id, size_t idlen, char *type, size_t typelen)
{
    struct room_load l;
    int64_t v;

    memset(&l, 0, sizeof(l));
    assert_int_equal(store_load_room(f->store, APP, room, &l), 0);
    v = l.version;
    id[0] = type[0] = '\0';
    if (l.ntail > 0) {
        strlcpy_(id, l.tail[l.ntail - 1].command_id, idlen);
        strlcpy_(type, l.tail[l.ntail - 1].command_type, typelen);
    }
    room_load_clear(&l);
    return v;
}

/* A heartbeat's answer status (room_service_heartbeat). */
static int
heartbeat(struct fx *f, const char *room, int64_t uid)
{
    struct room_reply r = {0};
    int st;

    room_service_heartbeat(f->svc, APP, room, uid, NULL, &r);
    st = r.status;
    room_reply_clear(&r);
    return st;
}

/* Presence: a member silent for room.member_idle_timeout leaves by roomd's
 * own LeaveRoom (reserved id, reason idle, its seat freed), a heartbeating
 * one and one sending commands stay; heartbeats write nothing; the cell of
 * a room with members' clocks is not evicted until they left. */
static void
test_presence_expiry(void **state)
{
    struct fx *f = *state;
    char *room, id[STORE_ID_MAX], type[32];

    f->conf->room.idle_evict_ms = 50;
    f->conf->room.member_idle_timeout_ms = 300;
    svc_open(f);
    create(f, "r1", 1);
    join(f, "r1", 1);
    join(f, "r1", 2);
    join(f, "r1", 3);
    assert_int_equal(ok(f, CMD_MIC_UP, "r1", "{\"command_id\":\"m2\",\"uid\":2}"), 5);
    assert_int_equal(heartbeat(f, "r1", 9), 409);     /* no member */
    assert_int_equal(heartbeat(f, "nosuch", 1), 404); /* no room */
    for (int i = 0; i < 12; i++) {                    /* 600 ms: 2 is silent, 3 speaks */
        assert_int_equal(heartbeat(f, "r1", 1), 200);
        if (i % 3 == 0) {
            char body[64];
            struct room_reply r = {0};
            snprintf(body, sizeof(body), "{\"command_id\":\"d%d\",\"uid\":3}", i);
            assert_int_equal(run(f, CMD_MIC_DOWN, "r1", body, &r), 409); /* not on mic */
            room_reply_clear(&r);
        }
        usleep(50000);
    }
    room = get_room(f, "r1");
    assert_non_null(strstr(room, "\"members\":[{\"joined_at_ms\""));
    assert_null(strstr(room, "\"uid\":2}"));
    assert_non_null(strstr(room, "\"seats\":[0,0,0]"));
    free(room);
    assert_int_equal(heartbeat(f, "r1", 2), 409);
    /* one leave (v6): the heartbeats wrote nothing */
    assert_int_equal(last_logged(f, "r1", id, sizeof(id), type, sizeof(type)), 6);
    assert_int_equal(strncmp(id, "~il-2-", 6), 0);
    assert_string_equal(type, "LeaveRoom");
    assert_int_equal(room_service_cells(f->svc), 1); /* clocks run: not evicted */
    /* everyone silent now: 1 and 3 leave, then the cell may go */
    for (int waited = 0; room_service_cells(f->svc) > 0 && waited < 5000; waited += 20)
        usleep(20000);
    assert_int_equal(room_service_cells(f->svc), 0);
    assert_int_equal(last_logged(f, "r1", id, sizeof(id), type, sizeof(type)), 8);
    assert_int_equal(strncmp(id, "~il-", 4), 0);
}

static void
test_snapshot_replay(void **state)
{
    struct fx *f = *state;
    char body[160], *before, *after;
    struct room_load l;

    svc_open(f);
    create(f, "r1", 1);
    for (int i = 1; i <= 9; i++)
        join(f, "r1", i);
    for (int i = 1; i <= 3; i++) {
        snprintf(body, sizeof(body), "{\"command_id\":\"m%d\",\"uid\":%d}", i, i);
        ok(f, CMD_MIC_UP, "r1", body);
    }
    for (int i = 0; i < 5; i++) {
        snprintf(body, sizeof(body),
                 "{\"command_id\":\"g%d\",\"uid\":%d,\"to_uid\":1,\"gift_id\":\"rose\","
                 "\"count\":1,\"unit_price\":7}",
                 i, 2 + i);
        ok(f, CMD_SEND_GIFT, "r1", body);
    }
    ok(f, CMD_KICK_USER, "r1", "{\"command_id\":\"k\",\"operator_uid\":1,\"uid\":3}");
    ok(f, CMD_LEAVE_ROOM, "r1", "{\"command_id\":\"l\",\"uid\":2}");
    /* version 1 + 9 + 3 + 5 + 1 + 1 = 20: a snapshot at 20, an empty tail; one more */
    assert_int_equal(ok(f, CMD_MIC_DOWN, "r1", "{\"command_id\":\"d\",\"uid\":1}"), 21);
    memset(&l, 0, sizeof(l));
    assert_int_equal(store_load_room(f->store, APP, "r1", &l), 0);
    assert_int_equal(l.snapshot_version, 20);
    assert_int_equal(l.ntail, 1);
    room_load_clear(&l);
    before = get_room(f, "r1");
    svc_close(f);
    svc_open(f);
    after = get_room(f, "r1");
    assert_string_equal(before, after);
    free(before);
    free(after);
}

/* A config change and a restart: every room replays to exactly what it was
 * (its log rows carry the rules they ran with), and the next command takes
 * the new rules. */
static void
test_config_change_replay(void **state)
{
    struct fx *f = *state;
    char *r1, *r2, *again;

    svc_open(f);
    create(f, "r1", 1);
    for (int i = 1; i <= 3; i++)
        join(f, "r1", i);
    ok(f, CMD_MIC_UP, "r1", "{\"command_id\":\"m1\",\"uid\":3,\"seat\":2}"); /* v5: snapshot */
    join(f, "r1", 4);
    ok(f, CMD_MIC_UP, "r1", "{\"command_id\":\"m2\",\"uid\":4,\"seat\":1}");
    create(f, "r2", 1); /* no snapshot: its whole log replays */
    join(f, "r2", 2);
    ok(f, CMD_MIC_UP, "r2", "{\"command_id\":\"m3\",\"uid\":2,\"seat\":2}");
    r1 = get_room(f, "r1");
    r2 = get_room(f, "r2");
    svc_close(f);

    f->conf->room.seat_count = 1;
    f->conf->room.max_members = 1;
    f->conf->room.rocket.thresholds[0] = 1;
    svc_open(f);
    again = get_room(f, "r1");
    assert_string_equal(again, r1);
    free(again);
    again = get_room(f, "r2");
    assert_string_equal(again, r2);
    free(again);
    /* the next command runs with the new rules; the room keeps its seats */
    refused(f, CMD_JOIN_ROOM, "r1", "{\"command_id\":\"j9\",\"uid\":9}", 409, "room_full");
    ok(f, CMD_MIC_DOWN, "r2", "{\"command_id\":\"d1\",\"uid\":2}");
    ok(f, CMD_MIC_UP, "r2", "{\"command_id\":\"m4\",\"uid\":2,\"seat\":2}");
    free(r2);
    r2 = get_room(f, "r2");
    assert_non_null(strstr(r2, "\"max_members\":1"));
    svc_close(f);

    f->conf->room.seat_count = 8;
    f->conf->room.max_members = 50;
    svc_open(f);
    again = get_room(f, "r2");
    assert_string_equal(again, r2);
    free(again);
    join(f, "r2", 5); /* 50 again */
    free(r1);
    free(r2);
}

/* Polls GET until the rocket's "launched" count reaches want (or 5 s). */
static json_t *
wait_launched(struct fx *f, const char *room, int want)
{
    for (int i = 0; i < 250; i++) {
        char *s = get_room(f, room);
        json_t *j = json_loads(s, 0, NULL);
        free(s);
        if (json_integer_value(json_object_get(json_object_get(j, "rocket"), "launched")) >= want)
            return j;
        json_decref(j);
        usleep(20000);
    }
    fail_msg("rocket of %s did not launch", room);
    return NULL;
}

static void
test_rocket_timer(void **state)
{
    struct fx *f = *state;
    struct room_reply r = {0};
    struct command_record rec;
    char rocket_id[64], cid[80], body[256];
    json_t *j, *rk;
    int64_t launch_at;

    f->timer = true;
    f->conf->room.rocket.countdown_ms = 300;
    svc_open(f);
    create(f, "r1", 1);
    join(f, "r1", 1);
    join(f, "r1", 2);
    assert_int_equal(run(f, CMD_SEND_GIFT, "r1",
                         "{\"command_id\":\"g1\",\"uid\":2,\"to_uid\":1,\"gift_id\":\"rose\","
                         "\"count\":10,\"unit_price\":10}",
                         &r),
                     200);
    assert_non_null(strstr(r.body, "RoomRocketIgnited"));
    j = json_loads(r.body, 0, NULL);
    rk = json_object_get(json_object_get(j, "room"), "rocket");
    strlcpy_(rocket_id, json_string_value(json_object_get(rk, "rocket_id")), sizeof(rocket_id));
    launch_at = json_integer_value(json_object_get(rk, "launch_at_ms"));
    json_decref(j);
    assert_int_equal(room_service_rockets_pending(f->svc), 1);

    j = wait_launched(f, "r1", 1);
    rk = json_object_get(j, "rocket");
    assert_int_equal(json_integer_value(json_object_get(rk, "level")), 2);
    assert_string_equal(json_string_value(json_object_get(rk, "status")), "idle");
    assert_int_equal(json_integer_value(json_object_get(j, "version")), 5);
    json_decref(j);
    snprintf(cid, sizeof(cid), "~rl-%s", rocket_id);
    memset(&rec, 0, sizeof(rec));
    assert_int_equal(store_find_command(f->store, APP, cid, &rec), 0);
    assert_string_equal(rec.command_type, "LaunchRocket");
    command_record_clear(&rec);

    /* a repeated wake-up gets the logged answer; a stale one changes nothing */
    snprintf(body, sizeof(body),
             "{\"command_id\":\"%s\",\"rocket_id\":\"%s\",\"level\":1,\"launch_at_ms\":%lld}", cid,
             rocket_id, (long long)launch_at);
    assert_int_equal(run(f, CMD_LAUNCH_ROCKET, "r1", body, &r), 200);
    assert_true(r.replay);
    snprintf(body, sizeof(body),
             "{\"command_id\":\"~rl-r1-1-9\",\"rocket_id\":\"r1-1-9\",\"level\":9,"
             "\"launch_at_ms\":%lld}",
             (long long)launch_at);
    assert_int_equal(run(f, CMD_LAUNCH_ROCKET, "r1", body, &r), 200);
    assert_false(r.replay);
    assert_non_null(strstr(r.body, "\"launched\":false"));
    assert_false(logged(f, "~rl-r1-1-9"));
    room_reply_clear(&r);
}

static void
test_rocket_rebuild_and_reset(void **state)
{
    struct fx *f = *state;
    struct room_reply r = {0};
    json_t *j, *ev;

    f->timer = true;
    f->conf->room.rocket.countdown_ms = 700;
    svc_open(f);
    create(f, "r1", 1);
    join(f, "r1", 1);
    join(f, "r1", 2);
    ok(f, CMD_SEND_GIFT, "r1",
       "{\"command_id\":\"g1\",\"uid\":2,\"to_uid\":1,\"gift_id\":\"rose\",\"count\":5,"
       "\"unit_price\":20}");
    /* restart before launch_at: the timer is rebuilt from the store */
    svc_close(f);
    svc_open(f);
    assert_int_equal(room_service_rockets_pending(f->svc), 1);
    j = wait_launched(f, "r1", 1);
    json_decref(j);

    /* the next UTC day: the first command resets the rocket first */
    clock_set_offset_ms(86400000);
    assert_int_equal(run(f, CMD_SEND_GIFT, "r1",
                         "{\"command_id\":\"g2\",\"uid\":2,\"to_uid\":1,\"gift_id\":\"rose\","
                         "\"count\":1,\"unit_price\":1}",
                         &r),
                     200);
    j = json_loads(r.body, 0, NULL);
    ev = json_object_get(j, "events");
    assert_int_equal(json_array_size(ev), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(ev, 0), "event_type")),
                        "RoomRocketReset");
    assert_string_equal(json_string_value(json_object_get(json_array_get(ev, 1), "event_type")),
                        "RoomGiftSent");
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(json_object_get(j, "room"), "rocket"), "level")),
                     1);
    json_decref(j);
    room_reply_clear(&r);
    /* and the reset replays after a restart */
    {
        char *before = get_room(f, "r1"), *after;
        svc_close(f);
        svc_open(f);
        after = get_room(f, "r1");
        assert_string_equal(before, after);
        free(before);
        free(after);
    }
}

static void
test_timing_log(void **state)
{
    struct fx *f = *state;
    static const char *const fields[] = {"command",
                                         "app_code",
                                         "room_id",
                                         "command_id",
                                         "result",
                                         "status",
                                         "total_ms",
                                         "idempotency_ms",
                                         "lease_ms",
                                         "wallet_debit_ms",
                                         "save_mutation_ms",
                                         "snapshot_ms",
                                         "projection_ms",
                                         "activity_ms",
                                         "tencent_im_ms",
                                         "activity_async_outbox",
                                         "tencent_im_async_outbox",
                                         "forwarded"};
    FILE *fp;
    char line[4096];
    int n = 0, gifts = 0, failed = 0, snapshots = 0;

    /* the activity sink on, IM off: each flag follows its own sink (issue 26) */
    f->conf->activity.enabled = true;
    f->conf->tencent_im.enabled = false;
    f->conf->outbox_worker.publish_mode = PUBLISH_DIRECT;
    f->conf->room.snapshot_every_n = 5;
    svc_open(f);
    create(f, "r1", 1);
    join(f, "r1", 1);
    join(f, "r1", 2);
    ok(f, CMD_MIC_UP, "r1", "{\"command_id\":\"m\",\"uid\":2}");
    ok(f, CMD_SEND_GIFT, "r1",
       "{\"command_id\":\"g\",\"uid\":2,\"to_uid\":1,\"gift_id\":\"rose\",\"count\":1,"
       "\"unit_price\":5}");
    ok(f, CMD_LEAVE_ROOM, "r1", "{\"command_id\":\"l\",\"uid\":2}");
    refused(f, CMD_LEAVE_ROOM, "r1", "{\"command_id\":\"l2\",\"uid\":2}", 409, "not_member");
    svc_close(f);

    fp = fopen(f->log_path, "r");
    assert_non_null(fp);
    while (fgets(line, sizeof(line), fp) != NULL) {
        json_t *j = json_loads(line, 0, NULL);
        if (j == NULL || json_object_get(j, "msg") == NULL ||
            strcmp(json_string_value(json_object_get(j, "msg")), "room_command_timing") != 0) {
            json_decref(j);
            continue;
        }
        n++;
        for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
            if (json_object_get(j, fields[i]) == NULL)
                fail_msg("timing line lacks %s: %s", fields[i], line);
        assert_true(json_is_false(json_object_get(j, "tencent_im_async_outbox")));
        assert_true(json_is_false(json_object_get(j, "forwarded")));
        assert_true(json_number_value(json_object_get(j, "total_ms")) > 0);
        if (json_integer_value(json_object_get(j, "status")) < 300) {
            /* a new command: the idempotency check is its log row's unique key, timed */
            assert_true(json_number_value(json_object_get(j, "idempotency_ms")) > 0);
            assert_true(json_is_true(json_object_get(j, "activity_async_outbox")));
        }
        /* version 5 (the leave) hits snapshot_every_n: built + persisted */
        if (json_number_value(json_object_get(j, "snapshot_ms")) > 0)
            snapshots++;
        assert_true(json_number_value(json_object_get(j, "activity_ms")) == 0);
        if (strcmp(json_string_value(json_object_get(j, "command")), "SendGift") == 0) {
            gifts++;
            assert_true(json_number_value(json_object_get(j, "wallet_debit_ms")) > 0);
            assert_true(json_is_true(json_object_get(j, "activity_async_outbox")));
        }
        if (strcmp(json_string_value(json_object_get(j, "result")), "not_member") == 0) {
            failed++;
            assert_int_equal(json_integer_value(json_object_get(j, "status")), 409);
            assert_true(json_is_false(json_object_get(j, "tencent_im_async_outbox")));
        }
        json_decref(j);
    }
    fclose(fp);
    assert_int_equal(n, 7);
    assert_int_equal(gifts, 1);
    assert_int_equal(failed, 1);
    assert_int_equal(snapshots, 1);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_happy_path, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rejections, setup, teardown),
        cmocka_unit_test_setup_teardown(test_max_rooms_per_owner, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idempotency, setup, teardown),
        cmocka_unit_test_setup_teardown(test_atomicity, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrency, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_retries, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fenced_commit_reloads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_eviction, setup, teardown),
        cmocka_unit_test_setup_teardown(test_presence_expiry, setup, teardown),
        cmocka_unit_test_setup_teardown(test_snapshot_replay, setup, teardown),
        cmocka_unit_test_setup_teardown(test_config_change_replay, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rocket_timer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rocket_rebuild_and_reset, setup, teardown),
        cmocka_unit_test_setup_teardown(test_timing_log, setup, teardown),
        cmocka_unit_test_setup_teardown(test_outbox_handoff, setup, teardown),
        cmocka_unit_test_setup_teardown(test_outbox_handoff_per_room, setup, teardown),
        cmocka_unit_test_setup_teardown(test_outbox_handoff_hold_back, setup, teardown),
        cmocka_unit_test_setup_teardown(test_outbox_handoff_full_and_failure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_outbox_handoff_close, setup, teardown),
        cmocka_unit_test_setup_teardown(test_outbox_handoff_gather, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
