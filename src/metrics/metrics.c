/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metrics.c: the registry of metrics.h. Command counters are a fixed table
 * [command][http status] of atomics; the histogram keeps per-bucket counts
 * (made cumulative when rendered); the room layer names the command types.
 * Collectors are a small locked table. The exposition helper writes the
 * Prometheus text format 0.0.4 lines.
 */
#include "metrics/metrics.h"

#include "core/err.h"
#include "core/xmalloc.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define MAX_STATUS 600
#define MAX_COLLECTORS 32

/* Upper bounds of the latency buckets, in microseconds (+Inf implied). */
static const int64_t bucket_us[] = {500,    1000,   2500,   5000,    10000,   25000,  50000,
                                    100000, 250000, 500000, 1000000, 2500000, 5000000};
#define NBUCKETS (sizeof(bucket_us) / sizeof(bucket_us[0]))

static atomic_uint_fast64_t commands[METRICS_MAX_COMMANDS][MAX_STATUS];
static atomic_uint_fast64_t buckets[METRICS_MAX_COMMANDS][NBUCKETS + 1];
static atomic_uint_fast64_t sum_us[METRICS_MAX_COMMANDS];

static const char *const *command_names;
static int ncommand_names;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    metrics_collector_fn fn;
    void *arg;
} collectors[MAX_COLLECTORS];

void
metrics_printf(struct metrics_text *t, const char *fmt, ...)
{
    va_list ap;
    int n;

    for (;;) {
        size_t room = t->cap - t->len;
        va_start(ap, fmt);
        n = vsnprintf(t->p ? t->p + t->len : NULL, room, fmt, ap);
        va_end(ap);
        if (n < 0)
            return;
        if ((size_t)n < room) {
            t->len += (size_t)n;
            return;
        }
        t->cap = t->cap * 2 + (size_t)n + 256;
        t->p = xrealloc(t->p, t->cap);
    }
}

void
metrics_family(struct metrics_text *t, const char *name, const char *type, const char *help)
{
    metrics_printf(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void
metrics_count(struct metrics_text *t, const char *name, const char *labels, uint64_t v)
{
    metrics_printf(t, "%s%s%s%s %" PRIu64 "\n", name, *labels ? "{" : "", labels,
                   *labels ? "}" : "", v);
}

void
metrics_counter(struct metrics_text *t, const char *name, const char *help, uint64_t v)
{
    metrics_family(t, name, "counter", help);
    metrics_count(t, name, "", v);
}

void
metrics_value(struct metrics_text *t, const char *name, const char *labels, double v)
{
    metrics_printf(t, "%s%s%s%s %.6f\n", name, *labels ? "{" : "", labels, *labels ? "}" : "", v);
}

void
metrics_histogram(struct metrics_text *t, const char *name, const char *labels,
                  const int64_t *le_us, const uint64_t *cum, size_t n, uint64_t total,
                  int64_t total_us)
{
    const char *sep = *labels ? "," : "";

    for (size_t i = 0; i < n; i++)
        metrics_printf(t, "%s_bucket{%s%sle=\"%g\"} %" PRIu64 "\n", name, labels, sep,
                       (double)le_us[i] / 1e6, cum[i]);
    metrics_printf(t, "%s_bucket{%s%sle=\"+Inf\"} %" PRIu64 "\n", name, labels, sep, total);
    metrics_printf(t, "%s_sum%s%s%s %.6f\n", name, *labels ? "{" : "", labels, *labels ? "}" : "",
                   (double)total_us / 1e6);
    metrics_printf(t, "%s_count%s%s%s %" PRIu64 "\n", name, *labels ? "{" : "", labels,
                   *labels ? "}" : "", total);
}

void
metrics_command_names(const char *const *names, int n)
{
    command_names = names;
    ncommand_names = n < METRICS_MAX_COMMANDS ? n : METRICS_MAX_COMMANDS;
}

void
metrics_command_observe(int cmd_type, int http_status, int64_t duration_us)
{
    size_t b = 0;

    if (cmd_type < 0 || cmd_type >= METRICS_MAX_COMMANDS || http_status < 100 ||
        http_status >= MAX_STATUS)
        return;
    if (duration_us < 0)
        duration_us = 0;
    atomic_fetch_add_explicit(&commands[cmd_type][http_status], 1, memory_order_relaxed);
    while (b < NBUCKETS && duration_us > bucket_us[b])
        b++;
    atomic_fetch_add_explicit(&buckets[cmd_type][b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&sum_us[cmd_type], (uint_fast64_t)duration_us, memory_order_relaxed);
}

int
metrics_add_collector(metrics_collector_fn fn, void *arg)
{
    int rc = ROOMD_ENOMEM;

    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < MAX_COLLECTORS; i++) {
        if (collectors[i].fn == NULL) {
            collectors[i].fn = fn;
            collectors[i].arg = arg;
            rc = 0;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

void
metrics_remove_collector(metrics_collector_fn fn, void *arg)
{
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < MAX_COLLECTORS; i++) {
        if (collectors[i].fn == fn && collectors[i].arg == arg) {
            collectors[i].fn = NULL;
            collectors[i].arg = NULL;
        }
    }
    pthread_mutex_unlock(&lock);
}

static void
render_commands(struct metrics_text *t)
{
    char labels[128];

    metrics_family(t, "roomd_commands_total", "counter",
                   "Room write commands answered, by HTTP status.");
    for (int c = 0; c < ncommand_names; c++) {
        for (int s = 0; s < MAX_STATUS; s++) {
            uint64_t n = atomic_load_explicit(&commands[c][s], memory_order_relaxed);
            if (n == 0 || command_names[c] == NULL)
                continue;
            snprintf(labels, sizeof(labels), "command=\"%s\",status=\"%d\"", command_names[c], s);
            metrics_count(t, "roomd_commands_total", labels, n);
        }
    }
    metrics_family(t, "roomd_command_duration_seconds", "histogram",
                   "Time to answer a room write command.");
    for (int c = 0; c < ncommand_names; c++) {
        uint64_t cum[NBUCKETS], total = 0;
        for (size_t b = 0; b < NBUCKETS; b++) {
            total += atomic_load_explicit(&buckets[c][b], memory_order_relaxed);
            cum[b] = total;
        }
        total += atomic_load_explicit(&buckets[c][NBUCKETS], memory_order_relaxed);
        if (total == 0 || command_names[c] == NULL)
            continue;
        snprintf(labels, sizeof(labels), "command=\"%s\"", command_names[c]);
        metrics_histogram(t, "roomd_command_duration_seconds", labels, bucket_us, cum, NBUCKETS,
                          total, (int64_t)atomic_load_explicit(&sum_us[c], memory_order_relaxed));
    }
}

char *
metrics_render(void)
{
    struct metrics_text t = {0};

    metrics_printf(&t, "%s", "");
    metrics_render_process(&t);
    render_commands(&t);
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < MAX_COLLECTORS; i++)
        if (collectors[i].fn != NULL)
            collectors[i].fn(collectors[i].arg, &t);
    pthread_mutex_unlock(&lock);
    return t.p;
}

void
metrics_reset(void)
{
    for (int c = 0; c < METRICS_MAX_COMMANDS; c++) {
        for (int s = 0; s < MAX_STATUS; s++)
            atomic_store(&commands[c][s], 0);
        for (size_t b = 0; b <= NBUCKETS; b++)
            atomic_store(&buckets[c][b], 0);
        atomic_store(&sum_us[c], 0);
    }
}
