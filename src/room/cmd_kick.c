/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cmd_kick.c: KickUser, by the owner only (409 forbidden), of a member
 * other than the owner. The user loses the seat and membership and cannot
 * rejoin before now + kick_ban_ms. Events: RoomMicChanged (when seated),
 * RoomUserKicked, RoomUserLeft (reason "kicked").
 */
#include "room/apply.h"

#include "conf/conf.h"
#include "core/err.h"
#include "core/xmalloc.h"
#include "room_events.pb-c.h"

static void
ban(struct room_state *s, int64_t uid, int64_t until_ms)
{
    for (size_t i = 0; i < s->nbans; i++)
        if (s->bans[i].uid == uid) {
            s->bans[i].until_ms = until_ms;
            return;
        }
    s->bans = xgrow(s->bans, s->nbans, &s->cap_bans, sizeof(*s->bans));
    s->bans[s->nbans].uid = uid;
    s->bans[s->nbans].until_ms = until_ms;
    s->nbans++;
}

int
cmd_kick_apply(struct room_state *s, const struct room_cmd *cmd, int64_t now_ms,
               const struct conf_room *rc, struct room_events *ev, struct apply_error *e)
{
    Roomd__V1__RoomUserKicked k = ROOMD__V1__ROOM_USER_KICKED__INIT;
    int64_t until = rc->kick_ban_ms > 0 ? now_ms + rc->kick_ban_ms : 0;
    int r;

    if (cmd->operator_uid != s->owner_uid)
        return apply_fail(e, ROOMD_ECONFLICT, "forbidden", "only the owner may kick");
    if (cmd->uid == s->owner_uid)
        return apply_fail(e, ROOMD_ECONFLICT, "forbidden", "the owner cannot be kicked");
    if ((r = apply_need_member(s, cmd->uid, e)) != 0)
        return r;
    apply_remove_member(s, cmd->uid, ev);
    if (until > 0)
        ban(s, cmd->uid, until);

    k.operator_uid = cmd->operator_uid;
    k.uid = cmd->uid;
    k.reason = (char *)cmd->reason;
    k.ban_until_ms = until;
    room_events_push(ev, "RoomUserKicked", &k.base);
    apply_push_left(s, cmd->uid, "kicked", ev);
    return 0;
}
