/* SPDX-License-Identifier: Apache-2.0 */
/*
 * consumer.h: a consumer group on the rocketmq driver, running the kit's
 * handlers (consume/handlers.h) and inbox (consume/inbox.h) with the
 * kit's verdicts (consume/group.h) over RocketMQ clustering consumption:
 *   - subscriptions: the group's topic and %RETRY%<group>, "*"; the group
 *     is in every heartbeat (CLUSTERING, CONSUME_FROM_FIRST_OFFSET);
 *   - rebalance every 2 s: the topic's readable queues, the group's
 *     clientIDs (GET_CONSUMER_LIST_BY_GROUP), AllocateMessageQueueAveragely;
 *     a queue's offset from the broker (QUERY_CONSUMER_OFFSET; none: 0);
 *   - pull (no long polling) per queue, one thread, messages of a queue in
 *     order; the offset committed to the broker (UPDATE_CONSUMER_OFFSET)
 *     after each batch; a message not settled stops its queue until later;
 *   - the verdicts are the kit's (consume/verdict.c, one copy for both
 *     drivers), carried out here:
 *   - a failure of the event: CONSUMER_SEND_MSG_BACK with the smallest
 *     delay level of at least the kit's delay (consumer_retry_delays_ms) ->
 *     %RETRY%<group>; after consumer_max_reconsume_times failures (the
 *     inbox counts them): send-back with delay level -1 -> %DLQ%<group>,
 *     inbox dead;
 *   - an outage of the downstream (unreachable, circuit open, its rate
 *     limit): no send-back; the queue is suspended for the outage delay and
 *     the message retried locally (RocketMQ's ordered-consumption rule):
 *     the reconsume count does not grow, no failure is recorded;
 *   - "see it again later" (a room_seq gap, another node's claim): its
 *     queue waits (pulled again from that message; the group's other
 *     queues go on); a holding group's hold longer than 1.5 s: send-back
 *     with the longest delay level not later.
 * The same inbox dedupe (event_id), room_seq rule, metrics and readiness
 * (consume/roles.c) as on JetStream.
 */
#ifndef ROOMD_RMQ_CONSUMER_H
#define ROOMD_RMQ_CONSUMER_H

#include <stddef.h>

struct rmq_client;
struct consume_handler;
struct consume_opts;
struct consume_stats;
struct rmq_group;

/* Opens the group's inbox and starts its thread on topic (the configured
 * name: room_outbox.topic or rocket_launch.topic). c, h and o are borrowed
 * until rmq_group_stop (o copied). Returns 0 and *out, or ROOMD_EIO with err.
 * Thread: main. */
int rmq_group_start(struct rmq_group **out, struct rmq_client *c, const char *topic,
                    const struct consume_handler *h, const struct consume_opts *o, char *err,
                    size_t errlen);
/* Commits the offsets, stops the thread (after the message in hand), frees
 * g. NULL: no-op. Thread: main. Blocks briefly. */
void rmq_group_stop(struct rmq_group *g);
/* Counters since start. Thread: any. */
void rmq_group_stats(struct rmq_group *g, struct consume_stats *out);

/* Fills d with the rmq_group_* functions over c (consume/roles.h's seam). */
struct consume_driver;
void rmq_consume_driver(struct consume_driver *d, struct rmq_client *c);

#endif
