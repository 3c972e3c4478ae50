/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cmd_rocket.c: the room rocket (ARCHITECTURE §5). Gifts charge the current
 * level; reaching thresholds[level-1] ignites it (RoomRocketIgnited, with a
 * deterministic rocket_id "<room_id>-<utc_day>-<level>" and launch_at_ms =
 * now + countdown); while ignited, gifts add no energy. LaunchRocket (the
 * wake-up at launch_at_ms) re-checks status, rocket_id, level, launch_at_ms
 * and the UTC day, then launches (level + 1; after the last level the rocket
 * is done for the day) or refuses with rocket_stale (nothing is written).
 * At 00:00 UTC everything resets, lazily on the room's next command.
 */
#include "room/apply.h"

#include "conf/conf.h"
#include "core/checked.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/xmalloc.h"
#include "room_events.pb-c.h"

#include <stdio.h>
#include <string.h>

void
rocket_init(struct room_rocket *r, int64_t now_ms)
{
    memset(r, 0, sizeof(*r));
    r->status = ROCKET_IDLE;
    r->level = 1;
    r->utc_day = clock_utc_day(now_ms);
}

void
rocket_reset_if_new_day(struct room_state *s, int64_t now_ms, struct room_events *ev)
{
    Roomd__V1__RoomRocketReset m = ROOMD__V1__ROOM_ROCKET_RESET__INIT;
    int64_t day = clock_utc_day(now_ms);

    if (day <= s->rocket.utc_day)
        return;
    m.previous_level = s->rocket.level;
    m.utc_day = day;
    rocket_init(&s->rocket, now_ms);
    room_events_push(ev, "RoomRocketReset", &m.base);
}

bool
rocket_add_energy(struct room_state *s, int64_t amount, int64_t now_ms, const struct conf_room *rc)
{
    struct room_rocket *r = &s->rocket;
    const struct conf_rocket *cr = &rc->rocket;

    if (r->status != ROCKET_IDLE || r->level < 1 || r->level > cr->nthresholds)
        return false;
    r->energy = i64_add_sat(r->energy, amount); /* saturates: ignites at any threshold */
    if (r->energy < cr->thresholds[r->level - 1])
        return false;
    r->status = ROCKET_IGNITED;
    /* room_id <= 48 bytes, so this fits in 63; checked anyway. */
    if (snprintf(r->rocket_id, sizeof(r->rocket_id), "%s-%lld-%d", s->room_id,
                 (long long)r->utc_day, r->level) >= (int)sizeof(r->rocket_id))
        r->rocket_id[sizeof(r->rocket_id) - 1] = '\0';
    r->ignited_at_ms = now_ms;
    r->launch_at_ms = i64_add_sat(now_ms, cr->countdown_ms);
    return true;
}

void
rocket_push_ignited(const struct room_state *s, struct room_events *ev)
{
    Roomd__V1__RoomRocketIgnited m = ROOMD__V1__ROOM_ROCKET_IGNITED__INIT;
    char cid[STORE_ID_MAX];

    rocket_launch_command_id(s->rocket.rocket_id, cid, sizeof(cid));
    m.rocket_id = (char *)s->rocket.rocket_id;
    m.level = s->rocket.level;
    m.launch_at_ms = s->rocket.launch_at_ms;
    m.launch_command_id = cid;
    room_events_push(ev, "RoomRocketIgnited", &m.base);
}

int
cmd_launch_apply(struct room_state *s, const struct room_cmd *cmd, int64_t now_ms,
                 const struct conf_room *rc, struct room_events *ev, struct apply_error *e)
{
    Roomd__V1__RoomRocketLaunched m = ROOMD__V1__ROOM_ROCKET_LAUNCHED__INIT;
    struct room_rocket *r = &s->rocket;

    if (r->status != ROCKET_IGNITED || strcmp(r->rocket_id, cmd->rocket_id) != 0 ||
        r->level != cmd->level || r->launch_at_ms != cmd->launch_at_ms)
        return apply_fail(e, ROOMD_ECONFLICT, "rocket_stale",
                          "rocket %s level %d is not the ignited rocket", cmd->rocket_id,
                          cmd->level);
    if (now_ms < r->launch_at_ms)
        return apply_fail(e, ROOMD_ECONFLICT, "rocket_stale",
                          "rocket %s launches at %lld, not before", cmd->rocket_id,
                          (long long)r->launch_at_ms);
    if (clock_utc_day(now_ms) != r->utc_day)
        return apply_fail(e, ROOMD_ECONFLICT, "rocket_stale",
                          "rocket %s belongs to an earlier UTC day", cmd->rocket_id);

    m.rocket_id = r->rocket_id;
    m.level = r->level;
    m.launched_at_ms = now_ms;
    room_events_push(ev, "RoomRocketLaunched", &m.base);

    r->launched++;
    r->energy = 0;
    r->rocket_id[0] = '\0';
    r->ignited_at_ms = 0;
    r->launch_at_ms = 0;
    if (r->level >= rc->rocket.nthresholds) {
        r->status = ROCKET_DONE;
    } else {
        r->status = ROCKET_IDLE;
        r->level++;
    }
    return 0;
}
