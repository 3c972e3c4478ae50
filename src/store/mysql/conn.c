/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mysql/conn.c: the connection pool with reconnect (no silent auto-reconnect),
 * MySQL errors classified (lost, retry, duplicate), the per-connection
 * prepared statements (re-prepared after a reconnect), the parameter, row
 * and bulk (array binding) helpers, the transaction runner mys_run (reconnect
 * and retry once on a lost connection, retry deadlocks), open/close and the
 * backend's ops table.
 */
#include "store/mysql/internal.h"

#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/secret.h"
#include "core/xmalloc.h"

#include <errmsg.h>
#include <mysqld_error.h>

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* mysql_library_init once, before any thread uses the library. Never ended:
 * other code of the process (tests, tools) may use libmariadb too. */
static pthread_once_t lib_once = PTHREAD_ONCE_INIT;
static int lib_rc;

static void
lib_init(void)
{
    lib_rc = mysql_library_init(0, NULL, NULL);
}

static unsigned int
ms_to_s(int64_t ms, unsigned int dflt)
{
    if (ms <= 0)
        return dflt;
    return (unsigned int)((ms + 999) / 1000);
}

enum errclass
mys_classify(unsigned int e)
{
    switch (e) {
    case 0:
        return EC_NONE;
    case CR_SERVER_GONE_ERROR:
    case CR_SERVER_LOST:
    case CR_SERVER_LOST_EXTENDED:
    case CR_CONNECTION_ERROR:
    case CR_CONN_HOST_ERROR:
    case CR_COMMANDS_OUT_OF_SYNC:
    case CR_ERR_NET_READ:
    case CR_ERR_NET_WRITE:
    case ER_CONNECTION_KILLED:
    case ER_SERVER_SHUTDOWN:
    case ER_OPTION_PREVENTS_STATEMENT: /* read-only: a failover; a new connection may help */
    case 4031:                         /* MySQL 8: disconnected for inactivity */
    case ER_UNKNOWN_COM_ERROR:         /* Galera: "WSREP has not yet prepared node" */
    case ER_ERROR_DURING_COMMIT:       /* Galera: the node left the cluster mid-commit */
        return EC_LOST;
    case ER_LOCK_DEADLOCK:
    case ER_LOCK_WAIT_TIMEOUT:
        return EC_RETRY;
    case ER_DUP_ENTRY:
        return EC_DUP;
    default:
        return EC_OTHER;
    }
}

bool
mys_client_error(unsigned int e)
{
    return (e >= CR_MIN_ERROR && e <= CR_MAX_ERROR) || (e >= CER_MIN_ERROR && e <= CER_MAX_ERROR);
}

static int
code_of(unsigned int e)
{
    switch (mys_classify(e)) {
    case EC_LOST:
    case EC_RETRY:
        return ROOMD_EUNAVAIL;
    case EC_DUP:
        return ROOMD_EEXIST;
    default:
        return ROOMD_EIO;
    }
}

int
mys_db_fail(struct conn *c, const char *what)
{
    c->err = mysql_errno(c->db);
    snprintf(c->errmsg, sizeof(c->errmsg), "%s: %s (%u)", what, mysql_error(c->db), c->err);
    store_set_errmsg("mysql %s", c->errmsg);
    return code_of(c->err);
}

static int
st_fail(struct conn *c, MYSQL_STMT *st, const struct mys_sql *id)
{
    c->err = mysql_stmt_errno(st);
    snprintf(c->errmsg, sizeof(c->errmsg), "stmt %d: %s (%u)", (int)id->slot, mysql_stmt_error(st),
             c->err);
    store_set_errmsg("mysql %s", c->errmsg);
    return code_of(c->err);
}

/* Closes the connection and forgets its statements (they die with it). */
static void
conn_drop(struct conn *c)
{
    if (c->db != NULL)
        mysql_close(c->db); /* detaches the statements first: no network for them */
    for (int i = 0; i < S_COUNT; i++) {
        if (c->st[i] != NULL)
            mysql_stmt_close(c->st[i]);
        c->st[i] = NULL;
    }
    c->db = NULL;
    c->tx = false; /* a new session starts in autocommit */
    c->in_txn = false;
}

int
mys_q_result(struct conn *c, const char *sql, MYSQL_RES **res)
{
    MYSQL_RES *r;

    if (res != NULL)
        *res = NULL;
    if (mysql_real_query(c->db, sql, strlen(sql)) != 0)
        return mys_db_fail(c, "query");
    r = mysql_store_result(c->db);
    if (r == NULL && mysql_field_count(c->db) > 0)
        return mys_db_fail(c, "result");
    if (res != NULL)
        *res = r;
    else if (r != NULL)
        mysql_free_result(r);
    return 0;
}

int
mys_q_exec(struct conn *c, const char *sql)
{
    MYSQL_RES *res;

    if (mysql_real_query(c->db, sql, strlen(sql)) != 0)
        return mys_db_fail(c, sql);
    res = mysql_store_result(c->db);
    if (res != NULL)
        mysql_free_result(res);
    else if (mysql_errno(c->db) != 0)
        return mys_db_fail(c, sql);
    return 0;
}

/* Runs a fixed query returning one integer (NULL reads -1). */
int
mys_q_int(struct conn *c, const char *sql, int64_t *out)
{
    MYSQL_RES *res;
    MYSQL_ROW row;

    if (mysql_real_query(c->db, sql, strlen(sql)) != 0 || (res = mysql_store_result(c->db)) == NULL)
        return mys_db_fail(c, sql);
    row = mysql_fetch_row(res);
    *out = row != NULL && row[0] != NULL ? strtoll(row[0], NULL, 10) : -1;
    mysql_free_result(res);
    return 0;
}

/* Connects c with timeouts, utf8mb4, READ COMMITTED and no auto-reconnect
 * (a silent reconnect would mys_run the rest of a transaction on a new session). */
int
mys_conn_open(struct mstore *s, struct conn *c, int idx)
{
    const struct mys_host *h = &s->hosts[idx];
    my_bool off = 0;
    unsigned long caps = 0, ext = 0;
    unsigned int status = 0;
    char sql[128];
    int rc;

    c->db = mysql_init(NULL);
    if (c->db == NULL)
        return ROOMD_ENOMEM;
    mysql_optionsv(c->db, MYSQL_OPT_CONNECT_TIMEOUT, &s->connect_s);
    mysql_optionsv(c->db, MYSQL_OPT_READ_TIMEOUT, &s->read_s);
    mysql_optionsv(c->db, MYSQL_OPT_WRITE_TIMEOUT, &s->write_s);
    mysql_optionsv(c->db, MYSQL_OPT_RECONNECT, &off);
    mysql_optionsv(c->db, MYSQL_SET_CHARSET_NAME, "utf8mb4");
    if (!mysql_real_connect(c->db, h->host, s->user, s->password, s->database, h->port, s->socket,
                            CLIENT_FOUND_ROWS)) {
        c->err = mysql_errno(c->db);
        snprintf(c->errmsg, sizeof(c->errmsg), "connect %s:%u/%s: %s (%u)",
                 s->socket ? s->socket : h->host, h->port, s->database, mysql_error(c->db), c->err);
        store_set_errmsg("mysql %s", c->errmsg);
        mysql_close(c->db);
        c->db = NULL;
        pthread_mutex_lock(&s->mu);
        if (!s->down)
            log_warn("store", "mysql unreachable", "err=\"%s\"", c->errmsg);
        s->down = true;
        pthread_mutex_unlock(&s->mu);
        c->err = 0; /* reported; not a reason to reconnect again */
        return ROOMD_EUNAVAIL;
    }
    snprintf(sql, sizeof(sql), "SET SESSION innodb_lock_wait_timeout=%u", s->lock_wait_s);
    if ((rc = mys_q_exec(c, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")) != 0 ||
        (rc = mys_q_exec(c, "SET SESSION sql_mode='STRICT_TRANS_TABLES,NO_ENGINE_SUBSTITUTION'")) !=
            0 ||
        (rc = mys_q_exec(c, sql)) != 0 || (rc = mys_fo_check(s, c)) != 0) {
        pthread_mutex_lock(&s->mu);
        if (!s->down)
            log_warn("store", "mysql server not usable", "host=%s port=%u err=\"%s\"", h->host,
                     h->port, c->errmsg);
        s->down = true;
        pthread_mutex_unlock(&s->mu);
        conn_drop(c);
        c->err = 0;
        return ROOMD_EUNAVAIL;
    }
    /* the session's autocommit as the server set it (on, unless its configuration says
     * otherwise): run() switches it to what each operation needs */
    mariadb_get_infov(c->db, MARIADB_CONNECTION_SERVER_STATUS, &status);
    c->tx = !(status & SERVER_STATUS_AUTOCOMMIT);
    mariadb_get_infov(c->db, MARIADB_CONNECTION_SERVER_CAPABILITIES, &caps);
    mariadb_get_infov(c->db, MARIADB_CONNECTION_EXTENDED_SERVER_CAPABILITIES, &ext);
    c->bulk = !(caps & CLIENT_MYSQL) && (ext & (MARIADB_CLIENT_STMT_BULK_OPERATIONS >> 32));
#ifdef ROOMD_TESTING
    /* Tests mys_run the per-row path MySQL servers get (no array binding) on MariaDB. */
    if (getenv("ROOMD_MYSQL_NO_BULK") != NULL)
        c->bulk = false;
#endif
    pthread_mutex_lock(&s->mu);
    if (s->down)
        log_info("store", "mysql reachable again", "host=%s port=%u", h->host, h->port);
    s->down = false;
    pthread_mutex_unlock(&s->mu);
    return 0;
}

/* Takes an idle connection, one in mode tx (autocommit off) when one is idle
 * (the transactions keep to the connections already off, the rest to those
 * in autocommit, so modes are switched only when the mix of work changes). */
static int
pool_get(struct mstore *s, bool tx, struct conn **out)
{
    struct timespec dl;
    int rc = 0;

    clock_mono_deadline(&dl, s->checkout_wait_ms);
    pthread_mutex_lock(&s->mu);
    while (s->nfree == 0 && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&s->cv, &s->mu, &dl);
    if (s->nfree == 0) {
        pthread_mutex_unlock(&s->mu);
        store_set_errmsg("mysql: no free connection in the pool of %d after %lld ms", s->nconns,
                         (long long)s->checkout_wait_ms);
        *out = NULL;
        return ROOMD_EUNAVAIL;
    }
    for (int i = s->nfree - 1; i >= 0; i--)
        if (s->conns[s->freelist[i]].tx == tx) { /* to the top of the list */
            int k = s->freelist[i];

            s->freelist[i] = s->freelist[s->nfree - 1];
            s->freelist[s->nfree - 1] = k;
            break;
        }
    *out = &s->conns[s->freelist[--s->nfree]];
    pthread_mutex_unlock(&s->mu);
    return 0;
}

static void
pool_put(struct mstore *s, struct conn *c)
{
    pthread_mutex_lock(&s->mu);
    s->freelist[s->nfree++] = (int)(c - s->conns);
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static MYSQL_STMT *
stmt(struct conn *c, const struct mys_sql *id)
{
    MYSQL_STMT *st = c->st[id->slot];

    if (st != NULL)
        return st;
    st = mysql_stmt_init(c->db);
    if (st == NULL) {
        mys_db_fail(c, "stmt_init");
        return NULL;
    }
    if (mysql_stmt_prepare(st, id->text, strlen(id->text)) != 0) {
        st_fail(c, st, id);
        mysql_stmt_close(st);
        return NULL;
    }
    c->st[id->slot] = st;
    return st;
}

/* Executes statement id with p; *affected gets the row count when asked. */
int
mys_st_exec(struct conn *c, const struct mys_sql *id, struct params *p, uint64_t *affected)
{
    MYSQL_STMT *st = stmt(c, id);
    unsigned int zero = 0;

    if (st == NULL)
        return code_of(c->err);
    assert(mysql_stmt_param_count(st) == p->n);
    mysql_stmt_attr_set(st, STMT_ATTR_ARRAY_SIZE, &zero);
    if (mysql_stmt_bind_param(st, p->b) != 0 || mysql_stmt_execute(st) != 0)
        return st_fail(c, st, id);
    if (affected != NULL)
        *affected = mysql_stmt_affected_rows(st);
    return 0;
}

/* Column k of row (a struct rows) for store_read_cols. */
static void
row_col(const void *row, unsigned int k, const char **text, int64_t *num)
{
    if (text != NULL)
        *text = r_str(row, k);
    else
        *num = r_i64(row, k);
}

void
mys_read_cols(const struct rows *r, const struct store_col *cols, void *dst, size_t size)
{
    store_read_cols(cols, row_col, r, dst, size);
}

void
mys_rows_done(struct rows *r)
{
    if (r->st != NULL)
        mysql_stmt_free_result(r->st);
    for (unsigned int k = 0; k < MAXC; k++)
        free(r->s[k]);
    memset(r, 0, sizeof(*r));
}

int
mys_st_query(struct conn *c, const struct mys_sql *id, struct params *p, struct rows *r,
             const char *types)
{
    int rc;

    memset(r, 0, sizeof(*r));
    if ((rc = mys_st_exec(c, id, p, NULL)) != 0)
        return rc;
    r->st = c->st[id->slot];
    r->id = id;
    r->types = types;
    r->n = (unsigned int)strlen(types);
    assert(r->n <= MAXC && mysql_stmt_field_count(r->st) == r->n);
    for (unsigned int k = 0; k < r->n; k++) {
        if (types[k] == 'i') {
            r->b[k].buffer_type = MYSQL_TYPE_LONGLONG;
            r->b[k].buffer = &r->i[k];
        } else {
            r->cap[k] = 256;
            r->s[k] = xmalloc(r->cap[k]);
            r->b[k].buffer_type = types[k] == 's' ? MYSQL_TYPE_STRING : MYSQL_TYPE_BLOB;
            r->b[k].buffer = r->s[k];
            r->b[k].buffer_length = (unsigned long)r->cap[k] - 1;
        }
        r->b[k].length = &r->len[k];
        r->b[k].is_null = &r->nul[k];
        r->b[k].error = &r->trunc[k];
    }
    if (mysql_stmt_bind_result(r->st, r->b) != 0 || mysql_stmt_store_result(r->st) != 0)
        return st_fail(c, r->st, id);
    return 0;
}

/* Returns 1 with the next row in r, 0 at the end, or a negative code. */
int
mys_st_fetch(struct conn *c, struct rows *r)
{
    int rc = mysql_stmt_fetch(r->st);

    if (rc == MYSQL_NO_DATA)
        return 0;
    if (rc == 1)
        return st_fail(c, r->st, r->id);
    if (rc == MYSQL_DATA_TRUNCATED) {
        for (unsigned int k = 0; k < r->n; k++) {
            if (r->types[k] == 'i' || r->nul[k] || r->len[k] < r->cap[k])
                continue;
            r->cap[k] = r->len[k] + 1;
            r->s[k] = xrealloc(r->s[k], r->cap[k]);
            r->b[k].buffer = r->s[k];
            r->b[k].buffer_length = (unsigned long)r->cap[k] - 1;
            if (mysql_stmt_fetch_column(r->st, &r->b[k], k, 0) != 0)
                return st_fail(c, r->st, r->id);
        }
        mysql_stmt_bind_result(r->st, r->b);
    }
    for (unsigned int k = 0; k < r->n; k++)
        if (r->types[k] != 'i')
            r->s[k][r->nul[k] ? 0 : r->len[k]] = '\0';
    return 1;
}

/* Appends to p one parameter per letter of types, from ap. */
static void
p_vbind(struct params *p, const char *types, va_list ap)
{
    for (const char *t = types; *t != '\0'; t++) {
        if (*t == 's')
            p_str(p, va_arg(ap, const char *));
        else if (*t == 'd')
            p_i64(p, va_arg(ap, int));
        else {
            assert(*t == 'i');
            p_i64(p, va_arg(ap, int64_t));
        }
    }
}

/* Fills p with one parameter per letter of types, from the variadic
 * arguments of the calling function that follow types. */
#define P_VARGS(p, types)                                                                          \
    do {                                                                                           \
        va_list ap_;                                                                               \
        va_start(ap_, types);                                                                      \
        PARAMS_INIT(p);                                                                            \
        p_vbind(p, types, ap_);                                                                    \
        va_end(ap_);                                                                               \
    } while (0)

int
mys_exec(struct conn *c, const struct mys_sql *id, uint64_t *affected, const char *types, ...)
{
    struct params p;

    P_VARGS(&p, types);
    return mys_st_exec(c, id, &p, affected);
}

int
mys_query(struct conn *c, const struct mys_sql *id, struct rows *r, const char *cols,
          const char *types, ...)
{
    struct params p;

    P_VARGS(&p, types);
    return mys_st_query(c, id, &p, r, cols);
}

void
mys_bulk_init(struct bulk *k, const char *types, size_t nrows)
{
    memset(k, 0, sizeof(*k));
    k->types = types;
    k->ncols = (unsigned int)strlen(types);
    k->nrows = (unsigned int)nrows;
    assert(k->ncols <= MAXC);
    for (unsigned int j = 0; j < k->ncols; j++) {
        k->ind[j] = xcalloc(nrows + 1, 1);
        if (types[j] == 'i') {
            k->iv[j] = xcalloc(nrows + 1, sizeof(int64_t));
        } else {
            k->sv[j] = xcalloc(nrows + 1, sizeof(char *));
            k->len[j] = xcalloc(nrows + 1, sizeof(unsigned long));
        }
    }
}

void
mys_bulk_free(struct bulk *k)
{
    for (unsigned int j = 0; j < MAXC; j++) {
        free(k->iv[j]);
        free(k->sv[j]);
        free(k->len[j]);
        free(k->ind[j]);
    }
    memset(k, 0, sizeof(*k));
}

static enum enum_field_types
bulk_type(char t)
{
    return t == 'i' ? MYSQL_TYPE_LONGLONG : t == 's' ? MYSQL_TYPE_STRING : MYSQL_TYPE_BLOB;
}

int
mys_st_bulk(struct conn *c, const struct mys_sql *id, struct bulk *k, uint64_t *affected)
{
    MYSQL_STMT *st;
    MYSQL_BIND b[MAXC];
    my_bool nul[MAXC];
    unsigned int zero = 0;
    uint64_t total = 0;

    if (affected != NULL)
        *affected = 0;
    if (k->nrows == 0)
        return 0;
    if ((st = stmt(c, id)) == NULL)
        return code_of(c->err);
    assert(mysql_stmt_param_count(st) == k->ncols);
    memset(b, 0, sizeof(b));
    if (c->bulk && k->nrows > 1) {
        for (unsigned int j = 0; j < k->ncols; j++) {
            b[j].buffer_type = bulk_type(k->types[j]);
            b[j].u.indicator = k->ind[j];
            if (k->types[j] == 'i') {
                b[j].buffer = k->iv[j];
            } else {
                b[j].buffer = (void *)k->sv[j];
                b[j].length = k->len[j];
            }
        }
        mysql_stmt_attr_set(st, STMT_ATTR_ARRAY_SIZE, &k->nrows);
        if (mysql_stmt_bind_param(st, b) != 0 || mysql_stmt_execute(st) != 0)
            return st_fail(c, st, id);
        total = mysql_stmt_affected_rows(st);
    } else {
        mysql_stmt_attr_set(st, STMT_ATTR_ARRAY_SIZE, &zero);
        for (unsigned int row = 0; row < k->nrows; row++) {
            for (unsigned int j = 0; j < k->ncols; j++) {
                memset(&b[j], 0, sizeof(b[j]));
                nul[j] = k->ind[j][row] == STMT_INDICATOR_NULL;
                b[j].buffer_type = bulk_type(k->types[j]);
                b[j].is_null = &nul[j];
                if (k->types[j] == 'i') {
                    b[j].buffer = &k->iv[j][row];
                } else {
                    b[j].buffer = (void *)(k->sv[j][row] ? k->sv[j][row] : "");
                    b[j].buffer_length = k->len[j][row];
                    b[j].length = &k->len[j][row];
                }
            }
            if (mysql_stmt_bind_param(st, b) != 0 || mysql_stmt_execute(st) != 0)
                return st_fail(c, st, id);
            total += mysql_stmt_affected_rows(st);
        }
    }
    if (affected != NULL)
        *affected = total;
    return 0;
}

int64_t
mys_insert_id(struct conn *c, const struct mys_sql *id)
{
    MYSQL_STMT *st = c->st[id->slot];

    return st != NULL ? (int64_t)mysql_stmt_insert_id(st) : 0;
}

int
mys_tx_begin(struct conn *c)
{
    int rc = c->tx ? 0 : mys_q_exec(c, "START TRANSACTION");

    c->in_txn = rc == 0;
    return rc;
}

/* Puts c's session in autocommit off (tx) or on. Returns 0 or the failure. */
static int
conn_mode(struct conn *c, bool tx)
{
    if (c->tx == tx)
        return 0;
    if (mysql_autocommit(c->db, tx ? 0 : 1) != 0)
        return mys_db_fail(c, "SET autocommit");
    c->tx = tx;
    return 0;
}

/* True when c's session has a transaction open (the server's status of its
 * last answer; no round trip). */
static bool
open_txn(struct conn *c)
{
    unsigned int status = 0;

    return c->db != NULL &&
           mariadb_get_infov(c->db, MARIADB_CONNECTION_SERVER_STATUS, &status) == 0 &&
           (status & SERVER_STATUS_IN_TRANS);
}

int
mys_tx_commit(struct conn *c)
{
    c->in_txn = false;
    if (mysql_commit(c->db) != 0)
        return mys_db_fail(c, "COMMIT");
    return 0;
}

void
mys_tx_rollback(struct conn *c)
{
    c->in_txn = false;
    if (c->db != NULL && mysql_rollback(c->db) != 0)
        conn_drop(c); /* its state is unknown: start over on a new session */
}

static void
sleep_ms(int64_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/*
 * Runs fn on a pooled connection in autocommit off (tx) or on. fn opens and
 * commits its own transaction (tx_begin/mys_tx_commit) or, not tx, runs
 * single statements; it must reset its outputs when it starts, since it may
 * run again. On a lost connection (2006, 2013, 1927, ...; a Galera node not
 * ready) the connection is closed, reopened (on another server of
 * store.mysql.hosts first, failover.c), its statements re-prepared and fn
 * run once more (its unique keys keep a rerun commit from applying twice); on a
 * deadlock or lock wait timeout fn runs again up to deadlock_retries times.
 * Anything else is returned as is.
 */
static int
run(struct mstore *s, bool tx, mys_txn_fn fn, void *arg)
{
    struct conn *c;
    int rc, lost_left = 1, retry_left = s->deadlock_retries, failed = -1;

    if ((rc = pool_get(s, tx, &c)) != 0)
        return rc;
    if (c->db != NULL && mys_fo_stale(s, c))
        conn_drop(c); /* the pool moved to another server (failover.c) */
    for (int attempt = 1;; attempt++) {
        if (c->db == NULL && (rc = mys_fo_connect(s, c, failed)) != 0)
            break;
        c->err = 0;
        if ((rc = conn_mode(c, tx)) == 0)
            rc = fn(c, arg);
        if (rc == 0) {
            assert(!c->in_txn);
            if (c->tx && open_txn(c)) {
                /* a statement after fn's commit (an fn that is not one
                 * transaction, given to mys_run_tx): a bug; an idle
                 * connection never keeps a transaction open */
                log_error("store", "mysql statement outside its transaction, rolled back",
                          "attempt=%d", attempt);
                assert(!"mys_run_tx: fn ran a statement outside mys_tx_begin..commit");
                mys_tx_rollback(c);
            }
            break;
        }
        enum errclass ec = mys_classify(c->err);
        if (ec == EC_LOST) {
            conn_drop(c);
            failed = c->host; /* the next connect tries the other servers first */
            if (lost_left-- > 0) {
                log_warn("store", "mysql connection lost, reconnecting", "err=\"%s\"", c->errmsg);
                continue;
            }
            rc = ROOMD_EUNAVAIL;
            break;
        }
        if (c->in_txn || (c->tx && open_txn(c))) /* a failed COMMIT's too */
            mys_tx_rollback(c);
        if (ec == EC_RETRY && retry_left-- > 0) {
            log_debug("store", "mysql transaction retried", "attempt=%d err=\"%s\"", attempt,
                      c->errmsg);
            sleep_ms(attempt * (1 + (clock_mono_us() % 5)));
            continue;
        }
        break;
    }
    if (lost_left < 1) /* rerun after a lost connection: its outcome, for the operator */
        log_info("store", "mysql rerun after a lost connection", "rc=%s tx=%d err=\"%s\"",
                 rc == 0 ? "ok" : roomd_strerror(rc), (int)tx, rc == 0 ? "" : c->errmsg);
    pool_put(s, c);
    return rc;
}

int
mys_run(struct mstore *s, mys_txn_fn fn, void *arg)
{
    return run(s, false, fn, arg);
}

int
mys_run_tx(struct mstore *s, mys_txn_fn fn, void *arg)
{
    return run(s, true, fn, arg);
}

int
mys_conn_take(struct mstore *s, struct conn **out)
{
    struct conn *c;
    int rc;

    *out = NULL;
    if ((rc = pool_get(s, false, &c)) != 0)
        return rc;
    if (c->db != NULL && mys_fo_stale(s, c))
        conn_drop(c); /* the pool moved to another server (failover.c) */
    c->err = 0;
    if (c->db == NULL)
        rc = mys_fo_connect(s, c, c->lost ? c->host : -1);
    c->lost = false;
    if (rc == 0 && (rc = conn_mode(c, false)) != 0)
        conn_drop(c);
    if (rc != 0) {
        pool_put(s, c);
        return rc;
    }
    *out = c;
    return 0;
}

void
mys_conn_give(struct mstore *s, struct conn *c)
{
    if (c == NULL)
        return;
    if (c->db != NULL && (mys_classify(c->err) == EC_LOST || mys_client_error(c->err))) {
        conn_drop(c); /* reconnected at its next use, the other servers first */
        c->lost = true;
    } else if (c->in_txn || open_txn(c)) {
        mys_tx_rollback(c);
    }
    c->err = 0;
    pool_put(s, c);
}

int
mys_one_fn(struct conn *c, void *arg)
{
    struct one_ctx *x = arg;
    struct rows r;
    int rc;

    rc = mys_query_one(c, x->id, &r, x->types, x->key2 != NULL ? "ss" : "s", x->key1, x->key2);
    if (rc == 1) {
        x->read(&r, x->out);
        rc = 0;
    } else if (rc == 0) {
        rc = ROOMD_ENOTFOUND;
    }
    mys_rows_done(&r);
    return rc;
}

static int
all_fn(struct conn *c, void *arg)
{
    struct all_ctx *x = arg;
    struct rows r;
    size_t cap = 0;
    int rc;

    store_free_cols(x->cols, x->rows, x->n, x->size); /* a retry starts over */
    x->rows = NULL;
    x->n = 0;
    if ((rc = mys_st_query(c, x->id, &x->p, &r, x->types)) == 0) {
        while ((rc = mys_st_fetch(c, &r)) == 1) {
            x->rows = xgrow(x->rows, x->n, &cap, x->size);
            mys_read_cols(&r, x->cols, (char *)x->rows + x->n++ * x->size, x->size);
        }
    }
    mys_rows_done(&r);
    return rc;
}

int
mys_read_all(struct mstore *s, struct all_ctx *x)
{
    int rc = mys_run(s, all_fn, x);

    if (rc != 0) {
        store_free_cols(x->cols, x->rows, x->n, x->size);
        x->rows = NULL;
        x->n = 0;
    }
    return rc;
}

void
mys_pool_free(struct mstore *s)
{
    for (int i = 0; i < s->nconns; i++)
        conn_drop(&s->conns[i]);
    free(s->conns);
    free(s->freelist);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->claim_mu);
    pthread_cond_destroy(&s->cv);
    for (int i = 0; i < s->nhosts; i++)
        free(s->hosts[i].host);
    free(s->socket);
    free(s->user);
    secret_free(s->password);
    free(s->database);
    free(s);
}

/* Room for this many sharers' connections beside a pool's own. */
#define MYS_SHARERS_MAX 32

int
mys_pool_new(struct mstore **out, const struct conf_mysql *mc, int nconns, char *err, size_t errlen)
{
    const char *pw = mc->password ? mc->password : "";
    struct mstore *s;
    int rc;

    *out = NULL;
    if (mc->password_env != NULL && mc->password_env[0] != '\0') {
        pw = getenv(mc->password_env);
        if (pw == NULL) {
            snprintf(err, errlen, "store.mysql.password_env: environment variable %s is not set",
                     mc->password_env);
            return ROOMD_EINVAL;
        }
    }
    if (mc->database == NULL || mc->database[0] == '\0') {
        snprintf(err, errlen, "store.mysql.database: must be set");
        return ROOMD_EINVAL;
    }
    pthread_once(&lib_once, lib_init);
    if (lib_rc != 0) {
        snprintf(err, errlen, "store.mysql: mysql_library_init failed");
        return ROOMD_EIO;
    }

    s = xcalloc(1, sizeof(*s));
    s->super.ops = &store_mysql_ops;
    if (mc->nhosts == 0 && mc->host != NULL && mc->host[0] == '/') /* a unix socket path */
        s->socket = xstrdup(mc->host);
    if ((rc = mys_hosts_parse(s, mc->hosts, mc->nhosts, s->socket ? "localhost" : mc->host,
                              mc->port, err, errlen)) != 0) {
        free(s->socket);
        for (int i = 0; i < s->nhosts; i++)
            free(s->hosts[i].host);
        free(s);
        return rc;
    }
    s->failover_ms = mc->failover_timeout_ms;
    s->wsrep_sync_wait = mc->wsrep_sync_wait;
    s->user = xstrdup(mc->user ? mc->user : "root");
    s->password = xstrdup(pw);
    s->database = xstrdup(mc->database);
    s->connect_s = ms_to_s(mc->connect_timeout_ms, 2);
    s->read_s = ms_to_s(mc->read_timeout_ms, 5);
    s->write_s = ms_to_s(mc->write_timeout_ms, 5);
    /* A lock wait must end (1205, retried) before the socket read gives up. */
    s->lock_wait_s = s->read_s > 2 ? s->read_s / 2 : 1;
    s->checkout_wait_ms = (int64_t)s->read_s * 1000;
    s->deadlock_retries = mc->deadlock_retries > 0 ? mc->deadlock_retries : 0;
    s->nconns = s->base = nconns;
    s->cap = nconns + MYS_SHARERS_MAX;
    s->refs = 1;
    s->conns = xcalloc((size_t)s->cap, sizeof(*s->conns));
    s->freelist = xcalloc((size_t)s->cap, sizeof(int));
    for (int i = s->nconns - 1; i >= 0; i--)
        s->freelist[s->nfree++] = i;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->claim_mu, NULL);
    clock_cond_init(&s->cv);
    *out = s;
    return 0;
}

static void
my_close(struct store *st)
{
    if (st != NULL)
        mys_pool_release((struct mstore *)st, false);
}

static int
my_open(struct store **out, const struct conf_store *cs, char *err, size_t errlen)
{
    const struct conf_mysql *mc = &cs->mysql;
    struct mstore *s;
    int rc;

    *out = NULL;
    if ((rc = mys_pool_new(&s, mc, mc->pool_size > 0 ? mc->pool_size : 8, err, errlen)) != 0)
        return rc;
    s->super.save_writers = mc->batches_in_flight > 0 ? mc->batches_in_flight : 1;

    /* The first connection, kept in the pool, runs the migrations. */
    if ((rc = mys_fo_connect(s, &s->conns[0], -1)) != 0) {
        snprintf(err, errlen, "store.mysql: %s", s->conns[0].errmsg);
        goto fail;
    }
    if ((rc = mys_migrate(s, &s->conns[0], err, errlen)) != 0)
        goto fail;
    log_info("store", "mysql store open",
             "host=%s port=%u database=%s pool=%d bulk=%d servers=%d galera=%d",
             s->hosts[s->cur].host, s->hosts[s->cur].port, s->database, s->nconns,
             (int)s->conns[0].bulk, s->nhosts, (int)s->conns[0].galera);
    mys_pool_register(s);
    *out = &s->super;
    return 0;
fail:
    mys_pool_free(s);
    return rc;
}

#define MYS_OP(op) .op = mys_##op,
const struct store_ops store_mysql_ops = {.name = "mysql",
                                          .open = my_open,
                                          .close = my_close,
                                          .server_info = mys_server_info,
                                          STORE_OPS(MYS_OP)};
#undef MYS_OP
