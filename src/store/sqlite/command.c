/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sqlite/command.c: the command path: find_command (idempotency lookup),
 * load_room (snapshot + log tail in one read transaction), save (a group-commit
 * batch in one transaction, a savepoint per mutation) and fence_room (the
 * lease owner's fence claim).
 */
#include "store/sqlite/internal.h"

#include "core/clock.h"
#include "core/err.h"
#include "core/xmalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

SQ_SQL(ROOM_FENCE, "SELECT version, fence_token, owner_uid, status FROM rooms"
                   " WHERE app_code = ?1 AND room_id = ?2");
SQ_SQL(LOG_INSERT, "INSERT INTO room_command_log (app_code, room_id, version, command_id,"
                   " command_type, request, response, created_at_ms, request_id, traceparent)"
                   " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)");
SQ_SQL(LOG_EXISTS, "SELECT 1 FROM room_command_log WHERE app_code = ?1 AND command_id = ?2");
/* ?9 status, ?10 locked_by, ?11 lock_until_ms, ?12 due_at_ms: pending
 * (due at created_at_ms) or, for the outbox hand-off, already claimed */
SQ_SQL(OUTBOX_INSERT, "INSERT INTO room_outbox (event_id, app_code, room_id, room_version,"
                      " command_id, event_type, payload, status, locked_by, lock_until_ms,"
                      " due_at_ms, created_at_ms, updated_at_ms, room_seq, request_id, traceparent)"
                      " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?9, ?10, ?11, ?12, ?8, ?8, ?13, ?14,"
                      " ?15)");
/* The hand-off under ordering per_room: does the room have an undelivered
 * row (room_outbox_room), other than (?3, room affinity) rows delivering by
 * the hand-off claimer ?4 under a lock still running at the command's time
 * (due_at_ms > ?5)? */
SQ_SQL(ROOM_BUSY, "SELECT 1 FROM room_outbox WHERE app_code = ?1 AND room_id = ?2"
                  " AND due_at_ms IS NOT NULL AND NOT (?3 AND status = 'delivering'"
                  " AND locked_by = ?4 AND due_at_ms > ?5) LIMIT 1");
SQ_SQL(ROOM_INSERT, "INSERT INTO rooms (app_code, room_id, owner_uid, title, status, version,"
                    " fence_token, rocket_status, rocket_id, rocket_level,"
                    " rocket_launch_at_ms, created_at_ms, updated_at_ms, event_seq)"
                    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)");
SQ_SQL(ROOM_UPDATE, "UPDATE rooms SET owner_uid = ?3, title = ?4, status = ?5, version = ?6,"
                    " fence_token = ?7, rocket_status = ?8, rocket_id = ?9,"
                    " rocket_level = ?10, rocket_launch_at_ms = ?11, updated_at_ms = ?13,"
                    " event_seq = ?14 WHERE app_code = ?1 AND room_id = ?2");
/* The same when owner_uid (?3) and status (?5) stay as they are, as for every
 * command but CloseRoom: SQLite rewrites an index entry whenever the SET
 * names one of its columns, so naming them would dirty a page of rooms_owner
 * (one WAL frame of ~13 per commit) for nothing. */
SQ_SQL(ROOM_UPDATE_KEEP, "UPDATE rooms SET title = ?4, version = ?6, fence_token = ?7,"
                         " rocket_status = ?8, rocket_id = ?9, rocket_level = ?10,"
                         " rocket_launch_at_ms = ?11, updated_at_ms = ?13, event_seq = ?14"
                         " WHERE app_code = ?1 AND room_id = ?2");
SQ_SQL(SNAP_INSERT, "INSERT OR REPLACE INTO room_snapshots (app_code, room_id, version, state,"
                    " created_at_ms) VALUES (?1, ?2, ?3, ?4, ?5)");
SQ_SQL(SNAP_PRUNE, "DELETE FROM room_snapshots WHERE app_code = ?1 AND room_id = ?2"
                   " AND version < (SELECT version FROM room_snapshots"
                   " WHERE app_code = ?1 AND room_id = ?2 ORDER BY version DESC"
                   " LIMIT 1 OFFSET ?3)");
SQ_SQL(FIND_COMMAND, "SELECT room_id, command_id, command_type, request, response, version,"
                     " created_at_ms FROM room_command_log"
                     " WHERE app_code = ?1 AND command_id = ?2");
SQ_SQL(LOAD_ROOM, "SELECT version, fence_token, event_seq FROM rooms"
                  " WHERE app_code = ?1 AND room_id = ?2");
SQ_SQL(LOAD_SNAP, "SELECT version, state FROM room_snapshots WHERE app_code = ?1"
                  " AND room_id = ?2 ORDER BY version DESC LIMIT 1");
SQ_SQL(LOAD_TAIL, "SELECT room_id, command_id, command_type, request, response, version,"
                  " created_at_ms FROM room_command_log"
                  " WHERE app_code = ?1 AND room_id = ?2 AND version > ?3 ORDER BY version");
/* the open rooms of an owner (index rooms_owner); the writer's
 * transaction makes the count and the insert one step */
SQ_SQL(OWNER_ROOMS, "SELECT count(*) FROM rooms WHERE app_code = ?1 AND owner_uid = ?2"
                    " AND status = 'open'");
SQ_SQL(FENCE_ROOM, "UPDATE rooms SET fence_token = ?3 WHERE app_code = ?1 AND room_id = ?2"
                   " AND fence_token <= ?3");

/* Reads the row of q into dst (struct command_record). */
static void
read_record(sqlite3_stmt *q, void *dst)
{
    sq_read_cols(q, store_command_cols, dst, sizeof(struct command_record));
}

/* A room's head: its version and lease token (SQL_ROOM_FENCE, SQL_LOAD_ROOM),
 * and its last room_seq (SQL_LOAD_ROOM only). */
struct room_head {
    int64_t version, fence_token, event_seq;
};

/* Reads the row of q (version, fence_token) into dst (struct room_head). */
static void
read_head(sqlite3_stmt *q, void *dst)
{
    struct room_head *h = dst;

    h->version = sqlite3_column_int64(q, 0);
    h->fence_token = sqlite3_column_int64(q, 1);
}

/* The rooms row as a save finds it (SQL_ROOM_FENCE): its head and the
 * columns of rooms_owner, which the update leaves alone when they stay. */
struct room_fence {
    struct room_head head;
    int64_t owner_uid;
    char status[16];
};

/* Reads the row of SQL_ROOM_FENCE into dst (struct room_fence). */
static void
read_fence(sqlite3_stmt *q, void *dst)
{
    struct room_fence *f = dst;
    const unsigned char *status = sqlite3_column_text(q, 3);

    read_head(q, &f->head);
    f->owner_uid = sqlite3_column_int64(q, 2);
    strlcpy_(f->status, status != NULL ? (const char *)status : "", sizeof(f->status));
}

/* Reads the row of SQL_LOAD_ROOM (version, fence_token, event_seq) into dst
 * (struct room_head). */
static void
read_load_head(sqlite3_stmt *q, void *dst)
{
    read_head(q, dst);
    ((struct room_head *)dst)->event_seq = sqlite3_column_int64(q, 2);
}

/* Reads the row of q (version, state) into dst (struct room_load). */
static void
read_snapshot(sqlite3_stmt *q, void *dst)
{
    struct room_load *l = dst;

    l->snapshot_version = sqlite3_column_int64(q, 0);
    l->snapshot = col_strdup(q, 1);
}

int
sq_find_command(struct store *st, const char *app, const char *command_id,
                struct command_record *out)
{
    int rc;

    memset(out, 0, sizeof(*out));
    rc = sq_read_one((struct sq_store *)st, &SQL_FIND_COMMAND, app, command_id, read_record, out,
                     "find_command");
    if (rc == ROOMD_ENOTFOUND)
        store_set_errmsg("command %s not found", command_id);
    return rc;
}

int
sq_load_room(struct store *st, const char *app, const char *room_id, struct room_load *out)
{
    struct sq_store *s = (struct sq_store *)st;
    struct conn *c = sq_reader_get(s);
    struct room_head head = {0};
    struct sq_all tail = {sizeof(*out->tail), store_command_cols, "load_room tail", NULL, 0};
    int rc;

    memset(out, 0, sizeof(*out));
    /* One read transaction: the room row, snapshot and tail are one WAL snapshot. */
    if ((rc = sq_run(c, &SQL_BEGIN)) != 0)
        goto out;
    if ((rc = sq_row_one(c, &SQL_LOAD_ROOM, app, room_id, read_load_head, &head, "load_room")) ==
        0) {
        store_set_errmsg("room %s/%s not found", app, room_id);
        rc = ROOMD_ENOTFOUND;
    }
    if (rc < 0 || (rc = sq_row_one(c, &SQL_LOAD_SNAP, app, room_id, read_snapshot, out,
                                   "load_room snapshot")) < 0)
        goto out;
    out->version = head.version;
    out->fence_token = head.fence_token;
    out->event_seq = head.event_seq;
    rc = sq_read_all(c, sq_bound(c, &SQL_LOAD_TAIL, "ssi", app, room_id, out->snapshot_version),
                     &tail);
    if (rc != 0)
        goto out;
    out->tail = tail.rows;
    out->ntail = tail.n;
    rc = sq_run(c, &SQL_COMMIT);
out:
    sq_reader_put(s, c);
    if (rc != 0)
        room_load_clear(out);
    return rc;
}

/* Binds m's rooms row to q (SQL_ROOM_INSERT, SQL_ROOM_UPDATE or
 * SQL_ROOM_UPDATE_KEEP: ?1 .. ?14). */
static sqlite3_stmt *
bound_room(struct conn *c, const struct sq_sql *id, const struct mutation *m)
{
    const struct room_meta *r = &m->meta;

    return sq_bound(c, id, "ssissiissdiiii", m->app_code, m->room_id, r->owner_uid, r->title,
                    r->status ? r->status : "open", m->version, m->fence_token,
                    r->rocket_status ? r->rocket_status : "idle", r->rocket_id, r->rocket_level,
                    r->rocket_launch_at_ms, r->created_at_ms, r->updated_at_ms, r->event_seq);
}

/* After a create's rooms row: ROOMD_ELIMIT when its owner now holds more
 * than m->max_owner_rooms open rooms of the app (this one included), else
 * 0; *fatal set when the count failed. */
static int
owner_limit(struct conn *c, const struct mutation *m, int *fatal)
{
    sqlite3_stmt *q = sq_bound(c, &SQL_OWNER_ROOMS, "si", m->app_code, m->meta.owner_uid);
    int64_t open_rooms = 0;
    int rc = sq_step_i64(c, q, &open_rooms, "save owner rooms");

    if (rc < 0)
        return *fatal = rc;
    return store_check_owner_rooms(m, open_rooms);
}

/* Writes one mutation inside the open transaction and savepoint. Returns 0,
 * a per-mutation code (EREUSED, EEXIST, EFENCED, ECONFLICT, ENOTFOUND,
 * ELIMIT), or
 * *fatal set with the code that ends the whole transaction. */
static int
save_one(struct conn *c, struct mutation *m, int *fatal)
{
    struct room_fence cur = {0};
    const struct sq_sql *update;
    sqlite3_stmt *q;
    int rc;

    *fatal = 0;
    /* Fence: the room's version and lease token. */
    rc = sq_row_one(c, &SQL_ROOM_FENCE, m->app_code, m->room_id, read_fence, &cur, "save fence");
    if (rc < 0)
        return *fatal = rc;
    if ((rc = store_check_mutation(m, rc == 1, cur.head.version, cur.head.fence_token)) != 0)
        return rc;

    /* Command log: the idempotency key and the version fence. */
    int64_t t_log = clock_mono_us();
    q = sq_bound(c, &SQL_LOG_INSERT, "ssissssiss", m->app_code, m->room_id, m->version,
                 m->command_id, m->command_type, m->request, m->response, m->created_at_ms,
                 m->request_id, m->traceparent);
    rc = sq_step_write(c, q, "save command log");
    m->log_us = clock_mono_us() - t_log;
    if (rc == ROOMD_ECONFLICT) {
        /* Which unique key? The command_id one means EREUSED. */
        q = sq_bound(c, &SQL_LOG_EXISTS, "ss", m->app_code, m->command_id);
        rc = sq_step_i64(c, q, NULL, "save command log lookup");
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

    /* The gift's debit: this command_id is ours now (the row above), so the
     * ledger gets exactly the debit of the gift that commits. */
    if (m->debit != NULL) {
        int64_t t0 = clock_mono_us();

        rc = sq_gift_debit(c, m->debit, m->created_at_ms, fatal);
        m->debit_us = clock_mono_us() - t0;
        if (rc != 0)
            return rc;
    }

    /* One outbox row per event: handed off (inserted claimed) or pending. */
    struct outbox_initial init;

    m->room_busy = false;
    if (m->locked_by != NULL && *m->locked_by && m->handoff_if_room_idle) {
        q = sq_bound(c, &SQL_ROOM_BUSY, "ssdsi", m->app_code, m->room_id, (int)m->handoff_own_rows,
                     m->locked_by, m->created_at_ms);
        if ((rc = sq_step_i64(c, q, NULL, "save room busy")) < 0)
            return *fatal = rc;
        m->room_busy = rc == 1;
    }

    outbox_initial_of(m, &init);
    for (size_t i = 0; i < m->nevents; i++) {
        const struct outbox_new *e = &m->events[i];

        /* locked_by NULL binds "" */
        q = sq_bound(c, &SQL_OUTBOX_INSERT, "sssissbissiiiss", e->event_id, m->app_code, m->room_id,
                     m->version, m->command_id, e->event_type, (const void *)e->payload,
                     e->payload_len, m->created_at_ms, init.status, init.locked_by,
                     init.lock_until_ms, init.due_at_ms, e->room_seq, m->request_id,
                     m->traceparent);
        rc = sq_step_write(c, q, "save outbox");
        if (rc == ROOMD_ECONFLICT) {
            store_set_errmsg("event_id %s already exists", e->event_id);
            return ROOMD_ECONFLICT;
        }
        if (rc != 0)
            return *fatal = rc;
        m->events[i].id = init.locked_by != NULL ? sqlite3_last_insert_rowid(c->db) : 0;
    }

    /* The rooms row. */
    update = cur.owner_uid == m->meta.owner_uid &&
                     strcmp(cur.status, m->meta.status ? m->meta.status : "open") == 0
                 ? &SQL_ROOM_UPDATE_KEEP
                 : &SQL_ROOM_UPDATE;
    q = bound_room(c, m->create ? &SQL_ROOM_INSERT : update, m);
    rc = sq_step_write(c, q, "save rooms");
    if (rc == ROOMD_ECONFLICT)
        return ROOMD_EEXIST;
    if (rc != 0)
        return *fatal = rc;
    if (m->create && m->max_owner_rooms > 0 && (rc = owner_limit(c, m, fatal)) != 0)
        return rc;

    /* The snapshot, and pruning beyond snapshots_keep. */
    if (m->snapshot != NULL) {
        int64_t t_snap = clock_mono_us();
        q = sq_bound(c, &SQL_SNAP_INSERT, "ssisi", m->app_code, m->room_id, m->version, m->snapshot,
                     m->created_at_ms);
        if ((rc = sq_step_write(c, q, "save snapshot")) != 0)
            return *fatal = rc;
        q = sq_bound(c, &SQL_SNAP_PRUNE, "ssd", m->app_code, m->room_id,
                     (m->snapshots_keep > 1 ? m->snapshots_keep : 1) - 1);
        if ((rc = sq_step_write(c, q, "prune snapshots")) != 0)
            return *fatal = rc;
        m->snapshot_us = clock_mono_us() - t_snap;
    }
    return 0;
}

static int
save_item(struct conn *c, void *arg, size_t i, int *fatal)
{
    struct mutation *m = ((struct mutation *const *)arg)[i];

    return m->rc = save_one(c, m, fatal);
}

int
sq_save(struct store *st, struct mutation *const *muts, size_t n)
{
    struct sq_store *s = (struct sq_store *)st;
    struct conn *c = sq_writer_get(s);
    int rc;

    for (size_t i = 0; i < n; i++)
        muts[i]->rc = 0;
    rc = sq_in_savepoints(c, n, save_item, (void *)muts);
    if (rc != 0)
        for (size_t i = 0; i < n; i++)
            muts[i]->rc = rc;
    sq_writer_put(s, c);
    return rc;
}

int
sq_fence_room(struct store *st, const char *app, const char *room_id, int64_t token)
{
    struct sq_store *s = (struct sq_store *)st;
    struct conn *c = sq_writer_get(s);
    struct room_head head = {0};
    sqlite3_stmt *q = sq_bound(c, &SQL_FENCE_ROOM, "ssi", app, room_id, token);
    int rc;

    if ((rc = sq_step_write(c, q, "fence_room")) != 0 || sqlite3_changes(c->db) > 0)
        goto out;
    /* nothing matched: no such room (fine), or a newer token holds it */
    if ((rc = sq_row_one(c, &SQL_ROOM_FENCE, app, room_id, read_head, &head, "fence_room check")) ==
        1) {
        store_set_errmsg("room %s/%s fenced: token %lld holds it, not %lld", app, room_id,
                         (long long)head.fence_token, (long long)token);
        rc = ROOMD_EFENCED;
    }
out:
    sq_writer_put(s, c);
    return rc;
}
