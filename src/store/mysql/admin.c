/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mysql/admin.c: the admin store on the room store's MySQL/MariaDB
 * database (store/admin.h), on the backend's one pool (mys_pool_share,
 * conn.c): its connect, reconnect, store.mysql.hosts failover and error
 * classes. Each call is one mys_run operation (a lost connection reconnects
 * and reruns it, a deadlock reruns it). Statements are text (filters are
 * built at run time), bound by mys_text: integers printed, strings escaped.
 * A read-only handle creates nothing and refuses every write (EPERM).
 */
#include "store/admin.h"
#include "store/inbox.h"
#include "store/mysql/internal.h"

#include "conf/conf.h"
#include "core/err.h"
#include "core/uuid.h"
#include "core/xmalloc.h"
#include "store/store.h"

#include <mysql.h>
#include <mysqld_error.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct my_admin {
    struct admin_store super;
    struct mstore *pool;
    pthread_mutex_t mu; /* one call at a time: super.errmsg */
    bool readonly;
};

#define MY(s) ((struct my_admin *)(s))

/* The arguments of one statement: p[0..np), then the filter's. */
struct args {
    struct consume_arg a[ADMIN_MAX_PARAMS + 8];
    int n;
};

static void
args_add(struct args *x, const struct admin_param *p, int np)
{
    for (int k = 0; k < np && x->n < (int)(sizeof(x->a) / sizeof(x->a[0])); k++)
        x->a[x->n++] =
            (struct consume_arg){.type = p[k].is_text ? 's' : 'i', .s = p[k].s, .i = p[k].i};
}

/* head (its '?' bound to p[0..np)), the conditions of f (NULL: none), then
 * tail, as one statement's text (malloc'd), or NULL when the filter does not
 * fit (EINVAL). */
static char *
build(const char *head, const struct admin_param *p, int np, const struct admin_filter *f,
      const char *tail)
{
    char where[1024] = "", *tmpl, *sql;
    struct admin_param fp[ADMIN_MAX_PARAMS];
    int nf = 0;
    struct args x = {.n = 0};

    if (f != NULL && admin_filter_where(f, where, sizeof(where), fp, &nf) != 0)
        return NULL;
    args_add(&x, p, np);
    args_add(&x, fp, nf);
    tmpl = xasprintf("%s%s%s", head, where, tail ? tail : "");
    sql = mys_text(tmpl, x.a, x.n);
    free(tmpl);
    return sql;
}

/* Runs the text statement tmpl (its '?' bound to p[0..np)) on c. */
static int
exec_on(struct conn *c, const char *tmpl, const struct admin_param *p, int np)
{
    char *sql = build(tmpl, p, np, NULL, NULL);
    int rc = mys_q_result(c, sql, NULL);

    free(sql);
    return rc;
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

/* One select run by mys_run: each row of sql to row(cols, arg). The rows
 * are stored before the first is read, so a rerun (a lost connection) never
 * follows a row read. no_table: it failed for a missing table. */
struct select {
    const char *sql;
    void (*row)(const struct admin_cols *c, void *arg);
    void *arg;
    bool no_table;
};

static int
select_fn(struct conn *c, void *arg)
{
    struct select *x = arg;
    MYSQL_RES *res = NULL;
    MYSQL_ROW row;
    int rc = mys_q_result(c, x->sql, &res);

    x->no_table = rc != 0 && c->err == ER_NO_SUCH_TABLE;
    while (rc == 0 && res != NULL && (row = mysql_fetch_row(res)) != NULL)
        x->row(&(struct admin_cols){&(struct my_row){row, mysql_fetch_lengths(res)}, col_i64,
                                    col_text, col_blob},
               x->arg);
    if (res != NULL)
        mysql_free_result(res);
    return rc;
}

/* The call's end: its failure's text into the handle's errmsg. Returns rc. */
static int
done(struct my_admin *a, int rc)
{
    if (rc != 0)
        snprintf(a->super.errmsg, sizeof(a->super.errmsg), "%s", store_errmsg());
    return rc;
}

/* Runs x on the pool (the caller holds a->mu). Returns 0 or the failure. */
static int
select_run(struct my_admin *a, struct select *x)
{
    if (x->sql == NULL) {
        store_set_errmsg("filter too long");
        return ROOMD_EINVAL;
    }
    return mys_run(a->pool, select_fn, x);
}

/* The first row only, through a reader. */
struct first {
    admin_row_reader read;
    void *dst;
    bool found;
};

static void
first_row(const struct admin_cols *c, void *arg)
{
    struct first *f = arg;

    if (!f->found)
        f->read(c, f->dst);
    f->found = true;
}

static void
all_rows(const struct admin_cols *c, void *arg)
{
    admin_rows_add(arg, c);
}

/* Reads the first row of sql (malloc'd; freed here) into dst through read,
 * under a->mu. Returns 0, ROOMD_ENOTFOUND (no row; also a missing table
 * when absent_ok) or the failure. Blocks on the server. */
static int
read_first(struct my_admin *a, char *sql, admin_row_reader read, void *dst, bool absent_ok)
{
    struct first f = {read, dst, false};
    struct select x = {sql, first_row, &f, false};
    int rc;

    pthread_mutex_lock(&a->mu);
    rc = select_run(a, &x);
    if (rc == 0 && !f.found)
        rc = ROOMD_ENOTFOUND;
    else if (rc != 0 && absent_ok && x.no_table)
        rc = ROOMD_ENOTFOUND;
    else
        done(a, rc);
    pthread_mutex_unlock(&a->mu);
    free(sql);
    return rc;
}

/* Appends every row of sql (malloc'd; freed here) to x, under a->mu; with
 * absent_ok a missing table has none. Returns 0 or the failure (the rows read
 * stay in x). Blocks on the server. */
static int
read_all(struct my_admin *a, char *sql, struct admin_rows *rows, bool absent_ok)
{
    struct select x = {sql, all_rows, rows, false};
    int rc;

    pthread_mutex_lock(&a->mu);
    rc = select_run(a, &x);
    if (rc != 0 && absent_ok && x.no_table)
        rc = 0;
    done(a, rc);
    pthread_mutex_unlock(&a->mu);
    free(sql);
    return rc;
}

static void
my_close(struct admin_store *s)
{
    struct my_admin *a = MY(s);

    mys_pool_release(a->pool, true);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

static int
ddl_fn(struct conn *c, void *arg)
{
    char ddl[512];

    (void)arg;
    for (int i = 0; admin_store_ddl[i] != NULL; i++) {
        snprintf(ddl, sizeof(ddl), admin_store_ddl[i],
                 "BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY");
        int rc = mys_q_result(c, ddl, NULL);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static void
no_row(const struct admin_cols *c, void *arg)
{
    (void)c;
    (void)arg;
}

static int
my_open(struct admin_store **out, const struct conf_store *cs, bool readonly, char *err,
        size_t errlen)
{
    struct my_admin *a = xcalloc(1, sizeof(*a));
    struct select probe = {"SELECT 1 FROM room_outbox LIMIT 0", no_row, NULL, false};
    int rc;

    a->super.ops = &admin_store_mysql_ops;
    pthread_mutex_init(&a->mu, NULL);
    a->readonly = readonly;
    if ((rc = mys_pool_share(cs, &a->pool, err, errlen)) != 0) {
        pthread_mutex_destroy(&a->mu);
        free(a);
        return rc;
    }
    if ((rc = mys_run(a->pool, select_fn, &probe)) != 0 ||
        (!readonly && (rc = mys_run(a->pool, ddl_fn, NULL)) != 0)) {
        snprintf(err, errlen, "store.mysql: %s", store_errmsg());
        my_close(&a->super);
        return rc;
    }
    probe.sql = "SELECT 1 FROM admin_audit_rows LIMIT 0";
    a->super.has_audit = mys_run(a->pool, select_fn, &probe) == 0;
    *out = &a->super;
    return 0;
}

static void
oldest_row(const struct admin_cols *c, void *arg)
{
    outbox_counts_oldest(&((struct admin_summary *)arg)->oldest, (uint32_t)c->i64(c->src, 0),
                         c->text(c->src, 1), c->i64(c->src, 2));
}

static void
summary_row(const struct admin_cols *c, void *arg)
{
    admin_summary_add(c, arg);
}

static int
my_summary(struct admin_store *s, struct admin_summary *out)
{
    struct my_admin *a = MY(s);
    struct select counts = {ADMIN_SUMMARY_SQL, summary_row, out, false};
    struct select oldest = {STORE_OUTBOX_OLDEST_SQL, oldest_row, out, false};
    int rc;

    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&a->mu);
    if ((rc = select_run(a, &counts)) == 0)
        rc = select_run(a, &oldest);
    done(a, rc);
    pthread_mutex_unlock(&a->mu);
    return rc;
}

static int
my_search(struct admin_store *s, const struct admin_filter *f, int64_t after_id, int limit,
          struct outbox_row **rows, size_t *n)
{
    struct admin_param p[] = {{.i = after_id}};
    struct admin_rows x = {admin_read_outbox_row, sizeof(**rows), *rows, *n, *n};
    char tail[48];
    int rc;

    snprintf(tail, sizeof(tail), " ORDER BY id LIMIT %d", limit);
    rc = read_all(
        MY(s), build("SELECT " STORE_OUTBOX_COLS " FROM room_outbox WHERE id > ?", p, 1, f, tail),
        &x, false);
    *rows = x.rows;
    *n = x.n;
    return rc;
}

static int
my_count(struct admin_store *s, const struct admin_filter *f, int64_t *count, int64_t *max_id)
{
    int64_t got[2] = {0, 0};
    int rc = read_first(MY(s),
                        build("SELECT COUNT(*), COALESCE(MAX(id), 0) FROM room_outbox WHERE 1 = 1",
                              NULL, 0, f, NULL),
                        admin_read_count, got, false);

    if (rc == 0) {
        *count = got[0];
        *max_id = got[1];
    }
    return rc;
}

static int
my_get(struct admin_store *s, const char *event_id, struct outbox_row *out)
{
    struct admin_param p[] = {{.is_text = true, .s = event_id}};

    return read_first(
        MY(s),
        build("SELECT " STORE_OUTBOX_COLS " FROM room_outbox WHERE event_id = ?", p, 1, NULL, NULL),
        admin_read_outbox_row, out, false);
}

/* A write of the admin store, one mys_run operation (fn(c, arg)), under
 * a->mu; a read-only handle refuses it. */
static int
write_run(struct my_admin *a, mys_txn_fn fn, void *arg)
{
    int rc;

    if (a->readonly) {
        snprintf(a->super.errmsg, sizeof(a->super.errmsg), "the admin store is read-only");
        return ROOMD_EPERM;
    }
    pthread_mutex_lock(&a->mu);
    rc = done(a, mys_run(a->pool, fn, arg));
    pthread_mutex_unlock(&a->mu);
    return rc;
}

/* An audit insert: ADMIN_AUDIT_BEGIN_SQL or, with rows[0..n), DONE_SQL and
 * its rows. The new id in *id. */
struct audit_ins {
    const struct admin_param *p;
    const struct admin_audit_row *rows;
    size_t n;
    int64_t *id;
};

static int
audit_row_on(struct conn *c, int64_t audit, int64_t outbox_id, const char *event_id,
             const char *new_id)
{
    struct admin_param r[] = {{.i = audit},
                              {.i = outbox_id},
                              {.is_text = true, .s = event_id},
                              {.is_text = true, .s = new_id}};

    return exec_on(c, ADMIN_AUDIT_ROW_SQL, r, 4);
}

static int
begin_fn(struct conn *c, void *arg)
{
    struct audit_ins *x = arg;
    int rc = exec_on(c, ADMIN_AUDIT_BEGIN_SQL, x->p, 5);

    if (rc == 0)
        *x->id = (int64_t)mysql_insert_id(c->db);
    return rc;
}

static int
my_audit_begin(struct admin_store *s, const char *actor, bool repair, const char *filter_json,
               int64_t max_id, int64_t now_ms, int64_t *id)
{
    struct admin_param p[] = {{.is_text = true, .s = actor},
                              {.is_text = true, .s = repair ? "repair" : "replay"},
                              {.is_text = true, .s = filter_json},
                              {.i = max_id},
                              {.i = now_ms}};
    struct audit_ins x = {p, NULL, 0, id};

    return write_run(MY(s), begin_fn, &x);
}

/* One replay chunk (admin_store_replay_chunk), one transaction. */
struct chunk {
    int64_t audit;
    const struct admin_filter *f;
    bool repair;
    int limit;
    int64_t now_ms;
    int64_t *done;
    bool *finished;
};

struct picked {
    struct {
        int64_t id;
        char event_id[37];
    } * ids;
    size_t n, cap;
};

static void
pick_row(const struct admin_cols *c, void *arg)
{
    struct picked *p = arg;
    const char *ev = c->text(c->src, 1);

    p->ids = xgrow(p->ids, p->n, &p->cap, sizeof(*p->ids));
    p->ids[p->n].id = c->i64(c->src, 0);
    snprintf(p->ids[p->n].event_id, sizeof(p->ids[p->n].event_id), "%s", ev ? ev : "");
    p->n++;
}

/* The audit's cursor, max_id and state ("running": *running). */
struct cursor {
    int64_t cursor, max_id;
    bool found, running;
};

static void
cursor_row(const struct admin_cols *c, void *arg)
{
    struct cursor *k = arg;
    const char *st = c->text(c->src, 2);

    k->found = true;
    k->cursor = c->i64(c->src, 0);
    k->max_id = c->i64(c->src, 1);
    k->running = st != NULL && strcmp(st, "running") == 0;
}

/* Runs the select sql (malloc'd; freed here) on c, each row to row(arg). */
static int
select_on(struct conn *c, char *sql, void (*row)(const struct admin_cols *, void *), void *arg)
{
    struct select x = {sql, row, arg, false};
    int rc = sql != NULL ? select_fn(c, &x) : ROOMD_EINVAL;

    if (sql == NULL)
        store_set_errmsg("filter too long");
    free(sql);
    return rc;
}

/* Replays (repair: copies) row id of event_id and records it. */
static int
replay_one(struct conn *c, const struct chunk *x, int64_t id, const char *event_id)
{
    char new_id[UUID_STR_LEN] = "";
    int rc;

    if (x->repair) {
        uuid_v7(x->now_ms, new_id);
        struct admin_param p[] = {{.is_text = true, .s = new_id},
                                  {.i = x->now_ms},
                                  {.i = x->now_ms},
                                  {.i = x->now_ms},
                                  {.i = id}};
        rc = exec_on(c,
                     "INSERT INTO room_outbox (event_id, command_id, " STORE_OUTBOX_COPY
                     ", status, retry_count, sinks_done, due_at_ms, created_at_ms, updated_at_ms)"
                     " SELECT ?, CONCAT('repair:', event_id), " STORE_OUTBOX_COPY
                     ", 'pending', 0, 0, ?, ?, ? FROM room_outbox WHERE id = ?",
                     p, 5);
    } else {
        struct admin_param p[] = {{.i = x->now_ms}, {.i = x->now_ms}, {.i = id}};
        rc = exec_on(c,
                     "UPDATE room_outbox SET " MYS_OUTBOX_REPLAY_SET ", due_at_ms = ?,"
                     " updated_at_ms = ? WHERE id = ? AND status = 'failed'",
                     p, 3);
    }
    return rc != 0 ? rc : audit_row_on(c, x->audit, id, event_id, new_id);
}

static int
chunk_fn(struct conn *c, void *arg)
{
    struct chunk *x = arg;
    struct cursor k = {0};
    struct picked ids = {0};
    struct admin_param p[2];
    char tail[64];
    int64_t last = 0;
    int rc;

    *x->done = 0; /* a rerun starts over */
    *x->finished = false;
    if ((rc = mys_tx_begin(c)) != 0)
        return rc;
    p[0] = (struct admin_param){.i = x->audit};
    if ((rc = select_on(c,
                        build("SELECT cursor_id, max_id, state FROM admin_audit WHERE id = ?"
                              " FOR UPDATE",
                              p, 1, NULL, NULL),
                        cursor_row, &k)) != 0)
        return rc;
    if (!k.found) {
        store_set_errmsg("audit %lld not found", (long long)x->audit);
        return ROOMD_ENOTFOUND;
    }
    if (!k.running) {
        *x->finished = true;
        return mys_tx_commit(c);
    }
    p[0] = (struct admin_param){.i = k.cursor};
    p[1] = (struct admin_param){.i = k.max_id};
    snprintf(tail, sizeof(tail), " ORDER BY id LIMIT %d FOR UPDATE", x->limit);
    rc = select_on(
        c, build("SELECT id, event_id FROM room_outbox WHERE" ADMIN_REPLAYABLE, p, 2, x->f, tail),
        pick_row, &ids);
    for (size_t i = 0; rc == 0 && i < ids.n; i++) {
        rc = replay_one(c, x, ids.ids[i].id, ids.ids[i].event_id);
        last = ids.ids[i].id;
    }
    free(ids.ids);
    if (rc != 0)
        return rc;
    bool finished = ids.n < (size_t)x->limit;
    struct admin_param adv[] = {
        {.i = x->audit}, {.i = last}, {.i = (int64_t)ids.n}, {.i = x->now_ms}, {.i = finished}};
    rc = exec_on(c, ADMIN_AUDIT_ADVANCE_SQL, adv, 5);
    if (rc == 0 && (rc = mys_tx_commit(c)) == 0) {
        *x->done = (int64_t)ids.n;
        *x->finished = finished;
    }
    return rc;
}

static int
my_replay_chunk(struct admin_store *s, int64_t id, const struct admin_filter *f, bool repair,
                int limit, int64_t now_ms, int64_t *done, bool *finished)
{
    struct chunk x = {id, f, repair, limit, now_ms, done, finished};

    return write_run(MY(s), chunk_fn, &x);
}

static int
record_fn(struct conn *c, void *arg)
{
    struct audit_ins *x = arg;
    int rc;

    if ((rc = mys_tx_begin(c)) != 0 || (rc = exec_on(c, ADMIN_AUDIT_DONE_SQL, x->p, 5)) != 0)
        return rc;
    *x->id = (int64_t)mysql_insert_id(c->db);
    for (size_t i = 0; rc == 0 && i < x->n; i++)
        rc = audit_row_on(c, *x->id, x->rows[i].outbox_id, x->rows[i].event_id,
                          x->rows[i].new_event_id);
    return rc != 0 ? rc : mys_tx_commit(c);
}

static int
my_audit_record(struct admin_store *s, const char *actor, const char *action,
                const char *filter_json, const struct admin_audit_row *rows, size_t n,
                int64_t now_ms, int64_t *id)
{
    struct admin_param p[] = {{.is_text = true, .s = actor},
                              {.is_text = true, .s = action},
                              {.is_text = true, .s = filter_json},
                              {.i = (int64_t)n},
                              {.i = now_ms}};
    struct audit_ins x = {p, rows, n, id};

    return write_run(MY(s), record_fn, &x);
}

static int
my_audit_list(struct admin_store *s, int64_t before_id, int limit, struct admin_audit **out,
              size_t *n)
{
    struct admin_param p[] = {{.i = before_id}, {.i = before_id}, {.i = limit}};
    struct admin_rows x = {admin_read_audit, sizeof(**out), *out, *n, *n};
    int rc = read_all(MY(s),
                      build("SELECT " ADMIN_AUDIT_COLS " FROM admin_audit WHERE ? = 0 OR id < ?"
                            " ORDER BY id DESC LIMIT ?",
                            p, 3, NULL, NULL),
                      &x, true);

    *out = x.rows;
    *n = x.n;
    return rc;
}

static int
my_audit_get(struct admin_store *s, int64_t id, struct admin_audit *out)
{
    struct admin_param p[] = {{.i = id}};

    return read_first(
        MY(s), build("SELECT " ADMIN_AUDIT_COLS " FROM admin_audit WHERE id = ?", p, 1, NULL, NULL),
        admin_read_audit, out, true);
}

static int
my_audit_rows(struct admin_store *s, int64_t id, int64_t after, int limit,
              struct admin_audit_row **out, size_t *n)
{
    struct admin_param p[] = {{.i = id}, {.i = after}, {.i = limit}};
    struct admin_rows x = {admin_read_audit_row, sizeof(**out), *out, *n, *n};
    int rc = read_all(MY(s),
                      build("SELECT outbox_id, event_id, new_event_id FROM admin_audit_rows"
                            " WHERE audit_id = ? AND outbox_id > ? ORDER BY outbox_id LIMIT ?",
                            p, 3, NULL, NULL),
                      &x, true);

    *out = x.rows;
    *n = x.n;
    return rc;
}

#define MY_OP(op) .op = my_##op,
const struct admin_store_ops admin_store_mysql_ops = {ADMIN_STORE_OPS(MY_OP)};
#undef MY_OP
