/* SPDX-License-Identifier: Apache-2.0 */
/*
 * clock.h: time in integer milliseconds. Wall time (unix ms) is what the
 * store, events and the rocket use; monotonic time measures durations.
 * Tests can shift wall time with clock_set_offset_ms() (ROOMD_TESTING).
 * Thread: any. Never blocks.
 */
#ifndef ROOMD_CLOCK_H
#define ROOMD_CLOCK_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

int64_t clock_wall_ms(void);
int64_t clock_mono_ms(void);
/* Monotonic microseconds, for timing logs. */
int64_t clock_mono_us(void);
/* Adds offset to clock_wall_ms() (tests only; e.g. to cross 00:00 UTC). */
void clock_set_offset_ms(int64_t offset);
/* UTC day number (days since 1970-01-01) of unix ms t. */
int64_t clock_utc_day(int64_t t_ms);
/* Sets *ts to the CLOCK_MONOTONIC time ms from now: the deadline of a
 * pthread_cond_timedwait on a condition made by clock_cond_init. */
void clock_mono_deadline(struct timespec *ts, int64_t ms);
/* Initializes cv (default attributes but the clock) to time its waits on
 * CLOCK_MONOTONIC, so a wall clock step does not shorten or stretch them. */
void clock_cond_init(pthread_cond_t *cv);
/* Writes "2026-11-30T01:02:03.456Z" into buf (>= 25 bytes). */
void clock_format_utc(int64_t t_ms, char *buf, size_t len);

#endif
