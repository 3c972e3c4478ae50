/* SPDX-License-Identifier: Apache-2.0 */
/*
 * crash.c: fault injection for tests (crash.h).
 */
#include "core/crash.h"

#ifdef ROOMD_TESTING
#include "core/log.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

void
test_crash(const char *point)
{
    static atomic_long hits;
    const char *want = getenv("ROOMD_TEST_OUTBOX_CRASH");
    size_t len = strlen(point);

    if (want == NULL || strncmp(want, point, len) != 0 || (want[len] != '\0' && want[len] != ':'))
        return;
    long n = want[len] == ':' ? atol(want + len + 1) : 1;
    if (atomic_fetch_add(&hits, 1) + 1 < n)
        return;
    log_warn("outbox", "test hook: killed", "point=%s", point);
    raise(SIGKILL);
}
#else
typedef int crash_c_is_empty_in_release_builds;
#endif
