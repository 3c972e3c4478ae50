/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ratelimit.c: the CreateRoom rate limit (router.h, http_create_allowed):
 * room.max_creates_per_minute per (app, owner_uid), in fixed one-minute
 * windows.
 *
 * With redis.enabled (ratelimit.h) the count is in Redis, shared by every
 * node: one key per (app, owner, window of the wall clock),
 * "<key_prefix>create_limit:<app>:<owner_uid>:<window>", made with its TTL
 * (two windows; SET 0 PX NX) and then INCR'd (which keeps the TTL), sent as
 * one pipeline: a pipeline cut short never leaves a key without a TTL. A Redis that does not answer
 * must not fail a create that does not need it: the check then counts in this process, and
 * roomd_create_limit_fallback_total counts it.
 *
 * In the process: a table of RL_SLOTS slots indexed by a hash of the key. A
 * slot taken by another key is reset for the new one, so a collision can
 * only let a creator through early (fail open), never refuse one that is
 * under its limit.
 */
#include "http/ratelimit.h"

#include "http/router.h"

#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "metrics/metrics.h"
#include "redis/redis_conn.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define RL_SLOTS 4096
#define RL_WINDOW_MS 60000

/* ==== in the process ==== */

struct rl_slot {
    uint64_t key;
    int64_t window; /* clock_mono / RL_WINDOW_MS */
    int count;
};

static struct rl_slot slots[RL_SLOTS];
static pthread_mutex_t rl_mu = PTHREAD_MUTEX_INITIALIZER;

/* FNV-1a of app, then the owner's bytes; never 0 (0 marks a free slot). */
static uint64_t
key_of(const char *app, int64_t owner)
{
    uint64_t h = 1469598103934665603ULL;

    for (const char *p = app; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    for (int i = 0; i < 8; i++)
        h = (h ^ (uint64_t)((owner >> (8 * i)) & 0xff)) * 1099511628211ULL;
    return h ? h : 1;
}

/* Seconds from now (ms) to the end of its window, rounded up. */
static int
retry_after(int64_t now)
{
    return (int)((RL_WINDOW_MS - now % RL_WINDOW_MS + 999) / 1000);
}

static int
local_allowed(int per_minute, const char *app, int64_t owner)
{
    int64_t now = clock_mono_us() / 1000, window = now / RL_WINDOW_MS;
    uint64_t key = key_of(app, owner);
    struct rl_slot *s = &slots[key % RL_SLOTS];
    int retry = 0;

    pthread_mutex_lock(&rl_mu);
    if (s->key != key || s->window != window) {
        s->key = key;
        s->window = window;
        s->count = 0;
    }
    if (s->count >= per_minute)
        retry = retry_after(now);
    else
        s->count++;
    pthread_mutex_unlock(&rl_mu);
    return retry;
}

/* ==== in Redis ==== */

static struct {
    pthread_mutex_t mu; /* the connection's calls (redis_conn is not thread-safe) */
    bool on;            /* redis.enabled */
    bool down;          /* the last call got no answer (logged once per change) */
    bool metrics;       /* the collector is registered */
    struct redis_conn conn;
    char prefix[128];
} shared = {.mu = PTHREAD_MUTEX_INITIALIZER};

static atomic_uint_fast64_t fallbacks;

static void
collect(void *arg, struct metrics_text *t)
{
    (void)arg;
    metrics_counter(t, "roomd_create_limit_fallback_total",
                    "CreateRoom rate-limit checks counted in this process because Redis did "
                    "not answer.",
                    (uint64_t)atomic_load(&fallbacks));
}

/* Counts one create of (app, owner) in window. Returns the window's count
 * so far (>= 1), or -1 when Redis did not answer. Blocks up to the redis
 * timeouts. */
static long long
redis_count(const char *app, int64_t owner, int64_t window)
{
    char key[256], ttl[24];
    const char *make[] = {"SET", key, "0", "PX", ttl, "NX"};
    const char *incr[] = {"INCR", key};
    const struct redis_cmd cmds[] = {{6, make}, {2, incr}};
    redisReply *r[2];
    long long n = -1;

    snprintf(key, sizeof(key), "%screate_limit:%s:%" PRId64 ":%" PRId64, shared.prefix, app, owner,
             window);
    snprintf(ttl, sizeof(ttl), "%d", 2 * RL_WINDOW_MS);
    pthread_mutex_lock(&shared.mu);
    if (redis_conn_pipeline(&shared.conn, 2, cmds, r) == 0) {
        if (r[1]->type == REDIS_REPLY_INTEGER)
            n = r[1]->integer;
        freeReplyObject(r[0]);
        freeReplyObject(r[1]);
    }
    bool was_down = shared.down;
    shared.down = n < 0;
    if (n < 0 && !was_down)
        log_warn("http", "create limit: Redis does not answer, counting in this process",
                 "err=\"%s\"", shared.conn.errstr[0] ? shared.conn.errstr : "error reply");
    else if (n >= 0 && was_down)
        log_info("http", "create limit: counting in Redis again", NULL);
    pthread_mutex_unlock(&shared.mu);
    return n;
}

int
http_create_limit_open(const struct conf *conf, char *err, size_t errlen)
{
    if (!conf->redis.enabled)
        return 0;
    if (redis_conn_init(&shared.conn, &conf->redis, err, errlen) != 0)
        return ROOMD_EINVAL;
    snprintf(shared.prefix, sizeof(shared.prefix), "%s",
             conf->redis.key_prefix ? conf->redis.key_prefix : "");
    shared.on = true;
    shared.down = false;
    shared.metrics = metrics_add_collector(collect, NULL) == 0;
    return 0;
}

void
http_create_limit_close(void)
{
    if (!shared.on)
        return;
    if (shared.metrics)
        metrics_remove_collector(collect, NULL);
    shared.metrics = shared.on = false;
    redis_conn_close(&shared.conn);
}

int
http_create_allowed(int per_minute, const char *app, int64_t owner)
{
    if (per_minute <= 0)
        return 0;
    if (shared.on) {
        int64_t now = clock_wall_ms();
        long long n = redis_count(app, owner, now / RL_WINDOW_MS);

        if (n >= 0)
            return n > per_minute ? retry_after(now) : 0;
        atomic_fetch_add(&fallbacks, 1);
    }
    return local_allowed(per_minute, app, owner);
}
