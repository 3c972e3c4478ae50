/* SPDX-License-Identifier: Apache-2.0 */
/*
 * deps.h: roomd_dependency_up{dependency}, one gauge per outside part roomd
 * uses, computed when /metrics is scraped:
 *   store     the store answered the readiness check's outbox counts query
 *             and that answer is not stale (read from the cache the
 *             readiness ticker fills: a scrape never queries the store)
 *   redis     a PING on a connection of its own answered (redis.enabled)
 *   broker    the NATS connection is up (rocketmq.enabled), or on the rocketmq
 *             driver the broker's last call was answered (metrics_deps_set_broker)
 *   im        the Tencent IM sink's last call was answered, and so were those
 *             of the consumer groups calling IM (bridge, notice), their
 *             circuits closed (tencent_im.enabled)
 *   activity  the activity sink's last call was answered (activity.enabled)
 * A dependency not configured has no line.
 */
#ifndef ROOMD_METRICS_DEPS_H
#define ROOMD_METRICS_DEPS_H

#include <stddef.h>

#include <stdbool.h>

struct conf;
struct bus;
struct outbox;
struct metrics_deps;

/* The store's state from a cache: true when up. Thread: the scrape's; must
 * not block on the store. */
typedef bool (*metrics_store_up_fn)(void *arg);

/* Registers the collector over the borrowed store_up(store_arg), bus and
 * outbox (bus and outbox may be NULL), which must outlive
 * metrics_deps_close. Returns the handle. Thread: main. */
struct metrics_deps *metrics_deps_open(const struct conf *conf, metrics_store_up_fn store_up,
                                       void *store_arg, struct bus *bus, struct outbox *outbox);
/* The broker line from ready(arg) (0 = up) when there is no bus: the
 * rocketmq driver's rmq_ready. Call before the first scrape. Thread: main. */
void metrics_deps_set_broker(struct metrics_deps *d, int (*ready)(void *, char *, size_t),
                             void *arg);
/* The consumer groups' view of a downstream for the im line: up(arg, "im")
 * returns 1 up, 0 down, -1 no group calls it (consume_roles_downstream_up).
 * Call before the first scrape. Thread: main. */
void metrics_deps_set_consumers(struct metrics_deps *d,
                                int (*up)(void *arg, const char *downstream), void *arg);
/* Removes the collector and frees. NULL is a no-op. Thread: main. */
void metrics_deps_close(struct metrics_deps *d);

#endif
