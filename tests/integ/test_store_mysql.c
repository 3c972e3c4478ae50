/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_store_mysql.c: the store conformance suite (tests/store_suite.c, the
 * same one SQLite passes) on a real mariadbd (scripts/servers.sh, :3417),
 * then what only MySQL shows. A run of the whole program works in its own
 * fresh database (created, migrated, dropped), so it runs in parallel with
 * other tests. Under ctest each test is an entry of its own: the entries
 * share one database named by ROOMD_TEST_MYSQL_DB (tests/ctest_cases.cmake
 * drops it before and after the run and serializes them with a resource
 * lock), migrated by the first entry and emptied before each test, so an
 * entry costs one store open rather than a database create/migrate/drop. MySQL-only cases:
 * concurrent migrations, the claim's plan (EXPLAIN: ix_outbox_due, no filesort) and that it reads
 * no delivered row, SKIP LOCKED between claimers, reconnect after KILL CONNECTION, deadlock and
 * lock-wait retries, batch save rules, purge.
 */
#include "helpers.h"
#include "store_suite.h"

#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/xmalloc.h"
#include "store/store.h"

#include <mysql.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct conf *cf; /* points at dbname */
static char dbname[64];
static MYSQL *admin; /* a plain connection for checks and sabotage */
static char *suite_dir;

static MYSQL *
connect_raw(const char *db)
{
    MYSQL *m = mysql_init(NULL);

    if (!mysql_real_connect(m, "127.0.0.1", "root", "", db, (unsigned)cf->store.mysql.port, NULL,
                            0)) {
        fprintf(stderr, "connect: %s\n", mysql_error(m));
        mysql_close(m);
        return NULL;
    }
    return m;
}

static void
sql(MYSQL *m, const char *q)
{
    if (mysql_query(m, q) != 0) {
        fprintf(stderr, "%s: %s\n", q, mysql_error(m));
        fail();
    }
    MYSQL_RES *r = mysql_store_result(m);
    if (r)
        mysql_free_result(r);
}

/* First column of the first row of q as an integer (-1 when NULL/none). */
static long long
sql_int(MYSQL *m, const char *q)
{
    MYSQL_RES *r;
    MYSQL_ROW row;
    long long v = -1;

    if (mysql_query(m, q) != 0) {
        fprintf(stderr, "%s: %s\n", q, mysql_error(m));
        fail();
    }
    r = mysql_store_result(m);
    if (r && (row = mysql_fetch_row(r)) && row[0])
        v = atoll(row[0]);
    if (r)
        mysql_free_result(r);
    return v;
}

/* The rows read so far in this run's database: the sum of
 * information_schema.TABLE_STATISTICS.ROWS_READ over its tables (the
 * server's per-table count of rows the handlers returned; main switches
 * userstat on). Only this program uses the database, one test at a time, so
 * the difference around a store call is what that call read, whatever else
 * runs on the server (the global Handler_read_* counters also count every
 * other test's reads). */
static long long
rows_read(void)
{
    char q[256];

    snprintf(q, sizeof(q),
             "SELECT COALESCE(SUM(ROWS_READ), 0) FROM information_schema.TABLE_STATISTICS"
             " WHERE TABLE_SCHEMA = '%s'",
             dbname);
    return sql_int(admin, q);
}

static struct store *
open_store(int pool)
{
    struct store *s = NULL;
    char err[256] = "";

    cf->store.mysql.pool_size = pool;
    int rc = store_open(&s, &cf->store, err, sizeof(err));
    if (rc != 0)
        fprintf(stderr, "store_open: %s\n", err);
    assert_int_equal(rc, 0);
    return s;
}

/* Empties every table (the suite's reset, and each MySQL-only test's setup). */
static int
reset_tables(void)
{
    static const char *const tables[] = {
        "room_outbox",     "room_command_log", "room_snapshots",   "rooms",
        "wallet_accounts", "wallet_ledger",    "room_owner_locks", "gift_catalog"};
    char q[128];

    for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++) {
        snprintf(q, sizeof(q), "DELETE FROM %s", tables[i]);
        if (mysql_query(admin, q) != 0) {
            fprintf(stderr, "%s: %s\n", q, mysql_error(admin));
            return -1;
        }
    }
    return 0;
}

static int
setup(void **state)
{
    return reset_tables();
}

static int
suite_reset(struct store *s)
{
    return reset_tables();
}

/* A fresh conf on this run's database, for the suite (which frees it). */
static struct conf *
suite_conf(void)
{
    struct conf *c = th_conf_mysql(suite_dir);

    free(c->store.mysql.database);
    c->store.mysql.database = xstrdup(dbname);
    c->store.mysql.pool_size = 4;
    return c;
}

/* ---- building mutations ---- */

struct mut {
    struct mutation m;
    struct outbox_new ev[4];
    uint8_t payload[4][8];
};

static void
mk(struct mut *x, const char *room, const char *cmd, int64_t version, int nev)
{
    static int seq;

    memset(x, 0, sizeof(*x));
    strlcpy_(x->m.app_code, "hyapp", sizeof(x->m.app_code));
    strlcpy_(x->m.room_id, room, sizeof(x->m.room_id));
    strlcpy_(x->m.command_id, cmd, sizeof(x->m.command_id));
    x->m.command_type = version == 1 ? "CreateRoom" : "JoinRoom";
    x->m.request = "{\"r\":1}";
    x->m.response = "{\"ok\":true}";
    x->m.version = version;
    x->m.created_at_ms = clock_wall_ms();
    x->m.create = version == 1;
    x->m.meta.owner_uid = 7;
    x->m.meta.title = "t\xe2\x9c\x93";
    x->m.meta.status = "open";
    x->m.meta.version = version;
    x->m.meta.rocket_status = "idle";
    x->m.meta.rocket_id = "";
    x->m.meta.created_at_ms = x->m.created_at_ms;
    x->m.meta.updated_at_ms = x->m.created_at_ms;
    for (int i = 0; i < nev; i++) {
        snprintf(x->ev[i].event_id, sizeof(x->ev[i].event_id), "00000000-0000-7000-8000-%012d",
                 ++seq + getpid() % 1000 * 100000);
        x->ev[i].event_type = "RoomUserJoined";
        memcpy(x->payload[i], "\x08\x01\x00\xff", 4);
        x->ev[i].payload = x->payload[i];
        x->ev[i].payload_len = 4;
    }
    x->m.events = x->ev;
    x->m.nevents = (size_t)nev;
    x->m.snapshots_keep = 2;
}

static int
save1(struct store *s, struct mut *x)
{
    struct mutation *mm = &x->m;
    int rc = store_save(s, &mm, 1);

    return rc != 0 ? rc : mm->rc;
}

/* ---- cases ---- */

struct open_arg {
    struct store *s;
    int rc;
};

static void *
open_thread(void *arg)
{
    struct open_arg *a = arg;
    char err[256];

    a->rc = store_open(&a->s, &cf->store, err, sizeof(err));
    return NULL;
}

static void
test_concurrent_open_migrates_once(void **state)
{
    pthread_t t[4];
    struct open_arg a[4];

    sql(admin, "DROP TABLE IF EXISTS schema_migrations, room_outbox, room_command_log, "
               "room_snapshots, rooms, wallet_accounts, wallet_ledger, room_owner_locks, "
               "gift_catalog, store_probe");
    cf->store.mysql.pool_size = 2;
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, open_thread, &a[i]);
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(a[i].rc, 0);
        store_close(a[i].s);
    }
    assert_int_equal(sql_int(admin, "SELECT COUNT(*) FROM schema_migrations"), 8);
    assert_int_equal(sql_int(admin, "SELECT MAX(version) FROM schema_migrations"), 8);
    /* the owners' open rooms are counted on ix_rooms_owner (migration 2) */
    assert_int_equal(sql_int(admin, "SELECT COUNT(*) FROM information_schema.STATISTICS WHERE "
                                    "TABLE_SCHEMA=DATABASE() AND TABLE_NAME='rooms' AND "
                                    "INDEX_NAME='ix_rooms_owner'"),
                     3);
    /* utf8mb4 + InnoDB everywhere */
    assert_int_equal(sql_int(admin, "SELECT COUNT(*) FROM information_schema.TABLES WHERE "
                                    "TABLE_SCHEMA=DATABASE() AND ENGINE<>'InnoDB'"),
                     0);
}

static void
test_save_load_roundtrip(void **state)
{
    struct store *s = open_store(2);
    struct mut a, b, c;
    struct room_load l;
    struct command_record cr;

    mk(&a, "r1", "c1", 1, 2);
    assert_int_equal(save1(s, &a), 0);
    mk(&b, "r1", "c2", 2, 1);
    b.m.snapshot = "{\"v\":2}";
    assert_int_equal(save1(s, &b), 0);
    mk(&c, "r1", "c3", 3, 0);
    c.m.request =
        "{\"big\":\"" /* longer than the 256-byte first buffer */
        "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
        "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
        "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
        "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}";
    assert_int_equal(save1(s, &c), 0);

    assert_int_equal(store_load_room(s, "hyapp", "r1", &l), 0);
    assert_int_equal(l.version, 3);
    assert_int_equal(l.snapshot_version, 2);
    assert_string_equal(l.snapshot, "{\"v\":2}");
    assert_int_equal(l.ntail, 1);
    assert_int_equal(l.tail[0].version, 3);
    assert_string_equal(l.tail[0].request, c.m.request);
    assert_string_equal(l.tail[0].command_id, "c3");
    room_load_clear(&l);
    assert_int_equal(store_load_room(s, "hyapp", "nope", &l), ROOMD_ENOTFOUND);

    assert_int_equal(store_find_command(s, "hyapp", "c2", &cr), 0);
    assert_string_equal(cr.room_id, "r1");
    assert_string_equal(cr.response, "{\"ok\":true}");
    assert_int_equal(cr.version, 2);
    command_record_clear(&cr);
    assert_int_equal(store_find_command(s, "hyapp", "zz", &cr), ROOMD_ENOTFOUND);
    assert_int_equal(store_find_command(s, "other", "c2", &cr), ROOMD_ENOTFOUND);
    /* ids are byte-exact: no case folding, no trailing-space padding */
    assert_int_equal(store_find_command(s, "hyapp", "C2", &cr), ROOMD_ENOTFOUND);
    assert_int_equal(store_find_command(s, "hyapp", "c2 ", &cr), ROOMD_ENOTFOUND);

    assert_int_equal(sql_int(admin, "SELECT COUNT(*) FROM room_outbox WHERE status='pending' "
                                    "AND due_at_ms=created_at_ms"),
                     3);
    assert_int_equal(sql_int(admin, "SELECT version FROM rooms WHERE room_id='r1'"), 3);
    store_close(s);
}

static void
test_snapshots_pruned(void **state)
{
    struct store *s = open_store(1);
    struct mut x;

    for (int v = 1; v <= 6; v++) {
        char cmd[16];

        snprintf(cmd, sizeof(cmd), "s%d", v);
        mk(&x, "rs", cmd, v, 0);
        x.m.snapshot = "{}";
        x.m.snapshots_keep = 2;
        assert_int_equal(save1(s, &x), 0);
    }
    assert_int_equal(sql_int(admin, "SELECT COUNT(*) FROM room_snapshots"), 2);
    assert_int_equal(sql_int(admin, "SELECT MIN(version) FROM room_snapshots"), 5);
    store_close(s);
}

static void
test_batch_rules_savepoints(void **state)
{
    struct store *s = open_store(2);
    struct mut base, m[6];
    struct mutation *mm[6];

    mk(&base, "rb", "b1", 1, 1);
    base.m.fence_token = 5;
    assert_int_equal(save1(s, &base), 0);

    mk(&m[0], "rb", "b2", 2, 1); /* ok */
    m[0].m.fence_token = 5;
    mk(&m[1], "rc", "b1", 1, 1); /* command_id reused */
    mk(&m[2], "rb", "b3", 2, 1); /* version 2 taken by m[0] */
    m[2].m.fence_token = 5;
    mk(&m[3], "rb", "b4", 3, 1); /* stale fence token */
    m[3].m.fence_token = 4;
    mk(&m[4], "rb", "b5", 1, 1); /* create of an existing room */
    mk(&m[5], "rd", "b6", 1, 2); /* ok, new room */
    for (int i = 0; i < 6; i++)
        mm[i] = &m[i].m;
    assert_int_equal(store_save(s, mm, 6), 0);
    assert_int_equal(m[0].m.rc, 0);
    assert_int_equal(m[1].m.rc, ROOMD_EREUSED);
    assert_int_equal(m[2].m.rc, ROOMD_EFENCED);
    assert_int_equal(m[3].m.rc, ROOMD_EFENCED);
    assert_int_equal(m[4].m.rc, ROOMD_EEXIST);
    assert_int_equal(m[5].m.rc, 0);
    /* the refused ones left nothing behind */
    assert_int_equal(sql_int(admin, "SELECT COUNT(*) FROM room_command_log"), 3);
    assert_int_equal(sql_int(admin, "SELECT COUNT(*) FROM room_outbox"), 1 + 1 + 2);
    assert_int_equal(sql_int(admin, "SELECT COUNT(*) FROM rooms"), 2);
    assert_int_equal(sql_int(admin, "SELECT version FROM rooms WHERE room_id='rb'"), 2);

    /* a batch of several versions of one room, in order, commits in one go */
    mk(&m[0], "rb", "b7", 3, 1);
    m[0].m.fence_token = 6;
    mk(&m[1], "rb", "b8", 4, 1);
    m[1].m.fence_token = 6;
    assert_int_equal(store_save(s, mm, 2), 0);
    assert_int_equal(m[0].m.rc, 0);
    assert_int_equal(m[1].m.rc, 0);
    assert_int_equal(sql_int(admin, "SELECT version FROM rooms WHERE room_id='rb'"), 4);
    assert_int_equal(sql_int(admin, "SELECT fence_token FROM rooms WHERE room_id='rb'"), 6);
    store_close(s);
}

/* A batch rerun after its first COMMIT reached the server (mys_run's rerun
 * after a lost connection): each mutation already in the log at its room and
 * version is EREUSED (answered from the log), not fenced nor room_exists; a
 * new one in the same batch commits. */
static void
test_rerun_after_commit_answers_from_log(void **state)
{
    struct store *s = open_store(2);
    struct mut a, b, c;
    struct mutation *mm[3] = {&a.m, &b.m, &c.m};

    mk(&a, "rr", "r1", 1, 1);
    mk(&b, "rr", "r2", 2, 1);
    assert_int_equal(save1(s, &a), 0);
    assert_int_equal(save1(s, &b), 0);
    mk(&c, "rs", "r3", 1, 1);
    assert_int_equal(store_save(s, mm, 3), 0); /* a and b again: the rerun */
    assert_int_equal(a.m.rc, ROOMD_EREUSED);   /* a create: the room exists */
    assert_int_equal(b.m.rc, ROOMD_EREUSED);   /* an update: the fence refuses */
    assert_int_equal(c.m.rc, 0);
    assert_int_equal(sql_int(admin, "SELECT COUNT(*) FROM room_command_log"), 3);
    assert_int_equal(sql_int(admin, "SELECT COUNT(*) FROM room_outbox"), 3);
    /* another command at a taken version is still fenced */
    mk(&b, "rr", "r4", 2, 1);
    assert_int_equal(save1(s, &b), ROOMD_EFENCED);
    store_close(s);
}

static void
test_injected_failure_rolls_back(void **state)
{
    struct store *s = open_store(1);
    struct mut a, b;
    struct mutation *mm[2] = {&a.m, &b.m};

    mk(&a, "rf", "f1", 1, 1);
    mk(&b, "rg", "f2", 1, 1);
    store_fail_next_saves(1);
    assert_int_equal(store_save(s, mm, 2), ROOMD_EIO);
    assert_int_equal(a.m.rc, ROOMD_EIO);
    assert_int_equal(b.m.rc, ROOMD_EIO);
    assert_int_equal(sql_int(admin, "SELECT COUNT(*) FROM room_command_log"), 0);
    assert_int_equal(sql_int(admin, "SELECT COUNT(*) FROM room_outbox"), 0);
    assert_int_equal(sql_int(admin, "SELECT COUNT(*) FROM rooms"), 0);
    assert_int_equal(store_save(s, mm, 2), 0);
    assert_int_equal(sql_int(admin, "SELECT COUNT(*) FROM room_outbox"), 2);
    store_close(s);
}

static void
seed_outbox(struct store *s, const char *room, int nev)
{
    struct mut x;

    mk(&x, room, room, 1, nev);
    x.m.created_at_ms = clock_wall_ms() - 10;
    assert_int_equal(save1(s, &x), 0);
}

static void
test_claim_complete_fenced(void **state)
{
    struct store *s = open_store(2);
    struct outbox_row *rows, *rows2;
    size_t n, n2;
    int64_t now = clock_wall_ms();
    struct outbox_result res[3];
    struct outbox_counts oc;

    seed_outbox(s, "rq", 3);
    assert_int_equal(store_outbox_claim(s, now, now + 5000, "A", 2, &rows, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(rows[0].status, OUTBOX_DELIVERING);
    assert_string_equal(rows[0].locked_by, "A");
    assert_int_equal(rows[0].payload_len, 4);
    assert_memory_equal(rows[0].payload, "\x08\x01\x00\xff", 4);
    assert_true(rows[0].id < rows[1].id);
    /* B gets only the third row; A's are locked until now+5000 */
    assert_int_equal(store_outbox_claim(s, now, now + 5000, "B", 10, &rows2, &n2), 0);
    assert_int_equal(n2, 1);
    assert_true(rows2[0].id > rows[1].id);

    /* completion fenced by locked_by */
    memset(res, 0, sizeof(res));
    res[0] = (struct outbox_result){.id = rows[0].id,
                                    .locked_by = "A",
                                    .status = OUTBOX_DELIVERED,
                                    .sinks_done = 3,
                                    .now_ms = now};
    res[1] = (struct outbox_result){
        .id = rows[1].id, .locked_by = "B", .status = OUTBOX_DELIVERED, .now_ms = now};
    res[2] = (struct outbox_result){.id = rows2[0].id,
                                    .locked_by = "B",
                                    .status = OUTBOX_RETRYABLE,
                                    .retry_count = 1,
                                    .next_retry_at_ms = now + 100000,
                                    .last_error = "boom",
                                    .now_ms = now};
    assert_int_equal(store_outbox_complete(s, res, 3), 0);
    assert_int_equal(res[0].rc, 0);
    assert_int_equal(res[1].rc, ROOMD_ESTALE);
    assert_int_equal(res[2].rc, 0);
    outbox_rows_free(rows2, n2);

    /* A's second row: lock expired -> reclaimed by C; A can no longer complete */
    assert_int_equal(store_outbox_claim(s, now + 6000, now + 11000, "C", 10, &rows2, &n2), 0);
    assert_int_equal(n2, 1);
    assert_int_equal(rows2[0].id, rows[1].id);
    res[0] = (struct outbox_result){
        .id = rows[1].id, .locked_by = "A", .status = OUTBOX_DELIVERED, .now_ms = now + 6001};
    assert_int_equal(store_outbox_complete(s, res, 1), 0);
    assert_int_equal(res[0].rc, ROOMD_ESTALE);
    res[0].locked_by = "C";
    assert_int_equal(store_outbox_complete(s, res, 1), 0);
    assert_int_equal(res[0].rc, 0);
    outbox_rows_free(rows2, n2);

    /* the retryable one is due only at now+100000 */
    assert_int_equal(store_outbox_claim(s, now + 99999, now + 200000, "D", 10, &rows2, &n2), 0);
    assert_int_equal(n2, 0);
    outbox_rows_free(rows2, n2);
    assert_int_equal(store_outbox_claim(s, now + 100000, now + 200000, "D", 10, &rows2, &n2), 0);
    assert_int_equal(n2, 1);
    assert_int_equal(rows2[0].retry_count, 1);
    assert_string_equal(rows2[0].last_error, "boom");
    res[0] = (struct outbox_result){.id = rows2[0].id,
                                    .locked_by = "D",
                                    .status = OUTBOX_FAILED,
                                    .retry_count = 2,
                                    .last_error = "dead",
                                    .now_ms = now};
    assert_int_equal(store_outbox_complete(s, res, 1), 0);
    assert_int_equal(res[0].rc, 0);

    assert_int_equal(store_outbox_counts(s, &oc), 0);
    assert_int_equal(oc.delivered, 2);
    assert_int_equal(oc.failed, 1);
    assert_int_equal(oc.pending + oc.delivering + oc.retryable, 0);
    assert_int_equal(oc.oldest_undelivered_ms, 0);

    /* replay of the failed row */
    struct outbox_row one;
    char eid[37];
    strlcpy_(eid, rows2[0].event_id, sizeof(eid));
    assert_int_equal(store_outbox_replay(s, eid, now + 1), 0);
    assert_int_equal(store_outbox_replay(s, eid, now + 1), ROOMD_ECONFLICT);
    assert_int_equal(store_outbox_replay(s, "nope", now + 1), ROOMD_ENOTFOUND);
    assert_int_equal(store_outbox_get(s, eid, &one), 0);
    assert_int_equal(one.status, OUTBOX_PENDING);
    assert_int_equal(one.retry_count, 0);
    free(one.payload);
    free(one.last_error);
    assert_int_equal(store_outbox_counts(s, &oc), 0);
    assert_int_equal(oc.pending, 1);
    assert_true(oc.oldest_undelivered_ms > 0);
    outbox_rows_free(rows2, n2);
    outbox_rows_free(rows, n);

    /* list by status, paged by id */
    assert_int_equal(store_outbox_list(s, OUTBOX_DELIVERED, 0, 1, &rows, &n), 0);
    assert_int_equal(n, 1);
    int64_t after = rows[0].id;
    outbox_rows_free(rows, n);
    assert_int_equal(store_outbox_list(s, OUTBOX_DELIVERED, after, 10, &rows, &n), 0);
    assert_int_equal(n, 1);
    outbox_rows_free(rows, n);
    assert_int_equal(store_outbox_list(s, -1, 0, 10, &rows, &n), 0);
    assert_int_equal(n, 3);
    outbox_rows_free(rows, n);
    store_close(s);
}

struct claimer {
    struct store *s;
    char name[16];
    int64_t ids[4096];
    size_t n;
};

static void *
claim_loop(void *arg)
{
    struct claimer *c = arg;
    struct outbox_row *rows;
    size_t n;
    int64_t now = clock_wall_ms();

    for (;;) {
        assert_int_equal(store_outbox_claim(c->s, now, now + 60000, c->name, 7, &rows, &n), 0);
        if (n == 0)
            break;
        for (size_t i = 0; i < n; i++)
            c->ids[c->n++] = rows[i].id;
        outbox_rows_free(rows, n);
    }
    return NULL;
}

static int
cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return x < y ? -1 : x > y;
}

/* Four claimers at once: SKIP LOCKED hands every row to exactly one. */
static void
test_concurrent_claims_disjoint(void **state)
{
    struct store *s = open_store(4);
    static struct claimer c[4];
    static int64_t all[4096];
    pthread_t t[4];
    size_t total = 0;

    for (int i = 0; i < 100; i++) {
        char room[16];

        snprintf(room, sizeof(room), "cc%d", i);
        seed_outbox(s, room, 3);
    }
    for (int i = 0; i < 4; i++) {
        c[i].s = s;
        c[i].n = 0;
        snprintf(c[i].name, sizeof(c[i].name), "w%d", i);
        pthread_create(&t[i], NULL, claim_loop, &c[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        memcpy(all + total, c[i].ids, c[i].n * sizeof(int64_t));
        total += c[i].n;
    }
    assert_int_equal(total, 300);
    qsort(all, total, sizeof(int64_t), cmp_i64);
    for (size_t i = 1; i < total; i++)
        assert_true(all[i] != all[i - 1]);
    assert_int_equal(sql_int(admin, "SELECT COUNT(*) FROM room_outbox WHERE status='delivering'"),
                     300);
    store_close(s);
}

/* Inserts n delivered rows directly (the claim must never read them). */
static void
insert_delivered(int n)
{
    char q[512];

    snprintf(q, sizeof(q),
             "INSERT INTO room_outbox (event_id, app_code, room_id, room_version, command_id,"
             " event_type, payload, status, due_at_ms, created_at_ms, updated_at_ms,"
             " delivered_at_ms) SELECT UUID(), 'hyapp', 'old', seq, 'x', 'RoomCreated', '',"
             " 'delivered', NULL, 1, 1, 1 FROM seq_1_to_%d",
             n);
    sql(admin, q);
}

/* The hand-off's room check of a whole batch (ordering per_room): 40 rooms
 * (more than one IN list of them), every third with an undelivered row and
 * the first with 3,000, in one save. Each busy room's rows go pending, the
 * others' are handed off (ids reported), and the check reads one index
 * entry per room, never a room's backlog (rows_read() around the save: the
 * rows of this database's tables read, not the server's other tests'). The
 * loose index scan is the optimizer's choice: with statistics from before
 * the 3,000 rows (a 40-row table) it read the range instead (6,157 handler
 * reads), hence the ANALYZE. */
static void
test_rooms_busy_batch(void **state)
{
    enum { N = 40 };
    struct store *s = open_store(1);
    static struct mut x[N];
    struct mutation *ms[N];
    char room[16], cmd[32];
    long long before, after;

    (void)state;
    for (int i = 0; i < N; i++) {
        snprintf(room, sizeof(room), "bz%d", i);
        seed_outbox(s, room, 1);
    }
    sql(admin, "UPDATE room_outbox SET status='delivered', due_at_ms=NULL, delivered_at_ms=1"
               " WHERE room_id LIKE 'bz%' AND MOD(CAST(SUBSTRING(room_id, 3) AS INT), 3) <> 0");
    sql(admin, "INSERT INTO room_outbox (event_id, app_code, room_id, room_version, command_id,"
               " event_type, payload, status, due_at_ms, created_at_ms, updated_at_ms)"
               " SELECT UUID(), 'hyapp', 'bz0', 1, 'x', 'RoomCreated', '', 'pending', 1, 1, 1"
               " FROM seq_1_to_3000");
    sql(admin, "ANALYZE TABLE room_outbox");
    for (int i = 0; i < N; i++) {
        snprintf(room, sizeof(room), "bz%d", i);
        snprintf(cmd, sizeof(cmd), "bz%d-v2", i);
        mk(&x[i], room, cmd, 2, 1);
        x[i].m.locked_by = "node/h";
        x[i].m.lock_until_ms = clock_wall_ms() + 30000;
        x[i].m.handoff_if_room_idle = true;
        x[i].m.handoff_own_rows = true; /* room affinity: still one dive per room */
        ms[i] = &x[i].m;
    }
    before = rows_read();
    assert_int_equal(store_save(s, ms, N), 0);
    after = rows_read();
    fprintf(stderr, "save of %d hand-offs, rows read: %lld\n", N, after - before);
    assert_true(after - before < 1000); /* reading bz0's backlog alone: 3,000 */
    for (int i = 0; i < N; i++) {
        assert_int_equal(x[i].m.rc, 0);
        assert_int_equal(x[i].m.room_busy, i % 3 == 0);
        if (i % 3 == 0)
            assert_int_equal(x[i].ev[0].id, 0);
        else
            assert_true(x[i].ev[0].id > 0);
    }
    assert_int_equal(sql_int(admin, "SELECT COUNT(*) FROM room_outbox WHERE room_version=2 AND"
                                    " status='pending'"),
                     (N + 2) / 3);
    store_close(s);
}

static void
test_claim_plan_uses_due_index(void **state)
{
    struct store *s = open_store(1);
    struct outbox_row *rows;
    size_t n;
    MYSQL_RES *res;
    MYSQL_ROW row;
    MYSQL_FIELD *f;
    int key_col = -1, extra_col = -1;
    long long before, after;
    int64_t now = clock_wall_ms();

    insert_delivered(5000);
    for (int i = 0; i < 5; i++) {
        char room[16];

        snprintf(room, sizeof(room), "px%d", i);
        seed_outbox(s, room, 2);
    }
    sql(admin, "ANALYZE TABLE room_outbox");
    assert_int_equal(mysql_query(admin,
                                 /* the store's claim, verbatim but for literal values */
                                 "EXPLAIN SELECT id, event_id, app_code, room_id, command_id,"
                                 " event_type, room_version, payload, status, retry_count,"
                                 " sinks_done, next_retry_at_ms, lock_until_ms, locked_by,"
                                 " last_error, created_at_ms, delivered_at_ms"
                                 " FROM room_outbox FORCE INDEX (ix_outbox_due)"
                                 " WHERE due_at_ms<=UNIX_TIMESTAMP()*1000 ORDER BY due_at_ms, id"
                                 " LIMIT 100 FOR UPDATE SKIP LOCKED"),
                     0);
    res = mysql_store_result(admin);
    assert_non_null(res);
    for (unsigned i = 0; i < mysql_num_fields(res); i++) {
        f = mysql_fetch_field_direct(res, i);
        if (strcmp(f->name, "key") == 0)
            key_col = (int)i;
        if (strcmp(f->name, "Extra") == 0)
            extra_col = (int)i;
    }
    row = mysql_fetch_row(res);
    assert_non_null(row);
    fprintf(stderr, "claim plan: key=%s extra=%s\n", row[key_col],
            row[extra_col] ? row[extra_col] : "");
    assert_string_equal(row[key_col], "ix_outbox_due");
    assert_null(strstr(row[extra_col] ? row[extra_col] : "", "filesort"));
    mysql_free_result(res);

    /* The store's own claim reads only claimable rows, not the 5000 delivered
     * ones: count the rows this database's tables gave out around it. */
    now = clock_wall_ms();
    before = rows_read();
    assert_int_equal(store_outbox_claim(s, now, now + 1000, "P", 100, &rows, &n), 0);
    after = rows_read();
    assert_int_equal(n, 10);
    fprintf(stderr, "claim rows read: %lld\n", after - before);
    /* 10 rows + the claim update by id; a scan of delivered rows would be
     * thousands */
    assert_true(after - before < 1000);
    outbox_rows_free(rows, n);
    store_close(s);
}

static void
test_purge_bounded(void **state)
{
    struct store *s = open_store(1);
    size_t purged = 0;
    struct outbox_row *rows;
    size_t n;

    insert_delivered(1200);
    sql(admin, "UPDATE room_outbox SET delivered_at_ms=100 WHERE id % 2 = 0");
    seed_outbox(s, "pp", 2); /* pending: never purged */
    assert_int_equal(store_outbox_purge(s, 50, 1000, &purged), 0);
    assert_int_equal(purged, 600); /* delivered_at_ms 1 */
    assert_int_equal(store_outbox_purge(s, 101, 100, &purged), 0);
    assert_int_equal(purged, 100);
    assert_int_equal(store_outbox_purge(s, 101, 10000, &purged), 0);
    assert_int_equal(purged, 500);
    assert_int_equal(store_outbox_purge(s, clock_wall_ms() + 1000, 10000, &purged), 0);
    assert_int_equal(purged, 0);
    assert_int_equal(store_outbox_list(s, -1, 0, 100, &rows, &n), 0);
    assert_int_equal(n, 2);
    outbox_rows_free(rows, n);
    store_close(s);
}

static void
test_reconnect_after_kill(void **state)
{
    struct store *s = open_store(1);
    struct mut x;
    struct command_record cr;
    char q[256];
    long long id, id2;

    mk(&x, "rk", "k1", 1, 1);
    assert_int_equal(save1(s, &x), 0);
    snprintf(q, sizeof(q),
             "SELECT ID FROM information_schema.PROCESSLIST WHERE DB='%s' AND ID<>CONNECTION_ID()",
             dbname);
    id = sql_int(admin, q);
    assert_true(id > 0);
    snprintf(q, sizeof(q), "KILL CONNECTION %lld", id);
    sql(admin, q);
    usleep(100000);
    /* the pool's only connection is dead: the next calls reconnect by themselves */
    assert_int_equal(store_find_command(s, "hyapp", "k1", &cr), 0);
    command_record_clear(&cr);
    id2 = sql_int(admin, "SELECT ID FROM information_schema.PROCESSLIST WHERE DB=DATABASE() "
                         "AND ID<>CONNECTION_ID()");
    assert_true(id2 > 0 && id2 != id);
    /* and a transaction killed before it starts is retried whole */
    snprintf(q, sizeof(q), "KILL CONNECTION %lld", id2);
    sql(admin, q);
    usleep(100000);
    mk(&x, "rk", "k2", 2, 2);
    assert_int_equal(save1(s, &x), 0);
    assert_int_equal(sql_int(admin, "SELECT COUNT(*) FROM room_outbox"), 3);
    store_close(s);
}

struct save_arg {
    struct store *s;
    struct mut *x;
    int rc;
};

static void *
save_thread(void *arg)
{
    struct save_arg *a = arg;

    a->rc = save1(a->s, a->x);
    return NULL;
}

/*
 * A real deadlock: our transaction holds the command log row it inserted and
 * waits for the rooms row; the raw one holds the rooms row and asks for the
 * command log row. InnoDB kills the lighter one (ours: the raw one wrote 200
 * rows first), the store retries and commits once the raw one is done.
 */
static void
test_deadlock_retried(void **state)
{
    struct store *s = open_store(1);
    MYSQL *raw = connect_raw(dbname);
    struct mut a, b;
    struct save_arg sa;
    pthread_t t;
    long long dl0, dl1;

    mk(&a, "rd", "d1", 1, 1);
    assert_int_equal(save1(s, &a), 0);
    sql(raw, "CREATE TEMPORARY TABLE heavy (i INT PRIMARY KEY) ENGINE=InnoDB");
    sql(raw, "START TRANSACTION");
    sql(raw, "INSERT INTO heavy SELECT seq FROM seq_1_to_200");
    sql(raw, "SELECT * FROM rooms WHERE app_code='hyapp' AND room_id='rd' FOR UPDATE");
    dl0 = sql_int(admin, "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS "
                         "WHERE VARIABLE_NAME='INNODB_DEADLOCKS'");

    mk(&b, "rd", "d2", 2, 1);
    sa = (struct save_arg){s, &b, -1};
    pthread_create(&t, NULL, save_thread, &sa);
    usleep(300000); /* the store now waits for the rooms row */
    /* raw asks for the store's uncommitted command log row: a cycle */
    if (mysql_query(raw, "SELECT * FROM room_command_log WHERE app_code='hyapp' AND "
                         "command_id='d2' FOR UPDATE") != 0)
        fprintf(stderr, "raw: %s\n", mysql_error(raw));
    else
        mysql_free_result(mysql_store_result(raw));
    sql(raw, "COMMIT");
    pthread_join(t, NULL);
    dl1 = sql_int(admin, "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS "
                         "WHERE VARIABLE_NAME='INNODB_DEADLOCKS'");
    assert_true(dl1 > dl0);
    assert_int_equal(sa.rc, 0); /* the deadlock never reached the caller */
    assert_int_equal(sql_int(admin, "SELECT version FROM rooms WHERE room_id='rd'"), 2);
    assert_int_equal(sql_int(admin, "SELECT COUNT(*) FROM room_outbox"), 2);
    mysql_close(raw);
    store_close(s);
}

/* A lock wait timeout (1205) is retried too: the lock is released after the
 * first wait gave up. */
static void
test_lock_wait_timeout_retried(void **state)
{
    struct store *s;
    MYSQL *raw = connect_raw(dbname);
    struct mut a, b;
    struct save_arg sa;
    pthread_t t;
    int64_t t0;

    cf->store.mysql.read_timeout_ms = 2000; /* lock wait 1 s */
    s = open_store(1);
    mk(&a, "rw", "w1", 1, 1);
    assert_int_equal(save1(s, &a), 0);
    sql(raw, "START TRANSACTION");
    sql(raw, "SELECT * FROM rooms WHERE room_id='rw' FOR UPDATE");
    mk(&b, "rw", "w2", 2, 1);
    sa = (struct save_arg){s, &b, -1};
    t0 = clock_mono_ms();
    pthread_create(&t, NULL, save_thread, &sa);
    usleep(1500000);
    sql(raw, "COMMIT");
    pthread_join(t, NULL);
    assert_int_equal(sa.rc, 0);
    assert_true(clock_mono_ms() - t0 >= 1400);
    assert_int_equal(sql_int(admin, "SELECT version FROM rooms WHERE room_id='rw'"), 2);
    mysql_close(raw);
    store_close(s);
    cf->store.mysql.read_timeout_ms = 5000;
}

/* The transactions of mys_run_tx run on connections in autocommit off
 * (no START TRANSACTION): whatever mix of operations and outcomes, none of
 * the store's connections keeps a transaction open once the calls returned,
 * a rolled-back transaction leaves nothing, and the operations in autocommit
 * (reads, counts) still see every commit. */
static long long
open_trx_of_db(void)
{
    char q[320];

    snprintf(q, sizeof(q),
             "SELECT COUNT(*) FROM information_schema.INNODB_TRX t JOIN"
             " information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id"
             " WHERE p.DB = '%s' AND p.ID <> CONNECTION_ID()",
             dbname);
    return sql_int(admin, q);
}

/* One round of saves (one, a batch with a broken rule, a failing one),
 * claim, completion, top-up and reads, checking the outcomes and that no
 * connection of the store is left in a transaction. */
static void
tx_connections_round(struct store *s, int round)
{
    struct mut a, b, c, dup;
    struct mutation *batch[2];
    struct outbox_row *rows;
    struct outbox_result res;
    struct outbox_counts oc;
    struct command_record rec;
    int64_t now, bal = 0;
    size_t n;
    char room[16], cmd[16];

    snprintf(room, sizeof(room), "tx%d", round);
    snprintf(cmd, sizeof(cmd), "txc%d", round);
    mk(&a, room, cmd, 1, 1);
    assert_int_equal(save1(s, &a), 0);
    /* a batch with a rule broken (the same command twice): the slow path's
     * savepoints; the good one commits alone */
    snprintf(cmd, sizeof(cmd), "txd%d", round);
    mk(&b, room, cmd, 2, 1);
    mk(&dup, room, cmd, 3, 1);
    batch[0] = &b.m;
    batch[1] = &dup.m;
    assert_int_equal(store_save(s, batch, 2), 0);
    assert_int_equal(b.m.rc, 0);
    assert_int_not_equal(dup.m.rc, 0);
    assert_int_equal(store_find_command(s, "hyapp", cmd, &rec), 0);
    command_record_clear(&rec);
    now = clock_wall_ms() + 1; /* both rows due */
    assert_int_equal(store_outbox_claim(s, now, now + 5000, "T", 10, &rows, &n), 0);
    assert_int_equal(n, 2);
    res = (struct outbox_result){
        .id = rows[0].id, .locked_by = "T", .status = OUTBOX_DELIVERED, .now_ms = now};
    assert_int_equal(store_outbox_complete(s, &res, 1), 0);
    assert_int_equal(res.rc, 0);
    outbox_rows_free(rows, n);
    assert_int_equal(store_wallet_topup(s, "hyapp", 42, 5, cmd, 0, &bal), 0);
    assert_int_equal(bal, 5 * (round + 1));
    assert_int_equal(store_outbox_counts(s, &oc), 0);
    assert_int_equal(open_trx_of_db(), 0);
    /* a transaction that fails is rolled back whole: a stale version */
    snprintf(cmd, sizeof(cmd), "txe%d", round);
    mk(&c, room, cmd, 2, 1);
    assert_int_not_equal(save1(s, &c), 0);
    assert_int_equal(store_find_command(s, "hyapp", cmd, &rec), ROOMD_ENOTFOUND);
    assert_int_equal(open_trx_of_db(), 0);
}

static void
test_tx_connections_keep_no_transaction(void **state)
{
    int round = 0;

    /* a pool of 1 switches its connection's mode at nearly every call; a
     * pool of 2 keeps one connection in each mode */
    for (int pool = 1; pool <= 2; pool++) {
        struct store *s = open_store(pool);

        for (int k = 0; k < 3; k++)
            tx_connections_round(s, round++);
        store_close(s);
    }
    assert_int_equal(sql_int(admin, "SELECT COUNT(*) FROM room_outbox WHERE status='delivered'"),
                     6);
    assert_int_equal(sql_int(admin, "SELECT balance FROM wallet_accounts WHERE uid=42"), 30);
}

static void
test_unreachable_fails_fast(void **state)
{
    struct store *s = NULL;
    char err[256];
    int64_t t0 = clock_mono_ms();
    int port = cf->store.mysql.port;

    cf->store.mysql.port = 1; /* nothing listens there */
    assert_int_equal(store_open(&s, &cf->store, err, sizeof(err)), ROOMD_EUNAVAIL);
    assert_null(s);
    assert_non_null(strstr(err, "connect"));
    assert_true(clock_mono_ms() - t0 < 3000);
    cf->store.mysql.port = port;
}

/* store.mysql.hosts: a dead first server is skipped (the pool uses the
 * first that answers, counted as a move); with none answering, store_open
 * gives up after failover_timeout, not before. */
static void
test_hosts_first_that_answers(void **state)
{
    struct store *s = NULL;
    char err[256] = "", good[64], dead[] = "127.0.0.1:1", host[300];
    uint64_t moves = 9;
    struct conf_mysql saved = cf->store.mysql;

    snprintf(good, sizeof(good), "127.0.0.1:%d", cf->store.mysql.port);
    cf->store.mysql.hosts[0] = dead;
    cf->store.mysql.hosts[1] = good;
    cf->store.mysql.nhosts = 2;
    cf->store.mysql.failover_timeout_ms = 2000;
    assert_int_equal(store_open(&s, &cf->store, err, sizeof(err)), 0);
    assert_int_equal(store_server_info(s, host, sizeof(host), &moves), 0);
    assert_string_equal(host, good);
    assert_int_equal(moves, 1);
    struct mut x;
    mk(&x, "hf", "h1", 1, 1);
    assert_int_equal(save1(s, &x), 0);
    store_close(s);

    s = NULL;
    cf->store.mysql.hosts[1] = dead;
    int64_t t0 = clock_mono_ms();
    assert_int_equal(store_open(&s, &cf->store, err, sizeof(err)), ROOMD_EUNAVAIL);
    int64_t took = clock_mono_ms() - t0;
    assert_null(s);
    assert_true(took >= 1800 && took < 6000);
    cf->store.mysql = saved;
}

/* The tests of the MySQL backend alone (after the shared suite). */
static const struct CMUnitTest mysql_only[] = {
    cmocka_unit_test(test_concurrent_open_migrates_once),
    cmocka_unit_test_setup(test_save_load_roundtrip, setup),
    cmocka_unit_test_setup(test_snapshots_pruned, setup),
    cmocka_unit_test_setup(test_batch_rules_savepoints, setup),
    cmocka_unit_test_setup(test_rerun_after_commit_answers_from_log, setup),
    cmocka_unit_test_setup(test_injected_failure_rolls_back, setup),
    cmocka_unit_test_setup(test_claim_complete_fenced, setup),
    cmocka_unit_test_setup(test_concurrent_claims_disjoint, setup),
    cmocka_unit_test_setup(test_claim_plan_uses_due_index, setup),
    cmocka_unit_test_setup(test_rooms_busy_batch, setup),
    cmocka_unit_test_setup(test_purge_bounded, setup),
    cmocka_unit_test_setup(test_reconnect_after_kill, setup),
    cmocka_unit_test_setup(test_deadlock_retried, setup),
    cmocka_unit_test_setup(test_lock_wait_timeout_retried, setup),
    cmocka_unit_test_setup(test_tx_connections_keep_no_transaction, setup),
    cmocka_unit_test(test_unreachable_fails_fast),
    cmocka_unit_test_setup(test_hosts_first_that_answers, setup),
};

int
main(void)
{
    char *dir = th_tmpdir();
    const char *shared; /* the database of every ctest entry, or NULL */
    char q[256];
    int rc;

    if (th_listing()) { /* the names only: no server needed */
        store_suite_run("store_mysql", suite_conf, suite_reset);
        store_suite_run("store_mysql_no_bulk", suite_conf, suite_reset);
        rmdir(dir);
        free(dir);
        return cmocka_run_group_tests_name("store_mysql_only", mysql_only, NULL, NULL);
    }
    cf = th_conf_mysql(dir);
    if (cf == NULL)
        return 77;
    admin = connect_raw(NULL);
    if (admin == NULL) {
        th_skip_or_fail("mariadbd not reachable (scripts/servers.sh start)");
        return 77;
    }
    shared = getenv("ROOMD_TEST_MYSQL_DB");
    if (shared != NULL && shared[0] != '\0')
        strlcpy_(dbname, shared, sizeof(dbname));
    else
        snprintf(dbname, sizeof(dbname), "roomd_t%d_%lld", (int)getpid(),
                 (long long)(clock_wall_ms() % 100000));
    snprintf(q, sizeof(q), "CREATE DATABASE %s%s CHARACTER SET utf8mb4",
             shared != NULL ? "IF NOT EXISTS " : "", dbname);
    sql(admin, q);
    snprintf(q, sizeof(q), "USE %s", dbname);
    sql(admin, q);
    /* per-table row counts for rows_read(); left on: another run of this
     * program on the server may be counting (the cost: a hash update per
     * statement's table) */
    sql(admin, "SET GLOBAL userstat = 1");
    free(cf->store.mysql.database);
    cf->store.mysql.database = xstrdup(dbname);
    cf->store.mysql.deadlock_retries = 3;
    cf->store.mysql.read_timeout_ms = 5000;

    suite_dir = dir;
    /* the suite needs the tables: the first open migrates (once for a shared database) */
    store_close(open_store(1));
    rc = store_suite_run("store_mysql", suite_conf, suite_reset);
    /* again with one execution per row, as against a MySQL server */
    setenv("ROOMD_MYSQL_NO_BULK", "1", 1);
    rc += store_suite_run("store_mysql_no_bulk", suite_conf, suite_reset);
    unsetenv("ROOMD_MYSQL_NO_BULK");
    rc += cmocka_run_group_tests_name("store_mysql_only", mysql_only, NULL, NULL);

    if (shared == NULL) { /* a shared one is dropped by ctest's cleanup entry */
        snprintf(q, sizeof(q), "DROP DATABASE %s", dbname);
        sql(admin, q);
    }
    mysql_close(admin);
    conf_free(cf);
    rmdir(dir);
    free(dir);
    return rc ? 1 : 0;
}
