/*
 * metrics.c: the registry of metrics.h. Command counters are a fixed table
 * [command][http status] of atomics; the histogram keeps per-bucket counts
 * (made cumulative when rendered). Collectors are a small locked table.
 */
#include "metrics/metrics.h"

#include "core/err.h"
#include "core/xmalloc.h"
#include "room/command.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define MAX_STATUS 600
#define MAX_COLLECTORS 16

/* Upper bounds of the latency buckets, in microseconds (+Inf implied). */
static const int64_t bucket_us[] = {500,    1000,   2500,   5000,    10000,   25000,  50000,
                                    100000, 250000, 500000, 1000000, 2500000, 5000000};
#define NBUCKETS (sizeof(bucket_us) / sizeof(bucket_us[0]))

static atomic_uint_fast64_t commands[CMD_COUNT_][MAX_STATUS];
static atomic_uint_fast64_t buckets[CMD_COUNT_][NBUCKETS + 1];
static atomic_uint_fast64_t sum_us[CMD_COUNT_];

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
metrics_command_observe(int cmd_type, int http_status, int64_t duration_us)
{
    size_t b = 0;

    if (cmd_type < 0 || cmd_type >= CMD_COUNT_ || http_status < 100 || http_status >= MAX_STATUS)
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
    metrics_printf(t, "# HELP roomd_commands_total Room write commands answered, by HTTP "
                      "status.\n# TYPE roomd_commands_total counter\n");
    for (int c = 0; c < CMD_COUNT_; c++) {
        for (int s = 0; s < MAX_STATUS; s++) {
            uint64_t n = atomic_load_explicit(&commands[c][s], memory_order_relaxed);
            if (n > 0)
                metrics_printf(t,
                               "roomd_commands_total{command=\"%s\",status=\"%d\"} %" PRIu64 "\n",
                               room_cmd_name((enum room_cmd_type)c), s, n);
        }
    }
    metrics_printf(t, "# HELP roomd_command_duration_seconds Time to answer a room write "
                      "command.\n# TYPE roomd_command_duration_seconds histogram\n");
    for (int c = 0; c < CMD_COUNT_; c++) {
        const char *name = room_cmd_name((enum room_cmd_type)c);
        uint64_t cum = 0;
        for (size_t b = 0; b <= NBUCKETS; b++)
            cum += atomic_load_explicit(&buckets[c][b], memory_order_relaxed);
        if (cum == 0)
            continue;
        cum = 0;
        for (size_t b = 0; b < NBUCKETS; b++) {
            cum += atomic_load_explicit(&buckets[c][b], memory_order_relaxed);
            metrics_printf(t,
                           "roomd_command_duration_seconds_bucket{command=\"%s\",le=\"%g\"} "
                           "%" PRIu64 "\n",
                           name, (double)bucket_us[b] / 1e6, cum);
        }
        cum += atomic_load_explicit(&buckets[c][NBUCKETS], memory_order_relaxed);
        metrics_printf(t,
                       "roomd_command_duration_seconds_bucket{command=\"%s\",le=\"+Inf\"} "
                       "%" PRIu64 "\n",
                       name, cum);
        metrics_printf(t, "roomd_command_duration_seconds_sum{command=\"%s\"} %.6f\n", name,
                       (double)atomic_load_explicit(&sum_us[c], memory_order_relaxed) / 1e6);
        metrics_printf(t, "roomd_command_duration_seconds_count{command=\"%s\"} %" PRIu64 "\n",
                       name, cum);
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
    for (int c = 0; c < CMD_COUNT_; c++) {
        for (int s = 0; s < MAX_STATUS; s++)
            atomic_store(&commands[c][s], 0);
        for (size_t b = 0; b <= NBUCKETS; b++)
            atomic_store(&buckets[c][b], 0);
        atomic_store(&sum_us[c], 0);
    }
}
