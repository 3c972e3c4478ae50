/* SPDX-License-Identifier: Apache-2.0 */
/* clock.c: wall and monotonic milliseconds (see clock.h). */
#include "core/clock.h"

#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

static _Atomic int64_t wall_offset;

int64_t
clock_wall_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + atomic_load(&wall_offset);
}

int64_t
clock_mono_ms(void)
{
    return clock_mono_us() / 1000;
}

int64_t
clock_mono_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void
clock_mono_deadline(struct timespec *ts, int64_t ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += (time_t)(ms / 1000);
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

void
clock_cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t ca;

    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
}

void
clock_set_offset_ms(int64_t offset)
{
    atomic_store(&wall_offset, offset);
}

int64_t
clock_utc_day(int64_t t_ms)
{
    int64_t d = t_ms / 86400000;

    if (t_ms < 0 && t_ms % 86400000 != 0)
        d--;
    return d;
}

void
clock_format_utc(int64_t t_ms, char *buf, size_t len)
{
    time_t secs = (time_t)(t_ms / 1000);
    struct tm tm;

    gmtime_r(&secs, &tm);
    snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(t_ms % 1000));
}
