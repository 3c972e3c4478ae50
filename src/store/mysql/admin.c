/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mysql/admin.c: the admin store on the room store's MySQL/MariaDB
 * database (store/admin.h), through one connection of its own (reconnected
 * once when the server went away). Statements are built as text: every
 * value is an integer or a string escaped by mysql_real_escape_string for the
 * connection's utf8mb4, substituted for the '?' of the shared SQL. Read-only
 * handles run SET SESSION TRANSACTION READ ONLY and create nothing.
 */
#include "store/admin.h"
#include "store/mysql/internal.h"

#include "conf/conf.h"
#include "core/err.h"
#include "core/uuid.h"
#include "core/xmalloc.h"

#include <errmsg.h>
#include <inttypes.h>
#include <mysql.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct my_admin {
    struct admin_store super;
    MYSQL *db;
    pthread_mutex_t mu;
    bool readonly;
    char *host, *user, *password, *database;
    unsigned int port, connect_s;
};

/* A growing statement text. */
struct sql {
    char *p;
    size_t len, cap;
};

static void
put(struct sql *q, const char *s, size_t n)
{
    if (q->len + n + 1 > q->cap) {
        q->cap = (q->len + n + 1) * 2;
        q->p = xrealloc(q->p, q->cap);
    }
    memcpy(q->p + q->len, s, n);
    q->len += n;
    q->p[q->len] = '\0';
}

static void
put_text(struct my_admin *a, struct sql *q, const char *s)
{
    size_t n = strlen(s);
    char *esc = xmalloc(2 * n + 3);
    esc[0] = '\'';
    unsigned long m = mysql_real_escape_string(a->db, esc + 1, s, (unsigned long)n);
    esc[m + 1] = '\'';
    put(q, esc, m + 2);
    free(esc);
}

static void
put_int(struct sql *q, int64_t v)
{
    char b[32];
    int n = snprintf(b, sizeof(b), "%" PRId64, v);
    put(q, b, (size_t)n);
}

/* Appends tmpl with each '?' replaced by the next of p[0..np). */
static void
put_bound(struct my_admin *a, struct sql *q, const char *tmpl, const struct admin_param *p, int np)
{
    int k = 0;

    for (const char *c = tmpl; *c; c++) {
        if (*c == '?' && k < np) {
            if (p[k].is_text)
                put_text(a, q, p[k].s);
            else
                put_int(q, p[k].i);
            k++;
        } else {
            put(q, c, 1);
        }
    }
}

/* Appends the filter's conditions. */
static int
put_filter(struct my_admin *a, struct sql *q, const struct admin_filter *f)
{
    char where[1024] = "";
    struct admin_param p[ADMIN_MAX_PARAMS];
    int np = 0;

    if (admin_filter_where(f, where, sizeof(where), p, &np) != 0) {
        snprintf(a->super.errmsg, sizeof(a->super.errmsg), "filter too long");
        return ROOMD_EINVAL;
    }
    put_bound(a, q, where, p, np);
    return 0;
}

/* Records the failure of what, classified as the backend classifies every
 * server error (mys_classify, conn.c): EUNAVAIL when the connection is gone
 * or a lock wait / deadlock may pass, else EIO. */
static int
fail(struct my_admin *a, const char *what)
{
    unsigned int e = a->db ? mysql_errno(a->db) : CR_SERVER_GONE_ERROR;
    enum errclass k = mys_classify(e);

    snprintf(a->super.errmsg, sizeof(a->super.errmsg), "mysql %s: %s (%u)", what,
             a->db ? mysql_error(a->db) : "not connected", e);
    return k == EC_LOST || k == EC_RETRY ? ROOMD_EUNAVAIL : ROOMD_EIO;
}

static int
connect_db(struct my_admin *a)
{
    bool off = false;

    if (a->db != NULL)
        mysql_close(a->db);
    a->db = mysql_init(NULL);
    if (a->db == NULL)
        return ROOMD_ENOMEM;
    mysql_optionsv(a->db, MYSQL_OPT_CONNECT_TIMEOUT, &a->connect_s);
    mysql_optionsv(a->db, MYSQL_OPT_RECONNECT, &off);
    mysql_optionsv(a->db, MYSQL_SET_CHARSET_NAME, "utf8mb4");
    if (!mysql_real_connect(a->db, a->host, a->user, a->password, a->database, a->port, NULL,
                            CLIENT_FOUND_ROWS))
        return fail(a, "connect");
    const char *setup = a->readonly ? "SET SESSION TRANSACTION READ ONLY"
                                    : "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED";
    if (mysql_query(a->db, setup) != 0)
        return fail(a, "session");
    return 0;
}

/* Runs q (reconnecting once when the server went away). */
static int
run(struct my_admin *a, const char *q)
{
    if (a->db != NULL && mysql_query(a->db, q) == 0)
        return 0;
    unsigned int e = a->db ? mysql_errno(a->db) : CR_SERVER_GONE_ERROR;
    if (e != CR_SERVER_GONE_ERROR && e != CR_SERVER_LOST)
        return fail(a, "query");
    int rc = connect_db(a);
    if (rc != 0)
        return rc;
    return mysql_query(a->db, q) == 0 ? 0 : fail(a, "query");
}

/* Runs q and stores its result in *res. */
static int
select_rows(struct my_admin *a, const char *q, MYSQL_RES **res)
{
    int rc = run(a, q);

    if (rc != 0)
        return rc;
    *res = mysql_store_result(a->db);
    return *res != NULL ? 0 : fail(a, "result");
}

/* A fetched row and its lengths, for the shared readers (store/admin.c). */
struct my_row {
    MYSQL_ROW row;
    const unsigned long *len;
};

static int64_t
col_i64(void *r, int i)
{
    const char *v = ((struct my_row *)r)->row[i];
    return v ? strtoll(v, NULL, 10) : 0;
}

static const char *
col_text(void *r, int i)
{
    return ((struct my_row *)r)->row[i];
}

static const void *
col_blob(void *r, int i, size_t *len)
{
    struct my_row *m = r;
    *len = m->row[i] ? m->len[i] : 0;
    return m->row[i];
}

static int64_t
num(MYSQL_ROW row, int i)
{
    return col_i64(&(struct my_row){row, NULL}, i);
}

static void
copy(MYSQL_ROW row, int i, char *dst, size_t cap)
{
    snprintf(dst, cap, "%s", row[i] ? row[i] : "");
}

/* The columns of a fetched row, for the shared readers. */
#define MY_COLS(...) (&(struct admin_cols){(__VA_ARGS__), col_i64, col_text, col_blob})

/* Runs q (the caller holds a->mu) and reads its first row into dst through
 * read. Returns 0, ROOMD_ENOTFOUND (no row) or the failure. Blocks on the
 * server. */
static int
read_first(struct my_admin *a, const char *q, admin_row_reader read, void *dst)
{
    MYSQL_RES *res = NULL;
    MYSQL_ROW row;
    int rc = select_rows(a, q, &res);

    if (rc == 0) {
        if ((row = mysql_fetch_row(res)) != NULL)
            read(MY_COLS(&(struct my_row){row, mysql_fetch_lengths(res)}), dst);
        else
            rc = ROOMD_ENOTFOUND;
    }
    if (res != NULL)
        mysql_free_result(res);
    return rc;
}

/* Runs q (the caller holds a->mu) and appends each row to x. Returns 0 or
 * the failure (the rows read stay in x). Blocks on the server. */
static int
read_all(struct my_admin *a, const char *q, struct admin_rows *x)
{
    MYSQL_RES *res = NULL;
    MYSQL_ROW row;
    int rc = select_rows(a, q, &res);

    while (rc == 0 && (row = mysql_fetch_row(res)) != NULL)
        admin_rows_add(x, MY_COLS(&(struct my_row){row, mysql_fetch_lengths(res)}));
    if (res != NULL)
        mysql_free_result(res);
    return rc;
}

static void
my_close(struct admin_store *s)
{
    struct my_admin *a = (struct my_admin *)s;

    if (a->db != NULL)
        mysql_close(a->db);
    if (a->password != NULL)
        memset(a->password, 0, strlen(a->password));
    free(a->password);
    free(a->host);
    free(a->user);
    free(a->database);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

static int
my_open(struct admin_store **out, const struct conf_store *cs, bool readonly, char *err,
        size_t errlen)
{
    const struct conf_mysql *mc = &cs->mysql;
    const char *pw = mc->password ? mc->password : "";
    char ddl[512];
    int rc;

    if (mc->password_env != NULL && mc->password_env[0] != '\0' &&
        (pw = getenv(mc->password_env)) == NULL) {
        snprintf(err, errlen, "store.mysql.password_env: environment variable %s is not set",
                 mc->password_env);
        return ROOMD_EINVAL;
    }
    struct my_admin *a = xcalloc(1, sizeof(*a));
    a->super.ops = &admin_store_mysql_ops;
    pthread_mutex_init(&a->mu, NULL);
    a->readonly = readonly;
    a->host = xstrdup(mc->host && mc->host[0] ? mc->host : "127.0.0.1");
    a->user = xstrdup(mc->user ? mc->user : "root");
    a->password = xstrdup(pw);
    a->database = xstrdup(mc->database);
    a->port = mc->port > 0 ? (unsigned int)mc->port : 3306;
    a->connect_s =
        mc->connect_timeout_ms > 0 ? (unsigned int)((mc->connect_timeout_ms + 999) / 1000) : 3;
    if ((rc = connect_db(a)) != 0 || (rc = run(a, "SELECT 1 FROM room_outbox LIMIT 0")) != 0) {
        snprintf(err, errlen, "store.mysql: %s", a->super.errmsg);
        my_close(&a->super);
        return rc;
    }
    mysql_free_result(mysql_store_result(a->db));
    for (int i = 0; !readonly && admin_store_ddl[i] != NULL; i++) {
        snprintf(ddl, sizeof(ddl), admin_store_ddl[i],
                 "BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY");
        if ((rc = run(a, ddl)) != 0) {
            snprintf(err, errlen, "store.mysql: %s", a->super.errmsg);
            my_close(&a->super);
            return rc;
        }
    }
    if (run(a, "SELECT 1 FROM admin_audit_rows LIMIT 0") == 0) {
        a->super.has_audit = true;
        mysql_free_result(mysql_store_result(a->db));
    }
    *out = &a->super;
    return 0;
}

static int
my_summary(struct admin_store *s, struct admin_summary *out)
{
    struct my_admin *a = (struct my_admin *)s;
    MYSQL_RES *res = NULL;
    MYSQL_ROW row;

    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&a->mu);
    int rc = select_rows(a, ADMIN_SUMMARY_SQL, &res);
    while (rc == 0 && (row = mysql_fetch_row(res)) != NULL)
        admin_summary_add(MY_COLS(&(struct my_row){row, NULL}), out);
    if (res != NULL)
        mysql_free_result(res);
    res = NULL;
    if (rc == 0)
        rc = select_rows(a, STORE_OUTBOX_OLDEST_SQL, &res);
    while (rc == 0 && (row = mysql_fetch_row(res)) != NULL)
        outbox_counts_oldest(&out->oldest, (uint32_t)num(row, 0), row[1], num(row, 2));
    if (res != NULL)
        mysql_free_result(res);
    pthread_mutex_unlock(&a->mu);
    return rc;
}

static int
my_search(struct admin_store *s, const struct admin_filter *f, int64_t after_id, int limit,
          struct outbox_row **rows, size_t *n)
{
    struct my_admin *a = (struct my_admin *)s;
    struct sql q = {0};
    struct admin_rows x = {admin_read_outbox_row, sizeof(**rows), *rows, *n, *n};
    int rc;

    pthread_mutex_lock(&a->mu);
    put(&q, "SELECT " STORE_OUTBOX_COLS " FROM room_outbox WHERE id > ",
        strlen("SELECT " STORE_OUTBOX_COLS " FROM room_outbox WHERE id > "));
    put_int(&q, after_id);
    if ((rc = put_filter(a, &q, f)) == 0) {
        put(&q, " ORDER BY id LIMIT ", 19);
        put_int(&q, limit);
        rc = read_all(a, q.p, &x);
    }
    pthread_mutex_unlock(&a->mu);
    free(q.p);
    *rows = x.rows;
    *n = x.n;
    return rc;
}

static int
my_count(struct admin_store *s, const struct admin_filter *f, int64_t *count, int64_t *max_id)
{
    struct my_admin *a = (struct my_admin *)s;
    struct sql q = {0};
    int64_t got[2] = {0, 0};
    const char *head = "SELECT COUNT(*), COALESCE(MAX(id), 0) FROM room_outbox WHERE 1 = 1";
    int rc;

    pthread_mutex_lock(&a->mu);
    put(&q, head, strlen(head));
    if ((rc = put_filter(a, &q, f)) == 0)
        rc = read_first(a, q.p, admin_read_count, got);
    if (rc == 0) {
        *count = got[0];
        *max_id = got[1];
    }
    pthread_mutex_unlock(&a->mu);
    free(q.p);
    return rc;
}

static int
my_get(struct admin_store *s, const char *event_id, struct outbox_row *out)
{
    struct my_admin *a = (struct my_admin *)s;
    struct sql q = {0};
    const char *head = "SELECT " STORE_OUTBOX_COLS " FROM room_outbox WHERE event_id = ";
    int rc;

    pthread_mutex_lock(&a->mu);
    if (a->db != NULL || (rc = connect_db(a)) == 0) {
        put(&q, head, strlen(head));
        put_text(a, &q, event_id);
        rc = read_first(a, q.p, admin_read_outbox_row, out);
    }
    pthread_mutex_unlock(&a->mu);
    free(q.p);
    return rc;
}

static int
my_audit_begin(struct admin_store *s, const char *actor, bool repair, const char *filter_json,
               int64_t max_id, int64_t now_ms, int64_t *id)
{
    struct my_admin *a = (struct my_admin *)s;
    struct sql q = {0};
    struct admin_param p[] = {{.is_text = true, .s = actor},
                              {.is_text = true, .s = repair ? "repair" : "replay"},
                              {.is_text = true, .s = filter_json},
                              {.i = max_id},
                              {.i = now_ms},
                              {.i = now_ms}};
    int rc;

    pthread_mutex_lock(&a->mu);
    put_bound(a, &q,
              "INSERT INTO admin_audit (actor, action, filter, state, max_id, cursor_id, count,"
              " created_at_ms, updated_at_ms) VALUES (?, ?, ?, 'running', ?, 0, 0, ?, ?)",
              p, 6);
    if ((rc = run(a, q.p)) == 0)
        *id = (int64_t)mysql_insert_id(a->db);
    pthread_mutex_unlock(&a->mu);
    free(q.p);
    return rc;
}

/* Builds and runs one statement of the replay transaction. */
static int
stmt(struct my_admin *a, const char *tmpl, const struct admin_param *p, int np)
{
    struct sql q = {0};
    put_bound(a, &q, tmpl, p, np);
    int rc = run(a, q.p);
    free(q.p);
    return rc;
}

static int
chunk_tx(struct my_admin *a, int64_t audit, const struct admin_filter *f, bool repair, int limit,
         int64_t now_ms, int64_t *done, bool *finished)
{
    struct admin_param p[6];
    MYSQL_RES *res = NULL;
    MYSQL_ROW row;
    struct sql q = {0};
    int64_t cursor, max_id, last = 0;
    struct {
        int64_t id;
        char event_id[37];
    } *ids = NULL;
    size_t n = 0, cap = 0;
    int rc;

    p[0] = (struct admin_param){.i = audit};
    put_bound(a, &q, "SELECT cursor_id, max_id, state FROM admin_audit WHERE id = ? FOR UPDATE", p,
              1);
    if ((rc = select_rows(a, q.p, &res)) != 0)
        goto out;
    if ((row = mysql_fetch_row(res)) == NULL) {
        rc = ROOMD_ENOTFOUND;
        goto out;
    }
    cursor = num(row, 0);
    max_id = num(row, 1);
    *finished = strcmp(row[2], "running") != 0;
    mysql_free_result(res);
    res = NULL;
    if (*finished)
        goto out;

    q.len = 0;
    p[0] = (struct admin_param){.i = cursor};
    p[1] = (struct admin_param){.i = max_id};
    put_bound(a, &q, "SELECT id, event_id FROM room_outbox WHERE" ADMIN_REPLAYABLE, p, 2);
    if ((rc = put_filter(a, &q, f)) != 0)
        goto out;
    put(&q, " ORDER BY id LIMIT ", 19);
    put_int(&q, limit);
    put(&q, " FOR UPDATE", 11);
    if ((rc = select_rows(a, q.p, &res)) != 0)
        goto out;
    while ((row = mysql_fetch_row(res)) != NULL) {
        ids = xgrow(ids, n, &cap, sizeof(*ids));
        ids[n].id = num(row, 0);
        copy(row, 1, ids[n].event_id, sizeof(ids[n].event_id));
        n++;
    }
    for (size_t i = 0; rc == 0 && i < n; i++) {
        char new_id[UUID_STR_LEN] = "";
        if (repair) {
            uuid_v7(now_ms, new_id);
            p[0] = (struct admin_param){.is_text = true, .s = new_id};
            p[1] = p[2] = p[3] = (struct admin_param){.i = now_ms};
            p[4] = (struct admin_param){.i = ids[i].id};
            rc = stmt(a,
                      "INSERT INTO room_outbox (event_id, command_id, " STORE_OUTBOX_COPY
                      ", status, retry_count, sinks_done, due_at_ms, created_at_ms, updated_at_ms)"
                      " SELECT ?, CONCAT('repair:', event_id), " STORE_OUTBOX_COPY
                      ", 'pending', 0, 0, ?, ?, ? FROM room_outbox WHERE id = ?",
                      p, 5);
        } else {
            p[0] = p[1] = (struct admin_param){.i = now_ms};
            p[2] = (struct admin_param){.i = ids[i].id};
            rc = stmt(a,
                      "UPDATE room_outbox SET " MYS_OUTBOX_REPLAY_SET ", due_at_ms = ?,"
                      " updated_at_ms = ? WHERE id = ? AND status = 'failed'",
                      p, 3);
        }
        if (rc != 0)
            break;
        p[0] = (struct admin_param){.i = audit};
        p[1] = (struct admin_param){.i = ids[i].id};
        p[2] = (struct admin_param){.is_text = true, .s = ids[i].event_id};
        p[3] = (struct admin_param){.is_text = true, .s = new_id};
        rc = stmt(a,
                  "INSERT INTO admin_audit_rows (audit_id, outbox_id, event_id, new_event_id)"
                  " VALUES (?, ?, ?, ?)",
                  p, 4);
        last = ids[i].id;
    }
    if (rc != 0)
        goto out;
    *done = (int64_t)n;
    *finished = n < (size_t)limit;
    p[0] = (struct admin_param){.i = last};
    p[1] = (struct admin_param){.i = (int64_t)n};
    p[2] = (struct admin_param){.i = now_ms};
    p[3] = (struct admin_param){.i = *finished ? now_ms : 0};
    p[4] = (struct admin_param){.i = audit};
    rc = stmt(a,
              *finished ? "UPDATE admin_audit SET cursor_id = GREATEST(cursor_id, ?),"
                          " count = count + ?, updated_at_ms = ?, state = 'done',"
                          " finished_at_ms = ? WHERE id = ?"
                        : "UPDATE admin_audit SET cursor_id = GREATEST(cursor_id, ?),"
                          " count = count + ?, updated_at_ms = ?, finished_at_ms = ?"
                          " WHERE id = ?",
              p, 5);
out:
    if (res != NULL)
        mysql_free_result(res);
    free(ids);
    free(q.p);
    return rc;
}

static int
my_replay_chunk(struct admin_store *s, int64_t id, const struct admin_filter *f, bool repair,
                int limit, int64_t now_ms, int64_t *done, bool *finished)
{
    struct my_admin *a = (struct my_admin *)s;
    int rc;

    pthread_mutex_lock(&a->mu);
    if ((rc = run(a, "START TRANSACTION")) == 0) {
        rc = chunk_tx(a, id, f, repair, limit, now_ms, done, finished);
        if (rc == 0 && mysql_commit(a->db) != 0)
            rc = fail(a, "commit");
        if (rc != 0) {
            mysql_rollback(a->db);
            *done = 0;
        }
    }
    pthread_mutex_unlock(&a->mu);
    return rc;
}

static int
my_audit_record(struct admin_store *s, const char *actor, const char *action,
                const char *filter_json, const struct admin_audit_row *rows, size_t n,
                int64_t now_ms, int64_t *id)
{
    struct my_admin *a = (struct my_admin *)s;
    struct admin_param p[] = {{.is_text = true, .s = actor},
                              {.is_text = true, .s = action},
                              {.is_text = true, .s = filter_json},
                              {.i = (int64_t)n},
                              {.i = now_ms},
                              {.i = now_ms},
                              {.i = now_ms}};
    int rc;

    pthread_mutex_lock(&a->mu);
    if ((rc = run(a, "START TRANSACTION")) == 0)
        rc = stmt(a,
                  "INSERT INTO admin_audit (actor, action, filter, state, max_id, cursor_id,"
                  " count, created_at_ms, updated_at_ms, finished_at_ms)"
                  " VALUES (?, ?, ?, 'done', 0, 0, ?, ?, ?, ?)",
                  p, 7);
    if (rc == 0)
        *id = (int64_t)mysql_insert_id(a->db);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        struct admin_param r[] = {{.i = *id},
                                  {.i = rows[i].outbox_id},
                                  {.is_text = true, .s = rows[i].event_id},
                                  {.is_text = true, .s = rows[i].new_event_id}};
        rc = stmt(a,
                  "INSERT INTO admin_audit_rows (audit_id, outbox_id, event_id, new_event_id)"
                  " VALUES (?, ?, ?, ?)",
                  r, 4);
    }
    if (rc == 0 && mysql_commit(a->db) != 0)
        rc = fail(a, "commit");
    if (rc != 0)
        mysql_rollback(a->db);
    pthread_mutex_unlock(&a->mu);
    return rc;
}

/* No audit table (a read-only handle on a store never audited): no audits. */
static bool
no_table(struct my_admin *a)
{
    return a->db != NULL && mysql_errno(a->db) == 1146;
}

/* Appends every row of tmpl (each '?' bound to the next of p[0..np)) to x;
 * a database without the audit tables has none. Returns 0 or the failure.
 * Takes a->mu; blocks on the server. */
static int
audit_read_all(struct my_admin *a, const char *tmpl, const struct admin_param *p, int np,
               struct admin_rows *x)
{
    struct sql q = {0};
    int rc;

    pthread_mutex_lock(&a->mu);
    put_bound(a, &q, tmpl, p, np);
    rc = read_all(a, q.p, x);
    if (rc != 0 && no_table(a))
        rc = 0;
    pthread_mutex_unlock(&a->mu);
    free(q.p);
    return rc;
}

static int
my_audit_list(struct admin_store *s, int64_t before_id, int limit, struct admin_audit **out,
              size_t *n)
{
    struct admin_param p[] = {{.i = before_id}, {.i = before_id}, {.i = limit}};
    struct admin_rows x = {admin_read_audit, sizeof(**out), *out, *n, *n};
    int rc = audit_read_all((struct my_admin *)s,
                            "SELECT " ADMIN_AUDIT_COLS " FROM admin_audit WHERE ? = 0 OR id < ?"
                            " ORDER BY id DESC LIMIT ?",
                            p, 3, &x);

    *out = x.rows;
    *n = x.n;
    return rc;
}

static int
my_audit_get(struct admin_store *s, int64_t id, struct admin_audit *out)
{
    struct my_admin *a = (struct my_admin *)s;
    struct sql q = {0};
    struct admin_param p[] = {{.i = id}};

    pthread_mutex_lock(&a->mu);
    put_bound(a, &q, "SELECT " ADMIN_AUDIT_COLS " FROM admin_audit WHERE id = ?", p, 1);
    int rc = read_first(a, q.p, admin_read_audit, out);
    if (rc != 0 && no_table(a))
        rc = ROOMD_ENOTFOUND;
    pthread_mutex_unlock(&a->mu);
    free(q.p);
    return rc;
}

static int
my_audit_rows(struct admin_store *s, int64_t id, int64_t after, int limit,
              struct admin_audit_row **out, size_t *n)
{
    struct admin_param p[] = {{.i = id}, {.i = after}, {.i = limit}};
    struct admin_rows x = {admin_read_audit_row, sizeof(**out), *out, *n, *n};
    int rc = audit_read_all((struct my_admin *)s,
                            "SELECT outbox_id, event_id, new_event_id FROM admin_audit_rows"
                            " WHERE audit_id = ? AND outbox_id > ? ORDER BY outbox_id LIMIT ?",
                            p, 3, &x);

    *out = x.rows;
    *n = x.n;
    return rc;
}

#define MY_OP(op) .op = my_##op,
const struct admin_store_ops admin_store_mysql_ops = {ADMIN_STORE_OPS(MY_OP)};
#undef MY_OP
