/* SPDX-License-Identifier: Apache-2.0 */
/* backoff.c: exponential backoff with equal jitter (see backoff.h). */
#include "core/backoff.h"

#include <sys/random.h>

int64_t
backoff_ceiling_ms(int retry_count, int64_t initial_ms, int64_t max_ms)
{
    int64_t d = initial_ms;

    for (int i = 1; i < retry_count && d < max_ms; i++)
        d *= 2;
    return d < max_ms ? d : max_ms;
}

int64_t
backoff_delay_ms(int retry_count, int64_t initial_ms, int64_t max_ms)
{
    int64_t d = backoff_ceiling_ms(retry_count, initial_ms, max_ms);
    uint32_t r = 0;
    int64_t half = d / 2;

    if (getrandom(&r, sizeof(r), 0) != sizeof(r))
        r = 0;
    return half + (half > 0 ? (int64_t)(r % (uint64_t)(d - half + 1)) : 0);
}
