/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mysql/outbox.c: room_outbox: the claim (SELECT ... FOR UPDATE SKIP LOCKED
 * over ix_outbox_due, then UPDATEs by id list; ordered: one snapshot, fenced
 * heads), complete (fenced by locked_by, by id list per run of equal outcomes),
 * list/get/replay for operators, counts and purge in chunks.
 */
#include "store/mysql/internal.h"

#include "core/crash.h"
#include "core/err.h"
#include "core/log.h"
#include "core/sink_bits.h"
#include "core/xmalloc.h"

#include <mysqld_error.h>

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OUTBOX_COLS STORE_OUTBOX_COLS
#define OUTBOX_TYPES "isssssibsiiiisbiiiss"
/* The columns of OUTBOX_COLS: a statement's own columns come after them. */
#define OUTBOX_NCOLS STORE_OUTBOX_NCOLS

/* The seed's columns are the truth for every row, whoever wrote it
 * (docs/migrate.md): a row is due when pending, retryable with
 * next_retry_at_ms reached, or delivering with its lock expired; published,
 * delivered and failed rows never are. due_at_ms is roomd's index of that:
 * every claim checks the seed's columns too (SEED_DUE, parameters now, now),
 * and mys_outbox_reconcile derives due_at_ms for rows another writer left
 * without it (or with one their status contradicts). */
#define SEED_DUE                                                                                   \
    "(status='pending' OR (status='retryable' AND COALESCE(next_retry_at_ms,0)<=?)"                \
    " OR (status='delivering' AND COALESCE(lock_until_ms,0)<=?))"
/* The claim follows ix_outbox_due exactly (range on due_at_ms, ordered by
 * (due_at_ms, id)): no filesort, so SKIP LOCKED locks only the rows it
 * returns, and delivered rows (due_at_ms NULL) are never read. */
MYS_SQL(CLAIM_SELECT, "SELECT " OUTBOX_COLS " FROM room_outbox FORCE INDEX (ix_outbox_due)"
                      " WHERE due_at_ms<=? AND " SEED_DUE " ORDER BY due_at_ms, id LIMIT ?"
                      " FOR UPDATE SKIP LOCKED");
/* A claim's and a completion's rows are written OUTBOX_IN ids per statement
 * ("id IN (...)": one range over the primary key, optimized once), not one
 * execution per row: with array binding the server plans and runs each row
 * as its own UPDATE, ~0.1 ms each under load (issue 13). A short chunk is
 * padded with its last id (the server drops repeated list values, so the
 * affected count is the distinct rows). FORCE INDEX (PRIMARY): left to
 * itself the optimizer ranges a completion over ix_outbox_status (status,
 * id), which the UPDATE rewrites, and buffers the rows first: 1.9-2.5 ms
 * for 32 rows against 0.5-0.9 ms by the primary key (ANALYZE, 40000 rows). */
#define OUTBOX_IN 32
#define OUTBOX_IN_LIST MYS_IN_16 "," MYS_IN_16
#define OUTBOX_PAIRS 16 /* (id, updated_at_ms) pairs per fenced claim */
#define OUTBOX_PAIRS_4 "(?,?),(?,?),(?,?),(?,?)"
#define OUTBOX_PAIR_LIST OUTBOX_PAIRS_4 "," OUTBOX_PAIRS_4 "," OUTBOX_PAIRS_4 "," OUTBOX_PAIRS_4
/* Takes rows that are still due (the plain claim's rows, locked by its
 * SELECT; an ordered claim's rows after the heads it holds). */
MYS_SQL(CLAIM_IDS, "UPDATE room_outbox FORCE INDEX (PRIMARY) SET status='delivering', locked_by=?,"
                   " lock_until_ms=?, due_at_ms=?, updated_at_ms=?"
                   " WHERE id IN (" OUTBOX_IN_LIST ") AND due_at_ms<=? AND " SEED_DUE);
/* outbox_worker.ordering per_room (store_outbox_claim_ordered), per sink
 * (docs/outbox.md, per-room order), consistent (non-locking) reads of one
 * snapshot. CLAIM_WAITING: the rooms with a row waiting (locked, or
 * retryable not yet due: due_at_ms > now) and the sinks those rows lack
 * (w_bits: BIT_OR of SINK_BITS_ALL & ~sinks_done; a sink no row of the room
 * has is lacked by all its rows alike, so it never decides), one
 * materialized range of ix_outbox_due (the rows in flight and the retries
 * ahead), not a probe per candidate: with every room busy the scan passes
 * over the whole backlog (1M-row table, 19900 rows behind 100 busy heads:
 * 74 s with a NOT EXISTS probe per row, 1.2 s so, on a loaded machine).
 * CLAIM_ROOMS: the rooms of the due rows that lack a sink their room's
 * waiting rows do not (CLAIM_LACKS), in claim order, with those rows' sinks
 * (c_w). Then a room's such rows in id order, with updated_at_ms (the
 * first one's fence), due_at_ms and c_w (the rows' held_sinks). The run
 * ranges over ix_outbox_room: a room's undelivered rows only. */
#define CLAIM_WAITING(cond)                                                                        \
    "SELECT e.app_code AS w_app, e.room_id AS w_room,"                                             \
    " BIT_OR(" SINK_BITS_ALL_SQL " & ~e.sinks_done) AS w_bits"                                     \
    " FROM room_outbox e FORCE INDEX (ix_outbox_due) WHERE " cond                                  \
    " GROUP BY e.app_code, e.room_id"
#define WAIT_DUE "e.due_at_ms>?"
/* parked (store_outbox_park): a due row that lacks none of the sinks ? (the
 * enabled sinks whose circuit is closed) is not claimed and holds its room
 * as a waiting row does */
#define WAIT_PARKED "e.due_at_ms IS NOT NULL AND (e.due_at_ms>? OR (? & ~e.sinks_done)=0)"
#define NOT_PARKED " AND (? & ~o.sinks_done)<>0"
#define CLAIM_LACKS(w, p) "(" SINK_BITS_ALL_SQL " & ~o.sinks_done & ~COALESCE(" w ",0))<>0" p
#define CLAIM_ROOMS(cond, p)                                                                       \
    "SELECT o.app_code, o.room_id, COALESCE(w.w_bits,0) AS c_w"                                    \
    " FROM room_outbox o FORCE INDEX (ix_outbox_due)"                                              \
    " LEFT JOIN (" CLAIM_WAITING(cond) ") w ON w.w_app=o.app_code AND w.w_room=o.room_id"          \
                                       " WHERE o.due_at_ms<=? AND " SEED_DUE " AND " CLAIM_LACKS(  \
                                           "w.w_bits", p) " ORDER BY o.due_at_ms, o.id LIMIT ?"
/* The rooms and their runs in one statement (one snapshot, one round trip
 * instead of one per room; issue 13): every due row of those rooms that
 * lacks a sink their waiting rows do not, in id order up to the limit, so
 * each room's rows are a prefix of those. */
/* (a row the seed's columns say is not due reads as due at INT64_MAX: its
 * room's run ends before it) */
#define CLAIM_RUNS(cond, p)                                                                        \
    "SELECT " OUTBOX_COLS ", updated_at_ms,"                                                       \
    " IF(" SEED_DUE ", due_at_ms, 9223372036854775807), r.r_w FROM (SELECT DISTINCT"               \
    " c.app_code AS r_app, c.room_id AS r_room, c.c_w AS r_w"                                      \
    " FROM (" CLAIM_ROOMS(                                                                         \
        cond, p) ") c) r"                                                                          \
                 " STRAIGHT_JOIN room_outbox o FORCE INDEX (ix_outbox_room)"                       \
                 " ON o.app_code=r.r_app AND o.room_id=r.r_room AND o.due_at_ms IS NOT NULL"       \
                 " WHERE o.due_at_ms<=? AND (NOT " SEED_DUE                                        \
                 " OR (" CLAIM_LACKS("r.r_w", p) "))"                                              \
                                                 " ORDER BY o.id LIMIT ?"
MYS_SQL(CLAIM_RUNS, CLAIM_RUNS(WAIT_DUE, ""));
MYS_SQL(CLAIM_RUNS_PARKED, CLAIM_RUNS(WAIT_PARKED, NOT_PARKED));
/* Takes rooms' heads unless they changed since the snapshot (claimed,
 * completed or released by someone else: updated_at_ms moved, or no longer
 * due): (id, updated_at_ms) pairs, a range over the primary key. An UPDATE
 * waits for a row another claimer's short transaction holds, then sees its
 * latest version. Whoever holds the head holds the room. */
MYS_SQL(CLAIM_FENCED, "UPDATE room_outbox FORCE INDEX (PRIMARY) SET status='delivering',"
                      " locked_by=?,"
                      " lock_until_ms=?, due_at_ms=?, updated_at_ms=?"
                      " WHERE (id, updated_at_ms) IN (" OUTBOX_PAIR_LIST ") AND due_at_ms<=?"
                      " AND " SEED_DUE);
MYS_SQL(COMPLETE, "UPDATE room_outbox SET status=?, retry_count=?, sinks_done=?,"
                  " next_retry_at_ms=?, lock_until_ms=NULL, locked_by=NULL, last_error=?,"
                  " due_at_ms=?,"
                  " updated_at_ms=?, delivered_at_ms=?"
                  " WHERE id=? AND status='delivering' AND locked_by=?");
/* The same outcome (no last_error) for up to OUTBOX_IN rows of one claimer. */
MYS_SQL(COMPLETE_IDS, "UPDATE room_outbox FORCE INDEX (PRIMARY) SET status=?, retry_count=?,"
                      " sinks_done=?,"
                      " next_retry_at_ms=?, lock_until_ms=NULL, locked_by=NULL, last_error=NULL,"
                      " due_at_ms=?, updated_at_ms=?, delivered_at_ms=?"
                      " WHERE id IN (" OUTBOX_IN_LIST ") AND status='delivering' AND locked_by=?");
MYS_SQL(LIST_ALL, "SELECT " OUTBOX_COLS " FROM room_outbox WHERE id>? ORDER BY id LIMIT ?");
MYS_SQL(LIST_STATUS, "SELECT " OUTBOX_COLS " FROM room_outbox"
                     " WHERE status IN (?,?) AND id>? ORDER BY id LIMIT ?");
MYS_SQL(GET, "SELECT " OUTBOX_COLS " FROM room_outbox WHERE event_id=?");
MYS_SQL(REPLAY, "UPDATE room_outbox SET " MYS_OUTBOX_REPLAY_SET ", due_at_ms=?, updated_at_ms=?"
                " WHERE event_id=? AND status='failed'");
MYS_SQL(STATUS_OF, "SELECT status FROM room_outbox WHERE event_id=?");
MYS_SQL(COUNTS, "SELECT status, COUNT(*) FROM room_outbox GROUP BY status");
MYS_SQL(OLDEST, STORE_OUTBOX_OLDEST_SQL);
MYS_SQL(PURGE, "DELETE FROM room_outbox WHERE delivered_at_ms<?"
               " AND status IN ('delivered','published') ORDER BY delivered_at_ms LIMIT ?");

/* Reads the row of r (OUTBOX_COLS) into dst (struct outbox_row). */
static void
read_outbox(const struct rows *r, void *dst)
{
    struct outbox_row *o = dst;

    memset(o, 0, sizeof(*o));
    o->id = r_i64(r, 0);
    strlcpy_(o->event_id, r_str(r, 1), sizeof(o->event_id));
    strlcpy_(o->app_code, r_str(r, 2), sizeof(o->app_code));
    strlcpy_(o->room_id, r_str(r, 3), sizeof(o->room_id));
    strlcpy_(o->command_id, r_str(r, 4), sizeof(o->command_id));
    strlcpy_(o->event_type, r_str(r, 5), sizeof(o->event_type));
    o->room_version = r_i64(r, 6);
    o->payload_len = r->len[7];
    o->payload = xmalloc(o->payload_len + 1);
    memcpy(o->payload, r->s[7], o->payload_len);
    o->status = outbox_status_read(r_str(r, 8));
    o->retry_count = (int)r_i64(r, 9);
    o->sinks_done = (uint32_t)r_i64(r, 10);
    o->next_retry_at_ms = r_i64(r, 11);
    o->lock_until_ms = r_i64(r, 12);
    if (r_str(r, 13) != NULL)
        strlcpy_(o->locked_by, r_str(r, 13), sizeof(o->locked_by));
    o->last_error = xstrdup(r_str(r, 14));
    o->created_at_ms = r_i64(r, 15);
    o->delivered_at_ms = r_i64(r, 16);
    o->room_seq = r_i64(r, 17);
    if (r_str(r, 18) != NULL)
        strlcpy_(o->request_id, r_str(r, 18), sizeof(o->request_id));
    if (r_str(r, 19) != NULL)
        strlcpy_(o->traceparent, r_str(r, 19), sizeof(o->traceparent));
}

/* Reads every row of r into a growing array (*rows, *n). */
static int
read_outbox_rows(struct conn *c, struct rows *r, struct outbox_row **rows, size_t *n)
{
    size_t cap = 0;
    int rc;

    while ((rc = mys_st_fetch(c, r)) == 1) {
        *rows = xgrow(*rows, *n, &cap, sizeof(**rows));
        read_outbox(r, &(*rows)[(*n)++]);
    }
    return rc;
}

struct claim_ctx {
    int64_t now, until;
    const char *by;
    int limit;
    bool per_room;
    struct outbox_row *rows;
    size_t n;
    bool *head;    /* ordered claim: rows[i] is its room's head */
    uint32_t park; /* store_outbox_park's mask (0: none parked) */
};

/* Copies into ids the ids of x->rows[from..to) that are heads (heads) or
 * not (!heads), every row when x->head is NULL, and with seen their
 * updated_at_ms as read into picked_seen. Returns how many. */
static size_t
pick_ids(const struct claim_ctx *x, size_t from, size_t to, bool heads, const int64_t *seen,
         int64_t *ids, int64_t *picked_seen)
{
    size_t n = 0;

    for (size_t i = from; i < to; i++) {
        if (x->head != NULL && x->head[i] != heads)
            continue;
        if (seen != NULL)
            picked_seen[n] = seen[i];
        ids[n++] = x->rows[i].id;
    }
    return n;
}

/* Claims for x the rows ids[0..n), OUTBOX_IN (OUTBOX_PAIRS with seen) per
 * statement: each row still due and, with seen (their updated_at_ms as
 * read), unchanged since (SQL_CLAIM_FENCED), else SQL_CLAIM_IDS. *taken gets
 * the rows written. Returns 0 or a negative code. */
static int
claim_ids(struct conn *c, const struct claim_ctx *x, const int64_t *ids, const int64_t *seen,
          size_t n, uint64_t *taken)
{
    size_t per = seen != NULL ? OUTBOX_PAIRS : OUTBOX_IN;

    *taken = 0;
    for (size_t from = 0; from < n; from += per) {
        size_t m = n - from < per ? n - from : per;
        struct params p;
        uint64_t aff = 0;
        int rc;

        PARAMS_INIT(&p);
        p_str(&p, x->by);
        p_i64(&p, x->until);
        p_i64(&p, x->until);
        p_i64(&p, x->now);
        for (size_t k = 0; k < per; k++) {
            size_t j = from + (k < m ? k : m - 1);

            p_i64(&p, ids[j]);
            if (seen != NULL)
                p_i64(&p, seen[j]);
        }
        p_i64(&p, x->now);
        p_i64(&p, x->now); /* SEED_DUE */
        p_i64(&p, x->now);
        if ((rc = mys_st_exec(c, seen != NULL ? &SQL_CLAIM_FENCED : &SQL_CLAIM_IDS, &p, &aff)) != 0)
            return rc;
        *taken += aff;
    }
    return 0;
}

static int claim_rest(struct conn *c, struct claim_ctx *x, size_t from, size_t to);

/* Takes the room run x->rows[from..to): its head fenced by seen[from], the
 * rest in claim_rest. Returns 1 taken, 0 not (another claimer holds or
 * held the room since the snapshot), or a negative code. */
static int
claim_room_run(struct conn *c, struct claim_ctx *x, size_t from, size_t to, const int64_t *seen)
{
    uint64_t got = 0;
    int rc = claim_ids(c, x, &x->rows[from].id, &seen[from], 1, &got);

    if (rc != 0 || got != 1 || to - from == 1)
        return rc != 0 ? rc : got == 1;
    rc = claim_rest(c, x, from + 1, to);
    return rc != 0 ? rc : 1;
}

/* Takes the rows x->rows[from..to) that are not heads, in runs whose heads
 * this claim holds; all must still be due. */
static int
claim_rest(struct conn *c, struct claim_ctx *x, size_t from, size_t to)
{
    int64_t *ids = xcalloc(to - from + 1, sizeof(*ids));
    size_t rest = pick_ids(x, from, to, false, NULL, ids, NULL);
    uint64_t aff = 0;
    int rc = claim_ids(c, x, ids, NULL, rest, &aff);

    free(ids);
    if (rc == 0 && aff != rest) {
        /* another node's claim took some of them meanwhile (its snapshot saw
         * an earlier row of the room done that ours did not): again */
        store_set_errmsg("ordered claim: %llu of %zu rows after their heads changed meanwhile",
                         (unsigned long long)(rest - aff), rest);
        c->err = ER_LOCK_DEADLOCK; /* as a deadlock: mys_run rolls back and runs the claim again */
        return ROOMD_ECONFLICT;
    }
    return rc;
}
/* A row of the runs as read, with its fence and due time. */
struct cand {
    struct outbox_row row;
    int64_t seen, due;
};

static int
cmp_cand(const void *a, const void *b)
{
    const struct outbox_row *x = &((const struct cand *)a)->row;
    const struct outbox_row *y = &((const struct cand *)b)->row;
    int c = strcmp(x->app_code, y->app_code);

    if (c == 0)
        c = strcmp(x->room_id, y->room_id);
    return c != 0 ? c : (x->id > y->id) - (x->id < y->id);
}

/* Reads the rooms' runs (SQL_CLAIM_RUNS, one snapshot) into x->rows,
 * grouped by room, each room's rows in id order from its first one (x->head),
 * each row's updated_at_ms in (*seen)[i] and the sinks its room's waiting
 * rows lack in held_sinks; a room's rows from its first one the seed's
 * columns say is not due on are left out. */
static int
read_runs(struct conn *c, struct claim_ctx *x, int64_t **seen)
{
    struct rows r;
    struct cand *cd = NULL;
    size_t n = 0, cap = 0;
    bool ended = false;
    int rc;

    int64_t u = x->park;

    if (x->park == 0)
        rc = mys_query(c, &SQL_CLAIM_RUNS, &r, OUTBOX_TYPES "iii", "iiiiiidiiid", x->now, x->now,
                       x->now, x->now, x->now, x->now, x->limit, x->now, x->now, x->now, x->limit);
    else
        rc = mys_query(c, &SQL_CLAIM_RUNS_PARKED, &r, OUTBOX_TYPES "iii", "iiiiiiiidiiiid", x->now,
                       x->now, x->now, u, x->now, x->now, x->now, u, x->limit, x->now, x->now,
                       x->now, u, x->limit);
    if (rc == 0)
        while ((rc = mys_st_fetch(c, &r)) == 1) {
            cd = xgrow(cd, n, &cap, sizeof(*cd));
            read_outbox(&r, &cd[n].row);
            cd[n].seen = r_i64(&r, OUTBOX_NCOLS);
            cd[n].due = r_i64(&r, OUTBOX_NCOLS + 1);
            cd[n].row.held_sinks =
                (uint32_t)r_i64(&r, OUTBOX_NCOLS + 2) & SINK_BITS_ALL & ~cd[n].row.sinks_done;
            n++;
        }
    mys_rows_done(&r);
    if (n > 1)
        qsort(cd, n, sizeof(*cd), cmp_cand);
    x->rows = xcalloc(n > 0 ? n : 1, sizeof(*x->rows));
    x->head = xcalloc(n > 0 ? n : 1, sizeof(*x->head));
    *seen = xcalloc(n > 0 ? n : 1, sizeof(**seen));
    for (size_t i = 0; i < n; i++) {
        bool first = i == 0 || strcmp(cd[i - 1].row.app_code, cd[i].row.app_code) != 0 ||
                     strcmp(cd[i - 1].row.room_id, cd[i].row.room_id) != 0;

        ended = (ended && !first) || cd[i].due > x->now;
        if (rc != 0 || ended) {
            free(cd[i].row.payload);
            free(cd[i].row.last_error);
            continue;
        }
        x->head[x->n] = first;
        (*seen)[x->n] = cd[i].seen;
        x->rows[x->n++] = cd[i].row;
    }
    free(cd);
    return rc;
}

/* Takes every head of x->rows, fenced (claim_ids). Returns 1 when all
 * were taken; 0 when another claimer took some since the snapshot (the
 * UPDATE is undone: savepoint), or a negative code. */
static int
claim_heads(struct conn *c, struct claim_ctx *x, const int64_t *seen, size_t nheads)
{
    int64_t *ids = xcalloc(nheads, sizeof(*ids)), *fence = xcalloc(nheads, sizeof(*fence));
    uint64_t aff = 0;
    int rc;

    if ((rc = mys_q_exec(c, "SAVEPOINT heads")) == 0) {
        pick_ids(x, 0, x->n, true, seen, ids, fence);
        rc = claim_ids(c, x, ids, fence, nheads, &aff);
    }
    free(ids);
    free(fence);
    if (rc != 0 || aff == nheads)
        return rc != 0 ? rc : 1;
    return (rc = mys_q_exec(c, "ROLLBACK TO SAVEPOINT heads")) != 0 ? rc : 0;
}

/* Takes the runs of x->rows room by room (claim_room_run) and keeps those
 * whose head it got. Returns 0 or a negative code. */
static int
claim_each_room(struct conn *c, struct claim_ctx *x, const int64_t *seen)
{
    size_t kept = 0;

    for (size_t from = 0, to; from < x->n; from = to) {
        for (to = from + 1; to < x->n && !x->head[to];)
            to++;
        int rc = claim_room_run(c, x, from, to, seen);
        if (rc < 0) { /* x->rows stays whole for the caller to free */
            memmove(&x->rows[kept], &x->rows[from], (x->n - from) * sizeof(*x->rows));
            x->n = kept + (x->n - from);
            return rc;
        }
        for (size_t i = from; i < to; i++) {
            if (rc == 0) {
                free(x->rows[i].payload);
                free(x->rows[i].last_error);
            } else {
                x->rows[kept++] = x->rows[i];
            }
        }
    }
    x->n = kept;
    return 0;
}

/*
 * The ordered claim inside the open transaction: one snapshot gives the rooms and each room's run
 * from its first claimable row (its head); each run is taken by fencing its head (updated_at_ms
 * unchanged and still due, read at the latest version), so two claimers never take one room's
 * claimable rows at once: only the head's holder takes the rows after it. (Another claimer may
 * hold earlier rows of the room, those the waiting rows are; the run's held_sinks are what those
 * lack, so the two deliver different sinks.) All heads are fenced by id lists and the rest taken by
 * others (claim_ids); when some head was taken meanwhile, those UPDATEs are undone (savepoint) and
 * the runs are taken room by room, dropping those whose head is someone else's.
 */
static int
claim_ordered_in_tx(struct conn *c, struct claim_ctx *x)
{
    int64_t *seen = NULL;
    size_t nheads = 0;
    int rc;

    if ((rc = read_runs(c, x, &seen)) == 0 && x->n > 0) {
        for (size_t i = 0; i < x->n; i++)
            nheads += x->head[i];
        rc = nheads > 1 ? claim_heads(c, x, seen, nheads) : 0;
        if (rc == 1)
            rc = claim_rest(c, x, 0, x->n);
        else if (rc == 0)
            rc = claim_each_room(c, x, seen);
    }
    free(x->head);
    x->head = NULL;
    free(seen);
    return rc;
}

/* The claim's statements inside the open transaction: the rows (locked by
 * the SELECT), then their lock (claim_ids); per_room: claim_ordered_in_tx. */
static int
claim_in_tx(struct conn *c, struct claim_ctx *x)
{
    struct rows r;
    int64_t *ids;
    uint64_t taken;
    int rc;

    outbox_rows_free(x->rows, x->n);
    x->rows = NULL;
    x->n = 0;
    if (x->per_room)
        return claim_ordered_in_tx(c, x);
    if ((rc = mys_query(c, &SQL_CLAIM_SELECT, &r, OUTBOX_TYPES, "iiid", x->now, x->now, x->now,
                        x->limit)) == 0)
        rc = read_outbox_rows(c, &r, &x->rows, &x->n);
    mys_rows_done(&r);
    if (rc != 0)
        return rc;
    ids = xcalloc(x->n + 1, sizeof(*ids));
    pick_ids(x, 0, x->n, false, NULL, ids, NULL); /* x->head is NULL: every row */
    rc = claim_ids(c, x, ids, NULL, x->n, &taken);
    free(ids);
    return rc;
}

/* The claimed rows as the caller sees them, after the commit. */
static void
claimed(struct claim_ctx *x)
{
    outbox_rows_sort(x->rows, x->n); /* by id, as SQLite returns them */
    for (size_t i = 0; i < x->n; i++) {
        x->rows[i].status = OUTBOX_DELIVERING;
        x->rows[i].lock_until_ms = x->until;
        strlcpy_(x->rows[i].locked_by, x->by, sizeof(x->rows[i].locked_by));
    }
}

static int
claim_fn(struct conn *c, void *arg)
{
    struct claim_ctx *x = arg;
    int rc;

    if ((rc = mys_tx_begin(c)) != 0)
        return rc;
    if ((rc = claim_in_tx(c, x)) != 0 || (rc = mys_tx_commit(c)) != 0)
        return rc;
    claimed(x);
    return 0;
}

/* Runs fn on arg (by mys_run_tx when tx: a claim, one transaction), which
 * fills the array got (ngot rows), and hands that array to the caller's rows
 * and n; an ordered claim (ordered: fn's whole
 * transaction, with the completion before it) under the store's claim_mu.
 * This process's ordered claims so take turns, each snapshot after the
 * previous claim's commit, and two workers' claims never pick the same rooms
 * (with two workers in parallel a fifth of the claims came back empty or
 * short, each paying a snapshot, a failed fence and the room-by-room path;
 * issue 13). The holder waits only for row locks of transactions that never
 * take claim_mu (other processes', completions alone), so no wait cycle.
 * Returns 0, or the failure with the array freed. */
static int
run_for_rows(struct store *s, mys_txn_fn fn, void *arg, bool tx, bool ordered,
             struct outbox_row **got, size_t *ngot, struct outbox_row **rows, size_t *n)
{
    struct mstore *m = (struct mstore *)s;
    int rc;

    if (ordered)
        pthread_mutex_lock(&m->claim_mu);
    rc = tx ? mys_run_tx(m, fn, arg) : mys_run(m, fn, arg);
    if (ordered)
        pthread_mutex_unlock(&m->claim_mu);

    if (rc != 0) {
        outbox_rows_free(*got, *ngot);
        return rc;
    }
    *rows = *got;
    *n = *ngot;
    return 0;
}

/* mys_outbox_reconcile's statements (no parameters: the seed's columns
 * give everything). Ranges of ix_outbox_status_due (status, due_at_ms):
 * the pending rows without due_at_ms, the retryable and delivering rows
 * (few: failures and rows in flight), the done rows with a due_at_ms. */
#define RECONCILE_DUE                                                                              \
    "UPDATE room_outbox FORCE INDEX (ix_outbox_status_due) SET due_at_ms=CASE status"              \
    " WHEN 'pending' THEN created_at_ms WHEN 'retryable' THEN COALESCE(next_retry_at_ms,0)"        \
    " ELSE COALESCE(lock_until_ms,0) END"                                                          \
    " WHERE (status='pending' AND due_at_ms IS NULL)"                                              \
    " OR (status='retryable' AND NOT (due_at_ms <=> COALESCE(next_retry_at_ms,0)))"                \
    " OR (status='delivering' AND NOT (due_at_ms <=> COALESCE(lock_until_ms,0)))"
#define RECONCILE_DONE                                                                             \
    "UPDATE room_outbox FORCE INDEX (ix_outbox_status_due) SET due_at_ms=NULL"                     \
    " WHERE status IN ('delivered','published','failed') AND due_at_ms IS NOT NULL"

int
mys_outbox_reconcile_on(struct conn *c, uint64_t *fixed)
{
    uint64_t n = 0;
    int rc;

    *fixed = 0;
    if ((rc = mys_q_exec(c, RECONCILE_DUE)) != 0)
        return rc;
    n = mysql_affected_rows(c->db);
    if ((rc = mys_q_exec(c, RECONCILE_DONE)) != 0)
        return rc;
    *fixed = n + mysql_affected_rows(c->db);
    return 0;
}

static int
reconcile_fn(struct conn *c, void *arg)
{
    return mys_outbox_reconcile_on(c, arg);
}

/* At most once per RECONCILE_EVERY_MS per store, before a claim: rows
 * another writer inserted or changed (docs/migrate.md) become claimable
 * within about a second. A failure is left to the claim that follows. */
#define RECONCILE_EVERY_MS 1000

static void
reconcile_due(struct store *s, int64_t now_ms)
{
    struct mstore *m = (struct mstore *)s;
    int64_t last = atomic_load(&m->reconciled_ms);
    uint64_t fixed = 0;

    if (now_ms - last < RECONCILE_EVERY_MS ||
        !atomic_compare_exchange_strong(&m->reconciled_ms, &last, now_ms))
        return;
    if (mys_run(m, reconcile_fn, &fixed) == 0 && fixed > 0)
        log_info("store", "outbox rows of another writer made claimable", "rows=%llu",
                 (unsigned long long)fixed);
}

int
mys_outbox_claim(struct store *s, int64_t now_ms, int64_t lock_until_ms, const char *locked_by,
                 int limit, bool per_room, struct outbox_row **rows, size_t *n)
{
    struct claim_ctx x = {now_ms, lock_until_ms, locked_by,
                          limit,  per_room,      NULL,
                          0,      NULL,          atomic_load(&s->outbox_park)};

    *rows = NULL;
    *n = 0;
    if (limit <= 0)
        return 0;
    reconcile_due(s, now_ms);
    return run_for_rows(s, claim_fn, &x, true, per_room, &x.rows, &x.n, rows, n);
}

struct complete_ctx {
    struct outbox_result *res;
    size_t n;
};

static void
fill_complete(struct bulk *k, size_t row, const struct outbox_result *r)
{
    struct outbox_outcome o;

    outbox_outcome_of(r, &o);
    bk_str(k, 0, row, o.status);
    bk_i64(k, 1, row, r->retry_count);
    bk_i64(k, 2, row, (int64_t)r->sinks_done);
    if (o.retryable) {
        bk_i64(k, 3, row, o.retry_at_ms);
        bk_i64(k, 5, row, o.retry_at_ms);
    } else {
        bk_null(k, 3, row);
        bk_null(k, 5, row);
    }
    if (o.last_error != NULL)
        bk_bytes(k, 4, row, o.last_error, o.last_error_len);
    else
        bk_null(k, 4, row);
    bk_i64(k, 6, row, r->now_ms);
    if (o.delivered)
        bk_i64(k, 7, row, r->now_ms);
    else
        bk_null(k, 7, row);
    bk_i64(k, 8, row, r->id);
    bk_str(k, 9, row, r->locked_by);
}

#define COMPLETE_TYPES "siiibiiiis"

/* Whether a and b write the same columns (SQL_COMPLETE_IDS: the
 * same outcome at the same time, no last_error, one claimer). */
static bool
same_outcome(const struct outbox_result *a, const struct outbox_result *b)
{
    return a->status == b->status && a->retry_count == b->retry_count &&
           a->sinks_done == b->sinks_done && a->next_retry_at_ms == b->next_retry_at_ms &&
           a->now_ms == b->now_ms && a->last_error == NULL && b->last_error == NULL &&
           strcmp(a->locked_by, b->locked_by) == 0;
}

/* Writes res[0..m) (1 <= m <= OUTBOX_IN, the same outcome: same_outcome)
 * in one SQL_COMPLETE_IDS; *aff gets the rows written. */
static int
complete_ids(struct conn *c, const struct outbox_result *res, size_t m, uint64_t *aff)
{
    struct outbox_outcome o;
    struct params p;

    outbox_outcome_of(&res[0], &o);
    PARAMS_INIT(&p);
    p_str(&p, o.status);
    p_i64(&p, res[0].retry_count);
    p_i64(&p, (int64_t)res[0].sinks_done);
    for (int k = 0; k < 2; k++) /* next_retry_at_ms, due_at_ms */
        if (o.retryable)
            p_i64(&p, o.retry_at_ms);
        else
            p_null(&p);
    p_i64(&p, res[0].now_ms);
    if (o.delivered)
        p_i64(&p, res[0].now_ms);
    else
        p_null(&p);
    for (size_t k = 0; k < OUTBOX_IN; k++)
        p_i64(&p, res[k < m ? k : m - 1].id);
    p_str(&p, res[0].locked_by);
    return mys_st_exec(c, &SQL_COMPLETE_IDS, &p, aff);
}

/* All outcomes of x in few statements: runs of the same outcome
 * (same_outcome, the common case: a batch delivered at once) OUTBOX_IN per
 * SQL_COMPLETE_IDS, the rest (a last_error to write) in one bulk
 * SQL_COMPLETE. *aff gets the rows written. */
static int
complete_grouped(struct conn *c, struct complete_ctx *x, uint64_t *aff)
{
    struct bulk k;
    size_t nerr = 0;
    uint64_t got;
    int rc = 0;

    *aff = 0;
    for (size_t i = 0; i < x->n; i++)
        nerr += x->res[i].last_error != NULL;
    for (size_t i = 0, m; i < x->n && rc == 0; i += m) {
        m = 1;
        if (x->res[i].last_error != NULL)
            continue;
        while (i + m < x->n && m < OUTBOX_IN && same_outcome(&x->res[i], &x->res[i + m]))
            m++;
        if ((rc = complete_ids(c, &x->res[i], m, &got)) == 0)
            *aff += got;
    }
    if (rc != 0 || nerr == 0)
        return rc;
    mys_bulk_init(&k, COMPLETE_TYPES, nerr);
    for (size_t i = 0, j = 0; i < x->n; i++)
        if (x->res[i].last_error != NULL)
            fill_complete(&k, j++, &x->res[i]);
    rc = mys_st_bulk(c, &SQL_COMPLETE, &k, &got);
    mys_bulk_free(&k);
    *aff += got;
    return rc;
}

/* The outcomes inside the open transaction: complete_grouped when every
 * fence holds (the common case); otherwise the transaction is rolled back
 * and begun again, and they are written one row at a time to tell which
 * ones were refused. */
static int
complete_in_tx(struct conn *c, struct complete_ctx *x)
{
    struct bulk k;
    uint64_t aff = 0;
    int rc;

    for (size_t i = 0; i < x->n; i++)
        x->res[i].rc = 0;
    if (x->n > 1) {
        if ((rc = complete_grouped(c, x, &aff)) == 0 && aff == x->n)
            test_crash("in_complete"); /* written, not committed */
        if (rc != 0 || aff == x->n)
            return rc;
        mys_tx_rollback(c);
        if ((rc = mys_tx_begin(c)) != 0)
            return rc;
    }
    for (size_t i = 0; i < x->n; i++) {
        mys_bulk_init(&k, COMPLETE_TYPES, 1);
        fill_complete(&k, 0, &x->res[i]);
        rc = mys_st_bulk(c, &SQL_COMPLETE, &k, &aff);
        mys_bulk_free(&k);
        if (rc != 0)
            return rc;
        x->res[i].rc = aff == 1 ? 0 : ROOMD_ESTALE;
    }
    if (x->n > 0)
        test_crash("in_complete"); /* written, not committed */
    return 0;
}

static int
complete_fn(struct conn *c, void *arg)
{
    int rc;

    if ((rc = mys_tx_begin(c)) != 0 || (rc = complete_in_tx(c, arg)) != 0)
        return rc;
    return mys_tx_commit(c);
}

int
mys_outbox_complete(struct store *s, struct outbox_result *res, size_t n)
{
    struct complete_ctx x = {res, n};
    int rc;

    if (n == 0)
        return 0;
    rc = mys_run_tx((struct mstore *)s, complete_fn, &x);
    if (rc != 0)
        for (size_t i = 0; i < n; i++)
            res[i].rc = rc;
    return rc;
}

struct complete_claim_ctx {
    struct complete_ctx done;
    struct claim_ctx next;
};

/* Batch k's outcomes and batch k+1's claim, one transaction: one commit
 * (one redo log fsync) per batch. The completion comes first, so the rows
 * it hands back (retryable now) may be claimed again at once, and the
 * ordered claim's snapshot (its first consistent read comes after the
 * completion's writes, which the transaction sees) finds the completed
 * rows' rooms free. */
static int
complete_claim_fn(struct conn *c, void *arg)
{
    struct complete_claim_ctx *x = arg;
    int rc;

    if ((rc = mys_tx_begin(c)) != 0)
        return rc;
    if ((x->done.n > 0 && (rc = complete_in_tx(c, &x->done)) != 0) ||
        (rc = claim_in_tx(c, &x->next)) != 0 || (rc = mys_tx_commit(c)) != 0)
        return rc;
    claimed(&x->next);
    return 0;
}

int
mys_outbox_complete_claim(struct store *s, struct outbox_result *res, size_t nres, int64_t now_ms,
                          int64_t lock_until_ms, const char *locked_by, int limit, bool per_room,
                          struct outbox_row **rows, size_t *n, bool *completed)
{
    struct complete_claim_ctx x = {{res, nres},
                                   {now_ms, lock_until_ms, locked_by, limit, per_room, NULL, 0,
                                    NULL, atomic_load(&s->outbox_park)}};
    int rc;

    *rows = NULL;
    *n = 0;
    *completed = false;
    reconcile_due(s, now_ms);
    rc = run_for_rows(s, complete_claim_fn, &x, true, per_room, &x.next.rows, &x.next.n, rows, n);
    *completed = rc == 0;
    return rc;
}

struct list_ctx {
    int status;
    int64_t after_id;
    int limit;
    struct outbox_row *rows;
    size_t n;
};

static int
list_fn(struct conn *c, void *arg)
{
    struct list_ctx *x = arg;
    struct rows r;
    int rc;

    outbox_rows_free(x->rows, x->n);
    x->rows = NULL;
    x->n = 0;
    if (x->status < 0) {
        rc = mys_query(c, &SQL_LIST_ALL, &r, OUTBOX_TYPES, "id", x->after_id, x->limit);
    } else {
        const char *name = outbox_status_name((enum outbox_status)x->status);
        const char *legacy = x->status == OUTBOX_DELIVERED ? "published" : name;

        rc = mys_query(c, &SQL_LIST_STATUS, &r, OUTBOX_TYPES, "ssid", name, legacy, x->after_id,
                       x->limit);
    }
    if (rc == 0)
        rc = read_outbox_rows(c, &r, &x->rows, &x->n);
    mys_rows_done(&r);
    return rc;
}

int
mys_outbox_list(struct store *s, int status, int64_t after_id, int limit, struct outbox_row **rows,
                size_t *n)
{
    struct list_ctx x = {status, after_id, limit, NULL, 0};

    *rows = NULL;
    *n = 0;
    if (limit <= 0)
        return 0;
    return run_for_rows(s, list_fn, &x, false, false, &x.rows, &x.n, rows, n);
}

int
mys_outbox_get(struct store *s, const char *event_id, struct outbox_row *out)
{
    struct one_ctx x = {&SQL_GET, OUTBOX_TYPES, event_id, NULL, read_outbox, out};

    memset(out, 0, sizeof(*out));
    return mys_run((struct mstore *)s, mys_one_fn, &x);
}

struct replay_ctx {
    const char *event_id;
    int64_t now;
};

static int
replay_fn(struct conn *c, void *arg)
{
    struct replay_ctx *x = arg;
    uint64_t aff = 0;
    int rc = mys_exec(c, &SQL_REPLAY, &aff, "iis", x->now, x->now, x->event_id);
    struct rows r;

    if (rc != 0 || aff == 1)
        return rc;
    if ((rc = mys_query_one(c, &SQL_STATUS_OF, &r, "s", "s", x->event_id)) >= 0)
        rc = rc == 1 ? ROOMD_ECONFLICT : ROOMD_ENOTFOUND;
    mys_rows_done(&r);
    if (rc == ROOMD_ECONFLICT)
        store_set_errmsg("outbox row %s is not failed", x->event_id);
    return rc;
}

int
mys_outbox_replay(struct store *s, const char *event_id, int64_t now_ms)
{
    struct replay_ctx x = {event_id, now_ms};

    return mys_run((struct mstore *)s, replay_fn, &x);
}

static int
counts_fn(struct conn *c, void *arg)
{
    struct outbox_counts *o = arg;
    struct rows r;
    int rc;

    memset(o, 0, sizeof(*o));
    if ((rc = mys_query(c, &SQL_COUNTS, &r, "si", "")) != 0)
        goto out;
    while ((rc = mys_st_fetch(c, &r)) == 1)
        outbox_counts_add(o, r_str(&r, 0), r_i64(&r, 1));
    if (rc < 0)
        goto out;
    mys_rows_done(&r);
    if ((rc = mys_query(c, &SQL_OLDEST, &r, "isi", "")) != 0)
        goto out;
    while ((rc = mys_st_fetch(c, &r)) == 1)
        outbox_counts_oldest(o, (uint32_t)r_i64(&r, 0), r_str(&r, 1), r_i64(&r, 2));
out:
    mys_rows_done(&r);
    return rc;
}

int
mys_outbox_counts(struct store *s, struct outbox_counts *out)
{
    return mys_run((struct mstore *)s, counts_fn, out);
}

int
mys_outbox_purge(struct store *s, int64_t delivered_before_ms, int limit, size_t *purged)
{
    /* chunks of 500, each its own short autocommit statement following
     * ix_outbox_delivered, so no lock is held for long */
    return mys_purge_chunks((struct mstore *)s, &SQL_PURGE, delivered_before_ms, limit, purged);
}

MYS_SQL(EV_HEAD, "SELECT event_seq FROM rooms WHERE app_code=? AND room_id=?");
MYS_SQL(EV_ROWS, "SELECT " OUTBOX_COLS " FROM room_outbox FORCE INDEX (ix_outbox_seq)"
                 " WHERE app_code=? AND room_id=? AND room_seq>? ORDER BY room_seq, id LIMIT ?");
MYS_SQL(EV_OLDEST, "SELECT COALESCE(MIN(room_seq), 0) FROM room_outbox FORCE INDEX (ix_outbox_seq)"
                   " WHERE app_code=? AND room_id=? AND room_seq>0");

struct events_ctx {
    const char *app, *room_id;
    int64_t after, limit;
    struct outbox_row *rows;
    size_t n;
    int64_t oldest, latest;
};

/* The head first: rows committed after it only raise what the caller sees. */
static int
events_fn(struct conn *c, void *arg)
{
    struct events_ctx *x = arg;
    struct rows r;
    int rc;

    outbox_rows_free(x->rows, x->n);
    x->rows = NULL;
    x->n = 0;
    x->oldest = 0;
    x->latest = -1;
    rc = mys_query_one(c, &SQL_EV_HEAD, &r, "i", "ss", x->app, x->room_id);
    if (rc == 1)
        x->latest = r_i64(&r, 0);
    mys_rows_done(&r);
    if (rc <= 0)
        return rc;
    rc = mys_query_one(c, &SQL_EV_OLDEST, &r, "i", "ss", x->app, x->room_id);
    if (rc == 1)
        x->oldest = r_i64(&r, 0);
    mys_rows_done(&r);
    if (rc < 0)
        return rc;
    rc = mys_query(c, &SQL_EV_ROWS, &r, OUTBOX_TYPES, "ssii", x->app, x->room_id, x->after,
                   x->limit);
    if (rc == 0)
        rc = read_outbox_rows(c, &r, &x->rows, &x->n);
    mys_rows_done(&r);
    return rc;
}

int
mys_room_events(struct store *s, const char *app, const char *room_id, int64_t after_seq, int limit,
                struct outbox_row **rows, size_t *n, int64_t *oldest_seq, int64_t *latest_seq)
{
    struct events_ctx x = {app, room_id, after_seq, limit, NULL, 0, 0, -1};
    int rc = mys_run((struct mstore *)s, events_fn, &x);

    if (rc != 0) {
        outbox_rows_free(x.rows, x.n);
        return rc;
    }
    *rows = x.rows;
    *n = x.n;
    *oldest_seq = x.oldest;
    *latest_seq = x.latest;
    return 0;
}
