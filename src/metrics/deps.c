/* SPDX-License-Identifier: Apache-2.0 */
/* deps.c: the dependency up gauges (see deps.h). */
#include "metrics/deps.h"

#include "conf/conf.h"
#include "core/xmalloc.h"
#include "metrics/metrics.h"
#include "outbox/outbox.h"
#include "publish/bus.h"
#include "redis/redis_conn.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct metrics_deps {
    const struct conf *conf;
    metrics_store_up_fn store_up;
    void *store_arg;
    struct bus *bus;
    struct outbox *outbox;
    bool redis_on;
    int (*broker_ready)(void *arg, char *why, size_t whylen); /* the rocketmq driver's */
    void *broker_arg;
    int (*consumers_up)(void *arg, const char *downstream); /* NULL: no consumer groups */
    void *consumers;
    struct redis_conn redis; /* collect runs under the registry lock: one caller */
};

static int
redis_up(struct metrics_deps *d)
{
    const char *ping[] = {"PING"};
    redisReply *r = redis_conn_cmd(&d->redis, 1, ping);
    int up = r != NULL && r->type != REDIS_REPLY_ERROR;

    if (r != NULL)
        freeReplyObject(r);
    return up;
}

static void
line(struct metrics_text *t, const char *dep, int up)
{
    char labels[64];

    snprintf(labels, sizeof(labels), "dependency=\"%s\"", dep);
    metrics_count(t, "roomd_dependency_up", labels, up ? 1 : 0);
}

static void
collect(void *arg, struct metrics_text *t)
{
    struct metrics_deps *d = arg;

    metrics_family(t, "roomd_dependency_up", "gauge",
                   "1 when roomd reaches the dependency, 0 when not.");
    line(t, "store", d->store_up(d->store_arg));
    if (d->redis_on)
        line(t, "redis", redis_up(d));
    if (d->bus != NULL)
        line(t, "broker", bus_connected(d->bus));
    else if (d->broker_ready != NULL) {
        char why[256];
        line(t, "broker", d->broker_ready(d->broker_arg, why, sizeof(why)) == 0);
    }
    if (d->bus != NULL) { /* the rocketmq driver's gauge: rocketmq/client.c */
        metrics_family(t, "roomd_broker_up", "gauge",
                       "1 when the broker's last call was answered (label driver).");
        metrics_count(t, "roomd_broker_up", "driver=\"jetstream\"", bus_connected(d->bus));
    }
    if (d->conf->tencent_im.enabled) {
        /* the direct sink's last call and the consumer groups' (bridge, notice) */
        int sink = d->outbox != NULL ? outbox_sink_up(d->outbox, "tim") : -1;
        int groups = d->consumers_up ? d->consumers_up(d->consumers, "im") : -1;
        if (sink >= 0 || groups >= 0)
            line(t, "im", sink != 0 && groups != 0);
    }
    if (d->conf->activity.enabled && d->outbox != NULL)
        line(t, "activity", outbox_sink_up(d->outbox, "activity") != 0);
}

struct metrics_deps *
metrics_deps_open(const struct conf *conf, metrics_store_up_fn store_up, void *store_arg,
                  struct bus *bus, struct outbox *outbox)
{
    struct metrics_deps *d = xcalloc(1, sizeof(*d));
    char err[256];

    d->conf = conf;
    d->store_up = store_up;
    d->store_arg = store_arg;
    d->bus = bus;
    d->outbox = outbox;
    d->redis_on =
        conf->redis.enabled && redis_conn_init(&d->redis, &conf->redis, err, sizeof(err)) == 0;
    metrics_add_collector(collect, d); /* none when the table is full: then no deps metrics */
    return d;
}

void
metrics_deps_set_broker(struct metrics_deps *d, int (*ready)(void *, char *, size_t), void *arg)
{
    d->broker_arg = arg;
    d->broker_ready = ready;
}

void
metrics_deps_set_consumers(struct metrics_deps *d, int (*up)(void *arg, const char *downstream),
                           void *arg)
{
    d->consumers = arg;
    d->consumers_up = up;
}

void
metrics_deps_close(struct metrics_deps *d)
{
    if (d == NULL)
        return;
    metrics_remove_collector(collect, d); /* a no-op when it was never added */
    if (d->redis_on)
        redis_conn_close(&d->redis);
    free(d);
}
