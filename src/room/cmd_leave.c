/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cmd_leave.c: LeaveRoom. A member on a seat leaves the seat too.
 * Events: RoomMicChanged (on_mic=false, when seated), RoomUserLeft (reason
 * "leave", or "idle" for roomd's own leave of a silent member: its reserved
 * command_id says so, in the log too, so a replay gives the same event).
 */
#include "room/apply.h"

#include <string.h>

int
cmd_leave_apply(struct room_state *s, const struct room_cmd *cmd, int64_t now_ms,
                const struct conf_room *rc, struct room_events *ev, struct apply_error *e)
{
    int r;

    if ((r = apply_need_member(s, cmd->uid, e)) != 0)
        return r;
    apply_remove_member(s, cmd->uid, ev);
    apply_push_left(
        s, cmd->uid,
        strncmp(cmd->command_id, ROOM_IDLE_LEAVE_PREFIX, strlen(ROOM_IDLE_LEAVE_PREFIX)) == 0
            ? "idle"
            : "leave",
        ev);
    return 0;
}
