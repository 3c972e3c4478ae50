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
 * them once), beside the store's own. One connection per group, its own
 * (never the store's pool), reconnected on the next call after a loss.
 * Statements are text: integers printed, strings escaped by
 * mysql_real_escape_string for the connection's utf8mb4.
 */
#include "store/inbox.h"
#include "store/mysql/internal.h"

#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/uuid.h"
#include "core/xmalloc.h"

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
    MYSQL *db; /* NULL until connected, again after a loss */
    char *host, *socket, *user, *password, *database;
    unsigned int port, connect_s, read_s, write_s;
    char group[64];
    char owner[128]; /* "<node>/<8 hex>": this handle's claims */
    int64_t claim_ms;
    bool down; /* logged the outage */
};

#define MY(ib) ((struct my_inbox *)(ib))

static void
t_arg(struct my_inbox *m, FILE *t, const struct consume_arg *a)
{
    if (a->type == 'i') {
        fprintf(t, "%" PRId64, a->i);
        return;
    }
    if (a->s == NULL) {
        fputs("NULL", t);
        return;
    }
    size_t n = strlen(a->s);
    char *esc = xmalloc(2 * n + 1);
    unsigned long k = mysql_real_escape_string(m->db, esc, a->s, (unsigned long)n);
    fprintf(t, "'%.*s'", (int)k, esc);
    free(esc);
}

/* tmpl with each ?N (1..9) replaced by args[N-1]. Malloc'd. */
static char *
bind_text(struct my_inbox *m, const char *tmpl, const struct consume_arg *args, int nargs)
{
    char *p = NULL;
    size_t len = 0;
    FILE *t = open_memstream(&p, &len);

    if (t == NULL)
        abort(); /* out of memory, as xmalloc */
    for (const char *c = tmpl; *c; c++) {
        if (c[0] == '?' && c[1] >= '1' && c[1] <= '9' && c[1] - '1' < nargs) {
            t_arg(m, t, &args[c[1] - '1']);
            c++;
        } else {
            fputc(*c, t);
        }
    }
    fclose(t);
    return p;
}

static void
my_drop(struct my_inbox *m)
{
    if (m->db)
        mysql_close(m->db);
    m->db = NULL;
    m->super.in_tx = false;
}

/* Records the failure of what, classified as the backend classifies every
 * server error (mys_classify, conn.c); a lost connection is dropped
 * (reconnected by the next call). Returns EUNAVAIL (connection), ERETRY
 * (deadlock or lock wait) or EIO. */
static int
my_error(struct my_inbox *m, const char *what)
{
    unsigned int e = m->db ? mysql_errno(m->db) : 0;
    enum errclass k = mys_classify(e);

    snprintf(m->super.errmsg, sizeof(m->super.errmsg), "mysql %s: %s (%u)", what,
             m->db ? mysql_error(m->db) : "not connected", e);
    if (k == EC_RETRY)
        return ROOMD_ERETRY;
    /* lost, or any other client-side error: the connection is unusable */
    if (k == EC_LOST || e == 0 || e >= CR_MIN_ERROR) {
        my_drop(m);
        return ROOMD_EUNAVAIL;
    }
    return ROOMD_EIO;
}

/* Runs sql; with res != NULL keeps its result set (the caller frees it). */
static int
my_query(struct my_inbox *m, const char *sql, MYSQL_RES **res)
{
    if (res)
        *res = NULL;
    if (m->db == NULL) {
        snprintf(m->super.errmsg, sizeof(m->super.errmsg), "mysql: not connected");
        return ROOMD_EUNAVAIL;
    }
    if (mysql_real_query(m->db, sql, strlen(sql)) != 0)
        return my_error(m, "query");
    if (res) {
        *res = mysql_store_result(m->db);
        if (*res == NULL && mysql_field_count(m->db) > 0)
            return my_error(m, "result");
    } else {
        MYSQL_RES *r = mysql_store_result(m->db);
        if (r)
            mysql_free_result(r);
    }
    return 0;
}

/* Connects when not connected: timeouts, utf8mb4, READ COMMITTED, no
 * silent reconnect (it would lose an open transaction unseen). */
static int
my_connect(struct my_inbox *m)
{
    my_bool off = 0;

    if (m->db != NULL)
        return 0;
    m->db = mysql_init(NULL);
    if (m->db == NULL)
        return ROOMD_ENOMEM;
    mysql_optionsv(m->db, MYSQL_OPT_CONNECT_TIMEOUT, &m->connect_s);
    mysql_optionsv(m->db, MYSQL_OPT_READ_TIMEOUT, &m->read_s);
    mysql_optionsv(m->db, MYSQL_OPT_WRITE_TIMEOUT, &m->write_s);
    mysql_optionsv(m->db, MYSQL_OPT_RECONNECT, &off);
    mysql_optionsv(m->db, MYSQL_SET_CHARSET_NAME, "utf8mb4");
    if (!mysql_real_connect(m->db, m->host, m->user, m->password, m->database, m->port, m->socket,
                            CLIENT_FOUND_ROWS)) {
        snprintf(m->super.errmsg, sizeof(m->super.errmsg), "mysql connect %s:%u/%s: %s (%u)",
                 m->socket ? m->socket : m->host, m->port, m->database, mysql_error(m->db),
                 mysql_errno(m->db));
        if (!m->down)
            log_warn("consume", "inbox database unreachable", "group=%s error=\"%s\"", m->group,
                     m->super.errmsg);
        m->down = true;
        mysql_close(m->db);
        m->db = NULL;
        return ROOMD_EUNAVAIL;
    }
    int rc = my_query(m, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED", NULL);
    if (rc == 0)
        rc = my_query(m, "SET SESSION innodb_lock_wait_timeout = 5", NULL);
    if (rc != 0) {
        my_drop(m);
        return rc;
    }
    if (m->down)
        log_info("consume", "inbox database reachable again", "group=%s", m->group);
    m->down = false;
    return 0;
}

/* The first row of a result: up to 4 columns as text ("" for NULL). */
struct row {
    bool found;
    char c[4][128];
};

/* Runs tmpl bound to args; r (NULL: not wanted) gets the first row,
 * *affected (NULL: not wanted) the rows changed. */
static int
my_run(struct my_inbox *m, const char *tmpl, const struct consume_arg *args, int nargs,
       struct row *r, uint64_t *affected)
{
    MYSQL_RES *res = NULL;
    int rc;

    if (r)
        memset(r, 0, sizeof(*r));
    if ((rc = my_connect(m)) != 0)
        return rc;
    char *sql = bind_text(m, tmpl, args, nargs);
    rc = my_query(m, sql, r ? &res : NULL);
    free(sql);
    if (rc != 0)
        return rc;
    if (affected)
        *affected = (uint64_t)mysql_affected_rows(m->db);
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

static int
my_begin(struct my_inbox *m)
{
    int rc = my_connect(m);

    if (rc == 0)
        rc = my_query(m, "START TRANSACTION", NULL);
    m->super.in_tx = rc == 0;
    return rc;
}

static void
my_rollback(struct my_inbox *m)
{
    if (m->db)
        mysql_real_query(m->db, "ROLLBACK", 8);
    m->super.in_tx = false;
}

static int
my_commit(struct my_inbox *m)
{
    int rc = my_query(m, "COMMIT", NULL);

    if (rc != 0) {
        char keep[sizeof(m->super.errmsg)];
        memcpy(keep, m->super.errmsg, sizeof(keep));
        my_rollback(m);
        memcpy(m->super.errmsg, keep, sizeof(keep));
    }
    m->super.in_tx = false;
    return rc;
}

/* ==== open / close ==== */

static void
my_close(struct consume_inbox *ib)
{
    struct my_inbox *m = MY(ib);

    my_drop(m);
    free(m->host);
    free(m->socket);
    free(m->user);
    if (m->password)
        memset(m->password, 0, strlen(m->password));
    free(m->password);
    free(m->database);
    free(m);
}

static unsigned int
secs(int64_t ms, unsigned int dflt)
{
    return ms > 0 ? (unsigned int)((ms + 999) / 1000) : dflt;
}

/* Creates the kit's and the handler's tables, once across nodes. */
static int
my_schema(struct my_inbox *m, const struct consume_sql *const *schema)
{
    struct row got;
    int rc = my_run(m, "SELECT GET_LOCK('roomd.consumer_schema', 30)", NULL, 0, &got, NULL);

    if (rc != 0)
        return rc;
    if (strcmp(got.c[0], "1") != 0) {
        snprintf(m->super.errmsg, sizeof(m->super.errmsg), "GET_LOCK timed out after 30 s");
        return ROOMD_ETIMEDOUT;
    }
    rc = my_query(m, SCHEMA, NULL);
    if (rc == 0)
        rc = my_query(m, SCHEMA_ROOM_SEQ, NULL);
    for (const struct consume_sql *const *q = schema; rc == 0 && q && *q; q++)
        rc = my_query(m, (*q)->mysql ? (*q)->mysql : (*q)->sqlite, NULL);
    if (m->db)
        my_query(m, "SELECT RELEASE_LOCK('roomd.consumer_schema')", NULL);
    return rc;
}

static int
my_open(struct consume_inbox **out, const struct inbox_config *cfg, char *err, size_t errlen)
{
    const struct conf_mysql *mc = &cfg->store->mysql;
    const char *pw = mc->password ? mc->password : "";
    char id[UUID_STR_LEN];

    *out = NULL;
    if (mc->password_env && *mc->password_env && (pw = getenv(mc->password_env)) == NULL) {
        snprintf(err, errlen, "store.mysql.password_env: environment variable %s is not set",
                 mc->password_env);
        return ROOMD_EINVAL;
    }
    struct my_inbox *m = xcalloc(1, sizeof(*m));
    m->super.shared = true;
    if (mc->host && mc->host[0] == '/') { /* a unix socket path */
        m->socket = xstrdup(mc->host);
        m->host = xstrdup("localhost");
    } else {
        m->host = xstrdup(mc->host && *mc->host ? mc->host : "127.0.0.1");
    }
    m->port = mc->port > 0 ? (unsigned int)mc->port : 3306;
    m->user = xstrdup(mc->user ? mc->user : "root");
    m->password = xstrdup(pw);
    m->database = xstrdup(mc->database ? mc->database : "roomd");
    m->connect_s = secs(mc->connect_timeout_ms, 2);
    m->read_s = secs(mc->read_timeout_ms, 5);
    m->write_s = secs(mc->write_timeout_ms, 5);
    snprintf(m->group, sizeof(m->group), "%s", cfg->group);
    uuid_v7(clock_wall_ms(), id);
    /* the uuid's random tail: a restarted node never mistakes an old claim
     * of its name for its own */
    snprintf(m->owner, sizeof(m->owner), "%s/%.8s", cfg->owner && *cfg->owner ? cfg->owner : "-",
             id + 28);
    m->claim_ms = cfg->claim_ms > 0 ? cfg->claim_ms : 30000;
    snprintf(m->super.where, sizeof(m->super.where), "mysql %s:%u/%s consumer_inbox",
             m->socket ? m->socket : m->host, m->port, m->database);

    int rc = cfg->existing ? my_connect(m) : my_schema(m, cfg->schema);
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
