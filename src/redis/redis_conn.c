/* SPDX-License-Identifier: Apache-2.0 */
/*
 * redis_conn.c: the self-reconnecting hiredis connection of redis_conn.h, its
 * own module below lease/ and projection/ (its users: lease/lease_redis.c and
 * projection/projection_redis.c).
 */
#include "redis/redis_conn.h"

#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/xmalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RETRY_MS 200

static struct timeval
tv_ms(int64_t ms)
{
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    return tv;
}

int
redis_conn_init(struct redis_conn *rc, const struct conf_redis *cr, char *err, size_t errlen)
{
    const char *colon = strrchr(cr->addr ? cr->addr : "", ':');

    memset(rc, 0, sizeof(*rc));
    if (colon == NULL || colon == cr->addr || (size_t)(colon - cr->addr) >= sizeof(rc->host)) {
        snprintf(err, errlen, "redis.addr: must be host:port, got \"%s\"",
                 cr->addr ? cr->addr : "");
        return ROOMD_EINVAL;
    }
    memcpy(rc->host, cr->addr, (size_t)(colon - cr->addr));
    rc->port = atoi(colon + 1);
    rc->password = xstrdup(cr->password ? cr->password : "");
    rc->db = cr->db;
    rc->connect_timeout_ms = cr->connect_timeout_ms > 0 ? cr->connect_timeout_ms : 500;
    rc->command_timeout_ms = cr->command_timeout_ms > 0 ? cr->command_timeout_ms : 500;
    return 0;
}

static void
drop(struct redis_conn *rc, const char *why)
{
    snprintf(rc->errstr, sizeof(rc->errstr), "%s", why);
    if (rc->ctx != NULL) {
        redisFree(rc->ctx);
        rc->ctx = NULL;
    }
}

/* After an I/O error on the context: sets *stale (when not NULL) and drops
 * the connection. Stale is EOF or a reset on a connection idle since the
 * last call: the server restarted and never saw the command. A timeout is
 * not stale (the command may have run), so it is not repeated. */
static void
io_failed(struct redis_conn *rc, int *stale)
{
    if (stale != NULL)
        *stale = rc->ctx->err == REDIS_ERR_EOF ||
                 (rc->ctx->err == REDIS_ERR_IO &&
                  (strstr(rc->ctx->errstr, "reset") || strstr(rc->ctx->errstr, "pipe")));
    drop(rc, rc->ctx->errstr[0] ? rc->ctx->errstr : "connection lost");
}

/* One command on a connected context; NULL (and the context dropped) on I/O error. */
static redisReply *
raw(struct redis_conn *rc, int argc, const char **argv, const size_t *lens, int *stale)
{
    redisReply *r = redisCommandArgv(rc->ctx, argc, argv, lens);

    if (r == NULL)
        io_failed(rc, stale);
    return r;
}

/* The commands cmds[0..n) sent together on a connected context, then their
 * replies read into out[0..n): 0, or -1 with every out[i] NULL and the
 * context dropped (I/O error). */
static int
raw_pipeline(struct redis_conn *rc, size_t n, const struct redis_cmd *cmds, redisReply **out,
             int *stale)
{
    size_t got = 0;

    for (size_t i = 0; i < n; i++)
        out[i] = NULL;
    for (size_t i = 0; i < n; i++)
        if (redisAppendCommandArgv(rc->ctx, cmds[i].argc, cmds[i].argv, NULL) != REDIS_OK)
            goto fail;
    for (; got < n; got++)
        if (redisGetReply(rc->ctx, (void **)&out[got]) != REDIS_OK || out[got] == NULL)
            goto fail;
    return 0;
fail:
    for (size_t i = 0; i <= got && i < n; i++) {
        freeReplyObject(out[i]);
        out[i] = NULL;
    }
    io_failed(rc, got == 0 ? stale : NULL); /* stale only before the first reply */
    return -1;
}

/* Sends "cmd arg" (AUTH, SELECT) on the connection just made: 0, or -1
 * after dropping it (refused or lost; the next try waits RETRY_MS). */
static int
hello(struct redis_conn *rc, const char *cmd, const char *arg, int64_t now)
{
    const char *av[] = {cmd, arg};
    redisReply *r = raw(rc, 2, av, NULL, NULL);
    int ok = r != NULL && r->type != REDIS_REPLY_ERROR;
    char why[32];

    if (r != NULL && !ok) {
        snprintf(why, sizeof(why), "%s refused", cmd);
        drop(rc, why);
    }
    freeReplyObject(r);
    if (!ok)
        rc->next_try_ms = now + RETRY_MS;
    return ok ? 0 : -1;
}

static int
connect_now(struct redis_conn *rc)
{
    int64_t now = clock_mono_ms();
    char db[16];

    if (now < rc->next_try_ms)
        return -1;
    rc->ctx = redisConnectWithTimeout(rc->host, rc->port, tv_ms(rc->connect_timeout_ms));
    if (rc->ctx == NULL || rc->ctx->err) {
        drop(rc, rc->ctx ? rc->ctx->errstr : "cannot allocate a redis context");
        rc->next_try_ms = now + RETRY_MS;
        return -1;
    }
    redisSetTimeout(rc->ctx, tv_ms(rc->command_timeout_ms));
    if (rc->password[0] != '\0' && hello(rc, "AUTH", rc->password, now) != 0)
        return -1;
    snprintf(db, sizeof(db), "%d", rc->db);
    if (rc->db != 0 && hello(rc, "SELECT", db, now) != 0)
        return -1;
    return 0;
}

redisReply *
redis_conn_argv(struct redis_conn *rc, int argc, const char **argv, const size_t *lens)
{
    redisReply *r;
    int stale = 0;

    if (rc->ctx == NULL && connect_now(rc) != 0)
        return NULL;
    r = raw(rc, argc, argv, lens, &stale);
    if (r == NULL && stale) {
        /* A connection that broke while idle (server restarted): one fresh try. */
        if (connect_now(rc) != 0)
            return NULL;
        r = raw(rc, argc, argv, lens, NULL);
    }
    if (r == NULL)
        rc->next_try_ms = clock_mono_ms() + RETRY_MS;
    return r;
}

int
redis_conn_pipeline(struct redis_conn *rc, size_t n, const struct redis_cmd *cmds, redisReply **out)
{
    int stale = 0;

    for (size_t i = 0; i < n; i++)
        out[i] = NULL;
    if (rc->ctx == NULL && connect_now(rc) != 0)
        return -1;
    if (raw_pipeline(rc, n, cmds, out, &stale) == 0)
        return 0;
    /* A connection that broke while idle (server restarted): one fresh try. */
    if (stale && connect_now(rc) == 0 && raw_pipeline(rc, n, cmds, out, NULL) == 0)
        return 0;
    rc->next_try_ms = clock_mono_ms() + RETRY_MS;
    return -1;
}

redisReply *
redis_conn_cmd(struct redis_conn *rc, int argc, const char **argv)
{
    return redis_conn_argv(rc, argc, argv, NULL);
}

void
redis_conn_close(struct redis_conn *rc)
{
    if (rc->ctx != NULL)
        redisFree(rc->ctx);
    rc->ctx = NULL;
    free(rc->password);
    rc->password = NULL;
}
