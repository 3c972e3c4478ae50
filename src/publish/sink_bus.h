/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sink_bus.h: the JetStream sinks of the mq/dual modes (sink_bus.c) and of
 * the rocket launch wake-ups (sink_rocket.c). Both publish through a shared
 * struct bus (publish/bus.h) and follow the struct sink contract (sink.h).
 */
#ifndef ROOMD_SINK_BUS_H
#define ROOMD_SINK_BUS_H

#include "publish/sink.h"

struct bus;

/* The outbox sink (bit SINK_BIT_BUS, every event). Takes its own reference
 * on bus, dropped by close. Returns 0 and *out. Thread: main. */
int sink_bus_open(struct sink **out, struct bus *bus);

/* The rocket wake-up sink (bit SINK_BIT_ROCKET): accepts RoomRocketIgnited
 * only and publishes a roomd.v1.RocketLaunchWakeup to the rocket stream
 * with header Launch-At (unix ms) and Msg-Id
 * "rocket-<app_code>-<room_id>-<rocket_id>". Takes its own reference on bus.
 * Returns 0 and *out. Thread: main. */
int sink_rocket_open(struct sink **out, struct bus *bus);

/* The part both share: a sink (no_json) that holds its own reference on bus,
 * dropped by its close, with the given name, bit, accepts (NULL = every
 * event) and publish; the batch members are NULL. Returns the sink (the
 * caller owns it; the outbox worker closes it). Thread: main. Never blocks. */
struct sink *sink_bus_new(struct bus *bus, const char *name, uint32_t bit,
                          bool (*accepts)(struct sink *, const struct outbox_event *),
                          int (*publish)(struct sink *, const struct outbox_event *, int64_t,
                                         char *, size_t));
/* The bus a sink_bus_new sink publishes through (borrowed: the sink's
 * reference). Thread: any. */
struct bus *sink_bus_of(struct sink *s);

/* The wake-up of one RoomRocketIgnited row (either driver's rocket sink):
 * the packed roomd.v1.RocketLaunchWakeup, its launch_at_ms and level, and
 * the dedupe key "rocket-<app>-<room>-<rocket_id>". Owned by the caller:
 * rocket_wakeup_free. */
struct rocket_wakeup {
    uint8_t *buf;
    size_t len;
    int64_t launch_at_ms;
    int level;
    char *msg_id;
    char *rocket_id;
};
/* Returns 0 and *out, or ROOMD_EPERM (the payload does not decode) with
 * err. Thread: any. Never blocks. */
int rocket_wakeup_build(const struct outbox_row *row, struct rocket_wakeup *out, char *err,
                        size_t errlen);
void rocket_wakeup_free(struct rocket_wakeup *w);

#endif
