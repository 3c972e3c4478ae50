/* SPDX-License-Identifier: Apache-2.0 */
/*
 * checked.h: integer arithmetic that never wraps. Money and counters add
 * through these: a caller either refuses the operation (i64_add_ok false:
 * answer a 4xx naming the field) or saturates where its documentation says
 * so (i64_add_sat: room gift totals, rocket energy, list cursors).
 * Pure inline functions; thread: any.
 */
#ifndef ROOMD_CORE_CHECKED_H
#define ROOMD_CORE_CHECKED_H

#include <stdbool.h>
#include <stdint.h>

/* Returns true and *out = a + b, or false (and *out untouched) when the sum
 * does not fit in int64_t. */
static inline bool
i64_add_ok(int64_t a, int64_t b, int64_t *out)
{
    int64_t r;

    if (__builtin_add_overflow(a, b, &r))
        return false;
    *out = r;
    return true;
}

/* Returns a + b clamped to [INT64_MIN, INT64_MAX]. */
static inline int64_t
i64_add_sat(int64_t a, int64_t b)
{
    int64_t r;

    if (__builtin_add_overflow(a, b, &r))
        return b > 0 ? INT64_MAX : INT64_MIN;
    return r;
}

#endif
