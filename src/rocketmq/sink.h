/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sink.h: the mq sink on the rocketmq driver (sink.h's interface, bit
 * SINK_BIT_BUS, name "bus", as the JetStream one: publish modes, circuits
 * and sinks_done read the same). Each event of hyapp_room_outbox is one
 * message: topic rocketmq.room_outbox.topic, KEYS = event_id, TAGS =
 * event_type, body = the packed roomd.v1.RoomOutboxEvent envelope, on the
 * queue picked by the Java String.hashCode of "<app_code>/<room_id>" (a
 * room's events on one queue, in order), producer group
 * rocketmq.room_outbox.producer_group. Delivered only on the broker's
 * SEND_OK (or a flush/slave timeout: stored on the master).
 */
#ifndef ROOMD_RMQ_SINK_H
#define ROOMD_RMQ_SINK_H

struct sink;
struct rmq_client;
struct conf_rocketmq;

/* Opens the sink over c (borrowed: it must outlive the sink) with the
 * names of cfg (borrowed likewise). Returns 0 and *out. Thread: main. */
int sink_rmq_open(struct sink **out, struct rmq_client *c, const struct conf_rocketmq *cfg);

/* The rocket wake-up sink (bit SINK_BIT_ROCKET, name "rocket"): each
 * RoomRocketIgnited row becomes a RocketLaunchWakeup on
 * rocketmq.rocket_launch.topic (TAGS wakeup, KEYS "rocket-<app>-<room>-
 * <rocket_id>", producer group rocket_launch.producer_group) delivered at
 * launch_at_ms: a timer message (TIMER_DELIVER_MS) on a 5.x broker, else
 * the longest 4.x delay level not later than launch_at_ms (the consumer
 * waits the rest). Same ownership and threads as sink_rmq_open. */
int sink_rmq_rocket_open(struct sink **out, struct rmq_client *c, const struct conf_rocketmq *cfg);

#endif
