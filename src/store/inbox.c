/* SPDX-License-Identifier: Apache-2.0 */
/*
 * inbox.c: picks the inbox backend (inbox.h) and dispatches to it.
 */
#include "store/inbox.h"

#include "conf/conf.h"
#include "core/err.h"

#include <stdio.h>
#include <string.h>

int
inbox_open(struct consume_inbox **out, const struct inbox_config *cfg, char *err, size_t errlen)
{
    enum inbox_driver d = cfg->driver;
    bool store_mysql = cfg->store && cfg->store->driver && strcmp(cfg->store->driver, "mysql") == 0;

    *out = NULL;
    if (d == INBOX_AUTO)
        d = store_mysql ? INBOX_MYSQL : INBOX_SQLITE;
    if (d == INBOX_MYSQL && !store_mysql) {
        snprintf(err, errlen, "rocketmq.consumer_inbox: mysql needs store.driver: mysql");
        return ROOMD_EINVAL;
    }
    const struct inbox_ops *ops = d == INBOX_MYSQL ? &inbox_mysql_ops : &inbox_sqlite_ops;
    int rc = ops->open(out, cfg, err, errlen);
    if (rc == 0)
        (*out)->ops = ops;
    return rc;
}

void
inbox_close(struct consume_inbox *ib)
{
    if (ib != NULL)
        ib->ops->close(ib);
}

const char *
inbox_name(const struct consume_inbox *ib)
{
    return ib->ops->name;
}

const char *
inbox_where(const struct consume_inbox *ib)
{
    return ib->where;
}

const char *
inbox_errmsg(const struct consume_inbox *ib)
{
    return ib->errmsg;
}

int
inbox_claim(struct consume_inbox *ib, const char *key, const char *app, enum inbox_claim *res,
            int *failures, int64_t *busy_until_ms)
{
    *failures = 0;
    *busy_until_ms = 0;
    return ib->ops->claim(ib, key, app ? app : "", res, failures, busy_until_ms);
}

/* A mark worth raising, else NULL. */
static const struct inbox_mark *
mark_or_null(const struct inbox_mark *mark)
{
    return mark != NULL && mark->seq > 0 ? mark : NULL;
}

int
inbox_mark_get(struct consume_inbox *ib, const char *app, const char *room, int64_t *seq)
{
    return ib->ops->mark_get(ib, app ? app : "", room ? room : "", seq);
}

int
inbox_done(struct consume_inbox *ib, const char *key, const struct inbox_mark *mark)
{
    return ib->ops->done(ib, key, mark_or_null(mark));
}

int
inbox_release(struct consume_inbox *ib, const char *key)
{
    return ib->ops->release(ib, key);
}

int
inbox_fail(struct consume_inbox *ib, const char *key, const char *why, int *failures)
{
    *failures = 0;
    return ib->ops->fail(ib, key, why ? why : "", failures);
}

int
inbox_dead(struct consume_inbox *ib, const char *key, const char *why)
{
    return ib->ops->dead(ib, key, why ? why : "");
}

int
inbox_purge(struct consume_inbox *ib, int64_t before_ms, int64_t *unsettled)
{
    int64_t n = 0;
    int rc = ib->ops->purge(ib, before_ms, &n);

    if (unsettled)
        *unsettled = n;
    return rc;
}

int
inbox_tx_begin(struct consume_inbox *ib, const char *key)
{
    if (ib->in_tx) {
        snprintf(ib->errmsg, sizeof(ib->errmsg), "a transaction is already open");
        return ROOMD_EINVAL;
    }
    return ib->ops->tx_begin(ib, key);
}

int
inbox_tx_commit_done(struct consume_inbox *ib, const char *key, const struct inbox_mark *mark)
{
    if (!ib->in_tx) {
        snprintf(ib->errmsg, sizeof(ib->errmsg), "no transaction open");
        return ROOMD_EINVAL;
    }
    return ib->ops->tx_commit_done(ib, key, mark_or_null(mark));
}

void
inbox_tx_rollback(struct consume_inbox *ib)
{
    if (ib->in_tx)
        ib->ops->tx_rollback(ib);
}

bool
inbox_shared(const struct consume_inbox *ib)
{
    return ib->shared;
}

bool
inbox_in_tx(const struct consume_inbox *ib)
{
    return ib->in_tx;
}

int
inbox_exec(struct consume_inbox *ib, const struct consume_sql *q, const struct consume_arg *args,
           int nargs, char *out, size_t outlen)
{
    if (out && outlen)
        *out = '\0';
    return ib->ops->exec(ib, q, args, nargs, out, outlen);
}

const char *
inbox_state_name(enum inbox_state st)
{
    static const char *const names[] = {"absent", "received", "progress", "done", "dead"};
    return st <= INBOX_DEAD ? names[st] : "?";
}

int
inbox_state(struct consume_inbox *ib, const char *key, enum inbox_state *st)
{
    char buf[16] = "";
    int rc = ib->ops->state(ib, key, buf, sizeof(buf));

    *st = INBOX_ABSENT;
    for (enum inbox_state k = INBOX_RECEIVED; rc == 0 && k <= INBOX_DEAD; k++)
        if (strcmp(buf, inbox_state_name(k)) == 0)
            *st = k;
    return rc;
}

int
inbox_forget_dead(struct consume_inbox *ib, const char *key, bool *forgotten)
{
    bool f = false;
    int rc = ib->ops->forget_dead(ib, key, &f);

    if (forgotten)
        *forgotten = rc == 0 && f;
    return rc;
}
