/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sink_activity.h: the direct activity-service sink (SINK_BIT_ACTIVITY): a
 * gRPC unary call /activity.v1.RoomEventService/Consume with the packed
 * roomd.v1.RoomOutboxEvent, over gRPC core. Read sink_activity.c.
 */
#ifndef ROOMD_SINK_ACTIVITY_H
#define ROOMD_SINK_ACTIVITY_H

#include <stddef.h>

struct sink;
struct conf_activity;

/* Opens the sink: one insecure channel to cfg->target (connecting lazily and
 * reconnecting as gRPC does) and a thread that keeps its I/O moving. Returns
 * 0 and *out (the outbox worker owns it), or ROOMD_EINVAL with err.
 * Thread: main; call before fork()ing nothing (gRPC forbids fork after init). */
int sink_activity_open(struct sink **out, const struct conf_activity *cfg, char *err,
                       size_t errlen);

#endif
