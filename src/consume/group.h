/* SPDX-License-Identifier: Apache-2.0 */
/*
 * group.h: the consumer kit. One consumer group = one durable JetStream
 * pull consumer (durable name = group name) worked by one thread that
 * Fetches small batches, calls the group's handler per message, and
 * acknowledges by the handler's verdict. Each group has an inbox
 * (store/inbox.h: dedupe by event_id, the handler's own tables) so that a
 * group's effects and its dedupe record can commit in one transaction:
 * per node a SQLite file "<rocketmq.consumer_store_dir>/<group>.db", or,
 * when the store is MySQL (rocketmq.consumer_inbox auto|mysql), the shared
 * table consumer_inbox, so that a group running on several nodes does each
 * effect once whichever node a message is (re)delivered to.
 *
 * Outbox events carry a gap-free room_seq per room. With o.room_order (the
 * outbox delivers each room in order), before the claim, against the room's
 * mark (inbox.h: inbox_mark, the highest room_seq the group did; in the
 * shared inbox one mark for every node): room_seq > mark + 1 (an earlier
 * event of the room not done yet, e.g. redelivered out of order, or in hand
 * on another node): held (NakWithDelay 250 ms, not a failure) for up to
 * CONSUME_GAP_HOLDS deliveries, then handled anyway (the earlier one may be
 * a dead letter of the outbox, which is never sent). room_seq <= mark goes
 * on to the claim: the event_id inbox tells a duplicate (settled) from an
 * event its room went on without (held too long, or being retried), which
 * is still done: at least once before in order. The inbox rows outlive any
 * redelivery (inbox_keep_ms). The mark is raised in the transaction that
 * marks the inbox row done.
 *
 * The rules below are one function for every broker driver
 * (consume/verdict.h: consume_core_process; JetStream here, RocketMQ in
 * rocketmq/consumer.c); the Nak/Term/Ack wording is JetStream's.
 *
 * Per message: the kit claims its key in the inbox.
 *   settled (done|dead)        -> Ack (a redelivery; no second effect)
 *   claimed by another node    -> NakWithDelay until that claim expires
 *                                 (not a failure)
 * Else the handler runs, and
 *   0               -> inbox done (in the handler's transaction when it used
 *                      consume_tx_*; else right after), then AckSync; when
 *                      "done" cannot be written: no Ack, NakWithDelay (the
 *                      effect is repeated, so it must be idempotent)
 *   0 + hold_ms > 0 -> claim given back, NakWithDelay(hold_ms): not a
 *                      failure (rocket holds)
 *   ROOMD_ESTALE    -> (consume_tx_begin) the claim expired and was taken
 *                      over: NakWithDelay(AckWait), not a failure
 *   ROOMD_EUNAVAIL, ROOMD_ETIMEDOUT, ROOMD_ELIMIT
 *                   -> a transport failure (the downstream did not answer,
 *                      or answered with its rate limit): an outage, not the
 *                      event's fault. Claim given back, NakWithDelay(the
 *                      outage delay: max(circuit_probe, delays[0])), no
 *                      failure counted, whatever its length. Like the
 *                      outbox sinks (outbox/circuit.c): circuit_failures of
 *                      them in a row open the group's circuit; while open
 *                      the handler is not called (every message is Nak'ed
 *                      with the outage delay at once) but one message, or
 *                      the handler's probe() when none comes, goes through
 *                      every circuit_probe (half-open); any answer closes it
 *   retryable rc    -> failures+1 (kept in the inbox: shared by the nodes);
 *                      NakWithDelay(delays[failures-1]), the last delay
 *                      repeating; when failures exceed max_reconsume: dead
 *                      letter
 *   other rc        -> dead letter at once (permanent)
 * A claim expires after max(AckWait, the handler's max_handle_ms) + 1 s: a
 * node killed in the handler leaves its message to another node at most
 * that late (the takeover counts as a failure). An
 * effect in the inbox's database (consume_tx_*) is exactly once; a remote
 * effect (IM) is at least once and made idempotent by the remote side
 * (Random / MsgRandom derived from the event_id).
 * Dead letter: publish the message to "<ns>hyapp_dlq.<group>" (headers
 * Roomd-Group, Roomd-Subject, Roomd-Stream-Seq, Roomd-Deliveries,
 * Roomd-Error; Msg-Id "dlq-<group>-<stream seq>"), wait for its PubAck, then
 * Term; inbox dead. A failing DLQ publish leaves the message to come back.
 *
 * Groups never touch room_outbox and never share a thread, a connection
 * or a database handle with another group or the command path.
 * Handlers: activity.c, notice.c, im_glue.c, rocket_open.c; roles.c
 * starts the configured ones.
 */
#ifndef ROOMD_CONSUME_GROUP_H
#define ROOMD_CONSUME_GROUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "publish/bus.h"
#include "store/inbox.h"

struct conf_rocketmq;
struct conf_store;
struct consume_group;

#define CONSUME_KEY_MAX 200

/* One delivery as a handler sees it. Borrowed for the handle() call. */
struct consume_msg {
    const char *group;
    const char *subject;
    const uint8_t *data; /* message body */
    size_t len;
    const char *key; /* dedupe key (the event_id for outbox groups) */
    uint64_t stream_seq;
    uint64_t num_delivered;      /* JetStream's count, holds included */
    int failures;                /* failed attempts recorded before this one */
    natsMsg *nmsg;               /* headers: natsMsgHeader_Get(m->nmsg, ...) */
    struct consume_inbox *inbox; /* the group's; use consume_exec / consume_tx_* */
    /* Out. */
    int64_t hold_ms; /* > 0 with return 0: see it again after this */
    char err[256];   /* reason of a failure (no secrets) */
    /* Kit-private. */
    bool done;
    /* outbox events with o.room_order: the envelope's room and room_seq
     * (seq 0: none), the mark the kit raises with the inbox row */
    struct inbox_mark mark;
};

/* What makes a group. Borrowed by consume_group_start until stop. */
struct consume_handler {
    const char *group;      /* durable name and DLQ subject token */
    enum bus_stream stream; /* BUS_STREAM_OUTBOX or BUS_STREAM_ROCKET */
    /* Holding groups (rocket) see one message many times on purpose:
     * MaxDeliver is unlimited and failures are counted in the inbox only. */
    bool holds;
    /* Fills key from the body; NULL = the RoomOutboxEvent's event_id.
     * Returns 0 or ROOMD_EINVAL (undecodable: dead letter). */
    int (*key)(void *arg, const uint8_t *data, size_t len, char *key, size_t keylen);
    /* The handler's tables (CREATE TABLE IF NOT EXISTS in both dialects),
     * NULL-terminated; NULL: none. */
    const struct consume_sql *const *schema;
    /* The longest one handle() may take (its own timeouts); 0: AckWait.
     * An inbox claim lasts this (or AckWait, the longer) + 1 s. */
    int64_t max_handle_ms;
    /* Does the group's work for m (see the verdicts above). Runs on the
     * group's thread; may block (bounded by its own timeouts). */
    int (*handle)(void *arg, struct consume_msg *m);
    void *arg;
    /* The remote service handle() calls ("im"), NULL: none (the effect is
     * in the inbox's database). Names the group's circuit in the readiness
     * checks and roomd_dependency_up (consume/roles.h). */
    const char *downstream;
    /* Optional: one cheap call the downstream must answer (an account
     * check), made by the group's thread while the circuit is open and no
     * message probed it, so that the circuit closes without traffic.
     * Returns 0 when it answered (whatever it said), ROOMD_EUNAVAIL when
     * not. Blocks at most until deadline_mono_ms. */
    int (*probe)(void *arg, int64_t deadline_mono_ms, char *err, size_t errlen);
};

/* Tunables, from the rocketmq section by consume_opts_from_conf. */
struct consume_opts {
    const char *store_dir;          /* SQLite inbox databases live here */
    enum inbox_driver inbox;        /* rocketmq.consumer_inbox */
    const struct conf_store *store; /* the MySQL inbox's server; NULL: SQLite only */
    const char *owner;              /* this process in inbox claims (app.node_id) */
    int64_t ack_wait_ms;
    int max_reconsume;     /* consumer_max_reconsume_times */
    int64_t delays_ms[16]; /* reconsume schedule */
    int ndelays;
    int64_t max_ack_pending;  /* 0 = server default (1000) */
    int fetch_batch;          /* <= 64 (nats.c 3.4.1 pitfall 2) */
    int64_t fetch_timeout_ms; /* also bounds how long stop waits */
    int64_t inbox_keep_ms;    /* inbox rows (settled or not) are purged after this */
    /* The room_seq rule (above): the producers deliver in room order
     * (outbox_worker.ordering per_room). Off: event_id dedupe only, since
     * an earlier event may then come long after a later one. */
    bool room_order;
    /* The transport-failure circuit (verdicts above): failures in a row
     * that open it (rocketmq.consumer_circuit_failures) and how often an
     * open one lets a call through (rocketmq.consumer_circuit_probe_every). */
    int circuit_failures;
    int64_t circuit_probe_ms;
};

/* Fills o from c for a group allowed max_reconsume reconsumes. Defaults:
 * store "./var/consumers", AckWait 30 s, RocketMQ's schedule 10s 30s 1m 2m
 * 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h, batch 16, fetch 1 s. */
void consume_opts_from_conf(struct consume_opts *o, const struct conf_rocketmq *c,
                            int max_reconsume);

/* Delay before redelivery after the failures-th failure (failures >= 1). */
int64_t consume_retry_delay_ms(const struct consume_opts *o, int failures);

/*
 * Opens the group's inbox (creating dir and tables), then starts its
 * thread, which creates/updates the durable consumer and binds a pull
 * subscription as soon as the broker is reachable (the broker may be down
 * now). Takes a reference on bus. Returns 0 and *out, or ROOMD_EIO with err
 * (database). Thread: main.
 */
int consume_group_start(struct consume_group **out, struct bus *bus,
                        const struct consume_handler *h, const struct consume_opts *o, char *err,
                        size_t errlen);

/* Stops the thread after the message in hand (waits at most about one
 * fetch timeout), closes the database and frees g. NULL is a no-op.
 * Unacknowledged messages come back after AckWait. Thread: main. */
void consume_group_stop(struct consume_group *g);

/* Why a message was dead-lettered (roomd_consumer_dead_letters_total{reason}). */
enum consume_dead_reason {
    CONSUME_DEAD_PERMANENT = 0, /* the handler's permanent failure */
    CONSUME_DEAD_MAX_RECONSUME, /* failed more than max_reconsume times */
    CONSUME_DEAD_UNDECODABLE,   /* no key could be read */
    CONSUME_DEAD_NO_VERDICT,    /* delivery limit reached without a verdict (crashes) */
    CONSUME_DEAD_REASONS_
};
/* Static names of the reasons ("permanent", "max_reconsume", ...). */
extern const char *const consume_dead_reason_names[CONSUME_DEAD_REASONS_];

/* Upper bounds (µs) of roomd_consumer_processing_seconds. */
#define CONSUME_PROC_BUCKETS 12
extern const int64_t consume_proc_le_us[CONSUME_PROC_BUCKETS];

/* Counters since start, and the group's position at the broker. Thread: any. */
struct consume_stats {
    uint64_t handled;    /* handler returned 0 (done) */
    uint64_t duplicates; /* acked from the inbox without the handler */
    uint64_t held;
    uint64_t busy;    /* another node's claim: seen again after its expiry */
    uint64_t retried; /* failures of the event, and inbox failures (below) */
    uint64_t dead;
    uint64_t fetch_errors;
    uint64_t purged_unsettled; /* inbox keys deleted by retention never done or dead */
    bool bound;                /* the pull subscription is up */
    uint64_t retried_inbox;    /* of retried: the inbox could not be read or written */
    uint64_t outages;          /* transport failures: Nak'ed, no failure counted */
    uint64_t circuit_skipped;  /* Nak'ed by the open circuit without calling the handler */
    uint64_t dead_by[CONSUME_DEAD_REASONS_];
    uint64_t redeliveries; /* deliveries with JetStream's count > 1 */
    /* the handler's run time: cumulative per consume_proc_le_us bucket */
    uint64_t proc_cum[CONSUME_PROC_BUCKETS];
    uint64_t proc_count;
    int64_t proc_sum_us;
    /* the downstream (h.downstream): circuit, and whether its last call answered */
    bool circuit_open;
    uint64_t circuit_opened;
    bool downstream_up;
    char downstream_err[160]; /* the last transport failure (no secrets) */
    /* from the broker, refreshed by the group's thread (pos_ok: the last
     * refresh worked): lag = the stream's last sequence - the ack floor */
    bool pos_ok;
    uint64_t lag;
    uint64_t ack_pending;
    uint64_t redelivered_pending;
    int64_t oldest_unacked_ms; /* wall ms; 0: nothing unacknowledged */
    /* the dead-letter stream (same refresh): this group's dead letters, all
     * of them, and when the oldest one was stored (wall ms; 0: none) */
    bool dlq_ok;
    uint64_t dlq_group_msgs;
    uint64_t dlq_msgs;
    int64_t dlq_oldest_ms;
};
void consume_group_stats(struct consume_group *g, struct consume_stats *out);

/*
 * Transactions for handlers whose effect lives in the inbox's database:
 * consume_tx_begin (re-checks the claim: ROOMD_ESTALE when another node
 * took it over; return that), writes with consume_exec, then
 * consume_tx_commit_done(), which records the inbox row as done in the
 * same transaction. A handler returning with a transaction open has it
 * rolled back. Return 0 or a ROOMD_E* code (err in m->err). Thread: the
 * group's (in handle()); block on the database.
 */
int consume_tx_begin(struct consume_msg *m);
int consume_tx_commit_done(struct consume_msg *m);
void consume_tx_rollback(struct consume_msg *m);

/* Runs q (in the transaction when one is open) with parameters given by
 * types: 's' const char * (NULL = SQL NULL), 'i' int64_t, at most 9, as
 * ?1 .. ?9. With out: the first column of the first row ("" when none).
 * Returns 0 or ROOMD_EIO / ROOMD_EUNAVAIL / ROOMD_ERETRY (err in m->err).
 * Thread: the group's; blocks on the database. */
int consume_exec(struct consume_msg *m, const struct consume_sql *q, char *out, size_t outlen,
                 const char *types, ...);

/* Decodes the RoomOutboxEvent key (event_id): the default key function. */
int consume_envelope_key(void *arg, const uint8_t *data, size_t len, char *key, size_t keylen);

#endif
