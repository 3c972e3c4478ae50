/*
 * clock.h: time in integer milliseconds. Wall time (unix ms) is what the
 * store, events and the rocket use; monotonic time measures durations.
 * Tests can shift wall time with clock_set_offset_ms() (ROOMD_TESTING).
 * Thread: any. Never blocks.
 */
#ifndef ROOMD_CLOCK_H
#define ROOMD_CLOCK_H

#include <stddef.h>
#include <stdint.h>

int64_t clock_wall_ms(void);
int64_t clock_mono_ms(void);
/* Monotonic microseconds, for timing logs. */
int64_t clock_mono_us(void);
/* Adds offset to clock_wall_ms() (tests only; e.g. to cross 00:00 UTC). */
void clock_set_offset_ms(int64_t offset);
/* UTC day number (days since 1970-01-01) of unix ms t. */
int64_t clock_utc_day(int64_t t_ms);
/* Writes "2026-11-30T01:02:03.456Z" into buf (>= 25 bytes). */
void clock_format_utc(int64_t t_ms, char *buf, size_t len);

#endif
