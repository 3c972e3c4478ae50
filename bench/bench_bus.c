/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_bus.c: the outbox -> JetStream path, beside the raw nats.c rate of
 * the same messages, in one run (figures, no assertions; bench/README.md):
 *   raw       js_PublishMsgAsync of N prebuilt envelopes (~300 B), MaxPending
 *             4096, one thread: what nats.c + nats-server do alone
 *   relay     N committed pending rows (SQLite) delivered by the outbox worker
 *             (2 threads, batch 100) through the bus sink: the claim path
 *             (recovery, other processes' rows), with its split
 *             (claim / build / publish / complete)
 *   handoff   N rows committed 100 a transaction (as group commit does) and
 *             handed off to the workers as each transaction commits: the hot
 *             path, first commit -> last PubAck; and the commits alone
 *   latency   single-event commits at RATE/s through the hand-off steps of the
 *             command path (reserve, store_save, push), then with the hand-off
 *             off (pending rows, wake, claim): commit end -> PubAck
 *   service   room_service_execute (group commit, wallet, local lease) with
 *             SendGift: the maximum command rate (64 threads), then half of it
 *             paced: command start -> PubAck, hand-off on and off
 *
 *   bench_bus [N] [DIR] [RATE] [SECS]   (N 20000, DIR ./var, RATE 500/s, SECS 5)
 *   drivers   the relay (N rows, as relay) on each broker driver of the mq
 *             sink: JetStream and, with BENCH_RMQ_NAMESRV=host:port, RocketMQ
 *             (make bench: the stand-in of tests/standins, BENCH_RMQ_LABEL
 *             names it); then single-event commits at half that rate, SECS
 *             long: commit end -> PubAck / SEND_OK p50, p99
 *             (BENCH_DRIVERS_N rows instead of N; BENCH_NO_NATS=1: RocketMQ
 *             alone, no raw)
 *   BENCH_ONLY=relay,handoff,latency,service picks parts (raw always runs;
 *   drivers only when named);
 *   BENCH_WORKERS, BENCH_BATCH: outbox_worker.workers (2), batch_size (100);
 *   BENCH_CLAIM_BATCHES: outbox_worker.claim_batches (the default, 1: off);
 *   BENCH_ORDERING=none: outbox_worker.ordering none (else per_room, the default);
 *   BENCH_GATHER_MS: outbox_worker.complete_gather (the default, 20; 0 = off);
 *   BENCH_CPU_PIDS="mariadbd=PID,nats=PID": the relay prints the CPU time per
 *   row of this process and of those (/proc), over the drain.
 *   BENCH_STORE=mysql: the store is MariaDB at 127.0.0.1:$ROOMD_MYSQL_PORT (3417,
 *   root, no password), a fresh database per part, dropped at the end.
 * nats-server at 127.0.0.1:$ROOMD_NATS_PORT (4333, scripts/servers.sh).
 * "PubAck" time = when the sink's publish_batch returned (the last ack of
 * the row's batch), before the row's completion in the store.
 */
#include "bench.h"
#include "conf/conf.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/uuid.h"
#include "core/xmalloc.h"
#include "lease/lease.h"
#include "outbox/handoff.h"
#include "outbox/outbox.h"
#include "publish/bus.h"
#include "publish/sink.h"
#include "publish/sink_bus.h"
#include "rocketmq/client.h"
#include "rocketmq/sink.h"
#include "room/command.h"
#include "room/service.h"
#include "room_events.pb-c.h"
#include "store/group_commit.h"
#include "store/store.h"
#include "wallet/wallet.h"

#include <mysql.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define GIFT_ID_PAD 200 /* makes the envelope about 300 bytes, as jetstream.md measured */
#define SVC_THREADS 64
#define SVC_PACED_THREADS 16

static int nmsgs = 20000;
static const char *dir = "./var";
static int rate = 500;
static int secs = 5;
static struct conf *conf;
static struct conf_rocketmq rmq_conf; /* the drivers part's RocketMQ client (borrows conf's) */
static bool use_mysql;                /* BENCH_STORE=mysql */
static char *mysql_dbs[8];
static int nmysql_dbs;

/* ==== helpers ==== */

/* Runs q on the MariaDB server of conf (root); exits on failure. */
static void
mysql_admin(const char *q)
{
    MYSQL *m = mysql_init(NULL);

    if (!mysql_real_connect(m, conf->store.mysql.host, "root", "", NULL,
                            (unsigned)conf->store.mysql.port, NULL, 0) ||
        mysql_query(m, q) != 0) {
        fprintf(stderr, "%s: %s\n", q, mysql_error(m));
        exit(1);
    }
    mysql_close(m);
}

/* A fresh store for one part: SQLite DIR/name (bench_fresh_sqlite), or with
 * BENCH_STORE=mysql a new database roomd_bench_<pid>_<k> on MariaDB. */
static struct store *
fresh_store(const char *name)
{
    struct store *st = NULL;
    char err[256], q[160];

    if (!use_mysql)
        return bench_fresh_sqlite(conf, dir, name);
    if (nmysql_dbs == (int)(sizeof(mysql_dbs) / sizeof(mysql_dbs[0]))) {
        fprintf(stderr, "too many databases\n");
        exit(1);
    }
    mysql_dbs[nmysql_dbs] = xasprintf("roomd_bench_%d_%d", (int)getpid(), nmysql_dbs);
    snprintf(q, sizeof(q), "CREATE DATABASE %s CHARACTER SET utf8mb4", mysql_dbs[nmysql_dbs]);
    mysql_admin(q);
    free(conf->store.mysql.database);
    conf->store.mysql.database = xstrdup(mysql_dbs[nmysql_dbs++]);
    if (store_open(&st, &conf->store, err, sizeof(err)) != 0) {
        fprintf(stderr, "store_open %s: %s\n", conf->store.mysql.database, err);
        exit(1);
    }
    return st;
}

/* Drops the databases fresh_store made. */
static void
drop_stores(void)
{
    char q[160];

    for (int i = 0; i < nmysql_dbs; i++) {
        snprintf(q, sizeof(q), "DROP DATABASE %s", mysql_dbs[i]);
        mysql_admin(q);
        free(mysql_dbs[i]);
    }
    nmysql_dbs = 0;
}

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

static int
cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Sorts v[0..n) and prints "p50 a ms, p99 b ms, max c ms". */
static void
print_pcts(const char *what, int64_t *v, int n)
{
    if (n <= 0) {
        printf("%s: no samples\n", what);
        return;
    }
    qsort(v, (size_t)n, sizeof(*v), cmp64);
    printf("%s p50 %.2f ms, p99 %.2f ms, max %.2f ms (%d)\n", what, v[n / 2] / 1e3,
           v[(n * 99) / 100] / 1e3, v[n - 1] / 1e3, n);
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

static double
report(const char *what, int n, int64_t us, double raw)
{
    double r = n / (us / 1e6);

    printf("%-8s %7d msgs in %6.2f s: %9.0f msg/s", what, n, us / 1e6, r);
    if (raw > 0)
        printf("  (%.2fx raw)", r / raw);
    printf("\n");
    return r;
}

static void
print_split(struct outbox *ob, int64_t wall_us)
{
    struct outbox_stats s;

    outbox_stats(ob, &s);
    printf("         worker thread time of %.2f s wall x %d threads: claim %.2f s, build %.2f s, "
           "publish %.2f s, complete %.2f s; %llu batches, %llu rows claimed (%llu claims), "
           "%llu handed off, %llu refused (queue full)\n",
           wall_us / 1e6, conf->outbox_worker.workers, s.claim_us / 1e6, s.build_us / 1e6,
           s.publish_us / 1e6, s.complete_us / 1e6, (unsigned long long)s.batches,
           (unsigned long long)s.claimed_rows, (unsigned long long)s.claims,
           (unsigned long long)s.handoff_rows, (unsigned long long)s.handoff_full);
}

/* The outbox's own figure for handed-off rows: push (right after the
 * commit) -> every sink returned, 100 µs buckets. */
static void
print_handoff_latency(struct outbox *ob)
{
    struct outbox_stats s;
    uint64_t n = 0;

    outbox_stats(ob, &s);
    for (int b = 0; b < OUTBOX_LAT_BUCKETS; b++)
        n += s.handoff_lat[b];
    if (n == 0)
        return;
    printf("         commit -> PubAck, handed-off rows (outbox_stats, 0.1 ms buckets): p50 <= %.1f "
           "ms, p99 <= %.1f ms (%llu)\n",
           outbox_stats_handoff_pct_us(&s, 0.50) / 1e3, outbox_stats_handoff_pct_us(&s, 0.99) / 1e3,
           (unsigned long long)n);
}

/* Waits until want rows are delivered: first on the workers' own counter
 * (ob, when not NULL: cheap), then on the store's counts. The count reads the
 * whole status index and the undelivered rows, and competes with the workers
 * for the 2 cores and the store: polled every 1 ms from the start it took
 * ~25% of the CPU of a 20000-row relay. */
static void
wait_delivered(struct store *st, struct outbox *ob, int64_t want)
{
    struct outbox_counts c;
    struct outbox_stats s;

    for (;;) {
        if (ob != NULL) {
            outbox_stats(ob, &s);
            if ((int64_t)s.batch_rows < want) {
                usleep(1000);
                continue;
            }
        }
        if (store_outbox_counts(st, &c) == 0 && c.delivered >= want)
            return;
        usleep(1000);
    }
}

/* ==== a sink around the bus sink that notes when each row was acked ==== */

struct timing_sink {
    struct sink base;
    struct sink *inner;
    int64_t *ack_us; /* by the number in the row's command_id "c<k>" */
    int n;
};

static void
note_ack(struct timing_sink *t, const struct outbox_event *ev, int64_t now)
{
    int k = atoi(ev->row->command_id + 1);

    if (k >= 0 && k < t->n)
        t->ack_us[k] = now;
}

static int
timing_publish(struct sink *s, const struct outbox_event *ev, int64_t deadline, char *err,
               size_t errlen)
{
    struct timing_sink *t = (struct timing_sink *)s;
    int rc = t->inner->publish(t->inner, ev, deadline, err, errlen);

    if (rc == 0)
        note_ack(t, ev, clock_mono_us());
    return rc;
}

static void
timing_publish_batch(struct sink *s, const struct outbox_event *evs, size_t n, int64_t deadline,
                     int *rcs, char *errs, size_t errlen)
{
    struct timing_sink *t = (struct timing_sink *)s;

    t->inner->publish_batch(t->inner, evs, n, deadline, rcs, errs, errlen);
    int64_t now = clock_mono_us();
    for (size_t i = 0; i < n; i++)
        if (rcs[i] == 0)
            note_ack(t, &evs[i], now);
}

/* Closes the bus sink; the caller reads and then frees t (timing_free). */
static void
timing_close(struct sink *s)
{
    struct timing_sink *t = (struct timing_sink *)s;

    t->inner->close(t->inner);
}

static void
timing_free(struct timing_sink *t)
{
    free(t->ack_us);
    free(t);
}

/* inner (plain when n == 0, else noting the ack times of n commands; the
 * batch call only when inner has one). */
static struct sink *
timed_sink(struct sink *inner, int n, struct timing_sink **timing)
{
    if (n == 0)
        return inner;
    struct timing_sink *t = xcalloc(1, sizeof(*t));
    t->inner = inner;
    t->n = n;
    t->ack_us = xcalloc((size_t)n, sizeof(int64_t));
    t->base = (struct sink){.name = inner->name,
                            .bit = inner->bit,
                            .publish = timing_publish,
                            .publish_batch = inner->publish_batch ? timing_publish_batch : NULL,
                            .close = timing_close};
    *timing = t;
    return &t->base;
}

/* A bus sink (plain when n == 0, else noting ack times of n commands). */
static struct sink *
bus_sink(struct bus *b, int n, struct timing_sink **timing)
{
    struct sink *inner = NULL;

    sink_bus_open(&inner, b);
    return timed_sink(inner, n, timing);
}

/* ==== committing rows as the command path does ==== */

/*
 * Commits n single-event mutations numbered first.. (rooms "room-<k>",
 * commands "c<k>"), per_tx in one transaction. Each mutation goes through
 * the two hand-off calls of room_service_execute (outbox/handoff.h): begin,
 * save, end; a row that is not handed off is pending and ob is woken.
 * commit_end_us (may be NULL) gets each commit's
 * end, by number.
 */
static void
commit_rows(struct store *st, struct outbox *ob, int n, int first, int per_tx,
            int64_t *commit_end_us)
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
            snprintf(m[i].command_id, sizeof(m[i].command_id), "c%d", id);
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
            memset(&ev[i], 0, sizeof(ev[i]));
            uuid_v7(now, ev[i].event_id);
            ev[i].event_type = "RoomGiftSent";
            ev[i].payload = payload;
            ev[i].payload_len = plen;
            m[i].events = &ev[i];
            m[i].nevents = 1;
            outbox_handoff_begin(ob, &m[i]);
            ms[i] = &m[i];
        }
        if (store_save(st, ms, (size_t)k) != 0)
            fprintf(stderr, "store_save: %s\n", store_errmsg());
        int64_t end = clock_mono_us();
        for (int i = 0; i < k; i++) {
            if (commit_end_us != NULL)
                commit_end_us[first + done + i] = end;
            outbox_handoff_end(ob, &m[i], m[i].rc);
        }
        done += k;
    }
    free(ms);
    free(ev);
    free(m);
    free(payload);
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
    e.command_id = "c000000";
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
    double r = report("raw", nmsgs, us, 0);
    if (atomic_load(&raw_errs))
        printf("         (%d errors)\n", atomic_load(&raw_errs));
    jsCtx_Destroy(js);
    free(env);
    free(payload);
    drop_bus(b);
    return r;
}

/* ==== relay: the claim path drains a backlog ==== */

/* CPU time (us) so far: this process (getrusage), or the process pid
 * (/proc/PID/stat utime + stime; 0 when it cannot be read). */
static int64_t
cpu_us_of(int pid)
{
    if (pid == 0) {
        struct rusage ru;

        getrusage(RUSAGE_SELF, &ru);
        return (int64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000 + ru.ru_utime.tv_usec +
               ru.ru_stime.tv_usec;
    }
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    size_t len = f != NULL ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    unsigned long long ut = 0, st = 0;

    if (f != NULL)
        fclose(f);
    buf[len] = 0;
    char *p = strrchr(buf, ')'); /* the fields after comm: state is field 3, utime 14 */
    if (p == NULL ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return 0;
    return (int64_t)(ut + st) * 1000000 / sysconf(_SC_CLK_TCK);
}

/* BENCH_CPU_PIDS="name=pid,...": the processes beside this one whose CPU
 * per row the relay prints (run.sh passes the store server and nats-server). */
#define CPU_PIDS_MAX 4
struct cpu_mark {
    int n, pid[CPU_PIDS_MAX];
    char name[CPU_PIDS_MAX][24];
    int64_t us[CPU_PIDS_MAX + 1];
};

static void
cpu_mark(struct cpu_mark *m)
{
    const char *e = getenv("BENCH_CPU_PIDS");

    m->n = 0;
    for (const char *p = e; p != NULL && *p != 0 && m->n < CPU_PIDS_MAX;) {
        int pid = 0, used = 0;
        char name[24] = "";

        if (sscanf(p, "%23[^=]=%d%n", name, &pid, &used) != 2)
            break;
        if (pid > 0) {
            snprintf(m->name[m->n], sizeof(m->name[0]), "%s", name);
            m->pid[m->n++] = pid;
        }
        p += used;
        p += *p == ',';
    }
    for (int i = 0; i < m->n; i++)
        m->us[i] = cpu_us_of(m->pid[i]);
    m->us[m->n] = cpu_us_of(0);
}

/* Prints the CPU per row since a (cpu_mark) of this process and the others. */
static void
cpu_report(const struct cpu_mark *a, int rows)
{
    struct cpu_mark b = *a;
    int64_t all;

    for (int i = 0; i < a->n; i++)
        b.us[i] = cpu_us_of(a->pid[i]);
    b.us[a->n] = cpu_us_of(0);
    all = b.us[a->n] - a->us[a->n];
    printf("         cpu per row: bench_bus (roomd's side) %.1f us", (double)all / rows);
    for (int i = 0; i < a->n; i++) {
        printf(", %s %.1f us", a->name[i], (double)(b.us[i] - a->us[i]) / rows);
        all += b.us[i] - a->us[i];
    }
    printf(", all %.1f us\n", (double)all / rows);
}

static void
run_relay(double raw)
{
    struct store *st = fresh_store("bench_bus_relay.db");
    struct bus *b = fresh_bus("relay");
    struct sink *s = bus_sink(b, 0, NULL);
    struct outbox *ob = NULL;

    commit_rows(st, NULL, nmsgs, 0, 100, NULL);
    struct cpu_mark cpu;
    cpu_mark(&cpu);
    int64_t t = clock_mono_us();
    if (outbox_open(&ob, &conf->outbox_worker, &conf->store, st, "bench", &s, 1) != 0)
        exit(1);
    wait_delivered(st, ob, nmsgs);
    int64_t us = clock_mono_us() - t;
    report("relay", nmsgs, us, raw);
    print_split(ob, us);
    cpu_report(&cpu, nmsgs);
    outbox_close(ob);
    store_close(st);
    drop_bus(b);
}

/* ==== handoff: rows go to the workers as they commit ==== */

static void
run_handoff(double raw)
{
    struct store *st = fresh_store("bench_bus_commits.db");

    /* the commits alone, same rows, no outbox */
    int64_t t = clock_mono_us();
    commit_rows(st, NULL, nmsgs, 0, 100, NULL);
    int64_t commit_us = clock_mono_us() - t;
    store_close(st);

    st = fresh_store("bench_bus_handoff.db");
    struct bus *b = fresh_bus("handoff");
    struct sink *s = bus_sink(b, 0, NULL);
    struct outbox *ob = NULL;
    if (outbox_open(&ob, &conf->outbox_worker, &conf->store, st, "bench", &s, 1) != 0)
        exit(1);
    usleep(100 * 1000); /* the start-up claims found nothing */
    t = clock_mono_us();
    commit_rows(st, ob, nmsgs, 0, 100, NULL);
    int64_t committed_us = clock_mono_us() - t;
    wait_delivered(st, ob, nmsgs);
    int64_t us = clock_mono_us() - t;
    report("handoff", nmsgs, us, raw);
    printf("         commits alone (no outbox): %.0f rows/s; with the relay running the "
           "commits took %.2f s\n",
           nmsgs / (commit_us / 1e6), committed_us / 1e6);
    print_split(ob, us);
    outbox_close(ob);
    store_close(st);
    drop_bus(b);
}

/* n single-row commits at per_s/s (commit_end[k]: each one's end), then
 * waits until the outbox delivered them all. */
static void
paced_commits(struct store *st, struct outbox *ob, int n, int per_s, int64_t *commit_end)
{
    usleep(100 * 1000);
    int64_t start = clock_mono_us(), step = 1000000 / per_s;
    for (int k = 0; k < n; k++) {
        int64_t due = start + k * step;
        int64_t now = clock_mono_us();
        if (due > now)
            usleep((useconds_t)(due - now));
        commit_rows(st, ob, 1, k, 1, commit_end);
    }
    wait_delivered(st, ob, n);
}

/* Into lat: commit end -> the broker's answer of every row t saw answered.
 * Returns how many. */
static int
ack_latencies(const struct timing_sink *t, const int64_t *commit_end, int n, int64_t *lat)
{
    int m = 0;

    for (int k = 0; k < n; k++)
        if (t->ack_us[k] > 0)
            lat[m++] = t->ack_us[k] - commit_end[k];
    return m;
}

/* ==== latency: commit end -> PubAck at a fixed rate ==== */

static void
run_latency(bool handoff)
{
    struct store *st = fresh_store("bench_bus_latency.db");
    struct bus *b = fresh_bus("lat");
    int n = rate * secs;
    struct timing_sink *t = NULL;
    struct sink *s = bus_sink(b, n, &t);
    struct outbox *ob = NULL;
    int64_t *commit_end = xcalloc((size_t)n, sizeof(int64_t));

    if (outbox_open(&ob, &conf->outbox_worker, &conf->store, st, "bench", &s, 1) != 0)
        exit(1);
    if (!handoff)
        outbox_handoff_set_capacity(ob, 0);
    paced_commits(st, ob, n, rate, commit_end);
    print_handoff_latency(ob);
    outbox_close(ob);
    int64_t *lat = xcalloc((size_t)n, sizeof(int64_t));
    int m = ack_latencies(t, commit_end, n, lat);
    char what[160];
    snprintf(what, sizeof(what), "latency  %d commits at %d/s, hand-off %s: commit -> PubAck", n,
             rate, handoff ? "on " : "off");
    print_pcts(what, lat, m);
    free(lat);
    free(commit_end);
    timing_free(t);
    store_close(st);
    drop_bus(b);
}

/* ==== service: room_service_execute, SendGift ==== */

struct svc {
    struct store *st;
    struct group_commit *gc;
    struct wallet *wallet;
    struct lease *lease;
    struct outbox *ob;
    struct room_service *rs;
    struct bus *bus;
    struct timing_sink *timing;
    int64_t *start_us; /* by command number */
    int64_t *lat_us;   /* execute latency, by command number */
    int64_t *end_us;   /* when execute returned, by command number */
    int n;             /* command numbers available */
    atomic_int next;   /* next command number */
    atomic_int stop;
    int64_t pace_us; /* per thread, 0 = as fast as possible */
};

static void
svc_open(struct svc *v, int n, bool handoff)
{
    char err[256];
    struct room_deps d;

    memset(v, 0, sizeof(*v));
    v->st = fresh_store("bench_bus_service.db");
    v->bus = fresh_bus("svc");
    v->n = n;
    v->start_us = xcalloc((size_t)n, sizeof(int64_t));
    v->lat_us = xcalloc((size_t)n, sizeof(int64_t));
    v->end_us = xcalloc((size_t)n, sizeof(int64_t));
    struct sink *s = bus_sink(v->bus, n, &v->timing);
    if (group_commit_open(&v->gc, v->st, conf->store.group_commit_max) != 0 ||
        wallet_open(&v->wallet, &conf->wallet, v->st, err, sizeof(err)) != 0 ||
        lease_open(&v->lease, conf, err, sizeof(err)) != 0 ||
        outbox_open(&v->ob, &conf->outbox_worker, &conf->store, v->st, "bench", &s, 1) != 0) {
        fprintf(stderr, "service setup failed\n");
        exit(1);
    }
    if (!handoff)
        outbox_handoff_set_capacity(v->ob, 0);
    memset(&d, 0, sizeof(d));
    d.conf = conf;
    d.store = v->st;
    d.gc = v->gc;
    d.wallet = v->wallet;
    d.lease = v->lease;
    d.outbox = v->ob;
    if (room_service_open(&v->rs, &d) != 0) {
        fprintf(stderr, "room_service_open failed\n");
        exit(1);
    }
}

static void
svc_close(struct svc *v)
{
    room_service_close(v->rs);
    outbox_close(v->ob);
    lease_close(v->lease);
    wallet_close(v->wallet);
    group_commit_close(v->gc);
    store_close(v->st);
    drop_bus(v->bus);
    timing_free(v->timing);
    free(v->start_us);
    free(v->lat_us);
    free(v->end_us);
}

/* Runs one command; returns its HTTP status. */
static int
svc_exec(struct svc *v, enum room_cmd_type type, const char *room, const char *body)
{
    struct room_cmd cmd;
    struct cmd_error ce;
    struct room_reply r;
    int status;

    if (room_cmd_parse(type, "bench", room, body, strlen(body), &cmd, &ce) != 0) {
        fprintf(stderr, "parse: %s: %s\n", ce.field, ce.message);
        exit(1);
    }
    room_service_execute(v->rs, &cmd, &r);
    status = r.status;
    if (status != 200)
        fprintf(stderr, "%s %s: %d %s\n", room_cmd_name(type), room, status, r.body);
    room_reply_clear(&r);
    room_cmd_clear(&cmd);
    return status;
}

struct svc_thread {
    struct svc *v;
    int id;
    pthread_t th;
};

/* Each thread: its own room and user; then SendGift numbered from v->next
 * until stop (or v->n), at v->pace_us intervals when set. */
static void *
svc_main(void *arg)
{
    struct svc_thread *a = arg;
    struct svc *v = a->v;
    char room[64], body[512];
    int64_t next = clock_mono_us();
    long uid = 1000 + a->id;

    snprintf(room, sizeof(room), "r%d", a->id);
    snprintf(body, sizeof(body),
             "{\"command_id\":\"create-%d\",\"room_id\":\"%s\",\"owner_uid\":1,"
             "\"title\":\"bench\"}",
             a->id, room);
    svc_exec(v, CMD_CREATE_ROOM, NULL, body);
    snprintf(body, sizeof(body), "{\"command_id\":\"join-%d\",\"uid\":%ld}", a->id, uid);
    svc_exec(v, CMD_JOIN_ROOM, room, body);
    while (!atomic_load(&v->stop)) {
        if (v->pace_us > 0) {
            int64_t now = clock_mono_us();
            if (next > now)
                usleep((useconds_t)(next - now));
            next += v->pace_us;
        }
        int k = atomic_fetch_add(&v->next, 1);
        if (k >= v->n)
            break;
        snprintf(body, sizeof(body),
                 "{\"command_id\":\"c%d\",\"uid\":%ld,\"to_uid\":%ld,\"gift_id\":\"rose\","
                 "\"count\":1,\"unit_price\":1}",
                 k, uid, uid);
        int64_t t0 = clock_mono_us();
        v->start_us[k] = t0;
        svc_exec(v, CMD_SEND_GIFT, room, body);
        v->end_us[k] = clock_mono_us();
        v->lat_us[k] = v->end_us[k] - t0;
    }
    return NULL;
}

/* Runs nthreads for secs (or until n commands); returns the commands done. */
static int
svc_drive(struct svc *v, int nthreads, int64_t pace_us)
{
    struct svc_thread *th = xcalloc((size_t)nthreads, sizeof(*th));

    v->pace_us = pace_us;
    atomic_store(&v->stop, 0);
    for (int i = 0; i < nthreads; i++) {
        th[i] = (struct svc_thread){.v = v, .id = i};
        pthread_create(&th[i].th, NULL, svc_main, &th[i]);
    }
    usleep((useconds_t)secs * 1000000);
    atomic_store(&v->stop, 1);
    for (int i = 0; i < nthreads; i++)
        pthread_join(th[i].th, NULL);
    free(th);
    int done = atomic_load(&v->next);
    return done < v->n ? done : v->n;
}

static double
run_service_max(bool handoff)
{
    struct svc v;

    svc_open(&v, 200000 * secs, handoff);
    int64_t t = clock_mono_us();
    int done = svc_drive(&v, SVC_THREADS, 0);
    int64_t us = clock_mono_us() - t;
    double r = done / (us / 1e6);
    printf("service  max load, %d threads, hand-off %s: %d SendGift in %.2f s: %.0f commands/s\n",
           SVC_THREADS, handoff ? "on" : "off", done, us / 1e6, r);
    print_pcts("         execute", v.lat_us, done);
    wait_delivered(v.st, v.ob, done);
    print_split(v.ob, us);
    svc_close(&v);
    return r;
}

static void
run_service_paced(double cmd_rate, bool handoff)
{
    struct svc v;
    int n = (int)(cmd_rate * secs * 1.2) + 100;

    svc_open(&v, n, handoff);
    usleep(100 * 1000);
    int64_t pace = (int64_t)(1e6 * SVC_PACED_THREADS / cmd_rate);
    int64_t t = clock_mono_us();
    int done = svc_drive(&v, SVC_PACED_THREADS, pace);
    int64_t us = clock_mono_us() - t;
    wait_delivered(v.st, v.ob, done + 2 * SVC_PACED_THREADS); /* + create, join */
    printf("service  paced %.0f commands/s (%d threads), hand-off %s: %d SendGift, %.0f/s\n",
           cmd_rate, SVC_PACED_THREADS, handoff ? "on" : "off", done, done / (us / 1e6));
    int64_t *lat = xcalloc((size_t)done + 1, sizeof(int64_t));
    int m = 0;
    for (int k = 0; k < done; k++)
        if (v.timing->ack_us[k] > 0 && v.start_us[k] > 0)
            lat[m++] = v.timing->ack_us[k] - v.start_us[k];
    print_pcts("         command start -> PubAck", lat, m);
    m = 0;
    for (int k = 0; k < done; k++)
        if (v.timing->ack_us[k] > 0 && v.end_us[k] > 0)
            lat[m++] = v.timing->ack_us[k] - v.end_us[k];
    print_pcts("         reply -> PubAck (< 0: acked before the reply)", lat, m);
    print_pcts("         execute (start -> reply)", v.lat_us, done);
    print_handoff_latency(v.ob);
    print_split(v.ob, us);
    free(lat);
    svc_close(&v);
}

/* ==== drivers: the relay on each broker driver, then half its rate ==== */

/* One broker driver of the outbox's mq sink: opens a fresh sink (and what
 * it needs), closes what it opened besides the sink. */
struct driver {
    const char *name; /* "jetstream" | "rocketmq" */
    const char *label;
    struct sink *(*open)(void **state);
    void (*done)(void *state);
};

static struct sink *
js_open_sink(void **state)
{
    struct bus *b = fresh_bus("drv");
    struct sink *s = NULL;

    sink_bus_open(&s, b);
    *state = b;
    return s;
}

static void
js_done(void *state)
{
    drop_bus(state);
}

static struct rmq_client *rmq; /* BENCH_RMQ_NAMESRV's, opened once */

static struct sink *
rmq_open_sink(void **state)
{
    struct sink *s = NULL;

    *state = NULL;
    if (sink_rmq_open(&s, rmq, &rmq_conf) != 0) {
        fprintf(stderr, "rocketmq sink: cannot open\n");
        exit(1);
    }
    return s;
}

static void
rmq_done(void *state)
{
    (void)state;
}

/* The relay of n committed rows through d's sink: rows/s. */
static double
driver_relay(const struct driver *d, int n)
{
    struct store *st = fresh_store("bench_bus_drv_relay.db");
    void *state = NULL;
    struct sink *s = d->open(&state);
    struct outbox *ob = NULL;
    char what[32];

    commit_rows(st, NULL, n, 0, 100, NULL);
    int64_t t = clock_mono_us();
    if (outbox_open(&ob, &conf->outbox_worker, &conf->store, st, "bench", &s, 1) != 0)
        exit(1);
    wait_delivered(st, ob, n);
    int64_t us = clock_mono_us() - t;
    snprintf(what, sizeof(what), "relay-%s", d->name);
    double r = report(what, n, us, 0);
    outbox_close(ob);
    store_close(st);
    d->done(state);
    return r;
}

/* Single-event commits at r/s for secs through d's sink (hand-off on, as
 * the command path): commit end -> the broker's answer (PubAck, SEND_OK). */
static void
driver_latency(const struct driver *d, int r)
{
    struct store *st = fresh_store("bench_bus_drv_latency.db");
    void *state = NULL;
    int n = r * secs;
    struct timing_sink *t = NULL;
    struct sink *s = timed_sink(d->open(&state), n, &t);
    struct outbox *ob = NULL;
    int64_t *commit_end = xcalloc((size_t)n, sizeof(int64_t));

    if (outbox_open(&ob, &conf->outbox_worker, &conf->store, st, "bench", &s, 1) != 0)
        exit(1);
    paced_commits(st, ob, n, r, commit_end);
    outbox_close(ob);
    int64_t *lat = xcalloc((size_t)n, sizeof(int64_t));
    int m = ack_latencies(t, commit_end, n, lat);
    char what[200];
    snprintf(what, sizeof(what), "halfload-%s %d commits at %d/s (%s): commit -> %s", d->name, n, r,
             d->label, strcmp(d->name, "rocketmq") == 0 ? "SEND_OK" : "PubAck");
    print_pcts(what, lat, m);
    free(lat);
    free(commit_end);
    timing_free(t);
    store_close(st);
    d->done(state);
}

/* BENCH_ONLY=drivers: the relay on JetStream (when the bus answers) and on
 * RocketMQ (BENCH_RMQ_NAMESRV, host:port of a name server: the stand-in
 * of tests/standins in make bench), then each at half its rate. */
static void
run_drivers(bool with_js)
{
    const char *ns = getenv("BENCH_RMQ_NAMESRV");
    const char *label = getenv("BENCH_RMQ_LABEL");
    struct driver ds[2];
    int nd = 0;

    if (with_js)
        ds[nd++] = (struct driver){"jetstream", "nats-server", js_open_sink, js_done};
    if (ns && *ns) {
        char err[256];
        rmq_conf = conf->rocketmq;
        rmq_conf.name_servers[0] = (char *)ns;
        rmq_conf.nname_servers = 1;
        rmq_conf.namespace_ = NULL;
        rmq_conf.driver = CONF_MQ_ROCKETMQ;
        rmq_conf.retry = 2;
        rmq_conf.room_outbox.topic = "bench_rmq_outbox";
        if (rmq_client_open(&rmq, &rmq_conf, "bench_bus", rmq_conf.room_outbox.topic, err,
                            sizeof(err)) != 0) {
            fprintf(stderr, "rocketmq: %s\n", err);
            exit(1);
        }
        ds[nd++] = (struct driver){"rocketmq", label && *label ? label : "RocketMQ", rmq_open_sink,
                                   rmq_done};
    }
    int n = getenv("BENCH_DRIVERS_N") ? atoi(getenv("BENCH_DRIVERS_N")) : nmsgs;
    for (int i = 0; i < nd; i++) {
        double r = driver_relay(&ds[i], n);
        int half = (int)(r / 2) > 0 ? (int)(r / 2) : 1;
        driver_latency(&ds[i], half);
    }
    rmq_client_close(rmq);
    rmq = NULL;
}

/* BENCH_ONLY=relay,latency runs only those parts (raw always runs). */
static bool
want(const char *part)
{
    const char *only = getenv("BENCH_ONLY");

    return only == NULL || *only == '\0' || strstr(only, part) != NULL;
}

static const char *
ordering_name(void)
{
    return conf->outbox_worker.ordering == ORDERING_NONE ? "none" : "per_room";
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
    if (argc > 4)
        secs = atoi(argv[4]);
    conf = xcalloc(1, sizeof(*conf));
    conf_defaults(conf);
    char *logf = xasprintf("%s/bench_bus.log", dir);
    log_open(logf, LOG_WARN); /* and the room_command_timing lines */
    free(logf);
    const char *port = getenv("ROOMD_NATS_PORT");
    conf->rocketmq.enabled = true;
    conf->rocketmq.name_servers[0] =
        xasprintf("nats://127.0.0.1:%s", port && *port ? port : "4333");
    conf->rocketmq.nname_servers = 1;
    conf->rocketmq.send_timeout_ms = 5000;
    conf->rocketmq.room_outbox.enabled = true;
    conf->store.sqlite.synchronous_full = true;
    use_mysql = getenv("BENCH_STORE") != NULL && strcmp(getenv("BENCH_STORE"), "mysql") == 0;
    if (use_mysql) {
        const char *mp = getenv("ROOMD_MYSQL_PORT");
        free(conf->store.driver);
        conf->store.driver = xstrdup("mysql");
        free(conf->store.mysql.host);
        conf->store.mysql.host = xstrdup("127.0.0.1");
        conf->store.mysql.port = mp && *mp ? atoi(mp) : 3417;
        free(conf->store.mysql.user);
        conf->store.mysql.user = xstrdup("root");
        conf->store.mysql.pool_size = 8;
    }
    conf->outbox_worker.workers = getenv("BENCH_WORKERS") ? atoi(getenv("BENCH_WORKERS")) : 2;
    conf->outbox_worker.batch_size = getenv("BENCH_BATCH") ? atoi(getenv("BENCH_BATCH")) : 100;
    if (getenv("BENCH_CLAIM_BATCHES") != NULL)
        conf->outbox_worker.claim_batches = atoi(getenv("BENCH_CLAIM_BATCHES"));
    if (getenv("BENCH_GATHER_MS") != NULL)
        conf->outbox_worker.complete_gather_ms = atoll(getenv("BENCH_GATHER_MS"));
    if (getenv("BENCH_ORDERING") != NULL && strcmp(getenv("BENCH_ORDERING"), "none") == 0)
        conf->outbox_worker.ordering = ORDERING_NONE;
    conf->outbox_worker.poll_interval_ms = 1000;
    conf->outbox_worker.publish_timeout_ms = 3000;
    conf->outbox_worker.lock_timeout_ms = 30000;
    conf->wallet.initial_balance = 1000000000000LL;
    for (int i = 0; i < conf->room.rocket.nthresholds; i++)
        conf->room.rocket.thresholds[i] = 1000000000000LL; /* one event per gift */
    /* the service part's SendGift names "rose", which no catalog of the fresh
     * store holds (issue 30's catalog answered 404 to every gift) */
    free(conf->room.gift_catalog);
    conf->room.gift_catalog = xstrdup("off");

    if (use_mysql)
        printf("== bench_bus: %d messages, MariaDB at 127.0.0.1:%d, %d outbox workers, batch %d, "
               "claim_batches %d, ordering %s\n",
               nmsgs, conf->store.mysql.port, conf->outbox_worker.workers,
               conf->outbox_worker.batch_size, conf->outbox_worker.claim_batches, ordering_name());
    else
        printf("== bench_bus: %d messages, SQLite synchronous=FULL in %s, %d outbox workers, "
               "batch %d, claim_batches %d, ordering %s\n",
               nmsgs, dir, conf->outbox_worker.workers, conf->outbox_worker.batch_size,
               conf->outbox_worker.claim_batches, ordering_name());
    /* BENCH_ONLY=drivers with BENCH_NO_NATS=1: RocketMQ alone (no nats-server) */
    const char *no_nats = getenv("BENCH_NO_NATS");
    bool nats = no_nats == NULL || *no_nats == '\0' || strcmp(no_nats, "0") == 0;
    double raw = nats ? run_raw() : 0;
    if (getenv("BENCH_ONLY") != NULL && strstr(getenv("BENCH_ONLY"), "drivers") != NULL)
        run_drivers(nats); /* asked for by name only */
    if (!nats) {
        conf_free(conf);
        return 0;
    }
    if (want("relay"))
        run_relay(raw);
    if (want("handoff"))
        run_handoff(raw);
    if (want("latency")) {
        run_latency(true);
        run_latency(false);
    }
    if (want("service")) {
        double max = run_service_max(true);
        run_service_max(false);
        run_service_paced(max / 2, true);
        run_service_paced(max / 2, false);
    }
    drop_stores();
    conf_free(conf);
    bus_library_shutdown();
    return 0;
}
