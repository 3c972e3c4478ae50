/* outbox/metrics.c: the outbox's per-sink metrics (see outbox/metrics.h). */
#include "outbox/metrics.h"

#include "core/clock.h"
#include "core/err.h"
#include "core/xmalloc.h"
#include "metrics/metrics.h"
#include "publish/sink.h"
#include "store/store.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define NBITS OUTBOX_SINK_BITS

/* Upper bounds of the delivery histogram, µs: 1 ms .. 10 min (+Inf implied). */
static const int64_t le_us[] = {1000,     2500,     5000,     10000,     25000,     50000,
                                100000,   250000,   500000,   1000000,   2500000,   5000000,
                                10000000, 30000000, 60000000, 120000000, 300000000, 600000000};
#define NLE (sizeof(le_us) / sizeof(le_us[0]))

static const char *const outcome_names[CALL_COUNT_] = {"ok", "retry", "unavailable", "permanent",
                                                       "timeout"};

struct per_sink {
    const char *name; /* NULL: no sink has this bit */
    atomic_uint_fast64_t lat[NLE + 1];
    atomic_uint_fast64_t lat_sum_us;
    atomic_uint_fast64_t attempts[CALL_COUNT_];
    atomic_uint_fast64_t dead;
    atomic_int up; /* -1 never called, 0 down, 1 up */
};

struct outbox_metrics {
    struct store *store;
    struct per_sink s[NBITS];
    atomic_uint_fast64_t dead_none;
    bool registered;
};

static int
bit_index(uint32_t bit)
{
    return bit != 0 ? __builtin_ctz(bit) : NBITS;
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
    return CALL_UNAVAILABLE;
}

void
outbox_metrics_attempt(struct outbox_metrics *m, uint32_t bit, enum sink_call outcome)
{
    int b = bit_index(bit);

    if (m == NULL || b >= NBITS || outcome >= CALL_COUNT_)
        return;
    atomic_fetch_add_explicit(&m->s[b].attempts[outcome], 1, memory_order_relaxed);
    if (outcome != CALL_TIMEOUT)
        atomic_store(&m->s[b].up, outcome == CALL_OK || outcome == CALL_PERMANENT);
}

void
outbox_metrics_delivered(struct outbox_metrics *m, uint32_t bit, int64_t lag_us)
{
    int b = bit_index(bit);
    size_t k = 0;

    if (m == NULL || b >= NBITS)
        return;
    if (lag_us < 0)
        lag_us = 0;
    while (k < NLE && lag_us > le_us[k])
        k++;
    atomic_fetch_add_explicit(&m->s[b].lat[k], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&m->s[b].lat_sum_us, (uint_fast64_t)lag_us, memory_order_relaxed);
}

void
outbox_metrics_dead_letter(struct outbox_metrics *m, uint32_t missing)
{
    if (m == NULL)
        return;
    if (missing == 0)
        atomic_fetch_add_explicit(&m->dead_none, 1, memory_order_relaxed);
    for (int b = 0; b < NBITS; b++)
        if (missing & (1u << b))
            atomic_fetch_add_explicit(&m->s[b].dead, 1, memory_order_relaxed);
}

int
outbox_metrics_sink_up(struct outbox_metrics *m, const char *name)
{
    for (int b = 0; m != NULL && b < NBITS; b++)
        if (m->s[b].name != NULL && strcmp(m->s[b].name, name) == 0)
            return atomic_load(&m->s[b].up) != 0;
    return -1;
}

static uint64_t
ld(atomic_uint_fast64_t *a)
{
    return atomic_load_explicit(a, memory_order_relaxed);
}

static void
render_latency(struct outbox_metrics *m, struct metrics_text *t)
{
    metrics_printf(t, "# HELP roomd_outbox_delivery_seconds Commit to delivered, per sink, every "
                      "row (handed off or claimed).\n"
                      "# TYPE roomd_outbox_delivery_seconds histogram\n");
    for (int b = 0; b < NBITS; b++) {
        struct per_sink *p = &m->s[b];
        uint64_t cum = 0;
        if (p->name == NULL)
            continue;
        for (size_t k = 0; k < NLE; k++) {
            cum += ld(&p->lat[k]);
            metrics_printf(
                t, "roomd_outbox_delivery_seconds_bucket{sink=\"%s\",le=\"%g\"} %" PRIu64 "\n",
                p->name, (double)le_us[k] / 1e6, cum);
        }
        cum += ld(&p->lat[NLE]);
        metrics_printf(t,
                       "roomd_outbox_delivery_seconds_bucket{sink=\"%s\",le=\"+Inf\"} %" PRIu64
                       "\nroomd_outbox_delivery_seconds_sum{sink=\"%s\"} %.6f\n"
                       "roomd_outbox_delivery_seconds_count{sink=\"%s\"} %" PRIu64 "\n",
                       p->name, cum, p->name, (double)ld(&p->lat_sum_us) / 1e6, p->name, cum);
    }
}

static void
render_counters(struct outbox_metrics *m, struct metrics_text *t)
{
    metrics_printf(t, "# HELP roomd_outbox_attempts_total Sink calls of the outbox workers, by "
                      "outcome.\n# TYPE roomd_outbox_attempts_total counter\n");
    for (int b = 0; b < NBITS; b++)
        for (int o = 0; m->s[b].name != NULL && o < CALL_COUNT_; o++)
            metrics_printf(t,
                           "roomd_outbox_attempts_total{sink=\"%s\",outcome=\"%s\"} %" PRIu64 "\n",
                           m->s[b].name, outcome_names[o], ld(&m->s[b].attempts[o]));
    metrics_printf(t, "# HELP roomd_outbox_dead_letters_total Rows failed for good (dead "
                      "letters), by the sinks they still lacked.\n"
                      "# TYPE roomd_outbox_dead_letters_total counter\n");
    for (int b = 0; b < NBITS; b++)
        if (m->s[b].name != NULL)
            metrics_printf(t, "roomd_outbox_dead_letters_total{sink=\"%s\"} %" PRIu64 "\n",
                           m->s[b].name, ld(&m->s[b].dead));
    metrics_printf(t, "roomd_outbox_dead_letters_total{sink=\"none\"} %" PRIu64 "\n",
                   ld(&m->dead_none));
    metrics_printf(t, "# HELP roomd_outbox_sink_up 1 when the sink's last call was answered "
                      "(delivered or refused for good), 0 when not.\n"
                      "# TYPE roomd_outbox_sink_up gauge\n");
    for (int b = 0; b < NBITS; b++) {
        int up = atomic_load(&m->s[b].up);
        if (m->s[b].name != NULL)
            metrics_printf(t, "roomd_outbox_sink_up{sink=\"%s\"} %d\n", m->s[b].name,
                           up != 0); /* never called: up */
    }
}

static void
render_oldest(struct outbox_metrics *m, struct metrics_text *t)
{
    struct outbox_counts oc;
    int64_t now = clock_wall_ms();

    if (store_outbox_counts(m->store, &oc) != 0)
        return;
    metrics_printf(t, "# HELP roomd_outbox_sink_oldest_undelivered_seconds Age of the oldest "
                      "pending, delivering or retryable row the sink has not delivered yet (0 "
                      "when none).\n# TYPE roomd_outbox_sink_oldest_undelivered_seconds gauge\n");
    for (int b = 0; b < NBITS; b++) {
        int64_t at = oc.oldest_missing_ms[b];
        if (m->s[b].name != NULL)
            metrics_printf(t, "roomd_outbox_sink_oldest_undelivered_seconds{sink=\"%s\"} %.3f\n",
                           m->s[b].name, at > 0 && now > at ? (double)(now - at) / 1000.0 : 0.0);
    }
}

static void
collect(void *arg, struct metrics_text *t)
{
    struct outbox_metrics *m = arg;

    render_latency(m, t);
    render_counters(m, t);
    render_oldest(m, t);
}

struct outbox_metrics *
outbox_metrics_new(struct sink *const *sinks, size_t n, struct store *store)
{
    struct outbox_metrics *m = xcalloc(1, sizeof(*m));

    m->store = store;
    for (int b = 0; b < NBITS; b++)
        atomic_store(&m->s[b].up, -1);
    for (size_t i = 0; i < n; i++) {
        int b = bit_index(sinks[i]->bit);
        if (b < NBITS)
            m->s[b].name = sinks[i]->name;
    }
    m->registered = metrics_add_collector(collect, m) == 0;
    return m;
}

void
outbox_metrics_free(struct outbox_metrics *m)
{
    if (m == NULL)
        return;
    if (m->registered)
        metrics_remove_collector(collect, m);
    free(m);
}
