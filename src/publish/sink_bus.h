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

#endif
