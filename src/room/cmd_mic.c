/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cmd_mic.c: MicUp and MicDown. Only members take seats; a member holds at
 * most one seat. MicUp with a seat takes that seat (409 seat_taken), without
 * one the first free seat (409 no_free_seat). Event: RoomMicChanged.
 */
#include "room/apply.h"

#include "core/err.h"
#include "room_events.pb-c.h"

static void
push_mic(struct room_events *ev, int64_t uid, int seat, int on)
{
    Roomd__V1__RoomMicChanged m = ROOMD__V1__ROOM_MIC_CHANGED__INIT;

    m.uid = uid;
    m.seat = seat;
    m.on_mic = on;
    room_events_push(ev, "RoomMicChanged", &m.base);
}

int
cmd_mic_up_apply(struct room_state *s, const struct room_cmd *cmd, int64_t now_ms,
                 const struct conf_room *rc, struct room_events *ev, struct apply_error *e)
{
    int seat = cmd->seat, r;

    if ((r = apply_need_member(s, cmd->uid, e)) != 0)
        return r;
    if (seat >= s->nseats)
        return apply_fail(e, ROOMD_EINVAL, "invalid_argument", "seat: must be 0..%d",
                          s->nseats - 1);
    if ((seat = room_state_seat_of(s, cmd->uid)) >= 0)
        return apply_fail(e, ROOMD_ECONFLICT, "already_on_mic", "uid %lld is on seat %d",
                          (long long)cmd->uid, seat);
    seat = cmd->seat;
    if (seat >= 0) {
        if (s->seats[seat] != 0)
            return apply_fail(e, ROOMD_ECONFLICT, "seat_taken", "seat %d is taken by uid %lld",
                              seat, (long long)s->seats[seat]);
    } else {
        for (int i = 0; i < s->nseats && seat < 0; i++)
            if (s->seats[i] == 0)
                seat = i;
        if (seat < 0)
            return apply_fail(e, ROOMD_ECONFLICT, "no_free_seat", "all %d seats are taken",
                              s->nseats);
    }
    s->seats[seat] = cmd->uid;
    push_mic(ev, cmd->uid, seat, 1);
    return 0;
}

int
cmd_mic_down_apply(struct room_state *s, const struct room_cmd *cmd, int64_t now_ms,
                   const struct conf_room *rc, struct room_events *ev, struct apply_error *e)
{
    int seat, r;

    if ((r = apply_need_member(s, cmd->uid, e)) != 0)
        return r;
    if ((seat = room_state_seat_of(s, cmd->uid)) < 0)
        return apply_fail(e, ROOMD_ECONFLICT, "not_on_mic", "uid %lld is not on a seat",
                          (long long)cmd->uid);
    s->seats[seat] = 0;
    push_mic(ev, cmd->uid, seat, 0);
    return 0;
}
