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
    if ((rc = mys_rooms_busy(c, x->muts, x->n)) != 0)
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
        if ((rc = mys_owner_limit(c, x->muts[i])) != 0) {
            if (rc == ROOMD_ELIMIT)
                c->err = 0; /* a broken rule: save_slow refuses that create alone */
            goto fault;
        }
    for (size_t i = 0; i < x->n; i++) {
        int64_t t_snap = clock_mono_us();
        if (x->muts[i]->snapshot != NULL && (rc = mys_save_snapshot(c, x->muts[i])) != 0)
            goto fault;
        x->muts[i]->snapshot_us = x->muts[i]->snapshot != NULL ? clock_mono_us() - t_snap : 0;
    }
    if ((rc = mys_claimed_ids(c, x->muts, x->n, lone_id)) != 0)
        goto fault;
    rc = mys_commit_batch(c, x->muts, x->n);
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

    if ((rc = mys_rooms_busy(c, &m, 1)) != 0)
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
        if ((rc = mys_owner_limit(c, m)) == ROOMD_ELIMIT)
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
    if (m->snapshot != NULL && (rc = mys_save_snapshot(c, m)) != 0)
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
    if ((rc = mys_claimed_ids(c, x->muts, x->n, 0)) != 0)
        return rc;
    return mys_commit_batch(c, x->muts, x->n);
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
