/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mysql/command.c: the command path: find_command, load_room (room head,
 * then snapshot and log tail up to it), save (a group-commit batch: the fast
 * path binds every mutation's rows as arrays; on any broken rule the slow
 * path redoes it with a savepoint per mutation) and fence_room.
 */
#include "store/mysql/internal.h"

#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/xmalloc.h"

#include <mysqld_error.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CMD_COLS "room_id, command_id, command_type, request, response, version, created_at_ms"
#define CMD_TYPES "sssssii"

MYS_SQL(FIND_COMMAND, "SELECT " CMD_COLS " FROM room_command_log"
                      " WHERE app_code=? AND command_id=?");
MYS_SQL(ROOM_HEAD,
        "SELECT version, fence_token, event_seq FROM rooms WHERE app_code=? AND room_id=?");
MYS_SQL(ROOM_FENCE, "SELECT version, fence_token FROM rooms WHERE app_code=? AND room_id=?"
                    " FOR UPDATE");
MYS_SQL(SNAP_LATEST, "SELECT version, state FROM room_snapshots"
                     " WHERE app_code=? AND room_id=? AND version<=?"
                     " ORDER BY version DESC LIMIT 1");
MYS_SQL(LOG_TAIL, "SELECT " CMD_COLS " FROM room_command_log"
                  " WHERE app_code=? AND room_id=? AND version>? AND version<=?"
                  " ORDER BY version");
MYS_SQL(LOG_INSERT, "INSERT INTO room_command_log (app_code, room_id, version, command_id,"
                    " command_type, request, response, created_at_ms, request_id, traceparent)"
                    " VALUES (?,?,?,?,?,?,?,?,?,?)");
MYS_SQL(ROOM_INSERT,
        "INSERT INTO rooms (app_code, room_id, owner_uid, title, status, version,"
        " fence_token, rocket_status, rocket_id, rocket_level, rocket_launch_at_ms,"
        " created_at_ms, updated_at_ms, event_seq) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
MYS_SQL(ROOM_UPDATE, "UPDATE rooms SET owner_uid=?, title=?, status=?, version=?, fence_token=?,"
                     " rocket_status=?, rocket_id=?, rocket_level=?, rocket_launch_at_ms=?,"
                     " updated_at_ms=?, event_seq=?"
                     " WHERE app_code=? AND room_id=? AND version=? AND fence_token<=?");
/* The fast path's room updates of a batch in ONE statement: an array-bound
 * INSERT runs as one multi-row insert on MariaDB (an array-bound UPDATE runs
 * row by row), and each row's fence is a conditional assignment: the row
 * changes only when it is at version-1 and its fence_token <= the writer's
 * (the checks of SQL_ROOM_UPDATE), else it keeps every column. fence_token
 * and version come last: the assignments run left to right and each
 * condition reads the columns as assigned so far. With CLIENT_FOUND_ROWS a
 * changed row counts 2, a refused one 1 and a missing room (inserted) 1, so
 * the batch passed its fences only when the count is 2 per row. */
#define ROOM_FENCE_OK "version=VALUES(version)-1 AND fence_token<=VALUES(fence_token)"
MYS_SQL(ROOM_UPSERT,
        "INSERT INTO rooms (app_code, room_id, owner_uid, title, status, version,"
        " fence_token, rocket_status, rocket_id, rocket_level, rocket_launch_at_ms,"
        " created_at_ms, updated_at_ms, event_seq) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
        " ON DUPLICATE KEY UPDATE"
        " owner_uid=IF(" ROOM_FENCE_OK ",VALUES(owner_uid),owner_uid),"
        " title=IF(" ROOM_FENCE_OK ",VALUES(title),title),"
        " status=IF(" ROOM_FENCE_OK ",VALUES(status),status),"
        " rocket_status=IF(" ROOM_FENCE_OK ",VALUES(rocket_status),rocket_status),"
        " rocket_id=IF(" ROOM_FENCE_OK ",VALUES(rocket_id),rocket_id),"
        " rocket_level=IF(" ROOM_FENCE_OK ",VALUES(rocket_level),rocket_level),"
        " rocket_launch_at_ms=IF(" ROOM_FENCE_OK
        ",VALUES(rocket_launch_at_ms),rocket_launch_at_ms),"
        " updated_at_ms=IF(" ROOM_FENCE_OK ",VALUES(updated_at_ms),updated_at_ms),"
        " event_seq=IF(" ROOM_FENCE_OK ",VALUES(event_seq),event_seq),"
        " fence_token=IF(" ROOM_FENCE_OK ",VALUES(fence_token),fence_token),"
        " version=IF(" ROOM_FENCE_OK ",VALUES(version),version)");
/* status, locked_by, lock_until_ms, due_at_ms: pending (NULL, NULL,
 * created_at_ms) or, for the outbox hand-off, already claimed */
MYS_SQL(OUTBOX_INSERT,
        "INSERT INTO room_outbox (event_id, app_code, room_id, room_version,"
        " command_id, event_type, payload, status, retry_count, sinks_done,"
        " locked_by, lock_until_ms, due_at_ms, created_at_ms, updated_at_ms, room_seq,"
        " request_id, traceparent) VALUES (?,?,?,?,?,?,?,?,0,0,?,?,?,?,?,?,?,?)");
/* The hand-off under ordering per_room, for up to MYS_IN rooms of one app,
 * in one round trip (a UNION ALL of two reads, told apart by the third
 * column):
 * - 0: the rooms with an undelivered row and their lowest due_at_ms: the
 *   first entry of each room's range of ix_outbox_room (a loose index scan:
 *   one index dive per room, however many rows a room has waiting);
 * - 1: room affinity: the rooms with a row due later than the commands'
 *   time (?) that is not delivering by the hand-off claimer (?): a range of
 *   ix_outbox_room above now per room (in flight or waiting for a retry: at
 *   most a few batches), never a room's due backlog. */
MYS_SQL(ROOMS_BUSY,
        "SELECT room_id, MIN(due_at_ms), 0 FROM room_outbox FORCE INDEX (ix_outbox_room)"
        " WHERE app_code=? AND room_id IN (" MYS_IN_LIST ") AND due_at_ms IS NOT NULL"
        " GROUP BY app_code, room_id"
        " UNION ALL SELECT room_id, 0, 1 FROM room_outbox FORCE INDEX (ix_outbox_room)"
        " WHERE app_code=? AND room_id IN (" MYS_IN_LIST ") AND due_at_ms>?"
        " AND NOT (status='delivering' AND locked_by<=>?) GROUP BY room_id");
/* The ids of rows just inserted already claimed (their due_at_ms is
 * their lock_until_ms): a range of ix_outbox_due, matched by event_id. */
MYS_SQL(OUTBOX_IDS, "SELECT event_id, id FROM room_outbox FORCE INDEX (ix_outbox_due)"
                    " WHERE due_at_ms>=? AND due_at_ms<=? AND locked_by=?");
MYS_SQL(SNAP_INSERT, "INSERT INTO room_snapshots (app_code, room_id, version, state,"
                     " created_at_ms) VALUES (?,?,?,?,?)"
                     " ON DUPLICATE KEY UPDATE state=VALUES(state),"
                     " created_at_ms=VALUES(created_at_ms)");
MYS_SQL(SNAP_NTH, "SELECT version FROM room_snapshots WHERE app_code=? AND room_id=?"
                  " ORDER BY version DESC LIMIT 1 OFFSET ?");
MYS_SQL(SNAP_PRUNE, "DELETE FROM room_snapshots WHERE app_code=? AND room_id=? AND version<=?");
/* A create's owner limit (owner_limit): the owner's lock row, taken (X,
 * until the commit) before its open rooms are counted, so two creates of
 * one owner never count at once: the second waits for the first to commit
 * and then, under READ COMMITTED, counts its room. */
MYS_SQL(OWNER_LOCK, "INSERT INTO room_owner_locks (app_code, owner_uid) VALUES (?,?)"
                    " ON DUPLICATE KEY UPDATE owner_uid=owner_uid");
MYS_SQL(OWNER_ROOMS, "SELECT COUNT(*) FROM rooms FORCE INDEX (ix_rooms_owner)"
                     " WHERE app_code=? AND owner_uid=? AND status='open'");
/* The log rows of up to MYS_IN command_ids of one app (a batch's own rows,
 * read back in its transaction before the COMMIT and after it: own_rows). */
#define LOG_OWN_SQL                                                                                \
    "SELECT command_id, room_id, version FROM room_command_log"                                    \
    " WHERE app_code=? AND command_id IN (" MYS_IN_LIST ")"
MYS_SQL(LOG_OWN, LOG_OWN_SQL);
/* the same after the batch's COMMIT, which this node applied before it
 * answered: no causal wait (a round trip through the cluster) */
MYS_SQL(LOG_OWN_LOCAL, "SET STATEMENT wsrep_sync_wait=0 FOR " LOG_OWN_SQL);
MYS_SQL(FENCE_ROOM, "UPDATE rooms SET fence_token=? WHERE app_code=? AND room_id=?"
                    " AND fence_token<=?");

/* Reads the row of r (CMD_COLS) into dst (struct command_record). */
static void
read_command(const struct rows *r, void *dst)
{
    mys_read_cols(r, store_command_cols, dst, sizeof(struct command_record));
}

int
mys_find_command(struct store *s, const char *app, const char *command_id,
                 struct command_record *out)
{
    struct one_ctx x = {&SQL_FIND_COMMAND, CMD_TYPES, app, command_id, read_command, out};

    memset(out, 0, sizeof(*out));
    return mys_run((struct mstore *)s, mys_one_fn, &x);
}

struct load_ctx {
    const char *app, *room_id;
    struct room_load *out;
};

/* Reads the room head, then the snapshot and log tail up to that version:
 * a consistent prefix even while the owner keeps committing. */
static int
load_room_fn(struct conn *c, void *arg)
{
    struct load_ctx *x = arg;
    struct room_load *l = x->out;
    struct rows r;
    size_t cap = 0;
    int rc;

    room_load_clear(l);
    if ((rc = mys_query_one(c, &SQL_ROOM_HEAD, &r, "iii", "ss", x->app, x->room_id)) <= 0) {
        rc = rc == 0 ? ROOMD_ENOTFOUND : rc;
        goto out;
    }
    l->version = r_i64(&r, 0);
    l->fence_token = r_i64(&r, 1);
    l->event_seq = r_i64(&r, 2);
    mys_rows_done(&r);

    rc = mys_query_one(c, &SQL_SNAP_LATEST, &r, "is", "ssi", x->app, x->room_id, l->version);
    if (rc < 0)
        goto out;
    if (rc == 1) {
        l->snapshot_version = r_i64(&r, 0);
        l->snapshot = xstrdup(r_str(&r, 1));
    }
    mys_rows_done(&r);

    if ((rc = mys_query(c, &SQL_LOG_TAIL, &r, CMD_TYPES, "ssii", x->app, x->room_id,
                        l->snapshot_version, l->version)) != 0)
        goto out;
    while ((rc = mys_st_fetch(c, &r)) == 1) {
        l->tail = xgrow(l->tail, l->ntail, &cap, sizeof(*l->tail));
        read_command(&r, &l->tail[l->ntail++]);
    }
out:
    mys_rows_done(&r);
    if (rc != 0)
        room_load_clear(l);
    return rc;
}

int
mys_load_room(struct store *s, const char *app, const char *room_id, struct room_load *out)
{
    struct load_ctx x = {app, room_id, out};

    memset(out, 0, sizeof(*out));
    return mys_run((struct mstore *)s, load_room_fn, &x);
}

static void
fill_log(struct bulk *k, size_t row, const struct mutation *m)
{
    bk_str(k, 0, row, m->app_code);
    bk_str(k, 1, row, m->room_id);
    bk_i64(k, 2, row, m->version);
    bk_str(k, 3, row, m->command_id);
    bk_str(k, 4, row, m->command_type);
    bk_str(k, 5, row, m->request ? m->request : "");
    bk_str(k, 6, row, m->response ? m->response : "");
    bk_i64(k, 7, row, m->created_at_ms);
    bk_str(k, 8, row, m->request_id);
    bk_str(k, 9, row, m->traceparent);
}

#define LOG_TYPES "ssissssiss"

/* Binds the room columns that SQL_ROOM_INSERT and SQL_ROOM_UPDATE share, in
 * their common order (owner_uid .. rocket_launch_at_ms, "isiissii"), from
 * column col of row on (nine columns). */
static void
fill_room_fields(struct bulk *k, unsigned int col, size_t row, const struct mutation *m)
{
    const struct room_meta *mt = &m->meta;

    bk_i64(k, col++, row, mt->owner_uid);
    bk_str(k, col++, row, mt->title ? mt->title : "");
    bk_str(k, col++, row, mt->status ? mt->status : "open");
    bk_i64(k, col++, row, m->version);
    bk_i64(k, col++, row, m->fence_token);
    bk_str(k, col++, row, mt->rocket_status ? mt->rocket_status : "idle");
    bk_str(k, col++, row, mt->rocket_id ? mt->rocket_id : "");
    bk_i64(k, col++, row, mt->rocket_level);
    bk_i64(k, col, row, mt->rocket_launch_at_ms);
}

static void
fill_room_insert(struct bulk *k, size_t row, const struct mutation *m)
{
    const struct room_meta *mt = &m->meta;

    bk_str(k, 0, row, m->app_code);
    bk_str(k, 1, row, m->room_id);
    fill_room_fields(k, 2, row, m);
    bk_i64(k, 11, row, mt->created_at_ms ? mt->created_at_ms : m->created_at_ms);
    bk_i64(k, 12, row, mt->updated_at_ms ? mt->updated_at_ms : m->created_at_ms);
    bk_i64(k, 13, row, mt->event_seq);
}

#define ROOM_INSERT_TYPES "ssissiissiiiii"

static void
fill_room_update(struct bulk *k, size_t row, const struct mutation *m)
{
    const struct room_meta *mt = &m->meta;

    fill_room_fields(k, 0, row, m);
    bk_i64(k, 9, row, mt->updated_at_ms ? mt->updated_at_ms : m->created_at_ms);
    bk_i64(k, 10, row, mt->event_seq);
    bk_str(k, 11, row, m->app_code);
    bk_str(k, 12, row, m->room_id);
    bk_i64(k, 13, row, m->version - 1);
    bk_i64(k, 14, row, m->fence_token);
}

#define ROOM_UPDATE_TYPES "issiissiiiissii"

static void
fill_outbox(struct bulk *k, size_t row, const struct mutation *m, const struct outbox_new *e)
{
    bk_str(k, 0, row, e->event_id);
    bk_str(k, 1, row, m->app_code);
    bk_str(k, 2, row, m->room_id);
    bk_i64(k, 3, row, m->version);
    bk_str(k, 4, row, m->command_id);
    bk_str(k, 5, row, e->event_type);
    bk_bytes(k, 6, row, e->payload, e->payload_len);
    struct outbox_initial init;

    outbox_initial_of(m, &init);
    bk_str(k, 7, row, init.status);
    bk_str(k, 8, row, init.locked_by); /* NULL when pending */
    if (init.locked_by != NULL)
        bk_i64(k, 9, row, init.lock_until_ms);
    else
        bk_null(k, 9, row);
    bk_i64(k, 10, row, init.due_at_ms);
    bk_i64(k, 11, row, m->created_at_ms);
    bk_i64(k, 12, row, m->created_at_ms);
    bk_i64(k, 13, row, e->room_seq);
    bk_str(k, 14, row, m->request_id);
    bk_str(k, 15, row, m->traceparent);
}

#define OUTBOX_INSERT_TYPES "sssissbssiiiiiss"

/* True when m hands its rows off under ordering per_room (only if its room
 * has no undelivered row). */
static bool
asks_room_idle(const struct mutation *m)
{
    return m->locked_by != NULL && *m->locked_by != '\0' && m->handoff_if_room_idle;
}

/* The mutations of muts[from..to) of app and claimer by that ask for an
 * idle room and whose room is room: *f(m, arg) for each. */
static void
each_asking(struct mutation *const *muts, size_t from, size_t to, const char *app, const char *by,
            const char *room, void (*f)(struct mutation *, void *), void *arg)
{
    for (size_t j = from; j < to; j++)
        if (asks_room_idle(muts[j]) && strcmp(muts[j]->app_code, app) == 0 &&
            strcmp(muts[j]->locked_by, by) == 0 && strcmp(muts[j]->room_id, room) == 0)
            f(muts[j], arg);
}

/* each_asking: the room has an undelivered row; *arg the lowest due_at_ms
 * of the room and the commands' time (now). Busy unless handoff_own_rows and
 * every row is due later (then a row of the room that is not the hand-off's
 * own decides: mark_foreign). */
struct busy_read {
    int64_t min_due, now;
};

static void
mark_busy(struct mutation *m, void *arg)
{
    struct busy_read *b = arg;

    m->room_busy = true;
    if (m->handoff_own_rows && b->min_due > b->now) {
        m->room_busy = false; /* maybe: its rows may all be the hand-off's own */
        m->room_own = true;
    }
}

static void
mark_foreign(struct mutation *m, void *arg)
{
    (void)arg;
    if (m->room_own)
        m->room_busy = true;
}

/* One SQL_ROOMS_BUSY for rooms[0..k) of app and claimer by, asked by
 * muts[from..to). The foreign rooms (pointers into rooms) are marked after
 * every room's busy row is read, whatever order the server returns the two
 * halves in. Returns 0 or the failure. */
static int
rooms_busy_chunk(struct conn *c, struct mutation *const *muts, size_t from, size_t to,
                 const char *app, const char *by, const char **rooms, size_t k)
{
    struct busy_read b = {0};
    struct params p;
    struct rows r;
    const char *foreign[MYS_IN];
    size_t nforeign = 0;
    int rc;

    for (size_t j = from; j < to; j++) /* the latest command's time: the strictest */
        if (asks_room_idle(muts[j]) && muts[j]->created_at_ms > b.now)
            b.now = muts[j]->created_at_ms;

    PARAMS_INIT(&p);
    p_str(&p, app);
    p_in_str(&p, rooms, k);
    p_str(&p, app);
    p_in_str(&p, rooms, k);
    p_i64(&p, b.now);
    p_str(&p, by);
    if ((rc = mys_st_query(c, &SQL_ROOMS_BUSY, &p, &r, "sii")) != 0)
        return rc;
    while ((rc = mys_st_fetch(c, &r)) == 1) {
        const char *room = r_str(&r, 0);

        if (r_i64(&r, 2) == 0) {
            b.min_due = r_i64(&r, 1);
            each_asking(muts, from, to, app, by, room, mark_busy, &b);
            continue;
        }
        for (size_t i = 0; i < k && nforeign < MYS_IN; i++)
            if (strcmp(rooms[i], room) == 0) {
                foreign[nforeign++] = rooms[i];
                break;
            }
    }
    mys_rows_done(&r);
    for (size_t i = 0; i < nforeign; i++)
        each_asking(muts, from, to, app, by, foreign[i], mark_foreign, NULL);
    return rc < 0 ? rc : 0;
}

/*
 * Sets room_busy of every mutation of muts[0..n) that asks for an idle room
 * (asks_room_idle) and whose room already has an undelivered row (its rows
 * then go pending), clears it for the others. With handoff_own_rows a room
 * whose undelivered rows are all delivering by the mutation's locked_by
 * under a lock still running at the commands' time (due_at_ms >
 * created_at_ms) is not busy (room affinity: the
 * hand-off queues the rows behind them). One SQL_ROOMS_BUSY per MYS_IN such
 * rooms of one app and claimer (a loose index scan: one dive per room), not
 * one query per mutation. In the open transaction; returns 0 or the failure.
 */
static int
rooms_busy(struct conn *c, struct mutation *const *muts, size_t n)
{
    size_t i = 0;

    for (size_t j = 0; j < n; j++)
        muts[j]->room_busy = muts[j]->room_own = false;
    while (i < n) {
        const char *rooms[MYS_IN], *app = NULL, *by = NULL;
        size_t k = 0, from = i;
        int rc;

        for (; i < n && k < MYS_IN; i++) {
            if (!asks_room_idle(muts[i]))
                continue;
            if (app != NULL &&
                (strcmp(app, muts[i]->app_code) != 0 || strcmp(by, muts[i]->locked_by) != 0))
                break; /* the next chunk starts with another app or claimer */
            app = muts[i]->app_code;
            by = muts[i]->locked_by;
            rooms[k++] = muts[i]->room_id;
        }
        if (k == 0)
            break;
        if ((rc = rooms_busy_chunk(c, muts, from, i, app, by, rooms, k)) != 0)
            return rc;
    }
    return 0;
}

/* True when m committed rows inserted already claimed (by its locked_by):
 * not those of a busy room, which went pending. */
static bool
inserted_claimed(const struct mutation *m)
{
    return m->rc == 0 && m->nevents > 0 && m->locked_by != NULL && *m->locked_by != '\0' &&
           !m->room_busy;
}

/*
 * Sets events[i].id of every mutation of muts[0..n) whose rows were just
 * inserted already claimed (locked_by set), in the open transaction: one
 * query per distinct claimer. A row not found keeps id 0 (the hand-off then
 * leaves it to the claims after its lock). lone_id > 0: muts inserted one
 * outbox row in all, with that id (mys_insert_id), so no query (a lone
 * command's round trip: 1 of 7 at 1 client).
 */
static int
claimed_ids(struct conn *c, struct mutation *const *muts, size_t n, int64_t lone_id)
{
    if (lone_id > 0) {
        for (size_t i = 0; i < n; i++)
            if (inserted_claimed(muts[i]))
                muts[i]->events[0].id = lone_id;
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        const char *by = muts[i]->locked_by;
        int64_t lo = INT64_MAX, hi = INT64_MIN;
        struct rows r;
        int rc;

        if (!inserted_claimed(muts[i]))
            continue;
        bool first = true; /* the first mutation of this claimer queries for all */
        for (size_t j = 0; j < i && first; j++)
            first = !(inserted_claimed(muts[j]) && strcmp(muts[j]->locked_by, by) == 0);
        if (!first)
            continue;
        for (size_t j = i; j < n; j++)
            if (inserted_claimed(muts[j]) && strcmp(muts[j]->locked_by, by) == 0) {
                lo = muts[j]->lock_until_ms < lo ? muts[j]->lock_until_ms : lo;
                hi = muts[j]->lock_until_ms > hi ? muts[j]->lock_until_ms : hi;
            }
        if ((rc = mys_query(c, &SQL_OUTBOX_IDS, &r, "si", "iis", lo, hi, by)) != 0)
            return rc;
        while ((rc = mys_st_fetch(c, &r)) == 1)
            for (size_t j = i; j < n; j++) {
                struct mutation *m = muts[j];

                if (!inserted_claimed(m) || strcmp(m->locked_by, by) != 0)
                    continue;
                for (size_t e = 0; e < m->nevents; e++)
                    if (strcmp(m->events[e].event_id, r_str(&r, 0)) == 0)
                        m->events[e].id = r_i64(&r, 1);
            }
        mys_rows_done(&r);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* After a create's rooms row, in its transaction: takes the owner's lock
 * row, then counts. Returns ROOMD_ELIMIT when the owner now holds more than
 * m->max_owner_rooms open rooms of the app (this one included;
 * store_check_owner_rooms), 0 when not or without a limit, or the failure
 * of either statement (a deadlock between batches is retried by mys_run). */
static int
owner_limit(struct conn *c, const struct mutation *m)
{
    struct rows r;
    int64_t open_rooms = 0;
    int rc;

    if (!m->create || m->max_owner_rooms <= 0)
        return 0;
    if ((rc = mys_exec(c, &SQL_OWNER_LOCK, NULL, "si", m->app_code, m->meta.owner_uid)) != 0)
        return rc;
    rc = mys_query_one(c, &SQL_OWNER_ROOMS, &r, "i", "si", m->app_code, m->meta.owner_uid);
    if (rc == 1)
        open_rooms = r_i64(&r, 0);
    mys_rows_done(&r);
    if (rc < 0)
        return rc;
    return store_check_owner_rooms(m, open_rooms);
}

/* Writes m's snapshot and drops all but the newest snapshots_keep (>= 1). */
static int
save_snapshot(struct conn *c, const struct mutation *m)
{
    const char *app = m->app_code, *room = m->room_id;
    struct rows r;
    int64_t cut = 0;
    int rc;

    if ((rc = mys_exec(c, &SQL_SNAP_INSERT, NULL, "ssisi", app, room, m->version, m->snapshot,
                       m->created_at_ms)) != 0)
        return rc;
    rc = mys_query_one(c, &SQL_SNAP_NTH, &r, "i", "ssd", app, room,
                       m->snapshots_keep > 1 ? m->snapshots_keep : 1);
    if (rc == 1)
        cut = r_i64(&r, 0);
    mys_rows_done(&r);
    if (rc < 0 || cut == 0)
        return rc < 0 ? rc : 0;
    return mys_exec(c, &SQL_SNAP_PRUNE, NULL, "ssi", app, room, cut);
}

/* True when m's rows are in the transaction's outcome: it committed in it
 * (rc 0), its rows not rolled back to its savepoint. */
static bool
kept(const struct mutation *m)
{
    return m->rc == 0;
}

/*
 * Counts the log rows of the kept mutations of muts[0..n) that c reads (in
 * its open transaction, or the next one it starts), matched by (app,
 * command_id, room_id, version): *missing is how many are not there. One
 * SQL_LOG_OWN per MYS_IN kept mutations of one app. Returns 0 or the
 * failure.
 */
static int
own_rows(struct conn *c, const struct mys_sql *id, struct mutation *const *muts, size_t n,
         size_t *missing)
{
    size_t i = 0;

    *missing = 0;
    while (i < n) {
        const char *ids[MYS_IN], *app = NULL;
        struct mutation *chunk[MYS_IN];
        size_t k = 0, found = 0;
        struct params p;
        struct rows r;
        int rc;

        for (; i < n && k < MYS_IN; i++) {
            if (!kept(muts[i]))
                continue;
            if (app != NULL && strcmp(app, muts[i]->app_code) != 0)
                break; /* the next chunk starts with another app */
            app = muts[i]->app_code;
            chunk[k] = muts[i];
            ids[k++] = muts[i]->command_id;
        }
        if (k == 0)
            break;
        PARAMS_INIT(&p);
        p_str(&p, app);
        p_in_str(&p, ids, k);
        if ((rc = mys_st_query(c, id, &p, &r, "ssi")) != 0)
            return rc;
        while ((rc = mys_st_fetch(c, &r)) == 1)
            for (size_t j = 0; j < k; j++)
                if (strcmp(chunk[j]->command_id, r_str(&r, 0)) == 0 &&
                    strcmp(chunk[j]->room_id, r_str(&r, 1)) == 0 &&
                    chunk[j]->version == r_i64(&r, 2)) {
                    found++;
                    break;
                }
        mys_rows_done(&r);
        if (rc < 0)
            return rc;
        *missing += k - found;
    }
    return 0;
}

/* Makes run() roll back and rerun the batch, as after a deadlock. */
static int
lost_own_rows(struct conn *c, const char *when, size_t missing, size_t n)
{
    log_warn("store", "mysql transaction lost its rows: rolled back by the server without an error",
             "when=%s missing=%zu mutations=%zu", when, missing, n);
    c->err = ER_LOCK_DEADLOCK;
    snprintf(c->errmsg, sizeof(c->errmsg),
             "%s: %zu of the batch's command log rows missing (the transaction was rolled back "
             "without an error)",
             when, missing);
    store_set_errmsg("mysql %s", c->errmsg);
    return ROOMD_EUNAVAIL;
}

/*
 * Commits the batch muts[0..n) (its transaction open on c). On Galera the
 * batch's log rows are read back first, in the transaction, and after the
 * COMMIT: a transaction that Galera rolled back (a brute-force abort by a
 * replicated writeset) without the client seeing an error lets the
 * statements after it run in a new transaction, so a COMMIT answered OK
 * would commit only part of the batch (measured: the gift's debit without
 * its command log row) or nothing (issue 28). A row missing before the
 * COMMIT rolls that new transaction back; one missing after it means nothing
 * committed; either way the batch is rerun (1213, mys_run's deadlock retry).
 * Returns 0 or the failure (c->err says which).
 */
static int
commit_batch(struct conn *c, struct mutation *const *muts, size_t n)
{
    size_t missing = 0;
    int rc;

    if (!c->galera)
        return mys_tx_commit(c);
    if ((rc = own_rows(c, &SQL_LOG_OWN, muts, n, &missing)) != 0)
        return rc;
    if (missing > 0)
        return lost_own_rows(c, "before COMMIT", missing, n);
    if ((rc = mys_tx_commit(c)) != 0)
        return rc;
    /* a read of its own: a new (read-only) transaction, ended here */
    rc = own_rows(c, &SQL_LOG_OWN_LOCAL, muts, n, &missing);
    c->in_txn = true;
    mys_tx_rollback(c);
    if (rc != 0) { /* the COMMIT answered OK: presumed committed */
        log_warn("store", "mysql read-back after COMMIT failed", "err=\"%s\"", c->errmsg);
        c->err = 0;
        return 0;
    }
    if (missing > 0)
        return lost_own_rows(c, "after COMMIT", missing, n);
    return 0;
}

struct save_ctx {
    struct mutation *const *muts;
    size_t n;
    bool hook_done; /* store_should_fail_save() is asked once per save */
};

static int
fail_hook(struct save_ctx *x)
{
#ifdef ROOMD_TESTING
    if (!x->hook_done) {
        x->hook_done = true;
        if (store_should_fail_save()) {
            store_set_errmsg("mysql: injected save failure");
            return ROOMD_EIO;
        }
    }
#else
    (void)x;
#endif
    return 0;
}

/* A statement failure inside one mutation: its own fault (a rule broken,
 * data refused) or the transaction's (lost connection, deadlock). */
static bool
mutation_fault(const struct conn *c)
{
    enum errclass ec = mys_classify(c->err);

    return ec == EC_DUP || ec == EC_OTHER;
}

/* The fast path's gift debits, all at once after the command log rows
 * claimed their command_ids. One refused (short balance, ledger mismatch)
 * is a broken rule: ROOMD_ECONFLICT sends the batch to save_slow, which
 * rolls that mutation back alone. */
static int
save_debits(struct conn *c, struct save_ctx *x)
{
    struct wallet_debit **d = xcalloc(x->n, sizeof(*d));
    size_t nd = 0;
    int64_t t0 = clock_mono_us();
    int rc;

    for (size_t i = 0; i < x->n; i++)
        if (x->muts[i]->debit != NULL)
            d[nd++] = x->muts[i]->debit;
    rc = nd > 0 ? mys_gift_debits(c, d, nd) : 0;
    for (size_t i = 0; rc == 0 && i < nd; i++)
        if (d[i]->rc != 0) {
            c->err = 0;
            rc = ROOMD_ECONFLICT;
        }
    for (size_t i = 0; i < x->n; i++)
        if (x->muts[i]->debit != NULL)
            x->muts[i]->debit_us = (clock_mono_us() - t0) / (int64_t)nd;
    free(d);
    return rc;
}

/*
 * The fast path: every mutation's rows in a few array-bound statements. Any
 * rule broken anywhere (duplicate key, stale version, refused data) rolls it
 * all back and returns ROOMD_ECONFLICT: save_slow then sorts it out one
 * mutation at a time.
 */
static int
save_fast(struct conn *c, struct save_ctx *x)
{
    struct bulk log, ins, upd, ob;
    size_t ncreate = 0, nupdate = 0, nev = 0, ic = 0, iu = 0;
    int64_t lone_id;
    uint64_t aff;
    int rc;

    for (size_t i = 0; i < x->n; i++) {
        if (x->muts[i]->create)
            ncreate++;
        else
            nupdate++;
        nev += x->muts[i]->nevents;
    }
    mys_bulk_init(&log, LOG_TYPES, x->n);
    mys_bulk_init(&ins, ROOM_INSERT_TYPES, ncreate);
    mys_bulk_init(&upd, ROOM_INSERT_TYPES, nupdate);
    mys_bulk_init(&ob, OUTBOX_INSERT_TYPES, nev);
    for (size_t i = 0; i < x->n; i++) {
        const struct mutation *m = x->muts[i];

        fill_log(&log, i, m);
        if (m->create)
            fill_room_insert(&ins, ic++, m);
        else
            fill_room_insert(&upd, iu++, m); /* SQL_ROOM_UPSERT's columns */
    }
    if ((rc = mys_tx_begin(c)) != 0)
        goto out;
    /* the outbox rows after the hand-off check, which decides their status */
    if ((rc = rooms_busy(c, x->muts, x->n)) != 0)
        goto out;
    for (size_t i = 0, e0 = 0; i < x->n; e0 += x->muts[i++]->nevents)
        for (size_t e = 0; e < x->muts[i]->nevents; e++)
            fill_outbox(&ob, e0 + e, x->muts[i], &x->muts[i]->events[e]);
    int64_t t_log = clock_mono_us();
    if ((rc = mys_st_bulk(c, &SQL_LOG_INSERT, &log, NULL)) != 0)
        goto fault;
    for (size_t i = 0; i < x->n; i++)
        x->muts[i]->log_us = (clock_mono_us() - t_log) / (int64_t)x->n;
    if ((rc = fail_hook(x)) != 0)
        goto out;
    if ((rc = mys_st_bulk(c, &SQL_ROOM_INSERT, &ins, NULL)) != 0)
        goto fault;
    if ((rc = mys_st_bulk(c, &SQL_ROOM_UPSERT, &upd, &aff)) != 0)
        goto fault;
    if (aff != 2 * nupdate) { /* a room refused its writer or is gone: save_slow says which */
        c->err = 0;
        rc = ROOMD_EFENCED;
        goto fault;
    }
    if ((rc = mys_st_bulk(c, &SQL_OUTBOX_INSERT, &ob, NULL)) != 0)
        goto fault;
    lone_id = nev == 1 ? mys_insert_id(c, &SQL_OUTBOX_INSERT) : 0;
    if ((rc = save_debits(c, x)) != 0)
        goto fault;
    for (size_t i = 0; i < x->n; i++)
        if ((rc = owner_limit(c, x->muts[i])) != 0) {
            if (rc == ROOMD_ELIMIT)
                c->err = 0; /* a broken rule: save_slow refuses that create alone */
            goto fault;
        }
    for (size_t i = 0; i < x->n; i++) {
        int64_t t_snap = clock_mono_us();
        if (x->muts[i]->snapshot != NULL && (rc = save_snapshot(c, x->muts[i])) != 0)
            goto fault;
        x->muts[i]->snapshot_us = x->muts[i]->snapshot != NULL ? clock_mono_us() - t_snap : 0;
    }
    if ((rc = claimed_ids(c, x->muts, x->n, lone_id)) != 0)
        goto fault;
    rc = commit_batch(c, x->muts, x->n);
    goto out;
fault:
    if (c->err == 0 || mutation_fault(c)) {
        mys_tx_rollback(c);
        c->err = 0;
        rc = ROOMD_ECONFLICT;
    }
out:
    mys_bulk_free(&log);
    mys_bulk_free(&ins);
    mys_bulk_free(&upd);
    mys_bulk_free(&ob);
    return rc;
}

/* Runs statement id for one mutation's rows. */
static int
exec_one(struct conn *c, const struct mys_sql *id, const char *types, const struct mutation *m,
         void (*fill)(struct bulk *, size_t, const struct mutation *), uint64_t *aff)
{
    struct bulk k;
    int rc;

    mys_bulk_init(&k, types, 1);
    fill(&k, 0, m);
    rc = mys_st_bulk(c, id, &k, aff);
    mys_bulk_free(&k);
    return rc;
}

/* Sorts out a failed statement of one mutation: a duplicate key is that
 * mutation's dup_code and data the server refused is its ROOMD_EIO (either
 * way it alone is rolled back); anything else ends the transaction (*fatal). */
static int
mutation_outcome(struct conn *c, int rc, int dup_code, int *fatal)
{
    switch (mys_classify(c->err)) {
    case EC_DUP:
        return dup_code;
    case EC_OTHER:
        return ROOMD_EIO;
    default:
        return *fatal = rc;
    }
}

/*
 * A mutation its room's fence (or existence) refused: when the log already
 * holds its command_id at its room and version, an earlier attempt of this
 * very batch committed it (a COMMIT cut by a lost connection that reached the
 * cluster, then rerun by mys_run): ROOMD_EREUSED, so the command is answered
 * from the log (answer_reused) instead of 503 fenced or 409. Else refused, as
 * is. Sets *fatal on a failed read.
 */
static int
logged_before(struct conn *c, const struct mutation *m, int refused, int *fatal)
{
    struct command_record rec;
    struct rows r;
    int rc;

    memset(&rec, 0, sizeof(rec));
    rc = mys_query_one(c, &SQL_FIND_COMMAND, &r, CMD_TYPES, "ss", m->app_code, m->command_id);
    if (rc == 1)
        read_command(&r, &rec);
    mys_rows_done(&r);
    if (rc < 0)
        return *fatal = rc;
    bool ours = rc == 1 && strcmp(rec.room_id, m->room_id) == 0 && rec.version == m->version;
    command_record_clear(&rec);
    if (!ours)
        return refused;
    store_set_errmsg("command_id %s already committed at %s version %lld", m->command_id,
                     m->room_id, (long long)m->version);
    return ROOMD_EREUSED;
}

/*
 * One mutation inside the slow path's transaction, after its savepoint, in
 * the order and with the codes of sqlite/command.c: the room's fence (locked),
 * the command log row, the outbox rows, the rooms row (a create: its owner's
 * open rooms counted), the snapshot. Returns 0, a per-mutation code (EEXIST,
 * ENOTFOUND, EFENCED, EREUSED, ECONFLICT, EIO, ELIMIT), or sets *fatal with the code that ends the
 * whole transaction.
 */
static int
save_one(struct conn *c, struct save_ctx *x, struct mutation *m, int *fatal)
{
    struct rows r;
    struct bulk ob;
    uint64_t aff = 0;
    int64_t cur_version = 0, cur_token = 0;
    int rc;

    *fatal = 0;
    rc = mys_query_one(c, &SQL_ROOM_FENCE, &r, "ii", "ss", m->app_code, m->room_id);
    if (rc == 1) {
        cur_version = r_i64(&r, 0);
        cur_token = r_i64(&r, 1);
    }
    mys_rows_done(&r);
    if (rc < 0)
        return *fatal = rc;
    if ((rc = store_check_mutation(m, rc == 1, cur_version, cur_token)) != 0)
        return rc == ROOMD_EFENCED || rc == ROOMD_EEXIST ? logged_before(c, m, rc, fatal) : rc;

    int64_t t_log = clock_mono_us();
    rc = exec_one(c, &SQL_LOG_INSERT, LOG_TYPES, m, fill_log, NULL);
    m->log_us = clock_mono_us() - t_log;
    if (rc != 0) {
        bool reused = strstr(c->errmsg, "uq_cmdlog_command") != NULL;

        rc = mutation_outcome(c, rc, reused ? ROOMD_EREUSED : ROOMD_EFENCED, fatal);
        if (rc == ROOMD_EREUSED)
            store_set_errmsg("command_id %s already used", m->command_id);
        return rc;
    }
    if ((rc = fail_hook(x)) != 0)
        return *fatal = rc;

    /* the gift's debit: this command_id is ours now (the row above) */
    if (m->debit != NULL) {
        int64_t t0 = clock_mono_us();

        rc = mys_gift_debits(c, &m->debit, 1);
        m->debit_us = clock_mono_us() - t0;
        if (rc != 0)
            return *fatal = rc;
        if (m->debit->rc != 0)
            return m->debit->rc;
    }

    if ((rc = rooms_busy(c, &m, 1)) != 0)
        return *fatal = rc;
    mys_bulk_init(&ob, OUTBOX_INSERT_TYPES, m->nevents);
    for (size_t e = 0; e < m->nevents; e++)
        fill_outbox(&ob, e, m, &m->events[e]);
    rc = mys_st_bulk(c, &SQL_OUTBOX_INSERT, &ob, NULL);
    mys_bulk_free(&ob);
    if (rc != 0)
        return mutation_outcome(c, rc, ROOMD_ECONFLICT, fatal);

    if (m->create) {
        rc = exec_one(c, &SQL_ROOM_INSERT, ROOM_INSERT_TYPES, m, fill_room_insert, NULL);
        if (rc != 0)
            return mutation_outcome(c, rc, ROOMD_EEXIST, fatal);
        if ((rc = owner_limit(c, m)) == ROOMD_ELIMIT)
            return rc;
        if (rc != 0)
            return *fatal = rc;
    } else {
        rc = exec_one(c, &SQL_ROOM_UPDATE, ROOM_UPDATE_TYPES, m, fill_room_update, &aff);
        if (rc != 0)
            return mutation_outcome(c, rc, ROOMD_EFENCED, fatal);
        if (aff != 1)
            return ROOMD_EFENCED;
    }
    int64_t t_snap = clock_mono_us();
    if (m->snapshot != NULL && (rc = save_snapshot(c, m)) != 0)
        return mutation_outcome(c, rc, ROOMD_ECONFLICT, fatal);
    m->snapshot_us = m->snapshot != NULL ? clock_mono_us() - t_snap : 0;
    return 0;
}

/* The slow path: a savepoint per mutation, so one that breaks a rule is
 * rolled back alone with its rc set while the others commit. */
static int
save_slow(struct conn *c, struct save_ctx *x)
{
    int rc, fatal;

    if ((rc = mys_tx_begin(c)) != 0)
        return rc;
    for (size_t i = 0; i < x->n; i++) {
        struct mutation *m = x->muts[i];

        if ((rc = mys_q_exec(c, "SAVEPOINT m")) != 0)
            return rc;
        c->err = 0;
        m->rc = save_one(c, x, m, &fatal);
        if (fatal != 0)
            return fatal; /* the transaction's failure: the runner decides */
        if (m->rc == 0)
            continue;
        c->err = 0;
        if ((rc = mys_q_exec(c, "ROLLBACK TO SAVEPOINT m")) != 0) {
            /* no savepoint m: the transaction that set it is gone (rolled
             * back by the server without an error): rerun the batch */
            if (c->err == ER_SP_DOES_NOT_EXIST)
                c->err = ER_LOCK_DEADLOCK;
            return rc;
        }
    }
    if ((rc = claimed_ids(c, x->muts, x->n, 0)) != 0)
        return rc;
    return commit_batch(c, x->muts, x->n);
}

static int
save_fn(struct conn *c, void *arg)
{
    struct save_ctx *x = arg;
    int rc;

    for (size_t i = 0; i < x->n; i++)
        x->muts[i]->rc = 0;
    rc = save_fast(c, x);
    if (rc != ROOMD_ECONFLICT)
        return rc;
    return save_slow(c, x);
}

int
mys_save(struct store *s, struct mutation *const *muts, size_t n)
{
    struct save_ctx x = {muts, n, false};
    int rc;

    if (n == 0)
        return 0;
    rc = mys_run_tx((struct mstore *)s, save_fn, &x);
    if (rc != 0)
        for (size_t i = 0; i < n; i++)
            muts[i]->rc = rc;
    return rc;
}

struct fence_ctx {
    const char *app, *room_id;
    int64_t token;
};

/* One UPDATE (rows matched, CLIENT_FOUND_ROWS); when none matched, the room
 * head says whether the room is missing (fine) or holds a newer token. */
static int
fence_room_fn(struct conn *c, void *arg)
{
    struct fence_ctx *x = arg;
    uint64_t matched = 0;
    int rc = mys_exec(c, &SQL_FENCE_ROOM, &matched, "issi", x->token, x->app, x->room_id, x->token);
    struct rows r;

    if (rc != 0 || matched > 0)
        return rc;
    if ((rc = mys_query_one(c, &SQL_ROOM_HEAD, &r, "iii", "ss", x->app, x->room_id)) == 1) {
        store_set_errmsg("room %s/%s fenced: token %lld holds it, not %lld", x->app, x->room_id,
                         (long long)r_i64(&r, 1), (long long)x->token);
        rc = ROOMD_EFENCED;
    }
    mys_rows_done(&r);
    return rc;
}

int
mys_fence_room(struct store *s, const char *app, const char *room_id, int64_t token)
{
    struct fence_ctx x = {app, room_id, token};

    return mys_run((struct mstore *)s, fence_room_fn, &x);
}
