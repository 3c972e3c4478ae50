/* SPDX-License-Identifier: Apache-2.0 */
/*
 * verdict.h: the consumer kit's verdicts (the rules of consume/group.h),
 * one copy for every broker driver: JetStream's kit (consume/group.c) and
 * RocketMQ's (rocketmq/consumer.c) both call consume_core_process for each
 * delivery and carry out the action it answers in their broker's terms.
 *
 * A struct consume_core is one group's transport-free state: the handler,
 * the options, the inbox (dedupe by key, failures, the room_seq mark), the
 * downstream circuit, and the counters of consume_stats that
 * consume/roles.c exports to /metrics and readiness (the same families and
 * the same roomd_dependency_up{dependency="im"} on both drivers).
 *
 * Actions and what each driver does with them:
 *   CONSUME_ACK     settled (handled, or a duplicate): JetStream AckSync,
 *                   RocketMQ moves the queue past it
 *   CONSUME_LATER   see it again after delay_ms, no failure (held, another
 *                   node's claim, a stale claim, the inbox not answering):
 *                   NakWithDelay / the queue waits (a holding group's long
 *                   hold: send-back at the longest delay level not later)
 *   CONSUME_OUTAGE  the downstream did not answer (ROOMD_EUNAVAIL,
 *                   ROOMD_ETIMEDOUT, ROOMD_ELIMIT) or its circuit is open:
 *                   again after delay_ms (the outage delay), and the
 *                   delivery must NOT count as an attempt: JetStream
 *                   subtracts its outage Naks from NumDelivered; RocketMQ
 *                   suspends the queue and retries locally without a
 *                   send-back, so the reconsume count does not grow
 *   CONSUME_RETRY   a failure of the event (failures counted, in the inbox):
 *                   redelivery after delay_ms (NakWithDelay; send-back to
 *                   %RETRY%<group>)
 *   CONSUME_DEAD    dead letter (reason, why): the driver stores it (DLQ
 *                   stream; send-back to %DLQ%<group>), then calls
 *                   consume_core_dead; when it cannot, it sees the message
 *                   again later (nothing counted)
 */
#ifndef ROOMD_CONSUME_VERDICT_H
#define ROOMD_CONSUME_VERDICT_H

#include "consume/group.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

struct consume_core {
    struct consume_handler h;
    struct consume_opts o;
    struct consume_inbox *inbox;
    pthread_mutex_t mu; /* guards stats and the circuit */
    struct consume_stats stats;
    int circ_fails;
    int64_t circ_probe_at_ms;
};

/* One delivery as the driver got it; borrowed for the call. */
struct consume_delivery {
    const uint8_t *data;
    size_t len;
    const char *subject; /* the topic/subject the event was produced to */
    uint64_t seq;        /* stream sequence / queue offset */
    /* deliveries of this message that were attempts: the broker's count,
     * less the returns of outages (>= 1) */
    uint64_t delivered;
    /* times this node saw it again without a redelivery by the broker (held
     * in place: RocketMQ's suspended queue); JetStream: 0, its holds are
     * redeliveries. Counted against the room_seq gap holds only. */
    uint64_t repeats;
    natsMsg *nmsg; /* JetStream's message (headers for handlers), else NULL */
};

enum consume_action { CONSUME_ACK, CONSUME_LATER, CONSUME_OUTAGE, CONSUME_RETRY, CONSUME_DEAD };

struct consume_verdict {
    enum consume_action action;
    int64_t delay_ms;                /* LATER, OUTAGE, RETRY */
    int failures;                    /* RETRY: failures of the event so far */
    enum consume_dead_reason reason; /* DEAD */
    char key[CONSUME_KEY_MAX];       /* the dedupe key ("" when undecodable) */
    char why[256];                   /* DEAD, RETRY: the handler's error (no secrets) */
};

/* Copies h and o, opens the group's inbox (inbox_config from h and o) and
 * sets up the counters and circuit. Returns 0, or ROOMD_EIO & co. with err
 * (k is then finalized already). Thread: main. Blocks on the database. */
int consume_core_init(struct consume_core *k, const struct consume_handler *h,
                      const struct consume_opts *o, char *err, size_t errlen);
/* Closes the inbox. Thread: main, after the group's thread stopped. */
void consume_core_fini(struct consume_core *k);

/* The verdict for d (consume/group.h's rules): circuit, key, room_seq
 * rule, inbox claim, the handler, then the inbox record; counts what it
 * decided (handled, duplicates, held, busy, retried, outages,
 * circuit_skipped; the histogram). Fills *v. Thread: the group's; blocks
 * on the handler and the database. */
void consume_core_process(struct consume_core *k, const struct consume_delivery *d,
                          struct consume_verdict *v);
/* The driver stored v's dead letter: the inbox row dead, dead and
 * dead_by[reason] counted, logged. Thread: the group's. */
void consume_core_dead(struct consume_core *k, const struct consume_verdict *v, uint64_t seq,
                       uint64_t delivered);
/* The delay of an outage: max(circuit_probe_every, the first retry delay). */
int64_t consume_core_outage_delay_ms(const struct consume_core *k);
/* The half-open probe of an open circuit that no message probed in time
 * (h.probe). Thread: the group's; blocks up to circuit_probe_ms. */
void consume_core_probe(struct consume_core *k);
/* Retention of the inbox (inbox_keep_ms); unsettled keys purged are
 * counted and logged. Thread: the group's; blocks on the database. */
void consume_core_purge(struct consume_core *k);
/* (*field)++ under the lock (field: one of k->stats). Thread: any. */
void consume_core_count(struct consume_core *k, uint64_t *field);
/* A copy of the counters. Thread: any; never blocks on I/O. */
void consume_core_stats(struct consume_core *k, struct consume_stats *out);

#endif
