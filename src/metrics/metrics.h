/*
 * metrics.h: a small process-wide metrics registry rendered as Prometheus
 * text (GET /metrics, http/handlers_ops.c). The command path's counters and
 * latency histogram live here; other modules add gauges through collectors,
 * callbacks that append their own lines at render time.
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
 * (16 slots) is full. Remove it with metrics_remove_collector before arg dies. */
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
