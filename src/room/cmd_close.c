/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cmd_close.c: CloseRoom, by the owner only (409 forbidden). Everyone
 * leaves and every seat is freed; an ignited rocket is dropped (it will
 * never launch). Afterwards every command answers 409 room_closed.
 * Event: RoomClosed (one event, not one RoomUserLeft per member).
 */
#include "room/apply.h"

#include "core/err.h"
#include "room_events.pb-c.h"

#include <string.h>

int
cmd_close_apply(struct room_state *s, const struct room_cmd *cmd, int64_t now_ms,
                const struct conf_room *rc, struct room_events *ev, struct apply_error *e)
{
    Roomd__V1__RoomClosed m = ROOMD__V1__ROOM_CLOSED__INIT;

    if (cmd->operator_uid != s->owner_uid)
        return apply_fail(e, ROOMD_ECONFLICT, "forbidden", "only the owner may close the room");
    s->status = ROOM_CLOSED;
    s->nmembers = 0;
    memset(s->seats, 0, sizeof(s->seats));
    if (s->rocket.status == ROCKET_IGNITED) {
        s->rocket.status = ROCKET_IDLE;
        s->rocket.rocket_id[0] = '\0';
        s->rocket.ignited_at_ms = 0;
        s->rocket.launch_at_ms = 0;
    }
    m.operator_uid = cmd->operator_uid;
    room_events_push(ev, "RoomClosed", &m.base);
    return 0;
}
