/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mysql/failover.c: the servers of store.mysql.hosts (a Galera cluster, or a
 * primary and its standbys) and the pool's move between them.
 *
 * The pool uses one server at a time, s->cur. A connection remembers the
 * generation s->gen it was opened under; a move bumps the generation, so
 * every pooled connection to the old server is closed at its next use
 * (mys_fo_stale) and reopened on the new one: the whole pool moves, not one
 * connection. A server is used when it answers and is ready: not Galera, or
 * Galera with wsrep_ready ON in the Primary component (mys_fo_check, once per
 * new connection). On Galera every session also gets wsrep_sync_wait
 * (store.mysql.wsrep_sync_wait, default 1): its reads wait until the node
 * applied every write the cluster committed before them (causal reads: a
 * cell's load after a lease takeover, the idempotency lookup and the claim
 * see commits made through another node).
 *
 * The order of trial is the list's: the first server that answers and is
 * ready wins, the one just lost tried last. So every roomd node given the
 * same list writes through the same server (docs/ha.md: the recommended
 * shape), and a restarted first server is used again at the next move.
 * mys_fo_connect keeps trying for store.mysql.failover_timeout, then the
 * caller answers 503. With one server there is no wait: one try, as before.
 */
#include "store/mysql/internal.h"

#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/xmalloc.h"

#include <errno.h>
#include <mysqld_error.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define RETRY_PAUSE_MS 100 /* between two rounds over every server */

static void
pause_ms(int64_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

int
mys_fo_check(struct mstore *s, struct conn *c)
{
    static const char *sql = "SELECT @@wsrep_on, (SELECT VARIABLE_VALUE FROM "
                             "information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME='WSREP_READY'), "
                             "(SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE "
                             "VARIABLE_NAME='WSREP_CLUSTER_STATUS')";
    MYSQL_RES *res;
    MYSQL_ROW row;
    bool galera, ready;
    char set[64];

    if (mysql_real_query(c->db, sql, strlen(sql)) != 0) {
        if (mysql_errno(c->db) == ER_UNKNOWN_SYSTEM_VARIABLE) /* MySQL: no wsrep at all */
            return 0;
        return mys_db_fail(c, "wsrep status");
    }
    if ((res = mysql_store_result(c->db)) == NULL)
        return mys_db_fail(c, "wsrep status");
    row = mysql_fetch_row(res);
    galera = row != NULL && row[0] != NULL && strcmp(row[0], "1") == 0;
    ready = !galera || (row[1] != NULL && strcasecmp(row[1], "ON") == 0 && row[2] != NULL &&
                        strcmp(row[2], "Primary") == 0);
    if (!ready)
        snprintf(c->errmsg, sizeof(c->errmsg), "not ready: wsrep_ready %s, cluster status %s",
                 row[1] ? row[1] : "?", row[2] ? row[2] : "?");
    mysql_free_result(res);
    c->galera = galera;
    if (!ready) {
        store_set_errmsg("mysql %s", c->errmsg);
        return ROOMD_EUNAVAIL;
    }
    if (galera) {
        snprintf(set, sizeof(set), "SET SESSION wsrep_sync_wait=%d", s->wsrep_sync_wait);
        return mys_q_exec(c, set);
    }
    return 0;
}

bool
mys_fo_stale(struct mstore *s, const struct conn *c)
{
    bool stale;

    pthread_mutex_lock(&s->mu);
    stale = c->gen != s->gen;
    pthread_mutex_unlock(&s->mu);
    return stale;
}

/* Moves the pool to server idx (c just connected to it). Under s->mu. */
static void
move_to(struct mstore *s, struct conn *c, int idx)
{
    if (idx != s->cur) {
        log_warn("store", "mysql failover", "from=%s:%u to=%s:%u", s->hosts[s->cur].host,
                 s->hosts[s->cur].port, s->hosts[idx].host, s->hosts[idx].port);
        s->cur = idx;
        s->gen++;
        s->failovers++;
    }
    c->host = idx;
    c->gen = s->gen;
}

int
mys_fo_connect(struct mstore *s, struct conn *c, int failed)
{
    int64_t deadline = clock_mono_ms() + s->failover_ms;
    int rc = ROOMD_EUNAVAIL, n = s->nhosts;

    for (;;) {
        int cur, order[MYS_MAX_HOSTS], k = 0;

        pthread_mutex_lock(&s->mu);
        cur = s->cur;
        pthread_mutex_unlock(&s->mu);
        if (failed < 0 || failed != cur) {
            order[k++] = cur; /* nothing lost yet, or another caller moved already */
            failed = cur;     /* a second round starts from the list's head */
        }
        for (int i = 0; i < n; i++)
            if (i != failed)
                order[k++] = i;
        if (k < n)
            order[k++] = failed; /* the one just lost, last */
        for (int i = 0; i < k; i++) {
            if ((rc = mys_conn_open(s, c, order[i])) != 0)
                continue;
            pthread_mutex_lock(&s->mu);
            move_to(s, c, order[i]);
            pthread_mutex_unlock(&s->mu);
            return 0;
        }
        if (n == 1 || clock_mono_ms() + RETRY_PAUSE_MS >= deadline)
            return rc;
        pause_ms(RETRY_PAUSE_MS);
    }
}

int
mys_server_info(struct store *st, char *host, size_t len, uint64_t *failovers)
{
    struct mstore *s = (struct mstore *)st;

    pthread_mutex_lock(&s->mu);
    snprintf(host, len, "%s:%u", s->hosts[s->cur].host, s->hosts[s->cur].port);
    *failovers = s->failovers;
    pthread_mutex_unlock(&s->mu);
    return 0;
}

int
mys_hosts_parse(struct mstore *s, char *const *list, int n, const char *host, int port, char *err,
                size_t errlen)
{
    if (n > MYS_MAX_HOSTS) {
        snprintf(err, errlen, "store.mysql.hosts: at most %d servers", MYS_MAX_HOSTS);
        return ROOMD_EINVAL;
    }
    if (n == 0) { /* store.mysql.host/port: one server (or a unix socket path) */
        s->hosts[0].host = xstrdup(host && host[0] ? host : "127.0.0.1");
        s->hosts[0].port = port > 0 ? (unsigned int)port : 3306;
        s->nhosts = 1;
        return 0;
    }
    for (int i = 0; i < n; i++) {
        const char *colon = strrchr(list[i], ':');
        char *end;
        long p = colon ? strtol(colon + 1, &end, 10) : 0;

        if (colon == NULL || colon == list[i] || *end != '\0' || p < 1 || p > 65535) {
            snprintf(err, errlen, "store.mysql.hosts[%d]: expected host:port, got \"%s\"", i,
                     list[i]);
            return ROOMD_EINVAL;
        }
        s->hosts[i].host = xstrndup(list[i], (size_t)(colon - list[i]));
        s->hosts[i].port = (unsigned int)p;
        s->nhosts = i + 1;
    }
    return 0;
}
