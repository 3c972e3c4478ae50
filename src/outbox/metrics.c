/*
 * metrics.c: every roomd_outbox_* line of GET /metrics, written with the
 * exposition helper of metrics/metrics.h: the workers' counters (a collector
 * outbox_open adds and outbox_close removes) and the room_outbox table by
 * status (outbox_metrics_rows, which the HTTP collector calls with the counts
 * of its readiness cache: the table is there whether or not this process runs
 * workers). docs/http.md lists them.
 */
#include "outbox/internal.h"

#include "core/clock.h"
#include "metrics/metrics.h"
#include "publish/sink.h"
#include "store/store.h"

#include <stddef.h>
#include <stdio.h>

/* Upper bounds of the /metrics buckets of handoff_lat, in µs: multiples of
 * OUTBOX_LAT_BUCKET_US below the last bucket's 49.9 ms (+Inf implied). */
static const int64_t metrics_le_us[] = {500, 1000, 2500, 5000, 10000, 25000};
#define NLE (sizeof(metrics_le_us) / sizeof(metrics_le_us[0]))

static void
counter(struct metrics_text *t, const char *name, const char *help, uint64_t v)
{
    metrics_family(t, name, "counter", help);
    metrics_count(t, name, "", v);
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
    counter(t, "roomd_outbox_outage_rows_total",
            "Rows handed back by a sink outage, retry_count unchanged.",
            (uint64_t)atomic_load(&ob->outage_rows));
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
    counter(t, "roomd_outbox_claims_total", "Claim queries of the outbox workers.", s.claims);
    counter(t, "roomd_outbox_claimed_rows_total", "Rows those claims returned.", s.claimed_rows);
    counter(t, "roomd_outbox_handoff_rows_total",
            "Rows handed from the commit to the workers without a claim.", s.handoff_rows);
    counter(t, "roomd_outbox_handoff_full_total",
            "Hand-off reservations refused by a full queue (the rows went pending).",
            s.handoff_full);
    counter(t, "roomd_outbox_batches_total", "Batches published and completed.", s.batches);

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
}
