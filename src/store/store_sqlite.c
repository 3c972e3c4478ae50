/*
 * store_sqlite.c: the embedded SQLite backend of store.h (WAL, one writer
 * connection behind a mutex, a small pool of reader connections). Sections:
 * schema/migrations, connections and statements, command path (save, load),
 * outbox (claim, complete, list, replay, purge), wallet, rockets.
 * Read store.h first; docs/store.md explains the schema and durability knob.
 */
#include "store/store.h"

#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/xmalloc.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NREADERS 4

/* ==== Schema: migration i+1 is migrations[i]; never edit one, add one ==== */

static const char *const migrations[] = {
    /* 1: the schema of store.h (times are INTEGER unix ms). */
    "CREATE TABLE rooms ("
    " app_code TEXT NOT NULL, room_id TEXT NOT NULL,"
    " owner_uid INTEGER NOT NULL DEFAULT 0, title TEXT NOT NULL DEFAULT '',"
    " status TEXT NOT NULL DEFAULT 'open', version INTEGER NOT NULL,"
    " fence_token INTEGER NOT NULL DEFAULT 0,"
    " rocket_status TEXT NOT NULL DEFAULT 'idle', rocket_id TEXT NOT NULL DEFAULT '',"
    " rocket_level INTEGER NOT NULL DEFAULT 0, rocket_launch_at_ms INTEGER NOT NULL DEFAULT 0,"
    " created_at_ms INTEGER NOT NULL, updated_at_ms INTEGER NOT NULL,"
    " PRIMARY KEY (app_code, room_id)) WITHOUT ROWID;"
    "CREATE INDEX rooms_rocket_ignited ON rooms (rocket_status)"
    " WHERE rocket_status = 'ignited';"
    "CREATE TABLE room_command_log ("
    " id INTEGER PRIMARY KEY, app_code TEXT NOT NULL, room_id TEXT NOT NULL,"
    " version INTEGER NOT NULL, command_id TEXT NOT NULL, command_type TEXT NOT NULL,"
    " request TEXT NOT NULL, response TEXT NOT NULL, created_at_ms INTEGER NOT NULL,"
    " UNIQUE (app_code, command_id), UNIQUE (app_code, room_id, version));"
    "CREATE TABLE room_snapshots ("
    " app_code TEXT NOT NULL, room_id TEXT NOT NULL, version INTEGER NOT NULL,"
    " state TEXT NOT NULL, created_at_ms INTEGER NOT NULL,"
    " PRIMARY KEY (app_code, room_id, version)) WITHOUT ROWID;"
    "CREATE TABLE room_outbox ("
    " id INTEGER PRIMARY KEY AUTOINCREMENT, event_id TEXT NOT NULL UNIQUE,"
    " app_code TEXT NOT NULL, room_id TEXT NOT NULL, room_version INTEGER NOT NULL,"
    " command_id TEXT NOT NULL, event_type TEXT NOT NULL, payload BLOB,"
    " status TEXT NOT NULL, retry_count INTEGER NOT NULL DEFAULT 0,"
    " sinks_done INTEGER NOT NULL DEFAULT 0, next_retry_at_ms INTEGER NOT NULL DEFAULT 0,"
    " lock_until_ms INTEGER NOT NULL DEFAULT 0, locked_by TEXT NOT NULL DEFAULT '',"
    " last_error TEXT, due_at_ms INTEGER, created_at_ms INTEGER NOT NULL,"
    " updated_at_ms INTEGER NOT NULL, delivered_at_ms INTEGER);"
    /* The claim key: only claimable rows have a due_at_ms, so a claim never
     * touches delivered or failed rows however many the table holds. */
    "CREATE INDEX room_outbox_due ON room_outbox (due_at_ms, id)"
    " WHERE due_at_ms IS NOT NULL;"
    "CREATE INDEX room_outbox_delivered ON room_outbox (delivered_at_ms)"
    " WHERE delivered_at_ms IS NOT NULL;"
    "CREATE TABLE wallet_accounts ("
    " app_code TEXT NOT NULL, uid INTEGER NOT NULL, balance INTEGER NOT NULL,"
    " updated_at_ms INTEGER NOT NULL, PRIMARY KEY (app_code, uid)) WITHOUT ROWID;"
    "CREATE TABLE wallet_ledger ("
    " app_code TEXT NOT NULL, ref_id TEXT NOT NULL, uid INTEGER NOT NULL,"
    " amount INTEGER NOT NULL, kind TEXT NOT NULL, created_at_ms INTEGER NOT NULL,"
    " PRIMARY KEY (app_code, ref_id, kind)) WITHOUT ROWID;",
    /* 2: counts and lists by status read this index instead of the table
     * (1M rows: 50 ms instead of 300 ms for the counts). */
    "CREATE INDEX room_outbox_status ON room_outbox (status);",
};
#define NMIGRATIONS ((int)(sizeof(migrations) / sizeof(migrations[0])))

/* ==== Statements: prepared once per connection, on first use ==== */

#define OUTBOX_COLS                                                                                \
    "id, event_id, app_code, room_id, command_id, event_type, room_version, payload,"              \
    " status, retry_count, sinks_done, next_retry_at_ms, lock_until_ms, locked_by,"                \
    " last_error, created_at_ms, delivered_at_ms"

enum stmt_id {
    ST_BEGIN,
    ST_BEGIN_IMMEDIATE,
    ST_COMMIT,
    ST_ROLLBACK,
    ST_SAVEPOINT,
    ST_RELEASE,
    ST_ROLLBACK_TO,
    ST_ROOM_FENCE,
    ST_LOG_INSERT,
    ST_LOG_EXISTS,
    ST_OUTBOX_INSERT,
    ST_ROOM_INSERT,
    ST_ROOM_UPDATE,
    ST_SNAP_INSERT,
    ST_SNAP_PRUNE,
    ST_FIND_COMMAND,
    ST_LOAD_ROOM,
    ST_LOAD_SNAP,
    ST_LOAD_TAIL,
    ST_CLAIM,
    ST_COMPLETE,
    ST_LIST_ALL,
    ST_LIST_STATUS,
    ST_GET,
    ST_REPLAY,
    ST_STATUS_OF,
    ST_COUNTS,
    ST_OLDEST,
    ST_PURGE,
    ST_W_LEDGER_GET,
    ST_W_LEDGER_INSERT,
    ST_W_LEDGER_DELETE,
    ST_W_LEDGER_UPDATE,
    ST_W_BALANCE,
    ST_W_SET_BALANCE,
    ST_ROCKETS,
    ST_SYNC_NORMAL,
    ST_SYNC_FULL,
    ST_ROOMS_LIST,
    ST_FENCE_ROOM,
    ST_COUNT_
};

static const char *const stmt_sql[ST_COUNT_] = {
    [ST_BEGIN] = "BEGIN",
    [ST_BEGIN_IMMEDIATE] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    [ST_SAVEPOINT] = "SAVEPOINT m",
    [ST_RELEASE] = "RELEASE m",
    [ST_ROLLBACK_TO] = "ROLLBACK TO m",
    [ST_ROOM_FENCE] = "SELECT version, fence_token FROM rooms WHERE app_code = ?1 AND room_id = ?2",
    [ST_LOG_INSERT] = "INSERT INTO room_command_log (app_code, room_id, version, command_id,"
                      " command_type, request, response, created_at_ms)"
                      " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    [ST_LOG_EXISTS] = "SELECT 1 FROM room_command_log WHERE app_code = ?1 AND command_id = ?2",
    /* ?9 status, ?10 locked_by, ?11 lock_until_ms, ?12 due_at_ms: pending
     * (due at created_at_ms) or, for the outbox hand-off, already claimed */
    [ST_OUTBOX_INSERT] = "INSERT INTO room_outbox (event_id, app_code, room_id, room_version,"
                         " command_id, event_type, payload, status, locked_by, lock_until_ms,"
                         " due_at_ms, created_at_ms, updated_at_ms)"
                         " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?9, ?10, ?11, ?12, ?8, ?8)",
    [ST_ROOM_INSERT] = "INSERT INTO rooms (app_code, room_id, owner_uid, title, status, version,"
                       " fence_token, rocket_status, rocket_id, rocket_level,"
                       " rocket_launch_at_ms, created_at_ms, updated_at_ms)"
                       " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
    [ST_ROOM_UPDATE] = "UPDATE rooms SET owner_uid = ?3, title = ?4, status = ?5, version = ?6,"
                       " fence_token = ?7, rocket_status = ?8, rocket_id = ?9,"
                       " rocket_level = ?10, rocket_launch_at_ms = ?11, updated_at_ms = ?13"
                       " WHERE app_code = ?1 AND room_id = ?2",
    [ST_SNAP_INSERT] = "INSERT OR REPLACE INTO room_snapshots (app_code, room_id, version, state,"
                       " created_at_ms) VALUES (?1, ?2, ?3, ?4, ?5)",
    [ST_SNAP_PRUNE] = "DELETE FROM room_snapshots WHERE app_code = ?1 AND room_id = ?2"
                      " AND version < (SELECT version FROM room_snapshots"
                      " WHERE app_code = ?1 AND room_id = ?2 ORDER BY version DESC"
                      " LIMIT 1 OFFSET ?3)",
    [ST_FIND_COMMAND] = "SELECT room_id, command_id, command_type, request, response, version,"
                        " created_at_ms FROM room_command_log"
                        " WHERE app_code = ?1 AND command_id = ?2",
    [ST_LOAD_ROOM] = "SELECT version, fence_token FROM rooms WHERE app_code = ?1 AND room_id = ?2",
    [ST_LOAD_SNAP] = "SELECT version, state FROM room_snapshots WHERE app_code = ?1"
                     " AND room_id = ?2 ORDER BY version DESC LIMIT 1",
    [ST_LOAD_TAIL] = "SELECT room_id, command_id, command_type, request, response, version,"
                     " created_at_ms FROM room_command_log"
                     " WHERE app_code = ?1 AND room_id = ?2 AND version > ?3 ORDER BY version",
    [ST_CLAIM] = "UPDATE room_outbox SET status = 'delivering', locked_by = ?1,"
                 " lock_until_ms = ?2, due_at_ms = ?2, updated_at_ms = ?3"
                 " WHERE id IN (SELECT id FROM room_outbox WHERE due_at_ms IS NOT NULL"
                 " AND due_at_ms <= ?3 ORDER BY due_at_ms, id LIMIT ?4)"
                 " RETURNING " OUTBOX_COLS,
    [ST_COMPLETE] = "UPDATE room_outbox SET status = ?3, retry_count = ?4, sinks_done = ?5,"
                    " next_retry_at_ms = ?6, last_error = ?7, due_at_ms = ?8,"
                    " delivered_at_ms = ?9, lock_until_ms = 0, locked_by = '',"
                    " updated_at_ms = ?10"
                    " WHERE id = ?1 AND status = 'delivering' AND locked_by = ?2",
    [ST_LIST_ALL] = "SELECT " OUTBOX_COLS " FROM room_outbox WHERE id > ?1 ORDER BY id LIMIT ?2",
    [ST_LIST_STATUS] = "SELECT " OUTBOX_COLS " FROM room_outbox WHERE id > ?1"
                       " AND status IN (?3, ?4)"
                       " ORDER BY id LIMIT ?2",
    [ST_GET] = "SELECT " OUTBOX_COLS " FROM room_outbox WHERE event_id = ?1",
    [ST_REPLAY] = "UPDATE room_outbox SET status = 'pending', retry_count = 0,"
                  " next_retry_at_ms = 0, lock_until_ms = 0, locked_by = '', due_at_ms = ?2,"
                  " updated_at_ms = ?2 WHERE event_id = ?1 AND status = 'failed'",
    [ST_STATUS_OF] = "SELECT status FROM room_outbox WHERE event_id = ?1",
    [ST_COUNTS] = "SELECT status, count(*) FROM room_outbox GROUP BY status",
    [ST_OLDEST] = "SELECT min(created_at_ms) FROM room_outbox WHERE due_at_ms IS NOT NULL",
    [ST_PURGE] = "DELETE FROM room_outbox WHERE id IN (SELECT id FROM room_outbox"
                 " WHERE delivered_at_ms IS NOT NULL AND delivered_at_ms < ?1"
                 " AND status IN ('delivered', 'published') ORDER BY delivered_at_ms, id"
                 " LIMIT ?2)",
    [ST_W_LEDGER_GET] = "SELECT uid, amount FROM wallet_ledger WHERE app_code = ?1"
                        " AND ref_id = ?2 AND kind = ?3",
    [ST_W_LEDGER_INSERT] = "INSERT INTO wallet_ledger (app_code, ref_id, uid, amount, kind,"
                           " created_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    [ST_W_LEDGER_DELETE] = "DELETE FROM wallet_ledger WHERE app_code = ?1 AND ref_id = ?2"
                           " AND kind = ?3",
    [ST_W_LEDGER_UPDATE] = "UPDATE wallet_ledger SET amount = ?4, uid = ?3, created_at_ms = ?6"
                           " WHERE app_code = ?1 AND ref_id = ?2 AND kind = ?5",
    [ST_W_BALANCE] = "SELECT balance FROM wallet_accounts WHERE app_code = ?1 AND uid = ?2",
    [ST_W_SET_BALANCE] = "INSERT INTO wallet_accounts (app_code, uid, balance, updated_at_ms)"
                         " VALUES (?1, ?2, ?3, ?4) ON CONFLICT (app_code, uid) DO UPDATE"
                         " SET balance = excluded.balance, updated_at_ms = excluded.updated_at_ms",
    [ST_SYNC_NORMAL] = "PRAGMA synchronous=NORMAL",
    [ST_SYNC_FULL] = "PRAGMA synchronous=FULL",
    [ST_ROCKETS] = "SELECT app_code, room_id, rocket_id, rocket_level, rocket_launch_at_ms"
                   " FROM rooms WHERE rocket_status = 'ignited'",
    /* a range of the primary key: app_code >= ?1 bounds it, the OR filters */
    [ST_ROOMS_LIST] = "SELECT app_code, room_id, owner_uid, title, status, version, fence_token,"
                      " created_at_ms, updated_at_ms FROM rooms"
                      " WHERE app_code >= ?1 AND (app_code > ?1 OR room_id > ?2)"
                      " AND (?3 = 0 OR status = 'open') ORDER BY app_code, room_id LIMIT ?4",
    [ST_FENCE_ROOM] = "UPDATE rooms SET fence_token = ?3 WHERE app_code = ?1 AND room_id = ?2"
                      " AND fence_token <= ?3",
};

struct conn {
    sqlite3 *db;
    sqlite3_stmt *st[ST_COUNT_];
    bool sync_normal; /* the writer runs outbox bookkeeping (writer_get_bookkeeping) */
};

struct sq_store {
    struct store super;
    char *path;
    pthread_mutex_t wlock; /* the writer connection: one write at a time */
    struct conn writer;
    pthread_mutex_t rlock; /* the reader pool */
    pthread_cond_t rcond;
    struct conn readers[NREADERS];
    bool rbusy[NREADERS];
    int nreaders;   /* 0 for ":memory:": a private database, reads use the writer */
    bool sync_full; /* synchronous=FULL: outbox bookkeeping commits without the fsync */
};

/* Maps a SQLite result code to ROOMD_E* and sets the thread's detail text. */
static int
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
static sqlite3_stmt *
stmt(struct conn *c, enum stmt_id id)
{
    if (c->st[id] == NULL && sqlite3_prepare_v3(c->db, stmt_sql[id], -1, SQLITE_PREPARE_PERSISTENT,
                                                &c->st[id], NULL) != SQLITE_OK) {
        store_set_errmsg("sqlite prepare %d: %s", (int)id, sqlite3_errmsg(c->db));
        c->st[id] = NULL;
    }
    return c->st[id];
}

static void
done(sqlite3_stmt *s)
{
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
}

/* Runs a statement without results (BEGIN, COMMIT, ...). */
static int
run(struct conn *c, enum stmt_id id)
{
    sqlite3_stmt *s = stmt(c, id);
    int rc;

    if (s == NULL)
        return ROOMD_EIO;
    rc = sqlite3_step(s);
    sqlite3_reset(s);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW)
        return sq_fail(c->db, rc, stmt_sql[id]);
    return 0;
}

/* Steps q for at most one row: 1 a row is there to read, 0 there is none, or
 * the failure's code. The caller reads the row, then calls done(q) either way. */
static int
step_one(struct conn *c, sqlite3_stmt *q, const char *what)
{
    int step = sqlite3_step(q);

    if (step == SQLITE_ROW)
        return 1;
    return step == SQLITE_DONE ? 0 : sq_fail(c->db, step, what);
}

static void
rollback(struct conn *c)
{
    if (!sqlite3_get_autocommit(c->db))
        (void)run(c, ST_ROLLBACK);
}

static void
bind_text(sqlite3_stmt *s, int i, const char *v)
{
    sqlite3_bind_text(s, i, v ? v : "", -1, SQLITE_STATIC);
}

static char *
col_strdup(sqlite3_stmt *s, int i)
{
    const unsigned char *v = sqlite3_column_text(s, i);

    return v ? xstrdup((const char *)v) : NULL;
}

static void
col_copy(sqlite3_stmt *s, int i, char *dst, size_t len)
{
    const unsigned char *v = sqlite3_column_text(s, i);

    strlcpy_(dst, v ? (const char *)v : "", len);
}

/* ==== Connections ==== */

static int
conn_open(struct conn *c, const struct conf_sqlite *cq, bool writer, char *err, size_t errlen)
{
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | (writer ? SQLITE_OPEN_CREATE : 0);
    char *pragmas = NULL;
    char *emsg = NULL;
    int rc;

    memset(c, 0, sizeof(*c));
    rc = sqlite3_open_v2(cq->path, &c->db, flags, NULL);
    if (rc != SQLITE_OK) {
        snprintf(err, errlen, "store.sqlite.path: cannot open \"%s\": %s", cq->path,
                 c->db ? sqlite3_errmsg(c->db) : sqlite3_errstr(rc));
        goto out;
    }
    sqlite3_extended_result_codes(c->db, 1);
    sqlite3_busy_timeout(c->db, (int)(cq->busy_timeout_ms > 0 ? cq->busy_timeout_ms : 5000));
    /* Static text, no data: exec is fine here. journal_mode=WAL is
     * persistent in the file; synchronous is per connection; the WAL file is
     * truncated back to 64 MiB after a checkpoint that emptied it. */
    pragmas = xasprintf("PRAGMA journal_mode=WAL; PRAGMA synchronous=%s;"
                        " PRAGMA foreign_keys=OFF; PRAGMA journal_size_limit=67108864;",
                        cq->synchronous_full ? "FULL" : "NORMAL");
    rc = sqlite3_exec(c->db, pragmas, NULL, NULL, &emsg);
    if (rc != SQLITE_OK) {
        snprintf(err, errlen, "store.sqlite.path: \"%s\": %s", cq->path,
                 emsg ? emsg : sqlite3_errstr(rc));
        goto out;
    }
out:
    sqlite3_free(emsg);
    free(pragmas);
    if (rc != SQLITE_OK) {
        sqlite3_close(c->db);
        c->db = NULL;
        return (rc & 0xff) == SQLITE_CANTOPEN || (rc & 0xff) == SQLITE_BUSY ? ROOMD_EUNAVAIL
                                                                            : ROOMD_EIO;
    }
    return 0;
}

static void
conn_close(struct conn *c)
{
    for (int i = 0; i < ST_COUNT_; i++)
        sqlite3_finalize(c->st[i]);
    sqlite3_close(c->db);
    memset(c, 0, sizeof(*c));
}

/* Applies the migrations the file lacks, inside one IMMEDIATE transaction so
 * two processes opening one new file do not both apply them. */
static int
migrate(struct conn *c, char *err, size_t errlen)
{
    sqlite3_stmt *s = NULL;
    char *emsg = NULL;
    int have = 0, rc;

    rc = sqlite3_exec(c->db,
                      "BEGIN IMMEDIATE; CREATE TABLE IF NOT EXISTS schema_migrations ("
                      " version INTEGER PRIMARY KEY, applied_at_ms INTEGER NOT NULL);",
                      NULL, NULL, &emsg);
    if (rc != SQLITE_OK)
        goto out;
    rc = sqlite3_prepare_v2(c->db, "SELECT coalesce(max(version), 0) FROM schema_migrations", -1,
                            &s, NULL);
    if (rc != SQLITE_OK)
        goto out;
    if ((rc = sqlite3_step(s)) != SQLITE_ROW)
        goto out;
    have = sqlite3_column_int(s, 0);
    sqlite3_finalize(s);
    s = NULL;
    if (have > NMIGRATIONS) {
        snprintf(err, errlen, "store: database schema version %d is newer than this roomd (%d)",
                 have, NMIGRATIONS);
        rollback(c);
        return ROOMD_EINVAL;
    }
    for (int v = have + 1; v <= NMIGRATIONS; v++) {
        if ((rc = sqlite3_exec(c->db, migrations[v - 1], NULL, NULL, &emsg)) != SQLITE_OK)
            goto out;
        rc = sqlite3_prepare_v2(c->db,
                                "INSERT INTO schema_migrations (version, applied_at_ms)"
                                " VALUES (?1, CAST((julianday('now') - 2440587.5) * 86400000"
                                " AS INTEGER))",
                                -1, &s, NULL);
        if (rc != SQLITE_OK)
            goto out;
        sqlite3_bind_int(s, 1, v);
        rc = sqlite3_step(s);
        sqlite3_finalize(s);
        s = NULL;
        if (rc != SQLITE_DONE)
            goto out;
    }
    rc = sqlite3_exec(c->db, "COMMIT", NULL, NULL, &emsg);
out:
    sqlite3_finalize(s);
    if (rc != SQLITE_OK && rc != SQLITE_DONE) {
        snprintf(err, errlen, "store: migration failed: %s", emsg ? emsg : sqlite3_errmsg(c->db));
        sqlite3_free(emsg);
        rollback(c);
        return (rc & 0xff) == SQLITE_BUSY ? ROOMD_EUNAVAIL : ROOMD_EIO;
    }
    sqlite3_free(emsg);
    return 0;
}

/* Puts the writer back to synchronous=FULL after outbox bookkeeping. */
static void
sync_restore(struct conn *c)
{
    if (c->sync_normal && run(c, ST_SYNC_FULL) == 0)
        c->sync_normal = false;
}

static struct conn *
writer_get(struct sq_store *s)
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
static struct conn *
writer_get_bookkeeping(struct sq_store *s)
{
    struct conn *c = writer_get(s);

    if (s->sync_full && run(c, ST_SYNC_NORMAL) == 0)
        c->sync_normal = true;
    return c;
}

static void
writer_put(struct sq_store *s, struct conn *c)
{
    rollback(c); /* no-op unless an error path left a transaction open */
    sync_restore(c);
    pthread_mutex_unlock(&s->wlock);
}

static struct conn *
reader_get(struct sq_store *s)
{
    struct conn *c = NULL;

    if (s->nreaders == 0)
        return writer_get(s);
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

static void
reader_put(struct sq_store *s, struct conn *c)
{
    if (c == &s->writer) {
        writer_put(s, c);
        return;
    }
    rollback(c);
    pthread_mutex_lock(&s->rlock);
    s->rbusy[c - s->readers] = false;
    pthread_cond_signal(&s->rcond);
    pthread_mutex_unlock(&s->rlock);
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
    if ((rc = migrate(&s->writer, err, errlen)) != 0)
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

/* ==== Command path ==== */

/* Reads the row of q into dst (struct command_record). */
static void
read_record(sqlite3_stmt *q, void *dst)
{
    struct command_record *r = dst;

    memset(r, 0, sizeof(*r));
    col_copy(q, 0, r->room_id, sizeof(r->room_id));
    col_copy(q, 1, r->command_id, sizeof(r->command_id));
    r->command_type = col_strdup(q, 2);
    r->request = col_strdup(q, 3);
    r->response = col_strdup(q, 4);
    r->version = sqlite3_column_int64(q, 5);
    r->created_at_ms = sqlite3_column_int64(q, 6);
}

/* Reads the one row statement id finds for key1 (and key2 when not NULL)
 * into out through read, on a reader connection. Returns 0, ROOMD_ENOTFOUND
 * or the failure (what names it). */
static int
read_one(struct sq_store *s, enum stmt_id id, const char *key1, const char *key2,
         void (*read)(sqlite3_stmt *, void *), void *out, const char *what)
{
    struct conn *c = reader_get(s);
    sqlite3_stmt *q = stmt(c, id);
    int rc = ROOMD_EIO;

    if (q == NULL)
        goto out;
    bind_text(q, 1, key1);
    if (key2 != NULL)
        bind_text(q, 2, key2);
    if ((rc = step_one(c, q, what)) == 1) {
        read(q, out);
        rc = 0;
    } else if (rc == 0) {
        rc = ROOMD_ENOTFOUND;
    }
    done(q);
out:
    reader_put(s, c);
    return rc;
}

static int
sq_find_command(struct store *st, const char *app, const char *command_id,
                struct command_record *out)
{
    int rc;

    memset(out, 0, sizeof(*out));
    rc = read_one((struct sq_store *)st, ST_FIND_COMMAND, app, command_id, read_record, out,
                  "find_command");
    if (rc == ROOMD_ENOTFOUND)
        store_set_errmsg("command %s not found", command_id);
    return rc;
}

static int
sq_load_room(struct store *st, const char *app, const char *room_id, struct room_load *out)
{
    struct sq_store *s = (struct sq_store *)st;
    struct conn *c = reader_get(s);
    sqlite3_stmt *q;
    size_t cap = 0;
    int rc, step;

    memset(out, 0, sizeof(*out));
    /* One read transaction: the room row, snapshot and tail are one WAL snapshot. */
    if ((rc = run(c, ST_BEGIN)) != 0)
        goto out;
    rc = ROOMD_EIO;
    if ((q = stmt(c, ST_LOAD_ROOM)) == NULL)
        goto out;
    bind_text(q, 1, app);
    bind_text(q, 2, room_id);
    if ((rc = step_one(c, q, "load_room")) == 1) {
        out->version = sqlite3_column_int64(q, 0);
        out->fence_token = sqlite3_column_int64(q, 1);
    }
    done(q);
    if (rc == 0) {
        store_set_errmsg("room %s/%s not found", app, room_id);
        rc = ROOMD_ENOTFOUND;
    }
    if (rc < 0)
        goto out;
    rc = ROOMD_EIO;
    if ((q = stmt(c, ST_LOAD_SNAP)) == NULL)
        goto out;
    bind_text(q, 1, app);
    bind_text(q, 2, room_id);
    if ((rc = step_one(c, q, "load_room snapshot")) == 1) {
        out->snapshot_version = sqlite3_column_int64(q, 0);
        out->snapshot = col_strdup(q, 1);
    }
    done(q);
    if (rc < 0)
        goto out;
    rc = ROOMD_EIO;
    if ((q = stmt(c, ST_LOAD_TAIL)) == NULL)
        goto out;
    bind_text(q, 1, app);
    bind_text(q, 2, room_id);
    sqlite3_bind_int64(q, 3, out->snapshot_version);
    while ((step = sqlite3_step(q)) == SQLITE_ROW) {
        out->tail = xgrow(out->tail, out->ntail, &cap, sizeof(*out->tail));
        read_record(q, &out->tail[out->ntail++]);
    }
    done(q);
    if (step != SQLITE_DONE) {
        rc = sq_fail(c->db, step, "load_room tail");
        goto out;
    }
    rc = run(c, ST_COMMIT);
out:
    reader_put(s, c);
    if (rc != 0)
        room_load_clear(out);
    return rc;
}

static void
bind_room(sqlite3_stmt *q, const struct mutation *m)
{
    const struct room_meta *r = &m->meta;

    bind_text(q, 1, m->app_code);
    bind_text(q, 2, m->room_id);
    sqlite3_bind_int64(q, 3, r->owner_uid);
    bind_text(q, 4, r->title);
    bind_text(q, 5, r->status ? r->status : "open");
    sqlite3_bind_int64(q, 6, m->version);
    sqlite3_bind_int64(q, 7, m->fence_token);
    bind_text(q, 8, r->rocket_status ? r->rocket_status : "idle");
    bind_text(q, 9, r->rocket_id);
    sqlite3_bind_int(q, 10, r->rocket_level);
    sqlite3_bind_int64(q, 11, r->rocket_launch_at_ms);
    sqlite3_bind_int64(q, 12, r->created_at_ms);
    sqlite3_bind_int64(q, 13, r->updated_at_ms);
}

/* Steps a write statement of one mutation. Returns 0, ROOMD_ECONFLICT on a
 * constraint failure (the mutation alone fails), or another code (the whole
 * transaction fails). */
static int
step_write(struct conn *c, sqlite3_stmt *q, const char *what)
{
    int step = sqlite3_step(q);

    done(q);
    if (step == SQLITE_DONE || step == SQLITE_ROW)
        return 0;
    return sq_fail(c->db, step, what);
}

/* Writes one mutation inside the open transaction and savepoint. Returns 0,
 * a per-mutation code (EREUSED, EEXIST, EFENCED, ECONFLICT, ENOTFOUND), or
 * *fatal set with the code that ends the whole transaction. */
static int
save_one(struct conn *c, struct mutation *m, int *fatal)
{
    sqlite3_stmt *q;
    int rc;
    int64_t cur_version = 0, cur_token = 0;

    *fatal = 0;
    /* Fence: the room's version and lease token. */
    if ((q = stmt(c, ST_ROOM_FENCE)) == NULL)
        return *fatal = ROOMD_EIO;
    bind_text(q, 1, m->app_code);
    bind_text(q, 2, m->room_id);
    if ((rc = step_one(c, q, "save fence")) == 1) {
        cur_version = sqlite3_column_int64(q, 0);
        cur_token = sqlite3_column_int64(q, 1);
    }
    done(q);
    if (rc < 0)
        return *fatal = rc;
    if ((rc = store_check_mutation(m, rc == 1, cur_version, cur_token)) != 0)
        return rc;

    /* Command log: the idempotency key and the version fence. */
    if ((q = stmt(c, ST_LOG_INSERT)) == NULL)
        return *fatal = ROOMD_EIO;
    bind_text(q, 1, m->app_code);
    bind_text(q, 2, m->room_id);
    sqlite3_bind_int64(q, 3, m->version);
    bind_text(q, 4, m->command_id);
    bind_text(q, 5, m->command_type);
    bind_text(q, 6, m->request);
    bind_text(q, 7, m->response);
    sqlite3_bind_int64(q, 8, m->created_at_ms);
    rc = step_write(c, q, "save command log");
    if (rc == ROOMD_ECONFLICT) {
        /* Which unique key? The command_id one means EREUSED. */
        if ((q = stmt(c, ST_LOG_EXISTS)) == NULL)
            return *fatal = ROOMD_EIO;
        bind_text(q, 1, m->app_code);
        bind_text(q, 2, m->command_id);
        rc = step_one(c, q, "save command log lookup");
        done(q);
        if (rc == 1) {
            store_set_errmsg("command_id %s already used", m->command_id);
            return ROOMD_EREUSED;
        }
        if (rc < 0)
            return *fatal = rc;
        store_set_errmsg("room %s/%s version %lld already taken", m->app_code, m->room_id,
                         (long long)m->version);
        return ROOMD_EFENCED;
    }
    if (rc != 0)
        return *fatal = rc;
#ifdef ROOMD_TESTING
    if (store_should_fail_save()) {
        store_set_errmsg("injected failure after the command log row");
        return *fatal = ROOMD_EIO;
    }
#endif

    /* One outbox row per event. */
    bool claimed = m->locked_by != NULL && *m->locked_by;
    for (size_t i = 0; i < m->nevents; i++) {
        const struct outbox_new *e = &m->events[i];

        if ((q = stmt(c, ST_OUTBOX_INSERT)) == NULL)
            return *fatal = ROOMD_EIO;
        bind_text(q, 1, e->event_id);
        bind_text(q, 2, m->app_code);
        bind_text(q, 3, m->room_id);
        sqlite3_bind_int64(q, 4, m->version);
        bind_text(q, 5, m->command_id);
        bind_text(q, 6, e->event_type);
        sqlite3_bind_blob(q, 7, e->payload ? (const void *)e->payload : (const void *)"",
                          (int)e->payload_len, SQLITE_STATIC);
        sqlite3_bind_int64(q, 8, m->created_at_ms);
        if (claimed) {
            bind_text(q, 9, "delivering");
            bind_text(q, 10, m->locked_by);
            sqlite3_bind_int64(q, 11, m->lock_until_ms);
            sqlite3_bind_int64(q, 12, m->lock_until_ms);
        } else {
            bind_text(q, 9, "pending");
            bind_text(q, 10, "");
            sqlite3_bind_int64(q, 11, 0);
            sqlite3_bind_int64(q, 12, m->created_at_ms);
        }
        rc = step_write(c, q, "save outbox");
        if (rc == ROOMD_ECONFLICT) {
            store_set_errmsg("event_id %s already exists", e->event_id);
            return ROOMD_ECONFLICT;
        }
        if (rc != 0)
            return *fatal = rc;
        m->events[i].id = sqlite3_last_insert_rowid(c->db);
    }

    /* The rooms row. */
    if ((q = stmt(c, m->create ? ST_ROOM_INSERT : ST_ROOM_UPDATE)) == NULL)
        return *fatal = ROOMD_EIO;
    bind_room(q, m);
    rc = step_write(c, q, "save rooms");
    if (rc == ROOMD_ECONFLICT)
        return ROOMD_EEXIST;
    if (rc != 0)
        return *fatal = rc;

    /* The snapshot, and pruning beyond snapshots_keep. */
    if (m->snapshot != NULL) {
        if ((q = stmt(c, ST_SNAP_INSERT)) == NULL)
            return *fatal = ROOMD_EIO;
        bind_text(q, 1, m->app_code);
        bind_text(q, 2, m->room_id);
        sqlite3_bind_int64(q, 3, m->version);
        bind_text(q, 4, m->snapshot);
        sqlite3_bind_int64(q, 5, m->created_at_ms);
        if ((rc = step_write(c, q, "save snapshot")) != 0)
            return *fatal = rc;
        if ((q = stmt(c, ST_SNAP_PRUNE)) == NULL)
            return *fatal = ROOMD_EIO;
        bind_text(q, 1, m->app_code);
        bind_text(q, 2, m->room_id);
        sqlite3_bind_int(q, 3, (m->snapshots_keep > 1 ? m->snapshots_keep : 1) - 1);
        if ((rc = step_write(c, q, "prune snapshots")) != 0)
            return *fatal = rc;
    }
    return 0;
}

/* One item of a batch written by in_savepoints: returns the item's own
 * result (0 or a rule refusal, rolled back alone) and sets *fatal when the
 * whole transaction must fail. */
typedef int (*batch_item_fn)(struct conn *c, void *arg, size_t i, int *fatal);

/*
 * Runs item(0..n-1) in ONE write transaction (BEGIN IMMEDIATE ... COMMIT),
 * each in its own savepoint: an item refused by a rule is rolled back alone,
 * the others commit. Returns 0 when the transaction committed, or the error
 * that failed it (then nothing committed and the first error's text is kept).
 * The caller holds the writer.
 */
static int
in_savepoints(struct conn *c, size_t n, batch_item_fn item, void *arg)
{
    int rc, fatal = 0;

    if ((rc = run(c, ST_BEGIN_IMMEDIATE)) != 0)
        return rc;
    for (size_t i = 0; i < n && fatal == 0; i++) {
        if ((fatal = run(c, ST_SAVEPOINT)) != 0)
            break;
        if (item(c, arg, i, &fatal) != 0 && fatal == 0)
            fatal = run(c, ST_ROLLBACK_TO);
        if (fatal == 0)
            fatal = run(c, ST_RELEASE);
    }
    rc = fatal != 0 ? fatal : run(c, ST_COMMIT);
    if (rc != 0) {
        char keep[512];

        strlcpy_(keep, store_errmsg(), sizeof(keep));
        rollback(c);
        store_set_errmsg("%s", keep);
    }
    return rc;
}

static int
save_item(struct conn *c, void *arg, size_t i, int *fatal)
{
    struct mutation *m = ((struct mutation *const *)arg)[i];

    return m->rc = save_one(c, m, fatal);
}

static int
sq_save(struct store *st, struct mutation *const *muts, size_t n)
{
    struct sq_store *s = (struct sq_store *)st;
    struct conn *c = writer_get(s);
    int rc;

    for (size_t i = 0; i < n; i++)
        muts[i]->rc = 0;
    rc = in_savepoints(c, n, save_item, (void *)muts);
    if (rc != 0)
        for (size_t i = 0; i < n; i++)
            muts[i]->rc = rc;
    writer_put(s, c);
    return rc;
}

/* ==== Outbox ==== */

/* Reads the row of q (OUTBOX_COLS) into dst (struct outbox_row). */
static void
read_row(sqlite3_stmt *q, void *dst)
{
    struct outbox_row *r = dst;
    const void *p;

    memset(r, 0, sizeof(*r));
    r->id = sqlite3_column_int64(q, 0);
    col_copy(q, 1, r->event_id, sizeof(r->event_id));
    col_copy(q, 2, r->app_code, sizeof(r->app_code));
    col_copy(q, 3, r->room_id, sizeof(r->room_id));
    col_copy(q, 4, r->command_id, sizeof(r->command_id));
    col_copy(q, 5, r->event_type, sizeof(r->event_type));
    r->room_version = sqlite3_column_int64(q, 6);
    p = sqlite3_column_blob(q, 7);
    r->payload_len = (size_t)sqlite3_column_bytes(q, 7);
    r->payload = xmalloc(r->payload_len ? r->payload_len : 1);
    if (r->payload_len)
        memcpy(r->payload, p, r->payload_len);
    r->status = outbox_status_read((const char *)sqlite3_column_text(q, 8));
    r->retry_count = sqlite3_column_int(q, 9);
    r->sinks_done = (uint32_t)sqlite3_column_int64(q, 10);
    r->next_retry_at_ms = sqlite3_column_int64(q, 11);
    r->lock_until_ms = sqlite3_column_int64(q, 12);
    col_copy(q, 13, r->locked_by, sizeof(r->locked_by));
    r->last_error = col_strdup(q, 14);
    r->created_at_ms = sqlite3_column_int64(q, 15);
    r->delivered_at_ms = sqlite3_column_int64(q, 16);
}

/* Steps q to the end, appending each row to *rows. */
static int
read_rows(struct conn *c, sqlite3_stmt *q, struct outbox_row **rows, size_t *n, const char *what)
{
    size_t cap = 0;
    int step;

    while ((step = sqlite3_step(q)) == SQLITE_ROW) {
        *rows = xgrow(*rows, *n, &cap, sizeof(**rows));
        read_row(q, &(*rows)[(*n)++]);
    }
    done(q);
    if (step != SQLITE_DONE)
        return sq_fail(c->db, step, what);
    return 0;
}

static int
sq_outbox_claim(struct store *st, int64_t now_ms, int64_t lock_until_ms, const char *locked_by,
                int limit, struct outbox_row **rows, size_t *n)
{
    struct sq_store *s = (struct sq_store *)st;
    struct conn *c;
    sqlite3_stmt *q;
    int rc;

    *rows = NULL;
    *n = 0;
    if (limit <= 0)
        return 0;
    c = writer_get_bookkeeping(s);
    /* IMMEDIATE: the write lock is taken before the select, so another
     * process cannot claim the same rows between our select and update. */
    if ((rc = run(c, ST_BEGIN_IMMEDIATE)) != 0)
        goto out;
    if ((q = stmt(c, ST_CLAIM)) == NULL) {
        rc = ROOMD_EIO;
        goto out;
    }
    bind_text(q, 1, locked_by);
    sqlite3_bind_int64(q, 2, lock_until_ms);
    sqlite3_bind_int64(q, 3, now_ms);
    sqlite3_bind_int(q, 4, limit);
    if ((rc = read_rows(c, q, rows, n, "claim")) != 0)
        goto out;
    rc = run(c, ST_COMMIT);
out:
    writer_put(s, c);
    if (rc != 0) {
        outbox_rows_free(*rows, *n);
        *rows = NULL;
        *n = 0;
        return rc;
    }
    outbox_rows_sort(*rows, *n);
    return 0;
}

static int
sq_outbox_complete(struct store *st, struct outbox_result *res, size_t n)
{
    struct sq_store *s = (struct sq_store *)st;
    struct conn *c = writer_get_bookkeeping(s);
    sqlite3_stmt *q;
    int rc;

    if ((rc = run(c, ST_BEGIN_IMMEDIATE)) != 0)
        goto out;
    for (size_t i = 0; i < n; i++) {
        struct outbox_result *r = &res[i];

        if ((q = stmt(c, ST_COMPLETE)) == NULL) {
            rc = ROOMD_EIO;
            goto out;
        }
        sqlite3_bind_int64(q, 1, r->id);
        bind_text(q, 2, r->locked_by);
        bind_text(q, 3, outbox_status_name(r->status));
        sqlite3_bind_int(q, 4, r->retry_count);
        sqlite3_bind_int64(q, 5, (int64_t)r->sinks_done);
        sqlite3_bind_int64(q, 6, r->status == OUTBOX_RETRYABLE ? r->next_retry_at_ms : 0);
        if (r->last_error != NULL)
            sqlite3_bind_text(q, 7, r->last_error, (int)outbox_last_error_len(r->last_error),
                              SQLITE_STATIC);
        else
            sqlite3_bind_null(q, 7);
        if (r->status == OUTBOX_RETRYABLE)
            sqlite3_bind_int64(q, 8, r->next_retry_at_ms);
        else
            sqlite3_bind_null(q, 8);
        if (r->status == OUTBOX_DELIVERED)
            sqlite3_bind_int64(q, 9, r->now_ms);
        else
            sqlite3_bind_null(q, 9);
        sqlite3_bind_int64(q, 10, r->now_ms);
        if ((rc = step_write(c, q, "complete")) != 0)
            goto out;
        r->rc = sqlite3_changes(c->db) == 1 ? 0 : ROOMD_ESTALE;
    }
    rc = run(c, ST_COMMIT);
out:
    if (rc != 0)
        for (size_t i = 0; i < n; i++)
            res[i].rc = rc;
    writer_put(s, c);
    return rc;
}

static int
sq_outbox_list(struct store *st, int status, int64_t after_id, int limit, struct outbox_row **rows,
               size_t *n)
{
    struct sq_store *s = (struct sq_store *)st;
    struct conn *c = reader_get(s);
    sqlite3_stmt *q = stmt(c, status < 0 ? ST_LIST_ALL : ST_LIST_STATUS);
    int rc = ROOMD_EIO;

    *rows = NULL;
    *n = 0;
    if (q == NULL)
        goto out;
    sqlite3_bind_int64(q, 1, after_id);
    sqlite3_bind_int(q, 2, limit);
    if (status >= 0) {
        bind_text(q, 3, outbox_status_name((enum outbox_status)status));
        /* legacy "published" rows are listed as delivered */
        bind_text(q, 4,
                  status == OUTBOX_DELIVERED ? "published"
                                             : outbox_status_name((enum outbox_status)status));
    }
    rc = read_rows(c, q, rows, n, "list");
out:
    reader_put(s, c);
    if (rc != 0) {
        outbox_rows_free(*rows, *n);
        *rows = NULL;
        *n = 0;
    }
    return rc;
}

static int
sq_outbox_get(struct store *st, const char *event_id, struct outbox_row *out)
{
    int rc;

    memset(out, 0, sizeof(*out));
    rc = read_one((struct sq_store *)st, ST_GET, event_id, NULL, read_row, out, "get");
    if (rc == ROOMD_ENOTFOUND)
        store_set_errmsg("event %s not found", event_id);
    return rc;
}

static int
sq_outbox_replay(struct store *st, const char *event_id, int64_t now_ms)
{
    struct sq_store *s = (struct sq_store *)st;
    struct conn *c = writer_get(s);
    sqlite3_stmt *q = stmt(c, ST_REPLAY);
    int rc = ROOMD_EIO;

    if (q == NULL)
        goto out;
    bind_text(q, 1, event_id);
    sqlite3_bind_int64(q, 2, now_ms);
    if ((rc = step_write(c, q, "replay")) != 0 || sqlite3_changes(c->db) == 1)
        goto out;
    /* Nothing changed: tell a missing row from one that is not failed. */
    if ((q = stmt(c, ST_STATUS_OF)) == NULL) {
        rc = ROOMD_EIO;
        goto out;
    }
    bind_text(q, 1, event_id);
    if ((rc = step_one(c, q, "replay lookup")) == 1) {
        store_set_errmsg("event %s is %s, not failed", event_id, sqlite3_column_text(q, 0));
        rc = ROOMD_ECONFLICT;
    } else if (rc == 0) {
        store_set_errmsg("event %s not found", event_id);
        rc = ROOMD_ENOTFOUND;
    }
    done(q);
out:
    writer_put(s, c);
    return rc;
}

static int
sq_outbox_counts(struct store *st, struct outbox_counts *out)
{
    struct sq_store *s = (struct sq_store *)st;
    struct conn *c = reader_get(s);
    sqlite3_stmt *q;
    int rc, step;

    memset(out, 0, sizeof(*out));
    if ((rc = run(c, ST_BEGIN)) != 0)
        goto out;
    rc = ROOMD_EIO;
    if ((q = stmt(c, ST_COUNTS)) == NULL)
        goto out;
    while ((step = sqlite3_step(q)) == SQLITE_ROW)
        outbox_counts_add(out, (const char *)sqlite3_column_text(q, 0), sqlite3_column_int64(q, 1));
    done(q);
    if (step != SQLITE_DONE) {
        rc = sq_fail(c->db, step, "counts");
        goto out;
    }
    if ((q = stmt(c, ST_OLDEST)) == NULL)
        goto out;
    if ((rc = step_one(c, q, "counts oldest")) == 1)
        out->oldest_undelivered_ms = sqlite3_column_int64(q, 0);
    done(q);
    if (rc >= 0)
        rc = run(c, ST_COMMIT);
out:
    reader_put(s, c);
    return rc;
}

static int
sq_outbox_purge(struct store *st, int64_t delivered_before_ms, int limit, size_t *purged)
{
    struct sq_store *s = (struct sq_store *)st;
    struct conn *c = writer_get(s);
    sqlite3_stmt *q = stmt(c, ST_PURGE);
    int rc = ROOMD_EIO;

    *purged = 0;
    if (q == NULL)
        goto out;
    /* One statement is its own short transaction. */
    sqlite3_bind_int64(q, 1, delivered_before_ms);
    sqlite3_bind_int(q, 2, limit);
    if ((rc = step_write(c, q, "purge")) == 0)
        *purged = (size_t)sqlite3_changes(c->db);
out:
    writer_put(s, c);
    return rc;
}

/* ==== Wallet: balances in wallet_accounts, one ledger row per (ref, kind) ==== */

/* Reads the balance of (app, uid); a never-seen account has initial. */
static int
w_balance(struct conn *c, const char *app, int64_t uid, int64_t initial, int64_t *balance)
{
    sqlite3_stmt *q = stmt(c, ST_W_BALANCE);
    int rc;

    if (q == NULL)
        return ROOMD_EIO;
    bind_text(q, 1, app);
    sqlite3_bind_int64(q, 2, uid);
    rc = step_one(c, q, "wallet balance");
    *balance = rc == 1 ? sqlite3_column_int64(q, 0) : initial;
    done(q);
    return rc < 0 ? rc : 0;
}

static int
w_set_balance(struct conn *c, const char *app, int64_t uid, int64_t balance, int64_t now)
{
    sqlite3_stmt *q = stmt(c, ST_W_SET_BALANCE);

    if (q == NULL)
        return ROOMD_EIO;
    bind_text(q, 1, app);
    sqlite3_bind_int64(q, 2, uid);
    sqlite3_bind_int64(q, 3, balance);
    sqlite3_bind_int64(q, 4, now);
    return step_write(c, q, "wallet set balance");
}

/* Looks up ledger row (app, ref, kind): 1 found (uid, amount set), 0 not, <0 error. */
static int
w_ledger_get(struct conn *c, const char *app, const char *ref, const char *kind, int64_t *uid,
             int64_t *amount)
{
    sqlite3_stmt *q = stmt(c, ST_W_LEDGER_GET);
    int rc;

    if (q == NULL)
        return ROOMD_EIO;
    bind_text(q, 1, app);
    bind_text(q, 2, ref);
    bind_text(q, 3, kind);
    if ((rc = step_one(c, q, "wallet ledger")) == 1) {
        *uid = sqlite3_column_int64(q, 0);
        *amount = sqlite3_column_int64(q, 1);
    }
    done(q);
    return rc;
}

/* Writes ledger row (app, ref, kind) with stmt id (insert, update or delete). */
static int
w_ledger_write(struct conn *c, enum stmt_id id, const char *app, const char *ref, const char *kind,
               int64_t uid, int64_t amount, int64_t now)
{
    sqlite3_stmt *q = stmt(c, id);

    if (q == NULL)
        return ROOMD_EIO;
    bind_text(q, 1, app);
    bind_text(q, 2, ref);
    if (id == ST_W_LEDGER_DELETE) {
        bind_text(q, 3, kind);
    } else {
        sqlite3_bind_int64(q, 3, uid);
        sqlite3_bind_int64(q, 4, amount);
        bind_text(q, 5, kind);
        sqlite3_bind_int64(q, 6, now);
    }
    return step_write(c, q, "wallet ledger write");
}

/*
 * One debit inside the open transaction. A ref already debited (and not
 * refunded) is not charged again: 0 and the current balance. A refunded ref
 * debited again is charged again (the refund row is removed, the debit row
 * rewritten): the command that was refunded because its commit failed is
 * being retried. Returns 0 or ROOMD_EFUNDS/EINVAL (nothing written), or a
 * failure of the transaction (*fatal set).
 */
static int
debit_one(struct conn *c, struct wallet_debit *d, int64_t initial, int64_t now, int *fatal)
{
    int64_t luid = 0, lamount = 0, bal = 0, ruid, ramount;
    int rc, have_debit, have_refund;

    d->balance_after = 0;
    if (d->amount < 0) {
        store_set_errmsg("wallet debit: negative amount");
        return ROOMD_EINVAL;
    }
    if ((rc = have_debit = w_ledger_get(c, d->app, d->ref_id, "debit", &luid, &lamount)) < 0)
        return *fatal = rc;
    if ((rc = have_refund = w_ledger_get(c, d->app, d->ref_id, "refund", &ruid, &ramount)) < 0)
        return *fatal = rc;
    if (have_debit && !have_refund) /* already charged: report the balance, charge nothing */
        return *fatal = w_balance(c, d->app, luid, initial, &d->balance_after);
    if ((rc = w_balance(c, d->app, d->uid, initial, &bal)) != 0)
        return *fatal = rc;
    if (bal < d->amount) {
        store_set_errmsg("wallet: balance %lld < %lld", (long long)bal, (long long)d->amount);
        d->balance_after = bal;
        return ROOMD_EFUNDS;
    }
    if (have_refund &&
        (rc = w_ledger_write(c, ST_W_LEDGER_DELETE, d->app, d->ref_id, "refund", 0, 0, now)) != 0)
        return *fatal = rc;
    rc = w_ledger_write(c, have_debit ? ST_W_LEDGER_UPDATE : ST_W_LEDGER_INSERT, d->app, d->ref_id,
                        "debit", d->uid, d->amount, now);
    if (rc != 0 || (rc = w_set_balance(c, d->app, d->uid, bal - d->amount, now)) != 0)
        return *fatal = rc;
    d->balance_after = bal - d->amount;
    return 0;
}

struct debit_batch {
    struct wallet_debit *items;
    int64_t initial_balance;
    int64_t now;
};

static int
debit_item(struct conn *c, void *arg, size_t i, int *fatal)
{
    struct debit_batch *b = arg;

    return b->items[i].rc = debit_one(c, &b->items[i], b->initial_balance, b->now, fatal);
}

/* Debits in one transaction, a savepoint per item (as sq_save). */
static int
sq_wallet_debit_many(struct store *st, struct wallet_debit *items, size_t n,
                     int64_t initial_balance)
{
    struct sq_store *s = (struct sq_store *)st;
    struct conn *c = writer_get(s);
    struct debit_batch b = {items, initial_balance, clock_wall_ms()};
    int rc;

    for (size_t i = 0; i < n; i++)
        items[i].rc = 0;
    rc = in_savepoints(c, n, debit_item, &b);
    if (rc != 0)
        for (size_t i = 0; i < n; i++) {
            items[i].rc = rc;
            items[i].balance_after = 0;
        }
    writer_put(s, c);
    return rc;
}

static int
sq_wallet_refund(struct store *st, const char *app, const char *ref_id)
{
    struct sq_store *s = (struct sq_store *)st;
    struct conn *c = writer_get(s);
    int64_t now = clock_wall_ms(), uid = 0, amount = 0, ruid, ramount, bal;
    int rc, found;

    if ((rc = run(c, ST_BEGIN_IMMEDIATE)) != 0)
        goto out;
    if ((rc = found = w_ledger_get(c, app, ref_id, "debit", &uid, &amount)) < 0)
        goto out;
    if (!found) {
        store_set_errmsg("wallet: no debit %s", ref_id);
        rc = ROOMD_ENOTFOUND;
        goto out;
    }
    if ((rc = found = w_ledger_get(c, app, ref_id, "refund", &ruid, &ramount)) < 0)
        goto out;
    if (found) { /* refunded already: idempotent */
        rc = run(c, ST_COMMIT);
        goto out;
    }
    /* The account exists: the debit wrote it. */
    if ((rc = w_balance(c, app, uid, 0, &bal)) != 0)
        goto out;
    if ((rc = w_ledger_write(c, ST_W_LEDGER_INSERT, app, ref_id, "refund", uid, amount, now)) != 0)
        goto out;
    if ((rc = w_set_balance(c, app, uid, bal + amount, now)) != 0)
        goto out;
    rc = run(c, ST_COMMIT);
out:
    writer_put(s, c);
    return rc;
}

static int
sq_wallet_topup(struct store *st, const char *app, int64_t uid, int64_t amount, const char *ref_id,
                int64_t initial_balance, int64_t *balance_after)
{
    struct sq_store *s = (struct sq_store *)st;
    struct conn *c = writer_get(s);
    int64_t now = clock_wall_ms(), luid, lamount, bal = 0;
    int rc, found;

    *balance_after = 0;
    if (amount < 0) {
        store_set_errmsg("wallet topup: negative amount");
        rc = ROOMD_EINVAL;
        goto out;
    }
    if ((rc = run(c, ST_BEGIN_IMMEDIATE)) != 0)
        goto out;
    if ((rc = found = w_ledger_get(c, app, ref_id, "topup", &luid, &lamount)) < 0)
        goto out;
    if ((rc = w_balance(c, app, found ? luid : uid, initial_balance, &bal)) != 0)
        goto out;
    if (!found) {
        if ((rc = w_ledger_write(c, ST_W_LEDGER_INSERT, app, ref_id, "topup", uid, amount, now)) !=
            0)
            goto out;
        bal += amount;
        if ((rc = w_set_balance(c, app, uid, bal, now)) != 0)
            goto out;
    }
    if ((rc = run(c, ST_COMMIT)) == 0)
        *balance_after = bal;
out:
    writer_put(s, c);
    return rc;
}

static int
sq_wallet_balance(struct store *st, const char *app, int64_t uid, int64_t initial_balance,
                  int64_t *balance)
{
    struct sq_store *s = (struct sq_store *)st;
    struct conn *c = reader_get(s);
    int rc = w_balance(c, app, uid, initial_balance, balance);

    reader_put(s, c);
    return rc;
}

/* ==== Rockets ==== */

static void
read_rocket(sqlite3_stmt *q, struct rocket_pending *r)
{
    memset(r, 0, sizeof(*r));
    col_copy(q, 0, r->app_code, sizeof(r->app_code));
    col_copy(q, 1, r->room_id, sizeof(r->room_id));
    col_copy(q, 2, r->rocket_id, sizeof(r->rocket_id));
    r->level = sqlite3_column_int(q, 3);
    r->launch_at_ms = sqlite3_column_int64(q, 4);
}

static int
sq_rockets_pending(struct store *st, struct rocket_pending **out, size_t *n)
{
    struct sq_store *s = (struct sq_store *)st;
    struct conn *c = reader_get(s);
    sqlite3_stmt *q = stmt(c, ST_ROCKETS);
    size_t cap = 0;
    int rc = ROOMD_EIO, step;

    *out = NULL;
    *n = 0;
    if (q == NULL)
        goto out;
    while ((step = sqlite3_step(q)) == SQLITE_ROW) {
        *out = xgrow(*out, *n, &cap, sizeof(**out));
        read_rocket(q, &(*out)[(*n)++]);
    }
    done(q);
    rc = step == SQLITE_DONE ? 0 : sq_fail(c->db, step, "rockets_pending");
out:
    reader_put(s, c);
    if (rc != 0) {
        free(*out);
        *out = NULL;
        *n = 0;
    }
    return rc;
}

/* ==== Rooms: listing (projection rebuild) and the lease fence claim ==== */

static void
read_room_row(sqlite3_stmt *q, struct room_row *r)
{
    memset(r, 0, sizeof(*r));
    col_copy(q, 0, r->app_code, sizeof(r->app_code));
    col_copy(q, 1, r->room_id, sizeof(r->room_id));
    r->owner_uid = sqlite3_column_int64(q, 2);
    r->title = col_strdup(q, 3);
    if (r->title == NULL)
        r->title = xstrdup("");
    col_copy(q, 4, r->status, sizeof(r->status));
    r->version = sqlite3_column_int64(q, 5);
    r->fence_token = sqlite3_column_int64(q, 6);
    r->created_at_ms = sqlite3_column_int64(q, 7);
    r->updated_at_ms = sqlite3_column_int64(q, 8);
}

static int
sq_rooms_list(struct store *st, const char *after_app, const char *after_room, bool open_only,
              int limit, struct room_row **rows, size_t *n)
{
    struct sq_store *s = (struct sq_store *)st;
    struct conn *c = reader_get(s);
    sqlite3_stmt *q = stmt(c, ST_ROOMS_LIST);
    size_t cap = 0;
    int rc = ROOMD_EIO, step;

    *rows = NULL;
    *n = 0;
    if (q == NULL)
        goto out;
    bind_text(q, 1, after_app);
    bind_text(q, 2, after_room);
    sqlite3_bind_int(q, 3, open_only ? 1 : 0);
    sqlite3_bind_int(q, 4, limit);
    while ((step = sqlite3_step(q)) == SQLITE_ROW) {
        *rows = xgrow(*rows, *n, &cap, sizeof(**rows));
        read_room_row(q, &(*rows)[(*n)++]);
    }
    done(q);
    rc = step == SQLITE_DONE ? 0 : sq_fail(c->db, step, "rooms_list");
out:
    reader_put(s, c);
    if (rc != 0) {
        room_rows_free(*rows, *n);
        *rows = NULL;
        *n = 0;
    }
    return rc;
}

static int
sq_fence_room(struct store *st, const char *app, const char *room_id, int64_t token)
{
    struct sq_store *s = (struct sq_store *)st;
    struct conn *c = writer_get(s);
    sqlite3_stmt *q;
    int rc = ROOMD_EIO;

    if ((q = stmt(c, ST_FENCE_ROOM)) == NULL)
        goto out;
    bind_text(q, 1, app);
    bind_text(q, 2, room_id);
    sqlite3_bind_int64(q, 3, token);
    if ((rc = step_write(c, q, "fence_room")) != 0 || sqlite3_changes(c->db) > 0)
        goto out;
    /* nothing matched: no such room (fine), or a newer token holds it */
    if ((q = stmt(c, ST_ROOM_FENCE)) == NULL) {
        rc = ROOMD_EIO;
        goto out;
    }
    bind_text(q, 1, app);
    bind_text(q, 2, room_id);
    if ((rc = step_one(c, q, "fence_room check")) == 1) {
        store_set_errmsg("room %s/%s fenced: token %lld holds it, not %lld", app, room_id,
                         (long long)sqlite3_column_int64(q, 1), (long long)token);
        rc = ROOMD_EFENCED;
    }
    done(q);
out:
    writer_put(s, c);
    return rc;
}

const struct store_ops store_sqlite_ops = {
    .name = "sqlite",
    .open = sq_open,
    .close = sq_close,
    .find_command = sq_find_command,
    .load_room = sq_load_room,
    .save = sq_save,
    .outbox_claim = sq_outbox_claim,
    .outbox_complete = sq_outbox_complete,
    .outbox_list = sq_outbox_list,
    .outbox_get = sq_outbox_get,
    .outbox_replay = sq_outbox_replay,
    .outbox_counts = sq_outbox_counts,
    .outbox_purge = sq_outbox_purge,
    .wallet_refund = sq_wallet_refund,
    .wallet_topup = sq_wallet_topup,
    .wallet_balance = sq_wallet_balance,
    .wallet_debit_many = sq_wallet_debit_many,
    .rockets_pending = sq_rockets_pending,
    .rooms_list = sq_rooms_list,
    .fence_room = sq_fence_room,
};
