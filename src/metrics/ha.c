/* SPDX-License-Identifier: Apache-2.0 */
/* ha.c: the HA gauges and counters (see ha.h). */
#include "metrics/ha.h"

#include "metrics/metrics.h"
#include "redis/redis_conn.h"
#include "store/store.h"

#include <stdint.h>
#include <stdio.h>

static void
collect(void *arg, struct metrics_text *t)
{
    struct store *st = arg;
    char addr[300], labels[340];
    uint64_t n = 0;

    if (store_server_info(st, addr, sizeof(addr), &n) == 0) {
        metrics_family(t, "roomd_store_server", "gauge",
                       "1 for the database server this node's store uses now "
                       "(store.mysql.hosts).");
        snprintf(labels, sizeof(labels), "host=\"%s\"", addr);
        metrics_count(t, "roomd_store_server", labels, 1);
    }
    metrics_counter(t, "roomd_store_failovers_total",
                    "Moves of the store's pool to another database server.", n);
    n = 0;
    if (redis_sentinel_master(addr, sizeof(addr), &n) && addr[0] != '\0') {
        metrics_family(t, "roomd_redis_master", "gauge",
                       "1 for the Redis master this node reached last (redis.sentinel).");
        snprintf(labels, sizeof(labels), "addr=\"%s\"", addr);
        metrics_count(t, "roomd_redis_master", labels, 1);
    }
    metrics_counter(t, "roomd_redis_failovers_total",
                    "Redis master changes this node followed through the sentinels.", n);
}

void
metrics_ha_open(struct store *store)
{
    metrics_add_collector(collect, store); /* none when the table is full */
}

void
metrics_ha_close(struct store *store)
{
    metrics_remove_collector(collect, store);
}
