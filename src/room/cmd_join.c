/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cmd_join.c: JoinRoom. Refused when already a member (409 already_member:
 * a repeated join is a client bug or a retry with a new command_id, and the
 * answer tells it so), while banned by a kick (409 banned), or when the room
 * holds max_members (409 room_full). Expired bans are dropped here.
 * Event: RoomUserJoined.
 */
#include "room/apply.h"

#include "conf/conf.h"
#include "core/err.h"
#include "core/xmalloc.h"
#include "room_events.pb-c.h"

#include <string.h>

static void
prune_bans(struct room_state *s, int64_t now_ms)
{
    size_t j = 0;

    for (size_t i = 0; i < s->nbans; i++)
        if (s->bans[i].until_ms > now_ms)
            s->bans[j++] = s->bans[i];
    s->nbans = j;
}

int
cmd_join_apply(struct room_state *s, const struct room_cmd *cmd, int64_t now_ms,
               const struct conf_room *rc, struct room_events *ev, struct apply_error *e)
{
    Roomd__V1__RoomUserJoined m = ROOMD__V1__ROOM_USER_JOINED__INIT;

    if (room_state_member_index(s, cmd->uid) >= 0)
        return apply_fail(e, ROOMD_ECONFLICT, "already_member", "uid %lld is already a member",
                          (long long)cmd->uid);
    prune_bans(s, now_ms);
    for (size_t i = 0; i < s->nbans; i++)
        if (s->bans[i].uid == cmd->uid)
            return apply_fail(e, ROOMD_ECONFLICT, "banned",
                              "uid %lld was kicked and is banned until %lld", (long long)cmd->uid,
                              (long long)s->bans[i].until_ms);
    if (rc->max_members > 0 && s->nmembers >= (size_t)rc->max_members)
        return apply_fail(e, ROOMD_ECONFLICT, "room_full", "room holds %d members already",
                          rc->max_members);
    s->members = xgrow(s->members, s->nmembers, &s->cap_members, sizeof(*s->members));
    s->members[s->nmembers].uid = cmd->uid;
    s->members[s->nmembers].joined_at_ms = now_ms;
    s->nmembers++;

    m.uid = cmd->uid;
    m.member_count = (int32_t)s->nmembers;
    room_events_push(ev, "RoomUserJoined", &m.base);
    return 0;
}
