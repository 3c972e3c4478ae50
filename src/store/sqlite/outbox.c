/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sqlite/outbox.c: room_outbox: the claim (UPDATE ... RETURNING over the
 * due_at_ms index, under BEGIN IMMEDIATE), complete (fenced by locked_by),
 * list/get/replay for operators, counts and purge.
 */
#include "store/sqlite/internal.h"

#include "core/crash.h"
#include "core/err.h"
#include "core/log.h"
#include "core/sink_bits.h"
#include "core/xmalloc.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OUTBOX_COLS STORE_OUTBOX_COLS
/* The columns of OUTBOX_COLS: a statement's own columns come after them. */
#define OUTBOX_NCOLS STORE_OUTBOX_NCOLS

/* The seed's columns are the truth for every row, whoever wrote it
 * (docs/migrate.md): due when pending, retryable with next_retry_at_ms
 * reached, or delivering with its lock expired (now: parameter n). Every
 * claim checks them too; due_at_ms is roomd's index of it, derived for rows
 * another writer left without it (RECONCILE_*). */
#define SEED_DUE(n)                                                                                \
    "(status = 'pending' OR (status = 'retryable' AND coalesce(next_retry_at_ms, 0) <= " n ")"     \
    " OR (status = 'delivering' AND coalesce(lock_until_ms, 0) <= " n "))"
SQ_SQL(RECONCILE_DUE,
       "UPDATE room_outbox SET due_at_ms = CASE status"
       " WHEN 'pending' THEN created_at_ms"
       " WHEN 'retryable' THEN coalesce(next_retry_at_ms, 0)"
       " ELSE coalesce(lock_until_ms, 0) END"
       " WHERE (status = 'pending' AND due_at_ms IS NULL)"
       " OR (status = 'retryable' AND due_at_ms IS NOT coalesce(next_retry_at_ms, 0))"
       " OR (status = 'delivering' AND due_at_ms IS NOT coalesce(lock_until_ms, 0))");
SQ_SQL(RECONCILE_DONE, "UPDATE room_outbox SET due_at_ms = NULL"
                       " WHERE status IN ('delivered', 'published', 'failed')"
                       " AND due_at_ms IS NOT NULL");
/* INDEXED BY room_outbox_due (CLAIM, CLAIM_ROOMS): without statistics
 * (roomd never runs ANALYZE) SQLite takes SEED_DUE's three status terms
 * as a MULTI-INDEX OR over room_outbox_status_due, reads every due row of
 * the backlog and sorts them in a temporary b-tree (for CLAIM_ROOMS with
 * both probes run for each): a claim of 100 rows read the whole backlog,
 * ~18 ms at 20,000 due rows, and the relay fell with the backlog's depth
 * (2 workers: 9.3k rows/s at 20,000 rows, 3.8k at 40,000). The due index
 * gives the rows in claim order, so the LIMIT stops the scan. */
SQ_SQL(CLAIM, "UPDATE room_outbox SET status = 'delivering', locked_by = ?1,"
              " lock_until_ms = ?2, due_at_ms = ?2, updated_at_ms = ?3"
              " WHERE id IN (SELECT id FROM room_outbox INDEXED BY room_outbox_due"
              " WHERE due_at_ms IS NOT NULL"
              " AND due_at_ms <= ?3 AND " SEED_DUE("?3") " ORDER BY due_at_ms, id LIMIT ?4)"
                                                         " RETURNING " OUTBOX_COLS);
/* outbox_worker.ordering per_room (store_outbox_claim_ordered), per sink
 * (docs/outbox.md, per-room order). WAITING_BITS(o): the sinks the rows of
 * o's room that wait (locked, or retryable not yet due: due_at_ms > ?1)
 * lack: SINK_BITS_ALL & ~sinks_done OR-ed over them, bit by bit (SQLite
 * has no bitwise aggregate; a sink no row of the room has is lacked by all
 * its rows alike, so it never decides), 0 without one; probed per candidate
 * in room_outbox_room (covering index seeks to the few rows in flight or
 * waiting): SQLite's row-value NOT IN over the rows in flight compares each
 * candidate with the whole list (issue 13: 500 candidates, 1000 rows in
 * flight: 60-170 ms per claim against 1.2 ms; with every room busy, 100
 * rooms x 200 rows, both ~20 ms). CLAIM_ROOMS: the due rows that lack a
 * sink their room's waiting rows do not, in claim order (?2 limit), each
 * with its room's count of undelivered rows (column OUTBOX_NCOLS) and the
 * waiting rows' sinks (OUTBOX_NCOLS + 1); then, for a room whose
 * undelivered rows are not all among them, its such rows in id order from
 * the first, with due_at_ms (ROOM_RUN, ?3 limit, ?5 the waiting rows'
 * sinks, over room_outbox_room; its ORDER BY id needs a temporary b-tree
 * per query: issue 13, run for every room this query took 26% of the relay
 * workers' CPU). */
#define LACK_BIT(b) "max(~e.sinks_done & " b ")"
#define WAITING_BITS(o, cond)                                                                      \
    "coalesce((SELECT " LACK_BIT("1") " | " LACK_BIT("2") " | " LACK_BIT("4") " | " LACK_BIT(      \
        "8") " | " LACK_BIT("16") " | " LACK_BIT("32") " FROM room_outbox e"                       \
                                                       " WHERE e.app_code = " o ".app_code"        \
                                                       " AND e.room_id = " o ".room_id"            \
                                                       " AND e.due_at_ms IS NOT NULL"              \
                                                       " AND " cond "), 0)"
#define WAIT_DUE "e.due_at_ms > ?1"
/* parked (store_outbox_park, ?3 in CLAIM_ROOMS, ?6 in ROOM_RUN): a due row
 * that lacks none of the enabled sinks whose circuit is closed is not
 * claimed and holds its room as a waiting row does */
#define WAIT_PARKED "(e.due_at_ms > ?1 OR (?3 & ~e.sinks_done) = 0)"
#define CLAIM_ROOMS_SQL(cond, p)                                                                   \
    "SELECT " OUTBOX_COLS ", (SELECT count(*) FROM room_outbox e"                                  \
    " WHERE e.app_code = c.app_code AND e.room_id = c.room_id"                                     \
    " AND e.due_at_ms IS NOT NULL), c.w FROM (SELECT o.*, " WAITING_BITS(                          \
        "o", cond) " AS w"                                                                         \
                   " FROM room_outbox o INDEXED BY room_outbox_due WHERE o.due_at_ms IS NOT NULL"  \
                   " AND o.due_at_ms <= ?1 AND " SEED_DUE(                                         \
                       "?1") ") c"                                                                 \
                             " WHERE (" SINK_BITS_ALL_SQL " & ~c.sinks_done & ~c.w) <> 0" p        \
                             " ORDER BY c.due_at_ms, c.id LIMIT ?2"
SQ_SQL(CLAIM_ROOMS, CLAIM_ROOMS_SQL(WAIT_DUE, ""));
SQ_SQL(CLAIM_ROOMS_PARKED, CLAIM_ROOMS_SQL(WAIT_PARKED, " AND (?3 & ~c.sinks_done) <> 0"));
/* (a row the seed's columns say is not due reads as due at INT64_MAX: the
 * room's run ends before it) */
#define ROOM_RUN_SQL(p)                                                                            \
    "SELECT " OUTBOX_COLS ", CASE WHEN " SEED_DUE(                                                 \
        "?4") " THEN due_at_ms"                                                                    \
              " ELSE 9223372036854775807 END FROM room_outbox"                                     \
              " WHERE app_code = ?1 AND room_id = ?2 AND due_at_ms IS NOT NULL"                    \
              " AND due_at_ms <= ?4 AND (NOT " SEED_DUE("?4") " OR ((" SINK_BITS_ALL_SQL           \
                                                              " & ~sinks_done & ~?5) <> 0" p "))"  \
                                                              " ORDER BY id LIMIT ?3"
SQ_SQL(ROOM_RUN, ROOM_RUN_SQL(""));
SQ_SQL(ROOM_RUN_PARKED, ROOM_RUN_SQL(" AND (?6 & ~sinks_done) <> 0"));
/* The ordered claim's rows in one statement: ?4 is their ids as a JSON
 * array (a rowid seek each; one statement instead of one per row). */
SQ_SQL(CLAIM_IDS, "UPDATE room_outbox SET status = 'delivering', locked_by = ?1,"
                  " lock_until_ms = ?2, due_at_ms = ?2, updated_at_ms = ?3"
                  " WHERE id IN (SELECT value FROM json_each(?4))");
SQ_SQL(COMPLETE, "UPDATE room_outbox SET status = ?3, retry_count = ?4, sinks_done = ?5,"
                 " next_retry_at_ms = ?6, last_error = ?7, due_at_ms = ?8,"
                 " delivered_at_ms = ?9, lock_until_ms = 0, locked_by = '',"
                 " updated_at_ms = ?10"
                 " WHERE id = ?1 AND status = 'delivering' AND locked_by = ?2");
SQ_SQL(LIST_ALL, "SELECT " OUTBOX_COLS " FROM room_outbox WHERE id > ?1 ORDER BY id LIMIT ?2");
SQ_SQL(LIST_STATUS, "SELECT " OUTBOX_COLS " FROM room_outbox WHERE id > ?1"
                    " AND status IN (?3, ?4)"
                    " ORDER BY id LIMIT ?2");
SQ_SQL(GET, "SELECT " OUTBOX_COLS " FROM room_outbox WHERE event_id = ?1");
SQ_SQL(REPLAY, "UPDATE room_outbox SET " SQ_OUTBOX_REPLAY_SET ", due_at_ms = ?2,"
               " updated_at_ms = ?2 WHERE event_id = ?1 AND status = 'failed'");
SQ_SQL(STATUS_OF, "SELECT status FROM room_outbox WHERE event_id = ?1");
SQ_SQL(COUNTS, "SELECT status, count(*) FROM room_outbox GROUP BY status");
SQ_SQL(OLDEST, STORE_OUTBOX_OLDEST_SQL);
SQ_SQL(PURGE, "DELETE FROM room_outbox WHERE id IN (SELECT id FROM room_outbox"
              " WHERE delivered_at_ms IS NOT NULL AND delivered_at_ms < ?1"
              " AND status IN ('delivered', 'published') ORDER BY delivered_at_ms, id"
              " LIMIT ?2)");

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
    r->room_seq = sqlite3_column_int64(q, 17);
    col_copy(q, 18, r->request_id, sizeof(r->request_id));
    col_copy(q, 19, r->traceparent, sizeof(r->traceparent));
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

/* Appends to *rows the run of room rm: its due rows that lack a sink
 * other than those of waiting (the sinks its waiting rows lack), in id
 * order up to the first one the seed's columns say is not due (at most
 * want), each with held_sinks what of waiting it lacks. Returns 0 or a
 * store error. */
static int
read_room_run(struct conn *c, const struct outbox_room *rm, int64_t now_ms, uint32_t waiting,
              uint32_t park, size_t want, struct outbox_row **rows, size_t *n, size_t *cap)
{
    sqlite3_stmt *q = park == 0
                          ? sq_bound(c, &SQL_ROOM_RUN, "ssiii", rm->app_code, rm->room_id,
                                     (int64_t)want, now_ms, (int64_t)waiting)
                          : sq_bound(c, &SQL_ROOM_RUN_PARKED, "ssiiii", rm->app_code, rm->room_id,
                                     (int64_t)want, now_ms, (int64_t)waiting, (int64_t)park);
    int step;

    if (q == NULL)
        return ROOMD_EIO;
    while ((step = sqlite3_step(q)) == SQLITE_ROW &&
           sqlite3_column_int64(q, OUTBOX_NCOLS) <= now_ms) {
        *rows = xgrow(*rows, *n, cap, sizeof(**rows));
        read_row(q, &(*rows)[*n]);
        (*rows)[*n].held_sinks = waiting & SINK_BITS_ALL & ~(*rows)[*n].sinks_done;
        (*n)++;
    }
    done(q);
    if (step != SQLITE_DONE && step != SQLITE_ROW)
        return sq_fail(c->db, step, "claim");
    return 0;
}

/* One row of the ordered claim's candidates (CLAIM_ROOMS): pos, its place
 * in claim order; undelivered, its room's count of undelivered rows;
 * waiting, the sinks its room's waiting rows lack. */
struct cand {
    struct outbox_row *row;
    size_t pos;
    int64_t undelivered;
    uint32_t waiting;
};

/* Orders candidates by room, then id. */
static int
cmp_cand(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    int c = strcmp(x->row->app_code, y->row->app_code);

    if (c == 0)
        c = strcmp(x->row->room_id, y->row->room_id);
    if (c == 0)
        c = (x->row->id > y->row->id) - (x->row->id < y->row->id);
    return c;
}

/* One room of the candidates: cands[lo..hi) after the sort; first, the
 * place of its first candidate in claim order. */
struct cand_room {
    size_t lo, hi, first;
};

static int
cmp_cand_room(const void *a, const void *b)
{
    const struct cand_room *x = a, *y = b;

    return (x->first > y->first) - (x->first < y->first);
}

/* Reads CLAIM_ROOMS into *crows (*nc rows) and *cands (one per row, sorted
 * by room and id) and *grooms (*ng rooms, in claim order). */
static int
read_candidates(struct conn *c, int64_t now_ms, int limit, uint32_t park, struct outbox_row **crows,
                size_t *nc, struct cand **cands, struct cand_room **grooms, size_t *ng)
{
    sqlite3_stmt *q =
        park == 0 ? sq_bound(c, &SQL_CLAIM_ROOMS, "id", now_ms, limit)
                  : sq_bound(c, &SQL_CLAIM_ROOMS_PARKED, "idi", now_ms, limit, (int64_t)park);
    int64_t *undelivered = NULL, *waiting = NULL;
    size_t cap = 0, ucap = 0, wcap = 0, nu = 0;
    int step;

    if (q == NULL)
        return ROOMD_EIO;
    while ((step = sqlite3_step(q)) == SQLITE_ROW) {
        *crows = xgrow(*crows, *nc, &cap, sizeof(**crows));
        read_row(q, &(*crows)[(*nc)++]);
        undelivered = xgrow(undelivered, nu, &ucap, sizeof(*undelivered));
        waiting = xgrow(waiting, nu, &wcap, sizeof(*waiting));
        undelivered[nu] = sqlite3_column_int64(q, OUTBOX_NCOLS);
        waiting[nu++] = sqlite3_column_int64(q, OUTBOX_NCOLS + 1);
    }
    done(q);
    if (step != SQLITE_DONE) {
        free(undelivered);
        free(waiting);
        return sq_fail(c->db, step, "claim");
    }
    *cands = xcalloc(*nc > 0 ? *nc : 1, sizeof(**cands));
    for (size_t i = 0; i < *nc; i++)
        (*cands)[i] = (struct cand){&(*crows)[i], i, undelivered[i], (uint32_t)waiting[i]};
    free(undelivered);
    free(waiting);
    qsort(*cands, *nc, sizeof(**cands), cmp_cand);
    *grooms = xcalloc(*nc > 0 ? *nc : 1, sizeof(**grooms));
    for (size_t i = 0; i < *nc; i++) {
        struct cand *x = &(*cands)[i];
        struct cand_room *g = *ng > 0 ? &(*grooms)[*ng - 1] : NULL;

        if (g == NULL || strcmp(x->row->app_code, (*cands)[g->lo].row->app_code) != 0 ||
            strcmp(x->row->room_id, (*cands)[g->lo].row->room_id) != 0) {
            g = &(*grooms)[(*ng)++];
            *g = (struct cand_room){.lo = i, .first = x->pos};
        }
        g->hi = i + 1;
        if (x->pos < g->first)
            g->first = x->pos;
    }
    qsort(*grooms, *ng, sizeof(**grooms), cmp_cand_room);
    return 0;
}

/* The ordered claim (store_outbox_claim_ordered) inside the open IMMEDIATE
 * transaction, which no other claimer can enter: the candidates, each
 * room's run from its head (the room's candidates when they are all its
 * undelivered rows: none of them waits, so all are due; else read), then
 * one UPDATE of them all. */
static int
claim_ordered(struct conn *c, int64_t now_ms, int64_t lock_until_ms, const char *locked_by,
              int limit, uint32_t park, struct outbox_row **rows, size_t *n)
{
    struct outbox_row *crows = NULL;
    struct cand *cands = NULL;
    struct cand_room *grooms = NULL;
    size_t nc = 0, ng = 0, cap = 0;
    sqlite3_stmt *q;
    int rc = read_candidates(c, now_ms, limit, park, &crows, &nc, &cands, &grooms, &ng);

    for (size_t g = 0; g < ng && rc == 0 && *n < (size_t)limit; g++) {
        const struct cand_room *gr = &grooms[g];
        const struct outbox_row *head = cands[gr->lo].row;

        if ((int64_t)(gr->hi - gr->lo) != cands[gr->lo].undelivered || cands[gr->lo].waiting != 0) {
            struct outbox_room rm;

            strlcpy_(rm.app_code, head->app_code, sizeof(rm.app_code));
            strlcpy_(rm.room_id, head->room_id, sizeof(rm.room_id));
            rc = read_room_run(c, &rm, now_ms, cands[gr->lo].waiting, park, (size_t)limit - *n,
                               rows, n, &cap);
            continue;
        }
        for (size_t i = gr->lo; i < gr->hi && *n < (size_t)limit; i++) {
            *rows = xgrow(*rows, *n, &cap, sizeof(**rows));
            (*rows)[(*n)++] = *cands[i].row; /* the row's strings move */
            memset(cands[i].row, 0, sizeof(*cands[i].row));
        }
    }
    outbox_rows_free(crows, nc);
    free(cands);
    free(grooms);
    if (rc != 0 || *n == 0)
        return rc;
    /* "[id,id,...]": at most 20 digits and a separator per id */
    char *ids = xmalloc(*n * 21 + 3);
    size_t len = 0;

    for (size_t i = 0; i < *n; i++) {
        len += (size_t)sprintf(ids + len, "%c%lld", i == 0 ? '[' : ',', (long long)(*rows)[i].id);
        (*rows)[i].status = OUTBOX_DELIVERING;
        (*rows)[i].lock_until_ms = lock_until_ms;
        strlcpy_((*rows)[i].locked_by, locked_by, sizeof((*rows)[i].locked_by));
    }
    strcpy(ids + len, "]");
    q = sq_bound(c, &SQL_CLAIM_IDS, "siis", locked_by, lock_until_ms, now_ms, ids);
    rc = sq_step_write(c, q, "claim");
    if (rc == 0 && sqlite3_changes(c->db) != (int)*n) {
        /* the rows were read in this transaction: never, short of a bug */
        store_set_errmsg("sqlite claim: %d of %zu rows updated", sqlite3_changes(c->db), *n);
        rc = ROOMD_EIO;
    }
    free(ids);
    return rc;
}

/* One bookkeeping transaction of a worker (BEGIN IMMEDIATE on the writer,
 * without fsync: sq_writer_get_bookkeeping): the outcomes res[0..nres)
 * (fenced by locked_by; res[i].rc), then, with claim, a claim of up to limit
 * rows into *rows and *n (ordered with per_room). */
struct bookkeeping {
    struct outbox_result *res;
    size_t nres;
    bool claim;
    int64_t now_ms, lock_until_ms;
    const char *locked_by;
    int limit;
    bool per_room;
    struct outbox_row **rows;
    size_t *n;
};

/* The outcomes inside the open transaction, one fenced UPDATE per row. */
static int
complete_in_tx(struct conn *c, struct outbox_result *res, size_t n)
{
    sqlite3_stmt *q;
    int rc;

    for (size_t i = 0; i < n; i++) {
        struct outbox_result *r = &res[i];
        struct outbox_outcome o;

        outbox_outcome_of(r, &o);
        if ((q = sq_stmt(c, &SQL_COMPLETE)) == NULL)
            return ROOMD_EIO;
        sqlite3_bind_int64(q, 1, r->id);
        bind_text(q, 2, r->locked_by);
        bind_text(q, 3, o.status);
        sqlite3_bind_int(q, 4, r->retry_count);
        sqlite3_bind_int64(q, 5, (int64_t)r->sinks_done);
        sqlite3_bind_int64(q, 6, o.retry_at_ms);
        if (o.last_error != NULL)
            sqlite3_bind_text(q, 7, o.last_error, (int)o.last_error_len, SQLITE_STATIC);
        else
            sqlite3_bind_null(q, 7);
        if (o.retryable)
            sqlite3_bind_int64(q, 8, o.retry_at_ms);
        else
            sqlite3_bind_null(q, 8);
        if (o.delivered)
            sqlite3_bind_int64(q, 9, r->now_ms);
        else
            sqlite3_bind_null(q, 9);
        sqlite3_bind_int64(q, 10, r->now_ms);
        if ((rc = sq_step_write(c, q, "complete")) != 0)
            return rc;
        r->rc = sqlite3_changes(c->db) == 1 ? 0 : ROOMD_ESTALE;
    }
    if (n > 0)
        test_crash("in_complete"); /* written, not committed */
    return 0;
}

int
sq_outbox_reconcile_in_tx(struct conn *c, int *fixed)
{
    int rc;

    *fixed = 0;
    if ((rc = sq_step_write(c, sq_stmt(c, &SQL_RECONCILE_DUE), "reconcile")) != 0)
        return rc;
    *fixed = sqlite3_changes(c->db);
    if ((rc = sq_step_write(c, sq_stmt(c, &SQL_RECONCILE_DONE), "reconcile")) != 0)
        return rc;
    *fixed += sqlite3_changes(c->db);
    return 0;
}

/* At most once per RECONCILE_EVERY_MS per store (before a claim, in its
 * transaction): rows another writer inserted or changed become claimable
 * within about a second. */
#define RECONCILE_EVERY_MS 1000

/* The claim inside the open transaction: ordered (claim_ordered) or one
 * UPDATE ... RETURNING over room_outbox_due. */
static int
claim_in_tx(struct sq_store *s, struct conn *c, const struct bookkeeping *x)
{
    sqlite3_stmt *q;
    int64_t last = atomic_load(&s->reconciled_ms);
    int fixed = 0, rc;

    if (x->now_ms - last >= RECONCILE_EVERY_MS &&
        atomic_compare_exchange_strong(&s->reconciled_ms, &last, x->now_ms)) {
        if ((rc = sq_outbox_reconcile_in_tx(c, &fixed)) != 0)
            return rc;
        if (fixed > 0)
            log_info("store", "outbox rows of another writer made claimable", "rows=%d", fixed);
    }

    if (x->per_room)
        return claim_ordered(c, x->now_ms, x->lock_until_ms, x->locked_by, x->limit,
                             atomic_load(&s->super.outbox_park), x->rows, x->n);
    q = sq_bound(c, &SQL_CLAIM, "siid", x->locked_by, x->lock_until_ms, x->now_ms, x->limit);
    if (q == NULL)
        return ROOMD_EIO;
    return read_rows(c, q, x->rows, x->n, "claim");
}

/* Runs x in one transaction. IMMEDIATE: the write lock is taken before the
 * claim's select, so another process cannot claim the same rows between our
 * select and update. Returns 0 (rows sorted by id) or a store error (then
 * nothing is written, every res[i].rc is it and *rows is NULL). */
static int
bookkeeping_tx(struct sq_store *s, struct bookkeeping *x)
{
    struct conn *c = sq_writer_get_bookkeeping(s);
    int rc;

    if (x->claim) {
        *x->rows = NULL;
        *x->n = 0;
    }
    if ((rc = sq_run(c, &SQL_BEGIN_IMMEDIATE)) == 0 &&
        (rc = complete_in_tx(c, x->res, x->nres)) == 0 &&
        (!x->claim || x->limit <= 0 || (rc = claim_in_tx(s, c, x)) == 0))
        rc = sq_run(c, &SQL_COMMIT);
    sq_writer_put(s, c); /* rolls back what an error left open */
    if (rc != 0) {
        for (size_t i = 0; i < x->nres; i++)
            x->res[i].rc = rc;
        if (x->claim) {
            outbox_rows_free(*x->rows, *x->n);
            *x->rows = NULL;
            *x->n = 0;
        }
        return rc;
    }
    if (x->claim)
        outbox_rows_sort(*x->rows, *x->n);
    return 0;
}

int
sq_outbox_complete(struct store *st, struct outbox_result *res, size_t n)
{
    struct bookkeeping x = {.res = res, .nres = n};

    return bookkeeping_tx((struct sq_store *)st, &x);
}

/* One IMMEDIATE transaction: the completion, then the claim (which sees the
 * completed rows' rooms free). */
int
sq_outbox_complete_claim(struct store *st, struct outbox_result *res, size_t nres, int64_t now_ms,
                         int64_t lock_until_ms, const char *locked_by, int limit, bool per_room,
                         struct outbox_row **rows, size_t *n, bool *completed)
{
    struct bookkeeping x = {.res = res,
                            .nres = nres,
                            .claim = true,
                            .now_ms = now_ms,
                            .lock_until_ms = lock_until_ms,
                            .locked_by = locked_by,
                            .limit = limit,
                            .per_room = per_room,
                            .rows = rows,
                            .n = n};
    int rc = bookkeeping_tx((struct sq_store *)st, &x);

    *completed = rc == 0;
    return rc;
}

/* A claim alone: the same transaction with no outcomes to write first. */
int
sq_outbox_claim(struct store *st, int64_t now_ms, int64_t lock_until_ms, const char *locked_by,
                int limit, bool per_room, struct outbox_row **rows, size_t *n)
{
    bool completed;

    return sq_outbox_complete_claim(st, NULL, 0, now_ms, lock_until_ms, locked_by, limit, per_room,
                                    rows, n, &completed);
}

int
sq_outbox_list(struct store *st, int status, int64_t after_id, int limit, struct outbox_row **rows,
               size_t *n)
{
    struct sq_store *s = (struct sq_store *)st;
    struct conn *c = sq_reader_get(s);
    const char *name = status < 0 ? NULL : outbox_status_name((enum outbox_status)status);
    /* legacy "published" rows are listed as delivered */
    const char *legacy = status == OUTBOX_DELIVERED ? "published" : name;
    sqlite3_stmt *q = status < 0
                          ? sq_bound(c, &SQL_LIST_ALL, "id", after_id, limit)
                          : sq_bound(c, &SQL_LIST_STATUS, "idss", after_id, limit, name, legacy);
    int rc = ROOMD_EIO;

    *rows = NULL;
    *n = 0;
    if (q != NULL)
        rc = read_rows(c, q, rows, n, "list");
    sq_reader_put(s, c);
    if (rc != 0) {
        outbox_rows_free(*rows, *n);
        *rows = NULL;
        *n = 0;
    }
    return rc;
}

int
sq_outbox_get(struct store *st, const char *event_id, struct outbox_row *out)
{
    int rc;

    memset(out, 0, sizeof(*out));
    rc = sq_read_one((struct sq_store *)st, &SQL_GET, event_id, NULL, read_row, out, "get");
    if (rc == ROOMD_ENOTFOUND)
        store_set_errmsg("event %s not found", event_id);
    return rc;
}

int
sq_outbox_replay(struct store *st, const char *event_id, int64_t now_ms)
{
    struct sq_store *s = (struct sq_store *)st;
    struct conn *c = sq_writer_get(s);
    sqlite3_stmt *q = sq_bound(c, &SQL_REPLAY, "si", event_id, now_ms);
    int rc;

    if ((rc = sq_step_write(c, q, "replay")) != 0 || sqlite3_changes(c->db) == 1)
        goto out;
    /* Nothing changed: tell a missing row from one that is not failed. */
    q = sq_bound(c, &SQL_STATUS_OF, "s", event_id);
    if ((rc = sq_step_one(c, q, "replay lookup")) == 1) {
        store_set_errmsg("event %s is %s, not failed", event_id, sqlite3_column_text(q, 0));
        rc = ROOMD_ECONFLICT;
    } else if (rc == 0) {
        store_set_errmsg("event %s not found", event_id);
        rc = ROOMD_ENOTFOUND;
    }
    done(q);
out:
    sq_writer_put(s, c);
    return rc;
}

int
sq_outbox_counts(struct store *st, struct outbox_counts *out)
{
    struct sq_store *s = (struct sq_store *)st;
    struct conn *c = sq_reader_get(s);
    sqlite3_stmt *q;
    int rc, step;

    memset(out, 0, sizeof(*out));
    if ((rc = sq_run(c, &SQL_BEGIN)) != 0)
        goto out;
    rc = ROOMD_EIO;
    if ((q = sq_stmt(c, &SQL_COUNTS)) == NULL)
        goto out;
    while ((step = sqlite3_step(q)) == SQLITE_ROW)
        outbox_counts_add(out, (const char *)sqlite3_column_text(q, 0), sqlite3_column_int64(q, 1));
    done(q);
    if (step != SQLITE_DONE) {
        rc = sq_fail(c->db, step, "counts");
        goto out;
    }
    if ((q = sq_stmt(c, &SQL_OLDEST)) == NULL)
        goto out;
    while ((step = sqlite3_step(q)) == SQLITE_ROW)
        outbox_counts_oldest(out, (uint32_t)sqlite3_column_int64(q, 0),
                             (const char *)sqlite3_column_text(q, 1), sqlite3_column_int64(q, 2));
    done(q);
    if (step != SQLITE_DONE) {
        rc = sq_fail(c->db, step, "counts oldest");
        goto out;
    }
    rc = sq_run(c, &SQL_COMMIT);
out:
    sq_reader_put(s, c);
    return rc;
}

int
sq_outbox_purge(struct store *st, int64_t delivered_before_ms, int limit, size_t *purged)
{
    return sq_purge_rows(st, &SQL_PURGE, delivered_before_ms, limit, purged, "purge");
}

SQ_SQL(EV_HEAD, "SELECT event_seq FROM rooms WHERE app_code = ?1 AND room_id = ?2");
SQ_SQL(EV_ROWS, "SELECT " STORE_OUTBOX_COLS " FROM room_outbox WHERE app_code = ?1"
                " AND room_id = ?2 AND room_seq > ?3 ORDER BY room_seq, id LIMIT ?4");
SQ_SQL(EV_OLDEST, "SELECT coalesce(min(room_seq), 0) FROM room_outbox WHERE app_code = ?1"
                  " AND room_id = ?2 AND room_seq > 0");

/* The three reads in one read transaction: one snapshot. */
int
sq_room_events(struct store *st, const char *app, const char *room_id, int64_t after_seq, int limit,
               struct outbox_row **rows, size_t *n, int64_t *oldest_seq, int64_t *latest_seq)
{
    struct sq_store *s = (struct sq_store *)st;
    struct conn *c = sq_reader_get(s);
    sqlite3_stmt *q;
    int rc;

    if ((rc = sq_run(c, &SQL_BEGIN)) != 0)
        goto out;
    rc = sq_step_i64(c, sq_bound(c, &SQL_EV_HEAD, "ss", app, room_id), latest_seq, "events head");
    if (rc <= 0) { /* no room (0), or the failure */
        *latest_seq = -1;
        goto out;
    }
    rc = sq_step_i64(c, sq_bound(c, &SQL_EV_OLDEST, "ss", app, room_id), oldest_seq,
                     "events oldest");
    if (rc < 0)
        goto out;
    q = sq_bound(c, &SQL_EV_ROWS, "ssid", app, room_id, after_seq, limit);
    rc = q != NULL ? read_rows(c, q, rows, n, "events") : ROOMD_EIO;
out:
    sq_rollback(c); /* a read: nothing to keep */
    sq_reader_put(s, c);
    if (rc < 0) {
        outbox_rows_free(*rows, *n);
        *rows = NULL;
        *n = 0;
        return rc;
    }
    return 0;
}
