/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sink.c: the mq sink on the rocketmq driver (sink.h). One synchronous
 * SEND_MESSAGE_V2 per event from the calling worker thread; the outbox's
 * workers give the concurrency. A broker that does not answer is an outage
 * (ROOMD_EUNAVAIL: no attempt burnt, the circuit counts it), an error
 * answer an attempt (ROOMD_ERETRY), MESSAGE_ILLEGAL permanent.
 */
#include "rocketmq/sink.h"

#include "conf/conf.h"
#include "core/err.h"
#include "core/log.h"
#include "core/xmalloc.h"
#include "publish/sink.h"
#include "publish/sink_bus.h"
#include "rocketmq/client.h"
#include "store/store.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

struct sink_rmq {
    struct sink base; /* first member */
    struct rmq_client *c;
    const char *topic;
    const char *group;
};

static int
rmq_sink_publish(struct sink *s, const struct outbox_event *ev, int64_t deadline_mono_ms, char *err,
                 size_t errlen)
{
    struct sink_rmq *sr = (struct sink_rmq *)s;
    const struct outbox_row *row = ev->row;
    char *shard = xasprintf("%s/%s", row->app_code, row->room_id);
    struct rmq_msg m = {.topic = sr->topic,
                        .tags = row->event_type,
                        .keys = row->event_id,
                        .body = ev->envelope,
                        .len = ev->envelope_len,
                        .shard_key = shard};
    struct rmq_send_result res;
    int rc = rmq_send(sr->c, sr->group, &m, deadline_mono_ms, &res, err, errlen);

    if (rc == 0)
        log_debug("rocketmq", "event sent",
                  "event_id=%s event_type=%s queue=%d offset=%lld msg_id=%s code=%d", row->event_id,
                  row->event_type, res.queue_id, (long long)res.queue_offset, res.msg_id, res.code);
    free(shard);
    return rc;
}

static int
rmq_sink_probe(struct sink *s, int64_t deadline_mono_ms, char *err, size_t errlen)
{
    struct sink_rmq *sr = (struct sink_rmq *)s;

    return rmq_probe(sr->c, sr->topic, deadline_mono_ms, err, errlen);
}

int
sink_rmq_open(struct sink **out, struct rmq_client *c, const struct conf_rocketmq *cfg)
{
    struct sink_rmq *sr = xcalloc(1, sizeof(*sr));

    /* no_json: the packed envelope and the row only */
    sink_init(&sr->base, "bus", SINK_BIT_BUS, NULL, rmq_sink_publish, sink_free, true);
    sr->base.probe = rmq_sink_probe;
    sr->base.peer = c;
    sr->c = c;
    sr->topic = cfg->room_outbox.topic && *cfg->room_outbox.topic ? cfg->room_outbox.topic
                                                                  : "hyapp_room_outbox";
    sr->group = cfg->room_outbox.producer_group && *cfg->room_outbox.producer_group
                    ? cfg->room_outbox.producer_group
                    : "hyapp-room-outbox-producer";
    rmq_add_producer(c, sr->group);
    *out = &sr->base;
    return 0;
}

/* ==== rocket wake-ups ==== */

static int
rmq_rocket_publish(struct sink *s, const struct outbox_event *ev, int64_t deadline_mono_ms,
                   char *err, size_t errlen)
{
    struct sink_rmq *sr = (struct sink_rmq *)s;
    const struct outbox_row *row = ev->row;
    struct rocket_wakeup w;
    struct rmq_send_result res;
    int rc = rocket_wakeup_build(row, &w, err, errlen);

    if (rc != 0)
        return rc;
    char *shard = xasprintf("%s/%s", row->app_code, row->room_id);
    struct rmq_msg m = {.topic = sr->topic,
                        .tags = "wakeup",
                        .keys = w.msg_id,
                        .body = w.buf,
                        .len = w.len,
                        .shard_key = shard,
                        .deliver_at_ms = w.launch_at_ms};
    rc = rmq_send(sr->c, sr->group, &m, deadline_mono_ms, &res, err, errlen);
    if (rc == 0)
        log_info("rocketmq", "rocket wake-up scheduled",
                 "app=%s room=%s rocket_id=%s level=%d launch_at_ms=%" PRId64
                 " delay_level=%d queue=%d",
                 row->app_code, row->room_id, w.rocket_id, w.level, w.launch_at_ms, res.delay_level,
                 res.queue_id);
    free(shard);
    rocket_wakeup_free(&w);
    return rc;
}

int
sink_rmq_rocket_open(struct sink **out, struct rmq_client *c, const struct conf_rocketmq *cfg)
{
    struct sink_rmq *sr = xcalloc(1, sizeof(*sr));

    sink_init(&sr->base, "rocket", SINK_BIT_ROCKET, sink_accepts_carried, rmq_rocket_publish,
              sink_free, true);
    sr->base.probe = rmq_sink_probe;
    sr->base.peer = c;
    sr->c = c;
    sr->topic = cfg->rocket_launch.topic && *cfg->rocket_launch.topic ? cfg->rocket_launch.topic
                                                                      : "hyapp_room_rocket_launch";
    sr->group = cfg->rocket_launch.producer_group && *cfg->rocket_launch.producer_group
                    ? cfg->rocket_launch.producer_group
                    : "hyapp-room-rocket-open-producer";
    rmq_add_producer(c, sr->group);
    *out = &sr->base;
    return 0;
}
