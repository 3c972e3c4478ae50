/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store/admin.h: the admin module's store role, over the same database as
 * the room store (store/store.h): what an operator reads and changes in
 * room_outbox, and the audit of every bulk replay. One interface, two
 * backends (sqlite/admin.c: a connection of its own on the store's file;
 * mysql/admin.c: on the store's one pool, mys_pool_share, docs/store.md).
 *
 * Opened read-only (roomctl's inspection) it never creates, migrates or
 * writes anything (a write answers ROOMD_EPERM on MySQL; the SQLite file is
 * opened read-only): a missing SQLite file or database is an error. Opened
 * read-write it creates its two tables when absent:
 *   admin_audit      (id, actor, action, filter, state, max_id, cursor_id,
 *                     count, created_at_ms, updated_at_ms, finished_at_ms)
 *   admin_audit_rows (audit_id, outbox_id, event_id, new_event_id)
 * A bulk replay is an audit row "running" with the filter and the highest id
 * it covers; each chunk replays the next failed rows after cursor_id, records
 * them and moves cursor_id in ONE transaction, so a replay cut by a crash
 * resumes (admin_store_replay_chunk on the same audit) and replays every
 * row once.
 *
 * Thread: any; one call at a time per handle (a mutex inside). Calls block
 * on the database. Errors: ROOMD_E* with admin_store_errmsg(s).
 */
#ifndef ROOMD_STORE_ADMIN_H
#define ROOMD_STORE_ADMIN_H

#include "store/filter.h"
#include "store/store.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct conf_store;
struct admin_store;

/* The outbox by status and by sink. */
struct admin_summary {
    int64_t by_status[5]; /* enum outbox_status */
    /* per sinks_done bit, among the rows that carry the sink
     * (sink_bit_carries): rows not delivered (any status but delivered) that
     * lack it, of those the failed ones, and the oldest failed one's
     * created_at_ms (0: none; failed rows are no part of the undelivered
     * age below) */
    int64_t lacking[OUTBOX_SINK_BITS];
    int64_t failed_lacking[OUTBOX_SINK_BITS];
    int64_t oldest_failed_ms[OUTBOX_SINK_BITS];
    /* oldest_undelivered_ms and oldest_missing_ms of the claimable rows
     * (outbox_counts_oldest; the status counts are in by_status) */
    struct outbox_counts oldest;
};

/* The summary's second query: STORE_OUTBOX_OLDEST_SQL (store.h). */

/* One audit entry (admin_store_audit_list). filter is malloc'd JSON. */
struct admin_audit {
    int64_t id;
    char actor[64];
    char action[16]; /* "replay" | "repair" | "dlq_replay" */
    char *filter;
    char state[16]; /* "running" | "done" */
    int64_t max_id, cursor_id, count;
    int64_t created_at_ms, updated_at_ms, finished_at_ms;
};
void admin_audits_free(struct admin_audit *a, size_t n);

/* One row a replay touched. */
struct admin_audit_row {
    int64_t outbox_id;
    char event_id[37];
    char new_event_id[37]; /* the repair event, "" for a replay */
};

/* Opens the store cs names. Returns 0 and *out, or ROOMD_EUNAVAIL /
 * ROOMD_EINVAL / ROOMD_ENOTFOUND (no such SQLite file) with err. */
int admin_store_open(struct admin_store **out, const struct conf_store *cs, bool readonly,
                     char *err, size_t errlen);
void admin_store_close(struct admin_store *s);
/* True when the audit tables exist (a read-only handle on a store never
 * audited has none: no audits, nothing repaired). */
bool admin_store_has_audit(const struct admin_store *s);
/* The last error's text (the handle's; valid until its next call). */
const char *admin_store_errmsg(struct admin_store *s);

int admin_store_summary(struct admin_store *s, struct admin_summary *out);
/* Rows matching f with id > after_id, by id, at most limit; *rows malloc'd
 * (outbox_rows_free). */
int admin_store_search(struct admin_store *s, const struct admin_filter *f, int64_t after_id,
                       int limit, struct outbox_row **rows, size_t *n);
/* How many rows match f, and the highest id among them (0 when none). */
int admin_store_count(struct admin_store *s, const struct admin_filter *f, int64_t *count,
                      int64_t *max_id);
/* The row of event_id (ROOMD_ENOTFOUND when none); out as store_outbox_get. */
int admin_store_get(struct admin_store *s, const char *event_id, struct outbox_row *out);

/* Starts a bulk replay (or repair) audit over the failed rows of f up to
 * max_id. Returns 0 and *id. */
int admin_store_audit_begin(struct admin_store *s, const char *actor, bool repair,
                            const char *filter_json, int64_t max_id, int64_t now_ms, int64_t *id);
/* Replays (repair: copies as new pending events with new event_ids and
 * command_id "repair:<original event_id>") the next at most limit failed
 * rows of audit id matching f, in one transaction with the audit's
 * progress. *done gets how many, *finished whether the audit is now done.
 * Rows already repaired are never replayed or repaired again. */
int admin_store_replay_chunk(struct admin_store *s, int64_t id, const struct admin_filter *f,
                             bool repair, int limit, int64_t now_ms, int64_t *done, bool *finished);
/* Records an operation done at once (a consumer dead letter replayed):
 * an audit "done" of action with rows[0..n), in one transaction. */
int admin_store_audit_record(struct admin_store *s, const char *actor, const char *action,
                             const char *filter_json, const struct admin_audit_row *rows, size_t n,
                             int64_t now_ms, int64_t *id);
/* Audits, newest first, with id < before_id (0: from the newest). */
int admin_store_audit_list(struct admin_store *s, int64_t before_id, int limit,
                           struct admin_audit **out, size_t *n);
/* The audit id (ROOMD_ENOTFOUND when none). */
int admin_store_audit_get(struct admin_store *s, int64_t id, struct admin_audit *out);
/* The rows audit id touched with outbox_id > after, at most limit; *out malloc'd. */
int admin_store_audit_rows(struct admin_store *s, int64_t id, int64_t after, int limit,
                           struct admin_audit_row **out, size_t *n);

/* A result row of a backend, read through three accessors, so that one
 * reader per record (admin_read_outbox_row, admin_read_audit, ..) serves both
 * backends. text returns NULL for SQL NULL; blob sets *len. */
struct admin_cols {
    void *src;
    int64_t (*i64)(void *src, int i);
    const char *(*text)(void *src, int i);
    const void *(*blob)(void *src, int i, size_t *len);
};
/* The row readers: each reads the row c into dst, a record of its kind.
 * Thread: the caller of the backend's op (under its mutex). */
typedef void (*admin_row_reader)(const struct admin_cols *c, void *dst);
/* STORE_OUTBOX_COLS (store.h) into a struct outbox_row (payload and last_error
 * malloc'd). */
void admin_read_outbox_row(const struct admin_cols *c, void *dst);
/* ADMIN_AUDIT_COLS into a struct admin_audit (filter malloc'd). */
void admin_read_audit(const struct admin_cols *c, void *dst);
/* outbox_id, event_id, new_event_id into a struct admin_audit_row. */
void admin_read_audit_row(const struct admin_cols *c, void *dst);
/* The two integers of a count query (count, max id) into an int64_t[2]. */
void admin_read_count(const struct admin_cols *c, void *dst);

/* The rows of one query in a growing array of elements of size bytes, each
 * read by read: rows is malloc'd and the caller's (also after a failure). */
struct admin_rows {
    admin_row_reader read;
    size_t size;
    void *rows;
    size_t n, cap;
};
/* Appends the row c to x through x->read. Never fails (OOM aborts). */
void admin_rows_add(struct admin_rows *x, const struct admin_cols *c);
/* Adds one row of ADMIN_SUMMARY_SQL (status, sinks_done, event_type, count,
 * oldest) to out: its count by status, and by each sink bit the rows carry
 * and lack. */
void admin_summary_add(const struct admin_cols *c, struct admin_summary *out);
#define ADMIN_SUMMARY_SQL                                                                          \
    "SELECT status, sinks_done, event_type, COUNT(*), MIN(created_at_ms) FROM room_outbox"         \
    " GROUP BY status, sinks_done, event_type"
#define ADMIN_AUDIT_COLS                                                                           \
    "id, actor, action, filter, state, max_id, cursor_id, count, created_at_ms,"                   \
    " updated_at_ms, finished_at_ms"

/* The operations of every admin store backend, written once: X(op) each;
 * a backend names its functions <prefix>_<op> and builds its table from
 * this list (mysql/admin.c, sqlite/admin.c). */
#define ADMIN_STORE_OPS(X)                                                                         \
    X(open)                                                                                        \
    X(close)                                                                                       \
    X(summary)                                                                                     \
    X(search)                                                                                      \
    X(count)                                                                                       \
    X(get)                                                                                         \
    X(audit_begin)                                                                                 \
    X(replay_chunk)                                                                                \
    X(audit_record)                                                                                \
    X(audit_list)                                                                                  \
    X(audit_get)                                                                                   \
    X(audit_rows)

/* The backends (one table of these per backend). */
struct admin_store_ops {
    int (*open)(struct admin_store **out, const struct conf_store *cs, bool readonly, char *err,
                size_t errlen);
    void (*close)(struct admin_store *s);
    int (*summary)(struct admin_store *s, struct admin_summary *out);
    int (*search)(struct admin_store *s, const struct admin_filter *f, int64_t after_id, int limit,
                  struct outbox_row **rows, size_t *n);
    int (*count)(struct admin_store *s, const struct admin_filter *f, int64_t *count,
                 int64_t *max_id);
    int (*get)(struct admin_store *s, const char *event_id, struct outbox_row *out);
    int (*audit_begin)(struct admin_store *s, const char *actor, bool repair,
                       const char *filter_json, int64_t max_id, int64_t now_ms, int64_t *id);
    int (*replay_chunk)(struct admin_store *s, int64_t id, const struct admin_filter *f,
                        bool repair, int limit, int64_t now_ms, int64_t *done, bool *finished);
    int (*audit_record)(struct admin_store *s, const char *actor, const char *action,
                        const char *filter_json, const struct admin_audit_row *rows, size_t n,
                        int64_t now_ms, int64_t *id);
    int (*audit_list)(struct admin_store *s, int64_t before_id, int limit, struct admin_audit **out,
                      size_t *n);
    int (*audit_get)(struct admin_store *s, int64_t id, struct admin_audit *out);
    int (*audit_rows)(struct admin_store *s, int64_t id, int64_t after, int limit,
                      struct admin_audit_row **out, size_t *n);
};

/* The handle's head (the backend's struct starts with it). */
struct admin_store {
    const struct admin_store_ops *ops;
    char errmsg[512];
    bool has_audit; /* the audit tables exist (always once opened read-write) */
};

extern const struct admin_store_ops admin_store_sqlite_ops;
extern const struct admin_store_ops admin_store_mysql_ops;

/* The DDL and statements both backends share (store/admin.c). */
extern const char *const admin_store_ddl[]; /* NULL-terminated, "%s" = the backend's id type */
/* The rows of a replay chunk: failed, after the cursor, up to max_id (the
 * filter, with not_repaired, adds the rest). */
#define ADMIN_REPLAYABLE " status = 'failed' AND id > ? AND id <= ?"
/* The audit's statements, one text for both backends ('?N' parameters):
 * a bulk replay's audit (?1 actor, ?2 action, ?3 filter, ?4 max_id, ?5 now);
 * an operation done at once (?4 count); one row it touched (?1 audit,
 * ?2 outbox_id, ?3 event_id, ?4 new_event_id); a chunk's progress (?1
 * audit, ?2 the last id, ?3 rows, ?4 now, ?5 1 when the audit is done). */
#define ADMIN_AUDIT_BEGIN_SQL                                                                      \
    "INSERT INTO admin_audit (actor, action, filter, state, max_id, cursor_id, count,"             \
    " created_at_ms, updated_at_ms) VALUES (?1, ?2, ?3, 'running', ?4, 0, 0, ?5, ?5)"
#define ADMIN_AUDIT_DONE_SQL                                                                       \
    "INSERT INTO admin_audit (actor, action, filter, state, max_id, cursor_id, count,"             \
    " created_at_ms, updated_at_ms, finished_at_ms) VALUES (?1, ?2, ?3, 'done', 0, 0, ?4, ?5,"     \
    " ?5, ?5)"
#define ADMIN_AUDIT_ROW_SQL                                                                        \
    "INSERT INTO admin_audit_rows (audit_id, outbox_id, event_id, new_event_id)"                   \
    " VALUES (?1, ?2, ?3, ?4)"
#define ADMIN_AUDIT_ADVANCE_SQL                                                                    \
    "UPDATE admin_audit SET cursor_id = CASE WHEN cursor_id > ?2 THEN cursor_id ELSE ?2 END,"      \
    " count = count + ?3, updated_at_ms = ?4, state = CASE WHEN ?5 THEN 'done' ELSE state END,"    \
    " finished_at_ms = CASE WHEN ?5 THEN ?4 ELSE finished_at_ms END WHERE id = ?1"

#endif
