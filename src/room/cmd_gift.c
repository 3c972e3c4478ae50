/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cmd_gift.c: SendGift. Sender and receiver must be members. The value
 * count*unit_price adds to the room's gift total, count*energy_per_unit
 * charges the rocket (cmd_rocket.c; the catalog's energy, else the value); the wallet debit happens
 * in service.c, not here, so a replay never charges. gift_total and the rocket energy saturate at
 * INT64_MAX (docs/room.md) instead of wrapping. Events: RoomGiftSent, then RoomRocketIgnited when
 * this gift reached the level's threshold.
 */
#include "room/apply.h"

#include "core/checked.h"
#include "core/err.h"
#include "room_events.pb-c.h"

int
cmd_gift_apply(struct room_state *s, const struct room_cmd *cmd, int64_t now_ms,
               const struct conf_room *rc, struct room_events *ev, struct apply_error *e)
{
    Roomd__V1__RoomGiftSent m = ROOMD__V1__ROOM_GIFT_SENT__INIT;
    int64_t total = cmd->count * cmd->unit_price;
    int64_t energy = cmd->count * cmd->energy_per_unit; /* <= 9999e9 */
    bool ignited;
    int r;

    if ((r = apply_need_member(s, cmd->uid, e)) != 0)
        return r;
    if (room_state_member_index(s, cmd->to_uid) < 0)
        return apply_fail(e, ROOMD_ECONFLICT, "not_member", "to_uid %lld is not a member",
                          (long long)cmd->to_uid);
    s->gift_total = i64_add_sat(s->gift_total, total); /* documented: saturates */
    ignited = rocket_add_energy(s, energy, now_ms, rc);

    m.uid = cmd->uid;
    m.to_uid = cmd->to_uid;
    m.gift_id = (char *)cmd->gift_id;
    m.count = (int32_t)cmd->count;
    m.unit_price = cmd->unit_price;
    m.total = total;
    m.rocket_level = s->rocket.level;
    m.rocket_energy = s->rocket.energy;
    room_events_push(ev, "RoomGiftSent", &m.base);
    if (ignited)
        rocket_push_ignited(s, ev);
    return 0;
}
