/* SPDX-License-Identifier: Apache-2.0 */
/*
 * uuid.h: UUIDv7 (RFC 9562): 48-bit unix ms, then random bits, so event ids
 * sort by creation time (to the millisecond; ids of the same millisecond are
 * in no particular order). The random bits come from getrandom, drawn in
 * bulk per thread; ids stay unique across threads, processes and fork.
 * Thread: any. Never blocks (getrandom on a seeded pool); aborts when
 * getrandom fails.
 */
#ifndef ROOMD_UUID_H
#define ROOMD_UUID_H

#include <stdint.h>

#define UUID_STR_LEN 37 /* 36 chars + NUL */

/* Writes a new UUIDv7 for time now_ms into out as lowercase text. */
void uuid_v7(int64_t now_ms, char out[UUID_STR_LEN]);

#endif
