/* SPDX-License-Identifier: Apache-2.0 */
/*
 * inbox.h: a consumer group's inbox, the kit's (group.h) record of which
 * keys (event_ids) the group has settled and of the handler's own effect
 * state. One interface, one file per backend:
 *   sqlite/inbox.c  "<rocketmq.consumer_store_dir>/<group>.db", one node
 *   mysql/inbox.c   the store's MySQL/MariaDB database, shared by every node
 * chosen by rocketmq.consumer_inbox (auto: mysql when store.driver is
 * mysql, else sqlite).
 *
 * A key goes received -> progress (claimed by one owner until an expiry)
 * -> done | dead. The claim is what makes a group on several nodes do an
 * effect once: two nodes claiming the same key at the same time get
 * INBOX_CLAIMED on one and INBOX_BUSY (or INBOX_SETTLED) on the other. A
 * claim whose owner died expires (claim_ms) and can then be taken over.
 * Effects kept in the inbox's database (inbox_tx_begin ... commit_done) are
 * exactly once: the transaction re-checks the claim (ROOMD_ESTALE when it
 * was taken over) and marks done with the effect. A remote effect between
 * claim and inbox_done is at least once (a node dying in between leaves it
 * to be redone after the expiry): the handler makes it idempotent remotely
 * (IM's Random / MsgRandom).
 *
 * Thread: a handle belongs to its group's thread (one call at a time).
 * Every call blocks on the database. Errors are ROOMD_E* with the text in
 * inbox_errmsg().
 */
#ifndef ROOMD_STORE_INBOX_H
#define ROOMD_STORE_INBOX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct conf_store;
struct consume_inbox;

/* rocketmq.consumer_inbox */
enum inbox_driver { INBOX_AUTO = 0, INBOX_SQLITE, INBOX_MYSQL };

/* One statement in each dialect: parameters ?1 .. ?9 in both (mysql NULL:
 * the sqlite text is valid MySQL too). */
struct consume_sql {
    const char *sqlite;
    const char *mysql;
};

/* One parameter: type 's' (s, NULL = SQL NULL) or 'i' (i). */
struct consume_arg {
    char type;
    const char *s;
    int64_t i;
};

/* What opening an inbox needs. Borrowed for the call. */
struct inbox_config {
    const char *group;
    enum inbox_driver driver;       /* INBOX_AUTO: by store->driver */
    const char *store_dir;          /* sqlite: the directory of <group>.db */
    const struct conf_store *store; /* mysql: its connection settings; NULL: sqlite */
    const char *owner;              /* this process' name in claims (app.node_id) */
    int64_t claim_ms;               /* a claim expires after this */
    /* The handler's tables, NULL-terminated (NULL: none), created when
     * absent. */
    const struct consume_sql *const *schema;
    /* Only an inbox that exists already, nothing created (the dead-letter
     * operations of another process: admin/dlq.c): sqlite answers
     * ROOMD_ENOTFOUND when <group>.db is not on this machine; mysql
     * connects without creating tables. */
    bool existing;
};

/* Opens (creating tables) the inbox cfg names. Returns 0 and *out, or
 * ROOMD_EIO / ROOMD_EUNAVAIL / ROOMD_EINVAL with err naming the key.
 * Thread: main. */
int inbox_open(struct consume_inbox **out, const struct inbox_config *cfg, char *err,
               size_t errlen);
/* Closes and frees ib. NULL is a no-op. */
void inbox_close(struct consume_inbox *ib);
/* "sqlite" or "mysql" (static), and where it lives (ib's, for logs). */
const char *inbox_name(const struct consume_inbox *ib);
const char *inbox_where(const struct consume_inbox *ib);
/* The last error's text (ib's; valid until its next call). */
const char *inbox_errmsg(const struct consume_inbox *ib);

enum inbox_claim {
    INBOX_CLAIMED, /* ours until now + claim_ms; *failures recorded so far
                    * (shared: an expired claim taken over counts one) */
    INBOX_SETTLED, /* done or dead already: acknowledge, no effect */
    INBOX_BUSY,    /* another owner's claim runs until *busy_until_ms */
};

/* Claims key (app: for operators, may be ""). Returns 0 with *res, or an
 * error (nothing claimed). */
int inbox_claim(struct consume_inbox *ib, const char *key, const char *app, enum inbox_claim *res,
                int *failures, int64_t *busy_until_ms);
/* A room's high-water mark (group.h, the room_seq rule): the highest
 * room_seq of (app, room) the group has done. Kept per group beside the
 * inbox rows (mysql: consumer_room_seq, shared by every node). Strings
 * borrowed for the call. */
struct inbox_mark {
    const char *app;
    const char *room;
    int64_t seq; /* <= 0: no mark to raise */
};

/* Reads the mark of (app, room) into *seq (0: none yet). Returns 0 or an
 * error (*seq untouched). */
int inbox_mark_get(struct consume_inbox *ib, const char *app, const char *room, int64_t *seq);
/* Marks our claimed key done (outside a transaction) and, when mark != NULL
 * and mark->seq > 0, raises the room's mark to mark->seq (never lowers it)
 * in the same transaction. 0, or ROOMD_ESTALE when the claim was taken over
 * meanwhile (nothing written), or an error. */
int inbox_done(struct consume_inbox *ib, const char *key, const struct inbox_mark *mark);
/* Gives our claim back, unchanged otherwise (a held message). */
int inbox_release(struct consume_inbox *ib, const char *key);
/* Counts a failure of our claim and gives it back; *failures the count. */
int inbox_fail(struct consume_inbox *ib, const char *key, const char *why, int *failures);
/* Marks key dead (claimed or not). */
int inbox_dead(struct consume_inbox *ib, const char *key, const char *why);
/* Retention: deletes the done and dead keys last touched before before_ms,
 * and the unsettled ones (received / progress: a consumer that crashed, or a
 * message that never came back) last touched before before_ms whose claim,
 * if any, has expired. The caller passes a cut past any redelivery (the
 * stream's MaxAge + a margin: group.c), so no message can come back for a
 * key deleted unsettled; if one did, it would be claimed afresh and handled
 * (at least once). *unsettled (NULL: not wanted) = the unsettled keys
 * deleted. Returns 0 or an error. */
int inbox_purge(struct consume_inbox *ib, int64_t before_ms, int64_t *unsettled);

/*
 * The dead-letter operations (admin/dlq.c), on any node and with either
 * backend, through a handle opened for them (consume_group_inbox_open,
 * roles.h), beside the group's own. Each call is one statement, outside a
 * transaction; a caller doing many keys (bulk) calls them once a key.
 */
enum inbox_state {
    INBOX_ABSENT,   /* no row: never seen, or purged by retention */
    INBOX_RECEIVED, /* seen, not settled (failed attempts wait for redelivery) */
    INBOX_PROGRESS, /* claimed by a node now (mysql only) */
    INBOX_DONE,
    INBOX_DEAD,
};
/* "absent" "received" "progress" "done" "dead" (static). */
const char *inbox_state_name(enum inbox_state st);
/* Reads key's state into *st. Returns 0 or an error (*st INBOX_ABSENT). */
int inbox_state(struct consume_inbox *ib, const char *key, enum inbox_state *st);
/* Replay: deletes key's row when it is dead, so the message sent back into
 * the group is claimed afresh and handled; a key in any other state is left
 * alone. *forgotten (NULL: not wanted) = a dead row was deleted. Returns 0
 * or an error. (Discard keeps the key dead: inbox_dead with the reason.) */
int inbox_forget_dead(struct consume_inbox *ib, const char *key, bool *forgotten);

/* The handler's transaction: begins and re-checks our claim on key
 * (ROOMD_ESTALE, rolled back, when it was taken over); commit_done marks
 * key done, raises mark as inbox_done does (NULL: none) and commits (rolled
 * back on failure). */
int inbox_tx_begin(struct consume_inbox *ib, const char *key);
int inbox_tx_commit_done(struct consume_inbox *ib, const char *key, const struct inbox_mark *mark);
void inbox_tx_rollback(struct consume_inbox *ib);
bool inbox_in_tx(const struct consume_inbox *ib);
/* True when failures are counted by the inbox for every node (see
 * struct consume_inbox). */
bool inbox_shared(const struct consume_inbox *ib);

/* Runs q with args[0..nargs) (?1..); with out != NULL copies the first
 * column of the first row into out ("" when no row). 0 or ROOMD_EIO /
 * ROOMD_EUNAVAIL. */
int inbox_exec(struct consume_inbox *ib, const struct consume_sql *q,
               const struct consume_arg *args, int nargs, char *out, size_t outlen);

/* The operations of struct inbox_ops, written once: X(op) each; a backend
 * names its functions <prefix>_<op> and builds its table from this list. */
#define INBOX_OPS(X)                                                                               \
    X(open)                                                                                        \
    X(close)                                                                                       \
    X(claim)                                                                                       \
    X(mark_get)                                                                                    \
    X(done)                                                                                        \
    X(release)                                                                                     \
    X(fail)                                                                                        \
    X(dead)                                                                                        \
    X(purge)                                                                                       \
    X(tx_begin)                                                                                    \
    X(tx_commit_done)                                                                              \
    X(tx_rollback)                                                                                 \
    X(exec)                                                                                        \
    X(state)                                                                                       \
    X(forget_dead)

/* The backends (sqlite/inbox.c, mysql/inbox.c) behind the functions above;
 * private to them and inbox.c. */
struct inbox_ops {
    const char *name;
    int (*open)(struct consume_inbox **out, const struct inbox_config *cfg, char *err,
                size_t errlen);
    void (*close)(struct consume_inbox *ib);
    int (*claim)(struct consume_inbox *ib, const char *key, const char *app, enum inbox_claim *res,
                 int *failures, int64_t *busy_until_ms);
    int (*mark_get)(struct consume_inbox *ib, const char *app, const char *room, int64_t *seq);
    int (*done)(struct consume_inbox *ib, const char *key, const struct inbox_mark *mark);
    int (*release)(struct consume_inbox *ib, const char *key);
    int (*fail)(struct consume_inbox *ib, const char *key, const char *why, int *failures);
    int (*dead)(struct consume_inbox *ib, const char *key, const char *why);
    int (*purge)(struct consume_inbox *ib, int64_t before_ms, int64_t *unsettled);
    int (*tx_begin)(struct consume_inbox *ib, const char *key);
    int (*tx_commit_done)(struct consume_inbox *ib, const char *key, const struct inbox_mark *mark);
    void (*tx_rollback)(struct consume_inbox *ib);
    int (*exec)(struct consume_inbox *ib, const struct consume_sql *q,
                const struct consume_arg *args, int nargs, char *out, size_t outlen);
    /* state: the row's state text ("" when absent) into buf */
    int (*state)(struct consume_inbox *ib, const char *key, char *buf, size_t len);
    int (*forget_dead)(struct consume_inbox *ib, const char *key, bool *forgotten);
};

/* The part of every handle the functions above read. */
struct consume_inbox {
    const struct inbox_ops *ops;
    /* Shared by nodes (mysql): failures are counted here for every node, a
     * claim that expired (its owner died in the effect) counting as one, so
     * the kit never estimates them from JetStream's delivery count. */
    bool shared;
    bool in_tx;
    char where[256];
    char errmsg[320];
};

extern const struct inbox_ops inbox_sqlite_ops;
extern const struct inbox_ops inbox_mysql_ops;

#endif
