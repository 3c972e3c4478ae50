/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sqlite/admin.c: the admin store on the SQLite file of the room store
 * (store/admin.h), through a connection of its own: read-only
 * (SQLITE_OPEN_READONLY: nothing created or migrated) or read-write (never
 * SQLITE_OPEN_CREATE either: roomd creates the store). Writes run under
 * BEGIN IMMEDIATE, waiting store.sqlite.busy_timeout for roomd's writer.
 */
#include "store/admin.h"
#include "store/sqlite/internal.h"

#include "conf/conf.h"
#include "core/err.h"
#include "core/uuid.h"
#include "core/xmalloc.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct sq_admin {
    struct admin_store super;
    sqlite3 *db;
    pthread_mutex_t mu;
};

#define LOCK(a) pthread_mutex_lock(&(a)->mu)
#define UNLOCK(a) pthread_mutex_unlock(&(a)->mu)

static int fail(struct sq_admin *a, int src, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Records the error (what + SQLite's message) and returns its ROOMD_E* code. */
static int
fail(struct sq_admin *a, int src, const char *fmt, ...)
{
    char what[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    snprintf(a->super.errmsg, sizeof(a->super.errmsg), "sqlite %s: %s", what,
             sqlite3_errmsg(a->db));
    src &= 0xff;
    return src == SQLITE_BUSY || src == SQLITE_LOCKED ? ROOMD_EUNAVAIL : ROOMD_EIO;
}

static sqlite3_stmt *
prep(struct sq_admin *a, const char *sql)
{
    sqlite3_stmt *q = NULL;

    if (sqlite3_prepare_v2(a->db, sql, -1, &q, NULL) != SQLITE_OK) {
        fail(a, SQLITE_ERROR, "prepare");
        return NULL;
    }
    return q;
}

/* Binds p[0..n) from parameter index first on. */
static void
bind_params(sqlite3_stmt *q, int first, const struct admin_param *p, int n)
{
    for (int i = 0; i < n; i++) {
        if (p[i].is_text)
            sqlite3_bind_text(q, first + i, p[i].s, -1, SQLITE_STATIC);
        else
            sqlite3_bind_int64(q, first + i, p[i].i);
    }
}

/* Prepares sql, binds p[0..n) from ?1 on, steps it once and finalizes it.
 * Returns 0 when it ran to its end, else the failure (what names it). The
 * caller holds a->mu. */
static int
run_bound(struct sq_admin *a, const char *sql, const struct admin_param *p, int n, const char *what)
{
    sqlite3_stmt *q = prep(a, sql);
    int step;

    if (q == NULL)
        return ROOMD_EIO;
    bind_params(q, 1, p, n);
    step = sqlite3_step(q);
    sqlite3_finalize(q);
    return step == SQLITE_DONE ? 0 : fail(a, step, "%s", what);
}

static int
exec(struct sq_admin *a, const char *sql)
{
    int rc = sqlite3_exec(a->db, sql, NULL, NULL, NULL);
    return rc == SQLITE_OK ? 0 : fail(a, rc, "%.40s", sql);
}

static void
copy_col(sqlite3_stmt *q, int i, char *dst, size_t cap)
{
    const unsigned char *t = sqlite3_column_text(q, i);
    snprintf(dst, cap, "%s", t ? (const char *)t : "");
}

static int64_t
col_i64(void *q, int i)
{
    return sqlite3_column_int64(q, i);
}

static const char *
col_text(void *q, int i)
{
    return (const char *)sqlite3_column_text(q, i);
}

static const void *
col_blob(void *q, int i, size_t *len)
{
    *len = (size_t)sqlite3_column_bytes(q, i);
    return sqlite3_column_blob(q, i);
}

/* The columns of q's current row, for the shared readers. */
#define SQ_COLS(q) (&(struct admin_cols){(q), col_i64, col_text, col_blob})

/* Steps q (prepared and bound; NULL when the prepare failed: a->super.errmsg
 * says why) to its first row, reads it into dst and finalizes q. Returns 0,
 * ROOMD_ENOTFOUND (no row) or the failure (what names it). The caller holds
 * a->mu. */
static int
read_first(struct sq_admin *a, sqlite3_stmt *q, admin_row_reader read, void *dst, const char *what)
{
    int rc = 0, step;

    if (q == NULL)
        return ROOMD_EIO;
    if ((step = sqlite3_step(q)) == SQLITE_ROW)
        read(SQ_COLS(q), dst);
    else
        rc = step == SQLITE_DONE ? ROOMD_ENOTFOUND : fail(a, step, "%s", what);
    sqlite3_finalize(q);
    return rc;
}

/* Steps q (as for read_first) to its end, appending each row to x through
 * x->read, and finalizes q. Returns 0 or the failure (what names it; the
 * rows read stay in x). The caller holds a->mu. */
static int
read_all(struct sq_admin *a, sqlite3_stmt *q, struct admin_rows *x, const char *what)
{
    int rc = 0, step;

    if (q == NULL)
        return ROOMD_EIO;
    while ((step = sqlite3_step(q)) == SQLITE_ROW)
        admin_rows_add(x, SQ_COLS(q));
    if (step != SQLITE_DONE)
        rc = fail(a, step, "%s", what);
    sqlite3_finalize(q);
    return rc;
}

static void
sq_close(struct admin_store *s)
{
    struct sq_admin *a = (struct sq_admin *)s;

    sqlite3_close(a->db);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

static int
sq_open(struct admin_store **out, const struct conf_store *cs, bool readonly, char *err,
        size_t errlen)
{
    const char *path = cs->sqlite.path;
    struct sq_admin *a;
    char ddl[512];

    if (access(path, F_OK) != 0) {
        snprintf(err, errlen, "store.sqlite.path: %s does not exist (it is never created here)",
                 path);
        return ROOMD_ENOTFOUND;
    }
    a = xcalloc(1, sizeof(*a));
    a->super.ops = &admin_store_sqlite_ops;
    pthread_mutex_init(&a->mu, NULL);
    char why[768];
    int rc = sq_open_db(&a->db, path, readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE,
                        cs->sqlite.busy_timeout_ms, NULL, why, sizeof(why));
    if (rc != 0) {
        snprintf(err, errlen, "store.sqlite.path: %s", why);
        sq_close(&a->super);
        return rc;
    }
    sqlite3_stmt *q = prep(a, "SELECT 1 FROM room_outbox LIMIT 0");
    if (q == NULL) {
        snprintf(err, errlen, "store.sqlite.path: %s is not a roomd store: %s", path,
                 sqlite3_errmsg(a->db));
        sq_close(&a->super);
        return ROOMD_EINVAL;
    }
    sqlite3_finalize(q);
    for (int i = 0; !readonly && admin_store_ddl[i] != NULL; i++) {
        snprintf(ddl, sizeof(ddl), admin_store_ddl[i], "INTEGER PRIMARY KEY");
        if (exec(a, ddl) != 0) {
            snprintf(err, errlen, "store.sqlite.path: %s", a->super.errmsg);
            sq_close(&a->super);
            return ROOMD_EIO;
        }
    }
    if ((q = prep(a, "SELECT 1 FROM admin_audit_rows LIMIT 0")) != NULL) {
        a->super.has_audit = true;
        sqlite3_finalize(q);
    }
    *out = &a->super;
    return 0;
}

static int
sq_summary(struct admin_store *s, struct admin_summary *out)
{
    struct sq_admin *a = (struct sq_admin *)s;
    int rc = 0, step;

    memset(out, 0, sizeof(*out));
    LOCK(a);
    sqlite3_stmt *q = prep(a, ADMIN_SUMMARY_SQL);
    if (q == NULL) {
        UNLOCK(a);
        return ROOMD_EIO;
    }
    while ((step = sqlite3_step(q)) == SQLITE_ROW)
        admin_summary_add(SQ_COLS(q), out);
    if (step != SQLITE_DONE)
        rc = fail(a, step, "summary");
    sqlite3_finalize(q);
    if (rc == 0 && (q = prep(a, STORE_OUTBOX_OLDEST_SQL)) == NULL)
        rc = ROOMD_EIO;
    while (rc == 0 && (step = sqlite3_step(q)) == SQLITE_ROW)
        outbox_counts_oldest(&out->oldest, (uint32_t)sqlite3_column_int64(q, 0),
                             (const char *)sqlite3_column_text(q, 1), sqlite3_column_int64(q, 2));
    if (rc == 0 && step != SQLITE_DONE)
        rc = fail(a, step, "summary oldest");
    sqlite3_finalize(q);
    UNLOCK(a);
    return rc;
}

/* Prepares "head <filter> tail" with the filter's parameters bound after
 * nfirst leading ones (bound by the caller, indexes 1..nfirst). */
static sqlite3_stmt *
prep_filtered(struct sq_admin *a, const char *head, const struct admin_filter *f, const char *tail,
              int nfirst, int *next)
{
    char sql[2048];
    struct admin_param p[ADMIN_MAX_PARAMS];
    int np = 0;

    snprintf(sql, sizeof(sql), "%s", head);
    if (admin_filter_where(f, sql, sizeof(sql) - strlen(tail) - 1, p, &np) != 0) {
        snprintf(a->super.errmsg, sizeof(a->super.errmsg), "filter too long");
        return NULL;
    }
    strcat(sql, tail);
    sqlite3_stmt *q = prep(a, sql);
    if (q != NULL)
        bind_params(q, nfirst + 1, p, np);
    *next = nfirst + np + 1;
    return q;
}

static int
sq_search(struct admin_store *s, const struct admin_filter *f, int64_t after_id, int limit,
          struct outbox_row **rows, size_t *n)
{
    struct sq_admin *a = (struct sq_admin *)s;
    struct admin_rows x = {admin_read_outbox_row, sizeof(**rows), *rows, *n, *n};
    int next, rc;

    LOCK(a);
    sqlite3_stmt *q = prep_filtered(a, "SELECT " STORE_OUTBOX_COLS " FROM room_outbox WHERE id > ?",
                                    f, " ORDER BY id LIMIT ?", 1, &next);
    if (q != NULL) {
        sqlite3_bind_int64(q, 1, after_id);
        sqlite3_bind_int(q, next, limit);
    }
    rc = read_all(a, q, &x, "search");
    UNLOCK(a);
    *rows = x.rows;
    *n = x.n;
    return rc;
}

static int
sq_count(struct admin_store *s, const struct admin_filter *f, int64_t *count, int64_t *max_id)
{
    struct sq_admin *a = (struct sq_admin *)s;
    int64_t got[2] = {0, 0};
    int next, rc;

    LOCK(a);
    sqlite3_stmt *q = prep_filtered(
        a, "SELECT count(*), coalesce(max(id), 0) FROM room_outbox WHERE 1 = 1", f, "", 0, &next);
    rc = read_first(a, q, admin_read_count, got, "count");
    UNLOCK(a);
    if (rc == 0) {
        *count = got[0];
        *max_id = got[1];
    }
    return rc;
}

static int
sq_get(struct admin_store *s, const char *event_id, struct outbox_row *out)
{
    struct sq_admin *a = (struct sq_admin *)s;
    int rc;

    LOCK(a);
    sqlite3_stmt *q = prep(a, "SELECT " STORE_OUTBOX_COLS " FROM room_outbox WHERE event_id = ?");
    if (q != NULL)
        sqlite3_bind_text(q, 1, event_id, -1, SQLITE_STATIC);
    rc = read_first(a, q, admin_read_outbox_row, out, "get");
    UNLOCK(a);
    return rc;
}

static int
sq_audit_begin(struct admin_store *s, const char *actor, bool repair, const char *filter_json,
               int64_t max_id, int64_t now_ms, int64_t *id)
{
    struct sq_admin *a = (struct sq_admin *)s;
    int rc = 0, step;

    LOCK(a);
    sqlite3_stmt *q = prep(a, ADMIN_AUDIT_BEGIN_SQL);
    if (q == NULL) {
        UNLOCK(a);
        return ROOMD_EIO;
    }
    sqlite3_bind_text(q, 1, actor, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, repair ? "repair" : "replay", -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 3, filter_json, -1, SQLITE_STATIC);
    sqlite3_bind_int64(q, 4, max_id);
    sqlite3_bind_int64(q, 5, now_ms);
    if ((step = sqlite3_step(q)) == SQLITE_DONE)
        *id = sqlite3_last_insert_rowid(a->db);
    else
        rc = fail(a, step, "audit begin");
    sqlite3_finalize(q);
    UNLOCK(a);
    return rc;
}

/* Records outbox row id (event_id, new_id: "" unless repaired) under audit. */
static int
record_row(struct sq_admin *a, int64_t audit, int64_t id, const char *event_id, const char *new_id,
           const char *what)
{
    const struct admin_param p[] = {
        {.i = audit}, {.i = id}, {.is_text = true, .s = event_id}, {.is_text = true, .s = new_id}};

    return run_bound(a, ADMIN_AUDIT_ROW_SQL, p, 4, what);
}

/* Replays (or repairs) the row id/event_id and records it under audit; in
 * the caller's transaction. */
static int
replay_one(struct sq_admin *a, int64_t audit, int64_t id, const char *event_id, bool repair,
           int64_t now_ms)
{
    char new_id[UUID_STR_LEN] = "";
    int rc;

    if (repair)
        uuid_v7(now_ms, new_id);
    /* ?1 the repair's new event_id, ?2 now, ?3 the row */
    const struct admin_param p[] = {{.is_text = true, .s = new_id}, {.i = now_ms}, {.i = id}};
    if (repair)
        rc = run_bound(a,
                       "INSERT INTO room_outbox (event_id, command_id, " STORE_OUTBOX_COPY
                       ", status, retry_count, sinks_done, due_at_ms, created_at_ms, updated_at_ms)"
                       " SELECT ?1, 'repair:' || event_id, " STORE_OUTBOX_COPY
                       ", 'pending', 0, 0, ?2, ?2, ?2 FROM room_outbox WHERE id = ?3",
                       p, 3, "replay row");
    else
        rc = run_bound(a,
                       "UPDATE room_outbox SET " SQ_OUTBOX_REPLAY_SET ", due_at_ms = ?2,"
                       " updated_at_ms = ?2 WHERE id = ?3 AND status = 'failed'",
                       p, 3, "replay row");
    if (rc != 0)
        return rc;
    return record_row(a, audit, id, event_id, new_id, "audit row");
}

/* The chunk inside BEGIN IMMEDIATE (see sq_replay_chunk). */
static int
chunk_tx(struct sq_admin *a, int64_t audit, const struct admin_filter *f, bool repair, int limit,
         int64_t now_ms, int64_t *done, bool *finished)
{
    int64_t cursor, max_id, last = 0;
    int next, rc = 0, step;
    struct {
        int64_t id;
        char event_id[37];
    } *ids = NULL;
    size_t n = 0, cap = 0;

    sqlite3_stmt *q = prep(a, "SELECT cursor_id, max_id, state FROM admin_audit WHERE id = ?1");
    if (q == NULL)
        return ROOMD_EIO;
    sqlite3_bind_int64(q, 1, audit);
    if ((step = sqlite3_step(q)) != SQLITE_ROW) {
        rc = step == SQLITE_DONE ? ROOMD_ENOTFOUND : fail(a, step, "audit read");
        sqlite3_finalize(q);
        return rc;
    }
    cursor = sqlite3_column_int64(q, 0);
    max_id = sqlite3_column_int64(q, 1);
    *finished = strcmp((const char *)sqlite3_column_text(q, 2), "running") != 0;
    sqlite3_finalize(q);
    if (*finished)
        return 0;

    q = prep_filtered(a, "SELECT id, event_id FROM room_outbox WHERE" ADMIN_REPLAYABLE, f,
                      " ORDER BY id LIMIT ?", 2, &next);
    if (q == NULL)
        return ROOMD_EIO;
    sqlite3_bind_int64(q, 1, cursor);
    sqlite3_bind_int64(q, 2, max_id);
    sqlite3_bind_int(q, next, limit);
    while ((step = sqlite3_step(q)) == SQLITE_ROW) {
        ids = xgrow(ids, n, &cap, sizeof(*ids));
        ids[n].id = sqlite3_column_int64(q, 0);
        copy_col(q, 1, ids[n].event_id, sizeof(ids[n].event_id));
        n++;
    }
    if (step != SQLITE_DONE)
        rc = fail(a, step, "replay select");
    sqlite3_finalize(q);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        rc = replay_one(a, audit, ids[i].id, ids[i].event_id, repair, now_ms);
        last = ids[i].id;
    }
    free(ids);
    if (rc != 0)
        return rc;
    *done = (int64_t)n;
    *finished = n < (size_t)limit;
    const struct admin_param p[] = {
        {.i = audit}, {.i = last}, {.i = (int64_t)n}, {.i = now_ms}, {.i = *finished}};
    return run_bound(a, ADMIN_AUDIT_ADVANCE_SQL, p, 5, "audit progress");
}

/* Ends the transaction a BEGIN IMMEDIATE opened: COMMIT when rc is 0, else
 * (or when the COMMIT fails) ROLLBACK. Returns rc or the COMMIT's failure.
 * The caller holds a's lock; blocks on SQLite. */
static int
tx_end(struct sq_admin *a, int rc)
{
    if (rc == 0)
        rc = exec(a, "COMMIT");
    if (rc != 0)
        sqlite3_exec(a->db, "ROLLBACK", NULL, NULL, NULL);
    return rc;
}

static int
sq_replay_chunk(struct admin_store *s, int64_t id, const struct admin_filter *f, bool repair,
                int limit, int64_t now_ms, int64_t *done, bool *finished)
{
    struct sq_admin *a = (struct sq_admin *)s;
    int rc;

    LOCK(a);
    if ((rc = exec(a, "BEGIN IMMEDIATE")) == 0)
        rc = tx_end(a, chunk_tx(a, id, f, repair, limit, now_ms, done, finished));
    if (rc != 0)
        *done = 0; /* rolled back */
    UNLOCK(a);
    return rc;
}

static int
record_tx(struct sq_admin *a, const char *actor, const char *action, const char *filter_json,
          const struct admin_audit_row *rows, size_t n, int64_t now_ms, int64_t *id)
{
    const struct admin_param p[] = {{.is_text = true, .s = actor},
                                    {.is_text = true, .s = action},
                                    {.is_text = true, .s = filter_json},
                                    {.i = (int64_t)n},
                                    {.i = now_ms}};
    int rc = run_bound(a, ADMIN_AUDIT_DONE_SQL, p, 5, "audit record");

    if (rc != 0)
        return rc;
    *id = sqlite3_last_insert_rowid(a->db);
    for (size_t i = 0; i < n; i++)
        if ((rc = record_row(a, *id, rows[i].outbox_id, rows[i].event_id, rows[i].new_event_id,
                             "audit record row")) != 0)
            return rc;
    return 0;
}

static int
sq_audit_record(struct admin_store *s, const char *actor, const char *action,
                const char *filter_json, const struct admin_audit_row *rows, size_t n,
                int64_t now_ms, int64_t *id)
{
    struct sq_admin *a = (struct sq_admin *)s;
    int rc;

    LOCK(a);
    if ((rc = exec(a, "BEGIN IMMEDIATE")) == 0)
        rc = tx_end(a, record_tx(a, actor, action, filter_json, rows, n, now_ms, id));
    UNLOCK(a);
    return rc;
}

/* A read-only handle on a store roomd never audited has no audit table: no audits. */
static bool
no_audit_table(struct sq_admin *a)
{
    return strstr(sqlite3_errmsg(a->db), "no such table") != NULL;
}

/* Appends every row of sql (?1.. bound to args[0..nargs)) to x; a database
 * without the audit tables has none. Returns 0 or the failure (what names
 * it). Takes a's lock; blocks on SQLite. */
static int
audit_read_all(struct sq_admin *a, const char *sql, const int64_t *args, int nargs,
               struct admin_rows *x, const char *what)
{
    int rc;

    LOCK(a);
    sqlite3_stmt *q = prep(a, sql);
    for (int i = 0; q != NULL && i < nargs; i++)
        sqlite3_bind_int64(q, i + 1, args[i]);
    rc = read_all(a, q, x, what);
    if (q == NULL && no_audit_table(a))
        rc = 0;
    UNLOCK(a);
    return rc;
}

static int
sq_audit_list(struct admin_store *s, int64_t before_id, int limit, struct admin_audit **out,
              size_t *n)
{
    struct admin_rows x = {admin_read_audit, sizeof(**out), *out, *n, *n};
    const int64_t args[] = {before_id, limit};
    int rc = audit_read_all((struct sq_admin *)s,
                            "SELECT " ADMIN_AUDIT_COLS " FROM admin_audit"
                            " WHERE ?1 = 0 OR id < ?1 ORDER BY id DESC LIMIT ?2",
                            args, 2, &x, "audit list");

    *out = x.rows;
    *n = x.n;
    return rc;
}

static int
sq_audit_get(struct admin_store *s, int64_t id, struct admin_audit *out)
{
    struct sq_admin *a = (struct sq_admin *)s;
    int rc;

    LOCK(a);
    sqlite3_stmt *q = prep(a, "SELECT " ADMIN_AUDIT_COLS " FROM admin_audit WHERE id = ?1");
    if (q != NULL)
        sqlite3_bind_int64(q, 1, id);
    rc = read_first(a, q, admin_read_audit, out, "audit get");
    if (q == NULL && no_audit_table(a))
        rc = ROOMD_ENOTFOUND;
    UNLOCK(a);
    return rc;
}

static int
sq_audit_rows(struct admin_store *s, int64_t id, int64_t after, int limit,
              struct admin_audit_row **out, size_t *n)
{
    struct admin_rows x = {admin_read_audit_row, sizeof(**out), *out, *n, *n};
    const int64_t args[] = {id, after, limit};
    int rc = audit_read_all((struct sq_admin *)s,
                            "SELECT outbox_id, event_id, new_event_id FROM admin_audit_rows"
                            " WHERE audit_id = ?1 AND outbox_id > ?2 ORDER BY outbox_id"
                            " LIMIT ?3",
                            args, 3, &x, "audit rows");

    *out = x.rows;
    *n = x.n;
    return rc;
}

#define SQ_OP(op) .op = sq_##op,
const struct admin_store_ops admin_store_sqlite_ops = {ADMIN_STORE_OPS(SQ_OP)};
#undef SQ_OP
