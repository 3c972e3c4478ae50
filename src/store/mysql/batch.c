/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mysql/batch.c: the rules a group-commit batch checks inside its
 * transaction (command.c's save calls them): the rooms that must not hand
 * off (rooms_busy), the ids of rows inserted already claimed
 * (claimed_ids), a create's owner limit, the snapshot write, and the COMMIT
 * that reads the batch's own log rows back on Galera (commit_batch). Each
 * runs on the calling save's connection, on its thread, and blocks on the
 * server.
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
int
mys_rooms_busy(struct conn *c, struct mutation *const *muts, size_t n)
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
int
mys_claimed_ids(struct conn *c, struct mutation *const *muts, size_t n, int64_t lone_id)
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
int
mys_owner_limit(struct conn *c, const struct mutation *m)
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
int
mys_save_snapshot(struct conn *c, const struct mutation *m)
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
int
mys_commit_batch(struct conn *c, struct mutation *const *muts, size_t n)
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
