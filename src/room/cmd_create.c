/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cmd_create.c: CreateRoom. The room starts open, empty (the owner joins
 * like anyone else), with seat_count seats and a fresh rocket of the day.
 * Event: RoomCreated.
 */
#include "room/apply.h"

#include "conf/conf.h"
#include "core/xmalloc.h"
#include "room_events.pb-c.h"

int
cmd_create_apply(struct room_state *s, const struct room_cmd *cmd, int64_t now_ms,
                 const struct conf_room *rc, struct room_events *ev, struct apply_error *e)
{
    Roomd__V1__RoomCreated m = ROOMD__V1__ROOM_CREATED__INIT;

    s->owner_uid = cmd->owner_uid;
    strlcpy_(s->title, cmd->title, sizeof(s->title));
    s->status = ROOM_OPEN;
    s->created_at_ms = now_ms;
    s->nseats = rc->seat_count < 0                ? 0
                : rc->seat_count > ROOM_MAX_SEATS ? ROOM_MAX_SEATS
                                                  : rc->seat_count;
    rocket_init(&s->rocket, now_ms);

    m.owner_uid = s->owner_uid;
    m.title = s->title;
    m.seat_count = s->nseats;
    room_events_push(ev, "RoomCreated", &m.base);
    return 0;
}
