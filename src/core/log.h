/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log.h: one log format, JSON lines. Every record is one JSON object on one
 * line, built with jansson (values escaped) and written with a single
 * write(2) so lines from many threads never interleave:
 *   {"ts":"2026-11-30T01:02:03.456Z","level":"warn","mod":"outbox",
 *    "msg":"publish failed, will retry","id":42,"err":"temporary failure, retry"}
 * Every record honours the level (app.log_level; log_set_level on SIGHUP).
 * Warn and error records are rate-limited per kind (mod, msg): at most
 * LOG_KIND_LINES of a kind per LOG_KIND_INTERVAL_MS, the rest counted and
 * reported by one {"msg":"log lines suppressed","kind":msg,"suppressed":N}
 * record per kind and interval (docs/ops.md), so no client can make roomd
 * write more than that however it floods.
 * log_reopen() reopens the file after logrotate moved it.
 * Thread: any. Blocks only on the write to the log file.
 */
#ifndef ROOMD_LOG_H
#define ROOMD_LOG_H

#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>

enum log_level { LOG_DEBUG = 0, LOG_INFO, LOG_WARN, LOG_ERROR };

/* Sends records to path (appending), or stderr when path is NULL or "".
 * Returns 0 or ROOMD_EIO. Thread: main, before starting threads. */
int log_open(const char *path, enum log_level min);
/* Closes the file; records go to stderr again. Thread: main, after the
 * threads that log stopped. */
void log_close(void);
/* Reopens the file log_open named (after a rotation) in place: a record
 * written meanwhile goes to the old or the new file, never lost. Returns 0
 * (also when logging to stderr) or ROOMD_EIO (the old file stays in use).
 * Thread: any; blocks on open(2). */
int log_reopen(void);
/* Changes the lowest level logged. Thread: any; never blocks. */
void log_set_level(enum log_level min);
/* True when a record at lvl would be written (skip building costly fields). */
bool log_enabled(enum log_level lvl);
/* Parses "debug|info|warn|error"; returns -1 when unknown. */
int log_level_parse(const char *s);
/* "debug".."error" for a level. */
const char *log_level_name(enum log_level lvl);

/*
 * Writes a record {"ts","level","mod","msg", fields...}. fmt (may be NULL)
 * yields the fields as "key=value key=value": a value runs to the next
 * " key=" (so it may hold spaces and commas), quotes around a value are
 * dropped, and a value made of digits alone becomes a JSON integer.
 */
void log_msg(enum log_level lvl, const char *mod, const char *msg, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Writes a record {"ts","level","mod","msg", ...fields}: the members of the
 * object fields (may be NULL), in their order. Takes the reference of fields. */
void log_fields(enum log_level lvl, const char *mod, const char *msg, json_t *fields);

#define log_debug(mod, msg, ...) log_msg(LOG_DEBUG, mod, msg, __VA_ARGS__)
#define log_info(mod, msg, ...) log_msg(LOG_INFO, mod, msg, __VA_ARGS__)
#define log_warn(mod, msg, ...) log_msg(LOG_WARN, mod, msg, __VA_ARGS__)
#define log_error(mod, msg, ...) log_msg(LOG_ERROR, mod, msg, __VA_ARGS__)

#define LOG_KIND_LINES 100        /* warn/error records of one kind per interval */
#define LOG_KIND_INTERVAL_MS 5000 /* so <= 20 lines/s per kind sustained, bursts of 100 */

/* Writes the "log lines suppressed" record of every kind whose interval
 * ended with lines suppressed. Call it about every second (the readiness
 * ticker does); a kind's next record does it too. Thread: any. */
void log_flush_suppressed(void);

/* The request this thread works for (http/server.c sets it per request,
 * clears it with NULLs): every record it writes meanwhile gets "request_id"
 * and, when set, "trace_id" (the W3C traceparent's trace-id). Copied (at
 * most 64 bytes each). Thread: the calling thread's own; never blocks. */
void log_set_request(const char *request_id, const char *traceparent);
/* This thread's request id and traceparent ("" when none): what a hop to
 * another node passes on (cluster/forward.c). Thread: own. */
const char *log_request_id(void);
const char *log_traceparent(void);

/* Before serving only: print "roomd: ..." to stderr and exit(1). */
void fatalx(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#endif
