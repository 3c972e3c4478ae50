/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sqlite/internal.h: private to the SQLite backend of store.h (the files of src/store/sqlite/),
 * as libuv's src/unix/internal.h. The handle (WAL, one writer connection
 * behind a mutex, a small pool of readers), the statement cache and the
 * helpers the files share. Every shared symbol starts with sq_.
 *
 *   conn.c     open, pragmas, connections, statement cache, busy/error codes,
 *              the savepoint batch runner, the ops table
 *   schema.c   migrations
 *   command.c  find_command, load_room, save, fence_room
 *   outbox.c   claim, complete, list, get, replay, counts, purge
 *   wallet.c   a gift's debit (in save_one's savepoint), topup, balance
 *   rooms.c    rockets_pending, rooms_list
 *   gifts.c    gift_get, gift_put, gift_list (the gift catalog)
 */
#ifndef ROOMD_STORE_SQLITE_INTERNAL_H
#define ROOMD_STORE_SQLITE_INTERNAL_H

#include "store/sqlite/db.h"
#include "store/store.h"

struct conf_sqlite;

#include "core/xmalloc.h"

/* A failed row made pending again (a replay): the SET of every replay
 * UPDATE of this backend (outbox.c's, admin.c's); the columns are NOT NULL
 * here, so a claim's unset values are 0 and ''. */
#define SQ_OUTBOX_REPLAY_SET                                                                       \
    "status = 'pending', retry_count = 0, next_retry_at_ms = 0, lock_until_ms = 0, locked_by = ''"

#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The statement cache's slots: each statement's SQL text is a struct sq_sql
 * in the file that runs it (the claim in outbox.c, ...). */
#define NREADERS 4

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
    ST_ROOM_UPDATE_KEEP,
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
    ST_W_AUDIT,
    ST_ROCKETS,
    ST_SYNC_NORMAL,
    ST_SYNC_FULL,
    ST_ROOMS_LIST,
    ST_FENCE_ROOM,
    ST_CLAIM_ROOMS,
    ST_CLAIM_ROOMS_PARKED,
    ST_ROOM_RUN,
    ST_ROOM_RUN_PARKED,
    ST_CLAIM_IDS,
    ST_ROOM_BUSY,
    ST_LOG_PURGE,
    ST_WRITE_PROBE,
    ST_OWNER_ROOMS,
    ST_GIFT_GET,
    ST_GIFT_VERSION,
    ST_GIFT_UPSERT,
    ST_GIFT_LIST,
    ST_RECONCILE_DUE,
    ST_RECONCILE_DONE,
    ST_EV_HEAD,
    ST_EV_ROWS,
    ST_EV_OLDEST,
    ST_COUNT_
};

/* One statement: its slot in struct conn's cache and its fixed SQL text
 * (parameters bound, never built from data). */
struct sq_sql {
    enum stmt_id slot;
    const char *text;
};

/* Declares the statement SQL_<name> of slot ST_<name> with its text, in the
 * file that runs it: SQ_SQL(GET, "SELECT ... WHERE event_id = ?1"); */
#define SQ_SQL(name, text) static const struct sq_sql SQL_##name = {ST_##name, text}

struct conn {
    sqlite3 *db;
    sqlite3_stmt *st[ST_COUNT_];
    bool sync_normal; /* the writer runs outbox bookkeeping (sq_writer_get_bookkeeping) */
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
    _Atomic int64_t reconciled_ms; /* wall ms of the last reconcile before a claim (outbox.c) */
};

/* Resets s (NULL: nothing to do) and clears its bindings. */
static inline void
done(sqlite3_stmt *s)
{
    if (s == NULL)
        return;
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
}

static inline void
bind_text(sqlite3_stmt *s, int i, const char *v)
{
    sqlite3_bind_text(s, i, v ? v : "", -1, SQLITE_STATIC);
}

static inline char *
col_strdup(sqlite3_stmt *s, int i)
{
    const unsigned char *v = sqlite3_column_text(s, i);

    return v ? xstrdup((const char *)v) : NULL;
}

static inline void
col_copy(sqlite3_stmt *s, int i, char *dst, size_t len)
{
    const unsigned char *v = sqlite3_column_text(s, i);

    strlcpy_(dst, v ? (const char *)v : "", len);
}

/* One item of a batch written by in_savepoints: returns the item's own
 * result (0 or a rule refusal, rolled back alone) and sets *fatal when the
 * whole transaction must fail. */
typedef int (*sq_batch_item_fn)(struct conn *c, void *arg, size_t i, int *fatal);

/* Transaction control, shared by every file (conn.c). */
extern const struct sq_sql SQL_BEGIN;
extern const struct sq_sql SQL_BEGIN_IMMEDIATE;
extern const struct sq_sql SQL_COMMIT;

/* The rows of one query read into a growing array: each row by cols
 * (store_read_cols) into the next element (size bytes) of rows
 * (store_free_cols frees it). what names the query in errors. */
struct sq_all {
    size_t size;
    const struct store_col *cols;
    const char *what;
    void *rows; /* out: malloc'd, the caller's on success */
    size_t n;
};

/* conn.c */
int sq_fail(sqlite3 *db, int rc, const char *what);
sqlite3_stmt *sq_stmt(struct conn *c, const struct sq_sql *id);
/* Reads the current row of q into dst (size bytes) by cols
 * (store_read_cols). Thread: q's connection's holder; does not block. */
void sq_read_cols(sqlite3_stmt *q, const struct store_col *cols, void *dst, size_t size);
int sq_run(struct conn *c, const struct sq_sql *id);
/* sq_stmt(c, id) with ?1.. bound, one per letter of types, from the
 * arguments that follow: 's' const char * (NULL binds ""), 'i' int64_t, 'd'
 * int, 'b' a blob as two, const void * and size_t; borrowed until the
 * statement is reset. Returns the statement
 * or NULL when the prepare failed (sq_step_one, sq_step_write, sq_step_i64
 * and sq_read_all then return ROOMD_EIO). Thread: c's holder; does not block. */
sqlite3_stmt *sq_bound(struct conn *c, const struct sq_sql *id, const char *types, ...);
int sq_step_one(struct conn *c, sqlite3_stmt *q, const char *what);
/* Steps q for at most one row and resets it: 1 with its first column in
 * *out (NULL: not wanted), 0 no row, or the failure (what names it). Thread:
 * c's holder; blocks on SQLite. */
int sq_step_i64(struct conn *c, sqlite3_stmt *q, int64_t *out, const char *what);
void sq_rollback(struct conn *c);
struct conn *sq_writer_get(struct sq_store *s);
struct conn *sq_writer_get_bookkeeping(struct sq_store *s);
void sq_writer_put(struct sq_store *s, struct conn *c);
struct conn *sq_reader_get(struct sq_store *s);
void sq_reader_put(struct sq_store *s, struct conn *c);
int sq_step_write(struct conn *c, sqlite3_stmt *q, const char *what);
int sq_in_savepoints(struct conn *c, size_t n, sq_batch_item_fn item, void *arg);
/* sq_stmt(c, id) bound with key1 (?1) and key2 (?2, when not NULL), stepped
 * for at most one row, which read copies into out. Returns 1 (read), 0 (no
 * row) or the failure (EIO when the prepare failed; what names it). Keys are
 * borrowed for the call; the statement is reset before it returns. Thread:
 * c's holder; blocks on SQLite. */
int sq_row_one(struct conn *c, const struct sq_sql *id, const char *key1, const char *key2,
               void (*read)(sqlite3_stmt *, void *), void *out, const char *what);
int sq_read_one(struct sq_store *s, const struct sq_sql *id, const char *key1, const char *key2,
                void (*read)(sqlite3_stmt *, void *), void *out, const char *what);

/* Steps q (prepared on c and bound; NULL when the prepare failed) to its
 * end into x, then resets q. Returns 0 with x->rows/x->n filled, or EIO
 * with x->rows NULL and x->n 0. */
int sq_read_all(struct conn *c, sqlite3_stmt *q, struct sq_all *x);
/* sq_read_all of statement id (its one parameter app, or none when app is
 * NULL) on a reader of st, the rows into *rows (a T ** passed as void *)
 * and *n. Returns 0 or the failure (*rows NULL, *n 0). Blocks; any thread. */
int sq_read_list(struct store *st, const struct sq_sql *id, const char *app, struct sq_all *x,
                 void *rows, size_t *n);

/* Runs sql, a DELETE of up to ?2 rows older than ?1, on the writer as its
 * own short transaction. Returns 0 with *purged the rows deleted, or an
 * error (what names it; *purged 0). Blocks on the writer (retention.c). */
int sq_purge_rows(struct store *st, const struct sq_sql *sql, int64_t before_ms, int limit,
                  size_t *purged, const char *what);

/* outbox.c: derives due_at_ms from the seed's columns for every row whose
 * due_at_ms is missing or contradicts its status (rows of another writer;
 * docs/migrate.md), inside c's open write transaction. Returns 0 and
 * *fixed (rows changed) or the failure. Thread: the writer's holder. */
int sq_outbox_reconcile_in_tx(struct conn *c, int *fixed);

/* schema.c */
int sq_migrate(struct conn *c, char *err, size_t errlen);

/* command.c, outbox.c, wallet.c, rooms.c: sq_<op> for every op of
 * STORE_OPS (store.h), of type store_<op>_fn: e.g. sq_outbox_claim in
 * outbox.c. */
#define SQ_DECLARE_OP(op) store_##op##_fn sq_##op;
STORE_OPS(SQ_DECLARE_OP)

/* A gift's debit inside save_one's transaction and savepoint (wallet.c). */
int sq_gift_debit(struct conn *c, struct wallet_debit *d, int64_t now, int *fatal);
#undef SQ_DECLARE_OP

extern const struct store_ops store_sqlite_ops;

#endif
