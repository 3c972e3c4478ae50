/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_bus_kit.c: the JetStream pieces against a real nats-server: the mq
 * sink (exactly one stream message per event_id, Duplicate acks), the
 * rocket wake-up sink, the consumer kit (one event consumed by several
 * groups, a forced redelivery without a second effect, a consumer reset,
 * dead letters after the reconsume count and for permanent errors, a
 * failing group not slowing another, the room_seq rule: held out of turn,
 * a duplicate by the mark), and broker down/up with a PRIVATE
 * nats-server (its own port and store dir) for publisher and consumer.
 * The shared server is scripts/servers.sh's (ROOMD_NATS_PORT, 4333); each
 * test uses its own subject namespace and deletes its streams.
 */
#include "helpers.h"

#include "conf/conf.h"
#include "consume/group.h"
#include "consume/handlers.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/uuid.h"
#include "core/xmalloc.h"
#include "outbox/outbox.h"
#include "publish/bus.h"
#include "publish/sink_bus.h"
#include "room_events.pb-c.h"
#include "store/store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* ==== fixture ==== */

struct fx {
    char *dir;
    struct conf *conf;
    char url[64];
};
static struct fx fx;
static int ns_counter;

static bool
port_open(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool ok = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    close(fd);
    return ok;
}

static void
set_str(char **dst, const char *v)
{
    free(*dst);
    *dst = xstrdup(v);
}

/* A conf pointed at url with a namespace of its own and short timings. */
static void
point_at(struct conf *c, const char *url)
{
    struct conf_rocketmq *mq = &c->rocketmq;
    char ns[64];

    mq->enabled = true;
    for (int i = 0; i < mq->nname_servers; i++)
        free(mq->name_servers[i]);
    mq->name_servers[0] = xstrdup(url);
    mq->nname_servers = 1;
    snprintf(ns, sizeof(ns), "t%d_%d_", (int)getpid(), ++ns_counter);
    set_str(&mq->namespace_, ns);
    mq->send_timeout_ms = 1000;
    mq->retry = 1;
    mq->room_outbox.enabled = true;
    mq->room_outbox.consumer_max_reconsume_times = 2;
    mq->rocket_launch.enabled = true;
    mq->consumer_retry_delays_ms[0] = 100;
    mq->consumer_retry_delays_ms[1] = 200;
    mq->nconsumer_retry_delays = 2;
    mq->consumer_ack_wait_ms = 2000;
    char *store = xasprintf("%s/consumers-%d", fx.dir, ns_counter);
    set_str(&mq->consumer_store_dir, store);
    free(store);
}

static int
setup(void **state)
{
    (void)state;
    int port = th_env_port("ROOMD_NATS_PORT", 4333);
    if (!port_open(port))
        th_skip_or_fail("nats-server (scripts/servers.sh) not reachable");
    fx.dir = th_tmpdir();
    fx.conf = th_conf_sqlite(fx.dir);
    snprintf(fx.url, sizeof(fx.url), "nats://127.0.0.1:%d", port);
    point_at(fx.conf, fx.url);
    log_close();
    char *lp = xasprintf("%s/test.log", fx.dir);
    log_open(lp, LOG_DEBUG);
    free(lp);
    return 0;
}

static int
teardown(void **state)
{
    (void)state;
    log_close();
    conf_free(fx.conf);
    free(fx.dir);
    memset(&fx, 0, sizeof(fx));
    return 0;
}

static struct bus *
open_bus(void)
{
    struct bus *b = NULL;
    char err[256];

    assert_int_equal(bus_open(&b, &fx.conf->rocketmq, "test_bus_kit", err, sizeof(err)), 0);
    return b;
}

static void
delete_streams(struct bus *b)
{
    for (int i = 0; i < BUS_STREAM_COUNT_; i++)
        js_DeleteStream(bus_js(b), bus_stream_name(b, (enum bus_stream)i), NULL, NULL);
}

static uint64_t
stream_msgs(struct bus *b, enum bus_stream w)
{
    jsStreamInfo *si = NULL;
    uint64_t n = 0;

    if (js_GetStreamInfo(&si, bus_js(b), bus_stream_name(b, w), NULL, NULL) == NATS_OK) {
        n = si->State.Msgs;
        jsStreamInfo_Destroy(si);
    }
    return n;
}

static void
sleep_ms(int ms)
{
    usleep((useconds_t)ms * 1000);
}

/* ==== rows ==== */

struct ev {
    struct outbox_row row;
    uint8_t *env;
    size_t envlen;
    char *json;
};

static void
make_gift(struct ev *e, const char *room, int count, int64_t unit_price)
{
    Roomd__V1__RoomGiftSent g = ROOMD__V1__ROOM_GIFT_SENT__INIT;
    g.uid = 7;
    g.to_uid = 8;
    g.gift_id = "rose";
    g.count = count;
    g.unit_price = unit_price;
    g.total = count * unit_price;
    memset(e, 0, sizeof(*e));
    e->row.payload_len = roomd__v1__room_gift_sent__get_packed_size(&g);
    e->row.payload = xmalloc(e->row.payload_len);
    roomd__v1__room_gift_sent__pack(&g, e->row.payload);
    uuid_v7(clock_wall_ms(), e->row.event_id);
    snprintf(e->row.app_code, sizeof(e->row.app_code), "hyapp");
    snprintf(e->row.room_id, sizeof(e->row.room_id), "%s", room);
    snprintf(e->row.command_id, sizeof(e->row.command_id), "cmd-%s", e->row.event_id);
    snprintf(e->row.event_type, sizeof(e->row.event_type), "RoomGiftSent");
    e->row.room_version = 2;
    e->row.created_at_ms = clock_wall_ms();
    assert_int_equal(outbox_event_build(&e->row, &e->env, &e->envlen, &e->json), 0);
}

static void
make_ignited(struct ev *e, const char *room, const char *rocket_id, int64_t launch_at)
{
    Roomd__V1__RoomRocketIgnited r = ROOMD__V1__ROOM_ROCKET_IGNITED__INIT;
    r.rocket_id = (char *)rocket_id;
    r.level = 1;
    r.launch_at_ms = launch_at;
    r.launch_command_id = "launch-cmd-1";
    memset(e, 0, sizeof(*e));
    e->row.payload_len = roomd__v1__room_rocket_ignited__get_packed_size(&r);
    e->row.payload = xmalloc(e->row.payload_len);
    roomd__v1__room_rocket_ignited__pack(&r, e->row.payload);
    uuid_v7(clock_wall_ms(), e->row.event_id);
    snprintf(e->row.app_code, sizeof(e->row.app_code), "hyapp");
    snprintf(e->row.room_id, sizeof(e->row.room_id), "%s", room);
    snprintf(e->row.event_type, sizeof(e->row.event_type), "RoomRocketIgnited");
    assert_int_equal(outbox_event_build(&e->row, &e->env, &e->envlen, &e->json), 0);
}

static void
ev_free(struct ev *e)
{
    free(e->row.payload);
    free(e->env);
    free(e->json);
}

static int
publish(struct sink *s, struct ev *e, int64_t timeout_ms, char *err, size_t errlen)
{
    struct outbox_event oe = {
        .row = &e->row, .envelope = e->env, .envelope_len = e->envlen, .json = e->json};
    return s->publish(s, &oe, clock_mono_ms() + timeout_ms, err, errlen);
}

/* ==== a private nats-server ==== */

struct natsd {
    pid_t pid;
    int port;
    char *dir;
};

static void
natsd_start(struct natsd *n)
{
    char port[16];

    snprintf(port, sizeof(port), "%d", n->port);
    n->pid = fork();
    if (n->pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        dup2(fd, 1);
        dup2(fd, 2);
        execlp("nats-server", "nats-server", "-js", "-a", "127.0.0.1", "-p", port, "-sd", n->dir,
               (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 200 && !port_open(n->port); i++)
        sleep_ms(25);
    assert_true(port_open(n->port));
}

static void
natsd_stop(struct natsd *n)
{
    if (n->pid > 0) {
        kill(n->pid, SIGTERM);
        waitpid(n->pid, NULL, 0);
        n->pid = 0;
    }
}

/* ==== activity database checks ==== */

static int64_t
db_int(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int64_t v = -1;

    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

static int64_t
group_db_int(const char *group, const char *sql)
{
    char *p = xasprintf("%s/%s.db", fx.conf->rocketmq.consumer_store_dir, group);
    int64_t v = db_int(p, sql);
    free(p);
    return v;
}

static bool
wait_stat(struct consume_group *g, size_t off, uint64_t want, int timeout_ms)
{
    struct consume_stats st;
    int64_t end = clock_mono_ms() + timeout_ms;

    do {
        consume_group_stats(g, &st);
        if (*(uint64_t *)((char *)&st + off) >= want)
            return true;
        sleep_ms(20);
    } while (clock_mono_ms() < end);
    return false;
}
#define WAIT_STAT(g, field, want, ms)                                                              \
    wait_stat(g, offsetof(struct consume_stats, field), (uint64_t)(want), ms)

static void
start_group_with(struct consume_group **g, struct bus *b, const struct consume_handler *h,
                 bool room_order)
{
    struct consume_opts o;
    char err[256];

    consume_opts_from_conf(&o, &fx.conf->rocketmq,
                           fx.conf->rocketmq.room_outbox.consumer_max_reconsume_times);
    o.fetch_timeout_ms = 300;
    o.room_order = room_order;
    assert_int_equal(consume_group_start(g, b, h, &o, err, sizeof(err)), 0);
}

static void
start_group(struct consume_group **g, struct bus *b, const struct consume_handler *h)
{
    start_group_with(g, b, h, false);
}

/* ==== handlers used by the tests ==== */

/* The activity handler, but the first delivery of each message "loses its
 * ack" after the effect committed: the kit Naks it, so it comes back. */
static struct consume_handler activity_real;
static atomic_int flaky_lost;

static int
flaky_handle(void *arg, struct consume_msg *m)
{
    int rc = activity_real.handle(activity_real.arg, m);
    if (rc == 0 && m->num_delivered == 1) {
        atomic_fetch_add(&flaky_lost, 1);
        snprintf(m->err, sizeof(m->err), "test: ack lost");
        return ROOMD_ERETRY;
    }
    return rc;
}

static atomic_int failing_calls;

static int
failing_handle(void *arg, struct consume_msg *m)
{
    (void)arg;
    atomic_fetch_add(&failing_calls, 1);
    snprintf(m->err, sizeof(m->err), "test: downstream unavailable");
    return ROOMD_ERETRY;
}

static int
permanent_handle(void *arg, struct consume_msg *m)
{
    (void)arg;
    snprintf(m->err, sizeof(m->err), "test: cannot ever work");
    return ROOMD_EPERM;
}

/* ==== tests ==== */

/* Every event becomes exactly one stream message keyed by its event_id;
 * publishing again is acknowledged as a duplicate and stores nothing. */
static void
test_publish_exactly_once(void **state)
{
    (void)state;
    struct bus *b = open_bus();
    struct sink *s = NULL;
    struct ev e[20];
    char err[256];

    assert_int_equal(sink_bus_open(&s, b), 0);
    for (int i = 0; i < 20; i++) {
        make_gift(&e[i], "room-a", 1, 10);
        assert_int_equal(publish(s, &e[i], 2000, err, sizeof(err)), 0);
    }
    for (int i = 0; i < 5; i++) /* a retried batch */
        assert_int_equal(publish(s, &e[i], 2000, err, sizeof(err)), 0);
    assert_int_equal(stream_msgs(b, BUS_STREAM_OUTBOX), 20);

    for (uint64_t seq = 1; seq <= 20; seq++) {
        natsMsg *m = NULL;
        const char *id = NULL;
        char subj[128];
        assert_int_equal(
            js_GetMsg(&m, bus_js(b), bus_stream_name(b, BUS_STREAM_OUTBOX), seq, NULL, NULL),
            NATS_OK);
        assert_int_equal(natsMsgHeader_Get(m, "Nats-Msg-Id", &id), NATS_OK);
        assert_string_equal(id, e[seq - 1].row.event_id);
        snprintf(subj, sizeof(subj), "%s.RoomGiftSent", bus_subject_prefix(b, BUS_STREAM_OUTBOX));
        assert_string_equal(natsMsg_GetSubject(m), subj);
        assert_int_equal(natsMsg_GetDataLength(m), (int)e[seq - 1].envlen);
        assert_memory_equal(natsMsg_GetData(m), e[seq - 1].env, e[seq - 1].envlen);
        natsMsg_Destroy(m);
    }
    /* The stream deleted under a running publisher: the next publish sets
     * it up again ("no responders" -> setup -> retry within the call). */
    assert_int_equal(js_DeleteStream(bus_js(b), bus_stream_name(b, BUS_STREAM_OUTBOX), NULL, NULL),
                     NATS_OK);
    assert_int_equal(publish(s, &e[0], 3000, err, sizeof(err)), 0);
    assert_int_equal(stream_msgs(b, BUS_STREAM_OUTBOX), 1);
    for (int i = 0; i < 20; i++)
        ev_free(&e[i]);
    delete_streams(b);
    s->close(s);
    bus_unref(b);
}

/* publish_batch: a batch of 60 (20 of them already in the stream) is
 * pipelined and every event acknowledged once; a broker that is down makes
 * every result ERETRY at once. */
static void
test_publish_batch(void **state)
{
    (void)state;
    struct bus *b = open_bus();
    struct sink *s = NULL;
    enum { N = 60 };
    struct ev e[N];
    struct outbox_event oe[N];
    int rcs[N];
    char errs[N][128], err[256];

    assert_int_equal(sink_bus_open(&s, b), 0);
    assert_non_null(s->publish_batch);
    for (int i = 0; i < N; i++) {
        make_gift(&e[i], "room-b", 1, 10);
        oe[i] = (struct outbox_event){
            .row = &e[i].row, .envelope = e[i].env, .envelope_len = e[i].envlen, .json = NULL};
        if (i < 20)
            assert_int_equal(publish(s, &e[i], 2000, err, sizeof(err)), 0);
    }
    s->publish_batch(s, oe, N, clock_mono_ms() + 3000, rcs, &errs[0][0], sizeof(errs[0]));
    for (int i = 0; i < N; i++)
        assert_int_equal(rcs[i], 0);
    assert_int_equal(stream_msgs(b, BUS_STREAM_OUTBOX), N);
    for (uint64_t seq = 21; seq <= N; seq++) { /* the new ones, each once */
        natsMsg *m = NULL;
        const char *id = NULL;
        assert_int_equal(
            js_GetMsg(&m, bus_js(b), bus_stream_name(b, BUS_STREAM_OUTBOX), seq, NULL, NULL),
            NATS_OK);
        assert_int_equal(natsMsgHeader_Get(m, "Nats-Msg-Id", &id), NATS_OK);
        bool found = false;
        for (int i = 20; i < N; i++)
            found = found || strcmp(id, e[i].row.event_id) == 0;
        assert_true(found);
        natsMsg_Destroy(m);
    }
    delete_streams(b);
    s->close(s);
    bus_unref(b);

    /* A broker that is not there. */
    char url[64];
    snprintf(url, sizeof(url), "nats://127.0.0.1:%d", th_free_port());
    point_at(fx.conf, url);
    b = open_bus();
    assert_int_equal(sink_bus_open(&s, b), 0);
    int64_t t0 = clock_mono_ms();
    s->publish_batch(s, oe, N, clock_mono_ms() + 2000, rcs, &errs[0][0], sizeof(errs[0]));
    assert_true(clock_mono_ms() - t0 < 500);
    for (int i = 0; i < N; i++) {
        assert_int_equal(rcs[i], ROOMD_EUNAVAIL); /* an outage: no attempt counted */
        assert_non_null(strstr(errs[i], "not connected"));
    }
    s->close(s);
    bus_unref(b);
    for (int i = 0; i < N; i++)
        ev_free(&e[i]);
}

/* The wake-up sink: only RoomRocketIgnited; header Launch-At; the
 * wake-up carries the ignition's parameters; a resend is a duplicate. */
static void
test_rocket_wakeup_sink(void **state)
{
    (void)state;
    struct bus *b = open_bus();
    struct sink *s = NULL;
    struct ev ig, gift;
    char err[256];
    int64_t at = clock_wall_ms() + 60000;

    assert_int_equal(sink_rocket_open(&s, b), 0);
    make_ignited(&ig, "room-r", "room-r-20000-1", at);
    make_gift(&gift, "room-r", 1, 10);
    struct outbox_event oe = {.row = &gift.row, .envelope = gift.env, .envelope_len = gift.envlen};
    assert_false(s->accepts(s, &oe));
    oe.row = &ig.row;
    assert_true(s->accepts(s, &oe));
    assert_int_equal(publish(s, &ig, 2000, err, sizeof(err)), 0);
    assert_int_equal(publish(s, &ig, 2000, err, sizeof(err)), 0);
    assert_int_equal(stream_msgs(b, BUS_STREAM_ROCKET), 1);

    natsMsg *m = NULL;
    const char *v = NULL;
    char want[32];
    assert_int_equal(js_GetMsg(&m, bus_js(b), bus_stream_name(b, BUS_STREAM_ROCKET), 1, NULL, NULL),
                     NATS_OK);
    assert_int_equal(natsMsgHeader_Get(m, "Launch-At", &v), NATS_OK);
    snprintf(want, sizeof(want), "%lld", (long long)at);
    assert_string_equal(v, want);
    assert_int_equal(natsMsgHeader_Get(m, "Nats-Msg-Id", &v), NATS_OK);
    assert_string_equal(v, "rocket-hyapp-room-r-room-r-20000-1");
    Roomd__V1__RocketLaunchWakeup *w = roomd__v1__rocket_launch_wakeup__unpack(
        NULL, (size_t)natsMsg_GetDataLength(m), (const uint8_t *)natsMsg_GetData(m));
    assert_non_null(w);
    assert_string_equal(w->app_code, "hyapp");
    assert_string_equal(w->room_id, "room-r");
    assert_string_equal(w->rocket_id, "room-r-20000-1");
    assert_int_equal(w->level, 1);
    assert_int_equal(w->launch_at_ms, at);
    assert_string_equal(w->command_id, "launch-cmd-1");
    char key[CONSUME_KEY_MAX];
    assert_int_equal(consume_rocket_key(NULL, (const uint8_t *)natsMsg_GetData(m),
                                        (size_t)natsMsg_GetDataLength(m), key, sizeof(key)),
                     0);
    assert_string_equal(key, "rocket-hyapp-room-r-room-r-20000-1");
    roomd__v1__rocket_launch_wakeup__free_unpacked(w, NULL);
    natsMsg_Destroy(m);
    ev_free(&ig);
    ev_free(&gift);
    delete_streams(b);
    s->close(s);
    bus_unref(b);
}

/*
 * One event stream, four groups at once: the activity group (exactly one
 * effect per event), a flaky copy whose first ack is "lost" after its
 * effect committed (redelivered, deduplicated: still one effect), a group
 * whose downstream is down (dead letters after 1 + 2 reconsumes, in its DLQ
 * subject) and a group with a permanent error (dead letter at once). The
 * failing groups do not slow the healthy one.
 */
static void
test_groups_dedupe_redelivery_dlq(void **state)
{
    (void)state;
    struct bus *b = open_bus();
    struct sink *s = NULL;
    struct consume_group *ga = NULL, *gf = NULL, *gd = NULL, *gp = NULL;
    struct consume_handler ha, hf, hd, hp;
    enum { N = 10 };
    struct ev e[N];
    char err[256];

    atomic_store(&flaky_lost, 0);
    atomic_store(&failing_calls, 0);
    assert_int_equal(sink_bus_open(&s, b), 0);
    for (int i = 0; i < N; i++) {
        make_gift(&e[i], i % 2 ? "room-odd" : "room-even", i + 1, 10);
        assert_int_equal(publish(s, &e[i], 2000, err, sizeof(err)), 0);
    }
    consume_activity_handler(&ha, "test-activity", NULL);
    consume_activity_handler(&activity_real, "test-flaky", NULL);
    hf = activity_real;
    hf.handle = flaky_handle;
    memset(&hd, 0, sizeof(hd));
    hd.group = "test-down";
    hd.stream = BUS_STREAM_OUTBOX;
    hd.handle = failing_handle;
    hp = hd;
    hp.group = "test-perm";
    hp.handle = permanent_handle;

    int64_t t0 = clock_mono_ms();
    start_group(&gd, b, &hd);
    start_group(&gp, b, &hp);
    start_group(&ga, b, &ha);
    start_group(&gf, b, &hf);

    assert_true(WAIT_STAT(ga, handled, N, 10000));
    int64_t healthy_ms = clock_mono_ms() - t0;
    assert_true(WAIT_STAT(gf, duplicates, N, 10000));
    assert_true(WAIT_STAT(gp, dead, N, 10000));
    assert_true(WAIT_STAT(gd, dead, N, 15000));

    /* Activity: one effect per event. Sum of counts 1..10 = 55, value 550. */
    assert_int_equal(group_db_int("test-activity", "SELECT SUM(gifts) FROM activity_room_totals"),
                     55);
    assert_int_equal(
        group_db_int("test-activity", "SELECT SUM(gift_value) FROM activity_room_totals"), 550);
    assert_int_equal(group_db_int("test-activity", "SELECT COUNT(*) FROM inbox WHERE state='done'"),
                     N);
    /* Flaky: every first ack lost, every redelivery deduplicated. */
    assert_int_equal(atomic_load(&flaky_lost), N);
    assert_int_equal(group_db_int("test-flaky", "SELECT SUM(gifts) FROM activity_room_totals"), 55);
    struct consume_stats st;
    consume_group_stats(gf, &st);
    assert_true(st.duplicates >= N);
    /* Down: 1 delivery + 2 reconsumes each, then the DLQ. */
    assert_int_equal(atomic_load(&failing_calls), 3 * N);
    assert_int_equal(group_db_int("test-down", "SELECT COUNT(*) FROM inbox WHERE state='dead'"), N);
    assert_int_equal(group_db_int("test-perm", "SELECT COUNT(*) FROM inbox WHERE state='dead'"), N);
    assert_int_equal(stream_msgs(b, BUS_STREAM_DLQ), 2 * N);
    /* The dead letters keep the original bytes and say why. */
    int down = 0;
    for (uint64_t seq = 1; seq <= 2 * N; seq++) {
        natsMsg *m = NULL;
        const char *g = NULL, *why = NULL, *dl = NULL;
        char subj[128];
        assert_int_equal(
            js_GetMsg(&m, bus_js(b), bus_stream_name(b, BUS_STREAM_DLQ), seq, NULL, NULL), NATS_OK);
        assert_int_equal(natsMsgHeader_Get(m, "Roomd-Group", &g), NATS_OK);
        assert_int_equal(natsMsgHeader_Get(m, "Roomd-Error", &why), NATS_OK);
        assert_int_equal(natsMsgHeader_Get(m, "Roomd-Deliveries", &dl), NATS_OK);
        snprintf(subj, sizeof(subj), "%s.%s", bus_subject_prefix(b, BUS_STREAM_DLQ), g);
        assert_string_equal(natsMsg_GetSubject(m), subj);
        if (strcmp(g, "test-down") == 0) {
            down++;
            assert_string_equal(why, "test: downstream unavailable");
            assert_string_equal(dl, "3");
        } else {
            assert_string_equal(g, "test-perm");
            assert_string_equal(dl, "1");
        }
        natsMsg_Destroy(m);
    }
    assert_int_equal(down, N);
    /* The failing groups (delays 100 + 200 ms each) did not hold back the
     * healthy one. */
    print_message("healthy group drained %d events in %lld ms\n", N, (long long)healthy_ms);
    assert_true(healthy_ms < 3000);

    consume_group_stop(ga);
    consume_group_stop(gf);
    consume_group_stop(gd);
    consume_group_stop(gp);
    for (int i = 0; i < N; i++)
        ev_free(&e[i]);
    delete_streams(b);
    s->close(s);
    bus_unref(b);
}

/* Resetting a group's cursor (its durable consumer deleted while the group
 * is down) redelivers everything: the inbox acks it all without effect. */
static void
test_consumer_reset_no_second_effect(void **state)
{
    (void)state;
    struct bus *b = open_bus();
    struct sink *s = NULL;
    struct consume_group *g = NULL;
    struct consume_handler h;
    enum { N = 8 };
    struct ev e[N];
    char err[256];

    assert_int_equal(sink_bus_open(&s, b), 0);
    for (int i = 0; i < N; i++) {
        make_gift(&e[i], "room-x", 2, 5);
        assert_int_equal(publish(s, &e[i], 2000, err, sizeof(err)), 0);
    }
    consume_activity_handler(&h, "test-reset", NULL);
    start_group(&g, b, &h);
    assert_true(WAIT_STAT(g, handled, N, 10000));
    consume_group_stop(g);
    assert_int_equal(group_db_int("test-reset", "SELECT gifts FROM activity_room_totals"), 2 * N);

    assert_int_equal(js_DeleteConsumer(bus_js(b), bus_stream_name(b, BUS_STREAM_OUTBOX),
                                       "test-reset", NULL, NULL),
                     NATS_OK);
    start_group(&g, b, &h);
    assert_true(WAIT_STAT(g, duplicates, N, 10000));
    struct consume_stats st;
    consume_group_stats(g, &st);
    assert_int_equal(st.handled, 0);
    assert_int_equal(group_db_int("test-reset", "SELECT gifts FROM activity_room_totals"), 2 * N);
    consume_group_stop(g);
    for (int i = 0; i < N; i++)
        ev_free(&e[i]);
    delete_streams(b);
    s->close(s);
    bus_unref(b);
}

/* The room_seq rule (o.room_order, group.h): an event ahead of its room's
 * turn is held until the earlier one is done; a late one at or below the
 * room's mark (its room went on without it) is still done, once. */
static void
test_room_seq_order_and_dedupe(void **state)
{
    (void)state;
    struct bus *b = open_bus();
    struct sink *s = NULL;
    struct consume_group *g = NULL;
    struct consume_handler h;
    struct consume_stats st;
    enum { N = 4 };
    /* in publish order: 3 before 2; the last comes after its room's 3 */
    static const int64_t seqs[N] = {1, 3, 2, 2};
    struct ev e[N];
    char err[256];

    assert_int_equal(sink_bus_open(&s, b), 0);
    for (int i = 0; i < N; i++) {
        make_gift(&e[i], "room-o", i + 1, 5); /* gifts i + 1: which ones were handled */
        free(e[i].env);
        free(e[i].json);
        e[i].row.room_seq = seqs[i];
        assert_int_equal(outbox_event_build(&e[i].row, &e[i].env, &e[i].envlen, &e[i].json), 0);
        assert_int_equal(publish(s, &e[i], 2000, err, sizeof(err)), 0);
    }
    consume_activity_handler(&h, "test-order", NULL);
    start_group_with(&g, b, &h, true);
    assert_true(WAIT_STAT(g, handled, N, 10000));
    consume_group_stats(g, &st);
    consume_group_stop(g);
    print_message("handled %llu duplicates %llu held %llu\n", (unsigned long long)st.handled,
                  (unsigned long long)st.duplicates, (unsigned long long)st.held);
    assert_int_equal(st.handled, N);
    assert_int_equal(st.duplicates, 0);
    assert_true(st.held >= 1); /* room_seq 3 waited for 2 */
    assert_int_equal(group_db_int("test-order", "SELECT gifts FROM activity_room_totals"),
                     1 + 2 + 3 + 4);
    assert_int_equal(
        group_db_int("test-order", "SELECT seq FROM room_seq WHERE room_id = 'room-o'"), 3);
    /* a redelivery of them all (the cursor reset): duplicates, no effect */
    assert_int_equal(js_DeleteConsumer(bus_js(b), bus_stream_name(b, BUS_STREAM_OUTBOX),
                                       "test-order", NULL, NULL),
                     NATS_OK);
    start_group_with(&g, b, &h, true);
    assert_true(WAIT_STAT(g, duplicates, N, 10000));
    consume_group_stats(g, &st);
    consume_group_stop(g);
    assert_int_equal(st.handled, 0);
    assert_int_equal(group_db_int("test-order", "SELECT gifts FROM activity_room_totals"),
                     1 + 2 + 3 + 4);
    for (int i = 0; i < N; i++)
        ev_free(&e[i]);
    delete_streams(b);
    s->close(s);
    bus_unref(b);
}

/*
 * A private broker: down at start (bus_open still succeeds, publish fails
 * fast with ERETRY), up (publish works after the background connect), down
 * again while a group runs (publish ERETRY, group idle), back (the backlog
 * published meanwhile is drained by the group, nothing twice).
 */
static void
test_broker_down_and_back(void **state)
{
    (void)state;
    struct natsd nd = {.port = th_free_port()};
    char url[64], err[256];
    struct sink *s = NULL;
    struct consume_group *g = NULL;
    struct consume_handler h;
    enum { N = 6 };
    struct ev e[2 * N];

    nd.dir = xasprintf("%s/natsd", fx.dir);
    snprintf(url, sizeof(url), "nats://127.0.0.1:%d", nd.port);
    point_at(fx.conf, url);
    struct bus *b = open_bus();
    assert_int_equal(sink_bus_open(&s, b), 0);

    make_gift(&e[0], "room-d", 1, 1);
    int64_t t0 = clock_mono_ms();
    assert_int_equal(publish(s, &e[0], 2000, err, sizeof(err)), ROOMD_EUNAVAIL);
    assert_true(clock_mono_ms() - t0 < 500); /* fails fast while disconnected */

    natsd_start(&nd);
    int rc = ROOMD_ERETRY;
    for (int i = 0; i < 100 && rc != 0; i++) {
        rc = publish(s, &e[0], 1000, err, sizeof(err));
        if (rc != 0)
            sleep_ms(100);
    }
    assert_int_equal(rc, 0);
    for (int i = 1; i < N; i++) {
        make_gift(&e[i], "room-d", 1, 1);
        assert_int_equal(publish(s, &e[i], 2000, err, sizeof(err)), 0);
    }
    consume_activity_handler(&h, "test-outage", NULL);
    start_group(&g, b, &h);
    assert_true(WAIT_STAT(g, handled, N, 10000));

    natsd_stop(&nd);
    make_gift(&e[N], "room-d", 1, 1);
    assert_int_equal(publish(s, &e[N], 1000, err, sizeof(err)), ROOMD_EUNAVAIL);
    sleep_ms(500);

    natsd_start(&nd); /* same store dir: streams and the cursor survive */
    for (int i = N; i < 2 * N; i++) {
        if (i > N)
            make_gift(&e[i], "room-d", 1, 1);
        rc = ROOMD_ERETRY;
        for (int k = 0; k < 100 && rc != 0; k++) {
            rc = publish(s, &e[i], 1000, err, sizeof(err));
            if (rc != 0)
                sleep_ms(100);
        }
        assert_int_equal(rc, 0);
    }
    assert_true(WAIT_STAT(g, handled, 2 * N, 15000));
    assert_int_equal(stream_msgs(b, BUS_STREAM_OUTBOX), 2 * N);
    assert_int_equal(group_db_int("test-outage", "SELECT gifts FROM activity_room_totals"), 2 * N);
    consume_group_stop(g);
    s->close(s);
    bus_unref(b);
    natsd_stop(&nd);
    for (int i = 0; i < 2 * N; i++)
        ev_free(&e[i]);
    free(nd.dir);
}

/* The reconsume schedule: delays by failure count, the last repeating;
 * the default is RocketMQ's 16 levels (10 s .. 2 h). */
static void
test_retry_schedule(void **state)
{
    (void)state;
    struct consume_opts o;
    struct conf_rocketmq mq = fx.conf->rocketmq;

    consume_opts_from_conf(&o, &mq, 16);
    assert_int_equal(consume_retry_delay_ms(&o, 1), 100);
    assert_int_equal(consume_retry_delay_ms(&o, 2), 200);
    assert_int_equal(consume_retry_delay_ms(&o, 9), 200);
    mq.nconsumer_retry_delays = 0;
    consume_opts_from_conf(&o, &mq, 16);
    assert_int_equal(o.ndelays, 16);
    assert_int_equal(consume_retry_delay_ms(&o, 1), 10000);
    assert_int_equal(consume_retry_delay_ms(&o, 3), 60000);
    assert_int_equal(consume_retry_delay_ms(&o, 16), 7200000);
    assert_int_equal(consume_retry_delay_ms(&o, 40), 7200000);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_retry_schedule, setup, teardown),
        cmocka_unit_test_setup_teardown(test_publish_exactly_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_publish_batch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rocket_wakeup_sink, setup, teardown),
        cmocka_unit_test_setup_teardown(test_groups_dedupe_redelivery_dlq, setup, teardown),
        cmocka_unit_test_setup_teardown(test_consumer_reset_no_second_effect, setup, teardown),
        cmocka_unit_test_setup_teardown(test_room_seq_order_and_dedupe, setup, teardown),
        cmocka_unit_test_setup_teardown(test_broker_down_and_back, setup, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    bus_library_shutdown();
    return rc;
}
