/*
 * outbox/metrics.h: the outbox's delivery metrics per sink (worker.c
 * records them after each batch; a collector renders them on GET /metrics):
 *   roomd_outbox_delivery_seconds{sink}       commit -> delivered by the sink,
 *                                             every row (handed off or claimed),
 *                                             buckets 1 ms .. 10 min
 *   roomd_outbox_attempts_total{sink,outcome} one per sink call: ok, retry,
 *                                             unavailable, permanent, timeout
 *   roomd_outbox_dead_letters_total{sink}     rows failed (dead letter) with
 *                                             this sink among the undelivered
 *                                             ("none": poison, no sink called)
 *   roomd_outbox_oldest_undelivered_seconds{sink}  age of the oldest pending,
 *                                             delivering or retryable row the
 *                                             sink has not delivered yet
 *   roomd_outbox_sink_up{sink}                1 when the sink's last call got an
 *                                             answer (ok or a permanent refusal)
 * Internal to src/outbox. Thread: any (atomics); rendering queries the store.
 */
#ifndef ROOMD_OUTBOX_METRICS_H
#define ROOMD_OUTBOX_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sink;
struct store;
struct outbox_metrics;

/* What one sink call came to. */
enum sink_call {
    CALL_OK,
    CALL_RETRY,       /* ROOMD_ERETRY: answered "not now" */
    CALL_UNAVAILABLE, /* ROOMD_EUNAVAIL or another error: no answer */
    CALL_PERMANENT,   /* ROOMD_EPERM: refused for good */
    CALL_TIMEOUT,     /* publish_timeout passed before the call */
    CALL_COUNT_
};

/* The outcome of a sink's return code. */
enum sink_call sink_call_of(int rc);

/* Metrics for the sinks sinks[0..n) (borrowed: names and bits are read at
 * render time while the outbox lives), their lag read from store. Adds a
 * collector; outbox_metrics_free removes it. Thread: main. */
struct outbox_metrics *outbox_metrics_new(struct sink *const *sinks, size_t n, struct store *store);
void outbox_metrics_free(struct outbox_metrics *m);

/* 1 when the sink named name answered its last call (or was never called),
 * 0 when not, -1 when no sink has that name. */
int outbox_metrics_sink_up(struct outbox_metrics *m, const char *name);

/* Sink with bit `bit` was called and came to outcome. */
void outbox_metrics_attempt(struct outbox_metrics *m, uint32_t bit, enum sink_call outcome);
/* Sink `bit` delivered a row lag_us after its commit. */
void outbox_metrics_delivered(struct outbox_metrics *m, uint32_t bit, int64_t lag_us);
/* A row became a dead letter; missing = the sinks it still lacked (0: none called). */
void outbox_metrics_dead_letter(struct outbox_metrics *m, uint32_t missing);

#endif
