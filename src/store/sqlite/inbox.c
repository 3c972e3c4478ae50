/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sqlite/inbox.c: the one-node inbox (inbox.h), a SQLite database per group
 * "<rocketmq.consumer_store_dir>/<group>.db" holding
 *   inbox(key PRIMARY KEY, state received|done|dead, failures, updated_ms,
 *         last_error)
 *   room_seq(app_code, room_id, seq)   -- per room: the highest room_seq done
 * and the handler's tables. Only the group's thread uses it, so a claim
 * needs no owner: claiming is reading the row (and creating it received).
 */
#include "store/inbox.h"
#include "store/sqlite/db.h"

#include "core/clock.h"
#include "core/err.h"
#include "core/xmalloc.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct sq_inbox {
    struct consume_inbox super;
    sqlite3 *db;
};

#define SQ(ib) ((struct sq_inbox *)(ib))

static int
sq_error(struct consume_inbox *ib, const char *what)
{
    snprintf(ib->errmsg, sizeof(ib->errmsg), "%s: %s", what, sqlite3_errmsg(SQ(ib)->db));
    return ROOMD_EIO;
}

static int
sq_script(struct consume_inbox *ib, const char *sql)
{
    char *msg = NULL;

    if (sqlite3_exec(SQ(ib)->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        snprintf(ib->errmsg, sizeof(ib->errmsg), "%s", msg ? msg : sqlite3_errmsg(SQ(ib)->db));
        sqlite3_free(msg);
        return ROOMD_EIO;
    }
    return 0;
}

/* Runs sql with args; the first row's column 0 (text) goes to out and its
 * column 1 (int) to *num, when asked. Returns 0 (a row or none) or EIO. */
static int
sq_run(struct consume_inbox *ib, const char *sql, const struct consume_arg *args, int nargs,
       char *out, size_t outlen, int *num)
{
    sqlite3_stmt *st = NULL;
    int rc = 0;

    if (sqlite3_prepare_v2(SQ(ib)->db, sql, -1, &st, NULL) != SQLITE_OK)
        return sq_error(ib, "prepare");
    for (int i = 0; i < nargs; i++) {
        if (args[i].type == 'i')
            sqlite3_bind_int64(st, i + 1, args[i].i);
        else if (args[i].s != NULL)
            sqlite3_bind_text(st, i + 1, args[i].s, -1, SQLITE_TRANSIENT);
    }
    int step = sqlite3_step(st);
    if (step == SQLITE_ROW) {
        const unsigned char *t = sqlite3_column_text(st, 0);
        if (out && outlen)
            snprintf(out, outlen, "%s", t ? (const char *)t : "");
        if (num)
            *num = sqlite3_column_int(st, 1);
    } else if (step != SQLITE_DONE) {
        rc = sq_error(ib, "step");
    }
    sqlite3_finalize(st);
    return rc;
}

/* Runs one inbox statement: ?1 key, ?2 now, ?3 text. */
static int
sq_key(struct consume_inbox *ib, const char *sql, const char *key, const char *text, char *out,
       size_t outlen, int *num)
{
    struct consume_arg a[3] = {
        {.type = 's', .s = key}, {.type = 'i', .i = clock_wall_ms()}, {.type = 's', .s = text}};

    return sq_run(ib, sql, a, text ? 3 : 2, out, outlen, num);
}

static int
mkdir_p(const char *dir)
{
    char *p = xstrdup(dir);
    int rc = 0;

    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            rc = -1;
        *s = '/';
    }
    if (mkdir(p, 0755) != 0 && errno != EEXIST)
        rc = -1;
    free(p);
    return rc;
}

static void
sq_close(struct consume_inbox *ib)
{
    if (SQ(ib)->db)
        sqlite3_close(SQ(ib)->db);
    free(ib);
}

static int
sq_open(struct consume_inbox **out, const struct inbox_config *cfg, char *err, size_t errlen)
{
    static const char schema[] =
        "CREATE TABLE IF NOT EXISTS inbox("
        " key TEXT PRIMARY KEY,"
        " state TEXT NOT NULL," /* received | done | dead */
        " failures INTEGER NOT NULL DEFAULT 0,"
        " updated_ms INTEGER NOT NULL,"
        " last_error TEXT);"
        "CREATE INDEX IF NOT EXISTS inbox_purge ON inbox(state, updated_ms);"
        "CREATE TABLE IF NOT EXISTS room_seq("
        " app_code TEXT NOT NULL, room_id TEXT NOT NULL, seq INTEGER NOT NULL,"
        " PRIMARY KEY (app_code, room_id)) WITHOUT ROWID;";
    struct sq_inbox *s = xcalloc(1, sizeof(*s));
    struct consume_inbox *ib = &s->super;
    const char *dir = cfg->store_dir && *cfg->store_dir ? cfg->store_dir : "./var/consumers";
    int rc;

    *out = NULL;
    snprintf(ib->where, sizeof(ib->where), "%s/%s.db", dir, cfg->group);
    if (cfg->existing && access(ib->where, F_OK) != 0) {
        snprintf(err, errlen, "the inbox of group %s (%s) is not on this machine", cfg->group,
                 ib->where);
        free(s);
        return ROOMD_ENOTFOUND;
    }
    if (!cfg->existing && mkdir_p(dir) != 0) {
        snprintf(err, errlen, "rocketmq.consumer_store_dir: cannot create %s: %s", dir,
                 strerror(errno));
        free(s);
        return ROOMD_EIO;
    }
    /* the dead-letter operations of another process (existing) create nothing */
    if ((rc = sq_open_db(&s->db, ib->where,
                         SQLITE_OPEN_READWRITE | (cfg->existing ? 0 : SQLITE_OPEN_CREATE), 5000,
                         cfg->existing ? NULL : "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;",
                         err, errlen)) != 0) {
        sq_close(ib);
        return ROOMD_EIO;
    }
    rc = cfg->existing ? 0 : sq_script(ib, schema);
    for (const struct consume_sql *const *q = cfg->schema; rc == 0 && !cfg->existing && q && *q;
         q++)
        rc = sq_script(ib, (*q)->sqlite);
    if (rc != 0) {
        snprintf(err, errlen, "%s: %s", ib->where, ib->errmsg);
        sq_close(ib);
        return ROOMD_EIO;
    }
    *out = ib;
    return 0;
}

static int
sq_claim(struct consume_inbox *ib, const char *key, const char *app, enum inbox_claim *res,
         int *failures, int64_t *busy_until_ms)
{
    char state[16] = "";

    (void)app;
    (void)busy_until_ms;
    if (sq_key(ib, "SELECT state, failures FROM inbox WHERE key = ?1", key, NULL, state,
               sizeof(state), failures) != 0)
        return ROOMD_EIO;
    if (strcmp(state, "done") == 0 || strcmp(state, "dead") == 0) {
        *res = INBOX_SETTLED;
        return 0;
    }
    *res = INBOX_CLAIMED;
    if (*state != '\0')
        return 0;
    return sq_key(ib,
                  "INSERT OR IGNORE INTO inbox(key, state, failures, updated_ms)"
                  " VALUES(?1, 'received', 0, ?2)",
                  key, NULL, NULL, 0, NULL);
}

static int
sq_mark_get(struct consume_inbox *ib, const char *app, const char *room, int64_t *seq)
{
    struct consume_arg a[2] = {{.type = 's', .s = app}, {.type = 's', .s = room}};
    char v[24] = "";
    int rc = sq_run(ib, "SELECT seq FROM room_seq WHERE app_code = ?1 AND room_id = ?2", a, 2, v,
                    sizeof(v), NULL);

    if (rc == 0)
        *seq = strtoll(v, NULL, 10);
    return rc;
}

/* Marks key done and raises mark (NULL: none), in the caller's
 * transaction when one is open. */
static int
sq_settle_done(struct consume_inbox *ib, const char *key, const struct inbox_mark *mark)
{
    int rc =
        sq_key(ib,
               "INSERT INTO inbox(key, state, failures, updated_ms) VALUES(?1, 'done', 0, ?2)"
               " ON CONFLICT(key) DO UPDATE SET state = 'done', updated_ms = excluded.updated_ms",
               key, NULL, NULL, 0, NULL);
    struct consume_arg a[3] = {{.type = 's', .s = mark ? mark->app : NULL},
                               {.type = 's', .s = mark ? mark->room : NULL},
                               {.type = 'i', .i = mark ? mark->seq : 0}};

    if (rc != 0 || mark == NULL)
        return rc;
    return sq_run(ib,
                  "INSERT INTO room_seq(app_code, room_id, seq) VALUES(?1, ?2, ?3)"
                  " ON CONFLICT(app_code, room_id) DO UPDATE SET seq = max(seq, excluded.seq)",
                  a, 3, NULL, 0, NULL);
}

static int sq_tx_begin(struct consume_inbox *ib, const char *key);
static int sq_tx_commit_done(struct consume_inbox *ib, const char *key,
                             const struct inbox_mark *mark);

static int
sq_done(struct consume_inbox *ib, const char *key, const struct inbox_mark *mark)
{
    int rc;

    if (mark == NULL)
        return sq_settle_done(ib, key, NULL);
    /* the row and the mark in one transaction */
    if ((rc = sq_tx_begin(ib, key)) != 0)
        return rc;
    return sq_tx_commit_done(ib, key, mark);
}

static int
sq_release(struct consume_inbox *ib, const char *key)
{
    (void)ib;
    (void)key;
    return 0; /* nothing is held by a claim here */
}

static int
sq_fail(struct consume_inbox *ib, const char *key, const char *why, int *failures)
{
    char n[24] = "";
    int rc = sq_key(ib,
                    "UPDATE inbox SET failures = failures + 1, updated_ms = ?2, last_error = ?3"
                    " WHERE key = ?1 RETURNING failures",
                    key, why, n, sizeof(n), NULL);

    *failures = atoi(n);
    return rc;
}

static int
sq_dead(struct consume_inbox *ib, const char *key, const char *why)
{
    return sq_key(ib,
                  "INSERT INTO inbox(key, state, updated_ms, last_error) VALUES(?1, 'dead', ?2, ?3)"
                  " ON CONFLICT(key) DO UPDATE SET state = 'dead', updated_ms = ?2,"
                  " last_error = ?3",
                  key, why, NULL, 0, NULL);
}

/* No claims here (one thread per file): every old key goes, the unsettled
 * ones counted. */
static int
sq_purge(struct consume_inbox *ib, int64_t before_ms, int64_t *unsettled)
{
    struct consume_arg a = {.type = 'i', .i = before_ms};
    int rc = sq_run(ib, "DELETE FROM inbox WHERE state = 'received' AND updated_ms < ?1", &a, 1,
                    NULL, 0, NULL);

    *unsettled = sqlite3_changes(SQ(ib)->db);
    if (rc != 0)
        return rc;
    return sq_run(ib, "DELETE FROM inbox WHERE state IN ('done', 'dead') AND updated_ms < ?1", &a,
                  1, NULL, 0, NULL);
}

static int
sq_tx_begin(struct consume_inbox *ib, const char *key)
{
    (void)key;
    if (sq_script(ib, "BEGIN IMMEDIATE") != 0)
        return ROOMD_EIO;
    ib->in_tx = true;
    return 0;
}

static void
sq_tx_rollback(struct consume_inbox *ib)
{
    sqlite3_exec(SQ(ib)->db, "ROLLBACK", NULL, NULL, NULL);
    ib->in_tx = false;
}

static int
sq_tx_commit_done(struct consume_inbox *ib, const char *key, const struct inbox_mark *mark)
{
    if (sq_settle_done(ib, key, mark) != 0 || sq_script(ib, "COMMIT") != 0) {
        char keep[sizeof(ib->errmsg)];
        memcpy(keep, ib->errmsg, sizeof(keep));
        sq_tx_rollback(ib);
        memcpy(ib->errmsg, keep, sizeof(keep));
        return ROOMD_EIO;
    }
    ib->in_tx = false;
    return 0;
}

static int
sq_exec(struct consume_inbox *ib, const struct consume_sql *q, const struct consume_arg *args,
        int nargs, char *out, size_t outlen)
{
    return sq_run(ib, q->sqlite, args, nargs, out, outlen, NULL);
}

static int
sq_state(struct consume_inbox *ib, const char *key, char *buf, size_t len)
{
    return sq_key(ib, "SELECT state FROM inbox WHERE key = ?1", key, NULL, buf, len, NULL);
}

static int
sq_forget_dead(struct consume_inbox *ib, const char *key, bool *forgotten)
{
    int rc =
        sq_key(ib, "DELETE FROM inbox WHERE key = ?1 AND state = 'dead'", key, NULL, NULL, 0, NULL);

    *forgotten = rc == 0 && sqlite3_changes(SQ(ib)->db) > 0;
    return rc;
}

#define SQ_OP(op) .op = sq_##op,
const struct inbox_ops inbox_sqlite_ops = {.name = "sqlite", INBOX_OPS(SQ_OP)};
#undef SQ_OP
