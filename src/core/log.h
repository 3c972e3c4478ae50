/*
 * log.h: one line per record, written with a single write(2) so lines from
 * many threads never interleave. Text records are logfmt:
 *   ts=2026-11-30T01:02:03.456Z level=warn mod=outbox msg="publish failed" id=42
 * Structured records (room_command_timing) are one JSON object per line.
 * Thread: any. Blocks only on the write to the log file.
 */
#ifndef ROOMD_LOG_H
#define ROOMD_LOG_H

#include <stdarg.h>

enum log_level { LOG_DEBUG = 0, LOG_INFO, LOG_WARN, LOG_ERROR };

/* Sends records to path (appending), or stderr when path is NULL or "".
 * Returns 0 or ROOMD_EIO. Call before starting threads. */
int log_open(const char *path, enum log_level min);
void log_close(void);
/* Parses "debug|info|warn|error"; returns -1 when unknown. */
int log_level_parse(const char *s);

/* Formats a logfmt record. fmt yields the k=v tail after msg, may be NULL. */
void log_msg(enum log_level lvl, const char *mod, const char *msg, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Writes one pre-built JSON object as a line. The string is borrowed. */
void log_json_line(const char *json);

#define log_debug(mod, msg, ...) log_msg(LOG_DEBUG, mod, msg, __VA_ARGS__)
#define log_info(mod, msg, ...) log_msg(LOG_INFO, mod, msg, __VA_ARGS__)
#define log_warn(mod, msg, ...) log_msg(LOG_WARN, mod, msg, __VA_ARGS__)
#define log_error(mod, msg, ...) log_msg(LOG_ERROR, mod, msg, __VA_ARGS__)

/* Before serving only: print to stderr and exit(1). */
void fatalx(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#endif
