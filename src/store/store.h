/* SPDX-License-Identifier: Apache-2.0 */
/*
 * How to add a store operation (every SQL statement of roomd is under
 * src/store/; docs/store.md):
 *   1. store.h: its function type store_<op>_fn, a line X(<op>) in
 *      STORE_OPS, and the store_<op> wrapper's contract (returns, owns,
 *      thread, blocks); store.c: the wrapper.
 *   2. each backend: mys_<op> in mysql/<file>.c (an fn run by mys_run or
 *      mys_run_tx on a pooled connection; its statement MYS_SQL(NAME, ..)
 *      with a slot S_NAME in mysql/internal.h) and sq_<op> in
 *      sqlite/<file>.c (SQ_SQL(NAME, ..), slot ST_NAME). Rows of room_outbox
 *      by STORE_OUTBOX_COLS and the backend's one row reader.
 *   3. a case in tests/store_suite.c (runs on both backends).
 * An operator's query goes to admin.h's ops table, a consumer group's to
 * inbox.h's, the same way (both backends, a test of each).
 *
 * store.h: the SQL store, authority for room state and room_outbox.
 * One interface, one folder per backend: sqlite/ (embedded default) and
 * mysql/ (MariaDB Connector/C), each split into conn.c, schema.c, command.c,
 * outbox.c, wallet.c and rooms.c behind a private internal.h (docs/store.md,
 * Layout). store.c dispatches through struct store_ops and holds the rules
 * the backends share.
 *
 * Schema (ARCHITECTURE §4; migrations live in each backend):
 *   rooms(app_code, room_id, owner_uid, title, status, version, fence_token,
 *         rocket_status, rocket_id, rocket_level, rocket_launch_at_ms,
 *         created_at_ms, updated_at_ms)                PK (app_code, room_id)
 *         INDEX (app_code, owner_uid, status) -- open rooms per owner
 *   room_command_log(id, app_code, room_id, version, command_id, command_type,
 *         request, response, created_at_ms)
 *         UNIQUE (app_code, command_id)   -- idempotency key
 *         UNIQUE (app_code, room_id, version) -- fence against two owners
 *   room_snapshots(app_code, room_id, version, state, created_at_ms)
 *         PK (app_code, room_id, version); the last snapshots_keep are kept
 *   room_outbox(id, event_id UNIQUE, app_code, room_id, room_version, command_id,
 *         event_type, payload BLOB, status, retry_count, sinks_done,
 *         next_retry_at_ms, lock_until_ms, locked_by, last_error,
 *         due_at_ms, created_at_ms, updated_at_ms, delivered_at_ms)
 *         due_at_ms is the claim key: created_at_ms for pending, next_retry_at_ms
 *         for retryable, lock_until_ms for delivering, NULL for delivered/failed.
 *         INDEX (due_at_ms, id) lets a claim touch only claimable rows.
 *   wallet_accounts(app_code, uid, balance, updated_at_ms)  PK (app_code, uid)
 *   wallet_ledger(app_code, ref_id, uid, amount, kind, created_at_ms, room_id,
 *         version, request_digest)  -- a debit records the gift it pays
 *         PK (app_code, ref_id, kind)  -- debit/refund/topup idempotency
 *   gift_catalog(app_code, gift_id, unit_price, energy_per_unit, enabled,
 *         version, updated_at_ms)   PK (app_code, gift_id) -- SendGift's prices
 *   schema_migrations(version, applied_at_ms)
 *
 * Statuses: pending, delivering, delivered, retryable, failed. Legacy
 * "published" is read as delivered and never written.
 *
 * Threads: every function may be called from any thread at once; the backend
 * serializes what it must (SQLite: one writer connection). Every function
 * blocks on the database. Returns 0 or a negative ROOMD_E* code; detail text
 * is in store_errmsg() of the calling thread.
 */
#ifndef ROOMD_STORE_H
#define ROOMD_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct conf_store;
struct conf_mysql;

#define STORE_ID_MAX 64 /* app_code, room_id, command_id: at most 63 bytes */
/* a gift's unit_price and energy_per_unit, in the catalog and in a SendGift: at most 1e9 */
#define STORE_GIFT_VALUE_MAX 1000000000LL

enum outbox_status {
    OUTBOX_PENDING = 0,
    OUTBOX_DELIVERING,
    OUTBOX_DELIVERED,
    OUTBOX_RETRYABLE,
    OUTBOX_FAILED,
};
/* The status' name ("pending", ...; "unknown" out of range): static. */
const char *outbox_status_name(enum outbox_status s);
/* Returns the status for name ("published" -> OUTBOX_DELIVERED), or -1. */
int outbox_status_parse(const char *name);

/* One event of a mutation, becoming one room_outbox row. */
struct outbox_new {
    char event_id[37];      /* UUIDv7 */
    const char *event_type; /* static string, "RoomCreated" ... */
    uint8_t *payload;       /* packed protobuf payload, owned by the mutation */
    size_t payload_len;
    int64_t room_seq; /* the room's gap-free event number (rooms.event_seq + 1, ...) */
    /* out: room_outbox.id, set by store_save when the row was inserted
     * already claimed (mutation.locked_by) */
    int64_t id;
};

/* The room's meta row after a mutation. */
struct room_meta {
    int64_t owner_uid;
    const char *title;
    const char *status; /* "open" | "closed" */
    int64_t version;
    const char *rocket_status; /* "idle" | "ignited" | "done" */
    const char *rocket_id;
    int rocket_level;
    int64_t rocket_launch_at_ms;
    int64_t created_at_ms;
    int64_t updated_at_ms;
    int64_t event_seq; /* rooms.event_seq after it: the room_seq of its last event */
};

/*
 * One committed room command: its command log row, its outbox rows, the room
 * meta and, when due, a snapshot. All borrowed by store_save for the call.
 */
struct mutation {
    char app_code[STORE_ID_MAX];
    char room_id[STORE_ID_MAX];
    char command_id[STORE_ID_MAX];
    const char *command_type; /* "CreateRoom", ... */
    const char *request;      /* canonical request JSON (replayed on load) */
    const char *response;     /* response JSON (returned on idempotent replay) */
    int64_t version;          /* new room version; version-1 must be the current one */
    int64_t created_at_ms;    /* the command's clock; replay uses it */
    int64_t fence_token;      /* lease token; 0 with the local lease */
    /* The request that carried the command (X-Request-Id, W3C traceparent;
     * "" when none): kept in the log row to join logs and events to it. */
    char request_id[65];
    char traceparent[56];
    bool create; /* first command of the room: INSERT rooms */
    /* create: the owner (meta.owner_uid) may hold at most this many open
     * rooms of the app, this one included (room.max_rooms_per_owner),
     * counted inside the commit (race-free across nodes); 0 = no limit */
    int max_owner_rooms;
    struct room_meta meta;
    struct outbox_new *events;
    size_t nevents;
    const char *snapshot; /* state JSON when a snapshot is due, else NULL */
    int snapshots_keep;
    /* The outbox hand-off (outbox.h): when locked_by is set (non-NULL, not
     * ""), the outbox rows are inserted already claimed by it: status
     * delivering, locked_by, lock_until_ms, due_at_ms = lock_until_ms. NULL
     * (zeroed): pending, due_at_ms = created_at_ms. */
    const char *locked_by;
    int64_t lock_until_ms;
    /* With locked_by: hand off only when the room has no undelivered row yet
     * (outbox_worker.ordering per_room). When it has one, the rows are
     * inserted pending (events[i].id stays 0) so that the ordered claim
     * takes them after the earlier ones. */
    bool handoff_if_room_idle;
    /* With handoff_if_room_idle, room affinity: the room's undelivered rows
     * that are delivering, locked_by this locked_by with their lock
     * (due_at_ms) still running do not make it busy. The hand-off sets it
     * only when such rows are its own and still in its memory (queued or in
     * a worker's hands), so the new rows queue behind them. */
    bool handoff_own_rows;
    bool room_busy; /* out: it had one, the rows went pending */
    bool room_own;  /* backend scratch (MySQL's room check) */
    /* SendGift with the embedded ledger: the sender's debit, written in this
     * mutation's savepoint right after its command log row claimed the
     * command_id (so a debit exists exactly when its gift commits). NULL:
     * none. Out: debit->rc and balance_after, debit_us its time. */
    struct wallet_debit *debit;
    int64_t debit_us;
    /* Out (room_command_timing, seed 阶段耗时日志): the command log row's
     * insert, where the idempotency check happens (its unique key), and the
     * snapshot's write, µs; a batch's shared statement is split evenly. */
    int64_t log_us, snapshot_us;
    /* Out: result of this mutation, set by store_save. 0 committed;
     * ROOMD_EREUSED its command_id already exists (look it up), or the
     * ledger holds another debit under it; ROOMD_EFUNDS its debit was refused
     * (short balance); ROOMD_EEXIST create of an existing room;
     * ROOMD_EFENCED its version was taken or its fence token is older than
     * the room's; ROOMD_ELIMIT a create whose owner already holds
     * max_owner_rooms open rooms. Any of these rolls back this mutation
     * alone. */
    int rc;
};

/* A command log entry, for replay and idempotency. */
struct command_record {
    char room_id[STORE_ID_MAX];
    char command_id[STORE_ID_MAX];
    char *command_type;
    char *request;
    char *response;
    int64_t version;
    int64_t created_at_ms;
};
void command_record_clear(struct command_record *r);

/* What loading a room returns: the latest snapshot (NULL state when the
 * room has none yet) and the log entries after it, in version order. */
struct room_load {
    char *snapshot;           /* state JSON or NULL */
    int64_t snapshot_version; /* 0 when no snapshot */
    struct command_record *tail;
    size_t ntail;
    int64_t version;     /* rooms.version */
    int64_t fence_token; /* rooms.fence_token */
    int64_t event_seq;   /* rooms.event_seq: the room_seq of its last event */
};
void room_load_clear(struct room_load *l);

/* A claimed (or listed) room_outbox row. */
struct outbox_row {
    int64_t id;
    char event_id[37];
    char app_code[STORE_ID_MAX];
    char room_id[STORE_ID_MAX];
    char command_id[STORE_ID_MAX];
    char event_type[32];
    int64_t room_version;
    int64_t room_seq; /* gap-free per room, 1, 2, ...; 0 for rows older than it */
    /* the command's request (mutation.request_id, traceparent); "" when none */
    char request_id[65];
    char traceparent[56];
    uint8_t *payload;
    size_t payload_len;
    enum outbox_status status;
    int retry_count;
    uint32_t sinks_done; /* bit per direct sink that already succeeded */
    int64_t next_retry_at_ms;
    int64_t lock_until_ms;
    char locked_by[STORE_ID_MAX];
    char *last_error;
    int64_t created_at_ms;
    int64_t delivered_at_ms;
    /* the ordered claim's (not a column): sinks_done bits an earlier
     * undelivered row of the room, not claimed with this one, still lacks;
     * the worker holds the row for them (docs/outbox.md, per-room order) */
    uint32_t held_sinks;
};
void outbox_rows_free(struct outbox_row *rows, size_t n);

/*
 * The one room_outbox row shape. STORE_OUTBOX_COLS: the columns of a struct
 * outbox_row in SELECT order, the same list in both backends for every read
 * (the worker's claim, list/get, the admin store's search/get): column k
 * is the k-th field read by each backend's row reader. STORE_OUTBOX_COPY:
 * what a repair's new row copies from the original (INSERT ... SELECT; its
 * event_id, command_id "repair:<event_id>", status and times are its own).
 */
#define STORE_OUTBOX_COLS                                                                          \
    "id, event_id, app_code, room_id, command_id, event_type, room_version, payload,"              \
    " status, retry_count, sinks_done, next_retry_at_ms, lock_until_ms, locked_by,"                \
    " last_error, created_at_ms, delivered_at_ms, room_seq, request_id, traceparent"
/* The columns of STORE_OUTBOX_COLS: a statement's own columns come after them. */
#define STORE_OUTBOX_NCOLS 20
#define STORE_OUTBOX_COPY "app_code, room_id, room_version, event_type, payload, room_seq"

/* The outcome of one delivery attempt, written fenced by locked_by. */
struct outbox_result {
    int64_t id;
    const char *locked_by;     /* the claimer; completion is refused otherwise */
    enum outbox_status status; /* DELIVERED | RETRYABLE | FAILED */
    int retry_count;
    uint32_t sinks_done;
    int64_t next_retry_at_ms; /* RETRYABLE only */
    const char *last_error;   /* NULL when delivered */
    int64_t now_ms;
    int rc; /* out: 0, or ROOMD_ESTALE when the fence refused */
};

#define OUTBOX_SINK_BITS 8 /* sinks_done bits outbox_counts tracks (sink.h SINK_BIT_*) */

struct outbox_counts {
    int64_t pending, delivering, delivered, retryable, failed;
    /* created_at_ms of the oldest undelivered row (pending, delivering or
     * retryable: every row a claim may still take), 0 when none */
    int64_t oldest_undelivered_ms;
    /* the same among the rows that carry sink bit 1 << b (sink_bit_carries)
     * and whose sinks_done lacks it: the oldest row sink b has not delivered
     * yet (also when it waits for another sink) */
    int64_t oldest_missing_ms[OUTBOX_SINK_BITS];
};

/* A room whose rocket is ignited (in-process launch timer rebuild). */
struct rocket_pending {
    char app_code[STORE_ID_MAX];
    char room_id[STORE_ID_MAX];
    char rocket_id[STORE_ID_MAX];
    int level;
    int64_t launch_at_ms;
};

/* A rooms row with its meta (store_rooms_list: projection rebuilds). */
struct room_row {
    char app_code[STORE_ID_MAX];
    char room_id[STORE_ID_MAX];
    int64_t owner_uid;
    char *title;    /* malloc'd */
    char status[8]; /* "open" | "closed" */
    int64_t version;
    int64_t fence_token;
    int64_t created_at_ms;
    int64_t updated_at_ms;
};
void room_rows_free(struct room_row *rows, size_t n);

/* A gift's debit from the embedded ledger (mutation.debit): a statement of
 * its mutation's transaction, keyed by (app, ref_id = the command_id). The
 * ledger row also records the gift it pays (room_id, version, digest): the
 * durable idempotency record of the gift once its command log row is
 * purged, and what the audit matches per gift (docs/wallet.md). */
struct wallet_debit {
    const char *app, *ref_id; /* borrowed */
    int64_t uid, amount;
    char digest[65];         /* hex SHA-256 of the canonical request (wallet_request_digest) */
    const char *room_id;     /* borrowed; set by store_save from the mutation */
    int64_t version;         /* the gift's room version; set by store_save */
    int64_t initial_balance; /* balance of a never-seen account */
    int rc;                  /* out: 0, ROOMD_EFUNDS, ROOMD_EINVAL, ROOMD_EREUSED */
    int64_t balance_after;   /* out: uid's balance after it (or as found when refused) */
};

/* One gift of an app's catalog (store_gift_*): what SendGift charges and
 * the rocket energy it adds per unit when room.gift_catalog is required. */
struct gift_item {
    char app_code[STORE_ID_MAX];
    char gift_id[STORE_ID_MAX];
    int64_t unit_price;      /* what one unit costs, 1..1e9 */
    int64_t energy_per_unit; /* rocket energy one unit adds, 0..1e9 */
    int enabled;             /* 0: SendGift refuses it (409 gift_disabled) */
    int64_t version;         /* 1 when created, +1 per change */
    int64_t updated_at_ms;
};

/* One row the wallet audit reads (store_wallet_audit_rows). */
struct audit_row {
    char kind; /* 'G' a committed SendGift, 'L' a ledger row, 'A' an account, 'M' a room's
                * oldest logged version */
    char app_code[STORE_ID_MAX];
    char key[STORE_ID_MAX];     /* G: command_id; L: ref_id; A: "" */
    char ledger_kind[8];        /* L: "debit" | "refund" | "topup" */
    int64_t uid;                /* L, A */
    int64_t amount;             /* L: amount; A: balance */
    char *request;              /* G: the logged request (malloc'd), else NULL */
    char room_id[STORE_ID_MAX]; /* G, L (debit; "" before migration), M: the room */
    int64_t version;            /* G: its version; L: the gift's (0: unknown); M: the room's
                                 * oldest logged version */
    char digest[65];            /* L: the gift's request digest ("" unknown) */
    int64_t created_at_ms;      /* L */
};
void audit_rows_free(struct audit_row *rows, size_t n);

/*
 * Reading a row into one of the structs above, shared by the backends: a
 * table of its columns in SELECT order, each a type letter and the field:
 * 'c' text copied into a char array ("" for NULL), 's' text malloc'd (NULL
 * stays NULL), 'e' text malloc'd ("" for NULL), 'k' the text's first
 * character into a char, 'i' an int64_t, 'd' an int. A table ends with {0}.
 */
struct store_col {
    char type;
    size_t off, size;
};
#define STORE_COL(type, st, field)                                                                 \
    {                                                                                              \
        type, offsetof(st, field), sizeof(((st *)0)->field)                                        \
    }

/* The columns of a command_record (room_id, command_id, command_type,
 * request, response, version, created_at_ms), a rocket_pending (app_code,
 * room_id, rocket_id, rocket_level, rocket_launch_at_ms), a room_row
 * (app_code, room_id, owner_uid, title, status, version, fence_token,
 * created_at_ms, updated_at_ms) and an audit_row (kind, app_code, key,
 * ledger_kind, uid, amount, request, room_id, version, digest, created_at_ms). */
extern const struct store_col store_command_cols[];
extern const struct store_col store_rocket_cols[];
extern const struct store_col store_room_cols[];
extern const struct store_col store_audit_cols[];
/* The columns of a gift_item (app_code, gift_id, unit_price,
 * energy_per_unit, enabled, version, updated_at_ms). */
extern const struct store_col store_gift_cols[];

/* Column k of a backend's current row: its text (NULL for SQL NULL) into
 * *text when text is not NULL, else its integer into *num. */
typedef void store_col_fn(const void *row, unsigned int k, const char **text, int64_t *num);

/* Zeroes dst (size bytes), then reads the columns of row through col into
 * its fields by cols. Allocates what 's'/'e' columns hold (the struct's
 * free function releases them). Thread: any; does not block. */
void store_read_cols(const struct store_col *cols, store_col_fn *col, const void *row, void *dst,
                     size_t size);
/* Frees what store_read_cols allocated in each of the n rows (size bytes
 * each) of the array rows, then rows itself (NULL: nothing to do). Thread:
 * any. */
void store_free_cols(const struct store_col *cols, void *rows, size_t n, size_t size);

struct store;

/* The operations every backend provides, one function type each
 * (store_<op>_fn, the contract is the store_<op> function's below). */
typedef int store_find_command_fn(struct store *s, const char *app, const char *command_id,
                                  struct command_record *out);
typedef int store_load_room_fn(struct store *s, const char *app, const char *room_id,
                               struct room_load *out);
typedef int store_save_fn(struct store *s, struct mutation *const *muts, size_t n);
typedef int store_outbox_claim_fn(struct store *s, int64_t now_ms, int64_t lock_until_ms,
                                  const char *locked_by, int limit, bool per_room,
                                  struct outbox_row **rows, size_t *n);
typedef int store_outbox_complete_fn(struct store *s, struct outbox_result *res, size_t n);
typedef int store_outbox_complete_claim_fn(struct store *s, struct outbox_result *res, size_t nres,
                                           int64_t now_ms, int64_t lock_until_ms,
                                           const char *locked_by, int limit, bool per_room,
                                           struct outbox_row **rows, size_t *n, bool *completed);
typedef int store_outbox_list_fn(struct store *s, int status, int64_t after_id, int limit,
                                 struct outbox_row **rows, size_t *n);
typedef int store_outbox_get_fn(struct store *s, const char *event_id, struct outbox_row *out);
typedef int store_outbox_replay_fn(struct store *s, const char *event_id, int64_t now_ms);
typedef int store_outbox_counts_fn(struct store *s, struct outbox_counts *out);
typedef int store_write_probe_fn(struct store *s, int64_t now_ms);
typedef int store_outbox_purge_fn(struct store *s, int64_t delivered_before_ms, int limit,
                                  size_t *purged);
typedef int store_command_log_purge_fn(struct store *s, int64_t before_ms, int limit,
                                       size_t *purged);
typedef int store_wallet_topup_fn(struct store *s, const char *app, int64_t uid, int64_t amount,
                                  const char *ref_id, int64_t initial_balance,
                                  int64_t *balance_after);
typedef int store_wallet_balance_fn(struct store *s, const char *app, int64_t uid,
                                    int64_t initial_balance, int64_t *balance);
typedef int store_wallet_audit_rows_fn(struct store *s, const char *app, struct audit_row **rows,
                                       size_t *n);
typedef int store_rockets_pending_fn(struct store *s, struct rocket_pending **out, size_t *n);
typedef int store_rooms_list_fn(struct store *s, const char *after_app, const char *after_room,
                                bool open_only, int limit, struct room_row **rows, size_t *n);
typedef int store_fence_room_fn(struct store *s, const char *app, const char *room_id,
                                int64_t token);
typedef int store_gift_get_fn(struct store *s, const char *app, const char *gift_id,
                              struct gift_item *out);
typedef int store_gift_put_fn(struct store *s, struct gift_item *g, int64_t expect_version);
typedef int store_room_events_fn(struct store *s, const char *app, const char *room_id,
                                 int64_t after_seq, int limit, struct outbox_row **rows, size_t *n,
                                 int64_t *oldest_seq, int64_t *latest_seq);
typedef int store_gift_list_fn(struct store *s, const char *app, struct gift_item **rows,
                               size_t *n);

/* The list of those operations, written once: X(op) for each. struct
 * store_ops has a member op of type store_<op>_fn *; a backend defines
 * <prefix>_<op> for each, declares them all from this list in its
 * internal.h and fills its ops table from it (mysql/conn.c, sqlite/conn.c). */
#define STORE_OPS(X)                                                                               \
    X(find_command)                                                                                \
    X(load_room)                                                                                   \
    X(save)                                                                                        \
    X(outbox_claim)                                                                                \
    X(outbox_complete)                                                                             \
    X(outbox_complete_claim)                                                                       \
    X(outbox_list)                                                                                 \
    X(outbox_get)                                                                                  \
    X(outbox_replay)                                                                               \
    X(outbox_counts)                                                                               \
    X(write_probe)                                                                                 \
    X(outbox_purge)                                                                                \
    X(command_log_purge)                                                                           \
    X(wallet_topup)                                                                                \
    X(wallet_balance)                                                                              \
    X(wallet_audit_rows)                                                                           \
    X(rockets_pending)                                                                             \
    X(rooms_list)                                                                                  \
    X(fence_room)                                                                                  \
    X(gift_get)                                                                                    \
    X(gift_put)                                                                                    \
    X(gift_list)                                                                                   \
    X(room_events)

#define STORE_OP_MEMBER(op) store_##op##_fn *op;
struct store_ops {
    const char *name;
    int (*open)(struct store **out, const struct conf_store *cs, char *err, size_t errlen);
    void (*close)(struct store *s);
    /* optional (NULL: one embedded database): the server in use, failovers */
    int (*server_info)(struct store *s, char *host, size_t len, uint64_t *failovers);
    STORE_OPS(STORE_OP_MEMBER)
};
#undef STORE_OP_MEMBER

/* Common head of every backend's handle ("super" first member, as h2o). */
struct store {
    const struct store_ops *ops;
    _Atomic int64_t write_failed_ms; /* store_save: the last failed batch (wall ms) */
    _Atomic int64_t write_ok_ms;     /* store_save: the last one that committed */
    int save_writers;                /* store_save calls worth running at once (group_commit's
                                      * leaders; 0 = 1): set by the backend's open */
    _Atomic uint32_t outbox_park;    /* store_outbox_park's mask */
};

extern const struct store_ops store_sqlite_ops;
extern const struct store_ops store_mysql_ops;

/* Opens the backend named by cs->driver and applies pending migrations.
 * Returns 0 and *out, or ROOMD_EINVAL/EUNAVAIL/EIO with err filled; *out NULL.
 * Thread: main, before serving. */
int store_open(struct store **out, const struct conf_store *cs, char *err, size_t errlen);
/* Closes s; store_close(NULL) is a no-op. No call may be in flight. */
void store_close(struct store *s);

/* The database server s uses now ("host:port") into host (len bytes) and how
 * often it moved to another since open (store.mysql.hosts, docs/ha.md).
 * Returns 0, or ROOMD_ENOTFOUND for a backend without servers (SQLite). Any
 * thread; does not block on the database. */
int store_server_info(struct store *s, char *host, size_t len, uint64_t *failovers);

/* Detail text of the calling thread's last failed store call (thread-local). */
const char *store_errmsg(void);

/* ---- For the backends: the rules both apply the same way (store.c). ---- */

/* Sets the calling thread's detail text. */
void store_set_errmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Checks mutation m against the room's row as it is now (exists, its version
 * and fence token). Returns 0, ROOMD_EEXIST (create of an existing room),
 * ROOMD_ENOTFOUND (no room to change) or ROOMD_EFENCED (not the next version
 * or an older lease token), with the detail text set. */
int store_check_mutation(const struct mutation *m, bool exists, int64_t cur_version,
                         int64_t cur_token);
/* Checks a create m against its owner's open rooms of the app counted after
 * its rooms row was written (open_rooms includes it). Returns 0, or
 * ROOMD_ELIMIT with the detail text set when they pass m->max_owner_rooms
 * (> 0). */
int store_check_owner_rooms(const struct mutation *m, int64_t open_rooms);
/* The status a room_outbox.status text reads as: unknown text reads as failed. */
enum outbox_status outbox_status_read(const char *name);
/* Adds n rows of status name (a GROUP BY status row) to c. */
void outbox_counts_add(struct outbox_counts *c, const char *name, int64_t n);
/* Folds one group of undelivered rows (a row of STORE_OUTBOX_OLDEST_SQL:
 * sinks_done, event_type, min created_at_ms) into c's oldest_undelivered_ms
 * and oldest_missing_ms: a sink's only when the rows carry it
 * (sink_bit_carries: the rocket sink's are RoomRocketIgnited rows). */
void outbox_counts_oldest(struct outbox_counts *c, uint32_t sinks_done, const char *event_type,
                          int64_t oldest_ms);
/* The undelivered rows' groups for outbox_counts_oldest, the same query in
 * both backends (store_outbox_counts, the admin summary); by the seed's
 * statuses, so rows another writer left count before their due_at_ms is
 * derived (docs/migrate.md). */
#define STORE_OUTBOX_OLDEST_SQL                                                                    \
    "SELECT sinks_done, event_type, MIN(created_at_ms) FROM room_outbox"                           \
    " WHERE status IN ('pending', 'retryable', 'delivering') GROUP BY sinks_done, event_type"
/* The length last_error is stored with: at most 1000 bytes, cut at a UTF-8
 * character boundary. */
size_t outbox_last_error_len(const char *last_error);
/* Sorts rows by id (a claim returns its rows in id order). */
void outbox_rows_sort(struct outbox_row *rows, size_t n);
/*
 * The rooms of an ordered claim (outbox_worker.ordering per_room), once for
 * both backends. An ordered claim reads its candidates (due rows of rooms
 * none of whose undelivered rows is waiting: locked, or retryable not yet
 * due) only for their rooms, in (due_at_ms, id) order; then, room by
 * room, the room's undelivered rows in id order from its head, taking them
 * while they are due. Appends (app, room) to (*rooms)[0..*n) (grown with
 * *cap, owned by the caller, free()) unless it is there; returns true when
 * appended. Thread: any; does not block.
 */
struct outbox_room {
    char app_code[STORE_ID_MAX];
    char room_id[STORE_ID_MAX];
};
bool outbox_rooms_add(struct outbox_room **rooms, size_t *n, size_t *cap, const char *app,
                      const char *room);

/* The state a new room_outbox row of m starts in: claimed (m->locked_by
 * set: delivering, locked_by, lock_until_ms, due_at_ms = lock_until_ms) or
 * pending (locked_by NULL, lock_until_ms 0, due_at_ms = created_at_ms). */
struct outbox_initial {
    const char *status;    /* static */
    const char *locked_by; /* borrowed from m; NULL when pending */
    int64_t lock_until_ms; /* 0 when pending */
    int64_t due_at_ms;
};
void outbox_initial_of(const struct mutation *m, struct outbox_initial *out);

/* The columns a delivery outcome r writes: retryable keeps a claim key
 * (due_at_ms = next_retry_at_ms), delivered gets delivered_at_ms = now_ms,
 * delivered and failed leave the claim index (due_at_ms NULL). */
struct outbox_outcome {
    const char *status; /* static */
    bool retryable;     /* next_retry_at_ms and due_at_ms are retry_at_ms, else NULL/0 */
    int64_t retry_at_ms;
    bool delivered;         /* delivered_at_ms is now_ms, else NULL */
    const char *last_error; /* borrowed from r; NULL when none */
    size_t last_error_len;  /* outbox_last_error_len */
};
void outbox_outcome_of(const struct outbox_result *r, struct outbox_outcome *out);

/* What a debit does, by the rule of wallet_debit_rule. */
enum wallet_debit_step {
    WALLET_DEBIT_REFUSED, /* d->rc set (EINVAL, EFUNDS, EREUSED, EEXPIRED): write nothing */
    WALLET_DEBIT_CHARGE,  /* drop the refund row if any, write (or rewrite) the debit row,
                           * balance -= amount; d->balance_after set */
};
/* The wallet debit rule, once for both backends, inside the gift's
 * transaction (its command log row already claimed ref_id): d against what
 * the ledger holds for d->ref_id (have_debit with its uid, amount and digest
 * ldigest, "" when written before digests were kept; have_refund) and the
 * balance of d->uid. A negative amount is ROOMD_EINVAL. An unrefunded debit
 * row means a gift under this command_id committed and was paid before and
 * its log row was purged (store.retention.command_log_max_age): never a
 * second gift on that debit. The same request (its digest; for a row without
 * one, the same uid and amount) is ROOMD_EEXPIRED (410 command_id_expired),
 * another is ROOMD_EREUSED. A refunded one is charged again; a short
 * balance is ROOMD_EFUNDS. Sets the detail text when refused. */
enum wallet_debit_step wallet_debit_rule(struct wallet_debit *d, bool have_debit, int64_t luid,
                                         int64_t lamount, const char *ldigest, bool have_refund,
                                         int64_t balance);

/* Looks up a command by its idempotency key. 0 and *out filled (clear with
 * command_record_clear), ROOMD_ENOTFOUND, or EUNAVAIL. */
int store_find_command(struct store *s, const char *app, const char *command_id,
                       struct command_record *out);

/* Loads a room: latest snapshot + log tail. 0, ROOMD_ENOTFOUND, or EUNAVAIL.
 * Clear *out with room_load_clear. */
int store_load_room(struct store *s, const char *app, const char *room_id, struct room_load *out);

/*
 * Commits n mutations (n >= 1, different rooms, or the same room in version
 * order) in ONE transaction: per mutation a command log row, its outbox rows
 * (status pending, due_at_ms = created_at_ms; or already claimed when the
 * mutation's locked_by is set, their ids then in events[i].id), the rooms
 * row, and the snapshot when given. A mutation that violates a uniqueness or fence rule is
 * rolled back alone (savepoint) with its muts[i]->rc set; the others commit.
 * Returns 0 when the transaction committed (check each rc), or a negative
 * code when nothing committed (EUNAVAIL, EIO): then every rc equals it.
 */
int store_save(struct store *s, struct mutation *const *muts, size_t n);

/*
 * Claims up to limit claimable rows: pending, retryable with
 * next_retry_at_ms <= now, delivering with lock_until_ms <= now (expired
 * lock). Sets status=delivering, locked_by, lock_until_ms in a short
 * transaction (MySQL: SELECT ... FOR UPDATE SKIP LOCKED). *rows is an array
 * of *n rows, free with outbox_rows_free. 0 (possibly *n == 0) or EUNAVAIL.
 */
int store_outbox_claim(struct store *s, int64_t now_ms, int64_t lock_until_ms,
                       const char *locked_by, int limit, struct outbox_row **rows, size_t *n);
/*
 * store_outbox_claim with outbox_worker.ordering: per_room true claims rooms
 * per sink (docs/outbox.md, per-room order): a room's due rows in id order
 * that lack a sink (sinks_done bit) no waiting row of the room (locked, or
 * retryable not yet due) lacks; each comes with held_sinks, the sinks those
 * waiting rows lack, which the worker holds it for (and delivers the others
 * now). A row lacking only sinks a waiting row lacks is not claimed: it is
 * taken once that row is done. So each sink gets a room's events in commit
 * order across workers and nodes, and a sink that is down or retrying holds
 * no other sink. Without a waiting row: the room's head (its undelivered
 * row of lowest id) with the due rows after it in id order. A failed row
 * is no longer undelivered and holds nothing (poison policy). The rooms come
 * from the due rows in (due_at_ms, id) order (outbox_rooms_add); an expired
 * lock makes its room claimable again. false: as store_outbox_claim. Rows
 * come back in id order, *rows owned by the caller (outbox_rows_free).
 * Returns 0 or a store error. Blocks; thread: any.
 */
int store_outbox_claim_ordered(struct store *s, int64_t now_ms, int64_t lock_until_ms,
                               const char *locked_by, int limit, bool per_room,
                               struct outbox_row **rows, size_t *n);

/*
 * The ordered claims' parked sinks (docs/outbox.md, per-room order): need
 * 0, none (the default); else the sinks_done bits of the enabled sinks
 * whose circuit is closed. Then a due row that lacks none of need (it
 * waits only for sinks whose circuit is open) is not claimed, and holds
 * its room for the sinks it lacks as a waiting row does, until the mask
 * changes. The worker sets it before each claim. Thread: any; atomic.
 */
void store_outbox_park(struct store *s, uint32_t need);

/*
 * Writes n delivery outcomes, each only if the row is still delivering and
 * locked_by the given claimer (fence); a refused one gets res[i].rc =
 * ROOMD_ESTALE. Returns 0 when written (check rc), or EUNAVAIL.
 */
int store_outbox_complete(struct store *s, struct outbox_result *res, size_t n);

/*
 * A worker's completion of one batch and claim of its next, as
 * store_outbox_complete(res, nres) then store_outbox_claim_ordered(...,
 * per_room, ...) in ONE transaction (MySQL: one commit, one fsync per batch
 * instead of two; SQLite: one IMMEDIATE transaction, neither fsyncs). The
 * outcomes are written first, so the claim sees the completed rows' rooms
 * free (per_room: their next rows come in the same claim, and no other
 * claimer sees a room between the two). *completed says whether the
 * outcomes are written (then check each res[i].rc); on an error with
 * *completed false nothing is written and the caller completes again. 0 and
 * *rows and *n as store_outbox_claim, or EUNAVAIL. Thread: any; blocks on the store.
 */
int store_outbox_complete_claim(struct store *s, struct outbox_result *res, size_t nres,
                                int64_t now_ms, int64_t lock_until_ms, const char *locked_by,
                                int limit, bool per_room, struct outbox_row **rows, size_t *n,
                                bool *completed);

/* Lists rows with status (or all when status < 0) and id > after_id, by id. */
int store_outbox_list(struct store *s, int status, int64_t after_id, int limit,
                      struct outbox_row **rows, size_t *n);
/* Reads one row by event_id: 0, ROOMD_ENOTFOUND. Free with outbox_rows_free(out, 1)
 * semantics on a single row (its payload and last_error). */
int store_outbox_get(struct store *s, const char *event_id, struct outbox_row *out);
/* Operator replay of a failed row: back to pending, retry_count 0, same
 * event_id. ROOMD_ENOTFOUND, or ROOMD_ECONFLICT when the row is not failed. */
int store_outbox_replay(struct store *s, const char *event_id, int64_t now_ms);
/* Rows by status and the oldest undelivered row's created_at_ms, read in
 * one snapshot. 0 or EUNAVAIL/EIO. */
int store_outbox_counts(struct store *s, struct outbox_counts *out);
/* The readiness write probe: one small write transaction (the store_probe
 * row; a full disk, a read-only file system or database, a Galera node not
 * Primary refuse it). 0, or the failure (detail in store_errmsg). */
int store_write_probe(struct store *s);
/* True when the last store_save batch failed as a whole (a mutation's own
 * refusal is no failure), less than within_ms ago, and none committed
 * since. Never blocks. */
bool store_writes_failing(struct store *s, int64_t within_ms);
/* Deletes up to limit delivered rows with delivered_at_ms < before. */
int store_outbox_purge(struct store *s, int64_t delivered_before_ms, int limit, size_t *purged);
/* Deletes up to limit room_command_log rows created before before_ms that no
 * replay needs: only rows whose version is at or below the room's oldest kept
 * snapshot (a room without a snapshot keeps its whole log). A purged
 * command_id is no longer known: sent again, it counts as a new command
 * (docs/store.md, the idempotency window). Returns 0 and *purged, or an
 * error. Thread: any (the retention thread); blocks. */
int store_command_log_purge(struct store *s, int64_t before_ms, int limit, size_t *purged);

/* Embedded wallet ledger (see wallet/wallet.h): a gift's debit is written
 * by store_save (mutation.debit); these are the development top-up and the
 * balance. */
/* Credits amount (>= 0, else ROOMD_EINVAL) once per ref_id; *balance_after
 * is the balance after it (also on a repeated ref_id). A balance that would
 * pass INT64_MAX is refused with ROOMD_ERANGE (nothing written). */
int store_wallet_topup(struct store *s, const char *app, int64_t uid, int64_t amount,
                       const char *ref_id, int64_t initial_balance, int64_t *balance_after);
/* The balance of (app, uid): initial_balance for an account never written. */
int store_wallet_balance(struct store *s, const char *app, int64_t uid, int64_t initial_balance,
                         int64_t *balance);

/* Reads what `roomctl wallet audit` checks, for app ("" = every app), in one
 * read snapshot: every committed SendGift (G), every wallet_ledger row (L),
 * every wallet_accounts row (A). *rows is malloc'd (audit_rows_free). 0 or
 * EUNAVAIL/EIO. Reads whole tables: an operator's tool, not the command path. */
int store_wallet_audit_rows(struct store *s, const char *app, struct audit_row **rows, size_t *n);

/* Lists rooms whose rocket is ignited, for the launch timer rebuild. */
int store_rockets_pending(struct store *s, struct rocket_pending **out, size_t *n);

/*
 * Lists up to limit rooms ordered by (app_code, room_id) whose key is greater
 * than (after_app, after_room) (byte order; "", "" starts at the beginning,
 * (app, "") at app's first room); only status 'open' when open_only. Keyset
 * paging: pass the last row's key for the next page. *rows is an array of *n
 * rows, free with room_rows_free. 0 (possibly *n == 0) or EUNAVAIL/EIO.
 * Reads a primary key range, takes no lock.
 */
int store_rooms_list(struct store *s, const char *after_app, const char *after_room, bool open_only,
                     int limit, struct room_row **rows, size_t *n);

/*
 * A new lease owner claims the room before loading it: raises
 * rooms.fence_token to token, so from now on no commit with an older token
 * passes (store_save fences it), even before the new owner commits anything.
 * Returns 0 (also when the room does not exist yet, or already carries
 * token), ROOMD_EFENCED when the room carries a newer token (another owner
 * claimed it since), or EUNAVAIL/EIO.
 */
int store_fence_room(struct store *s, const char *app, const char *room_id, int64_t token);

/*
 * Exact catch-up (GET /v1/rooms/{id}/events): up to limit room_outbox rows
 * of (app, room_id) with room_seq > after_seq in (room_seq, id) order (a
 * repair's copy repeats its original's room_seq: the caller keeps the
 * first), *rows an array of *n (outbox_rows_free). *oldest_seq: the room's
 * lowest room_seq still stored (0: none; retention purges delivered rows);
 * *latest_seq: rooms.event_seq, the room_seq of its last event (-1: no
 * such room). Reads a range of the (app_code, room_id, room_seq) index.
 * 0 or EUNAVAIL/EIO. Thread: any; blocks.
 */
int store_room_events(struct store *s, const char *app, const char *room_id, int64_t after_seq,
                      int limit, struct outbox_row **rows, size_t *n, int64_t *oldest_seq,
                      int64_t *latest_seq);

/* The gift catalog (docs/room.md, Gift catalog). store_gift_get: 0 and
 * *out, ROOMD_ENOTFOUND, or EUNAVAIL/EIO; one primary key read (SendGift's
 * price, in the room's turn). */
int store_gift_get(struct store *s, const char *app, const char *gift_id, struct gift_item *out);
/* Creates or changes the gift g names (app_code, gift_id) with g's price,
 * energy and enabled, in one transaction: its version becomes the stored
 * one + 1 (1 when new), written back to g with updated_at_ms. expect_version
 * >= 0 makes it conditional: the stored version (0 when absent) must equal
 * it, else ROOMD_ECONFLICT with g->version set to the stored one and nothing
 * written; -1 writes unconditionally. Values out of range: ROOMD_EINVAL. */
int store_gift_put(struct store *s, struct gift_item *g, int64_t expect_version);
/* The catalog of app ("" = every app) ordered by (app_code, gift_id):
 * *rows malloc'd (free(), no pointers inside), *n rows. 0 or EUNAVAIL/EIO. */
int store_gift_list(struct store *s, const char *app, struct gift_item **rows, size_t *n);

#ifdef ROOMD_TESTING
/* Fault injection: the next n store_save calls fail inside the transaction
 * after writing the command log row (then roll back) with ROOMD_EIO. */
void store_fail_next_saves(int n);
int store_should_fail_save(void);
#endif

#endif
