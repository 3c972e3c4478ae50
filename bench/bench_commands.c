/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_commands.c: load generator for the command path (issue 2's speed goal).
 *
 *   bench_commands http URL CLIENTS ROOMS SECONDS DBFILE
 *       CLIENTS threads, each with one keep-alive connection, send a mix of
 *       join / mic up / gift / mic down / leave commands over ROOMS rooms for
 *       SECONDS; prints commands/s, p50/p99 latency and the largest outbox
 *       backlog (undelivered rows, sampled from DBFILE every 100 ms). DBFILE
 *       is a SQLite file, or mysql://USER@HOST:PORT/DATABASE for roomd on
 *       MariaDB (no password).
 *       BENCH_MIX=gifts: the gift path alone (each client joins its rooms once,
 *       then sends only SendGift, each paid from the embedded wallet).
 *   bench_commands grpc HOST:PORT CLIENTS ROOMS SECONDS DBFILE
 *       the same over the gRPC API (proto/room_service.proto), one channel
 *       per client thread; the same mix, rooms and figures.
 *   bench_commands heartbeat URL CLIENTS ROOMS SECONDS
 *       presence (docs/room.md, Presence): ROOMS rooms "hb-<pid>-<r>", each
 *       client joins one user of its own into each of its rooms (not timed),
 *       then sends POST /v1/rooms/{id}/heartbeat round-robin over them for
 *       SECONDS; prints heartbeats/s, p50/p99 and the store writes the
 *       heartbeats cost: the sum over those rooms of their version's growth
 *       during the pass (every commit bumps it; 0 = no store write).
 *   bench_commands ceiling URL CLIENTS SECONDS
 *       the HTTP ceiling: the same clients and connections, each request a
 *       GET /healthz (a trivial handler on the same libmicrohttpd server).
 *   bench_commands raw DBFILE CLIENTS SECONDS
 *       the baseline: CLIENTS threads write the same rows (command log row,
 *       one outbox row, room meta) with one transaction per command straight
 *       through store_save, into the same SQLite file.
 * Figures only, no assertions; bench/run.sh runs both in one go.
 */
#include "conf/conf.h"
#include "core/clock.h"
#include "core/uuid.h"
#include "core/xmalloc.h"
#include "peer/pbjson.h"
#include "room_service.pb-c.h"
#include "rpc/server.h"
#include "store/store.h"

#include <curl/curl.h>
#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *base_url;
static int nclients, nrooms, seconds, run_id;
static int gifts_only; /* BENCH_MIX=gifts */
static atomic_int stop_flag;
static atomic_long ok_count, err_count;

struct lat {
    int64_t *v;
    size_t n, cap;
};

static void
lat_add(struct lat *l, int64_t us)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 4096;
        l->v = xrealloc(l->v, l->cap * sizeof(*l->v));
    }
    l->v[l->n++] = us;
}

static int
cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* "Authorization: Bearer <ROOMD_BENCH_TOKEN>" when that variable is set, else "". */
static char auth_header[4096];

static size_t
discard(char *p, size_t sz, size_t n, void *arg)
{
    return sz * n;
}

/* One client's connection: a keep-alive curl handle or a gRPC channel of its
 * own (its own TCP connection, as each HTTP client has its own) with one
 * completion queue for its calls, one at a time. */
struct conn {
    CURL *curl;
    grpc_channel *channel;
    grpc_completion_queue *cq;
};

static bool use_grpc;

/* The gRPC method of each verb of the mix ("" = CreateRoom). */
static const struct {
    const char *verb, *method;
    const ProtobufCMessageDescriptor *in;
} grpc_methods[] = {
    {"", "/roomd.v1.RoomService/CreateRoom", &roomd__v1__create_room_request__descriptor},
    {"join", "/roomd.v1.RoomService/JoinRoom", &roomd__v1__join_room_request__descriptor},
    {"leave", "/roomd.v1.RoomService/LeaveRoom", &roomd__v1__leave_room_request__descriptor},
    {"mic/up", "/roomd.v1.RoomService/MicUp", &roomd__v1__mic_up_request__descriptor},
    {"mic/down", "/roomd.v1.RoomService/MicDown", &roomd__v1__mic_down_request__descriptor},
    {"gifts", "/roomd.v1.RoomService/SendGift", &roomd__v1__send_gift_request__descriptor},
};

static void
conn_open(struct conn *c)
{
    memset(c, 0, sizeof(*c));
    if (use_grpc) {
        /* gRPC core shares one subchannel (one TCP connection, at most the server's
         * grpc.max_concurrent_streams calls at a time) among channels of the same target
         * unless each keeps a local pool: 64 clients would be 16 streams on one socket */
        grpc_arg arg = {.type = GRPC_ARG_INTEGER,
                        .key = (char *)GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL,
                        .value.integer = 1};
        /* BENCH_GRPC_SHARED=1: the shared socket (as before; a connection at its stream cap) */
        const char *shared = getenv("BENCH_GRPC_SHARED");
        grpc_channel_args args = {.num_args = shared != NULL && strcmp(shared, "1") == 0 ? 0 : 1,
                                  .args = &arg};
        grpc_channel_credentials *creds = grpc_insecure_credentials_create();
        rpc_absl_deadlock_detection_off(); /* as roomd does (rpc/server.h) */
        grpc_init();
        c->channel = grpc_channel_create(base_url, creds, &args);
        grpc_channel_credentials_release(creds);
        c->cq = grpc_completion_queue_create_for_next(NULL);
        return;
    }
    c->curl = curl_easy_init();
    curl_easy_setopt(c->curl, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(c->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c->curl, CURLOPT_TIMEOUT_MS, 30000L);
}

static void
conn_close(struct conn *c)
{
    if (c->channel != NULL) {
        grpc_completion_queue_shutdown(c->cq);
        while (grpc_completion_queue_next(c->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
               GRPC_QUEUE_SHUTDOWN)
            ;
        grpc_completion_queue_destroy(c->cq);
        grpc_channel_destroy(c->channel);
        grpc_shutdown();
    }
    if (c->curl != NULL)
        curl_easy_cleanup(c->curl);
}

/* One unary call of method with the packed message req on c (30 s deadline,
 * waiting for the channel to connect): its status (UNKNOWN when the call
 * could not start). */
static int
grpc_unary(struct conn *c, const char *method, const uint8_t *req, size_t len)
{
    gpr_timespec dl =
        gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(30000, GPR_TIMESPAN));
    grpc_call *call =
        grpc_channel_create_call(c->channel, NULL, GRPC_PROPAGATE_DEFAULTS, c->cq,
                                 grpc_slice_from_static_string(method), NULL, dl, NULL);
    grpc_slice payload = grpc_slice_from_copied_buffer((const char *)req, len);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&payload, 1), *resp = NULL;
    grpc_metadata_array md_initial, md_trailing;
    grpc_status_code st = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();
    grpc_op ops[6];

    grpc_slice_unref(payload);
    grpc_metadata_array_init(&md_initial);
    grpc_metadata_array_init(&md_trailing);
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].flags = GRPC_INITIAL_METADATA_WAIT_FOR_READY;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = bb;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &md_initial;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &resp;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &md_trailing;
    ops[5].data.recv_status_on_client.status = &st;
    ops[5].data.recv_status_on_client.status_details = &details;
    if (grpc_call_start_batch(call, ops, 6, ops, NULL) == GRPC_CALL_OK)
        (void)grpc_completion_queue_next(c->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    grpc_call_unref(call);
    grpc_slice_unref(details);
    grpc_metadata_array_destroy(&md_initial);
    grpc_metadata_array_destroy(&md_trailing);
    grpc_byte_buffer_destroy(bb);
    if (resp != NULL)
        grpc_byte_buffer_destroy(resp);
    return st;
}

/* The body (JSON) of verb in room as the request message of its RPC. */
static long
send_grpc(struct conn *c, const char *room, const char *verb, const char *body)
{
    json_t *j = json_loads(body, 0, NULL);
    uint8_t *req;
    size_t len;

    for (size_t i = 0; i < sizeof(grpc_methods) / sizeof(grpc_methods[0]); i++) {
        if (strcmp(grpc_methods[i].verb, verb) != 0)
            continue;
        json_object_set_new(j, "room_id", json_string(room));
        req = pbjson_to_wire(j, grpc_methods[i].in, &len);
        json_decref(j);
        int st = grpc_unary(c, grpc_methods[i].method, req, len);
        free(req);
        return st == GRPC_STATUS_OK ? 200 : 500;
    }
    json_decref(j);
    return 0;
}

/* Sends one command (verb "" = create) over the client's transport; returns
 * the HTTP status (200 for a gRPC OK, 500 for any other status, 0 when no
 * answer came). */
static long
send_cmd(struct conn *c, const char *room, const char *verb, const char *body)
{
    char url[512];
    long code = 0;
    struct curl_slist *h;

    if (use_grpc)
        return send_grpc(c, room, verb, body);
    if (verb[0] == '\0')
        snprintf(url, sizeof(url), "%s/v1/rooms", base_url);
    else
        snprintf(url, sizeof(url), "%s/v1/rooms/%s/%s", base_url, room, verb);
    h = curl_slist_append(NULL, "Content-Type: application/json");
    if (auth_header[0] != '\0') /* ROOMD_BENCH_TOKEN: auth.mode jwt */
        h = curl_slist_append(h, auth_header);
    curl_easy_setopt(c->curl, CURLOPT_URL, url);
    curl_easy_setopt(c->curl, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, h);
    if (curl_easy_perform(c->curl) == CURLE_OK)
        curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &code);
    curl_slist_free_all(h);
    return code;
}

struct client {
    int id;
    struct lat lat;
    pthread_t th;
};

/* Runs nclients threads of fn for seconds, then stops them and gathers their
 * latencies into *all. Returns the wall time in seconds. */
static double
run_clients(void *(*fn)(void *), struct lat *all)
{
    struct client *cl = xcalloc((size_t)nclients, sizeof(*cl));
    struct timespec ts = {seconds, 0};
    int64_t t0 = clock_mono_us();

    for (int i = 0; i < nclients; i++) {
        cl[i].id = i;
        pthread_create(&cl[i].th, NULL, fn, &cl[i]);
    }
    nanosleep(&ts, NULL);
    atomic_store(&stop_flag, 1);
    for (int i = 0; i < nclients; i++) {
        pthread_join(cl[i].th, NULL);
        for (size_t j = 0; j < cl[i].lat.n; j++)
            lat_add(all, cl[i].lat.v[j]);
        free(cl[i].lat.v);
    }
    free(cl);
    return (clock_mono_us() - t0) / 1e6;
}

/* Each client owns rooms id, id+nclients, ...; per room it cycles one user through
 * join -> mic up -> gift -> gift -> mic down -> leave. */
static void *
client_main(void *arg)
{
    struct client *cl = arg;
    struct conn c;
    char room[64], body[512];
    uint64_t seq = 0;

    conn_open(&c);
    int my = 0;
    for (int r = cl->id; r < nrooms; r += nclients)
        my++;
    if (my == 0)
        my = 1;
    while (!atomic_load(&stop_flag)) {
        int r = cl->id + nclients * (int)(seq / 6 % (uint64_t)my);
        if (r >= nrooms)
            r = cl->id % nrooms;
        static const char *const steps[6] = {"join",  "mic/up",   "gifts",
                                             "gifts", "mic/down", "leave"};
        const char *p = steps[seq % 6];
        if (gifts_only) { /* join each of my rooms once, then gifts only */
            r = cl->id + nclients * (int)(seq % (uint64_t)my);
            if (r >= nrooms)
                r = cl->id % nrooms;
            p = seq < (uint64_t)my ? "join" : "gifts";
        }
        long uid = 1000L * (run_id % 1000000) + cl->id; /* fresh users for each run */
        int n = snprintf(body, sizeof(body), "{\"command_id\":\"b%d-%d-%lu\",\"uid\":%ld", run_id,
                         cl->id, (unsigned long)seq, uid);
        if (strcmp(p, "gifts") == 0)
            n += snprintf(body + n, sizeof(body) - (size_t)n,
                          ",\"to_uid\":%ld,\"gift_id\":\"rose\",\"count\":1,\"unit_price\":1", uid);
        snprintf(body + n, sizeof(body) - (size_t)n, "}");
        snprintf(room, sizeof(room), "bench-%d", r);
        int64_t t0 = clock_mono_us();
        long code = send_cmd(&c, room, p, body);
        lat_add(&cl->lat, clock_mono_us() - t0);
        if (code == 200)
            atomic_fetch_add(&ok_count, 1);
        else
            atomic_fetch_add(&err_count, 1);
        seq++;
    }
    conn_close(&c);
    return NULL;
}

static void report(const char *what, struct lat *all, double secs);

/* Each client owns rooms id, id+nclients, ... of "hb-<run>-<r>" (it joined
 * its user into each); it heartbeats them round-robin. */
static void *
heartbeat_main(void *arg)
{
    struct client *cl = arg;
    struct conn c;
    char room[64], body[128];
    uint64_t seq = 0;
    int my = 0;

    conn_open(&c);
    for (int r = cl->id; r < nrooms; r += nclients)
        my++;
    while (!atomic_load(&stop_flag) && my > 0) {
        int r = cl->id + nclients * (int)(seq % (uint64_t)my);
        long uid = 1000L * (run_id % 1000000) + cl->id;
        snprintf(body, sizeof(body), "{\"uid\":%ld}", uid);
        snprintf(room, sizeof(room), "hb-%d-%d", run_id, r);
        int64_t t0 = clock_mono_us();
        long code = send_cmd(&c, room, "heartbeat", body);
        lat_add(&cl->lat, clock_mono_us() - t0);
        atomic_fetch_add(code == 200 ? &ok_count : &err_count, 1);
        seq++;
    }
    conn_close(&c);
    return NULL;
}

static size_t
keep(char *p, size_t sz, size_t n, void *arg)
{
    json_t **out = arg;
    json_error_t je;

    json_decref(*out);
    *out = json_loadb(p, sz * n, 0, &je); /* a room's GET: one small chunk (else NULL) */
    return sz * n;
}

/* The sum of the versions of rooms "hb-<run>-<r>" (GET /v1/rooms/{id}). */
static long long
hb_versions(void)
{
    CURL *c = curl_easy_init();
    long long sum = 0;
    char url[512];

    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, keep);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    struct curl_slist *h = NULL;
    if (auth_header[0] != '\0')
        h = curl_slist_append(h, auth_header);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    for (int r = 0; r < nrooms; r++) {
        json_t *j = NULL;
        snprintf(url, sizeof(url), "%s/v1/rooms/hb-%d-%d", base_url, run_id, r);
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &j);
        if (curl_easy_perform(c) == CURLE_OK)
            sum += json_integer_value(json_object_get(j, "version"));
        json_decref(j);
    }
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return sum;
}

/* bench_commands heartbeat URL CLIENTS ROOMS SECONDS */
static int
run_heartbeat(char **argv)
{
    struct lat all = {0};
    struct conn c;
    char body[256], room[64];

    base_url = argv[2];
    run_id = (int)getpid();
    nclients = atoi(argv[3]);
    nrooms = atoi(argv[4]);
    seconds = atoi(argv[5]);
    const char *token = getenv("ROOMD_BENCH_TOKEN");
    if (token != NULL && token[0] != '\0')
        snprintf(auth_header, sizeof(auth_header), "Authorization: Bearer %s", token);
    curl_global_init(CURL_GLOBAL_ALL);
    conn_open(&c);
    for (int r = 0; r < nrooms; r++) { /* the rooms and their members (not timed) */
        snprintf(room, sizeof(room), "hb-%d-%d", run_id, r);
        snprintf(body, sizeof(body),
                 "{\"command_id\":\"hbc-%d-%d\",\"room_id\":\"%s\",\"owner_uid\":1,"
                 "\"title\":\"hb\"}",
                 run_id, r, room);
        send_cmd(&c, room, "", body);
        for (int k = r % nclients; k < nclients; k += nrooms) {
            snprintf(body, sizeof(body), "{\"command_id\":\"hbj-%d-%d-%d\",\"uid\":%ld}", run_id, r,
                     k, 1000L * (run_id % 1000000) + k);
            send_cmd(&c, room, "join", body);
        }
    }
    conn_close(&c);
    long long v0 = hb_versions();
    double secs = run_clients(heartbeat_main, &all);
    long long writes = hb_versions() - v0;
    report("hb", &all, secs);
    printf("hb     store_writes=%lld during %zu heartbeats (writes_per_heartbeat=%.6f)\n", writes,
           all.n, all.n ? (double)writes / (double)all.n : 0.0);
    free(all.v);
    curl_global_cleanup();
    return 0;
}

/* Points c's store at db: "mysql://USER@HOST:PORT/DATABASE", else a SQLite
 * file. Exits on a malformed URL. */
static void
store_target(struct conf *c, const char *db)
{
    char user[64], host[128], name[128];
    int port;

    free(c->store.driver);
    if (strncmp(db, "mysql://", 8) != 0) {
        c->store.driver = xstrdup("sqlite");
        free(c->store.sqlite.path);
        c->store.sqlite.path = xstrdup(db);
        return;
    }
    if (sscanf(db + 8, "%63[^@]@%127[^:]:%d/%127s", user, host, &port, name) != 4) {
        fprintf(stderr, "%s: want mysql://USER@HOST:PORT/DATABASE\n", db);
        exit(2);
    }
    c->store.driver = xstrdup("mysql");
    free(c->store.mysql.user);
    c->store.mysql.user = xstrdup(user);
    free(c->store.mysql.host);
    c->store.mysql.host = xstrdup(host);
    c->store.mysql.port = port;
    free(c->store.mysql.database);
    c->store.mysql.database = xstrdup(name);
    c->store.mysql.pool_size = 2;
}

/* GET /healthz on one keep-alive connection until stopped. */
static void *
ceiling_main(void *arg)
{
    struct client *cl = arg;
    CURL *c = curl_easy_init();
    char url[512];

    snprintf(url, sizeof(url), "%s/healthz", base_url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 30000L);
    curl_easy_setopt(c, CURLOPT_URL, url);
    while (!atomic_load(&stop_flag)) {
        long code = 0;
        int64_t t0 = clock_mono_us();
        if (curl_easy_perform(c) == CURLE_OK)
            curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
        lat_add(&cl->lat, clock_mono_us() - t0);
        atomic_fetch_add(code == 200 ? &ok_count : &err_count, 1);
    }
    curl_easy_cleanup(c);
    return NULL;
}

static struct store *
open_store(const char *db)
{
    struct conf c;
    struct store *s;
    char err[256];

    conf_defaults(&c);
    store_target(&c, db);
    if (store_open(&s, &c.store, err, sizeof(err)) != 0) {
        fprintf(stderr, "store: %s\n", err);
        exit(1);
    }
    return s;
}

static struct store *sample_store;
static int64_t max_backlog;

static void *
sampler_main(void *arg)
{
    while (!atomic_load(&stop_flag)) {
        struct outbox_counts oc;
        if (store_outbox_counts(sample_store, &oc) == 0) {
            int64_t b = oc.pending + oc.delivering + oc.retryable;
            if (b > max_backlog)
                max_backlog = b;
        }
        struct timespec ts = {0, 100 * 1000000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static void
report(const char *what, struct lat *all, double secs)
{
    qsort(all->v, all->n, sizeof(int64_t), cmp64);
    double p50 = all->n ? all->v[all->n / 2] / 1000.0 : 0;
    double p99 = all->n ? all->v[all->n * 99 / 100] / 1000.0 : 0;
    printf("%-6s clients=%d ops=%zu ok=%ld err=%ld rate=%.0f/s p50=%.2fms p99=%.2fms\n", what,
           nclients, all->n, atomic_load(&ok_count), atomic_load(&err_count), all->n / secs, p50,
           p99);
}

/* bench_commands http|grpc ADDR CLIENTS ROOMS SECONDS DBFILE */
static int
run_roomd(char **argv)
{
    use_grpc = strcmp(argv[1], "grpc") == 0;
    base_url = argv[2];
    run_id = (int)getpid();
    gifts_only = getenv("BENCH_MIX") != NULL && strcmp(getenv("BENCH_MIX"), "gifts") == 0;
    nclients = atoi(argv[3]);
    nrooms = atoi(argv[4]);
    seconds = atoi(argv[5]);
    const char *token = getenv("ROOMD_BENCH_TOKEN");
    if (token != NULL && token[0] != '\0')
        snprintf(auth_header, sizeof(auth_header), "Authorization: Bearer %s", token);
    curl_global_init(CURL_GLOBAL_ALL);
    /* Create the rooms first (not timed; a second run finds them: 409, fine). */
    struct conn c;
    conn_open(&c);
    for (int r = 0; r < nrooms; r++) {
        char body[256], room[64];
        snprintf(room, sizeof(room), "bench-%d", r);
        snprintf(body, sizeof(body),
                 "{\"command_id\":\"create-bench-%d\",\"room_id\":\"%s\",\"owner_uid\":1,"
                 "\"title\":\"bench\"}",
                 r, room);
        send_cmd(&c, room, "", body);
    }
    conn_close(&c);
    sample_store = open_store(argv[6]);
    pthread_t sampler;
    pthread_create(&sampler, NULL, sampler_main, NULL);
    struct lat all = {0};
    double secs = run_clients(client_main, &all);
    pthread_join(sampler, NULL);
    const char *what = use_grpc ? "grpc" : "http";
    report(what, &all, secs);
    printf("%-6s max_outbox_backlog=%lld rows\n", what, (long long)max_backlog);
    struct outbox_counts oc;
    int64_t wait0 = clock_mono_ms();
    while (store_outbox_counts(sample_store, &oc) == 0 &&
           oc.pending + oc.delivering + oc.retryable > 0 && clock_mono_ms() - wait0 < 60000) {
        struct timespec w = {0, 50 * 1000000};
        nanosleep(&w, NULL);
    }
    printf("%-6s outbox drained in %.2fs after the load stopped (delivered=%lld)\n", what,
           (clock_mono_ms() - wait0) / 1000.0, (long long)oc.delivered);
    store_close(sample_store);
    free(all.v);
    curl_global_cleanup();
    return 0;
}

static struct store *raw_store;

/* One transaction per command: a single-mutation store_save, like a service without
 * group commit, writing the rows a gift command writes. */
static void *
raw_main(void *arg)
{
    struct client *cl = arg;
    char room[48], cmd[STORE_ID_MAX];
    int64_t version = 0;
    static const char req[] =
        "{\"command_id\":\"x\",\"count\":1,\"gift_id\":\"rose\",\"room_id\":"
        "\"raw\",\"to_uid\":1,\"type\":\"SendGift\",\"uid\":1,\"unit_price\":1}";
    uint8_t payload[32] = {0x08, 0x01, 0x10, 0x01, 0x1a, 0x04, 'r', 'o', 's', 'e'};

    snprintf(room, sizeof(room), "raw-%d-%lld", cl->id, (long long)clock_wall_ms());
    while (!atomic_load(&stop_flag)) {
        struct mutation m;
        struct outbox_new ev;
        memset(&m, 0, sizeof(m));
        snprintf(m.app_code, sizeof(m.app_code), "bench");
        snprintf(m.room_id, sizeof(m.room_id), "%s", room);
        snprintf(cmd, sizeof(cmd), "%s-%lld", room, (long long)version);
        snprintf(m.command_id, sizeof(m.command_id), "%s", cmd);
        m.command_type = version == 0 ? "CreateRoom" : "SendGift";
        m.request = req;
        m.response = "{\"room_id\":\"raw\",\"version\":1,\"events\":[]}";
        m.version = version + 1;
        m.created_at_ms = clock_wall_ms();
        m.create = version == 0;
        m.meta = (struct room_meta){.owner_uid = 1,
                                    .title = "raw",
                                    .status = "open",
                                    .version = version + 1,
                                    .rocket_status = "idle",
                                    .rocket_id = "",
                                    .rocket_level = 1,
                                    .created_at_ms = m.created_at_ms,
                                    .updated_at_ms = m.created_at_ms};
        uuid_v7(m.created_at_ms, ev.event_id);
        ev.event_type = "RoomGiftSent";
        ev.payload = payload;
        ev.payload_len = 10;
        m.events = &ev;
        m.nevents = 1;
        struct mutation *mp = &m;
        int64_t t0 = clock_mono_us();
        int rc = store_save(raw_store, &mp, 1);
        lat_add(&cl->lat, clock_mono_us() - t0);
        if (rc == 0 && m.rc == 0) {
            version++;
            atomic_fetch_add(&ok_count, 1);
        } else
            atomic_fetch_add(&err_count, 1);
    }
    return NULL;
}

static int
run_raw(char **argv)
{
    raw_store = open_store(argv[2]);
    nclients = atoi(argv[3]);
    seconds = atoi(argv[4]);
    struct lat all = {0};
    report("raw", &all, run_clients(raw_main, &all));
    store_close(raw_store);
    free(all.v);
    return 0;
}

static int
run_ceiling(char **argv)
{
    struct lat all = {0};

    base_url = argv[2];
    nclients = atoi(argv[3]);
    seconds = atoi(argv[4]);
    curl_global_init(CURL_GLOBAL_ALL);
    report("ceil", &all, run_clients(ceiling_main, &all));
    free(all.v);
    curl_global_cleanup();
    return 0;
}

int
main(int argc, char **argv)
{
    if (argc == 7 && (strcmp(argv[1], "http") == 0 || strcmp(argv[1], "grpc") == 0))
        return run_roomd(argv);
    if (argc == 5 && strcmp(argv[1], "raw") == 0)
        return run_raw(argv);
    if (argc == 5 && strcmp(argv[1], "ceiling") == 0)
        return run_ceiling(argv);
    if (argc == 6 && strcmp(argv[1], "heartbeat") == 0)
        return run_heartbeat(argv);
    fprintf(stderr, "usage: bench_commands http URL CLIENTS ROOMS SECONDS DBFILE\n"
                    "       bench_commands grpc HOST:PORT CLIENTS ROOMS SECONDS DBFILE\n"
                    "       bench_commands raw DBFILE CLIENTS SECONDS\n"
                    "       bench_commands ceiling URL CLIENTS SECONDS\n"
                    "       bench_commands heartbeat URL CLIENTS ROOMS SECONDS\n");
    return 2;
}
