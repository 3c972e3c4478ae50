/* SPDX-License-Identifier: Apache-2.0 */
/*
 * apply.c: room_apply(), the one pure step shared by the live path and the
 * replay: the checks common to all commands (room exists, not closed), the
 * lazy UTC-day rocket reset, dispatch to the command's cmd_*.c, then the
 * version bump. Also the event packing helper. Time comes only from now_ms,
 * ids only from the command, so a replay reproduces the state exactly.
 */
#include "room/apply.h"

#include "conf/conf.h"
#include "core/err.h"
#include "core/xmalloc.h"
#include "room_events.pb-c.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int
apply_fail(struct apply_error *e, int rc, const char *code, const char *fmt, ...)
{
    va_list ap;

    strlcpy_(e->code, code, sizeof(e->code));
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof(e->message), fmt, ap);
    va_end(ap);
    return rc;
}

void
room_events_push(struct room_events *ev, const char *type, const ProtobufCMessage *m)
{
    struct room_event *e;

    ev->v = xgrow(ev->v, ev->n, &ev->cap, sizeof(*ev->v));
    e = &ev->v[ev->n++];
    e->type = type;
    e->payload_len = protobuf_c_message_get_packed_size(m);
    e->payload = xmalloc(e->payload_len ? e->payload_len : 1);
    protobuf_c_message_pack(m, e->payload);
}

int
apply_need_member(const struct room_state *s, int64_t uid, struct apply_error *e)
{
    if (room_state_member_index(s, uid) >= 0)
        return 0;
    return apply_fail(e, ROOMD_ECONFLICT, "not_member", "uid %lld is not a member", (long long)uid);
}

void
apply_remove_member(struct room_state *s, int64_t uid, struct room_events *ev)
{
    int seat = room_state_seat_of(s, uid), i;

    if (seat >= 0) {
        Roomd__V1__RoomMicChanged mic = ROOMD__V1__ROOM_MIC_CHANGED__INIT;

        s->seats[seat] = 0;
        mic.uid = uid;
        mic.seat = seat;
        mic.on_mic = 0;
        room_events_push(ev, "RoomMicChanged", &mic.base);
    }
    if ((i = room_state_member_index(s, uid)) < 0)
        return;
    memmove(&s->members[i], &s->members[i + 1],
            (s->nmembers - (size_t)i - 1) * sizeof(*s->members));
    s->nmembers--;
}

void
apply_push_left(const struct room_state *s, int64_t uid, const char *reason, struct room_events *ev)
{
    Roomd__V1__RoomUserLeft left = ROOMD__V1__ROOM_USER_LEFT__INIT;

    left.uid = uid;
    left.member_count = (int32_t)s->nmembers;
    left.reason = (char *)reason;
    room_events_push(ev, "RoomUserLeft", &left.base);
}

static cmd_apply_fn *const apply_of[CMD_COUNT_] = {
    [CMD_CREATE_ROOM] = cmd_create_apply,   [CMD_JOIN_ROOM] = cmd_join_apply,
    [CMD_LEAVE_ROOM] = cmd_leave_apply,     [CMD_MIC_UP] = cmd_mic_up_apply,
    [CMD_MIC_DOWN] = cmd_mic_down_apply,    [CMD_SEND_GIFT] = cmd_gift_apply,
    [CMD_KICK_USER] = cmd_kick_apply,       [CMD_CLOSE_ROOM] = cmd_close_apply,
    [CMD_LAUNCH_ROCKET] = cmd_launch_apply,
};

/* Which rules the command runs with (command.h): the ones its log row
 * recorded; live, the configured rc when the room has none or they differ;
 * else the room's own. A replayed room without rules (a snapshot from
 * before rules were kept) goes on with rc, as it always did. */
static void
take_rules(struct room_state *s, const struct room_cmd *cmd, const struct conf_room *rc)
{
    if (cmd->has_rules) {
        s->rules = cmd->rules;
        s->has_rules = true;
        return;
    }
    if (cmd->from_log || (s->has_rules && room_rules_equal(&s->rules, rc)))
        return;
    memset(&s->rules, 0, sizeof(s->rules));
    s->rules.max_members = rc->max_members;
    s->rules.kick_ban_ms = rc->kick_ban_ms;
    s->rules.rocket = rc->rocket;
    /* the seats are the room's from its creation on */
    s->rules.seat_count = cmd->type == CMD_CREATE_ROOM ? rc->seat_count : s->nseats;
    s->has_rules = true;
}

void
room_cmd_price(struct room_cmd *cmd, const struct gift_item *g)
{
    cmd->priced = true;
    cmd->catalog.unit_price = g->unit_price;
    cmd->catalog.energy_per_unit = g->energy_per_unit;
    cmd->catalog.version = g->version;
    cmd->unit_price = g->unit_price;
    cmd->energy_per_unit = g->energy_per_unit;
}

char *
room_logged_request(const struct room_cmd *cmd, const struct room_state *before,
                    const struct room_state *after)
{
    json_t *o;
    char *text;
    bool rules = after->has_rules && (before == NULL || !before->has_rules ||
                                      !room_rules_equal(&before->rules, &after->rules));

    if (!rules && !cmd->priced)
        return xstrdup(cmd->request);
    if ((o = json_loads(cmd->request, 0, NULL)) == NULL)
        abort(); /* cmd->request is our own canonical JSON */
    if (rules)
        json_object_set_new(o, "rules", room_rules_to_json(&after->rules));
    if (cmd->priced)
        json_object_set_new(o, "catalog",
                            json_pack("{s:I, s:I, s:I}", "energy_per_unit",
                                      (json_int_t)cmd->catalog.energy_per_unit, "unit_price",
                                      (json_int_t)cmd->catalog.unit_price, "version",
                                      (json_int_t)cmd->catalog.version));
    text = json_dumps(o, JSON_SORT_KEYS | JSON_COMPACT);
    json_decref(o);
    if (text == NULL)
        abort();
    return text;
}

int
room_apply(struct room_state *s, const struct room_cmd *cmd, int64_t now_ms,
           const struct conf_room *rc, struct room_events *ev, struct apply_error *e)
{
    int r;

    memset(e, 0, sizeof(*e));
    if ((unsigned)cmd->type >= CMD_COUNT_)
        return apply_fail(e, ROOMD_EINVAL, "invalid_argument", "unknown command type");
    if (cmd->type == CMD_CREATE_ROOM) {
        if (s->version != 0)
            return apply_fail(e, ROOMD_EEXIST, "room_exists", "room %s already exists", s->room_id);
    } else {
        if (s->version == 0)
            return apply_fail(e, ROOMD_ENOTFOUND, "not_found", "room %s does not exist",
                              s->room_id);
        if (s->status == ROOM_CLOSED) {
            if (cmd->type == CMD_LAUNCH_ROCKET)
                return apply_fail(e, ROOMD_ECONFLICT, "rocket_stale", "room %s is closed",
                                  s->room_id);
            return apply_fail(e, ROOMD_ECONFLICT, "room_closed", "room %s is closed", s->room_id);
        }
        rocket_reset_if_new_day(s, now_ms, ev);
    }
    take_rules(s, cmd, rc);
    if ((r = apply_of[cmd->type](s, cmd, now_ms, s->has_rules ? &s->rules : rc, ev, e)) != 0)
        return r;
    s->version++;
    s->updated_at_ms = now_ms;
    return 0;
}
