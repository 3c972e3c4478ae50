/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_inbox_mysql.c: the shared consumer inbox (src/store/mysql/inbox.c)
 * on a real mariadbd (scripts/servers.sh), in a database of its own: two
 * handles (two "nodes") claiming the same keys at the same moment do each
 * effect once; an expired claim is taken over and its late owner cannot
 * commit; failures are counted once for all nodes; a room's room_seq mark
 * is one for all nodes, raised only with a done, never lowered (on SQLite
 * too); retention deletes old settled keys and old unsettled ones (a
 * consumer that crashed) whose claim expired, keeps a running claim, and a
 * key deleted unsettled is claimed afresh (on SQLite too); the choice of
 * backend; the inbox and the admin store on the store's one pool follow
 * store.mysql.hosts when the first server dies (a private mariadbd).
 */
#include "helpers.h"

#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/xmalloc.h"
#include "store/admin.h"
#include "store/inbox.h"
#include "store/store.h"

#include <mysql.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define NKEYS 300

static char dbname[64];
static char *dir;
static MYSQL *raw;
static struct conf *conf;

static void
sql(const char *q)
{
    if (mysql_query(raw, q) != 0)
        fail_msg("%s: %s", q, mysql_error(raw));
    MYSQL_RES *r = mysql_store_result(raw);
    if (r)
        mysql_free_result(r);
}

static int64_t
sql_int(const char *q)
{
    int64_t v = -1;

    if (mysql_query(raw, q) != 0)
        fail_msg("%s: %s", q, mysql_error(raw));
    MYSQL_RES *r = mysql_store_result(raw);
    MYSQL_ROW row = r ? mysql_fetch_row(r) : NULL;
    if (row && row[0])
        v = strtoll(row[0], NULL, 10);
    if (r)
        mysql_free_result(r);
    return v;
}

/* A handler table: one row per effect done. */
static const struct consume_sql effects_table = {
    "CREATE TABLE IF NOT EXISTS t_effects(k TEXT NOT NULL, node TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS t_effects(k VARBINARY(200) NOT NULL, node VARBINARY(64) NOT NULL)"};
static const struct consume_sql *const schema[] = {&effects_table, NULL};
static const struct consume_sql add_effect = {"INSERT INTO t_effects(k, node) VALUES(?1, ?2)",
                                              NULL};

static struct consume_inbox *
open_inbox(const char *owner, int64_t claim_ms)
{
    struct inbox_config ic = {.group = "g1",
                              .store = &conf->store,
                              .owner = owner,
                              .claim_ms = claim_ms,
                              .schema = schema};
    struct consume_inbox *ib = NULL;
    char err[512] = "";

    if (inbox_open(&ib, &ic, err, sizeof(err)) != 0)
        fail_msg("inbox_open: %s", err);
    assert_string_equal(inbox_name(ib), "mysql");
    return ib;
}

static int
reset(void **state)
{
    (void)state;
    sql("DELETE FROM consumer_inbox");
    sql("DELETE FROM t_effects");
    sql("DELETE FROM consumer_room_seq");
    return 0;
}

/* ---- two nodes, the same keys, the same moment ---- */

struct node {
    const char *name;
    pthread_barrier_t *go;
    int claimed, busy, settled, stale, errors;
};

/* Claims every key; on a claim does the effect in the handler's
 * transaction, as activity.c does. */
static void *
node_main(void *arg)
{
    struct node *n = arg;
    struct consume_inbox *ib = open_inbox(n->name, 30000);
    char key[32];

    pthread_barrier_wait(n->go);
    for (int i = 0; i < NKEYS; i++) {
        enum inbox_claim res;
        int failures;
        int64_t until;

        snprintf(key, sizeof(key), "ev-%d", i);
        if (inbox_claim(ib, key, "app1", &res, &failures, &until) != 0) {
            n->errors++;
            continue;
        }
        if (res == INBOX_BUSY) {
            n->busy++;
            continue;
        }
        if (res == INBOX_SETTLED) {
            n->settled++;
            continue;
        }
        n->claimed++;
        struct consume_arg a[2] = {{.type = 's', .s = key}, {.type = 's', .s = n->name}};
        int rc = inbox_tx_begin(ib, key);
        if (rc == 0)
            rc = inbox_exec(ib, &add_effect, a, 2, NULL, 0);
        if (rc == 0)
            rc = inbox_tx_commit_done(ib, key, NULL);
        else
            inbox_tx_rollback(ib);
        if (rc == ROOMD_ESTALE)
            n->stale++;
        else if (rc != 0)
            n->errors++;
    }
    inbox_close(ib);
    return NULL;
}

static void
test_two_nodes_claim_each_key_once(void **state)
{
    pthread_barrier_t go;
    struct node a = {.name = "nodeA", .go = &go}, b = {.name = "nodeB", .go = &go};
    pthread_t ta, tb;

    (void)state;
    pthread_barrier_init(&go, NULL, 2);
    pthread_create(&ta, NULL, node_main, &a);
    pthread_create(&tb, NULL, node_main, &b);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    pthread_barrier_destroy(&go);
    print_message("nodeA claimed %d busy %d settled %d; nodeB claimed %d busy %d settled %d\n",
                  a.claimed, a.busy, a.settled, b.claimed, b.busy, b.settled);
    assert_int_equal(a.errors + b.errors, 0);
    assert_int_equal(a.stale + b.stale, 0);
    assert_int_equal(a.claimed + b.claimed, NKEYS);
    assert_int_equal(a.claimed + a.busy + a.settled, NKEYS);
    assert_int_equal(sql_int("SELECT COUNT(*) FROM t_effects"), NKEYS);
    assert_int_equal(sql_int("SELECT COUNT(DISTINCT k) FROM t_effects"), NKEYS);
    assert_int_equal(sql_int("SELECT COUNT(*) FROM consumer_inbox WHERE group_name = 'g1'"
                             " AND state = 'done' AND app_code = 'app1'"),
                     NKEYS);
}

/* ---- a node dies in the effect: its claim expires ---- */

static void
test_expired_claim_is_taken_over(void **state)
{
    struct consume_inbox *a = open_inbox("nodeA", 300), *b = open_inbox("nodeB", 300);
    enum inbox_claim res;
    int failures;
    int64_t until = 0, t0 = clock_wall_ms();

    (void)state;
    assert_int_equal(inbox_claim(a, "ev-x", "", &res, &failures, &until), 0);
    assert_int_equal(res, INBOX_CLAIMED);
    assert_int_equal(inbox_claim(b, "ev-x", "", &res, &failures, &until), 0);
    assert_int_equal(res, INBOX_BUSY);
    assert_true(until >= t0 + 300 && until <= clock_wall_ms() + 300);
    usleep(400 * 1000);
    /* A is "dead" (it never settles in time): B takes the key over */
    assert_int_equal(inbox_claim(b, "ev-x", "", &res, &failures, &until), 0);
    assert_int_equal(res, INBOX_CLAIMED);
    assert_int_equal(failures, 1); /* the attempt that died counts */
    /* A wakes up: its transaction and its done are refused */
    assert_int_equal(inbox_tx_begin(a, "ev-x"), ROOMD_ESTALE);
    assert_false(inbox_in_tx(a));
    assert_int_equal(inbox_done(a, "ev-x", NULL), ROOMD_ESTALE);
    assert_int_equal(inbox_release(a, "ev-x"), ROOMD_ESTALE);
    assert_int_equal(inbox_done(b, "ev-x", NULL), 0);
    assert_int_equal(inbox_claim(a, "ev-x", "", &res, &failures, &until), 0);
    assert_int_equal(res, INBOX_SETTLED);
    inbox_close(a);
    inbox_close(b);
}

/* ---- failures, holds and dead letters are the group's, not a node's ---- */

static void
test_failures_shared_release_dead(void **state)
{
    struct consume_inbox *a = open_inbox("nodeA", 30000), *b = open_inbox("nodeB", 30000);
    enum inbox_claim res;
    int failures = -1;
    int64_t until;

    (void)state;
    assert_int_equal(inbox_claim(a, "ev-f", "", &res, &failures, &until), 0);
    assert_int_equal(res, INBOX_CLAIMED);
    assert_int_equal(failures, 0);
    assert_int_equal(inbox_fail(a, "ev-f", "IM answered 500", &failures), 0);
    assert_int_equal(failures, 1);
    /* the redelivery reaches the other node: the count goes on */
    assert_int_equal(inbox_claim(b, "ev-f", "", &res, &failures, &until), 0);
    assert_int_equal(res, INBOX_CLAIMED);
    assert_int_equal(failures, 1);
    assert_int_equal(inbox_fail(b, "ev-f", "again", &failures), 0);
    assert_int_equal(failures, 2);
    /* a hold gives the claim back at once */
    assert_int_equal(inbox_claim(a, "ev-f", "", &res, &failures, &until), 0);
    assert_int_equal(res, INBOX_CLAIMED);
    assert_int_equal(inbox_release(a, "ev-f"), 0);
    assert_int_equal(inbox_claim(b, "ev-f", "", &res, &failures, &until), 0);
    assert_int_equal(res, INBOX_CLAIMED);
    assert_int_equal(inbox_dead(b, "ev-f", "poison"), 0);
    assert_int_equal(inbox_claim(a, "ev-f", "", &res, &failures, &until), 0);
    assert_int_equal(res, INBOX_SETTLED);
    assert_int_equal(sql_int("SELECT COUNT(*) FROM consumer_inbox WHERE event_id = 'ev-f'"
                             " AND state = 'dead' AND failures = 2 AND owner IS NULL"),
                     1);
    /* purge: settled keys older than the cut go, others stay */
    assert_int_equal(inbox_claim(a, "ev-open", "", &res, &failures, &until), 0);
    assert_int_equal(inbox_purge(a, clock_wall_ms() + 1000, NULL), 0);
    assert_int_equal(sql_int("SELECT COUNT(*) FROM consumer_inbox"), 1);
    inbox_close(a);
    inbox_close(b);
}

/* ---- a room's room_seq mark ---- */

static int64_t
mark_of(struct consume_inbox *ib, const char *room)
{
    int64_t seq = -1;

    assert_int_equal(inbox_mark_get(ib, "app1", room, &seq), 0);
    return seq;
}

/* Claims key on ib and settles it done with room r1's mark seq: in the
 * handler's transaction (in_tx) or by inbox_done. */
static int
done_with_mark(struct consume_inbox *ib, const char *key, int64_t seq, bool in_tx)
{
    struct inbox_mark mk = {.app = "app1", .room = "r1", .seq = seq};
    enum inbox_claim res;
    int failures;
    int64_t until;

    assert_int_equal(inbox_claim(ib, key, "app1", &res, &failures, &until), 0);
    assert_int_equal(res, INBOX_CLAIMED);
    if (!in_tx)
        return inbox_done(ib, key, &mk);
    assert_int_equal(inbox_tx_begin(ib, key), 0);
    return inbox_tx_commit_done(ib, key, &mk);
}

/* a and b: two handles on one inbox (two nodes, or two connections). */
static void
check_room_marks(struct consume_inbox *a, struct consume_inbox *b)
{
    assert_int_equal(mark_of(a, "r1"), 0);
    assert_int_equal(done_with_mark(a, "ev-1", 1, false), 0);
    assert_int_equal(mark_of(b, "r1"), 1);
    assert_int_equal(done_with_mark(b, "ev-3", 3, true), 0);
    assert_int_equal(mark_of(a, "r1"), 3);
    /* a late lower one settles its key but never lowers the mark */
    assert_int_equal(done_with_mark(a, "ev-2", 2, false), 0);
    assert_int_equal(mark_of(b, "r1"), 3);
    /* a done without a mark (seq 0) leaves it; other rooms have none */
    assert_int_equal(done_with_mark(b, "ev-x", 0, false), 0);
    assert_int_equal(mark_of(a, "r1"), 3);
    assert_int_equal(mark_of(a, "r2"), 0);
}

static void
test_room_marks_shared(void **state)
{
    struct consume_inbox *a = open_inbox("nodeA", 300), *b = open_inbox("nodeB", 300);
    enum inbox_claim res;
    int failures;
    int64_t until;
    struct inbox_mark mk = {.app = "app1", .room = "r1", .seq = 9};

    (void)state;
    check_room_marks(a, b);
    /* a done refused (the claim was taken over) raises nothing */
    assert_int_equal(inbox_claim(a, "ev-9", "app1", &res, &failures, &until), 0);
    usleep(400 * 1000);
    assert_int_equal(inbox_claim(b, "ev-9", "app1", &res, &failures, &until), 0);
    assert_int_equal(res, INBOX_CLAIMED);
    assert_int_equal(inbox_done(a, "ev-9", &mk), ROOMD_ESTALE);
    assert_int_equal(mark_of(b, "r1"), 3);
    assert_int_equal(sql_int("SELECT seq FROM consumer_room_seq WHERE group_name = 'g1'"
                             " AND app_code = 'app1' AND room_id = 'r1'"),
                     3);
    inbox_close(a);
    inbox_close(b);
}

static void
test_room_marks_sqlite(void **state)
{
    struct conf *s = th_conf_sqlite(dir);
    struct inbox_config ic = {.group = "g3", .store_dir = dir, .store = &s->store};
    struct consume_inbox *a = NULL, *b = NULL;
    char err[256] = "", path[512];

    (void)state;
    assert_int_equal(inbox_open(&a, &ic, err, sizeof(err)), 0);
    assert_int_equal(inbox_open(&b, &ic, err, sizeof(err)), 0);
    assert_string_equal(inbox_name(a), "sqlite");
    check_room_marks(a, b);
    inbox_close(a);
    inbox_close(b);
    conf_free(s);
    static const char *const tails[] = {"", "-wal", "-shm"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof(path), "%s/g3.db%s", dir, tails[i]);
        unlink(path);
    }
}

/* ---- retention: settled and stuck keys ---- */

static int64_t
purge_cut(void)
{
    return clock_wall_ms() - 5LL * 3600 * 1000;
}

/* What a consumer did after its claim. */
enum after { CRASHED, FAILED, DONE };

/* Claims key on ib as a consumer did `ago_ms` ago (the clock set back),
 * then: nothing (it crashed in the effect), a failure, or done. */
static void
claim_ago(struct consume_inbox *ib, const char *key, int64_t ago_ms, enum after then)
{
    enum inbox_claim res;
    int failures;
    int64_t until;

    clock_set_offset_ms(-ago_ms);
    assert_int_equal(inbox_claim(ib, key, "app1", &res, &failures, &until), 0);
    assert_int_equal(res, INBOX_CLAIMED);
    if (then == FAILED)
        assert_int_equal(inbox_fail(ib, key, "IM answered 500", &failures), 0);
    if (then == DONE)
        assert_int_equal(inbox_done(ib, key, NULL), 0);
    clock_set_offset_ms(0);
}

/* a: an inbox whose claims last 1 s. 10 h ago a consumer settled "old-done",
 * failed "old-failed" (its message was then lost) and crashed in the effect
 * of "old-stuck"; "new-stuck" is 1 h old. A purge with a 5 h cut deletes
 * the three old ones, counting two unsettled. */
static void
check_purge_stuck(struct consume_inbox *a)
{
    enum inbox_claim res;
    int failures = -1;
    int64_t until, unsettled = -1;

    claim_ago(a, "old-done", 10LL * 3600 * 1000, DONE);
    claim_ago(a, "old-failed", 10LL * 3600 * 1000, FAILED);
    claim_ago(a, "old-stuck", 10LL * 3600 * 1000, CRASHED);
    claim_ago(a, "new-stuck", 3600 * 1000, CRASHED);
    assert_int_equal(inbox_purge(a, purge_cut(), &unsettled), 0);
    assert_int_equal(unsettled, 2);
    /* new-stuck stays (younger than the cut): a redelivery still finds it */
    assert_int_equal(inbox_claim(a, "new-stuck", "app1", &res, &failures, &until), 0);
    assert_int_equal(res, INBOX_CLAIMED);
    /* old-done is gone (a fresh key); the stuck ones too, a failure count with them */
    assert_int_equal(inbox_claim(a, "old-failed", "app1", &res, &failures, &until), 0);
    assert_int_equal(res, INBOX_CLAIMED);
    assert_int_equal(failures, 0);
    assert_int_equal(inbox_claim(a, "old-stuck", "app1", &res, &failures, &until), 0);
    assert_int_equal(res, INBOX_CLAIMED);
    assert_int_equal(inbox_claim(a, "old-done", "app1", &res, &failures, &until), 0);
    assert_int_equal(res, INBOX_CLAIMED);
    assert_int_equal(inbox_purge(a, purge_cut(), &unsettled), 0);
    assert_int_equal(unsettled, 0);
}

static void
test_purge_stuck_mysql(void **state)
{
    struct consume_inbox *a = open_inbox("nodeA", 1000);
    struct consume_inbox *slow = open_inbox("nodeS", 20LL * 3600 * 1000);
    enum inbox_claim res;
    int failures;
    int64_t until, unsettled = -1;

    (void)state;
    check_purge_stuck(a);
    assert_int_equal(sql_int("SELECT COUNT(*) FROM consumer_inbox WHERE event_id LIKE 'old-%'"
                             " AND state = 'progress' AND failures = 0"),
                     3); /* the three claimed again just now, afresh */
    /* a claim still running (20 h, taken 10 h ago) is kept however old its row */
    claim_ago(slow, "old-running", 10LL * 3600 * 1000, CRASHED);
    assert_int_equal(inbox_purge(a, purge_cut(), &unsettled), 0);
    assert_int_equal(unsettled, 0);
    assert_int_equal(inbox_claim(a, "old-running", "app1", &res, &failures, &until), 0);
    assert_int_equal(res, INBOX_BUSY);
    inbox_close(a);
    inbox_close(slow);
}

static void
test_purge_stuck_sqlite(void **state)
{
    struct conf *s = th_conf_sqlite(dir);
    struct inbox_config ic = {.group = "g4", .store_dir = dir, .store = &s->store};
    struct consume_inbox *a = NULL;
    char err[256] = "";

    (void)state;
    assert_int_equal(inbox_open(&a, &ic, err, sizeof(err)), 0);
    assert_string_equal(inbox_name(a), "sqlite");
    check_purge_stuck(a);
    inbox_close(a);
    conf_free(s);
}

/* ---- the backend is chosen by the store ---- */

static void
test_backend_choice(void **state)
{
    struct conf *s = th_conf_sqlite(dir);
    struct consume_inbox *ib = NULL;
    struct inbox_config ic = {
        .group = "g2", .driver = INBOX_MYSQL, .store_dir = dir, .store = &s->store};
    char err[256] = "";

    (void)state;
    assert_int_equal(inbox_open(&ib, &ic, err, sizeof(err)), ROOMD_EINVAL);
    assert_non_null(strstr(err, "rocketmq.consumer_inbox"));
    assert_null(ib);
    ic.driver = INBOX_AUTO;
    assert_int_equal(inbox_open(&ib, &ic, err, sizeof(err)), 0);
    assert_string_equal(inbox_name(ib), "sqlite");
    inbox_close(ib);
    conf_free(s);
    char path[512];
    snprintf(path, sizeof(path), "%s/g2.db", dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/g2.db-wal", dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/g2.db-shm", dir);
    unlink(path);
}

/* ---- one pool: the inbox and the admin store follow store.mysql.hosts ---- */

/* Starts a private mariadbd on 127.0.0.1:port with its files in pdir and
 * waits for it; returns its pid, or -1 when it cannot be installed (no
 * mariadb-install-db). */
static int
private_mariadb(const char *pdir, int port)
{
    char cmd[1024], datadir[600], portarg[32], sock[600], pidf[600], log[600];

    snprintf(cmd, sizeof(cmd),
             "mariadb-install-db --no-defaults --datadir=%s/data"
             " --auth-root-authentication-method=normal --skip-test-db >%s/install.log 2>&1",
             pdir, pdir);
    if (system(cmd) != 0)
        return -1;
    snprintf(datadir, sizeof(datadir), "--datadir=%s/data", pdir);
    snprintf(portarg, sizeof(portarg), "--port=%d", port);
    snprintf(sock, sizeof(sock), "--socket=%s/mysqld.sock", pdir);
    snprintf(pidf, sizeof(pidf), "--pid-file=%s/mysqld.pid", pdir);
    snprintf(log, sizeof(log), "--log-error=%s/error.log", pdir);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execlp("mariadbd", "mariadbd", "--no-defaults", datadir, portarg,
               "--bind-address=127.0.0.1", sock, pidf, log, "--user=root", "--skip-name-resolve",
               "--innodb-buffer-pool-size=32M", (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 600 && !th_port_open(port); i++)
        usleep(100 * 1000);
    assert_true(th_port_open(port));
    return pid;
}

static void
test_failover_inbox_and_admin_follow_hosts(void **state)
{
    char *pdir = th_tmpdir();
    int port = th_free_port(), pid = private_mariadb(pdir, port);
    char first[64], second[64], where[256], host[300], q[256], err[512] = "";
    struct store *s = NULL, *second_only = NULL;
    struct admin_store *as = NULL;
    struct consume_inbox *ib = NULL;
    struct admin_summary sum;
    enum inbox_claim res;
    int failures;
    int64_t until;
    uint64_t moves = 9;

    (void)state;
    if (pid < 0) {
        free(pdir);
        skip();
    }
    /* the same database on the private server (first) and the test server (second) */
    MYSQL *p = mysql_init(NULL);
    assert_non_null(mysql_real_connect(p, "127.0.0.1", "root", "", NULL, (unsigned)port, NULL, 0));
    snprintf(q, sizeof(q), "CREATE DATABASE %s CHARACTER SET utf8mb4", dbname);
    assert_int_equal(mysql_query(p, q), 0);
    mysql_close(p);
    struct conf_mysql saved = conf->store.mysql;
    snprintf(first, sizeof(first), "127.0.0.1:%d", port);
    snprintf(second, sizeof(second), "127.0.0.1:%d", saved.port);
    conf->store.mysql.hosts[0] = second; /* the store's tables on the second, for after the move */
    conf->store.mysql.nhosts = 1;
    assert_int_equal(store_open(&second_only, &conf->store, err, sizeof(err)), 0);
    store_close(second_only);
    conf->store.mysql.hosts[0] = first;
    conf->store.mysql.hosts[1] = second;
    conf->store.mysql.nhosts = 2;
    conf->store.mysql.failover_timeout_ms = 5000;
    assert_int_equal(store_open(&s, &conf->store, err, sizeof(err)), 0);
    assert_int_equal(store_server_info(s, host, sizeof(host), &moves), 0);
    assert_string_equal(host, first);
    assert_int_equal(moves, 0);
    struct inbox_config ic = {
        .group = "gfo", .store = &conf->store, .owner = "n1", .claim_ms = 30000, .schema = schema};
    assert_int_equal(inbox_open(&ib, &ic, err, sizeof(err)), 0);
    snprintf(where, sizeof(where), "mysql %s/%s consumer_inbox", first, dbname);
    assert_string_equal(inbox_where(ib), where);
    assert_int_equal(admin_store_open(&as, &conf->store, false, err, sizeof(err)), 0);
    assert_int_equal(inbox_claim(ib, "fo-1", "app1", &res, &failures, &until), 0);
    assert_int_equal(res, INBOX_CLAIMED);
    assert_int_equal(inbox_done(ib, "fo-1", NULL), 0);
    assert_int_equal(admin_store_summary(as, &sum), 0);

    th_kill(pid); /* the first server dies */
    /* the admin store's call reconnects and reruns on the next server: the
     * whole pool moves, the store's own handle with it (one pool) */
    assert_int_equal(admin_store_summary(as, &sum), 0);
    assert_int_equal(store_server_info(s, host, sizeof(host), &moves), 0);
    assert_string_equal(host, second);
    assert_int_equal(moves, 1);
    /* the inbox's next call runs on the second server (its stale connection
     * reopened there), the row lands there */
    assert_int_equal(inbox_claim(ib, "fo-2", "app1", &res, &failures, &until), 0);
    assert_int_equal(res, INBOX_CLAIMED);
    assert_int_equal(inbox_done(ib, "fo-2", NULL), 0);
    assert_int_equal(sql_int("SELECT COUNT(*) FROM consumer_inbox WHERE group_name = 'gfo'"
                             " AND event_id = 'fo-2' AND state = 'done'"),
                     1);
    assert_int_equal(sql_int("SELECT COUNT(*) FROM consumer_inbox WHERE event_id = 'fo-1'"), 0);
    admin_store_close(as);
    inbox_close(ib);
    store_close(s);
    conf->store.mysql = saved;
    snprintf(q, sizeof(q), "rm -rf %s", pdir);
    assert_int_equal(system(q), 0);
    free(pdir);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_two_nodes_claim_each_key_once, reset),
        cmocka_unit_test_setup(test_expired_claim_is_taken_over, reset),
        cmocka_unit_test_setup(test_failures_shared_release_dead, reset),
        cmocka_unit_test_setup(test_room_marks_shared, reset),
        cmocka_unit_test(test_room_marks_sqlite),
        cmocka_unit_test_setup(test_purge_stuck_mysql, reset),
        cmocka_unit_test(test_purge_stuck_sqlite),
        cmocka_unit_test(test_backend_choice),
        cmocka_unit_test_setup(test_failover_inbox_and_admin_follow_hosts, reset),
    };
    char q[160];
    int rc;

    dir = th_tmpdir();
    if (th_listing()) {
        rc = cmocka_run_group_tests(tests, NULL, NULL);
        rmdir(dir);
        free(dir);
        return rc;
    }
    conf = th_conf_mysql(dir);
    raw = mysql_init(NULL);
    if (!mysql_real_connect(raw, "127.0.0.1", "root", "", NULL, (unsigned)conf->store.mysql.port,
                            NULL, 0)) {
        conf_free(conf);
        th_skip_or_fail("mariadbd not reachable (scripts/servers.sh start)");
        return 77;
    }
    snprintf(dbname, sizeof(dbname), "roomd_inbox%d_%lld", (int)getpid(),
             (long long)(clock_wall_ms() % 100000));
    snprintf(q, sizeof(q), "CREATE DATABASE %s CHARACTER SET utf8mb4", dbname);
    sql(q);
    snprintf(q, sizeof(q), "USE %s", dbname);
    sql(q);
    free(conf->store.mysql.database);
    conf->store.mysql.database = xstrdup(dbname);
    /* the tables exist before the first reset */
    inbox_close(open_inbox("setup", 1000));
    rc = cmocka_run_group_tests(tests, NULL, NULL);
    snprintf(q, sizeof(q), "DROP DATABASE %s", dbname);
    sql(q);
    mysql_close(raw);
    conf_free(conf);
    rmdir(dir);
    free(dir);
    return rc ? 1 : 0;
}
