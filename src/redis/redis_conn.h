/* SPDX-License-Identifier: Apache-2.0 */
/*
 * redis/redis_conn.h: one hiredis 0.14 connection that reconnects by itself, shared by
 * lease_redis.c and projection_redis.c. Connects lazily with redis.connect_timeout,
 * every command is bounded by redis.command_timeout, AUTH and SELECT on connect.
 * After a failure the connection is dropped; the next command reconnects (at most
 * one attempt per RETRY interval so a dead Redis costs callers nothing).
 *
 * Thread: NOT thread-safe; each owner serializes its calls (a mutex or one thread).
 */
#ifndef ROOMD_REDIS_CONN_H
#define ROOMD_REDIS_CONN_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis.h>

struct conf_redis;

struct redis_conn {
    redisContext *ctx; /* NULL while disconnected */
    char host[256];
    int port;
    char *password;
    int db;
    int64_t connect_timeout_ms;
    int64_t command_timeout_ms;
    int64_t next_try_ms; /* monotonic ms before which no reconnect is tried */
    char errstr[256];    /* last failure, for logs */
};

/* Parses cr->addr and copies the settings; does not connect. Returns 0 or
 * ROOMD_EINVAL with err filled. */
int redis_conn_init(struct redis_conn *rc, const struct conf_redis *cr, char *err, size_t errlen);

/* Runs one command given as argv (binary safe). Returns the reply (free with
 * freeReplyObject) or NULL when Redis is unreachable or the connection broke
 * (rc->errstr says why; the connection is dropped and retried later). An error
 * reply (REDIS_REPLY_ERROR) is returned as a reply. Blocks up to the timeouts. */
redisReply *redis_conn_argv(struct redis_conn *rc, int argc, const char **argv, const size_t *lens);

/* Same with NUL-terminated strings. */
redisReply *redis_conn_cmd(struct redis_conn *rc, int argc, const char **argv);

/* One command of a pipeline: argv[0..argc), NUL-terminated strings (borrowed). */
struct redis_cmd {
    int argc;
    const char **argv;
};

/* Sends cmds[0..n) in one write and reads their n replies into out[0..n)
 * (free each with freeReplyObject). Returns 0, or -1 with every out[i] NULL
 * when Redis is unreachable or the connection broke (as redis_conn_argv:
 * rc->errstr says why, the connection is dropped, one fresh try when it had
 * broken while idle). An error reply is a reply. Thread: as the
 * connection's (not thread-safe). Blocks up to the timeouts. */
int redis_conn_pipeline(struct redis_conn *rc, size_t n, const struct redis_cmd *cmds,
                        redisReply **out);

void redis_conn_close(struct redis_conn *rc);

#endif
