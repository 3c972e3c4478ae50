/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cmd_leave.c: LeaveRoom. A member on a seat leaves the seat too.
 * Events: RoomMicChanged (on_mic=false, when seated), RoomUserLeft.
 */
#include "room/apply.h"

int
cmd_leave_apply(struct room_state *s, const struct room_cmd *cmd, int64_t now_ms,
                const struct conf_room *rc, struct room_events *ev, struct apply_error *e)
{
    int r;

    if ((r = apply_need_member(s, cmd->uid, e)) != 0)
        return r;
    apply_remove_member(s, cmd->uid, ev);
    apply_push_left(s, cmd->uid, "leave", ev);
    return 0;
}
