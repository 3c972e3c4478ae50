/* SPDX-License-Identifier: Apache-2.0 */
/*
 * proj_room.h: helpers on struct proj_room (projection.h: the list entry
 * and the member uids for presence), internal to src/projection. Shared by
 * projection_memory.c and projection_redis.c so both answer the same JSON.
 *
 * Ranking of GET /v1/rooms: online count, then recent gifts (the gift value
 * of the current and the previous UTC hour), both descending; ties by
 * room_id descending. Closed rooms are not listed.
 */
#ifndef ROOMD_PROJ_ROOM_H
#define ROOMD_PROJ_ROOM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "projection/projection.h"

#define PROJ_HOUR_MS INT64_C(3600000)
#define PROJ_RECENT_CAP INT64_C(999999999) /* recent gifts clamp inside the list score */
#define PROJ_MAX_LIMIT 100

/* A deep copy of src into dst (dst's arrays its own: proj_room_clear). */
void proj_room_copy(struct proj_room *dst, const struct proj_room *src);

/* Gift buckets: advances (bucket, cur, prev) to hour hb adding delta. */
void proj_gift_buckets(int64_t hb, int64_t delta, int64_t *bucket, int64_t *cur, int64_t *prev);

/* The list score: online * 1e9 + min(recent, PROJ_RECENT_CAP). */
double proj_score(int64_t online, int64_t recent);

/* One list entry as JSON (new reference). */
json_t *proj_entry_json(const char *room_id, const char *title, int64_t owner_uid, int64_t online,
                        int64_t recent_gifts, int64_t gift_total, int64_t version,
                        int64_t updated_at_ms);

/* {"rooms":[...],"next_cursor":N|null} as a malloc'd string; steals rooms. */
char *proj_page_json(json_t *rooms, int64_t next_cursor);

/* {"uid":uid,"room_id":room|null} malloc'd. */
char *proj_presence_json(int64_t uid, const char *room_id, int64_t since_ms);

/* The largest cursor a page starts at: no list holds that many rooms, so a
 * larger cursor saturates to it and reads an empty page (next_cursor null);
 * cursor + limit never overflows, and stays exact as a Lua number. */
#define PROJ_MAX_CURSOR 1000000000000000LL

/* Clamps a page request: cursor 0..PROJ_MAX_CURSOR (saturating), limit
 * 1..PROJ_MAX_LIMIT (0 -> 20). */
void proj_clamp_page(int64_t *cursor, int *limit);

#endif
