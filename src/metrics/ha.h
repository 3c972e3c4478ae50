/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ha.h: which servers this node uses (docs/ha.md), computed when /metrics is scraped:
 *   roomd_store_server{host}     1 for the database server the store uses now (MySQL)
 *   roomd_store_failovers_total  moves of the store's pool to another server (0: SQLite)
 *   roomd_redis_master{addr}     1 for the Redis master reached last (redis.sentinel)
 *   roomd_redis_failovers_total  master changes followed through the sentinels (0: none)
 * Neither blocks on a server: the store and the Redis module keep these under a mutex.
 */
#ifndef ROOMD_METRICS_HA_H
#define ROOMD_METRICS_HA_H

struct store;

/* Registers the collector over the borrowed store (which must outlive
 * metrics_ha_close). Thread: main. */
void metrics_ha_open(struct store *store);
/* Removes it. Thread: main. */
void metrics_ha_close(struct store *store);

#endif
