/*
 * store_mysql.c: the MySQL/MariaDB backend of store.h (MariaDB Connector/C).
 * Read top-down: schema + migrations, the statement table (prepared
 * statements only), the connection pool with reconnect, the statement and
 * bulk (array binding) helpers, the transaction runner (reconnect and retry
 * once on a lost connection, retry deadlocks), then one section per store op.
 * docs/mysql.md says how to run roomd against an existing server.
 */
#include "store/store.h"

#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/xmalloc.h"

#include <errmsg.h>
#include <mysql.h>
#include <mysqld_error.h>

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ==== Schema: versioned migrations, applied at open under GET_LOCK ==== */

/*
 * Ids are VARBINARY: byte-exact like SQLite (utf8mb4_bin pads spaces in
 * MariaDB) and never refused for their encoding. due_at_ms is the claim key
 * (see store.h): non-NULL only for claimable rows, so ix_outbox_due never
 * holds delivered or failed rows.
 */
#define TABLE_OPTS " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"

static const char *const migration_1[] = {
    "CREATE TABLE IF NOT EXISTS rooms ("
    " app_code VARBINARY(64) NOT NULL,"
    " room_id VARBINARY(64) NOT NULL,"
    " owner_uid BIGINT NOT NULL,"
    " title TEXT NOT NULL,"
    " status VARCHAR(16) NOT NULL,"
    " version BIGINT NOT NULL,"
    " fence_token BIGINT NOT NULL DEFAULT 0,"
    " rocket_status VARCHAR(16) NOT NULL DEFAULT 'idle',"
    " rocket_id VARBINARY(64) NOT NULL DEFAULT '',"
    " rocket_level INT NOT NULL DEFAULT 0,"
    " rocket_launch_at_ms BIGINT NOT NULL DEFAULT 0,"
    " created_at_ms BIGINT NOT NULL,"
    " updated_at_ms BIGINT NOT NULL,"
    " PRIMARY KEY (app_code, room_id),"
    " KEY ix_rooms_rocket (rocket_status)"
    ")" TABLE_OPTS,

    "CREATE TABLE IF NOT EXISTS room_command_log ("
    " id BIGINT NOT NULL AUTO_INCREMENT,"
    " app_code VARBINARY(64) NOT NULL,"
    " room_id VARBINARY(64) NOT NULL,"
    " version BIGINT NOT NULL,"
    " command_id VARBINARY(64) NOT NULL,"
    " command_type VARCHAR(32) NOT NULL,"
    " request MEDIUMTEXT NOT NULL,"
    " response MEDIUMTEXT NOT NULL,"
    " created_at_ms BIGINT NOT NULL,"
    " PRIMARY KEY (id),"
    " UNIQUE KEY uq_cmdlog_command (app_code, command_id),"
    " UNIQUE KEY uq_cmdlog_version (app_code, room_id, version)"
    ")" TABLE_OPTS,

    "CREATE TABLE IF NOT EXISTS room_snapshots ("
    " app_code VARBINARY(64) NOT NULL,"
    " room_id VARBINARY(64) NOT NULL,"
    " version BIGINT NOT NULL,"
    " state MEDIUMTEXT NOT NULL,"
    " created_at_ms BIGINT NOT NULL,"
    " PRIMARY KEY (app_code, room_id, version)"
    ")" TABLE_OPTS,

    "CREATE TABLE IF NOT EXISTS room_outbox ("
    " id BIGINT NOT NULL AUTO_INCREMENT,"
    " event_id CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
    " app_code VARBINARY(64) NOT NULL,"
    " room_id VARBINARY(64) NOT NULL,"
    " room_version BIGINT NOT NULL,"
    " command_id VARBINARY(64) NOT NULL,"
    " event_type VARCHAR(32) NOT NULL,"
    " payload MEDIUMBLOB NOT NULL,"
    " status VARCHAR(16) NOT NULL,"
    " retry_count INT NOT NULL DEFAULT 0,"
    " sinks_done INT UNSIGNED NOT NULL DEFAULT 0,"
    " next_retry_at_ms BIGINT NULL,"
    " lock_until_ms BIGINT NULL,"
    " locked_by VARBINARY(64) NULL,"
    " last_error BLOB NULL,"
    " due_at_ms BIGINT NULL,"
    " created_at_ms BIGINT NOT NULL,"
    " updated_at_ms BIGINT NOT NULL,"
    " delivered_at_ms BIGINT NULL,"
    " PRIMARY KEY (id),"
    " UNIQUE KEY uq_outbox_event (event_id),"
    " KEY ix_outbox_due (due_at_ms, id),"
    " KEY ix_outbox_status (status, id),"
    " KEY ix_outbox_delivered (delivered_at_ms)"
    ")" TABLE_OPTS,

    "CREATE TABLE IF NOT EXISTS wallet_accounts ("
    " app_code VARBINARY(64) NOT NULL,"
    " uid BIGINT NOT NULL,"
    " balance BIGINT NOT NULL,"
    " updated_at_ms BIGINT NOT NULL,"
    " PRIMARY KEY (app_code, uid)"
    ")" TABLE_OPTS,

    "CREATE TABLE IF NOT EXISTS wallet_ledger ("
    " app_code VARBINARY(64) NOT NULL,"
    " ref_id VARBINARY(64) NOT NULL,"
    " uid BIGINT NOT NULL,"
    " amount BIGINT NOT NULL,"
    " kind VARCHAR(16) NOT NULL,"
    " created_at_ms BIGINT NOT NULL,"
    " PRIMARY KEY (app_code, ref_id, kind)"
    ")" TABLE_OPTS,
    NULL,
};

static const struct migration {
    int version;
    const char *const *sql;
} migrations[] = {
    {1, migration_1},
};
#define NMIGRATIONS (sizeof(migrations) / sizeof(migrations[0]))

/* ==== Statements: fixed SQL text, parameters bound, never built from data ==== */

#define OUTBOX_COLS                                                                                \
    "id, event_id, app_code, room_id, command_id, event_type, room_version, payload, status, "     \
    "retry_count, sinks_done, next_retry_at_ms, lock_until_ms, locked_by, last_error, "            \
    "created_at_ms, delivered_at_ms"
#define OUTBOX_TYPES "isssssibsiiiisbii"
#define CMD_COLS "room_id, command_id, command_type, request, response, version, created_at_ms"
#define CMD_TYPES "sssssii"

enum sid {
    S_FIND_COMMAND,
    S_ROOM_HEAD,
    S_ROOM_FENCE,
    S_SNAP_LATEST,
    S_LOG_TAIL,
    S_LOG_INSERT,
    S_ROOM_INSERT,
    S_ROOM_UPDATE,
    S_OUTBOX_INSERT,
    S_SNAP_INSERT,
    S_SNAP_NTH,
    S_SNAP_PRUNE,
    S_CLAIM_SELECT,
    S_CLAIM_UPDATE,
    S_COMPLETE,
    S_LIST_ALL,
    S_LIST_STATUS,
    S_GET,
    S_REPLAY,
    S_STATUS_OF,
    S_COUNTS,
    S_OLDEST,
    S_PURGE,
    S_ACCT_ENSURE,
    S_ACCT_LOCK,
    S_ACCT_GET,
    S_ACCT_ADD,
    S_LEDGER_GET,
    S_LEDGER_INSERT,
    S_LEDGER_UPDATE,
    S_LEDGER_DELETE,
    S_ROCKETS,
    S_ROOMS_LIST,
    S_FENCE_ROOM,
    S_OUTBOX_IDS,
    S_COUNT
};

static const char *const sql_text[S_COUNT] = {
    [S_FIND_COMMAND] = "SELECT " CMD_COLS " FROM room_command_log"
                       " WHERE app_code=? AND command_id=?",
    [S_ROOM_HEAD] = "SELECT version, fence_token FROM rooms WHERE app_code=? AND room_id=?",
    [S_ROOM_FENCE] = "SELECT version, fence_token FROM rooms WHERE app_code=? AND room_id=?"
                     " FOR UPDATE",
    [S_SNAP_LATEST] = "SELECT version, state FROM room_snapshots"
                      " WHERE app_code=? AND room_id=? AND version<=?"
                      " ORDER BY version DESC LIMIT 1",
    [S_LOG_TAIL] = "SELECT " CMD_COLS " FROM room_command_log"
                   " WHERE app_code=? AND room_id=? AND version>? AND version<=?"
                   " ORDER BY version",
    [S_LOG_INSERT] = "INSERT INTO room_command_log (app_code, room_id, version, command_id,"
                     " command_type, request, response, created_at_ms)"
                     " VALUES (?,?,?,?,?,?,?,?)",
    [S_ROOM_INSERT] = "INSERT INTO rooms (app_code, room_id, owner_uid, title, status, version,"
                      " fence_token, rocket_status, rocket_id, rocket_level, rocket_launch_at_ms,"
                      " created_at_ms, updated_at_ms) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
    [S_ROOM_UPDATE] = "UPDATE rooms SET owner_uid=?, title=?, status=?, version=?, fence_token=?,"
                      " rocket_status=?, rocket_id=?, rocket_level=?, rocket_launch_at_ms=?,"
                      " updated_at_ms=?"
                      " WHERE app_code=? AND room_id=? AND version=? AND fence_token<=?",
    /* status, locked_by, lock_until_ms, due_at_ms: pending (NULL, NULL,
     * created_at_ms) or, for the outbox hand-off, already claimed */
    [S_OUTBOX_INSERT] = "INSERT INTO room_outbox (event_id, app_code, room_id, room_version,"
                        " command_id, event_type, payload, status, retry_count, sinks_done,"
                        " locked_by, lock_until_ms, due_at_ms, created_at_ms, updated_at_ms)"
                        " VALUES (?,?,?,?,?,?,?,?,0,0,?,?,?,?,?)",
    /* The ids of rows just inserted already claimed (their due_at_ms is
     * their lock_until_ms): a range of ix_outbox_due, matched by event_id. */
    [S_OUTBOX_IDS] = "SELECT event_id, id FROM room_outbox FORCE INDEX (ix_outbox_due)"
                     " WHERE due_at_ms>=? AND due_at_ms<=? AND locked_by=?",
    [S_SNAP_INSERT] = "INSERT INTO room_snapshots (app_code, room_id, version, state,"
                      " created_at_ms) VALUES (?,?,?,?,?)"
                      " ON DUPLICATE KEY UPDATE state=VALUES(state),"
                      " created_at_ms=VALUES(created_at_ms)",
    [S_SNAP_NTH] = "SELECT version FROM room_snapshots WHERE app_code=? AND room_id=?"
                   " ORDER BY version DESC LIMIT 1 OFFSET ?",
    [S_SNAP_PRUNE] = "DELETE FROM room_snapshots WHERE app_code=? AND room_id=? AND version<=?",
    /* The claim follows ix_outbox_due exactly (range on due_at_ms, ordered by
     * (due_at_ms, id)): no filesort, so SKIP LOCKED locks only the rows it
     * returns, and delivered rows (due_at_ms NULL) are never read. */
    [S_CLAIM_SELECT] = "SELECT " OUTBOX_COLS " FROM room_outbox FORCE INDEX (ix_outbox_due)"
                       " WHERE due_at_ms<=? ORDER BY due_at_ms, id LIMIT ?"
                       " FOR UPDATE SKIP LOCKED",
    [S_CLAIM_UPDATE] = "UPDATE room_outbox SET status='delivering', locked_by=?,"
                       " lock_until_ms=?, due_at_ms=?, updated_at_ms=? WHERE id=?",
    [S_COMPLETE] = "UPDATE room_outbox SET status=?, retry_count=?, sinks_done=?,"
                   " next_retry_at_ms=?, lock_until_ms=NULL, locked_by=NULL, last_error=?,"
                   " due_at_ms=?,"
                   " updated_at_ms=?, delivered_at_ms=?"
                   " WHERE id=? AND status='delivering' AND locked_by=?",
    [S_LIST_ALL] = "SELECT " OUTBOX_COLS " FROM room_outbox WHERE id>? ORDER BY id LIMIT ?",
    [S_LIST_STATUS] = "SELECT " OUTBOX_COLS " FROM room_outbox"
                      " WHERE status IN (?,?) AND id>? ORDER BY id LIMIT ?",
    [S_GET] = "SELECT " OUTBOX_COLS " FROM room_outbox WHERE event_id=?",
    [S_REPLAY] = "UPDATE room_outbox SET status='pending', retry_count=0,"
                 " next_retry_at_ms=NULL, lock_until_ms=NULL, locked_by=NULL, due_at_ms=?,"
                 " updated_at_ms=?"
                 " WHERE event_id=? AND status='failed'",
    [S_STATUS_OF] = "SELECT status FROM room_outbox WHERE event_id=?",
    [S_COUNTS] = "SELECT status, COUNT(*) FROM room_outbox GROUP BY status",
    [S_OLDEST] = "SELECT MIN(created_at_ms) FROM room_outbox WHERE due_at_ms IS NOT NULL",
    [S_PURGE] = "DELETE FROM room_outbox WHERE delivered_at_ms<?"
                " AND status IN ('delivered','published') ORDER BY delivered_at_ms LIMIT ?",
    [S_ACCT_ENSURE] = "INSERT INTO wallet_accounts (app_code, uid, balance, updated_at_ms)"
                      " VALUES (?,?,?,?) ON DUPLICATE KEY UPDATE uid=uid",
    [S_ACCT_LOCK] = "SELECT balance FROM wallet_accounts WHERE app_code=? AND uid=? FOR UPDATE",
    [S_ACCT_GET] = "SELECT balance FROM wallet_accounts WHERE app_code=? AND uid=?",
    [S_ACCT_ADD] = "UPDATE wallet_accounts SET balance=balance+?, updated_at_ms=?"
                   " WHERE app_code=? AND uid=?",
    [S_LEDGER_GET] = "SELECT uid, amount FROM wallet_ledger"
                     " WHERE app_code=? AND ref_id=? AND kind=?",
    [S_LEDGER_INSERT] = "INSERT INTO wallet_ledger (app_code, ref_id, uid, amount, kind,"
                        " created_at_ms) VALUES (?,?,?,?,?,?)",
    [S_LEDGER_UPDATE] = "UPDATE wallet_ledger SET uid=?, amount=?, created_at_ms=?"
                        " WHERE app_code=? AND ref_id=? AND kind=?",
    [S_LEDGER_DELETE] = "DELETE FROM wallet_ledger WHERE app_code=? AND ref_id=? AND kind=?",
    [S_ROCKETS] = "SELECT app_code, room_id, rocket_id, rocket_level, rocket_launch_at_ms"
                  " FROM rooms WHERE rocket_status='ignited' ORDER BY app_code, room_id",
    /* a range of the primary key: app_code>=? bounds it, the OR filters */
    [S_ROOMS_LIST] = "SELECT app_code, room_id, owner_uid, title, status, version, fence_token,"
                     " created_at_ms, updated_at_ms FROM rooms"
                     " WHERE app_code>=? AND (app_code>? OR room_id>?)"
                     " AND (?=0 OR status='open') ORDER BY app_code, room_id LIMIT ?",
    [S_FENCE_ROOM] = "UPDATE rooms SET fence_token=? WHERE app_code=? AND room_id=?"
                     " AND fence_token<=?",
};

/* ==== The handle and its connection pool ==== */

#define MAXP 20 /* parameters or result columns of one statement */
#define PURGE_CHUNK 500

struct conn {
    MYSQL *db;               /* NULL until connected, again after a loss */
    MYSQL_STMT *st[S_COUNT]; /* prepared on first use on this connection */
    bool bulk;               /* the server takes array binding (MariaDB) */
    bool in_txn;
    unsigned int err; /* MySQL errno of the last failure; 0 = ours */
    char errmsg[320];
};

struct mstore {
    struct store super;
    char *host, *socket, *user, *password, *database;
    unsigned int port;
    unsigned int connect_s, read_s, write_s, lock_wait_s;
    int64_t checkout_wait_ms;
    int deadlock_retries;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct conn *conns;
    int nconns;
    int *freelist; /* indexes of idle conns */
    int nfree;
    bool down; /* last connect failed (log once per outage) */
};

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

enum errclass {
    EC_NONE,
    EC_LOST,  /* the connection is gone or unusable: reconnect, retry once */
    EC_RETRY, /* deadlock / lock wait timeout: retry the transaction */
    EC_DUP,   /* duplicate key */
    EC_OTHER,
};

static enum errclass
classify(unsigned int e)
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

static int
code_of(unsigned int e)
{
    switch (classify(e)) {
    case EC_LOST:
    case EC_RETRY:
        return ROOMD_EUNAVAIL;
    case EC_DUP:
        return ROOMD_EEXIST;
    default:
        return ROOMD_EIO;
    }
}

static int
db_fail(struct conn *c, const char *what)
{
    c->err = mysql_errno(c->db);
    snprintf(c->errmsg, sizeof(c->errmsg), "%s: %s (%u)", what, mysql_error(c->db), c->err);
    store_set_errmsg("mysql %s", c->errmsg);
    return code_of(c->err);
}

static int
st_fail(struct conn *c, MYSQL_STMT *st, enum sid id)
{
    c->err = mysql_stmt_errno(st);
    snprintf(c->errmsg, sizeof(c->errmsg), "stmt %d: %s (%u)", (int)id, mysql_stmt_error(st),
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
    c->in_txn = false;
}

static int
q_exec(struct conn *c, const char *sql)
{
    MYSQL_RES *res;

    if (mysql_real_query(c->db, sql, strlen(sql)) != 0)
        return db_fail(c, sql);
    res = mysql_store_result(c->db);
    if (res != NULL)
        mysql_free_result(res);
    else if (mysql_errno(c->db) != 0)
        return db_fail(c, sql);
    return 0;
}

/* Runs a fixed query returning one integer (NULL reads -1). */
static int
q_int(struct conn *c, const char *sql, int64_t *out)
{
    MYSQL_RES *res;
    MYSQL_ROW row;

    if (mysql_real_query(c->db, sql, strlen(sql)) != 0 || (res = mysql_store_result(c->db)) == NULL)
        return db_fail(c, sql);
    row = mysql_fetch_row(res);
    *out = row != NULL && row[0] != NULL ? strtoll(row[0], NULL, 10) : -1;
    mysql_free_result(res);
    return 0;
}

/* Connects c with timeouts, utf8mb4, READ COMMITTED and no auto-reconnect
 * (a silent reconnect would run the rest of a transaction on a new session). */
static int
conn_connect(struct mstore *s, struct conn *c)
{
    my_bool off = 0;
    unsigned long caps = 0, ext = 0;
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
    if (!mysql_real_connect(c->db, s->host, s->user, s->password, s->database, s->port, s->socket,
                            CLIENT_FOUND_ROWS)) {
        c->err = mysql_errno(c->db);
        snprintf(c->errmsg, sizeof(c->errmsg), "connect %s:%u/%s: %s (%u)",
                 s->socket ? s->socket : s->host, s->port, s->database, mysql_error(c->db), c->err);
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
    if ((rc = q_exec(c, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")) != 0 ||
        (rc = q_exec(c, "SET SESSION sql_mode='STRICT_TRANS_TABLES,NO_ENGINE_SUBSTITUTION'")) !=
            0 ||
        (rc = q_exec(c, sql)) != 0) {
        conn_drop(c);
        c->err = 0;
        return ROOMD_EUNAVAIL;
    }
    mariadb_get_infov(c->db, MARIADB_CONNECTION_SERVER_CAPABILITIES, &caps);
    mariadb_get_infov(c->db, MARIADB_CONNECTION_EXTENDED_SERVER_CAPABILITIES, &ext);
    c->bulk = !(caps & CLIENT_MYSQL) && (ext & (MARIADB_CLIENT_STMT_BULK_OPERATIONS >> 32));
#ifdef ROOMD_TESTING
    /* Tests run the per-row path MySQL servers get (no array binding) on MariaDB. */
    if (getenv("ROOMD_MYSQL_NO_BULK") != NULL)
        c->bulk = false;
#endif
    pthread_mutex_lock(&s->mu);
    if (s->down)
        log_info("store", "mysql reachable again", "host=%s port=%u", s->host, s->port);
    s->down = false;
    pthread_mutex_unlock(&s->mu);
    return 0;
}

static int
pool_get(struct mstore *s, struct conn **out)
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

/* ==== Statement helpers ==== */

static MYSQL_STMT *
stmt(struct conn *c, enum sid id)
{
    MYSQL_STMT *st = c->st[id];

    if (st != NULL)
        return st;
    st = mysql_stmt_init(c->db);
    if (st == NULL) {
        db_fail(c, "stmt_init");
        return NULL;
    }
    if (mysql_stmt_prepare(st, sql_text[id], strlen(sql_text[id])) != 0) {
        st_fail(c, st, id);
        mysql_stmt_close(st);
        return NULL;
    }
    c->st[id] = st;
    return st;
}

/* Parameters of one execution. Strings and blobs are borrowed. */
struct params {
    MYSQL_BIND b[MAXP];
    int64_t i[MAXP];
    unsigned long len[MAXP];
    unsigned int n;
};

/* Returns the next parameter slot, cleared (slots are reused by resetting n). */
static MYSQL_BIND *
p_next(struct params *p, unsigned int *k)
{
    *k = p->n++;
    assert(*k < MAXP);
    memset(&p->b[*k], 0, sizeof(p->b[*k]));
    return &p->b[*k];
}

static void
p_i64(struct params *p, int64_t v)
{
    unsigned int k;
    MYSQL_BIND *b = p_next(p, &k);

    p->i[k] = v;
    b->buffer_type = MYSQL_TYPE_LONGLONG;
    b->buffer = &p->i[k];
}

static void
p_null(struct params *p)
{
    unsigned int k;

    p_next(p, &k)->buffer_type = MYSQL_TYPE_NULL;
}

static void
p_bytes(struct params *p, enum enum_field_types t, const void *d, size_t n)
{
    unsigned int k;
    MYSQL_BIND *b = p_next(p, &k);

    p->len[k] = (unsigned long)n;
    b->buffer_type = t;
    b->buffer = (void *)(d != NULL ? d : "");
    b->buffer_length = (unsigned long)n;
    b->length = &p->len[k];
}

static void
p_str(struct params *p, const char *s)
{
    if (s == NULL)
        p_null(p);
    else
        p_bytes(p, MYSQL_TYPE_STRING, s, strlen(s));
}

/* Executes statement id with p; *affected gets the row count when asked. */
static int
st_exec(struct conn *c, enum sid id, struct params *p, uint64_t *affected)
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

/* The rows of one query, fetched one at a time into growing buffers.
 * types: 'i' BIGINT (NULL reads 0, see r_null), 's' text, 'b' bytes. */
struct rows {
    MYSQL_STMT *st;
    enum sid id;
    unsigned int n;
    const char *types;
    MYSQL_BIND b[MAXP];
    int64_t i[MAXP];
    unsigned long len[MAXP];
    my_bool nul[MAXP];
    my_bool trunc[MAXP];
    char *s[MAXP];
    size_t cap[MAXP];
};

static void
rows_done(struct rows *r)
{
    if (r->st != NULL)
        mysql_stmt_free_result(r->st);
    for (unsigned int k = 0; k < MAXP; k++)
        free(r->s[k]);
    memset(r, 0, sizeof(*r));
}

static int
st_query(struct conn *c, enum sid id, struct params *p, struct rows *r, const char *types)
{
    int rc;

    memset(r, 0, sizeof(*r));
    if ((rc = st_exec(c, id, p, NULL)) != 0)
        return rc;
    r->st = c->st[id];
    r->id = id;
    r->types = types;
    r->n = (unsigned int)strlen(types);
    assert(r->n <= MAXP && mysql_stmt_field_count(r->st) == r->n);
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
static int
st_fetch(struct conn *c, struct rows *r)
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

/* st_query for at most one row: 1 with it in r, 0 none, or a negative code.
 * rows_done(r) after, either way. */
static int
st_query_one(struct conn *c, enum sid id, struct params *p, struct rows *r, const char *types)
{
    int rc = st_query(c, id, p, r, types);

    return rc != 0 ? rc : st_fetch(c, r);
}

static int64_t
r_i64(const struct rows *r, unsigned int k)
{
    return r->nul[k] ? 0 : r->i[k];
}

static const char *
r_str(const struct rows *r, unsigned int k)
{
    return r->nul[k] ? NULL : r->s[k];
}

/* Column-wise parameter arrays for one statement executed for many rows: one
 * round trip with MariaDB's array binding, else one execution per row. */
struct bulk {
    unsigned int nrows, ncols;
    const char *types; /* 'i' BIGINT, 's' text, 'b' bytes */
    int64_t *iv[MAXP];
    const char **sv[MAXP];
    unsigned long *len[MAXP];
    char *ind[MAXP]; /* STMT_INDICATOR_NONE | _NULL */
};

static void
bulk_init(struct bulk *k, const char *types, size_t nrows)
{
    memset(k, 0, sizeof(*k));
    k->types = types;
    k->ncols = (unsigned int)strlen(types);
    k->nrows = (unsigned int)nrows;
    assert(k->ncols <= MAXP);
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

static void
bulk_free(struct bulk *k)
{
    for (unsigned int j = 0; j < MAXP; j++) {
        free(k->iv[j]);
        free(k->sv[j]);
        free(k->len[j]);
        free(k->ind[j]);
    }
    memset(k, 0, sizeof(*k));
}

static void
bk_i64(struct bulk *k, unsigned int col, size_t row, int64_t v)
{
    assert(k->types[col] == 'i' && row < k->nrows);
    k->iv[col][row] = v;
}

static void
bk_null(struct bulk *k, unsigned int col, size_t row)
{
    k->ind[col][row] = STMT_INDICATOR_NULL;
}

static void
bk_bytes(struct bulk *k, unsigned int col, size_t row, const void *d, size_t n)
{
    assert(k->types[col] != 'i' && row < k->nrows);
    k->sv[col][row] = d != NULL ? d : "";
    k->len[col][row] = (unsigned long)n;
}

static void
bk_str(struct bulk *k, unsigned int col, size_t row, const char *s)
{
    if (s == NULL)
        bk_null(k, col, row);
    else
        bk_bytes(k, col, row, s, strlen(s));
}

static enum enum_field_types
bulk_type(char t)
{
    return t == 'i' ? MYSQL_TYPE_LONGLONG : t == 's' ? MYSQL_TYPE_STRING : MYSQL_TYPE_BLOB;
}

static int
st_bulk(struct conn *c, enum sid id, struct bulk *k, uint64_t *affected)
{
    MYSQL_STMT *st;
    MYSQL_BIND b[MAXP];
    my_bool nul[MAXP];
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

/* ==== Transactions: the runner every op goes through ==== */

static int
tx_begin(struct conn *c)
{
    int rc = q_exec(c, "START TRANSACTION");

    c->in_txn = rc == 0;
    return rc;
}

static int
tx_commit(struct conn *c)
{
    c->in_txn = false;
    if (mysql_commit(c->db) != 0)
        return db_fail(c, "COMMIT");
    return 0;
}

static void
tx_rollback(struct conn *c)
{
    c->in_txn = false;
    if (c->db != NULL && mysql_rollback(c->db) != 0)
        conn_drop(c); /* its state is unknown: start over on a new session */
}

typedef int (*txn_fn)(struct conn *c, void *arg);

static void
sleep_ms(int64_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/*
 * Runs fn on a pooled connection. fn opens and commits its own transaction
 * (tx_begin/tx_commit) or runs single statements; it must reset its outputs
 * when it starts, since it may run again. On a lost connection (2006, 2013,
 * 1927, ...) the connection is closed, reopened, its statements re-prepared
 * and fn run once more; on a deadlock or lock wait timeout fn runs again up to
 * deadlock_retries times. Anything else is returned as is.
 */
static int
run(struct mstore *s, txn_fn fn, void *arg)
{
    struct conn *c;
    int rc, lost_left = 1, retry_left = s->deadlock_retries;

    if ((rc = pool_get(s, &c)) != 0)
        return rc;
    for (int attempt = 1;; attempt++) {
        if (c->db == NULL && (rc = conn_connect(s, c)) != 0)
            break;
        c->err = 0;
        rc = fn(c, arg);
        if (rc == 0) {
            assert(!c->in_txn);
            break;
        }
        enum errclass ec = classify(c->err);
        if (ec == EC_LOST) {
            conn_drop(c);
            if (lost_left-- > 0) {
                log_warn("store", "mysql connection lost, reconnecting", "err=\"%s\"", c->errmsg);
                continue;
            }
            rc = ROOMD_EUNAVAIL;
            break;
        }
        if (c->in_txn)
            tx_rollback(c);
        if (ec == EC_RETRY && retry_left-- > 0) {
            log_debug("store", "mysql transaction retried", "attempt=%d err=\"%s\"", attempt,
                      c->errmsg);
            sleep_ms(attempt * (1 + (clock_mono_us() % 5)));
            continue;
        }
        break;
    }
    pool_put(s, c);
    return rc;
}

/* ==== Open, migrate, close ==== */

static int
migrate(struct mstore *s, struct conn *c, char *err, size_t errlen)
{
    bool applied[NMIGRATIONS + 1] = {false};
    MYSQL_RES *res;
    MYSQL_ROW row;
    char sql[160];
    int64_t locked = 0;
    int rc = 0, got;

    /* Several processes may start at once: one migrates, the others wait. */
    if ((rc = q_int(c, "SELECT GET_LOCK('roomd.schema_migrations', 60)", &locked)) != 0)
        goto out;
    if (locked != 1) {
        snprintf(c->errmsg, sizeof(c->errmsg), "GET_LOCK timed out after 60 s");
        rc = ROOMD_ETIMEDOUT;
        goto out;
    }
    if ((rc = q_exec(c, "CREATE TABLE IF NOT EXISTS schema_migrations ("
                        " version INT NOT NULL PRIMARY KEY,"
                        " applied_at_ms BIGINT NOT NULL)" TABLE_OPTS)) != 0)
        goto unlock;
    if (mysql_real_query(c->db, "SELECT version FROM schema_migrations",
                         strlen("SELECT version FROM schema_migrations")) != 0 ||
        (res = mysql_store_result(c->db)) == NULL) {
        rc = db_fail(c, "schema_migrations");
        goto unlock;
    }
    while ((row = mysql_fetch_row(res)) != NULL) {
        got = atoi(row[0]);
        if (got >= 1 && got <= (int)NMIGRATIONS)
            applied[got] = true;
        else if (got > (int)NMIGRATIONS)
            log_warn("store", "database schema is newer than this roomd", "version=%d", got);
    }
    mysql_free_result(res);
    for (size_t i = 0; i < NMIGRATIONS; i++) {
        const struct migration *m = &migrations[i];

        if (applied[m->version])
            continue;
        for (const char *const *q = m->sql; *q != NULL; q++)
            if ((rc = q_exec(c, *q)) != 0)
                goto unlock;
        snprintf(sql, sizeof(sql),
                 "INSERT INTO schema_migrations (version, applied_at_ms) VALUES (%d, %lld)",
                 m->version, (long long)clock_wall_ms());
        if ((rc = q_exec(c, sql)) != 0)
            goto unlock;
        log_info("store", "mysql migration applied", "version=%d database=%s", m->version,
                 s->database);
    }
unlock:
    if (c->db != NULL)
        q_exec(c, "SELECT RELEASE_LOCK('roomd.schema_migrations')");
out:
    if (rc != 0)
        snprintf(err, errlen, "store.mysql: migrating %s: %s", s->database, c->errmsg);
    return rc;
}

static void
my_close(struct store *st)
{
    struct mstore *s = (struct mstore *)st;

    if (s == NULL)
        return;
    for (int i = 0; i < s->nconns; i++)
        conn_drop(&s->conns[i]);
    free(s->conns);
    free(s->freelist);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s->host);
    free(s->socket);
    free(s->user);
    if (s->password != NULL)
        memset(s->password, 0, strlen(s->password));
    free(s->password);
    free(s->database);
    free(s);
}

static int
my_open(struct store **out, const struct conf_store *cs, char *err, size_t errlen)
{
    const struct conf_mysql *mc = &cs->mysql;
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
    if (mc->host != NULL && mc->host[0] == '/') { /* a unix socket path */
        s->socket = xstrdup(mc->host);
        s->host = xstrdup("localhost");
    } else {
        s->host = xstrdup(mc->host && mc->host[0] ? mc->host : "127.0.0.1");
    }
    s->port = mc->port > 0 ? (unsigned int)mc->port : 3306;
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
    s->nconns = mc->pool_size > 0 ? mc->pool_size : 8;
    s->conns = xcalloc((size_t)s->nconns, sizeof(*s->conns));
    s->freelist = xcalloc((size_t)s->nconns, sizeof(int));
    for (int i = s->nconns - 1; i >= 0; i--)
        s->freelist[s->nfree++] = i;
    pthread_mutex_init(&s->mu, NULL);
    clock_cond_init(&s->cv);

    /* The first connection, kept in the pool, runs the migrations. */
    if ((rc = conn_connect(s, &s->conns[0])) != 0) {
        snprintf(err, errlen, "store.mysql: %s", s->conns[0].errmsg);
        goto fail;
    }
    if ((rc = migrate(s, &s->conns[0], err, errlen)) != 0)
        goto fail;
    log_info("store", "mysql store open", "host=%s port=%u database=%s pool=%d bulk=%d", s->host,
             s->port, s->database, s->nconns, (int)s->conns[0].bulk);
    *out = &s->super;
    return 0;
fail:
    my_close(&s->super);
    return rc;
}

/* ==== Reading rows ==== */

/* Reads the row of r (CMD_COLS) into dst (struct command_record). */
static void
read_command(const struct rows *r, void *dst)
{
    struct command_record *out = dst;

    memset(out, 0, sizeof(*out));
    strlcpy_(out->room_id, r_str(r, 0), sizeof(out->room_id));
    strlcpy_(out->command_id, r_str(r, 1), sizeof(out->command_id));
    out->command_type = xstrdup(r_str(r, 2));
    out->request = xstrdup(r_str(r, 3));
    out->response = xstrdup(r_str(r, 4));
    out->version = r_i64(r, 5);
    out->created_at_ms = r_i64(r, 6);
}

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
}

/* Reads every row of r into a growing array (*rows, *n). */
static int
read_outbox_rows(struct conn *c, struct rows *r, struct outbox_row **rows, size_t *n)
{
    size_t cap = 0;
    int rc;

    while ((rc = st_fetch(c, r)) == 1) {
        *rows = xgrow(*rows, *n, &cap, sizeof(**rows));
        read_outbox(r, &(*rows)[(*n)++]);
    }
    return rc;
}

/* ==== One row by key; find_command, load_room ==== */

/* The one row statement id finds for key1 (and key2 when not NULL), read
 * into out through read. */
struct one_ctx {
    enum sid id;
    const char *types;
    const char *key1, *key2;
    void (*read)(const struct rows *, void *);
    void *out;
};

static int
one_fn(struct conn *c, void *arg)
{
    struct one_ctx *x = arg;
    struct params p = {0};
    struct rows r;
    int rc;

    p_str(&p, x->key1);
    if (x->key2 != NULL)
        p_str(&p, x->key2);
    if ((rc = st_query_one(c, x->id, &p, &r, x->types)) == 1) {
        x->read(&r, x->out);
        rc = 0;
    } else if (rc == 0) {
        rc = ROOMD_ENOTFOUND;
    }
    rows_done(&r);
    return rc;
}

static int
my_find_command(struct store *s, const char *app, const char *command_id,
                struct command_record *out)
{
    struct one_ctx x = {S_FIND_COMMAND, CMD_TYPES, app, command_id, read_command, out};

    memset(out, 0, sizeof(*out));
    return run((struct mstore *)s, one_fn, &x);
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
    struct params p = {0};
    struct rows r;
    size_t cap = 0;
    int rc;

    room_load_clear(l);
    p_str(&p, x->app);
    p_str(&p, x->room_id);
    if ((rc = st_query_one(c, S_ROOM_HEAD, &p, &r, "ii")) <= 0) {
        rc = rc == 0 ? ROOMD_ENOTFOUND : rc;
        goto out;
    }
    l->version = r_i64(&r, 0);
    l->fence_token = r_i64(&r, 1);
    rows_done(&r);

    p_i64(&p, l->version);
    if ((rc = st_query_one(c, S_SNAP_LATEST, &p, &r, "is")) < 0)
        goto out;
    if (rc == 1) {
        l->snapshot_version = r_i64(&r, 0);
        l->snapshot = xstrdup(r_str(&r, 1));
    }
    rows_done(&r);

    p.n = 2;
    p_i64(&p, l->snapshot_version);
    p_i64(&p, l->version);
    if ((rc = st_query(c, S_LOG_TAIL, &p, &r, CMD_TYPES)) != 0)
        goto out;
    while ((rc = st_fetch(c, &r)) == 1) {
        l->tail = xgrow(l->tail, l->ntail, &cap, sizeof(*l->tail));
        read_command(&r, &l->tail[l->ntail++]);
    }
out:
    rows_done(&r);
    if (rc != 0)
        room_load_clear(l);
    return rc;
}

static int
my_load_room(struct store *s, const char *app, const char *room_id, struct room_load *out)
{
    struct load_ctx x = {app, room_id, out};

    memset(out, 0, sizeof(*out));
    return run((struct mstore *)s, load_room_fn, &x);
}

/* ==== save: one transaction for a group-commit batch ==== */

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
}
#define LOG_TYPES "ssissssi"

static void
fill_room_insert(struct bulk *k, size_t row, const struct mutation *m)
{
    const struct room_meta *mt = &m->meta;

    bk_str(k, 0, row, m->app_code);
    bk_str(k, 1, row, m->room_id);
    bk_i64(k, 2, row, mt->owner_uid);
    bk_str(k, 3, row, mt->title ? mt->title : "");
    bk_str(k, 4, row, mt->status ? mt->status : "open");
    bk_i64(k, 5, row, m->version);
    bk_i64(k, 6, row, m->fence_token);
    bk_str(k, 7, row, mt->rocket_status ? mt->rocket_status : "idle");
    bk_str(k, 8, row, mt->rocket_id ? mt->rocket_id : "");
    bk_i64(k, 9, row, mt->rocket_level);
    bk_i64(k, 10, row, mt->rocket_launch_at_ms);
    bk_i64(k, 11, row, mt->created_at_ms ? mt->created_at_ms : m->created_at_ms);
    bk_i64(k, 12, row, mt->updated_at_ms ? mt->updated_at_ms : m->created_at_ms);
}
#define ROOM_INSERT_TYPES "ssissiissiiii"

static void
fill_room_update(struct bulk *k, size_t row, const struct mutation *m)
{
    const struct room_meta *mt = &m->meta;

    bk_i64(k, 0, row, mt->owner_uid);
    bk_str(k, 1, row, mt->title ? mt->title : "");
    bk_str(k, 2, row, mt->status ? mt->status : "open");
    bk_i64(k, 3, row, m->version);
    bk_i64(k, 4, row, m->fence_token);
    bk_str(k, 5, row, mt->rocket_status ? mt->rocket_status : "idle");
    bk_str(k, 6, row, mt->rocket_id ? mt->rocket_id : "");
    bk_i64(k, 7, row, mt->rocket_level);
    bk_i64(k, 8, row, mt->rocket_launch_at_ms);
    bk_i64(k, 9, row, mt->updated_at_ms ? mt->updated_at_ms : m->created_at_ms);
    bk_str(k, 10, row, m->app_code);
    bk_str(k, 11, row, m->room_id);
    bk_i64(k, 12, row, m->version - 1);
    bk_i64(k, 13, row, m->fence_token);
}
#define ROOM_UPDATE_TYPES "issiissiiissii"

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
    if (m->locked_by != NULL && *m->locked_by) {
        bk_str(k, 7, row, "delivering");
        bk_str(k, 8, row, m->locked_by);
        bk_i64(k, 9, row, m->lock_until_ms);
        bk_i64(k, 10, row, m->lock_until_ms);
    } else {
        bk_str(k, 7, row, "pending");
        bk_null(k, 8, row);
        bk_null(k, 9, row);
        bk_i64(k, 10, row, m->created_at_ms);
    }
    bk_i64(k, 11, row, m->created_at_ms);
    bk_i64(k, 12, row, m->created_at_ms);
}
#define OUTBOX_INSERT_TYPES "sssissbssiiii"

/*
 * Sets events[i].id of every mutation of muts[0..n) whose rows were just
 * inserted already claimed (locked_by set), in the open transaction: one
 * query per distinct claimer. A row not found keeps id 0 (the hand-off then
 * leaves it to the claims after its lock).
 */
static int
claimed_ids(struct conn *c, struct mutation *const *muts, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const char *by = muts[i]->locked_by;
        int64_t lo = INT64_MAX, hi = INT64_MIN;
        struct params p = {0};
        struct rows r;
        int rc;

        if (by == NULL || *by == '\0' || muts[i]->rc != 0 || muts[i]->nevents == 0)
            continue;
        bool first = true; /* the first mutation of this claimer queries for all */
        for (size_t j = 0; j < i && first; j++)
            first = !(muts[j]->rc == 0 && muts[j]->nevents > 0 && muts[j]->locked_by != NULL &&
                      strcmp(muts[j]->locked_by, by) == 0);
        if (!first)
            continue;
        for (size_t j = i; j < n; j++)
            if (muts[j]->rc == 0 && muts[j]->locked_by != NULL &&
                strcmp(muts[j]->locked_by, by) == 0) {
                lo = muts[j]->lock_until_ms < lo ? muts[j]->lock_until_ms : lo;
                hi = muts[j]->lock_until_ms > hi ? muts[j]->lock_until_ms : hi;
            }
        p_i64(&p, lo);
        p_i64(&p, hi);
        p_str(&p, by);
        if ((rc = st_query(c, S_OUTBOX_IDS, &p, &r, "si")) != 0)
            return rc;
        while ((rc = st_fetch(c, &r)) == 1)
            for (size_t j = i; j < n; j++) {
                struct mutation *m = muts[j];

                if (m->rc != 0 || m->locked_by == NULL || strcmp(m->locked_by, by) != 0)
                    continue;
                for (size_t e = 0; e < m->nevents; e++)
                    if (strcmp(m->events[e].event_id, r_str(&r, 0)) == 0)
                        m->events[e].id = r_i64(&r, 1);
            }
        rows_done(&r);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* Writes m's snapshot and drops all but the newest snapshots_keep (>= 1). */
static int
save_snapshot(struct conn *c, const struct mutation *m)
{
    struct params p = {0};
    struct rows r;
    int64_t cut = 0;
    int rc;

    p_str(&p, m->app_code);
    p_str(&p, m->room_id);
    p_i64(&p, m->version);
    p_str(&p, m->snapshot);
    p_i64(&p, m->created_at_ms);
    if ((rc = st_exec(c, S_SNAP_INSERT, &p, NULL)) != 0)
        return rc;
    p.n = 2;
    p_i64(&p, m->snapshots_keep > 1 ? m->snapshots_keep : 1);
    if ((rc = st_query_one(c, S_SNAP_NTH, &p, &r, "i")) == 1)
        cut = r_i64(&r, 0);
    rows_done(&r);
    if (rc < 0 || cut == 0)
        return rc < 0 ? rc : 0;
    p.n = 2;
    p_i64(&p, cut);
    return st_exec(c, S_SNAP_PRUNE, &p, NULL);
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
    enum errclass ec = classify(c->err);

    return ec == EC_DUP || ec == EC_OTHER;
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
    size_t ncreate = 0, nupdate = 0, nev = 0, ic = 0, iu = 0, ie = 0;
    uint64_t aff;
    int rc;

    for (size_t i = 0; i < x->n; i++) {
        if (x->muts[i]->create)
            ncreate++;
        else
            nupdate++;
        nev += x->muts[i]->nevents;
    }
    bulk_init(&log, LOG_TYPES, x->n);
    bulk_init(&ins, ROOM_INSERT_TYPES, ncreate);
    bulk_init(&upd, ROOM_UPDATE_TYPES, nupdate);
    bulk_init(&ob, OUTBOX_INSERT_TYPES, nev);
    for (size_t i = 0; i < x->n; i++) {
        const struct mutation *m = x->muts[i];

        fill_log(&log, i, m);
        if (m->create)
            fill_room_insert(&ins, ic++, m);
        else
            fill_room_update(&upd, iu++, m);
        for (size_t e = 0; e < m->nevents; e++)
            fill_outbox(&ob, ie++, m, &m->events[e]);
    }
    if ((rc = tx_begin(c)) != 0)
        goto out;
    if ((rc = st_bulk(c, S_LOG_INSERT, &log, NULL)) != 0)
        goto fault;
    if ((rc = fail_hook(x)) != 0)
        goto out;
    if ((rc = st_bulk(c, S_ROOM_INSERT, &ins, NULL)) != 0)
        goto fault;
    if ((rc = st_bulk(c, S_ROOM_UPDATE, &upd, &aff)) != 0)
        goto fault;
    if (aff != nupdate) {
        c->err = 0;
        rc = ROOMD_EFENCED;
        goto fault;
    }
    if ((rc = st_bulk(c, S_OUTBOX_INSERT, &ob, NULL)) != 0)
        goto fault;
    for (size_t i = 0; i < x->n; i++)
        if (x->muts[i]->snapshot != NULL && (rc = save_snapshot(c, x->muts[i])) != 0)
            goto fault;
    if ((rc = claimed_ids(c, x->muts, x->n)) != 0)
        goto fault;
    rc = tx_commit(c);
    goto out;
fault:
    if (c->err == 0 || mutation_fault(c)) {
        tx_rollback(c);
        c->err = 0;
        rc = ROOMD_ECONFLICT;
    }
out:
    bulk_free(&log);
    bulk_free(&ins);
    bulk_free(&upd);
    bulk_free(&ob);
    return rc;
}

/* Runs statement id for one mutation's rows. */
static int
exec_one(struct conn *c, enum sid id, const char *types, const struct mutation *m,
         void (*fill)(struct bulk *, size_t, const struct mutation *), uint64_t *aff)
{
    struct bulk k;
    int rc;

    bulk_init(&k, types, 1);
    fill(&k, 0, m);
    rc = st_bulk(c, id, &k, aff);
    bulk_free(&k);
    return rc;
}

/* Sorts out a failed statement of one mutation: a duplicate key is that
 * mutation's dup_code and data the server refused is its ROOMD_EIO (either
 * way it alone is rolled back); anything else ends the transaction (*fatal). */
static int
mutation_outcome(struct conn *c, int rc, int dup_code, int *fatal)
{
    switch (classify(c->err)) {
    case EC_DUP:
        return dup_code;
    case EC_OTHER:
        return ROOMD_EIO;
    default:
        return *fatal = rc;
    }
}

/*
 * One mutation inside the slow path's transaction, after its savepoint, in
 * the order and with the codes of store_sqlite.c: the room's fence (locked),
 * the command log row, the outbox rows, the rooms row, the snapshot. Returns
 * 0, a per-mutation code (EEXIST, ENOTFOUND, EFENCED, EREUSED, ECONFLICT,
 * EIO), or sets *fatal with the code that ends the whole transaction.
 */
static int
save_one(struct conn *c, struct save_ctx *x, struct mutation *m, int *fatal)
{
    struct params p = {0};
    struct rows r;
    struct bulk ob;
    uint64_t aff = 0;
    int64_t cur_version = 0, cur_token = 0;
    int rc;

    *fatal = 0;
    p_str(&p, m->app_code);
    p_str(&p, m->room_id);
    if ((rc = st_query_one(c, S_ROOM_FENCE, &p, &r, "ii")) == 1) {
        cur_version = r_i64(&r, 0);
        cur_token = r_i64(&r, 1);
    }
    rows_done(&r);
    if (rc < 0)
        return *fatal = rc;
    if ((rc = store_check_mutation(m, rc == 1, cur_version, cur_token)) != 0)
        return rc;

    rc = exec_one(c, S_LOG_INSERT, LOG_TYPES, m, fill_log, NULL);
    if (rc != 0) {
        bool reused = strstr(c->errmsg, "uq_cmdlog_command") != NULL;

        rc = mutation_outcome(c, rc, reused ? ROOMD_EREUSED : ROOMD_EFENCED, fatal);
        if (rc == ROOMD_EREUSED)
            store_set_errmsg("command_id %s already used", m->command_id);
        return rc;
    }
    if ((rc = fail_hook(x)) != 0)
        return *fatal = rc;

    bulk_init(&ob, OUTBOX_INSERT_TYPES, m->nevents);
    for (size_t e = 0; e < m->nevents; e++)
        fill_outbox(&ob, e, m, &m->events[e]);
    rc = st_bulk(c, S_OUTBOX_INSERT, &ob, NULL);
    bulk_free(&ob);
    if (rc != 0)
        return mutation_outcome(c, rc, ROOMD_ECONFLICT, fatal);

    if (m->create) {
        rc = exec_one(c, S_ROOM_INSERT, ROOM_INSERT_TYPES, m, fill_room_insert, NULL);
        if (rc != 0)
            return mutation_outcome(c, rc, ROOMD_EEXIST, fatal);
    } else {
        rc = exec_one(c, S_ROOM_UPDATE, ROOM_UPDATE_TYPES, m, fill_room_update, &aff);
        if (rc != 0)
            return mutation_outcome(c, rc, ROOMD_EFENCED, fatal);
        if (aff != 1)
            return ROOMD_EFENCED;
    }
    if (m->snapshot != NULL && (rc = save_snapshot(c, m)) != 0)
        return mutation_outcome(c, rc, ROOMD_ECONFLICT, fatal);
    return 0;
}

/* The slow path: a savepoint per mutation, so one that breaks a rule is
 * rolled back alone with its rc set while the others commit. */
static int
save_slow(struct conn *c, struct save_ctx *x)
{
    int rc, fatal;

    if ((rc = tx_begin(c)) != 0)
        return rc;
    for (size_t i = 0; i < x->n; i++) {
        struct mutation *m = x->muts[i];

        if ((rc = q_exec(c, "SAVEPOINT m")) != 0)
            return rc;
        c->err = 0;
        m->rc = save_one(c, x, m, &fatal);
        if (fatal != 0)
            return fatal; /* the transaction's failure: the runner decides */
        if (m->rc == 0)
            continue;
        c->err = 0;
        if ((rc = q_exec(c, "ROLLBACK TO SAVEPOINT m")) != 0)
            return rc;
    }
    if ((rc = claimed_ids(c, x->muts, x->n)) != 0)
        return rc;
    return tx_commit(c);
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

static int
my_save(struct store *s, struct mutation *const *muts, size_t n)
{
    struct save_ctx x = {muts, n, false};
    int rc;

    if (n == 0)
        return 0;
    rc = run((struct mstore *)s, save_fn, &x);
    if (rc != 0)
        for (size_t i = 0; i < n; i++)
            muts[i]->rc = rc;
    return rc;
}

/* ==== Outbox: claim, complete, list, get, replay, counts, purge ==== */

struct claim_ctx {
    int64_t now, until;
    const char *by;
    int limit;
    struct outbox_row *rows;
    size_t n;
};

static int
claim_fn(struct conn *c, void *arg)
{
    struct claim_ctx *x = arg;
    struct params p = {0};
    struct rows r;
    struct bulk k;
    int rc;

    outbox_rows_free(x->rows, x->n);
    x->rows = NULL;
    x->n = 0;
    if ((rc = tx_begin(c)) != 0)
        return rc;
    p_i64(&p, x->now);
    p_i64(&p, x->limit);
    if ((rc = st_query(c, S_CLAIM_SELECT, &p, &r, OUTBOX_TYPES)) == 0)
        rc = read_outbox_rows(c, &r, &x->rows, &x->n);
    rows_done(&r);
    if (rc != 0)
        return rc;
    bulk_init(&k, "siiii", x->n);
    for (size_t i = 0; i < x->n; i++) {
        bk_str(&k, 0, i, x->by);
        bk_i64(&k, 1, i, x->until);
        bk_i64(&k, 2, i, x->until);
        bk_i64(&k, 3, i, x->now);
        bk_i64(&k, 4, i, x->rows[i].id);
    }
    rc = st_bulk(c, S_CLAIM_UPDATE, &k, NULL);
    bulk_free(&k);
    if (rc == 0)
        rc = tx_commit(c);
    if (rc != 0)
        return rc;
    outbox_rows_sort(x->rows, x->n); /* by id, as SQLite returns them */
    for (size_t i = 0; i < x->n; i++) {
        x->rows[i].status = OUTBOX_DELIVERING;
        x->rows[i].lock_until_ms = x->until;
        strlcpy_(x->rows[i].locked_by, x->by, sizeof(x->rows[i].locked_by));
    }
    return 0;
}

static int
my_outbox_claim(struct store *s, int64_t now_ms, int64_t lock_until_ms, const char *locked_by,
                int limit, struct outbox_row **rows, size_t *n)
{
    struct claim_ctx x = {now_ms, lock_until_ms, locked_by, limit, NULL, 0};
    int rc;

    *rows = NULL;
    *n = 0;
    if (limit <= 0)
        return 0;
    rc = run((struct mstore *)s, claim_fn, &x);
    if (rc != 0) {
        outbox_rows_free(x.rows, x.n);
        return rc;
    }
    *rows = x.rows;
    *n = x.n;
    return 0;
}

struct complete_ctx {
    struct outbox_result *res;
    size_t n;
};

static void
fill_complete(struct bulk *k, size_t row, const struct outbox_result *r)
{
    bk_str(k, 0, row, outbox_status_name(r->status));
    bk_i64(k, 1, row, r->retry_count);
    bk_i64(k, 2, row, (int64_t)r->sinks_done);
    if (r->status == OUTBOX_RETRYABLE) {
        bk_i64(k, 3, row, r->next_retry_at_ms);
        bk_i64(k, 5, row, r->next_retry_at_ms);
    } else {
        bk_null(k, 3, row);
        bk_null(k, 5, row);
    }
    if (r->last_error != NULL)
        bk_bytes(k, 4, row, r->last_error, outbox_last_error_len(r->last_error));
    else
        bk_null(k, 4, row);
    bk_i64(k, 6, row, r->now_ms);
    if (r->status == OUTBOX_DELIVERED)
        bk_i64(k, 7, row, r->now_ms);
    else
        bk_null(k, 7, row);
    bk_i64(k, 8, row, r->id);
    bk_str(k, 9, row, r->locked_by);
}
#define COMPLETE_TYPES "siiibiiiis"

/* All outcomes in one array-bound UPDATE when every fence holds (the common
 * case); otherwise again one row at a time to tell which ones were refused. */
static int
complete_fn(struct conn *c, void *arg)
{
    struct complete_ctx *x = arg;
    struct bulk k;
    uint64_t aff = 0;
    int rc;

    for (size_t i = 0; i < x->n; i++)
        x->res[i].rc = 0;
    if (c->bulk && x->n > 1) {
        if ((rc = tx_begin(c)) != 0)
            return rc;
        bulk_init(&k, COMPLETE_TYPES, x->n);
        for (size_t i = 0; i < x->n; i++)
            fill_complete(&k, i, &x->res[i]);
        rc = st_bulk(c, S_COMPLETE, &k, &aff);
        bulk_free(&k);
        if (rc != 0)
            return rc;
        if (aff == x->n)
            return tx_commit(c);
        tx_rollback(c);
    }
    if ((rc = tx_begin(c)) != 0)
        return rc;
    for (size_t i = 0; i < x->n; i++) {
        bulk_init(&k, COMPLETE_TYPES, 1);
        fill_complete(&k, 0, &x->res[i]);
        rc = st_bulk(c, S_COMPLETE, &k, &aff);
        bulk_free(&k);
        if (rc != 0)
            return rc;
        x->res[i].rc = aff == 1 ? 0 : ROOMD_ESTALE;
    }
    return tx_commit(c);
}

static int
my_outbox_complete(struct store *s, struct outbox_result *res, size_t n)
{
    struct complete_ctx x = {res, n};
    int rc;

    if (n == 0)
        return 0;
    rc = run((struct mstore *)s, complete_fn, &x);
    if (rc != 0)
        for (size_t i = 0; i < n; i++)
            res[i].rc = rc;
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
    struct params p = {0};
    struct rows r;
    enum sid id = S_LIST_ALL;
    int rc;

    outbox_rows_free(x->rows, x->n);
    x->rows = NULL;
    x->n = 0;
    if (x->status >= 0) {
        id = S_LIST_STATUS;
        const char *name = outbox_status_name((enum outbox_status)x->status);

        p_str(&p, name);
        p_str(&p, x->status == OUTBOX_DELIVERED ? "published" : name); /* legacy name */
    }
    p_i64(&p, x->after_id);
    p_i64(&p, x->limit);
    if ((rc = st_query(c, id, &p, &r, OUTBOX_TYPES)) == 0)
        rc = read_outbox_rows(c, &r, &x->rows, &x->n);
    rows_done(&r);
    return rc;
}

static int
my_outbox_list(struct store *s, int status, int64_t after_id, int limit, struct outbox_row **rows,
               size_t *n)
{
    struct list_ctx x = {status, after_id, limit, NULL, 0};
    int rc;

    *rows = NULL;
    *n = 0;
    if (limit <= 0)
        return 0;
    rc = run((struct mstore *)s, list_fn, &x);
    if (rc != 0) {
        outbox_rows_free(x.rows, x.n);
        return rc;
    }
    *rows = x.rows;
    *n = x.n;
    return 0;
}

static int
my_outbox_get(struct store *s, const char *event_id, struct outbox_row *out)
{
    struct one_ctx x = {S_GET, OUTBOX_TYPES, event_id, NULL, read_outbox, out};

    memset(out, 0, sizeof(*out));
    return run((struct mstore *)s, one_fn, &x);
}

struct replay_ctx {
    const char *event_id;
    int64_t now;
};

static int
replay_fn(struct conn *c, void *arg)
{
    struct replay_ctx *x = arg;
    struct params p = {0};
    struct rows r;
    uint64_t aff = 0;
    int rc;

    p_i64(&p, x->now);
    p_i64(&p, x->now);
    p_str(&p, x->event_id);
    if ((rc = st_exec(c, S_REPLAY, &p, &aff)) != 0 || aff == 1)
        return rc;
    memset(&p, 0, sizeof(p));
    p_str(&p, x->event_id);
    if ((rc = st_query_one(c, S_STATUS_OF, &p, &r, "s")) >= 0)
        rc = rc == 1 ? ROOMD_ECONFLICT : ROOMD_ENOTFOUND;
    rows_done(&r);
    if (rc == ROOMD_ECONFLICT)
        store_set_errmsg("outbox row %s is not failed", x->event_id);
    return rc;
}

static int
my_outbox_replay(struct store *s, const char *event_id, int64_t now_ms)
{
    struct replay_ctx x = {event_id, now_ms};

    return run((struct mstore *)s, replay_fn, &x);
}

static int
counts_fn(struct conn *c, void *arg)
{
    struct outbox_counts *o = arg;
    struct params p = {0};
    struct rows r;
    int rc;

    memset(o, 0, sizeof(*o));
    if ((rc = st_query(c, S_COUNTS, &p, &r, "si")) != 0)
        goto out;
    while ((rc = st_fetch(c, &r)) == 1)
        outbox_counts_add(o, r_str(&r, 0), r_i64(&r, 1));
    if (rc < 0)
        goto out;
    rows_done(&r);
    if ((rc = st_query_one(c, S_OLDEST, &p, &r, "i")) >= 0) {
        o->oldest_undelivered_ms = rc == 1 ? r_i64(&r, 0) : 0;
        rc = 0;
    }
out:
    rows_done(&r);
    return rc;
}

static int
my_outbox_counts(struct store *s, struct outbox_counts *out)
{
    return run((struct mstore *)s, counts_fn, out);
}

struct purge_ctx {
    int64_t before;
    int limit;
    size_t purged;
};

/* Deletes in chunks of PURGE_CHUNK, each its own short autocommit
 * statement following ix_outbox_delivered, so no lock is held for long. */
static int
purge_fn(struct conn *c, void *arg)
{
    struct purge_ctx *x = arg;
    uint64_t aff;
    int rc;

    while (x->purged < (size_t)x->limit) {
        struct params p = {0};
        size_t want = (size_t)x->limit - x->purged;

        if (want > PURGE_CHUNK)
            want = PURGE_CHUNK;
        p_i64(&p, x->before);
        p_i64(&p, (int64_t)want);
        if ((rc = st_exec(c, S_PURGE, &p, &aff)) != 0)
            return rc;
        x->purged += aff;
        if (aff < want)
            break;
    }
    return 0;
}

static int
my_outbox_purge(struct store *s, int64_t delivered_before_ms, int limit, size_t *purged)
{
    struct purge_ctx x = {delivered_before_ms, limit, 0};
    int rc = 0;

    if (limit > 0)
        rc = run((struct mstore *)s, purge_fn, &x);
    if (purged != NULL)
        *purged = x.purged;
    return rc;
}

/* ==== Wallet: balances and an idempotent ledger (the rules of store_sqlite.c) ==== */

struct wallet_ctx {
    const char *app, *ref_id;
    int64_t uid, amount, initial;
    int64_t balance; /* out */
};

/* Creates (app, uid) with the initial balance if new, then locks its row. */
static int
lock_account(struct conn *c, const char *app, int64_t uid, int64_t initial, int64_t *balance)
{
    struct params p = {0};
    struct rows r;
    int rc;

    p_str(&p, app);
    p_i64(&p, uid);
    p_i64(&p, initial);
    p_i64(&p, clock_wall_ms());
    if ((rc = st_exec(c, S_ACCT_ENSURE, &p, NULL)) != 0)
        return rc;
    p.n = 2;
    if ((rc = st_query_one(c, S_ACCT_LOCK, &p, &r, "i")) == 1) {
        *balance = r_i64(&r, 0);
        rc = 0;
    } else if (rc == 0) {
        rc = ROOMD_EINTERNAL;
    }
    rows_done(&r);
    return rc;
}

/* Reads the balance of (app, uid); a never-seen account has initial. */
static int
account_balance(struct conn *c, const char *app, int64_t uid, int64_t initial, int64_t *balance)
{
    struct params p = {0};
    struct rows r;
    int rc;

    p_str(&p, app);
    p_i64(&p, uid);
    if ((rc = st_query_one(c, S_ACCT_GET, &p, &r, "i")) >= 0) {
        *balance = rc == 1 ? r_i64(&r, 0) : initial;
        rc = 0;
    }
    rows_done(&r);
    return rc;
}

/* Adds delta to (app, uid), whose row the caller locked. */
static int
account_add(struct conn *c, const char *app, int64_t uid, int64_t delta)
{
    struct params p = {0};

    p_i64(&p, delta);
    p_i64(&p, clock_wall_ms());
    p_str(&p, app);
    p_i64(&p, uid);
    return st_exec(c, S_ACCT_ADD, &p, NULL);
}

/* Finds ledger row (ref_id, kind): 1 found (uid, amount), 0 not, or < 0. */
static int
ledger_get(struct conn *c, const char *app, const char *ref_id, const char *kind, int64_t *uid,
           int64_t *amount)
{
    struct params p = {0};
    struct rows r;
    int rc;

    p_str(&p, app);
    p_str(&p, ref_id);
    p_str(&p, kind);
    if ((rc = st_query_one(c, S_LEDGER_GET, &p, &r, "ii")) == 1) {
        if (uid != NULL)
            *uid = r_i64(&r, 0);
        if (amount != NULL)
            *amount = r_i64(&r, 1);
    }
    rows_done(&r);
    return rc;
}

/* Writes ledger row (ref_id, kind) with S_LEDGER_INSERT, _UPDATE or _DELETE. */
static int
ledger_write(struct conn *c, enum sid id, const char *app, const char *ref_id, const char *kind,
             int64_t uid, int64_t amount)
{
    struct params p = {0};
    int64_t now = clock_wall_ms();

    if (id == S_LEDGER_UPDATE) {
        p_i64(&p, uid);
        p_i64(&p, amount);
        p_i64(&p, now);
    }
    p_str(&p, app);
    p_str(&p, ref_id);
    if (id == S_LEDGER_INSERT) {
        p_i64(&p, uid);
        p_i64(&p, amount);
    }
    p_str(&p, kind);
    if (id == S_LEDGER_INSERT)
        p_i64(&p, now);
    return st_exec(c, id, &p, NULL);
}

/* ---- A batch of debits in one transaction (store_wallet_debit_many) ---- */

struct account {
    const char *app;
    int64_t uid;
    int64_t balance; /* as locked, then as the batch charged it */
};

struct debit_many_ctx {
    struct wallet_debit *items;
    size_t n;
    int64_t initial;
    struct account *accts; /* the distinct accounts of the items, in primary key order */
    size_t naccts;
};

static int
account_cmp(const void *a, const void *b)
{
    const struct account *x = a, *y = b;
    int c = strcmp(x->app, y->app);

    return c != 0 ? c : (x->uid > y->uid) - (x->uid < y->uid);
}

static struct account *
account_find(struct debit_many_ctx *x, const char *app, int64_t uid)
{
    struct account key = {.app = app, .uid = uid};

    return bsearch(&key, x->accts, x->naccts, sizeof(key), account_cmp);
}

/*
 * The batch: locks every account of the batch first, in primary key order
 * (any two batches lock in the same order: no deadlock between them), then
 * applies each debit. A ref already debited (and not refunded) is not charged
 * again: 0 and the current balance. A refunded ref debited again is charged
 * again (the refund row removed, the debit row rewritten): the command refunded
 * because its commit failed is being retried. A short balance charges nothing
 * for its item and does not affect the others (nothing of it is written).
 */
static int
debit_many_fn(struct conn *c, void *arg)
{
    struct debit_many_ctx *x = arg;
    int rc;

    for (size_t i = 0; i < x->n; i++) {
        x->items[i].balance_after = 0;
        x->items[i].rc = x->items[i].amount < 0 ? ROOMD_EINVAL : 0;
    }
    if ((rc = tx_begin(c)) != 0)
        return rc;
    for (size_t i = 0; i < x->naccts; i++) {
        struct account *a = &x->accts[i];

        if ((rc = lock_account(c, a->app, a->uid, x->initial, &a->balance)) != 0)
            return rc;
    }
    for (size_t i = 0; i < x->n; i++) {
        struct wallet_debit *d = &x->items[i];
        struct account *a = account_find(x, d->app, d->uid), *la;
        int64_t luid = 0;
        int have_debit, have_refund;

        if (d->rc != 0)
            continue;
        if ((rc = have_debit = ledger_get(c, d->app, d->ref_id, "debit", &luid, NULL)) < 0)
            return rc;
        if ((rc = have_refund = ledger_get(c, d->app, d->ref_id, "refund", NULL, NULL)) < 0)
            return rc;
        if (have_debit && !have_refund) { /* already charged */
            if ((la = account_find(x, d->app, luid)) != NULL)
                d->balance_after = la->balance;
            else if ((rc = account_balance(c, d->app, luid, x->initial, &d->balance_after)) != 0)
                return rc;
            continue;
        }
        if (a->balance < d->amount) {
            d->balance_after = a->balance;
            d->rc = ROOMD_EFUNDS;
            continue;
        }
        if (have_refund &&
            (rc = ledger_write(c, S_LEDGER_DELETE, d->app, d->ref_id, "refund", 0, 0)) != 0)
            return rc;
        rc = ledger_write(c, have_debit ? S_LEDGER_UPDATE : S_LEDGER_INSERT, d->app, d->ref_id,
                          "debit", d->uid, d->amount);
        if (rc != 0 || (rc = account_add(c, d->app, d->uid, -d->amount)) != 0)
            return rc;
        a->balance -= d->amount;
        d->balance_after = a->balance;
    }
    return tx_commit(c);
}

static int
my_wallet_debit_many(struct store *s, struct wallet_debit *items, size_t n, int64_t initial_balance)
{
    struct debit_many_ctx x = {items, n, initial_balance, xcalloc(n, sizeof(struct account)), 0};
    size_t k = 0;
    int rc;

    for (size_t i = 0; i < n; i++)
        if (items[i].amount >= 0)
            x.accts[x.naccts++] = (struct account){.app = items[i].app, .uid = items[i].uid};
    qsort(x.accts, x.naccts, sizeof(*x.accts), account_cmp);
    for (size_t i = 0; i < x.naccts; i++) /* keep the distinct ones */
        if (k == 0 || account_cmp(&x.accts[k - 1], &x.accts[i]) != 0)
            x.accts[k++] = x.accts[i];
    x.naccts = k;
    rc = run((struct mstore *)s, debit_many_fn, &x);
    if (rc != 0)
        for (size_t i = 0; i < n; i++) {
            items[i].rc = rc;
            items[i].balance_after = 0;
        }
    free(x.accts);
    return rc;
}

static int
refund_fn(struct conn *c, void *arg)
{
    struct wallet_ctx *x = arg;
    int64_t uid = 0, amount = 0, bal;
    int rc;

    if ((rc = tx_begin(c)) != 0)
        return rc;
    if ((rc = ledger_get(c, x->app, x->ref_id, "debit", &uid, &amount)) <= 0) {
        if (rc == 0)
            store_set_errmsg("wallet: no debit %s", x->ref_id);
        return rc == 0 ? ROOMD_ENOTFOUND : rc;
    }
    if ((rc = lock_account(c, x->app, uid, 0, &bal)) != 0)
        return rc;
    if ((rc = ledger_get(c, x->app, x->ref_id, "refund", NULL, NULL)) < 0)
        return rc;
    if (rc == 0) { /* not refunded yet */
        if ((rc = ledger_write(c, S_LEDGER_INSERT, x->app, x->ref_id, "refund", uid, amount)) !=
                0 ||
            (rc = account_add(c, x->app, uid, amount)) != 0)
            return rc;
    }
    return tx_commit(c);
}

static int
my_wallet_refund(struct store *s, const char *app, const char *ref_id)
{
    struct wallet_ctx x = {app, ref_id, 0, 0, 0, 0};

    return run((struct mstore *)s, refund_fn, &x);
}

static int
topup_fn(struct conn *c, void *arg)
{
    struct wallet_ctx *x = arg;
    int64_t bal = 0, luid = 0;
    int rc;

    if ((rc = tx_begin(c)) != 0 || (rc = lock_account(c, x->app, x->uid, x->initial, &bal)) != 0)
        return rc;
    if ((rc = ledger_get(c, x->app, x->ref_id, "topup", &luid, NULL)) < 0)
        return rc;
    if (rc == 1) { /* already credited */
        if (luid != x->uid && (rc = account_balance(c, x->app, luid, x->initial, &bal)) != 0)
            return rc;
    } else {
        if ((rc = ledger_write(c, S_LEDGER_INSERT, x->app, x->ref_id, "topup", x->uid,
                               x->amount)) != 0 ||
            (rc = account_add(c, x->app, x->uid, x->amount)) != 0)
            return rc;
        bal += x->amount;
    }
    x->balance = bal;
    return tx_commit(c);
}

static int
my_wallet_topup(struct store *s, const char *app, int64_t uid, int64_t amount, const char *ref_id,
                int64_t initial_balance, int64_t *balance_after)
{
    struct wallet_ctx x = {app, ref_id, uid, amount, initial_balance, 0};
    int rc;

    *balance_after = 0;
    if (amount < 0) {
        store_set_errmsg("wallet topup: negative amount");
        return ROOMD_EINVAL;
    }
    rc = run((struct mstore *)s, topup_fn, &x);
    if (rc == 0)
        *balance_after = x.balance;
    return rc;
}

static int
balance_fn(struct conn *c, void *arg)
{
    struct wallet_ctx *x = arg;

    return account_balance(c, x->app, x->uid, x->initial, &x->balance);
}

static int
my_wallet_balance(struct store *s, const char *app, int64_t uid, int64_t initial_balance,
                  int64_t *balance)
{
    struct wallet_ctx x = {app, NULL, uid, 0, initial_balance, 0};
    int rc = run((struct mstore *)s, balance_fn, &x);

    *balance = rc == 0 ? x.balance : 0;
    return rc;
}

/* ==== Rockets ==== */

static void
read_rocket(const struct rows *r, struct rocket_pending *rp)
{
    memset(rp, 0, sizeof(*rp));
    strlcpy_(rp->app_code, r_str(r, 0), sizeof(rp->app_code));
    strlcpy_(rp->room_id, r_str(r, 1), sizeof(rp->room_id));
    strlcpy_(rp->rocket_id, r_str(r, 2), sizeof(rp->rocket_id));
    rp->level = (int)r_i64(r, 3);
    rp->launch_at_ms = r_i64(r, 4);
}

struct rockets_ctx {
    struct rocket_pending *out;
    size_t n;
};

static int
rockets_fn(struct conn *c, void *arg)
{
    struct rockets_ctx *x = arg;
    struct params p = {0};
    struct rows r;
    size_t cap = 0;
    int rc;

    free(x->out);
    x->out = NULL;
    x->n = 0;
    if ((rc = st_query(c, S_ROCKETS, &p, &r, "sssii")) == 0) {
        while ((rc = st_fetch(c, &r)) == 1) {
            x->out = xgrow(x->out, x->n, &cap, sizeof(*x->out));
            read_rocket(&r, &x->out[x->n++]);
        }
    }
    rows_done(&r);
    return rc;
}

static int
my_rockets_pending(struct store *s, struct rocket_pending **out, size_t *n)
{
    struct rockets_ctx x = {NULL, 0};
    int rc = run((struct mstore *)s, rockets_fn, &x);

    if (rc != 0) {
        free(x.out);
        x.out = NULL;
        x.n = 0;
    }
    *out = x.out;
    *n = x.n;
    return rc;
}

/* ==== Rooms: listing (projection rebuild) and the lease fence claim ==== */

static void
read_room_row(const struct rows *r, struct room_row *rr)
{
    const char *title = r_str(r, 3), *status = r_str(r, 4);

    memset(rr, 0, sizeof(*rr));
    strlcpy_(rr->app_code, r_str(r, 0), sizeof(rr->app_code));
    strlcpy_(rr->room_id, r_str(r, 1), sizeof(rr->room_id));
    rr->owner_uid = r_i64(r, 2);
    rr->title = xstrdup(title ? title : "");
    strlcpy_(rr->status, status ? status : "", sizeof(rr->status));
    rr->version = r_i64(r, 5);
    rr->fence_token = r_i64(r, 6);
    rr->created_at_ms = r_i64(r, 7);
    rr->updated_at_ms = r_i64(r, 8);
}

struct rooms_list_ctx {
    const char *after_app, *after_room;
    bool open_only;
    int limit;
    struct room_row *rows;
    size_t n;
};

static int
rooms_list_fn(struct conn *c, void *arg)
{
    struct rooms_list_ctx *x = arg;
    struct params p = {0};
    struct rows r;
    size_t cap = 0;
    int rc;

    room_rows_free(x->rows, x->n);
    x->rows = NULL;
    x->n = 0;
    p_str(&p, x->after_app);
    p_str(&p, x->after_app);
    p_str(&p, x->after_room);
    p_i64(&p, x->open_only ? 1 : 0);
    p_i64(&p, x->limit);
    if ((rc = st_query(c, S_ROOMS_LIST, &p, &r, "ssissiiii")) == 0) {
        while ((rc = st_fetch(c, &r)) == 1) {
            x->rows = xgrow(x->rows, x->n, &cap, sizeof(*x->rows));
            read_room_row(&r, &x->rows[x->n++]);
        }
    }
    rows_done(&r);
    return rc;
}

static int
my_rooms_list(struct store *s, const char *after_app, const char *after_room, bool open_only,
              int limit, struct room_row **rows, size_t *n)
{
    struct rooms_list_ctx x = {after_app, after_room, open_only, limit, NULL, 0};
    int rc = run((struct mstore *)s, rooms_list_fn, &x);

    if (rc != 0) {
        room_rows_free(x.rows, x.n);
        x.rows = NULL;
        x.n = 0;
    }
    *rows = x.rows;
    *n = x.n;
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
    struct params p = {0};
    struct rows r;
    uint64_t matched = 0;
    int rc;

    p_i64(&p, x->token);
    p_str(&p, x->app);
    p_str(&p, x->room_id);
    p_i64(&p, x->token);
    if ((rc = st_exec(c, S_FENCE_ROOM, &p, &matched)) != 0 || matched > 0)
        return rc;
    p.n = 0;
    p_str(&p, x->app);
    p_str(&p, x->room_id);
    if ((rc = st_query_one(c, S_ROOM_HEAD, &p, &r, "ii")) == 1) {
        store_set_errmsg("room %s/%s fenced: token %lld holds it, not %lld", x->app, x->room_id,
                         (long long)r_i64(&r, 1), (long long)x->token);
        rc = ROOMD_EFENCED;
    }
    rows_done(&r);
    return rc;
}

static int
my_fence_room(struct store *s, const char *app, const char *room_id, int64_t token)
{
    struct fence_ctx x = {app, room_id, token};

    return run((struct mstore *)s, fence_room_fn, &x);
}

const struct store_ops store_mysql_ops = {
    .name = "mysql",
    .open = my_open,
    .close = my_close,
    .find_command = my_find_command,
    .load_room = my_load_room,
    .save = my_save,
    .outbox_claim = my_outbox_claim,
    .outbox_complete = my_outbox_complete,
    .outbox_list = my_outbox_list,
    .outbox_get = my_outbox_get,
    .outbox_replay = my_outbox_replay,
    .outbox_counts = my_outbox_counts,
    .outbox_purge = my_outbox_purge,
    .wallet_refund = my_wallet_refund,
    .wallet_topup = my_wallet_topup,
    .wallet_balance = my_wallet_balance,
    .wallet_debit_many = my_wallet_debit_many,
    .rockets_pending = my_rockets_pending,
    .rooms_list = my_rooms_list,
    .fence_room = my_fence_room,
};
