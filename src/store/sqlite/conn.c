/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sqlite/conn.c: opening the SQLite file (WAL and pragmas), the writer connection
 * behind a mutex and the reader pool, the per-connection statement cache,
 * SQLite result codes mapped to ROOMD_E*, the savepoint batch runner
 * (sq_in_savepoints) and the backend's ops table.
 */
#include "store/sqlite/internal.h"

#include "conf/conf.h"
#include "core/err.h"
#include "core/xmalloc.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const struct sq_sql SQL_BEGIN = {ST_BEGIN, "BEGIN"};
const struct sq_sql SQL_BEGIN_IMMEDIATE = {ST_BEGIN_IMMEDIATE, "BEGIN IMMEDIATE"};
const struct sq_sql SQL_COMMIT = {ST_COMMIT, "COMMIT"};
SQ_SQL(ROLLBACK, "ROLLBACK");
SQ_SQL(SAVEPOINT, "SAVEPOINT m");
SQ_SQL(RELEASE, "RELEASE m");
SQ_SQL(ROLLBACK_TO, "ROLLBACK TO m");
SQ_SQL(SYNC_NORMAL, "PRAGMA synchronous=NORMAL");
SQ_SQL(SYNC_FULL, "PRAGMA synchronous=FULL");

/* Maps a SQLite result code to ROOMD_E* and sets the thread's detail text. */
int
sq_fail(sqlite3 *db, int rc, const char *what)
{
    store_set_errmsg("sqlite %s: %s (%d)", what, db ? sqlite3_errmsg(db) : sqlite3_errstr(rc), rc);
    switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_CANTOPEN:
    case SQLITE_PROTOCOL:
        return ROOMD_EUNAVAIL;
    case SQLITE_NOMEM:
        return ROOMD_ENOMEM;
    case SQLITE_CONSTRAINT:
        return ROOMD_ECONFLICT;
    default:
        return ROOMD_EIO;
    }
}

/* Returns the cached statement id of c, preparing it on first use; NULL with
 * the error text set (the caller returns ROOMD_EIO). */
sqlite3_stmt *
sq_stmt(struct conn *c, const struct sq_sql *id)
{
    if (c->st[id->slot] == NULL &&
        sqlite3_prepare_v3(c->db, id->text, -1, SQLITE_PREPARE_PERSISTENT, &c->st[id->slot],
                           NULL) != SQLITE_OK) {
        store_set_errmsg("sqlite prepare %d: %s", (int)id->slot, sqlite3_errmsg(c->db));
        c->st[id->slot] = NULL;
    }
    return c->st[id->slot];
}

/* Column k of row (a stepped sqlite3_stmt) for store_read_cols. */
static void
stmt_col(const void *row, unsigned int k, const char **text, int64_t *num)
{
    sqlite3_stmt *q = (sqlite3_stmt *)row;

    if (text == NULL)
        *num = sqlite3_column_int64(q, (int)k);
    else
        *text = (const char *)sqlite3_column_text(q, (int)k);
}

void
sq_read_cols(sqlite3_stmt *q, const struct store_col *cols, void *dst, size_t size)
{
    store_read_cols(cols, stmt_col, q, dst, size);
}

/* Runs a statement without results (BEGIN, COMMIT, ...). */
int
sq_run(struct conn *c, const struct sq_sql *id)
{
    sqlite3_stmt *s = sq_stmt(c, id);
    int rc;

    if (s == NULL)
        return ROOMD_EIO;
    rc = sqlite3_step(s);
    sqlite3_reset(s);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW)
        return sq_fail(c->db, rc, id->text);
    return 0;
}

sqlite3_stmt *
sq_bound(struct conn *c, const struct sq_sql *id, const char *types, ...)
{
    sqlite3_stmt *q = sq_stmt(c, id);
    va_list ap;
    int i = 1;

    if (q == NULL)
        return NULL;
    va_start(ap, types);
    for (const char *t = types; *t != '\0'; t++, i++) {
        if (*t == 's')
            bind_text(q, i, va_arg(ap, const char *));
        else if (*t == 'd')
            sqlite3_bind_int(q, i, va_arg(ap, int));
        else if (*t == 'b') {
            const void *d = va_arg(ap, const void *);

            sqlite3_bind_blob(q, i, d != NULL ? d : "", (int)va_arg(ap, size_t), SQLITE_STATIC);
        } else {
            assert(*t == 'i');
            sqlite3_bind_int64(q, i, va_arg(ap, int64_t));
        }
    }
    va_end(ap);
    return q;
}

/* Steps q for at most one row: 1 a row is there to read, 0 there is none, or
 * the failure's code (ROOMD_EIO for a NULL q). The caller reads the row, then
 * calls done(q) either way. */
int
sq_step_one(struct conn *c, sqlite3_stmt *q, const char *what)
{
    int step;

    if (q == NULL)
        return ROOMD_EIO;
    step = sqlite3_step(q);

    if (step == SQLITE_ROW)
        return 1;
    return step == SQLITE_DONE ? 0 : sq_fail(c->db, step, what);
}

int
sq_step_i64(struct conn *c, sqlite3_stmt *q, int64_t *out, const char *what)
{
    int rc = sq_step_one(c, q, what);

    if (rc == 1 && out != NULL)
        *out = sqlite3_column_int64(q, 0);
    done(q);
    return rc;
}

void
sq_rollback(struct conn *c)
{
    if (!sqlite3_get_autocommit(c->db))
        (void)sq_run(c, &SQL_ROLLBACK);
}

int
sq_open_db(sqlite3 **db, const char *path, int flags, int64_t busy_ms, const char *pragmas,
           char *err, size_t errlen)
{
    char *emsg = NULL;
    int rc = sqlite3_open_v2(path, db, flags | SQLITE_OPEN_NOMUTEX, NULL);

    if (rc != SQLITE_OK) {
        snprintf(err, errlen, "cannot open \"%s\": %s", path,
                 *db ? sqlite3_errmsg(*db) : sqlite3_errstr(rc));
    } else {
        sqlite3_extended_result_codes(*db, 1);
        sqlite3_busy_timeout(*db, (int)(busy_ms > 0 ? busy_ms : 5000));
        if (pragmas != NULL && (rc = sqlite3_exec(*db, pragmas, NULL, NULL, &emsg)) != SQLITE_OK)
            snprintf(err, errlen, "\"%s\": %s", path, emsg ? emsg : sqlite3_errstr(rc));
        sqlite3_free(emsg);
    }
    if (rc == SQLITE_OK)
        return 0;
    sqlite3_close(*db);
    *db = NULL;
    return (rc & 0xff) == SQLITE_CANTOPEN || (rc & 0xff) == SQLITE_BUSY ? ROOMD_EUNAVAIL
                                                                        : ROOMD_EIO;
}

static int
conn_open(struct conn *c, const struct conf_sqlite *cq, bool writer, char *err, size_t errlen)
{
    char why[768];
    /* Static text, no data: exec is fine here. journal_mode=WAL is
     * persistent in the file; synchronous is per connection; the WAL file is
     * truncated back to 64 MiB after a checkpoint that emptied it;
     * temp_store=MEMORY keeps statement journals and transient tables in
     * memory (with the default, a snapshot's commit created, and unlinked, a
     * file in /var/tmp). */
    char *pragmas = xasprintf("PRAGMA journal_mode=WAL; PRAGMA synchronous=%s;"
                              " PRAGMA foreign_keys=OFF; PRAGMA journal_size_limit=67108864;"
                              " PRAGMA temp_store=MEMORY;",
                              cq->synchronous_full ? "FULL" : "NORMAL");
    int rc;

    memset(c, 0, sizeof(*c));
    rc = sq_open_db(&c->db, cq->path, SQLITE_OPEN_READWRITE | (writer ? SQLITE_OPEN_CREATE : 0),
                    cq->busy_timeout_ms, pragmas, why, sizeof(why));
    free(pragmas);
    if (rc != 0)
        snprintf(err, errlen, "store.sqlite.path: %s", why);
    return rc;
}

static void
conn_close(struct conn *c)
{
    for (int i = 0; i < ST_COUNT_; i++)
        sqlite3_finalize(c->st[i]);
    sqlite3_close(c->db);
    memset(c, 0, sizeof(*c));
}

/* Puts the writer back to synchronous=FULL after outbox bookkeeping. */
static void
sync_restore(struct conn *c)
{
    if (c->sync_normal && sq_run(c, &SQL_SYNC_FULL) == 0)
        c->sync_normal = false;
}

struct conn *
sq_writer_get(struct sq_store *s)
{
    pthread_mutex_lock(&s->wlock);
    sync_restore(&s->writer); /* only if writer_put could not */
    return &s->writer;
}

/*
 * The writer for outbox bookkeeping (claims, completions). With
 * synchronous=FULL their commits skip the WAL fsync: a crash of the OS can
 * lose only the last bookkeeping, whose rows are then delivered again (at
 * least once), never a command, an event or a wallet entry. The next FULL
 * commit fsyncs the WAL with those frames, so nothing becomes durable out of
 * order. writer_put restores FULL.
 */
struct conn *
sq_writer_get_bookkeeping(struct sq_store *s)
{
    struct conn *c = sq_writer_get(s);

    if (s->sync_full && sq_run(c, &SQL_SYNC_NORMAL) == 0)
        c->sync_normal = true;
    return c;
}

void
sq_writer_put(struct sq_store *s, struct conn *c)
{
    sq_rollback(c); /* no-op unless an error path left a transaction open */
    sync_restore(c);
    pthread_mutex_unlock(&s->wlock);
}

struct conn *
sq_reader_get(struct sq_store *s)
{
    struct conn *c = NULL;

    if (s->nreaders == 0)
        return sq_writer_get(s);
    pthread_mutex_lock(&s->rlock);
    while (c == NULL) {
        for (int i = 0; i < s->nreaders && c == NULL; i++)
            if (!s->rbusy[i]) {
                s->rbusy[i] = true;
                c = &s->readers[i];
            }
        if (c == NULL)
            pthread_cond_wait(&s->rcond, &s->rlock);
    }
    pthread_mutex_unlock(&s->rlock);
    return c;
}

void
sq_reader_put(struct sq_store *s, struct conn *c)
{
    if (c == &s->writer) {
        sq_writer_put(s, c);
        return;
    }
    sq_rollback(c);
    pthread_mutex_lock(&s->rlock);
    s->rbusy[c - s->readers] = false;
    pthread_cond_signal(&s->rcond);
    pthread_mutex_unlock(&s->rlock);
}

/* Steps a write statement of one mutation and resets it. Returns 0,
 * ROOMD_ECONFLICT on a constraint failure (the mutation alone fails), or
 * another code (the whole transaction fails; ROOMD_EIO for a NULL q). */
int
sq_step_write(struct conn *c, sqlite3_stmt *q, const char *what)
{
    int rc = sq_step_one(c, q, what);

    done(q);
    return rc < 0 ? rc : 0;
}

/*
 * Runs item(0..n-1) in ONE write transaction (BEGIN IMMEDIATE ... COMMIT),
 * each in its own savepoint (n > 1): an item refused by a rule is rolled
 * back alone, the others commit. Returns 0 when the transaction committed, or the error
 * that failed it (then nothing committed and the first error's text is kept).
 * The caller holds the writer.
 */
int
sq_in_savepoints(struct conn *c, size_t n, sq_batch_item_fn item, void *arg)
{
    int rc, fatal = 0;

    if ((rc = sq_run(c, &SQL_BEGIN_IMMEDIATE)) != 0)
        return rc;
    if (n == 1) {
        /* one item (one command at a time): its savepoint would span the
         * whole transaction, so a refused item rolls the transaction back
         * instead, without the SAVEPOINT and RELEASE statements */
        if (item(c, arg, 0, &fatal) != 0 && fatal == 0) {
            sq_rollback(c);
            return 0;
        }
    }
    for (size_t i = 0; n > 1 && i < n && fatal == 0; i++) {
        if ((fatal = sq_run(c, &SQL_SAVEPOINT)) != 0)
            break;
        if (item(c, arg, i, &fatal) != 0 && fatal == 0)
            fatal = sq_run(c, &SQL_ROLLBACK_TO);
        if (fatal == 0)
            fatal = sq_run(c, &SQL_RELEASE);
    }
    rc = fatal != 0 ? fatal : sq_run(c, &SQL_COMMIT);
    if (rc != 0) {
        char keep[512];

        strlcpy_(keep, store_errmsg(), sizeof(keep));
        sq_rollback(c);
        store_set_errmsg("%s", keep);
    }
    return rc;
}

int
sq_row_one(struct conn *c, const struct sq_sql *id, const char *key1, const char *key2,
           void (*read)(sqlite3_stmt *, void *), void *out, const char *what)
{
    sqlite3_stmt *q = sq_bound(c, id, key2 != NULL ? "ss" : "s", key1, key2);
    int rc;

    if ((rc = sq_step_one(c, q, what)) == 1)
        read(q, out);
    done(q);
    return rc;
}

/* Reads the one row statement id finds for key1 (and key2 when not NULL)
 * into out through read, on a reader connection. Returns 0, ROOMD_ENOTFOUND
 * or the failure (what names it). */
int
sq_read_one(struct sq_store *s, const struct sq_sql *id, const char *key1, const char *key2,
            void (*read)(sqlite3_stmt *, void *), void *out, const char *what)
{
    struct conn *c = sq_reader_get(s);
    int rc = sq_row_one(c, id, key1, key2, read, out, what);

    sq_reader_put(s, c);
    return rc == 1 ? 0 : rc == 0 ? ROOMD_ENOTFOUND : rc;
}

int
sq_read_list(struct store *st, const struct sq_sql *id, const char *app, struct sq_all *x,
             void *rows, size_t *n)
{
    struct sq_store *s = (struct sq_store *)st;
    struct conn *c = sq_reader_get(s);
    int rc = sq_read_all(c, app != NULL ? sq_bound(c, id, "s", app) : sq_stmt(c, id), x);

    sq_reader_put(s, c);
    *(void **)rows = x->rows;
    *n = x->n;
    return rc;
}

int
sq_read_all(struct conn *c, sqlite3_stmt *q, struct sq_all *x)
{
    size_t cap = 0;
    int step;

    x->rows = NULL;
    x->n = 0;
    if (q == NULL)
        return ROOMD_EIO;
    while ((step = sqlite3_step(q)) == SQLITE_ROW) {
        x->rows = xgrow(x->rows, x->n, &cap, x->size);
        sq_read_cols(q, x->cols, (char *)x->rows + x->n++ * x->size, x->size);
    }
    done(q);
    if (step == SQLITE_DONE)
        return 0;
    store_free_cols(x->cols, x->rows, x->n, x->size);
    x->rows = NULL;
    x->n = 0;
    return sq_fail(c->db, step, x->what);
}

static void
sq_close(struct store *st)
{
    struct sq_store *s = (struct sq_store *)st;

    for (int i = 0; i < NREADERS; i++)
        conn_close(&s->readers[i]);
    conn_close(&s->writer);
    pthread_mutex_destroy(&s->wlock);
    pthread_mutex_destroy(&s->rlock);
    pthread_cond_destroy(&s->rcond);
    free(s->path);
    free(s);
}

static int
sq_open(struct store **out, const struct conf_store *cs, char *err, size_t errlen)
{
    struct sq_store *s = xcalloc(1, sizeof(*s));
    int rc;

    *out = NULL;
    s->super.ops = &store_sqlite_ops;
    s->path = xstrdup(cs->sqlite.path);
    s->sync_full = cs->sqlite.synchronous_full;
    pthread_mutex_init(&s->wlock, NULL);
    pthread_mutex_init(&s->rlock, NULL);
    pthread_cond_init(&s->rcond, NULL);
    if (cs->sqlite.path == NULL || cs->sqlite.path[0] == '\0') {
        snprintf(err, errlen, "store.sqlite.path: must not be empty");
        rc = ROOMD_EINVAL;
        goto out;
    }
    if ((rc = conn_open(&s->writer, &cs->sqlite, true, err, errlen)) != 0)
        goto out;
    if ((rc = sq_migrate(&s->writer, err, errlen)) != 0)
        goto out;
    /* Every other connection to ":memory:" would open another, empty database. */
    s->nreaders = strcmp(cs->sqlite.path, ":memory:") == 0 ? 0 : NREADERS;
    for (int i = 0; i < s->nreaders; i++)
        if ((rc = conn_open(&s->readers[i], &cs->sqlite, false, err, errlen)) != 0)
            goto out;
out:
    if (rc != 0) {
        sq_close(&s->super);
        return rc;
    }
    *out = &s->super;
    return 0;
}

#define SQ_OP(op) .op = sq_##op,
const struct store_ops store_sqlite_ops = {
    .name = "sqlite", .open = sq_open, .close = sq_close, STORE_OPS(SQ_OP)};
#undef SQ_OP
