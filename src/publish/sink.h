/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sink.h: one interface for every place an outbox event is delivered to.
 * One file per sink: sink_log.c (event JSON lines to a file), sink_tim.c
 * (Tencent IM REST), sink_activity.c (activity gRPC), sink_bus.c (JetStream
 * hyapp_room_outbox), sink_rocket.c (JetStream rocket launch wake-ups),
 * sink_wallet.c (the remote wallet's Confirm of a committed gift).
 *
 * The outbox worker (outbox/worker.c) calls publish() for each claimed row
 * and each sink whose bit is not yet in the row's sinks_done and that
 * accepts() the event. A row is delivered when every such sink succeeded; a
 * retry re-sends only to the sinks that have not.
 *
 * Threads: publish() is called from several worker threads at once; a sink
 * makes itself safe for that. publish() blocks, at most until deadline.
 */
#ifndef ROOMD_SINK_H
#define ROOMD_SINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct outbox_row;

/* The sinks_done bits, their names and event limits: core/sink_bits.h. */
#include "core/sink_bits.h"

/* One event as the sinks see it, built once per row by the worker.
 * Everything is borrowed for the duration of publish(). */
struct outbox_event {
    const struct outbox_row *row;
    const uint8_t *envelope; /* packed roomd.v1.RoomOutboxEvent */
    size_t envelope_len;
    const char *json; /* the envelope as JSON, payload decoded as an object */
};

struct sink {
    const char *name;
    uint32_t bit;
    /* True when this sink handles ev (NULL = every event). */
    bool (*accepts)(struct sink *s, const struct outbox_event *ev);
    /* Delivers ev. Returns 0 (delivered; also when the peer says it already
     * had it), ROOMD_ERETRY (the peer answered "not now": retry with backoff,
     * an attempt), ROOMD_EUNAVAIL (no answer: connection down, timeout; an
     * outage, retried without counting an attempt, and it feeds the sink's
     * circuit), ROOMD_ELIMIT (throttled: the peer answered "too fast", a rate
     * limit, or a batch's deadline passed before the event's turn, so the
     * event was not sent; retried after circuit_probe_every,
     * never an attempt, and it neither opens nor closes the sink's circuit
     * nor goes through the poison check) or ROOMD_EPERM (permanent: the row
     * fails at once). err gets a one-line reason without secrets, kept in
     * room_outbox.last_error. deadline is clock_mono_ms(). */
    int (*publish)(struct sink *s, const struct outbox_event *ev, int64_t deadline_mono_ms,
                   char *err, size_t errlen);
    /* Frees the sink. Called once, after all publish calls returned. */
    void (*close)(struct sink *s);
    /* Optional; NULL = the worker calls publish() per event. Delivers
     * evs[0..n) together (pipelined: one wait for the whole batch, e.g. the
     * bus sink's asynchronous JetStream publish) within one deadline.
     * rcs[i] gets what publish() would return for evs[i], and
     * errs + i * errlen its reason. Same threads and blocking as publish(). */
    void (*publish_batch)(struct sink *s, const struct outbox_event *evs, size_t n,
                          int64_t deadline_mono_ms, int *rcs, char *errs, size_t errlen);
    /* Optional, both or neither: publish_batch in two halves, so that a
     * worker publishes its next batch while this one's acks are in flight
     * (the window of outstanding acks across batches). publish_start sends
     * evs[0..n) without waiting for their answers and returns a handle for
     * publish_finish, or NULL when rcs/errs are final already (e.g. the
     * broker is down). evs, rcs and errs stay the caller's and must stay valid
     * until publish_finish returned. publish_finish waits for the answers, at
     * most until the deadline given to publish_start (each message keeps its
     * own MaxWait), fills rcs/errs and frees the handle. Thread: any, one
     * call of publish_finish per handle; both block (start: on sending). */
    void *(*publish_start)(struct sink *s, const struct outbox_event *evs, size_t n,
                           int64_t deadline_mono_ms, int *rcs, char *errs, size_t errlen);
    void (*publish_finish)(struct sink *s, void *handle);
    /* Optional; NULL = only a call with an event probes the sink's open
     * circuit. One cheap call the peer must answer (the stream's info for
     * JetStream, an account check for IM, a health check for gRPC), made by
     * the outbox's prober (outbox/circuit.c) while the sink's circuit is open
     * and no event probed it: a node with no rows for the sink still sees it
     * recover. Returns 0 when the peer answered, whatever it said, or
     * ROOMD_EUNAVAIL with err (no secrets) when it did not. Thread: the
     * prober, beside publish calls. Blocks at most until deadline. */
    int (*probe)(struct sink *s, int64_t deadline_mono_ms, char *err, size_t errlen);
    /* Optional; NULL = a peer of its own. Sinks with the same non-NULL peer
     * reach it over one connection (the bus and rocket sinks share the
     * NATS connection), so one's open circuit says the other's peer does not
     * answer either, even while the other had no event to find it out. */
    const void *peer;
    /* Optional; false = the sink reads ev->json. True: it reads only the
     * envelope and the row, and the worker skips building the JSON (NULL)
     * when no sink of the publish mode needs it. */
    bool no_json;
};

/* Fills the members every sink sets: name, bit, accepts (NULL = every
 * event), publish, close and no_json; the optional batch members are left as
 * they are (NULL in a sink from xcalloc). Returns s, still the caller's.
 * Thread: the opener's. Never blocks. */
/* An accepts for a sink limited to one event type: true for the rows that
 * carry s->bit (sink_bit_carries, core/sink_bits.h). Thread: any; pure. */
bool sink_accepts_carried(struct sink *s, const struct outbox_event *ev);
struct sink *sink_init(struct sink *s, const char *name, uint32_t bit,
                       bool (*accepts)(struct sink *, const struct outbox_event *),
                       int (*publish)(struct sink *, const struct outbox_event *, int64_t, char *,
                                      size_t),
                       void (*close)(struct sink *), bool no_json);
/* The close of a sink that holds nothing of its own: frees s (allocated
 * with its struct sink first). Thread: the closer's. Never blocks. */
void sink_free(struct sink *s);

/* The log sink: appends ev->json lines to path. Returns 0 and *out, or
 * ROOMD_EIO with err. */
int sink_log_open(struct sink **out, const char *path, char *err, size_t errlen);
/* Reopens the log sink s's file (SIGHUP, after logrotate moved it). Returns 0
 * or ROOMD_EIO with err (the old file stays in use). Thread: any; blocks on
 * open(2) and on a publish in progress. s must come from sink_log_open. */
int sink_log_reopen(struct sink *s, char *err, size_t errlen);

#endif
