/*
 * uuid.h: UUIDv7 (RFC 9562): 48-bit unix ms, then random bits, so event ids
 * sort by creation time. Thread: any. Never blocks (getrandom on a seeded
 * pool).
 */
#ifndef ROOMD_UUID_H
#define ROOMD_UUID_H

#include <stdint.h>

#define UUID_STR_LEN 37 /* 36 chars + NUL */

/* Writes a new UUIDv7 for time now_ms into out as lowercase text. */
void uuid_v7(int64_t now_ms, char out[UUID_STR_LEN]);

#endif
