/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metrics.h: a small process-wide metrics registry rendered as Prometheus
 * text (GET /metrics, http/handlers_ops.c), and the one exposition helper
 * every producer writes its lines with (metrics_family, metrics_count,
 * metrics_value, metrics_histogram). The command counters and latency
 * histogram live here (the command names come from the room layer through
 * metrics_command_names, so this module includes nothing above core/); other
 * modules own their metrics through collectors, callbacks that append their
 * lines at render time (outbox/worker.c, outbox/metrics.c, http).
 * Thread: any; recording is lock-free (atomics), rendering takes a mutex.
 */
#ifndef ROOMD_METRICS_H
#define ROOMD_METRICS_H

#include <stddef.h>
#include <stdint.h>

/* A growing text buffer a collector appends to. */
struct metrics_text {
    char *p;
    size_t len, cap;
};

/* Appends formatted text (aborts on OOM). */
void metrics_printf(struct metrics_text *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The exposition helper. labels is "" or the label pairs without braces
 * (`status="pending"`); every string is the caller's and only read. */
/* "# HELP name help" and "# TYPE name type" (counter, gauge, histogram). */
void metrics_family(struct metrics_text *t, const char *name, const char *type, const char *help);
/* One sample "name{labels} v" with an integer value. */
void metrics_count(struct metrics_text *t, const char *name, const char *labels, uint64_t v);
/* A counter family of one sample without labels: metrics_family, then
 * metrics_count. */
void metrics_counter(struct metrics_text *t, const char *name, const char *help, uint64_t v);
/* One sample with a real value (seconds, ages), printed with 6 decimals. */
void metrics_value(struct metrics_text *t, const char *name, const char *labels, double v);
/* One histogram series: name_bucket{labels,le} for each upper bound le_us[i]
 * (µs, printed in seconds) with cum[i] observations at or below it, then
 * le="+Inf" and name_count (total), name_sum (sum_us in seconds). */
void metrics_histogram(struct metrics_text *t, const char *name, const char *labels,
                       const int64_t *le_us, const uint64_t *cum, size_t n, uint64_t total,
                       int64_t sum_us);

/* The most command types metrics_command_names takes. */
#define METRICS_MAX_COMMANDS 16

/* Names command types 0..n-1 (n <= METRICS_MAX_COMMANDS; names borrowed,
 * static) for roomd_commands_total and roomd_command_duration_seconds; a
 * type without a name is counted but not rendered. room_service_open calls
 * it with room_cmd_name's table. Thread: main, before the first render. */
void metrics_command_names(const char *const *names, int n);

/*
 * Records one write command: its type (enum room_cmd_type), the HTTP status
 * it answered and how long it took. Feeds roomd_commands_total{command,status}
 * and roomd_command_duration_seconds{command}. Out-of-range values are
 * dropped. Thread: any, never blocks.
 */
void metrics_command_observe(int cmd_type, int http_status, int64_t duration_us);

/* Appends gauges/counters of one module to t (called under the registry lock). */
typedef void (*metrics_collector_fn)(void *arg, struct metrics_text *t);

/* Adds a collector (fn, arg); returns 0, or ROOMD_ENOMEM when the table
 * (32 slots) is full. Remove it with metrics_remove_collector before arg dies. */
int metrics_add_collector(metrics_collector_fn fn, void *arg);
void metrics_remove_collector(metrics_collector_fn fn, void *arg);

/* Returns the whole exposition text, malloc'd (caller frees). Calls every
 * collector; blocks as long as they do. */
char *metrics_render(void);

/* Appends roomd_build_info and the standard process_* metrics (process.c),
 * read from /proc/self now. metrics_render calls it. Thread: any; blocks on
 * reading /proc. */
void metrics_render_process(struct metrics_text *t);

/* Zeroes the command counters (unit tests). */
void metrics_reset(void);

#endif
