/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_store_sqlite.c: the store conformance suite (tests/store_suite.c) on
 * fresh SQLite files, plus what only SQLite shows: snapshot pruning in the
 * file, the claim's query plan, migrations on reopen, two handles sharing
 * a file.
 */
#include "helpers.h"
#include "store_suite.h"

#include "conf/conf.h"
#include "core/xmalloc.h"
#include "store/store.h"

#include <ftw.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define T0 1000000000LL

struct fixture {
    struct conf *conf;
    struct store *st;
};

static char *dirs[256];
static int ndirs;

static struct conf *
make_conf(void)
{
    char *dir = th_tmpdir();

    assert_true(ndirs < 256);
    dirs[ndirs++] = dir;
    return th_conf_sqlite(dir);
}

static int
setup(void **state)
{
    struct fixture *f = xcalloc(1, sizeof(*f));

    f->conf = make_conf();
    f->st = store_suite_open(f->conf);
    *state = f;
    return 0;
}

static int
teardown(void **state)
{
    struct fixture *f = *state;

    store_close(f->st);
    conf_free(f->conf);
    free(f);
    return 0;
}

static int
rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    return remove(path);
}

/* Opens the store's file directly (read-only checks of the schema). */
static sqlite3 *
raw_open(const struct conf *c)
{
    sqlite3 *db = NULL;

    assert_int_equal(sqlite3_open_v2(c->store.sqlite.path, &db, SQLITE_OPEN_READWRITE, NULL),
                     SQLITE_OK);
    return db;
}

static int64_t
raw_int(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *q = NULL;
    int64_t v;

    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &q, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(q), SQLITE_ROW);
    v = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    return v;
}

static void
t_sqlite_snapshot_prune(void **state)
{
    struct fixture *f = *state;
    sqlite3 *db;

    store_suite_create_room(f->st, "a1", "r1", 0, T0);
    for (int v = 2; v <= 12; v++) {
        char cmd[32];
        struct mutation *m;

        snprintf(cmd, sizeof(cmd), "c%d", v);
        m = store_suite_mutation("a1", "r1", cmd, v, 0, T0 + v);
        m->snapshots_keep = 3;
        m->snapshot = "{}";
        assert_int_equal(store_save(f->st, &m, 1), 0);
        assert_int_equal(m->rc, 0);
        free(m);
    }
    db = raw_open(f->conf);
    assert_int_equal(raw_int(db, "SELECT count(*) FROM room_snapshots"), 3);
    assert_int_equal(raw_int(db, "SELECT min(version) FROM room_snapshots"), 10);
    sqlite3_close(db);
}

static void
t_sqlite_schema(void **state)
{
    struct fixture *f = *state;
    sqlite3 *db = raw_open(f->conf);
    sqlite3_stmt *q = NULL;
    bool uses_index = false;

    assert_int_equal(raw_int(db, "SELECT max(version) FROM schema_migrations"), 9);
    assert_int_equal(raw_int(db, "SELECT count(*) FROM schema_migrations"), 9);
    /* journal_mode is persistent in the file */
    sqlite3_stmt *jm = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &jm, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(jm), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(jm, 0), "wal");
    sqlite3_finalize(jm);
    /* The claim's inner select walks the partial due index, no sort. */
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "EXPLAIN QUERY PLAN SELECT id FROM room_outbox"
                                        " WHERE due_at_ms IS NOT NULL AND due_at_ms <= 5"
                                        " ORDER BY due_at_ms, id LIMIT 10",
                                        -1, &q, NULL),
                     SQLITE_OK);
    while (sqlite3_step(q) == SQLITE_ROW) {
        const char *d = (const char *)sqlite3_column_text(q, 3);

        assert_null(strstr(d, "TEMP B-TREE"));
        if (strstr(d, "room_outbox_due") != NULL)
            uses_index = true;
    }
    sqlite3_finalize(q);
    assert_true(uses_index);
    /* A create's count of its owner's open rooms is a range of rooms_owner. */
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "EXPLAIN QUERY PLAN SELECT count(*) FROM rooms"
                                        " WHERE app_code = 'a1' AND owner_uid = 7"
                                        " AND status = 'open'",
                                        -1, &q, NULL),
                     SQLITE_OK);
    uses_index = false;
    while (sqlite3_step(q) == SQLITE_ROW)
        if (strstr((const char *)sqlite3_column_text(q, 3), "COVERING INDEX rooms_owner") != NULL)
            uses_index = true;
    sqlite3_finalize(q);
    assert_true(uses_index);
    sqlite3_close(db);

    /* Reopening applies nothing again and keeps the data. */
    store_suite_create_room(f->st, "a1", "r1", 1, T0);
    store_close(f->st);
    f->st = store_suite_open(f->conf);
    struct room_load l;
    assert_int_equal(store_load_room(f->st, "a1", "r1", &l), 0);
    room_load_clear(&l);
    db = raw_open(f->conf);
    assert_int_equal(raw_int(db, "SELECT count(*) FROM schema_migrations"), 9);
    sqlite3_close(db);
}

static void
raw_exec(sqlite3 *db, const char *sql)
{
    char *emsg = NULL;

    if (sqlite3_exec(db, sql, NULL, NULL, &emsg) != SQLITE_OK)
        fail_msg("%s: %s", sql, emsg);
}

/* A file at schema version 1 is brought to the latest on open; legacy
 * "published" rows read as delivered. */
static void
t_sqlite_migrate_legacy(void **state)
{
    struct fixture *f = *state;
    struct outbox_counts oc;
    struct outbox_row *rows, got;
    size_t n;
    sqlite3 *db;

    store_suite_create_room(f->st, "a1", "r1", 2, T0);
    store_close(f->st);
    f->st = NULL;
    db = raw_open(f->conf);
    raw_exec(db, "DROP INDEX room_outbox_status; DELETE FROM schema_migrations WHERE version > 1;"
                 "DROP INDEX rooms_owner; DROP INDEX room_outbox_room;"
                 "DROP INDEX room_outbox_status_due;"
                 "ALTER TABLE rooms DROP COLUMN event_seq;"
                 "DROP INDEX room_outbox_seq;"
                 "ALTER TABLE room_outbox DROP COLUMN room_seq;"
                 "ALTER TABLE wallet_ledger DROP COLUMN room_id;"
                 "ALTER TABLE wallet_ledger DROP COLUMN version;"
                 "ALTER TABLE wallet_ledger DROP COLUMN request_digest;"
                 "DROP TABLE store_probe;"
                 "DROP TABLE gift_catalog;"
                 "ALTER TABLE room_command_log DROP COLUMN request_id;"
                 "ALTER TABLE room_command_log DROP COLUMN traceparent;"
                 "ALTER TABLE room_outbox DROP COLUMN request_id;"
                 "ALTER TABLE room_outbox DROP COLUMN traceparent;"
                 "UPDATE room_outbox SET status = 'published', due_at_ms = NULL,"
                 " delivered_at_ms = 5 WHERE id = 1");
    sqlite3_close(db);

    f->st = store_suite_open(f->conf);
    db = raw_open(f->conf);
    assert_int_equal(raw_int(db, "SELECT max(version) FROM schema_migrations"), 9);
    assert_int_equal(raw_int(db, "SELECT count(*) FROM sqlite_master WHERE type = 'index'"
                                 " AND name = 'room_outbox_status'"),
                     1);
    sqlite3_close(db);

    assert_int_equal(store_outbox_counts(f->st, &oc), 0);
    assert_int_equal(oc.delivered, 1);
    assert_int_equal(oc.pending, 1);
    assert_int_equal(store_outbox_list(f->st, OUTBOX_DELIVERED, 0, 10, &rows, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(rows[0].status, OUTBOX_DELIVERED);
    assert_int_equal(store_outbox_get(f->st, rows[0].event_id, &got), 0);
    assert_int_equal(got.status, OUTBOX_DELIVERED);
    free(got.payload);
    free(got.last_error);
    outbox_rows_free(rows, n);
    /* Legacy delivered rows are purged like delivered ones. */
    assert_int_equal(store_outbox_purge(f->st, 6, 10, &n), 0);
    assert_int_equal(n, 1);
}

/* Claims until three empty rounds; writes each claimed id to fd (when >= 0)
 * or counts it in seen[]. Returns the number of rows claimed. */
static int
claim_all(struct store *st, const char *who, int fd, unsigned char *seen, int nrows)
{
    int empty = 0, got = 0;

    while (empty < 3) {
        struct outbox_row *rows;
        size_t n;

        if (store_outbox_claim(st, T0 + 10, T0 + 100000000, who, 3, &rows, &n) != 0)
            return -1;
        empty = n == 0 ? empty + 1 : 0;
        for (size_t i = 0; i < n; i++) {
            int64_t id = rows[i].id;

            if (fd >= 0 && write(fd, &id, sizeof(id)) != (ssize_t)sizeof(id))
                return -1;
            if (fd < 0 && id >= 1 && id <= nrows)
                seen[id - 1]++;
            got++;
        }
        outbox_rows_free(rows, n);
        usleep(200); /* let the other process take the write lock too */
    }
    return got;
}

/* A second process (fork) claims from the same file beside this one: every
 * row is claimed exactly once. */
static void
t_sqlite_two_processes(void **state)
{
    struct fixture *f = *state;
    enum { ROOMS = 100, EVENTS = 8, NROWS = ROOMS * EVENTS };
    unsigned char *seen = xcalloc(NROWS, 1);
    int fds[2], status, mine, theirs = 0;
    int64_t id;
    pid_t pid;

    for (int r = 0; r < ROOMS; r++) {
        char room[16];

        snprintf(room, sizeof(room), "p%d", r);
        store_suite_create_room(f->st, "a1", room, EVENTS, T0);
    }
    assert_int_equal(pipe(fds), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* The child opens its own store; it never touches the parent's handle. */
        struct store *st = NULL;
        char err[256];

        close(fds[0]);
        if (store_open(&st, &f->conf->store, err, sizeof(err)) != 0)
            _exit(2);
        /* Ready: a zero id tells the parent to start claiming too. */
        id = 0;
        if (write(fds[1], &id, sizeof(id)) != (ssize_t)sizeof(id))
            _exit(4);
        _exit(claim_all(st, "child", fds[1], NULL, NROWS) < 0 ? 3 : 0);
    }
    close(fds[1]);
    assert_int_equal(read(fds[0], &id, sizeof(id)), sizeof(id));
    assert_int_equal(id, 0);
    mine = claim_all(f->st, "parent", -1, seen, NROWS);
    while (read(fds[0], &id, sizeof(id)) == (ssize_t)sizeof(id)) {
        assert_true(id >= 1 && id <= NROWS);
        seen[id - 1]++;
        theirs++;
    }
    close(fds[0]);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    print_message("two processes: parent claimed %d, child %d\n", mine, theirs);
    assert_int_equal(mine + theirs, NROWS);
    for (int i = 0; i < NROWS; i++)
        assert_int_equal(seen[i], 1);
    free(seen);
}

/* synchronous: normal (development) opens and commits the same way. */
static void
t_sqlite_sync_normal(void **state)
{
    struct conf *c = make_conf();
    struct store *st;
    struct room_load l;

    c->store.sqlite.synchronous_full = false;
    st = store_suite_open(c);
    store_suite_create_room(st, "a1", "r1", 1, T0);
    assert_int_equal(store_load_room(st, "a1", "r1", &l), 0);
    assert_int_equal(l.version, 1);
    room_load_clear(&l);
    store_close(st);
    conf_free(c);
}

/* ":memory:" (unit tests of other modules): one private database, reads
 * through the writer connection. */
static void
t_sqlite_memory(void **state)
{
    struct conf *c = make_conf();
    struct store *st;
    struct room_load l;
    struct outbox_row *rows;
    size_t n;

    free(c->store.sqlite.path);
    c->store.sqlite.path = xstrdup(":memory:");
    st = store_suite_open(c);
    store_suite_create_room(st, "a1", "r1", 2, T0);
    assert_int_equal(store_load_room(st, "a1", "r1", &l), 0);
    assert_int_equal(l.ntail, 1);
    room_load_clear(&l);
    assert_int_equal(store_outbox_claim(st, T0, T0 + 10, "A", 10, &rows, &n), 0);
    assert_int_equal(n, 2);
    outbox_rows_free(rows, n);
    store_close(st);
    conf_free(c);
}

static void
t_sqlite_bad_path(void **state)
{
    struct conf *c = make_conf();
    struct store *st = NULL;
    char err[256] = "";

    free(c->store.sqlite.path);
    c->store.sqlite.path = xstrdup("/nonexistent-dir/x/roomd.db");
    assert_int_not_equal(store_open(&st, &c->store, err, sizeof(err)), 0);
    assert_null(st);
    assert_non_null(strstr(err, "store.sqlite.path"));
    conf_free(c);
}

int
main(void)
{
    const struct CMUnitTest sqlite_only[] = {
        cmocka_unit_test_setup_teardown(t_sqlite_snapshot_prune, setup, teardown),
        cmocka_unit_test_setup_teardown(t_sqlite_schema, setup, teardown),
        cmocka_unit_test_setup_teardown(t_sqlite_two_processes, setup, teardown),
        cmocka_unit_test_setup_teardown(t_sqlite_migrate_legacy, setup, teardown),
        cmocka_unit_test(t_sqlite_sync_normal),
        cmocka_unit_test(t_sqlite_memory),
        cmocka_unit_test(t_sqlite_bad_path),
    };
    int failed = store_suite_run("store_sqlite", make_conf, NULL);

    failed += cmocka_run_group_tests_name("store_sqlite_only", sqlite_only, NULL, NULL);
    for (int i = 0; i < ndirs; i++) {
        nftw(dirs[i], rm_one, 8, FTW_DEPTH | FTW_PHYS);
        free(dirs[i]);
    }
    return failed ? 1 : 0;
}
