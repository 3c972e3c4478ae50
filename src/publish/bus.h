/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bus.h: roomd's connection to the broker, NATS JetStream (ARCHITECTURE §7,
 * design/jetstream.md). One struct bus per process is shared, by reference
 * count, by the mq sink (sink_bus.c), the rocket wake-up sink
 * (sink_rocket.c) and the consumer groups (consume/group.c).
 *
 * Names, from the seed's rocketmq section (ns = rocketmq.namespace, a
 * literal subject prefix such as "prod." or "t42_"):
 *   outbox stream   <ns><room_outbox.topic>, subjects "<ns><topic>.*";
 *                   one message per event on "<ns><topic>.<event_type>"
 *   rocket stream   <ns><rocket_launch.topic>, subjects "<ns><topic>.*";
 *                   wake-ups on "<ns><topic>.wakeup"
 *   dead letters    <ns>hyapp_dlq, subjects "<ns>hyapp_dlq.*"; one subject
 *                   per consumer group "<ns>hyapp_dlq.<group>"
 * A stream name is its subject prefix with every character outside
 * [A-Za-z0-9_-] replaced by '_'. All streams: file storage, Limits
 * retention, rocketmq.stream_replicas, stream_max_age (the dead letters:
 * rocketmq.dlq_max_age, default 14 days), duplicate_window.
 *
 * Read bus.c top-down; then sink_bus.c, sink_rocket.c, consume/group.c.
 */
#ifndef ROOMD_BUS_H
#define ROOMD_BUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <nats/nats.h>

struct conf_rocketmq;
struct bus;

enum bus_stream { BUS_STREAM_OUTBOX = 0, BUS_STREAM_ROCKET, BUS_STREAM_DLQ, BUS_STREAM_COUNT_ };

/*
 * Connects to rocketmq.name_servers (user/password from access_key /
 * secret_key), reconnecting forever with jitter. The broker may be down:
 * the connection is then retried in the background (RetryOnFailedConnect)
 * and bus_open still succeeds. Streams are created or updated once
 * connected (bus_ensure). cfg is copied where needed and may be freed after
 * the bus. client_name names the connection on the server ("roomd/node-1").
 * Returns 0 and *out (one reference, drop with bus_unref), or ROOMD_EINVAL
 * (bad URL) with err. Thread: main. Blocks at most a connect timeout.
 */
int bus_open(struct bus **out, const struct conf_rocketmq *cfg, const char *client_name, char *err,
             size_t errlen);

/* Takes one more reference. Thread: any. */
void bus_ref(struct bus *b);
/* Drops one reference; the last one closes the connection and frees b.
 * bus_unref(NULL) is a no-op. Thread: any that holds a reference. */
void bus_unref(struct bus *b);

/*
 * Makes sure the streams exist with the configured settings (AddStream, or
 * UpdateStream when the config changed). Done once, then again after each
 * reconnect and after bus_invalidate. Returns 0, or ROOMD_ERETRY with err
 * when the broker is not connected or refused (nothing is waited for when
 * disconnected). Thread: any; concurrent callers wait for one setup.
 */
int bus_ensure(struct bus *b, char *err, size_t errlen);

/* Forgets that the streams were set up (a publish saw "no responders"). */
void bus_invalidate(struct bus *b);

/* True while the connection is up. Thread: any; never blocks. */
bool bus_connected(struct bus *b);

/*
 * Creates or updates the durable pull consumer `durable` on stream which:
 * AckExplicit, ack_wait_ms, max_deliver (-1 = unlimited), max_ack_pending
 * (0 = server default), no BackOff (jetstream.md pitfall 1-2), deliver all.
 * Returns 0, or ROOMD_ERETRY with err. Thread: any. Blocks up to send_timeout.
 */
int bus_ensure_consumer(struct bus *b, enum bus_stream which, const char *durable,
                        int64_t ack_wait_ms, int64_t max_deliver, int64_t max_ack_pending,
                        char *err, size_t errlen);

/* Where a durable consumer stands (bus_consumer_pos). */
struct bus_consumer_pos {
    uint64_t last_seq;         /* the stream's last sequence */
    uint64_t ack_floor;        /* the consumer's ack floor (a stream sequence) */
    uint64_t ack_pending;      /* delivered, not acknowledged yet */
    uint64_t redelivered;      /* of those, delivered more than once */
    uint64_t num_pending;      /* not delivered yet */
    int64_t oldest_unacked_ms; /* wall ms the message after the ack floor was stored; 0: none */
};

/* Fills *out for the durable consumer `durable` on stream which: consumer
 * and stream info, and the message after the ack floor (its time). Returns
 * 0, or ROOMD_EUNAVAIL / a bus_status_rc code with err. Thread: any. Blocks
 * up to three JetStream API waits. */
int bus_consumer_pos(struct bus *b, enum bus_stream which, const char *durable,
                     struct bus_consumer_pos *out, char *err, size_t errlen);

/* The messages stream which holds, when its first one was stored (wall
 * ms; 0 when empty) and, with token, how many are on "<prefix>.<token>"
 * (else 0). Returns 0 or an error with err. Thread: any. Blocks up to one
 * JetStream API wait. */
int bus_stream_oldest(struct bus *b, enum bus_stream which, const char *token, uint64_t *msgs,
                      uint64_t *token_msgs, int64_t *first_ms, char *err, size_t errlen);

/* The JetStream context and connection (owned by b; valid while a
 * reference is held). Thread-safe nats.c objects. */
jsCtx *bus_js(struct bus *b);
natsConnection *bus_nc(struct bus *b);

/* The stream name ("hyapp_room_outbox") and its subject prefix
 * ("<ns>hyapp_room_outbox", without the final ".token"). Static per bus. */
const char *bus_stream_name(struct bus *b, enum bus_stream which);
const char *bus_subject_prefix(struct bus *b, enum bus_stream which);

/* Writes "<prefix of which>.<token>" into buf. Returns 0, or ROOMD_EINVAL
 * when it does not fit or token is empty or holds '.', '*', '>' or space. */
int bus_subject(struct bus *b, enum bus_stream which, const char *token, char *buf, size_t len);

/* Maps a nats.c status (and JetStream error code) to ROOMD_E*: 0 for OK,
 * ROOMD_EPERM for a message the stream can never accept (too large),
 * ROOMD_ERETRY for another JetStream answer, ROOMD_EUNAVAIL when the broker
 * or JetStream did not answer (timeout, no connection, "No Responders" /
 * JSNotEnabledErr 10076 during a JetStream restart, JSClusterNotAvailErr
 * 10008 during a leader election): an outage, which costs the event no
 * attempt (docs/outbox.md). */
int bus_status_rc(natsStatus s, jsErrCode jerr);

/* Records the outcome of one publish (s, jerr) for the stall detection:
 * NATS_TIMEOUT without a JetStream answer marks the connection stalled, so
 * the next publishes fail at once (ROOMD_EUNAVAIL) but for one probe every
 * 500 ms; any answer clears it. Thread: any. */
void bus_note_publish(struct bus *b, natsStatus s, jsErrCode jerr);
/* True (with err) when the connection is stalled and this call is not the
 * probe (the first call once 500 ms passed): the caller fails at once with
 * ROOMD_EUNAVAIL. Thread: any. */
bool bus_stalled(struct bus *b, char *err, size_t errlen);
/* Readiness (cluster/health.h): 0 when connected and not stalled, else
 * ROOMD_EUNAVAIL with why. Takes no probe. Thread: any, does not block. */
int bus_ready(void *b, char *why, size_t whylen);

/*
 * Publishes msg (subject and headers already set; borrowed) to stream w
 * with Nats-Msg-Id msg_id and waits for the stream's PubAck, at most
 * min(send_timeout, deadline) per attempt, retrying up to rocketmq.retry
 * times while time is left. A Duplicate ack (the stream already had
 * msg_id) is success; *dup (may be NULL) tells which. Returns 0, ROOMD_ERETRY
 * (broker down, timeout: err says why) or ROOMD_EPERM (too large).
 * Thread: any. Blocks until the ack or deadline_mono_ms.
 */
int bus_publish_msg(struct bus *b, enum bus_stream w, natsMsg *msg, const char *msg_id,
                    int64_t deadline_mono_ms, bool *dup, uint64_t *seq, char *err, size_t errlen);

/* One message for bus_message_build / bus_publish; everything borrowed. */
struct bus_message {
    enum bus_stream stream;
    const char *token; /* the subject is "<prefix of stream>.<token>" */
    const void *data;
    size_t len;
    const char *msg_id; /* Nats-Msg-Id: the stream's dedupe key */
    const char *header; /* one more header, or NULL */
    const char *header_value;
};

/* The outbox prober's call (sink.h probe): sets the streams up if needed,
 * then asks for stream w's info. Returns 0 when JetStream answered it (and
 * clears a stall), ROOMD_EUNAVAIL with err when the broker or JetStream did
 * not answer, or what bus_status_rc gives another answer. Thread: any.
 * Blocks at most until deadline_mono_ms (and send_timeout). */
int bus_probe(struct bus *b, enum bus_stream w, int64_t deadline_mono_ms, char *err, size_t errlen);

/* Builds m as a message (*out; natsMsg_Destroy it). Returns 0, ROOMD_EPERM
 * when m->token cannot be a subject token, or ROOMD_ERETRY when the message
 * cannot be built; err says which. The Nats-Msg-Id is set by the publish.
 * Thread: any. Never blocks. */
int bus_message_build(struct bus *b, const struct bus_message *m, natsMsg **out, char *err,
                      size_t errlen);

/* bus_message_build, then bus_publish_msg to m->stream with m->msg_id: the
 * same returns, *dup and *seq (both may be NULL). Thread: any. Blocks until
 * the PubAck or deadline_mono_ms. */
int bus_publish(struct bus *b, const struct bus_message *m, int64_t deadline_mono_ms, bool *dup,
                uint64_t *seq, char *err, size_t errlen);

/* Default wait for JetStream API calls: rocketmq.send_timeout, >= 100 ms. */
int64_t bus_api_wait_ms(struct bus *b);

/* Drains nats.c's global threads; call once at process exit, after the
 * last bus_unref (keeps leak checkers quiet). Thread: main. Blocks <= 2 s. */
void bus_library_shutdown(void);

#endif
