/*
 * cmd_leave.c: LeaveRoom. A member on a seat leaves the seat too.
 * Events: RoomMicChanged (on_mic=false, when seated), RoomUserLeft.
 */
#include "room/apply.h"

#include "core/err.h"
#include "room_events.pb-c.h"

int
cmd_leave_apply(struct room_state *s, const struct room_cmd *cmd, int64_t now_ms,
                const struct conf_room *rc, struct room_events *ev, struct apply_error *e)
{
    Roomd__V1__RoomMicChanged mic = ROOMD__V1__ROOM_MIC_CHANGED__INIT;
    Roomd__V1__RoomUserLeft m = ROOMD__V1__ROOM_USER_LEFT__INIT;
    int seat;

    if (room_state_member_index(s, cmd->uid) < 0)
        return apply_fail(e, ROOMD_ECONFLICT, "not_member", "uid %lld is not a member",
                          (long long)cmd->uid);
    if ((seat = room_state_seat_of(s, cmd->uid)) >= 0) {
        s->seats[seat] = 0;
        mic.uid = cmd->uid;
        mic.seat = seat;
        mic.on_mic = 0;
        room_events_push(ev, "RoomMicChanged", &mic.base);
    }
    room_state_remove_member(s, cmd->uid);
    m.uid = cmd->uid;
    m.member_count = (int32_t)s->nmembers;
    m.reason = "leave";
    room_events_push(ev, "RoomUserLeft", &m.base);
    return 0;
}
