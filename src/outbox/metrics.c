/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metrics.c: every roomd_outbox_* line of GET /metrics, written with the
 * exposition helper of metrics/metrics.h: the workers' counters and the
 * per-sink delivery metrics (a collector outbox_open adds and outbox_close
 * removes), and the room_outbox table by status and by sink
 * (outbox_metrics_rows, which the HTTP collector calls with the counts of its
 * readiness cache: the table is there whether or not this process runs
 * workers). docs/http.md and docs/metrics.md list them.
 *
 * Per sink (sink = its name: log, tim, activity, bus, rocket):
 *   roomd_outbox_delivery_seconds{sink}       commit -> delivered by the sink,
 *                                             every row (handed off or claimed)
 *   roomd_outbox_attempts_total{sink,outcome} one per call: ok, retry,
 *                                             unavailable, permanent, timeout
 *   roomd_outbox_dead_letters_total{sink}     rows failed still lacking the sink
 *                                             ("none": poison, no sink called)
 *   roomd_outbox_sink_oldest_undelivered_seconds{sink}  the oldest pending,
 *                                             delivering or retryable row the
 *                                             sink has not delivered yet
 *   roomd_outbox_sink_up{sink}                the sink's last call was answered
 */
#include "outbox/internal.h"

#include "core/clock.h"
#include "core/err.h"
#include "metrics/metrics.h"
#include "publish/sink.h"
#include "store/store.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* Upper bounds of the /metrics buckets of handoff_lat, in µs: multiples of
 * OUTBOX_LAT_BUCKET_US below the last bucket's 49.9 ms (+Inf implied). */
static const int64_t metrics_le_us[] = {500, 1000, 2500, 5000, 10000, 25000};
#define NLE (sizeof(metrics_le_us) / sizeof(metrics_le_us[0]))

/* ==== per sink ==== */

/* Upper bounds of roomd_outbox_delivery_seconds, µs (+Inf implied). */
static const int64_t delivery_le_us[OUTBOX_DELIVERY_BUCKETS] = {
    1000,    2500,    5000,    10000,    25000,    50000,    100000,    250000,    500000,
    1000000, 2500000, 5000000, 10000000, 30000000, 60000000, 120000000, 300000000, 600000000};

static const char *const call_names[CALL_COUNT_] = {"ok",        "retry",   "unavailable",
                                                    "permanent", "timeout", "throttled"};

/* The sm slot of bit, or NULL (no bit, or beyond OUTBOX_SINK_BITS). */
static struct sink_metrics *
slot_of(struct outbox *ob, uint32_t bit)
{
    int b = bit != 0 ? __builtin_ctz(bit) : OUTBOX_SINK_BITS;
    return b < OUTBOX_SINK_BITS ? &ob->sm[b] : NULL;
}

/* The sinks_done bits of the sinks this process delivers to. */
static atomic_uint sinks_here;

void
outbox_metrics_init(struct outbox *ob)
{
    for (int b = 0; b < OUTBOX_SINK_BITS; b++)
        atomic_store(&ob->sm[b].up, -1);
    for (size_t i = 0; i < ob->nsinks; i++) {
        struct sink_metrics *m = slot_of(ob, ob->sinks[i]->bit);
        if (m != NULL)
            m->name = ob->sinks[i]->name;
        atomic_fetch_or(&sinks_here, ob->sinks[i]->bit);
    }
}

enum sink_call
sink_call_of(int rc)
{
    if (rc == 0)
        return CALL_OK;
    if (rc == ROOMD_ERETRY)
        return CALL_RETRY;
    if (rc == ROOMD_EPERM)
        return CALL_PERMANENT;
    if (rc == ROOMD_ELIMIT)
        return CALL_THROTTLED;
    return CALL_UNAVAILABLE;
}

void
outbox_metrics_attempt(struct outbox *ob, uint32_t bit, enum sink_call outcome)
{
    struct sink_metrics *m = slot_of(ob, bit);

    if (m == NULL || outcome >= CALL_COUNT_)
        return;
    atomic_fetch_add_explicit(&m->attempts[outcome], 1, memory_order_relaxed);
    if (outcome != CALL_TIMEOUT && outcome != CALL_THROTTLED) /* a rate limit: as it was */
        atomic_store(&m->up, outcome == CALL_OK || outcome == CALL_PERMANENT);
}

void
outbox_metrics_delivered(struct outbox *ob, uint32_t bit, int64_t lag_us)
{
    struct sink_metrics *m = slot_of(ob, bit);
    size_t k = 0;

    if (m == NULL)
        return;
    if (lag_us < 0)
        lag_us = 0;
    while (k < OUTBOX_DELIVERY_BUCKETS && lag_us > delivery_le_us[k])
        k++;
    atomic_fetch_add_explicit(&m->lat[k], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&m->lat_sum_us, (uint_fast64_t)lag_us, memory_order_relaxed);
}

void
outbox_metrics_dead_letter(struct outbox *ob, uint32_t missing)
{
    if (missing == 0)
        atomic_fetch_add_explicit(&ob->dead_none, 1, memory_order_relaxed);
    for (int b = 0; b < OUTBOX_SINK_BITS; b++)
        if (missing & (1u << b))
            atomic_fetch_add_explicit(&ob->sm[b].dead, 1, memory_order_relaxed);
}

int
outbox_metrics_sink_up(struct outbox *ob, const char *name)
{
    for (int b = 0; b < OUTBOX_SINK_BITS; b++)
        if (ob->sm[b].name != NULL && strcmp(ob->sm[b].name, name) == 0)
            return atomic_load(&ob->sm[b].up) != 0;
    return -1;
}

static uint64_t
ld(atomic_uint_fast64_t *a)
{
    return atomic_load_explicit(a, memory_order_relaxed);
}

static void
collect_per_sink(struct outbox *ob, struct metrics_text *t)
{
    char labels[96];

    metrics_family(t, "roomd_outbox_delivery_seconds", "histogram",
                   "Commit to delivered, per sink, every row (handed off or claimed).");
    for (int b = 0; b < OUTBOX_SINK_BITS; b++) {
        struct sink_metrics *m = &ob->sm[b];
        uint64_t cum[OUTBOX_DELIVERY_BUCKETS], c = 0;
        if (m->name == NULL)
            continue;
        for (size_t k = 0; k < OUTBOX_DELIVERY_BUCKETS; k++)
            cum[k] = c += ld(&m->lat[k]);
        snprintf(labels, sizeof(labels), "sink=\"%s\"", m->name);
        metrics_histogram(t, "roomd_outbox_delivery_seconds", labels, delivery_le_us, cum,
                          OUTBOX_DELIVERY_BUCKETS, c + ld(&m->lat[OUTBOX_DELIVERY_BUCKETS]),
                          (int64_t)ld(&m->lat_sum_us));
    }
    metrics_family(t, "roomd_outbox_attempts_total", "counter",
                   "Sink calls of the outbox workers, by outcome.");
    for (int b = 0; b < OUTBOX_SINK_BITS; b++)
        for (int o = 0; ob->sm[b].name != NULL && o < CALL_COUNT_; o++) {
            snprintf(labels, sizeof(labels), "sink=\"%s\",outcome=\"%s\"", ob->sm[b].name,
                     call_names[o]);
            metrics_count(t, "roomd_outbox_attempts_total", labels, ld(&ob->sm[b].attempts[o]));
        }
    metrics_family(t, "roomd_outbox_dead_letters_total", "counter",
                   "Rows failed for good (dead letters), by the sinks they still lacked.");
    for (int b = 0; b < OUTBOX_SINK_BITS; b++)
        if (ob->sm[b].name != NULL) {
            snprintf(labels, sizeof(labels), "sink=\"%s\"", ob->sm[b].name);
            metrics_count(t, "roomd_outbox_dead_letters_total", labels, ld(&ob->sm[b].dead));
        }
    metrics_count(t, "roomd_outbox_dead_letters_total", "sink=\"none\"", ld(&ob->dead_none));
    metrics_family(t, "roomd_outbox_sink_up", "gauge",
                   "1 when the sink's last call was answered (delivered or refused for good).");
    for (int b = 0; b < OUTBOX_SINK_BITS; b++)
        if (ob->sm[b].name != NULL) {
            snprintf(labels, sizeof(labels), "sink=\"%s\"", ob->sm[b].name);
            metrics_count(t, "roomd_outbox_sink_up", labels, atomic_load(&ob->sm[b].up) != 0);
        }
}

/* The sinks' circuits (circuit.c) and the rows outages handed back. */
static void
circuit_metrics(struct outbox *ob, struct metrics_text *t)
{
    static const char *const names[] = {"roomd_outbox_sink_circuit_open",
                                        "roomd_outbox_sink_circuit_opened_total",
                                        "roomd_outbox_sink_circuit_skipped_total"};
    static const char *const types[] = {"gauge", "counter", "counter"};
    static const char *const helps[] = {
        "1 while the sink's circuit is open (it did not answer; no attempts counted).",
        "Times the sink's circuit opened.", "Sink calls not made while its circuit was open."};
    char label[96];

    for (size_t m = 0; m < 3; m++) {
        metrics_family(t, names[m], types[m], helps[m]);
        for (size_t k = 0; k < ob->nsinks; k++) {
            struct sink_circuit c;
            circuit_read(ob, k, &c);
            snprintf(label, sizeof(label), "sink=\"%s\"", ob->sinks[k]->name);
            const uint64_t v[] = {c.open ? 1u : 0u, c.opened, c.skipped};
            metrics_count(t, names[m], label, v[m]);
        }
    }
    const struct {
        const char *name, *help;
        atomic_uint_fast64_t *v;
    } counters[] = {
        {"roomd_outbox_outage_rows_total",
         "Rows handed back by a sink outage, retry_count unchanged.", &ob->outage_rows},
        {"roomd_outbox_throttled_rows_total",
         "Rows handed back because a sink throttled them (its peer's rate limit), "
         "retry_count unchanged, the sink's circuit not fed.",
         &ob->throttled_rows},
        {"roomd_outbox_order_held_total",
         "Rows of a batch not sent because an earlier row of their room was not delivered "
         "(ordering per_room; retried after it, no attempt counted).",
         &ob->order_held},
        {"roomd_outbox_order_failed_total",
         "Dead letters after which their room's later events went on (ordering per_room).",
         &ob->order_failed},
        {"roomd_outbox_order_busy_total",
         "Commits whose rows went to the ordered claim, not the hand-off: their room had an "
         "undelivered row.",
         &ob->order_busy},
        {"roomd_outbox_order_affine_total",
         "Commits handed off behind their room's earlier rows still in this process's "
         "hand-off (ordering per_room, room affinity).",
         &ob->order_affine},
    };
    for (size_t i = 0; i < sizeof(counters) / sizeof(counters[0]); i++)
        metrics_counter(t, counters[i].name, counters[i].help, ld(counters[i].v));
}

void
outbox_collect_metrics(void *arg, struct metrics_text *t)
{
    static const char *const phase[] = {"phase=\"claim\"", "phase=\"build\"", "phase=\"publish\"",
                                        "phase=\"complete\""};
    struct outbox_stats s;
    uint64_t cum[NLE], total = 0;
    size_t b = 0;

    outbox_stats(arg, &s);
    metrics_counter(t, "roomd_outbox_claims_total", "Claim queries of the outbox workers.",
                    s.claims);
    metrics_counter(t, "roomd_outbox_claimed_rows_total", "Rows those claims returned.",
                    s.claimed_rows);
    metrics_counter(t, "roomd_outbox_claims_paused_total",
                    "Claims not made because no sink answered (every circuit open): the rows "
                    "are left to nodes whose sinks answer.",
                    s.claims_paused);
    metrics_counter(t, "roomd_outbox_handoff_rows_total",
                    "Rows handed from the commit to the workers without a claim.", s.handoff_rows);
    metrics_counter(t, "roomd_outbox_handoff_full_total",
                    "Hand-off reservations refused by a full queue (the rows went pending).",
                    s.handoff_full);
    metrics_counter(t, "roomd_outbox_batches_total", "Batches published and completed.", s.batches);
    metrics_counter(t, "roomd_outbox_completions_total",
                    "Store transactions of completions alone (not carried by a claim).",
                    s.completions);

    const int64_t phase_us[] = {s.claim_us, s.build_us, s.publish_us, s.complete_us};
    metrics_family(t, "roomd_outbox_worker_seconds_total", "counter",
                   "Time of all outbox workers together, by phase.");
    for (size_t i = 0; i < 4; i++)
        metrics_value(t, "roomd_outbox_worker_seconds_total", phase[i], phase_us[i] / 1e6);

    metrics_family(t, "roomd_outbox_handoff_delivery_seconds", "histogram",
                   "Handed-off rows delivered, from the commit to the return of the last sink.");
    for (int i = 0; i < OUTBOX_LAT_BUCKETS; i++)
        total += s.handoff_lat[i];
    for (size_t k = 0; k < NLE; k++) {
        cum[k] = k > 0 ? cum[k - 1] : 0;
        for (; b < (size_t)(metrics_le_us[k] / OUTBOX_LAT_BUCKET_US); b++)
            cum[k] += s.handoff_lat[b];
    }
    metrics_histogram(t, "roomd_outbox_handoff_delivery_seconds", "", metrics_le_us, cum, NLE,
                      total, s.handoff_lat_sum_us);
    circuit_metrics(arg, t);
    collect_per_sink(arg, t);
}

void
outbox_metrics_rows(const struct outbox_counts *c, struct metrics_text *t)
{
    /* Store-wide: every node reads the same table, so the lines carry
     * scope="store" and are aggregated with max(), never sum() (docs/cluster.md). */
    static const char *const status[] = {
        "scope=\"store\",status=\"pending\"", "scope=\"store\",status=\"delivering\"",
        "scope=\"store\",status=\"delivered\"", "scope=\"store\",status=\"retryable\"",
        "scope=\"store\",status=\"failed\""};
    const struct outbox_counts oc = *c;
    double age = 0;

    const int64_t n[] = {oc.pending, oc.delivering, oc.delivered, oc.retryable, oc.failed};
    metrics_family(t, "roomd_outbox_rows", "gauge",
                   "room_outbox rows by status (store-wide: aggregate with max()).");
    for (size_t i = 0; i < 5; i++)
        metrics_count(t, "roomd_outbox_rows", status[i], (uint64_t)n[i]);
    if (oc.oldest_undelivered_ms > 0) {
        age = (double)(clock_wall_ms() - oc.oldest_undelivered_ms) / 1000.0;
        if (age < 0)
            age = 0;
    }
    metrics_family(t, "roomd_outbox_oldest_undelivered_seconds", "gauge",
                   "Age of the oldest undelivered room_outbox row (0 when none; store-wide).");
    metrics_value(t, "roomd_outbox_oldest_undelivered_seconds", "scope=\"store\"", age);

    /* per sink of this process (every sink an outbox_open here was given) */
    uint32_t sinks = atomic_load(&sinks_here);
    int64_t now = clock_wall_ms();
    char labels[96];
    metrics_family(t, "roomd_outbox_sink_oldest_undelivered_seconds", "gauge",
                   "Age of the oldest pending, delivering or retryable row the sink has not "
                   "delivered yet (0 when none; store-wide).");
    for (int b = 0; b < OUTBOX_SINK_BITS; b++) {
        int64_t at = oc.oldest_missing_ms[b];
        if (!(sinks & (1u << b)))
            continue;
        snprintf(labels, sizeof(labels), "scope=\"store\",sink=\"%s\"", sink_bit_name(1u << b));
        metrics_value(t, "roomd_outbox_sink_oldest_undelivered_seconds", labels,
                      at > 0 && now > at ? (double)(now - at) / 1000.0 : 0.0);
    }
}
