/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mysql/internal.h: private to the MySQL/MariaDB backend of store.h (the
 * files of src/store/mysql/, MariaDB Connector/C), as libuv's
 * src/unix/internal.h: the handle and its pool, the statement slots, the
 * parameter/row/bulk helpers and the transaction runner the files share.
 * Every shared function starts with mys_.
 *
 *   conn.c     pool, reconnect, error classes, prepare/re-prepare, bind and
 *              bulk helpers, the retry runner mys_run, open/close, ops table
 *   schema.c   migrations (GET_LOCK)
 *   command.c  find_command, load_room, save (fast bulk path, slow savepoint
 *              path), fence_room
 *   batch.c    the rules a save's batch checks in its transaction, and its
 *              COMMIT with the Galera read-back
 *   outbox.c   claim (FOR UPDATE SKIP LOCKED), complete, list, get, replay,
 *              counts, purge
 *   wallet.c   the gifts' debits (inside their save), topup, balance
 *   rooms.c    rockets_pending, rooms_list
 *   gifts.c    gift_get, gift_put, gift_list (the gift catalog)
 *   share.c    one client per database: the pool registry (mys_pool_share)
 *              and the text statements of the admin store and inboxes
 *   failover.c store.mysql.hosts: which server the pool uses, the move to
 *              the next on a loss, Galera readiness and causal reads
 *
 * An operation is a function fn(struct conn *, void *ctx) run by mys_run on
 * a pooled connection: it resets its outputs first (it may run again after a
 * reconnect or a deadlock) and opens/commits its own transaction. One that is
 * a whole transaction from its first statement to its commit runs by
 * mys_run_tx instead, on a connection kept in autocommit off, where its
 * mys_tx_begin costs no round trip.
 */
#ifndef ROOMD_STORE_MYSQL_INTERNAL_H
#define ROOMD_STORE_MYSQL_INTERNAL_H

#include "store/store.h"

#include <mysql.h>

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define MAXP 136 /* parameters of one statement (struct params: two MYS_IN lists) */
#define MAXC 40  /* result columns of a query (struct rows), columns of a bulk statement */

enum sid {
    S_FIND_COMMAND,
    S_ROOM_HEAD,
    S_ROOM_FENCE,
    S_SNAP_LATEST,
    S_LOG_TAIL,
    S_LOG_INSERT,
    S_ROOM_INSERT,
    S_ROOM_UPDATE,
    S_ROOM_UPSERT,
    S_OUTBOX_INSERT,
    S_SNAP_INSERT,
    S_SNAP_NTH,
    S_SNAP_PRUNE,
    S_CLAIM_SELECT,
    S_CLAIM_IDS,
    S_COMPLETE,
    S_LIST_ALL,
    S_LIST_STATUS,
    S_GET,
    S_REPLAY,
    S_STATUS_OF,
    S_COUNTS,
    S_OLDEST,
    S_PURGE,
    S_ACCT_ENSURE,
    S_ACCT_LOCK,
    S_ACCT_GET,
    S_ACCT_ADD,
    S_ACCTS_ADD,
    S_LEDGER_GET,
    S_LEDGER_INSERT,
    S_LEDGER_UPDATE,
    S_LEDGER_DELETE,
    S_W_AUDIT,
    S_ROCKETS,
    S_ROOMS_LIST,
    S_FENCE_ROOM,
    S_LOG_OWN,
    S_LOG_OWN_LOCAL,
    S_OUTBOX_IDS,
    S_CLAIM_RUNS,
    S_CLAIM_RUNS_PARKED,
    S_CLAIM_FENCED,
    S_COMPLETE_IDS,
    S_ROOMS_BUSY,
    S_ACCTS_LOCK,
    S_LEDGER_GETS,
    S_LOG_PURGE,
    S_WRITE_PROBE,
    S_OWNER_ROOMS,
    S_OWNER_LOCK,
    S_GIFT_GET,
    S_GIFT_VERSION,
    S_GIFT_UPSERT,
    S_GIFT_LIST,
    S_EV_HEAD,
    S_EV_ROWS,
    S_EV_OLDEST,
    S_COUNT
};

/* One statement: its slot in struct conn's cache and its fixed SQL text
 * (parameters bound, never built from data). */
struct mys_sql {
    enum sid slot;
    const char *text;
};

/* Declares the statement SQL_<name> of slot S_<name> with its text, in the
 * file that runs it: MYS_SQL(GET, "SELECT ... WHERE event_id=?"); */
#define MYS_SQL(name, text) static const struct mys_sql SQL_##name = {S_##name, text}

struct conn {
    MYSQL *db;               /* NULL until connected, again after a loss */
    MYSQL_STMT *st[S_COUNT]; /* prepared on first use on this connection */
    bool bulk;               /* the server takes array binding (MariaDB) */
    bool tx;                 /* autocommit off (mys_run_tx): a statement starts a transaction */
    bool in_txn;
    bool galera;      /* the server runs wsrep (failover.c) */
    int host;         /* index in mstore.hosts of the server it is connected to */
    uint64_t gen;     /* mstore.gen when it connected: another means the pool moved */
    unsigned int err; /* MySQL errno of the last failure; 0 = ours */
    bool lost; /* dropped on a loss by mys_conn_give: the next connect tries the others first */
    char errmsg[320];
};

#define MYS_MAX_HOSTS 16 /* CONF_MAX_LIST */

struct mys_host {
    char *host;
    unsigned int port;
};

struct mstore {
    struct store super;
    char *socket, *user, *password, *database;
    /* failover.c: the servers (store.mysql.hosts, or host/port), the one in
     * use and the moves; cur, gen and failovers under mu */
    struct mys_host hosts[MYS_MAX_HOSTS];
    int nhosts;
    int cur;
    uint64_t gen;
    uint64_t failovers;
    int64_t failover_ms;
    int wsrep_sync_wait;
    unsigned int connect_s, read_s, write_s, lock_wait_s;
    int64_t checkout_wait_ms;
    int deadlock_retries;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct conn *conns;
    int nconns;
    int *freelist; /* indexes of idle conns */
    int nfree;
    bool down; /* last connect failed (log once per outage) */
    /* Held through an ordered claim's transaction (outbox.c run_for_rows):
     * this process's workers claim one after another, each snapshot after
     * the previous claim's commit, so their claims never pick the same rooms. */
    pthread_mutex_t claim_mu;
    /* wall ms of the last mys_outbox_reconcile before a claim (outbox.c) */
    _Atomic int64_t reconciled_ms;
    /* The process's one pool per database (mys_pool_share): conns has room
     * for cap; base of them are the owner's (store.mysql.pool_size, or 0 for
     * a pool the sharers opened), one more for each sharer (shares, under mu).
     * refs, next: the registry's, under its lock. */
    int cap, base, shares;
    int refs;
    struct mstore *next;
};

enum errclass {
    EC_NONE,
    EC_LOST,  /* the connection is gone or unusable: reconnect, retry once */
    EC_RETRY, /* deadlock / lock wait timeout: retry the transaction */
    EC_DUP,   /* duplicate key */
    EC_OTHER,
};

/* Parameters of one execution. Strings and blobs are borrowed. Only n needs
 * setting before use (PARAMS_INIT): each slot is cleared as it is taken, so
 * the 17 KiB of slots are not zeroed on every statement. */
struct params {
    MYSQL_BIND b[MAXP];
    int64_t i[MAXP];
    unsigned long len[MAXP];
    unsigned int n;
};

#define PARAMS_INIT(p) ((p)->n = 0)

/* Returns the next parameter slot, cleared (slots are reused by resetting n). */
static inline MYSQL_BIND *
p_next(struct params *p, unsigned int *k)
{
    *k = p->n++;
    assert(*k < MAXP);
    memset(&p->b[*k], 0, sizeof(p->b[*k]));
    return &p->b[*k];
}

static inline void
p_i64(struct params *p, int64_t v)
{
    unsigned int k;
    MYSQL_BIND *b = p_next(p, &k);

    p->i[k] = v;
    b->buffer_type = MYSQL_TYPE_LONGLONG;
    b->buffer = &p->i[k];
}

static inline void
p_null(struct params *p)
{
    unsigned int k;

    p_next(p, &k)->buffer_type = MYSQL_TYPE_NULL;
}

static inline void
p_bytes(struct params *p, enum enum_field_types t, const void *d, size_t n)
{
    unsigned int k;
    MYSQL_BIND *b = p_next(p, &k);

    p->len[k] = (unsigned long)n;
    b->buffer_type = t;
    b->buffer = (void *)(d != NULL ? d : "");
    b->buffer_length = (unsigned long)n;
    b->length = &p->len[k];
}

static inline void
p_str(struct params *p, const char *s)
{
    if (s == NULL)
        p_null(p);
    else
        p_bytes(p, MYSQL_TYPE_STRING, s, strlen(s));
}

/* Keys per execution of a statement with an IN list ("col IN (" MYS_IN_LIST
 * ")"): a batch's keys go in chunks of MYS_IN, one round trip each, the last
 * chunk padded with its last key (the server drops repeated list values).
 * 64, store.group_commit_max's default: a batch's rooms, accounts and ref_ids
 * in one round trip each (16 took 3 busy checks and 2 + 2 wallet reads for a
 * batch of ~40 at 64 clients; each round trip ~0.5 ms on a loaded 2-core
 * machine, in the one leader's critical path). */
#define MYS_IN 64
#define MYS_IN_16 "?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?"
#define MYS_IN_LIST MYS_IN_16 "," MYS_IN_16 "," MYS_IN_16 "," MYS_IN_16

/* Binds keys[0..n) (1 <= n <= MYS_IN) as the MYS_IN parameters of an IN list. */
static inline void
p_in_str(struct params *p, const char *const *keys, size_t n)
{
    for (size_t k = 0; k < MYS_IN; k++)
        p_str(p, keys[k < n ? k : n - 1]);
}

/* p_in_str for BIGINT keys. */
static inline void
p_in_i64(struct params *p, const int64_t *keys, size_t n)
{
    for (size_t k = 0; k < MYS_IN; k++)
        p_i64(p, keys[k < n ? k : n - 1]);
}

/* The rows of one query, fetched one at a time into growing buffers.
 * types: 'i' BIGINT (NULL reads 0, see r_null), 's' text, 'b' bytes. */
struct rows {
    MYSQL_STMT *st;
    const struct mys_sql *id;
    unsigned int n;
    const char *types;
    MYSQL_BIND b[MAXC];
    int64_t i[MAXC];
    unsigned long len[MAXC];
    my_bool nul[MAXC];
    my_bool trunc[MAXC];
    char *s[MAXC];
    size_t cap[MAXC];
};

static inline int64_t
r_i64(const struct rows *r, unsigned int k)
{
    return r->nul[k] ? 0 : r->i[k];
}

static inline const char *
r_str(const struct rows *r, unsigned int k)
{
    return r->nul[k] ? NULL : r->s[k];
}

/* Column-wise parameter arrays for one statement executed for many rows: one
 * round trip with MariaDB's array binding, else one execution per row. */
struct bulk {
    unsigned int nrows, ncols;
    const char *types; /* 'i' BIGINT, 's' text, 'b' bytes */
    int64_t *iv[MAXC];
    const char **sv[MAXC];
    unsigned long *len[MAXC];
    char *ind[MAXC]; /* STMT_INDICATOR_NONE | _NULL */
};

static inline void
bk_i64(struct bulk *k, unsigned int col, size_t row, int64_t v)
{
    assert(k->types[col] == 'i' && row < k->nrows);
    k->iv[col][row] = v;
}

static inline void
bk_null(struct bulk *k, unsigned int col, size_t row)
{
    k->ind[col][row] = STMT_INDICATOR_NULL;
}

static inline void
bk_bytes(struct bulk *k, unsigned int col, size_t row, const void *d, size_t n)
{
    assert(k->types[col] != 'i' && row < k->nrows);
    k->sv[col][row] = d != NULL ? d : "";
    k->len[col][row] = (unsigned long)n;
}

static inline void
bk_str(struct bulk *k, unsigned int col, size_t row, const char *s)
{
    if (s == NULL)
        bk_null(k, col, row);
    else
        bk_bytes(k, col, row, s, strlen(s));
}

typedef int (*mys_txn_fn)(struct conn *c, void *arg);

/* The one row statement id finds for key1 (and key2 when not NULL), read
 * into out through read. */
struct one_ctx {
    const struct mys_sql *id;
    const char *types;
    const char *key1, *key2;
    void (*read)(const struct rows *, void *);
    void *out;
};

/* Every row statement id yields for p (bound by the caller; kept as is for
 * a retry), each read by cols (store_read_cols) into the next element (size
 * bytes) of the growing array rows (store_free_cols frees it). */
struct all_ctx {
    const struct mys_sql *id;
    const char *types;
    struct params p;
    size_t size;
    const struct store_col *cols;
    void *rows; /* out: malloc'd, the caller's on success */
    size_t n;
};

/* A failed row made pending again (a replay): the SET of every replay
 * UPDATE of this backend (outbox.c's, admin.c's), the columns as a claim
 * leaves them unset (NULL). */
#define MYS_OUTBOX_REPLAY_SET                                                                      \
    "status='pending', retry_count=0, next_retry_at_ms=NULL, lock_until_ms=NULL, locked_by=NULL"

/* conn.c */
enum errclass mys_classify(unsigned int e);
/* True for an error of the client library (CR_*, CER_*: 2000-2999,
 * 5000-5999), after which the connection is not to be trusted. */
bool mys_client_error(unsigned int e);
int mys_db_fail(struct conn *c, const char *what);
int mys_q_exec(struct conn *c, const char *sql);
int mys_q_int(struct conn *c, const char *sql, int64_t *out);
int mys_st_exec(struct conn *c, const struct mys_sql *id, struct params *p, uint64_t *affected);
void mys_rows_done(struct rows *r);
/* Reads the current row of r into dst (size bytes) by cols
 * (store_read_cols). Thread: r's holder; does not block. */
void mys_read_cols(const struct rows *r, const struct store_col *cols, void *dst, size_t size);
int mys_st_query(struct conn *c, const struct mys_sql *id, struct params *p, struct rows *r,
                 const char *types);
int mys_st_fetch(struct conn *c, struct rows *r);
/*
 * Statement id run with one parameter per letter of types, each from the
 * arguments that follow: 'i' int64_t, 'd' int, 's' const char * (NULL binds
 * NULL; borrowed for the call). mys_exec: 0 with *affected (NULL: not
 * wanted) or the failure. mys_query: as mys_st_query with result columns
 * cols; mys_query_one: for at most one row (1 with it in r, 0 none, or a
 * negative code). mys_rows_done(r) after a query, either way. Thread: c's
 * holder (an operation run by mys_run); blocks on the server.
 */
int mys_exec(struct conn *c, const struct mys_sql *id, uint64_t *affected, const char *types, ...);
int mys_query(struct conn *c, const struct mys_sql *id, struct rows *r, const char *cols,
              const char *types, ...);
#define mys_query_one(c, id, r, cols, ...)                                                         \
    mys_first_row((c), (r), mys_query(c, id, r, cols, __VA_ARGS__))

/* The rc of a mys_query, or the first row: 1 with it in r, 0 none, < 0. */
static inline int
mys_first_row(struct conn *c, struct rows *r, int rc)
{
    return rc != 0 ? rc : mys_st_fetch(c, r);
}

void mys_bulk_init(struct bulk *k, const char *types, size_t nrows);
void mys_bulk_free(struct bulk *k);
int mys_st_bulk(struct conn *c, const struct mys_sql *id, struct bulk *k, uint64_t *affected);
/* The AUTO_INCREMENT id that statement id's last execution on c generated:
 * exact for a one-row mys_st_bulk (an execution of its own), meaningless
 * after an array-bound one. Thread: c's holder; does not block. */
int64_t mys_insert_id(struct conn *c, const struct mys_sql *id);
/* A transaction on c: begin (START TRANSACTION; on a tx connection nothing
 * is sent, its next statement starts one), commit, rollback. Thread: c's
 * holder; begin and commit block on the server. */
int mys_tx_begin(struct conn *c);
int mys_tx_commit(struct conn *c);
void mys_tx_rollback(struct conn *c);
/* Runs fn on a pooled connection in autocommit (mys_run) or, for an fn that
 * is one transaction from mys_tx_begin to mys_tx_commit and runs no
 * statement outside it, on one in autocommit off (mys_run_tx: one round trip
 * fewer per transaction). Either takes an idle connection already in its mode
 * when there is one, else switches one (SET autocommit, once). Reconnects and
 * retries as described at run() in conn.c. Returns fn's result or the
 * failure. Thread: any; blocks on the pool and the server. */
int mys_run(struct mstore *s, mys_txn_fn fn, void *arg);
int mys_run_tx(struct mstore *s, mys_txn_fn fn, void *arg);

/* Runs sql (parameters: before, chunk size) as autocommit DELETEs of up to
 * 500 rows each until limit rows went or one came back short (retention.c).
 * Returns 0 and *purged (NULL: not wanted), or the error. Thread: any; blocks. */
int mys_purge_chunks(struct mstore *s, const struct mys_sql *sql, int64_t before, int limit,
                     size_t *purged);
int mys_one_fn(struct conn *c, void *arg);
/* Runs x on a pooled connection (mys_run). Returns 0 with x->rows/x->n
 * filled, or the failure with x->rows NULL and x->n 0. Blocks; any thread. */
int mys_read_all(struct mstore *s, struct all_ctx *x);

/*
 * One client per database: the admin store (admin.c) and the consumer
 * inboxes (inbox.c) run on the pool of the open store of the same servers,
 * user and database (the one connect, reconnect, failover and error path;
 * docs/store.md), or, in a process without one (roomctl), on a pool they
 * share among themselves.
 *
 * mys_pool_share: the pool for cs's database with one connection more for
 * the caller (until mys_pool_release). Returns 0 and *out (the caller's
 * reference), or ROOMD_EINVAL with err (the settings). Nothing is connected
 * here; mys_pool_release(s, true) gives the reference back. Thread: any;
 * takes the registry's lock.
 */
int mys_pool_share(const struct conf_store *cs, struct mstore **out, char *err, size_t errlen);
/* conn.c: a pool of nconns (not connected) for mc's servers, refs 1, not
 * registered; or ROOMD_EINVAL / ROOMD_EIO with err. mys_pool_free closes
 * every connection and frees it (the last holder's thread). share.c:
 * mys_pool_register adds a store's pool to the registry (first, so sharers
 * find it); mys_pool_release drops a reference, a sharer's (sharer: its
 * connection stays for the next) or the store's own; the last one
 * unregisters and frees the pool (NULL: nothing). Thread: any. */
struct conf_mysql;
int mys_pool_new(struct mstore **out, const struct conf_mysql *mc, int nconns, char *err,
                 size_t errlen);
void mys_pool_free(struct mstore *s);
void mys_pool_register(struct mstore *s);
void mys_pool_release(struct mstore *s, bool sharer);
/*
 * A connection of s's pool in autocommit, connected (to the pool's server,
 * failover.c; a stale one reconnected), for statements of the caller's own
 * over several calls (an inbox transaction). Returns 0 and *out, or the
 * failure (text in store_errmsg()). mys_conn_give puts it back: a lost one
 * (c->err of class EC_LOST, or any client error) is closed, an open
 * transaction rolled back. Thread: the holder's, one at a time; take blocks
 * on the pool and on connecting.
 */
int mys_conn_take(struct mstore *s, struct conn **out);
void mys_conn_give(struct mstore *s, struct conn *c);
/* Runs the text statement sql on c; with res != NULL its stored result set
 * (NULL for a statement without one; the caller frees it), else the result
 * is discarded. Returns 0 or the failure (mys_db_fail). Thread: c's holder;
 * blocks on the server. */
int mys_q_result(struct conn *c, const char *sql, MYSQL_RES **res);
struct consume_arg;
/* tmpl with each ?N (1..9) replaced by args[N-1] and each bare ? by the
 * next argument in order: integers printed, strings quoted and escaped
 * (every session is utf8mb4 with backslash escapes, so escaping needs no
 * connection), NULL as NULL. Returns the text, malloc'd (the caller frees).
 * Thread: any; does not block. */
char *mys_text(const char *tmpl, const struct consume_arg *args, int nargs);

/* conn.c: connects c to server idx of s->hosts (timeouts, session settings,
 * mys_fo_check). Returns 0, or ROOMD_EUNAVAIL with c->db NULL and c->errmsg
 * set. Thread: c's holder; blocks up to connect_timeout (+ read_timeout). */
int mys_conn_open(struct mstore *s, struct conn *c, int idx);

/* failover.c */
/* Connects c to the server the pool uses or, when that fails (failed: the
 * index of the server c just lost, -1 none), to the first of the list that
 * answers and is ready, the failed one last, retrying rounds for
 * s->failover_ms (one round with one server); a server other than the
 * current one becomes the pool's (every other connection reconnects at its
 * next use). Returns 0, or ROOMD_EUNAVAIL. Thread: c's holder; blocks. */
int mys_fo_connect(struct mstore *s, struct conn *c, int failed);
/* True when the pool moved since c connected (close it and reconnect).
 * Thread: c's holder; takes s->mu briefly. */
bool mys_fo_stale(struct mstore *s, const struct conn *c);
/* On a fresh connection: ROOMD_EUNAVAIL when it is a Galera node that is not
 * ready (wsrep_ready OFF or not Primary), else 0 after setting the session's
 * wsrep_sync_wait on Galera. Thread: c's holder; one round trip (two on
 * Galera). */
int mys_fo_check(struct mstore *s, struct conn *c);
/* Fills s->hosts from store.mysql.hosts (n entries "host:port") or, n 0,
 * from host and port. Returns 0 or ROOMD_EINVAL with err naming the entry.
 * Thread: main (open). */
int mys_hosts_parse(struct mstore *s, char *const *list, int n, const char *host, int port,
                    char *err, size_t errlen);
/* The server in use as "host:port" into host, and the moves so far. Returns
 * 0. Thread: any; takes s->mu briefly. */
int mys_server_info(struct store *st, char *host, size_t len, uint64_t *failovers);

/* outbox.c: derives due_at_ms from the seed's columns for every row whose
 * due_at_ms is missing or contradicts its status (rows of another writer;
 * docs/migrate.md), on c in autocommit. Returns 0 and *fixed (rows
 * changed) or the failure. Thread: c's holder; blocks on the server. */
int mys_outbox_reconcile_on(struct conn *c, uint64_t *fixed);

/* batch.c: the save's checks, each inside the open save transaction on c
 * (the calling save's thread; blocks on the server). Each returns 0 or the
 * failure (c->err says which; a deadlock reruns the batch in mys_run).
 * mys_rooms_busy: marks the mutations whose rooms must not hand their rows
 * off (ordering per_room). mys_claimed_ids: the ids of the outbox rows
 * inserted already claimed (lone_id > 0: the one row's id, no query).
 * mys_owner_limit: ROOMD_ELIMIT when a create's owner holds too many open
 * rooms. mys_save_snapshot: m's snapshot, older ones pruned.
 * mys_commit_batch: the COMMIT; on Galera the batch's own log rows are read
 * back before and after it, and a batch the server rolled back without an
 * error is rerun (issue 28). */
int mys_rooms_busy(struct conn *c, struct mutation *const *muts, size_t n);
int mys_claimed_ids(struct conn *c, struct mutation *const *muts, size_t n, int64_t lone_id);
int mys_owner_limit(struct conn *c, const struct mutation *m);
int mys_save_snapshot(struct conn *c, const struct mutation *m);
int mys_commit_batch(struct conn *c, struct mutation *const *muts, size_t n);

/* schema.c */
int mys_migrate(struct mstore *s, struct conn *c, char *err, size_t errlen);

/* command.c, outbox.c, wallet.c, rooms.c: mys_<op> for every op of
 * STORE_OPS (store.h), of type store_<op>_fn: e.g. mys_outbox_claim in
 * outbox.c. */
#define MYS_DECLARE_OP(op) store_##op##_fn mys_##op;
STORE_OPS(MYS_DECLARE_OP)

/* The gifts' debits inside the open save transaction (wallet.c): accounts
 * locked in primary key order, then each by wallet_debit_rule. 0 (see each
 * rc) or the transaction's failure. */
int mys_gift_debits(struct conn *c, struct wallet_debit *const *items, size_t n);
#undef MYS_DECLARE_OP

extern const struct store_ops store_mysql_ops;

#endif
