/* SPDX-License-Identifier: Apache-2.0 */
/*
 * crash.h: fault injection for tests (ROOMD_TESTING builds only; a no-op in
 * release builds, where the environment is never read). test_crash("point")
 * kills the process with SIGKILL, as kill -9 would, when the environment
 * variable ROOMD_TEST_OUTBOX_CRASH is "point" (the first time the point is
 * reached) or "point:N" (the N-th time). The outbox worker's points
 * (docs/outbox.md, "Crash points"): after_claim (rows claimed, nothing
 * published), after_answer (the sinks answered, the completion not written),
 * in_complete (inside the completion's store transaction, before its commit).
 * Thread: any; never returns when it kills.
 */
#ifndef ROOMD_CORE_CRASH_H
#define ROOMD_CORE_CRASH_H

#ifdef ROOMD_TESTING
void test_crash(const char *point);
#else
#define test_crash(point) ((void)0)
#endif

#endif
