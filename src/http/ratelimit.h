/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ratelimit.h: where the CreateRoom rate limit (router.h,
 * http_create_allowed) counts. With redis.enabled, in Redis, so that
 * room.max_creates_per_minute holds across every node sharing it; without,
 * or while Redis does not answer, in this process
 * (roomd_create_limit_fallback_total counts those checks).
 */
#ifndef ROOMD_HTTP_RATELIMIT_H
#define ROOMD_HTTP_RATELIMIT_H

#include <stddef.h>

struct conf;

/* Reads conf's redis section: with redis.enabled, later checks count in
 * Redis (connecting lazily). Returns 0, or ROOMD_EINVAL with err naming the
 * key (a bad redis.addr). Thread: main, before the listeners start; never
 * blocks. */
int http_create_limit_open(const struct conf *conf, char *err, size_t errlen);

/* Drops the Redis connection. Thread: main, after the listeners stopped. */
void http_create_limit_close(void);

#endif
