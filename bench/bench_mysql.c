/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_mysql.c: the MySQL store against a real server, figures only.
 *   1. group: 64 threads each committing commands (command log row + 1 outbox
 *      row + a new rooms row) through group_commit -> store_save: commands/s
 *      and p50/p99 of the submit latency.
 *   2. raw: the same 3 rows written one transaction per command by 64
 *      threads, each on its own connection (prepared INSERTs + COMMIT), in the
 *      same run and database: commands/s and p50/p99. raw1: the same by one
 *      thread, whose p50 is the floor of a durable command at one client
 *      (START, 3 INSERTs, COMMIT and the redo log's fsync; no HTTP, no roomd).
 *   3. claim: latency of store_outbox_claim (batch 100) with 10k and with 1M
 *      delivered rows in room_outbox (the claim must not read them), two
 *      databases claimed alternately; then counts and purge on the 1M table.
 *
 *   bench_mysql [SECONDS] [PORT] [HOST]   (defaults 5, $ROOMD_MYSQL_PORT or 3417, 127.0.0.1)
 *   BENCH_ONLY=group,raw,raw1,claim picks parts (default group,raw,claim; claim includes
 *   counts and purge).
 * Uses root without a password and a fresh database roomd_bench_<pid>, dropped
 * afterwards. Prints innodb_flush_log_at_trx_commit: run it with 1.
 */
#include "bench.h"
#include "store/group_commit.h"

#include <mysql.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define THREADS 64
#define MAXLAT 400000
#define GROUP_MAX 64

static const char *host = "127.0.0.1";
static int port = 3417;
static char dbname[64];
static int seconds = 5;
static atomic_int seq;
static atomic_bool stop;

static MYSQL *
connect_db(const char *db)
{
    MYSQL *m = mysql_init(NULL);

    if (!mysql_real_connect(m, host, "root", "", db, (unsigned)port, NULL, 0)) {
        fprintf(stderr, "connect %s:%d: %s\n", host, port, mysql_error(m));
        exit(1);
    }
    return m;
}

static void
sql(MYSQL *m, const char *q)
{
    MYSQL_RES *r;

    if (mysql_query(m, q) != 0) {
        fprintf(stderr, "%s: %s\n", q, mysql_error(m));
        exit(1);
    }
    if ((r = mysql_store_result(m)) != NULL)
        mysql_free_result(r);
}

static long long
sql_int(MYSQL *m, const char *q)
{
    MYSQL_RES *r;
    MYSQL_ROW row;
    long long v = -1;

    if (mysql_query(m, q) != 0 || (r = mysql_store_result(m)) == NULL) {
        fprintf(stderr, "%s: %s\n", q, mysql_error(m));
        exit(1);
    }
    if ((row = mysql_fetch_row(r)) != NULL && row[0] != NULL)
        v = atoll(row[0]);
    mysql_free_result(r);
    return v;
}

static void
empty_tables(MYSQL *m)
{
    sql(m, "TRUNCATE TABLE room_outbox");
    sql(m, "TRUNCATE TABLE room_command_log");
    sql(m, "TRUNCATE TABLE rooms");
}

/* ---- latencies ---- */

struct lat {
    int64_t *us;
    atomic_int n;
};

static void
lat_add(struct lat *l, int64_t us)
{
    int i = atomic_fetch_add(&l->n, 1);

    if (i < MAXLAT)
        l->us[i] = us;
}

static int
cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return x < y ? -1 : x > y;
}

static void
lat_report(const char *what, const char *unit, struct lat *l, int64_t wall_us, const char *extra)
{
    int n = atomic_load(&l->n) < MAXLAT ? atomic_load(&l->n) : MAXLAT;

    qsort(l->us, (size_t)n, sizeof(int64_t), cmp64);
    printf("%-9s %7d %s in %5.2f s: %7.0f %s/s  p50 %6.2f ms  p99 %6.2f ms%s\n", what,
           atomic_load(&l->n), unit, (double)wall_us / 1e6,
           atomic_load(&l->n) / ((double)wall_us / 1e6), unit, n ? (double)l->us[n / 2] / 1e3 : 0,
           n ? (double)l->us[(int)(n * 0.99)] / 1e3 : 0, extra);
}

/* ---- 1. group commit through the store ---- */

struct gctx {
    struct group_commit *gc;
    struct lat *lat;
    atomic_int errors;
};

static void *
group_thread(void *arg)
{
    struct gctx *g = arg;
    struct bench_mutation b;

    while (!atomic_load(&stop)) {
        int64_t t0 = clock_mono_us();

        bench_mutation_init(&b, "", atomic_fetch_add(&seq, 1), 1);
        if (group_commit_submit(g->gc, &b.m) != 0)
            atomic_fetch_add(&g->errors, 1);
        else
            lat_add(g->lat, clock_mono_us() - t0);
    }
    return NULL;
}

static void
run_group(struct store *st, struct lat *lat)
{
    struct gctx g = {.lat = lat};
    pthread_t th[THREADS];
    uint64_t batches, muts;
    int64_t t0;
    char extra[96];

    group_commit_open(&g.gc, st, GROUP_MAX);
    atomic_store(&stop, false);
    t0 = clock_mono_us();
    for (int i = 0; i < THREADS; i++)
        pthread_create(&th[i], NULL, group_thread, &g);
    sleep((unsigned)seconds);
    atomic_store(&stop, true);
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    t0 = clock_mono_us() - t0;
    group_commit_stats(g.gc, &batches, &muts);
    group_commit_close(g.gc);
    snprintf(extra, sizeof(extra), "  (%.1f commands/transaction, %d errors)",
             batches ? (double)muts / (double)batches : 0, atomic_load(&g.errors));
    lat_report("group", "commands", lat, t0, extra);
}

/* ---- 2. raw: one transaction per command, 64 connections (raw1: one) ---- */

static const char *const raw_sql[3] = {
    "INSERT INTO room_command_log (app_code, room_id, version, command_id, command_type,"
    " request, response, created_at_ms) VALUES (?,?,1,?,'CreateRoom',?,?,?)",
    "INSERT INTO room_outbox (event_id, app_code, room_id, room_version, command_id,"
    " event_type, payload, status, due_at_ms, created_at_ms, updated_at_ms)"
    " VALUES (?,?,?,1,?,'RoomCreated',?,'pending',?,?,?)",
    "INSERT INTO rooms (app_code, room_id, owner_uid, title, status, version, fence_token,"
    " rocket_status, rocket_id, rocket_level, rocket_launch_at_ms, created_at_ms,"
    " updated_at_ms) VALUES (?,?,42,'a bench room','open',1,0,'idle','',0,0,?,?)",
};

static void
bind_str(MYSQL_BIND *b, const char *s, unsigned long *len)
{
    memset(b, 0, sizeof(*b));
    *len = strlen(s);
    b->buffer_type = MYSQL_TYPE_STRING;
    b->buffer = (void *)s;
    b->buffer_length = *len;
    b->length = len;
}

static void
bind_i64(MYSQL_BIND *b, int64_t *v)
{
    memset(b, 0, sizeof(*b));
    b->buffer_type = MYSQL_TYPE_LONGLONG;
    b->buffer = v;
}

struct rctx {
    struct lat *lat;
    atomic_int errors;
};

static void *
raw_thread(void *arg)
{
    struct rctx *r = arg;
    MYSQL *m = connect_db(dbname);
    MYSQL_STMT *st[3];
    struct bench_mutation b;

    for (int i = 0; i < 3; i++) {
        st[i] = mysql_stmt_init(m);
        if (mysql_stmt_prepare(st[i], raw_sql[i], strlen(raw_sql[i])) != 0) {
            fprintf(stderr, "prepare: %s\n", mysql_stmt_error(st[i]));
            exit(1);
        }
    }
    while (!atomic_load(&stop)) {
        int64_t t0 = clock_mono_us(), now;
        MYSQL_BIND p[9];
        unsigned long len[9];
        bool ok = true;

        bench_mutation_init(&b, "", atomic_fetch_add(&seq, 1), 1);
        now = b.m.created_at_ms;
        if (mysql_query(m, "START TRANSACTION") != 0)
            ok = false;
        bind_str(&p[0], b.m.app_code, &len[0]);
        bind_str(&p[1], b.m.room_id, &len[1]);
        bind_str(&p[2], b.m.command_id, &len[2]);
        bind_str(&p[3], b.m.request, &len[3]);
        bind_str(&p[4], b.m.response, &len[4]);
        bind_i64(&p[5], &now);
        ok = ok && !mysql_stmt_bind_param(st[0], p) && !mysql_stmt_execute(st[0]);
        bind_str(&p[0], b.ev[0].event_id, &len[0]);
        bind_str(&p[1], b.m.app_code, &len[1]);
        bind_str(&p[2], b.m.room_id, &len[2]);
        bind_str(&p[3], b.m.command_id, &len[3]);
        memset(&p[4], 0, sizeof(p[4]));
        p[4].buffer_type = MYSQL_TYPE_BLOB;
        p[4].buffer = b.payload;
        p[4].buffer_length = sizeof(b.payload);
        bind_i64(&p[5], &now);
        bind_i64(&p[6], &now);
        bind_i64(&p[7], &now);
        ok = ok && !mysql_stmt_bind_param(st[1], p) && !mysql_stmt_execute(st[1]);
        bind_str(&p[0], b.m.app_code, &len[0]);
        bind_str(&p[1], b.m.room_id, &len[1]);
        bind_i64(&p[2], &now);
        bind_i64(&p[3], &now);
        ok = ok && !mysql_stmt_bind_param(st[2], p) && !mysql_stmt_execute(st[2]);
        ok = ok && !mysql_commit(m);
        if (!ok) {
            mysql_rollback(m);
            atomic_fetch_add(&r->errors, 1);
        } else {
            lat_add(r->lat, clock_mono_us() - t0);
        }
    }
    for (int i = 0; i < 3; i++)
        mysql_stmt_close(st[i]);
    mysql_close(m);
    return NULL;
}

static void
run_raw(struct lat *lat, int threads, const char *name)
{
    struct rctx r = {.lat = lat};
    pthread_t th[THREADS];
    int64_t t0;
    char extra[64];

    atomic_store(&stop, false);
    t0 = clock_mono_us();
    for (int i = 0; i < threads; i++)
        pthread_create(&th[i], NULL, raw_thread, &r);
    sleep((unsigned)seconds);
    atomic_store(&stop, true);
    for (int i = 0; i < threads; i++)
        pthread_join(th[i], NULL);
    t0 = clock_mono_us() - t0;
    snprintf(extra, sizeof(extra), "  (1 command/transaction, %d errors)", atomic_load(&r.errors));
    lat_report(name, "commands", lat, t0, extra);
}

/* ---- 3. claim latency vs delivered rows ---- */

static void
fill_delivered(MYSQL *m, long long target)
{
    long long have = sql_int(m, "SELECT COUNT(*) FROM room_outbox WHERE status='delivered'");
    char q[640];

    while (have < target) {
        long long k = target - have > 200000 ? 200000 : target - have;

        snprintf(q, sizeof(q),
                 "INSERT INTO room_outbox (event_id, app_code, room_id, room_version,"
                 " command_id, event_type, payload, status, retry_count, sinks_done,"
                 " due_at_ms, created_at_ms, updated_at_ms, delivered_at_ms)"
                 " SELECT UUID(), 'bench', CONCAT('old-', seq %% 5000), seq, CONCAT('d-', seq),"
                 " 'RoomUserJoined', REPEAT('x', 64), 'delivered', 0, 3, NULL, 1, 2, 2"
                 " FROM seq_1_to_%lld",
                 k);
        sql(m, q);
        have += k;
    }
}

static void
add_pending(MYSQL *m, int n)
{
    char q[640];

    snprintf(q, sizeof(q),
             "INSERT INTO room_outbox (event_id, app_code, room_id, room_version, command_id,"
             " event_type, payload, status, due_at_ms, created_at_ms, updated_at_ms)"
             " SELECT UUID(), 'bench', CONCAT('new-', seq %% 100), seq, CONCAT('p-', UUID()),"
             " 'RoomUserJoined', REPEAT('y', 64), 'pending', 1000 + seq, 1000 + seq,"
             " 1000 + seq FROM seq_1_to_%d",
             n);
    sql(m, q);
}

/*
 * outbox_worker.ordering per_room on the 1M table with a backlog of 40000
 * pending rows in 100 rooms (400 each): claims of 100 that complete their
 * rows between claims (a draining backlog), per_room and none in turn
 * (bench_claim_ordering), then per_room claims while every room has a row
 * in flight (the candidates
 * scan passes over the whole blocked backlog and finds nothing).
 */
static void
claim_ordered_bench(struct store *st, const char *db)
{
    MYSQL *m = connect_db(db);
    struct lat blocked = {.us = xcalloc(MAXLAT, sizeof(int64_t))};
    struct outbox_row *rows;
    int64_t now = clock_wall_ms(), bsum = 0;
    size_t n;

    /* the plain claims above left their rows in flight: settle them first */
    sql(m, "UPDATE room_outbox SET status='delivered', due_at_ms=NULL, delivered_at_ms=1"
           " WHERE status<>'delivered'");
    add_pending(m, 40000);
    mysql_close(m);
    bench_claim_ordering(st, "mysql@1M", 100);
    /* claims of one row put every room's head in flight; then the scan passes
     * over their later rows and finds none */
    for (int i = 0; i < 100; i++) {
        store_outbox_claim_ordered(st, now, now + 600000, "bench", 1, true, &rows, &n);
        outbox_rows_free(rows, n);
    }
    for (int i = 0; i < 20; i++) {
        int64_t c0 = clock_mono_us();

        store_outbox_claim_ordered(st, now, now + 600000, "bench", 100, true, &rows, &n);
        int64_t us = clock_mono_us() - c0;
        lat_add(&blocked, us);
        bsum += us;
        outbox_rows_free(rows, n);
    }
    lat_report("claim_ordered_blocked", "claims", &blocked, bsum,
               "  (every room in flight, the backlog scanned)");
    free(blocked.us);
}

/* Opens the store on database db (created here). */
static struct store *
open_on(struct conf *c, MYSQL *admin, const char *db)
{
    struct store *st = NULL;
    char err[256], q[128];

    snprintf(q, sizeof(q), "CREATE DATABASE IF NOT EXISTS %s CHARACTER SET utf8mb4", db);
    sql(admin, q);
    free(c->store.mysql.database);
    c->store.mysql.database = xstrdup(db);
    if (store_open(&st, &c->store, err, sizeof(err)) != 0) {
        fprintf(stderr, "store_open: %s\n", err);
        exit(1);
    }
    return st;
}

/*
 * Claim latency with 10k and with 1M delivered rows, measured alternately on
 * two databases of the same server (one claim on each in turn), so both see
 * the same background load and fsync times.
 */
static void
run_claims(struct conf *c, MYSQL *admin, struct store *large)
{
    static const long long sizes[2] = {10000, 1000000};
    char small_db[80], q[128];
    struct store *st[2];
    struct lat lat[2];
    struct outbox_row *rows;
    size_t n, total[2] = {0, 0};
    int64_t now = clock_wall_ms(), t0;
    MYSQL *m[2];

    snprintf(small_db, sizeof(small_db), "%s_small", dbname);
    st[0] = open_on(c, admin, small_db);
    st[1] = large;
    m[0] = connect_db(small_db);
    m[1] = connect_db(dbname);
    for (int k = 0; k < 2; k++) {
        lat[k] = (struct lat){.us = xcalloc(MAXLAT, sizeof(int64_t))};
        empty_tables(m[k]);
        t0 = clock_mono_us();
        fill_delivered(m[k], sizes[k]);
        add_pending(m[k], 40000);
        sql(m[k], "ANALYZE TABLE room_outbox");
        printf("filled   %lld delivered + 40000 pending rows in %.1f s\n", sizes[k],
               (double)(clock_mono_us() - t0) / 1e6);
    }
    for (int i = 0; i < 400; i++) {
        for (int k = 0; k < 2; k++) {
            int64_t c0 = clock_mono_us();

            if (store_outbox_claim(st[k], now, now + 600000, "bench", 100, &rows, &n) != 0) {
                fprintf(stderr, "claim: %s\n", store_errmsg());
                exit(1);
            }
            lat_add(&lat[k], clock_mono_us() - c0);
            total[k] += n;
            outbox_rows_free(rows, n);
        }
    }
    for (int k = 0; k < 2; k++) {
        char what[32], extra[96];
        int64_t sum = 0;

        for (int i = 0; i < atomic_load(&lat[k].n); i++)
            sum += lat[k].us[i];
        snprintf(what, sizeof(what), "claim%s", k ? "@1M" : "@10k");
        snprintf(extra, sizeof(extra), "  (batch 100, %zu rows claimed)", total[k]);
        lat_report(what, "claims", &lat[k], sum, extra);
        free(lat[k].us);
        mysql_close(m[k]);
    }
    claim_ordered_bench(st[1], dbname);
    store_close(st[0]);
    snprintf(q, sizeof(q), "DROP DATABASE %s", small_db);
    sql(admin, q);
}

/* The operator's view and retention on the 1M-row table. */
static void
run_counts_purge(struct store *st)
{
    struct outbox_counts oc;
    size_t purged = 0, total = 0;
    int64_t t0 = clock_mono_us(), t1;

    if (store_outbox_counts(st, &oc) != 0) {
        fprintf(stderr, "counts: %s\n", store_errmsg());
        exit(1);
    }
    t1 = clock_mono_us();
    printf("counts   %lld delivered, %lld delivering, %lld pending: %.1f ms\n",
           (long long)oc.delivered, (long long)oc.delivering, (long long)oc.pending,
           (double)(t1 - t0) / 1e3);
    t0 = clock_mono_us();
    for (int i = 0; i < 20; i++) {
        if (store_outbox_purge(st, 3, 5000, &purged) != 0) {
            fprintf(stderr, "purge: %s\n", store_errmsg());
            exit(1);
        }
        total += purged;
    }
    t1 = clock_mono_us();
    printf("purge    %zu delivered rows in 20 calls of 5000: %.1f ms per call\n", total,
           (double)(t1 - t0) / 1e3 / 20);
}

/* True when BENCH_ONLY is unset or lists part. */
static bool
want(const char *part)
{
    const char *only = getenv("BENCH_ONLY");
    size_t n = strlen(part);

    for (const char *p = only; p != NULL; p = strchr(p, ','), p = p ? p + 1 : NULL)
        if (strncmp(p, part, n) == 0 && (p[n] == ',' || p[n] == '\0'))
            return true;
    return only == NULL;
}

int
main(int argc, char **argv)
{
    struct conf *c = xcalloc(1, sizeof(*c));
    struct lat lg = {.us = xcalloc(MAXLAT, sizeof(int64_t))};
    struct lat lr = {.us = xcalloc(MAXLAT, sizeof(int64_t))};
    struct store *st = NULL;
    char err[256], q[128];
    MYSQL *admin;

    if (argc > 1)
        seconds = atoi(argv[1]);
    if (argc > 2)
        port = atoi(argv[2]);
    else if (getenv("ROOMD_MYSQL_PORT") != NULL)
        port = atoi(getenv("ROOMD_MYSQL_PORT"));
    if (argc > 3)
        host = argv[3];
    mysql_library_init(0, NULL, NULL);
    admin = connect_db(NULL);
    snprintf(dbname, sizeof(dbname), "roomd_bench_%d", (int)getpid());
    snprintf(q, sizeof(q), "CREATE DATABASE %s CHARACTER SET utf8mb4", dbname);
    sql(admin, q);
    snprintf(q, sizeof(q), "USE %s", dbname);
    sql(admin, q);

    conf_defaults(c);
    free(c->store.driver);
    c->store.driver = xstrdup("mysql");
    free(c->store.mysql.host);
    c->store.mysql.host = xstrdup(host);
    c->store.mysql.port = port;
    free(c->store.mysql.user);
    c->store.mysql.user = xstrdup("root");
    free(c->store.mysql.database);
    c->store.mysql.database = xstrdup(dbname);
    c->store.mysql.pool_size = 8;
    if (getenv("BENCH_IN_FLIGHT") != NULL) /* store.mysql.batches_in_flight of the group pass */
        c->store.mysql.batches_in_flight = atoi(getenv("BENCH_IN_FLIGHT"));
    if (store_open(&st, &c->store, err, sizeof(err)) != 0) {
        fprintf(stderr, "store_open: %s\n", err);
        return 1;
    }
    printf("MariaDB %s at %s:%d, innodb_flush_log_at_trx_commit=%lld, %d threads, %d s each;"
           " a command = command log row + 1 outbox row + 1 rooms row\n",
           mysql_get_server_info(admin), host, port,
           sql_int(admin, "SELECT @@innodb_flush_log_at_trx_commit"), THREADS, seconds);

    if (want("group")) {
        empty_tables(admin);
        run_group(st, &lg);
    }
    if (want("raw")) {
        empty_tables(admin);
        run_raw(&lr, THREADS, "raw");
    }
    if (getenv("BENCH_ONLY") != NULL && want("raw1")) { /* only when asked for */
        struct lat l1 = {.us = xcalloc(MAXLAT, sizeof(int64_t))};

        empty_tables(admin);
        run_raw(&l1, 1, "raw1");
        free(l1.us);
    }
    if (want("group") && want("raw"))
        printf("group / raw = %.2fx\n",
               (double)atomic_load(&lg.n) / (atomic_load(&lr.n) ? atomic_load(&lr.n) : 1));
    if (want("claim")) {
        run_claims(c, admin, st);
        run_counts_purge(st);
    }

    snprintf(q, sizeof(q), "DROP DATABASE %s", dbname);
    sql(admin, q);
    mysql_close(admin);
    store_close(st);
    conf_free(c);
    free(lg.us);
    free(lr.us);
    mysql_library_end();
    return 0;
}
