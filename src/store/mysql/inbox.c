/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mysql/inbox.c: the shared inbox (inbox.h) in the store's MySQL/MariaDB
 * database, so that every node running a group sees one inbox:
 *   consumer_inbox(group_name, event_id, app_code, state, owner,
 *                  claim_until_ms, failures, updated_ms, last_error)
 *                  PRIMARY KEY (group_name, event_id)
 *   consumer_room_seq(group_name, app_code, room_id, seq, updated_ms)
 *                  PRIMARY KEY (group_name, app_code, room_id): a room's
 *                  high-water mark, raised in the transaction of "done"
 * state: received | progress (owner's claim until claim_until_ms) | done |
 * dead. A claim is one transaction: INSERT ... ON DUPLICATE KEY UPDATE
 * takes the row's exclusive lock (creating it received), SELECT ... FOR
 * UPDATE reads it, and the row becomes progress with this handle's owner
 * unless it is settled or another owner's claim has not expired; a second
 * node claiming at the same moment waits for that lock and then reads the
 * first one's claim. The handler's transaction (tx_begin) locks the row
 * again and goes on only while the claim is still this handle's, so an
 * effect kept in this database commits once with its "done".
 *
 * The tables are created at open (CREATE TABLE IF NOT EXISTS under
 * GET_LOCK('roomd.consumer_schema'), so nodes starting together create
 * them once), beside the store's own. On the store's pool (mys_pool_share,
 * conn.c: its connect, store.mysql.hosts failover and error classes): a
 * connection taken per call, held from a transaction's begin to its end; a
 * lost one is closed and the next call reconnects. Statements are text
 * (mys_text): integers printed, strings escaped.
 */
#include "store/inbox.h"
#include "store/mysql/internal.h"

#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/uuid.h"
#include "core/xmalloc.h"
#include "store/store.h"

#include <errmsg.h>
#include <inttypes.h>
#include <mysql.h>
#include <mysqld_error.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TABLE_OPTS " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"

static const char SCHEMA[] = "CREATE TABLE IF NOT EXISTS consumer_inbox ("
                             " group_name VARBINARY(64) NOT NULL,"
                             " event_id VARBINARY(200) NOT NULL,"
                             " app_code VARBINARY(64) NOT NULL DEFAULT '',"
                             " state VARCHAR(16) NOT NULL,"
                             " owner VARBINARY(128) NULL,"
                             " claim_until_ms BIGINT NULL,"
                             " failures INT NOT NULL DEFAULT 0,"
                             " updated_ms BIGINT NOT NULL,"
                             " last_error VARBINARY(255) NULL,"
                             " PRIMARY KEY (group_name, event_id),"
                             " KEY ix_inbox_purge (group_name, state, updated_ms)"
                             ")" TABLE_OPTS;

static const char SCHEMA_ROOM_SEQ[] = "CREATE TABLE IF NOT EXISTS consumer_room_seq ("
                                      " group_name VARBINARY(64) NOT NULL,"
                                      " app_code VARBINARY(64) NOT NULL,"
                                      " room_id VARBINARY(64) NOT NULL,"
                                      " seq BIGINT NOT NULL,"
                                      " updated_ms BIGINT NOT NULL,"
                                      " PRIMARY KEY (group_name, app_code, room_id)"
                                      ")" TABLE_OPTS;

struct my_inbox {
    struct consume_inbox super;
    struct mstore *pool; /* the store's (mys_pool_share) */
    struct conn *c;      /* held from a transaction's begin to its end */
    char group[64];
    char owner[128]; /* "<node>/<8 hex>": this handle's claims */
    int64_t claim_ms;
};

#define MY(ib) ((struct my_inbox *)(ib))

/* Records the failure of what on c, classified as the backend classifies
 * every server error (mys_classify, conn.c); a lost connection is closed
 * when given back (mys_conn_give) and reconnected by the next call.
 * Returns EUNAVAIL (connection), ERETRY (deadlock or lock wait) or EIO. */
static int
my_error(struct my_inbox *m, struct conn *c, int rc)
{
    enum errclass k = mys_classify(c->err);

    snprintf(m->super.errmsg, sizeof(m->super.errmsg), "%s", store_errmsg());
    if (k == EC_RETRY)
        return ROOMD_ERETRY;
    if (k == EC_LOST || c->err == 0 || mys_client_error(c->err)) {
        c->err = c->err != 0 ? c->err : CR_SERVER_LOST; /* unusable: closed when given back */
        return ROOMD_EUNAVAIL;
    }
    (void)rc;
    return ROOMD_EIO;
}

/* Takes the pool's connection for one call (the held one inside a
 * transaction). Returns 0 or EUNAVAIL. */
static int
my_take(struct my_inbox *m, struct conn **c)
{
    int rc;

    if (m->c != NULL) {
        *c = m->c;
        return 0;
    }
    if ((rc = mys_conn_take(m->pool, c)) != 0)
        snprintf(m->super.errmsg, sizeof(m->super.errmsg), "%s", store_errmsg());
    return rc;
}

/* Gives c back unless the transaction holds it. */
static void
my_give(struct my_inbox *m, struct conn *c)
{
    if (c != m->c)
        mys_conn_give(m->pool, c);
}

/* The first row of a result: up to 4 columns as text ("" for NULL). */
struct row {
    bool found;
    char c[4][128];
};

/* Runs tmpl bound to args on c; r (NULL: not wanted) gets the first row,
 * *affected (NULL: not wanted) the rows changed. */
static int
my_on(struct my_inbox *m, struct conn *c, const char *tmpl, const struct consume_arg *args,
      int nargs, struct row *r, uint64_t *affected)
{
    MYSQL_RES *res = NULL;
    char *sql = mys_text(tmpl, args, nargs);
    int rc = mys_q_result(c, sql, r ? &res : NULL);

    free(sql);
    if (rc != 0)
        return my_error(m, c, rc);
    if (affected)
        *affected = (uint64_t)mysql_affected_rows(c->db);
    if (res) {
        MYSQL_ROW row = mysql_fetch_row(res);
        unsigned int n = mysql_num_fields(res);
        for (unsigned int k = 0; row && k < n && k < 4; k++)
            snprintf(r->c[k], sizeof(r->c[k]), "%s", row[k] ? row[k] : "");
        r->found = row != NULL;
        mysql_free_result(res);
    }
    return 0;
}

/* my_on on a connection of its own (the held one in a transaction). */
static int
my_run(struct my_inbox *m, const char *tmpl, const struct consume_arg *args, int nargs,
       struct row *r, uint64_t *affected)
{
    struct conn *c;
    int rc;

    if (r)
        memset(r, 0, sizeof(*r));
    if ((rc = my_take(m, &c)) != 0)
        return rc;
    rc = my_on(m, c, tmpl, args, nargs, r, affected);
    my_give(m, c);
    return rc;
}

/* The statements on one inbox row: ?1 group, ?2 key, ?3 now, ?4 owner,
 * ?5 text, ?6 claim_until_ms. */
static int
my_row(struct my_inbox *m, const char *tmpl, const char *key, const char *text, struct row *r,
       uint64_t *affected)
{
    int64_t now = clock_wall_ms();
    struct consume_arg a[6] = {
        {.type = 's', .s = m->group}, {.type = 's', .s = key},
        {.type = 'i', .i = now},      {.type = 's', .s = m->owner},
        {.type = 's', .s = text},     {.type = 'i', .i = now + m->claim_ms},
    };

    return my_run(m, tmpl, a, 6, r, affected);
}

/* Takes and holds a connection for a transaction and starts it. */
static int
my_begin(struct my_inbox *m)
{
    struct conn *c;
    int rc = my_take(m, &c);

    if (rc != 0)
        return rc;
    m->c = c;
    if ((rc = mys_tx_begin(c)) != 0) {
        rc = my_error(m, c, rc);
        m->c = NULL;
        mys_conn_give(m->pool, c);
        return rc;
    }
    m->super.in_tx = true;
    return 0;
}

/* Ends the transaction (rolled back unless committed) and gives its
 * connection back. */
static void
my_end(struct my_inbox *m)
{
    struct conn *c = m->c;

    m->c = NULL;
    m->super.in_tx = false;
    mys_conn_give(m->pool, c); /* rolls back what is still open */
}

static void
my_rollback(struct my_inbox *m)
{
    my_end(m);
}

static int
my_commit(struct my_inbox *m)
{
    int rc = m->c != NULL ? mys_tx_commit(m->c) : ROOMD_EINVAL;

    if (rc != 0 && m->c != NULL)
        rc = my_error(m, m->c, rc);
    my_end(m);
    return rc;
}

/* ==== open / close ==== */

static void
my_close(struct consume_inbox *ib)
{
    struct my_inbox *m = MY(ib);

    if (m->c != NULL)
        my_end(m);
    mys_pool_release(m->pool, true);
    free(m);
}

/* Creates the kit's and the handler's tables, once across nodes (GET_LOCK
 * is the session's: one connection throughout). */
static int
my_schema(struct my_inbox *m, const struct consume_sql *const *schema)
{
    struct conn *c;
    struct row got = {0};
    int rc = my_take(m, &c);

    if (rc != 0)
        return rc;
    rc = my_on(m, c, "SELECT GET_LOCK('roomd.consumer_schema', 30)", NULL, 0, &got, NULL);
    if (rc == 0 && strcmp(got.c[0], "1") != 0) {
        snprintf(m->super.errmsg, sizeof(m->super.errmsg), "GET_LOCK timed out after 30 s");
        rc = ROOMD_ETIMEDOUT;
    } else if (rc == 0) {
        rc = my_on(m, c, SCHEMA, NULL, 0, NULL, NULL);
        if (rc == 0)
            rc = my_on(m, c, SCHEMA_ROOM_SEQ, NULL, 0, NULL, NULL);
        for (const struct consume_sql *const *q = schema; rc == 0 && q && *q; q++)
            rc = my_on(m, c, (*q)->mysql ? (*q)->mysql : (*q)->sqlite, NULL, 0, NULL, NULL);
        if (c->err == 0 || mys_classify(c->err) != EC_LOST)
            (void)mys_q_result(c, "SELECT RELEASE_LOCK('roomd.consumer_schema')", NULL);
    }
    my_give(m, c);
    return rc;
}

static int
my_open(struct consume_inbox **out, const struct inbox_config *cfg, char *err, size_t errlen)
{
    struct my_inbox *m = xcalloc(1, sizeof(*m));
    char id[UUID_STR_LEN], host[300];
    uint64_t moves;
    struct conn *c;
    int rc;

    *out = NULL;
    m->super.shared = true;
    if ((rc = mys_pool_share(cfg->store, &m->pool, err, errlen)) != 0) {
        free(m);
        return rc;
    }
    snprintf(m->group, sizeof(m->group), "%s", cfg->group);
    uuid_v7(clock_wall_ms(), id);
    /* the uuid's random tail: a restarted node never mistakes an old claim
     * of its name for its own */
    snprintf(m->owner, sizeof(m->owner), "%s/%.8s", cfg->owner && *cfg->owner ? cfg->owner : "-",
             id + 28);
    m->claim_ms = cfg->claim_ms > 0 ? cfg->claim_ms : 30000;
    if (m->pool->socket != NULL)
        snprintf(host, sizeof(host), "%s", m->pool->socket);
    else
        mys_server_info(&m->pool->super, host, sizeof(host), &moves);
    snprintf(m->super.where, sizeof(m->super.where), "mysql %s/%s consumer_inbox", host,
             m->pool->database);

    if (cfg->existing) {
        if ((rc = my_take(m, &c)) == 0)
            my_give(m, c);
    } else {
        rc = my_schema(m, cfg->schema);
    }
    if (rc != 0) {
        snprintf(err, errlen, "store.mysql: consumer inbox of %s: %s", cfg->group, m->super.errmsg);
        my_close(&m->super);
        return rc;
    }
    *out = &m->super;
    return 0;
}

/* ==== the inbox row ==== */

static const char SQL_LOCK[] = "SELECT state, failures, owner, claim_until_ms FROM consumer_inbox"
                               " WHERE group_name = ?1 AND event_id = ?2 FOR UPDATE";

#define OURS " WHERE group_name = ?1 AND event_id = ?2 AND state = 'progress' AND owner = ?4"

static const char SQL_DONE[] = "UPDATE consumer_inbox SET state = 'done', owner = NULL,"
                               " claim_until_ms = NULL, updated_ms = ?3" OURS;

static int
my_claim(struct consume_inbox *ib, const char *key, const char *app, enum inbox_claim *res,
         int *failures, int64_t *busy_until_ms)
{
    struct my_inbox *m = MY(ib);
    struct row r;
    int rc;

    /* the row's exclusive lock, the row created received when absent (?5:
     * the app here) */
    if ((rc = my_begin(m)) != 0 ||
        (rc = my_row(m,
                     "INSERT INTO consumer_inbox(group_name, event_id, app_code, state, failures,"
                     " updated_ms) VALUES(?1, ?2, ?5, 'received', 0, ?3)"
                     " ON DUPLICATE KEY UPDATE updated_ms = updated_ms",
                     key, app, NULL, NULL)) != 0 ||
        (rc = my_row(m, SQL_LOCK, key, NULL, &r, NULL)) != 0)
        goto fail;
    const char *state = r.c[0], *owner = r.c[2];
    int64_t until = strtoll(r.c[3], NULL, 10);
    bool progress = strcmp(state, "progress") == 0, mine = strcmp(owner, m->owner) == 0;

    *failures = atoi(r.c[1]);
    if (strcmp(state, "done") == 0 || strcmp(state, "dead") == 0) {
        *res = INBOX_SETTLED;
    } else if (progress && !mine && until > clock_wall_ms()) {
        *res = INBOX_BUSY;
        *busy_until_ms = until;
    } else {
        /* an expired claim of another owner: that attempt died unfinished */
        bool crashed = progress && !mine;
        if (crashed) {
            (*failures)++;
            log_info("consume", "expired claim taken over",
                     "group=%s key=%s from=%s to=%s failures=%d", m->group, key, owner, m->owner,
                     *failures);
        }
        *res = INBOX_CLAIMED;
        if ((rc = my_row(m,
                         crashed ? "UPDATE consumer_inbox SET state = 'progress', owner = ?4,"
                                   " claim_until_ms = ?6, updated_ms = ?3,"
                                   " failures = failures + 1, last_error = 'claim expired'"
                                   " WHERE group_name = ?1 AND event_id = ?2"
                                 : "UPDATE consumer_inbox SET state = 'progress', owner = ?4,"
                                   " claim_until_ms = ?6, updated_ms = ?3"
                                   " WHERE group_name = ?1 AND event_id = ?2",
                         key, NULL, NULL, NULL)) != 0)
            goto fail;
    }
    return my_commit(m);
fail:
    my_rollback(m);
    return rc;
}

/* Runs sql, which changes our claim's row (OURS); ESTALE when the row is
 * no longer ours. */
static int
my_settle(struct my_inbox *m, const char *sql, const char *key, const char *why)
{
    uint64_t n = 0;
    int rc = my_row(m, sql, key, why, NULL, &n);

    if (rc == 0 && n == 0) {
        snprintf(m->super.errmsg, sizeof(m->super.errmsg), "the claim on %s was taken over", key);
        return ROOMD_ESTALE;
    }
    return rc;
}

static int
my_mark_get(struct consume_inbox *ib, const char *app, const char *room, int64_t *seq)
{
    struct my_inbox *m = MY(ib);
    struct consume_arg a[3] = {
        {.type = 's', .s = m->group}, {.type = 's', .s = app}, {.type = 's', .s = room}};
    struct row r;
    int rc = my_run(m,
                    "SELECT seq FROM consumer_room_seq"
                    " WHERE group_name = ?1 AND app_code = ?2 AND room_id = ?3",
                    a, 3, &r, NULL);

    if (rc == 0)
        *seq = r.found ? strtoll(r.c[0], NULL, 10) : 0;
    return rc;
}

/* Marks our claim done and raises mark (NULL: none), in the open
 * transaction. */
static int
my_settle_done(struct my_inbox *m, const char *key, const struct inbox_mark *mark)
{
    int rc = my_settle(m, SQL_DONE, key, NULL);

    if (rc != 0 || mark == NULL)
        return rc;
    struct consume_arg a[5] = {
        {.type = 's', .s = m->group},        {.type = 's', .s = mark->app},
        {.type = 's', .s = mark->room},      {.type = 'i', .i = mark->seq},
        {.type = 'i', .i = clock_wall_ms()},
    };
    return my_run(m,
                  "INSERT INTO consumer_room_seq(group_name, app_code, room_id, seq, updated_ms)"
                  " VALUES(?1, ?2, ?3, ?4, ?5) ON DUPLICATE KEY UPDATE"
                  " seq = GREATEST(seq, VALUES(seq)), updated_ms = VALUES(updated_ms)",
                  a, 5, NULL, NULL);
}

static int
my_done(struct consume_inbox *ib, const char *key, const struct inbox_mark *mark)
{
    struct my_inbox *m = MY(ib);
    int rc;

    if (mark == NULL)
        return my_settle(m, SQL_DONE, key, NULL);
    /* the row and the mark in one transaction */
    if ((rc = my_begin(m)) != 0 || (rc = my_settle_done(m, key, mark)) != 0) {
        my_rollback(m);
        return rc;
    }
    return my_commit(m);
}

static int
my_release(struct consume_inbox *ib, const char *key)
{
    return my_settle(MY(ib),
                     "UPDATE consumer_inbox SET state = 'received', owner = NULL,"
                     " claim_until_ms = NULL, updated_ms = ?3" OURS,
                     key, NULL);
}

static int
my_fail(struct consume_inbox *ib, const char *key, const char *why, int *failures)
{
    struct my_inbox *m = MY(ib);
    struct row r;
    int rc = my_settle(m,
                       "UPDATE consumer_inbox SET state = 'received', owner = NULL,"
                       " claim_until_ms = NULL, failures = failures + 1, updated_ms = ?3,"
                       " last_error = LEFT(?5, 255)" OURS,
                       key, why);

    if (rc == 0)
        rc =
            my_row(m, "SELECT failures FROM consumer_inbox WHERE group_name = ?1 AND event_id = ?2",
                   key, NULL, &r, NULL);
    *failures = rc == 0 ? atoi(r.c[0]) : 0;
    return rc;
}

static int
my_dead(struct consume_inbox *ib, const char *key, const char *why)
{
    return my_row(MY(ib),
                  "INSERT INTO consumer_inbox(group_name, event_id, state, updated_ms, last_error)"
                  " VALUES(?1, ?2, 'dead', ?3, LEFT(?5, 255)) ON DUPLICATE KEY UPDATE"
                  " state = 'dead', owner = NULL, claim_until_ms = NULL, updated_ms = ?3,"
                  " last_error = LEFT(?5, 255)",
                  key, why, NULL, NULL);
}

/* Deletes sql's rows (?1 group, ?2 before_ms, ?3 now) in chunks of 500,
 * never one long lock over the whole group; *deleted their count. */
static int
my_purge_chunks(struct my_inbox *m, const char *sql, int64_t before_ms, int64_t *deleted)
{
    struct consume_arg a[3] = {{.type = 's', .s = m->group},
                               {.type = 'i', .i = before_ms},
                               {.type = 'i', .i = clock_wall_ms()}};
    uint64_t n = 0;
    int rc;

    *deleted = 0;
    do {
        rc = my_run(m, sql, a, 3, NULL, &n);
        if (rc == 0)
            *deleted += (int64_t)n;
    } while (rc == 0 && n == 500);
    return rc;
}

/* An unsettled row goes only when no claim on it runs any more (a node
 * that is still in the effect keeps it), on any node. */
static int
my_purge(struct consume_inbox *ib, int64_t before_ms, int64_t *unsettled)
{
    struct my_inbox *m = MY(ib);
    int64_t settled;
    int rc = my_purge_chunks(m,
                             "DELETE FROM consumer_inbox WHERE group_name = ?1"
                             " AND state IN ('received', 'progress') AND updated_ms < ?2"
                             " AND (claim_until_ms IS NULL OR claim_until_ms < ?3) LIMIT 500",
                             before_ms, unsettled);

    if (rc != 0)
        return rc;
    return my_purge_chunks(m,
                           "DELETE FROM consumer_inbox WHERE group_name = ?1"
                           " AND state IN ('done', 'dead') AND updated_ms < ?2 LIMIT 500",
                           before_ms, &settled);
}

/* ==== the handler's transaction ==== */

static int
my_tx_begin(struct consume_inbox *ib, const char *key)
{
    struct my_inbox *m = MY(ib);
    struct row r;
    int rc;

    if ((rc = my_begin(m)) != 0 || (rc = my_row(m, SQL_LOCK, key, NULL, &r, NULL)) != 0) {
        my_rollback(m);
        return rc;
    }
    if (strcmp(r.c[0], "progress") != 0 || strcmp(r.c[2], m->owner) != 0) {
        my_rollback(m);
        snprintf(m->super.errmsg, sizeof(m->super.errmsg), "the claim on %s was taken over (%s)",
                 key, r.found ? r.c[0] : "gone");
        return ROOMD_ESTALE;
    }
    return 0;
}

static void
my_tx_rollback(struct consume_inbox *ib)
{
    my_rollback(MY(ib));
}

static int
my_tx_commit_done(struct consume_inbox *ib, const char *key, const struct inbox_mark *mark)
{
    struct my_inbox *m = MY(ib);
    int rc = my_settle_done(m, key, mark);

    if (rc != 0) {
        my_rollback(m);
        return rc;
    }
    return my_commit(m);
}

static int
my_exec(struct consume_inbox *ib, const struct consume_sql *q, const struct consume_arg *args,
        int nargs, char *out, size_t outlen)
{
    struct row r;
    int rc = my_run(MY(ib), q->mysql ? q->mysql : q->sqlite, args, nargs, out ? &r : NULL, NULL);

    if (rc == 0 && out && outlen)
        snprintf(out, outlen, "%s", r.c[0]);
    return rc;
}

static int
my_state(struct consume_inbox *ib, const char *key, char *buf, size_t len)
{
    struct row r;
    int rc =
        my_row(MY(ib), "SELECT state FROM consumer_inbox WHERE group_name = ?1 AND event_id = ?2",
               key, NULL, &r, NULL);

    snprintf(buf, len, "%s", rc == 0 ? r.c[0] : "");
    return rc;
}

static int
my_forget_dead(struct consume_inbox *ib, const char *key, bool *forgotten)
{
    uint64_t n = 0;
    int rc = my_row(MY(ib),
                    "DELETE FROM consumer_inbox WHERE group_name = ?1 AND event_id = ?2"
                    " AND state = 'dead'",
                    key, NULL, NULL, &n);

    *forgotten = rc == 0 && n > 0;
    return rc;
}

#define MY_OP(op) .op = my_##op,
const struct inbox_ops inbox_mysql_ops = {.name = "mysql", INBOX_OPS(MY_OP)};
#undef MY_OP
