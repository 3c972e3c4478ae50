/* SPDX-License-Identifier: Apache-2.0 */
/*
 * deps.h: roomd_dependency_up{dependency}, one gauge per outside part roomd
 * uses, computed when /metrics is scraped:
 *   store     the store answered the readiness check's outbox counts query
 *             and that answer is not stale (read from the cache the
 *             readiness ticker fills: a scrape never queries the store)
 *   redis     a PING on a connection of its own answered (redis.enabled)
 *   broker    the NATS connection is up (rocketmq.enabled)
 *   im        the Tencent IM sink's last call was answered (tencent_im.enabled)
 *   activity  the activity sink's last call was answered (activity.enabled)
 * A dependency not configured has no line.
 */
#ifndef ROOMD_METRICS_DEPS_H
#define ROOMD_METRICS_DEPS_H

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
/* Removes the collector and frees. NULL is a no-op. Thread: main. */
void metrics_deps_close(struct metrics_deps *d);

#endif
