/* SPDX-License-Identifier: Apache-2.0 */
/*
 * proj_room.c: copying and clearing a struct proj_room, and the JSON both
 * backends answer (proj_room.h).
 */
#include "projection/proj_room.h"

#include "core/xmalloc.h"

#include <stdlib.h>
#include <string.h>

void
proj_room_copy(struct proj_room *dst, const struct proj_room *src)
{
    *dst = *src;
    dst->uids = xmemdup(src->uids, src->nuids * sizeof(int64_t));
    dst->joined_ms = xmemdup(src->joined_ms, src->nuids * sizeof(int64_t));
}

void
proj_room_clear(struct proj_room *r)
{
    free(r->uids);
    free(r->joined_ms);
    memset(r, 0, sizeof(*r));
}

void
proj_gift_buckets(int64_t hb, int64_t delta, int64_t *bucket, int64_t *cur, int64_t *prev)
{
    if (delta < 0)
        delta = 0;
    if (hb <= *bucket) {
        *cur += delta; /* same hour (or a clock step back) */
    } else if (hb == *bucket + 1) {
        *prev = *cur;
        *cur = delta;
        *bucket = hb;
    } else {
        *prev = 0;
        *cur = delta;
        *bucket = hb;
    }
}

double
proj_score(int64_t online, int64_t recent)
{
    if (recent > PROJ_RECENT_CAP)
        recent = PROJ_RECENT_CAP;
    if (recent < 0)
        recent = 0;
    return (double)online * 1e9 + (double)recent;
}

json_t *
proj_entry_json(const char *room_id, const char *title, int64_t owner_uid, int64_t online,
                int64_t recent_gifts, int64_t gift_total, int64_t version, int64_t updated_at_ms)
{
    return json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I}", "room_id", room_id, "title", title,
                     "owner_uid", (json_int_t)owner_uid, "online", (json_int_t)online,
                     "recent_gifts", (json_int_t)recent_gifts, "gift_total", (json_int_t)gift_total,
                     "version", (json_int_t)version, "updated_at_ms", (json_int_t)updated_at_ms);
}

char *
proj_page_json(json_t *rooms, int64_t next_cursor)
{
    json_t *o = json_object();
    char *s;

    json_object_set_new(o, "rooms", rooms);
    json_object_set_new(o, "next_cursor",
                        next_cursor >= 0 ? json_integer(next_cursor) : json_null());
    s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

char *
proj_presence_json(int64_t uid, const char *room_id, int64_t since_ms)
{
    json_t *o = json_object();
    char *s;

    json_object_set_new(o, "uid", json_integer(uid));
    json_object_set_new(o, "room_id", room_id ? json_string(room_id) : json_null());
    if (room_id != NULL && since_ms > 0)
        json_object_set_new(o, "since_ms", json_integer(since_ms));
    s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

void
proj_clamp_page(int64_t *cursor, int *limit)
{
    if (*cursor < 0)
        *cursor = 0;
    if (*cursor > PROJ_MAX_CURSOR)
        *cursor = PROJ_MAX_CURSOR;
    if (*limit <= 0)
        *limit = 20;
    if (*limit > PROJ_MAX_LIMIT)
        *limit = PROJ_MAX_LIMIT;
}
