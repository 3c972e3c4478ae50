/*
 * bench_bus.c: the outbox -> JetStream path, beside the raw nats.c rate of
 * the same messages, in one run (figures, no assertions):
 *   raw       js_PublishMsgAsync of N prebuilt envelopes (~300 B), MaxPending
 *             4096, one thread: what nats.c + nats-server do alone
 *   relay     N committed room_outbox rows (SQLite) delivered by the outbox
 *             worker (2 threads, batch 100) through the bus sink: rows/s
 *   batch     the same rows claimed and sent with the sink's publish_batch
 *             (2 threads, 100 a batch), completed in the store: rows/s
 *   latency   single-event commits at a fixed rate while the worker runs:
 *             commit end -> PubAck, p50/p99/max
 *
 *   bench_bus [N] [DIR] [RATE]   (N 20000, DIR ./var, RATE 500 commits/s)
 * nats-server at 127.0.0.1:$ROOMD_NATS_PORT (4333, scripts/servers.sh).
 */
#include "conf/conf.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/uuid.h"
#include "core/xmalloc.h"
#include "outbox/outbox.h"
#include "publish/bus.h"
#include "publish/sink_bus.h"
#include "room_events.pb-c.h"
#include "store/store.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GIFT_ID_PAD 200 /* makes the envelope about 300 bytes, as jetstream.md measured */

static int nmsgs = 20000;
static const char *dir = "./var";
static int rate = 500;
static struct conf *conf;

/* ==== rows ==== */

static uint8_t *
gift_payload(size_t *len)
{
    static char gift[GIFT_ID_PAD + 1];
    Roomd__V1__RoomGiftSent g = ROOMD__V1__ROOM_GIFT_SENT__INIT;

    memset(gift, 'g', GIFT_ID_PAD);
    g.uid = 1001;
    g.to_uid = 1002;
    g.gift_id = gift;
    g.count = 1;
    g.unit_price = 10;
    g.total = 10;
    *len = roomd__v1__room_gift_sent__get_packed_size(&g);
    uint8_t *b = xmalloc(*len);
    roomd__v1__room_gift_sent__pack(&g, b);
    return b;
}

/* Commits n mutations of one event each (100 per transaction). Returns the
 * wall time of each commit's end in ends (may be NULL). */
static void
commit_rows(struct store *st, int n, int first, int per_tx)
{
    size_t plen;
    uint8_t *payload = gift_payload(&plen);
    struct mutation *m = xcalloc((size_t)per_tx, sizeof(*m));
    struct outbox_new *ev = xcalloc((size_t)per_tx, sizeof(*ev));
    struct mutation **ms = xcalloc((size_t)per_tx, sizeof(*ms));

    for (int done = 0; done < n;) {
        int k = n - done < per_tx ? n - done : per_tx;
        int64_t now = clock_wall_ms();
        for (int i = 0; i < k; i++) {
            int id = first + done + i;
            memset(&m[i], 0, sizeof(m[i]));
            snprintf(m[i].app_code, sizeof(m[i].app_code), "bench");
            snprintf(m[i].room_id, sizeof(m[i].room_id), "room-%d", id);
            snprintf(m[i].command_id, sizeof(m[i].command_id), "cmd-%d", id);
            m[i].command_type = "CreateRoom";
            m[i].request = "{}";
            m[i].response = "{}";
            m[i].version = 1;
            m[i].create = true;
            m[i].created_at_ms = now;
            m[i].meta = (struct room_meta){.owner_uid = 1,
                                           .title = "bench",
                                           .status = "open",
                                           .version = 1,
                                           .rocket_status = "idle",
                                           .rocket_id = "",
                                           .created_at_ms = now,
                                           .updated_at_ms = now};
            uuid_v7(now, ev[i].event_id);
            ev[i].event_type = "RoomGiftSent";
            ev[i].payload = payload;
            ev[i].payload_len = plen;
            m[i].events = &ev[i];
            m[i].nevents = 1;
            ms[i] = &m[i];
        }
        if (store_save(st, ms, (size_t)k) != 0)
            fprintf(stderr, "store_save: %s\n", store_errmsg());
        done += k;
    }
    free(ms);
    free(ev);
    free(m);
    free(payload);
}

static struct store *
fresh_store(const char *name)
{
    struct store *st = NULL;
    char err[256];
    char *path = xasprintf("%s/%s", dir, name);
    char *wal = xasprintf("%s-wal", path), *shm = xasprintf("%s-shm", path);

    unlink(path);
    unlink(wal);
    unlink(shm);
    free(wal);
    free(shm);
    free(conf->store.sqlite.path);
    conf->store.sqlite.path = path;
    if (store_open(&st, &conf->store, err, sizeof(err)) != 0) {
        fprintf(stderr, "store_open: %s\n", err);
        exit(1);
    }
    return st;
}

static struct bus *
fresh_bus(const char *tag)
{
    struct bus *b = NULL;
    char err[256], ns[64];

    snprintf(ns, sizeof(ns), "bench_%s_%d_", tag, (int)getpid());
    free(conf->rocketmq.namespace_);
    conf->rocketmq.namespace_ = xstrdup(ns);
    if (bus_open(&b, &conf->rocketmq, "bench_bus", err, sizeof(err)) != 0 ||
        bus_ensure(b, err, sizeof(err)) != 0) {
        fprintf(stderr, "bus: %s\n", err);
        exit(1);
    }
    return b;
}

static void
drop_bus(struct bus *b)
{
    for (int i = 0; i < BUS_STREAM_COUNT_; i++)
        js_DeleteStream(bus_js(b), bus_stream_name(b, (enum bus_stream)i), NULL, NULL);
    bus_unref(b);
}

static void
report(const char *what, int n, int64_t us)
{
    printf("%-8s %7d msgs in %6.2f s: %9.0f msg/s\n", what, n, us / 1e6, n / (us / 1e6));
}

/* ==== raw ==== */

static atomic_int raw_acks, raw_errs;

static void
raw_ack(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *closure)
{
    (void)js;
    (void)pa;
    (void)closure;
    atomic_fetch_add(pae ? &raw_errs : &raw_acks, 1);
    natsMsg_Destroy(msg);
}

static double
run_raw(void)
{
    struct bus *b = fresh_bus("raw");
    size_t plen;
    uint8_t *payload = gift_payload(&plen);
    char subject[256], id[40];
    jsOptions jo;
    jsCtx *js = NULL;

    /* The same bytes the relay sends: a RoomOutboxEvent around the payload. */
    Roomd__V1__RoomOutboxEvent e = ROOMD__V1__ROOM_OUTBOX_EVENT__INIT;
    e.event_id = id;
    e.app_code = "bench";
    e.room_id = "room-000000";
    e.room_version = 1;
    e.event_type = "RoomGiftSent";
    e.occurred_at_ms = clock_wall_ms();
    e.command_id = "cmd-000000";
    e.payload.data = payload;
    e.payload.len = plen;
    uuid_v7(clock_wall_ms(), id);
    size_t elen = roomd__v1__room_outbox_event__get_packed_size(&e);
    uint8_t *env = xmalloc(elen);
    roomd__v1__room_outbox_event__pack(&e, env);
    printf("envelope %zu bytes\n", elen);

    jsOptions_Init(&jo);
    jo.PublishAsync.AckHandler = raw_ack;
    jo.PublishAsync.MaxPending = 4096;
    natsConnection_JetStream(&js, bus_nc(b), &jo);
    bus_subject(b, BUS_STREAM_OUTBOX, "RoomGiftSent", subject, sizeof(subject));
    int64_t t = clock_mono_us();
    for (int i = 0; i < nmsgs; i++) {
        natsMsg *m = NULL;
        jsPubOptions po;
        uuid_v7(clock_wall_ms(), id);
        jsPubOptions_Init(&po);
        po.MsgId = id;
        po.MaxWait = 10000;
        natsMsg_Create(&m, subject, NULL, (const char *)env, (int)elen);
        if (js_PublishMsgAsync(js, &m, &po) != NATS_OK) {
            natsMsg_Destroy(m);
            atomic_fetch_add(&raw_errs, 1);
        }
    }
    jsPubOptions wo;
    jsPubOptions_Init(&wo);
    wo.MaxWait = 30000;
    js_PublishAsyncComplete(js, &wo);
    int64_t us = clock_mono_us() - t;
    report("raw", nmsgs, us);
    if (atomic_load(&raw_errs))
        printf("         (%d errors)\n", atomic_load(&raw_errs));
    jsCtx_Destroy(js);
    free(env);
    free(payload);
    drop_bus(b);
    return nmsgs / (us / 1e6);
}

/* ==== relay through the outbox worker ==== */

static void
wait_delivered(struct store *st, int64_t want)
{
    struct outbox_counts c;

    for (;;) {
        if (store_outbox_counts(st, &c) == 0 && c.delivered >= want)
            return;
        usleep(2000);
    }
}

static double
run_relay(void)
{
    struct store *st = fresh_store("bench_bus_relay.db");
    struct bus *b = fresh_bus("relay");
    struct sink *s = NULL;
    struct outbox *ob = NULL;

    commit_rows(st, nmsgs, 0, 100);
    sink_bus_open(&s, b);
    int64_t t = clock_mono_us();
    if (outbox_open(&ob, &conf->outbox_worker, st, "bench", &s, 1) != 0)
        exit(1);
    outbox_wake(ob);
    wait_delivered(st, nmsgs);
    int64_t us = clock_mono_us() - t;
    report("relay", nmsgs, us);
    outbox_close(ob);
    store_close(st);
    drop_bus(b);
    return nmsgs / (us / 1e6);
}

/* ==== relay with publish_batch ==== */

static atomic_llong batch_pub_us;

struct batch_arg {
    struct store *st;
    struct sink *s;
    int id;
};

static void *
batch_worker(void *p)
{
    struct batch_arg *a = p;
    char locked_by[32];

    snprintf(locked_by, sizeof(locked_by), "bench/b%d", a->id);
    for (;;) {
        struct outbox_row *rows = NULL;
        size_t n = 0;
        int64_t now = clock_wall_ms();
        if (store_outbox_claim(a->st, now, now + 30000, locked_by, 100, &rows, &n) != 0 || n == 0) {
            outbox_rows_free(rows, n);
            return NULL;
        }
        struct outbox_event *evs = xcalloc(n, sizeof(*evs));
        struct outbox_result *res = xcalloc(n, sizeof(*res));
        int *rcs = xcalloc(n, sizeof(*rcs));
        char *errs = xcalloc(n, 256);
        for (size_t i = 0; i < n; i++) {
            uint8_t *env = NULL;
            size_t len = 0;
            char *json = NULL;
            outbox_event_build(&rows[i], &env, &len, &json);
            free(json);
            evs[i] = (struct outbox_event){.row = &rows[i], .envelope = env, .envelope_len = len};
        }
        int64_t t0 = clock_mono_us();
        a->s->publish_batch(a->s, evs, n, clock_mono_ms() + 5000, rcs, errs, 256);
        atomic_fetch_add(&batch_pub_us, clock_mono_us() - t0);
        for (size_t i = 0; i < n; i++) {
            res[i] =
                (struct outbox_result){.id = rows[i].id,
                                       .locked_by = locked_by,
                                       .status = rcs[i] == 0 ? OUTBOX_DELIVERED : OUTBOX_RETRYABLE,
                                       .sinks_done = rcs[i] == 0 ? SINK_BIT_BUS : 0,
                                       .retry_count = rcs[i] == 0 ? 0 : 1,
                                       .next_retry_at_ms = now,
                                       .last_error = rcs[i] == 0 ? NULL : errs + i * 256,
                                       .now_ms = clock_wall_ms()};
            free((void *)evs[i].envelope);
        }
        store_outbox_complete(a->st, res, n);
        free(errs);
        free(rcs);
        free(res);
        free(evs);
        outbox_rows_free(rows, n);
    }
}

static double
run_batch(void)
{
    struct store *st = fresh_store("bench_bus_batch.db");
    struct bus *b = fresh_bus("batch");
    struct sink *s = NULL;
    pthread_t th[2];
    struct batch_arg a[2];

    commit_rows(st, nmsgs, 0, 100);
    sink_bus_open(&s, b);
    int64_t t = clock_mono_us();
    for (int i = 0; i < 2; i++) {
        a[i] = (struct batch_arg){.st = st, .s = s, .id = i};
        pthread_create(&th[i], NULL, batch_worker, &a[i]);
    }
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    wait_delivered(st, nmsgs);
    int64_t us = clock_mono_us() - t;
    report("batch", nmsgs, us);
    printf("         (publish_batch calls: %.2f s of %.2f s thread time)\n",
           atomic_load(&batch_pub_us) / 1e6, 2 * us / 1e6);
    s->close(s);
    store_close(st);
    drop_bus(b);
    return nmsgs / (us / 1e6);
}

/* ==== commit -> PubAck latency ==== */

struct timing_sink {
    struct sink base;
    struct sink *inner;
    int64_t *commit_end_us; /* by room number */
    int64_t *lat_us;
    atomic_int nlat;
};

static int
timing_publish(struct sink *s, const struct outbox_event *ev, int64_t deadline, char *err,
               size_t errlen)
{
    struct timing_sink *t = (struct timing_sink *)s;
    int rc = t->inner->publish(t->inner, ev, deadline, err, errlen);
    if (rc == 0) {
        int k = atoi(ev->row->room_id + strlen("room-"));
        int i = atomic_fetch_add(&t->nlat, 1);
        t->lat_us[i] = clock_mono_us() - t->commit_end_us[k];
    }
    return rc;
}

static void
timing_close(struct sink *s)
{
    struct timing_sink *t = (struct timing_sink *)s;
    t->inner->close(t->inner);
}

static int
cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static void
run_latency(int secs)
{
    struct store *st = fresh_store("bench_bus_latency.db");
    struct bus *b = fresh_bus("lat");
    int n = rate * secs;
    struct timing_sink *t = xcalloc(1, sizeof(*t));
    struct outbox *ob = NULL;

    t->commit_end_us = xcalloc((size_t)n, sizeof(int64_t));
    t->lat_us = xcalloc((size_t)n, sizeof(int64_t));
    sink_bus_open(&t->inner, b);
    t->base = (struct sink){
        .name = "timing", .bit = SINK_BIT_BUS, .publish = timing_publish, .close = timing_close};
    struct sink *s = &t->base;
    if (outbox_open(&ob, &conf->outbox_worker, st, "bench", &s, 1) != 0)
        exit(1);
    int64_t start = clock_mono_us(), step = 1000000 / rate;
    for (int k = 0; k < n; k++) {
        int64_t due = start + k * step;
        int64_t now = clock_mono_us();
        if (due > now)
            usleep((useconds_t)(due - now));
        commit_rows(st, 1, k, 1);
        t->commit_end_us[k] = clock_mono_us();
        outbox_wake(ob);
    }
    wait_delivered(st, n);
    outbox_close(ob);
    int m = atomic_load(&t->nlat);
    qsort(t->lat_us, (size_t)m, sizeof(int64_t), cmp64);
    printf("latency  %d commits at %d/s: commit -> PubAck p50 %.2f ms, p99 %.2f ms, max %.2f ms\n",
           m, rate, t->lat_us[m / 2] / 1e3, t->lat_us[(m * 99) / 100] / 1e3,
           t->lat_us[m - 1] / 1e3);
    free(t->commit_end_us);
    free(t->lat_us);
    free(t);
    store_close(st);
    drop_bus(b);
}

int
main(int argc, char **argv)
{
    if (argc > 1)
        nmsgs = atoi(argv[1]);
    if (argc > 2)
        dir = argv[2];
    if (argc > 3)
        rate = atoi(argv[3]);
    conf = xcalloc(1, sizeof(*conf));
    conf_defaults(conf);
    log_open(NULL, LOG_WARN);
    const char *port = getenv("ROOMD_NATS_PORT");
    conf->rocketmq.enabled = true;
    conf->rocketmq.name_servers[0] =
        xasprintf("nats://127.0.0.1:%s", port && *port ? port : "4333");
    conf->rocketmq.nname_servers = 1;
    conf->rocketmq.send_timeout_ms = 5000;
    conf->rocketmq.room_outbox.enabled = true;
    conf->store.sqlite.synchronous_full = true;
    conf->outbox_worker.workers = 2;
    conf->outbox_worker.batch_size = 100;
    conf->outbox_worker.poll_interval_ms = 1000;
    conf->outbox_worker.publish_timeout_ms = 3000;
    conf->outbox_worker.lock_timeout_ms = 30000;

    printf("== bench_bus: %d messages, store in %s\n", nmsgs, dir);
    double raw = run_raw();
    double relay = run_relay();
    double batch = run_batch();
    printf("relay/raw %.2f, batch/raw %.2f\n", relay / raw, batch / raw);
    run_latency(5);
    conf_free(conf);
    bus_library_shutdown();
    return 0;
}
