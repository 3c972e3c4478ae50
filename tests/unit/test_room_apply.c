/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_room_apply.c: room_apply for every command, each rejection, and the
 * rocket (ignition, stale and duplicate launches, the UTC-day reset), with
 * explicit now values. Pure: no store, no threads.
 */
#include "helpers.h"

#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/xmalloc.h"
#include "room/command.h"
#include "room/state.h"
#include "room_events.pb-c.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DAY 86400000LL
#define T0 (20000 * DAY + 3600000LL) /* 01:00 UTC on day 20000 */

static struct conf_room room_conf = {
    .snapshot_every_n = 10,
    .snapshots_keep = 3,
    .idle_evict_ms = 60000,
    .seat_count = 3,
    .max_members = 4,
    .kick_ban_ms = 60000,
    .rocket = {.thresholds = {100, 200}, .nthresholds = 2, .countdown_ms = 10000},
};

struct result {
    int rc;
    struct apply_error err;
    char types[512]; /* "RoomUserJoined,RoomMicChanged" */
    struct room_events ev;
};

/* Parses body as a command of type on room r1 and applies it to *s at now.
 * On success the clone replaces *s (as the cell does). */
static struct result
run(struct room_state **s, enum room_cmd_type type, const char *body, int64_t now)
{
    struct result r;
    struct room_cmd cmd;
    struct cmd_error ce;
    struct room_state *c;

    memset(&r, 0, sizeof(r));
    if (room_cmd_parse(type, "app1", type == CMD_CREATE_ROOM ? NULL : "r1", body, strlen(body),
                       &cmd, &ce) != 0)
        fail_msg("parse %s: %s", body, ce.message);
    c = room_state_clone(*s);
    r.rc = room_apply(c, &cmd, now, &room_conf, &r.ev, &r.err);
    for (size_t i = 0; i < r.ev.n; i++) {
        if (i)
            strcat(r.types, ",");
        strcat(r.types, r.ev.v[i].type);
    }
    if (r.rc == 0) {
        room_state_free(*s);
        *s = c;
    } else {
        room_state_free(c);
    }
    room_cmd_clear(&cmd);
    return r;
}

static void
ok(struct room_state **s, enum room_cmd_type type, const char *body, int64_t now, const char *types)
{
    struct result r = run(s, type, body, now);

    if (r.rc != 0)
        fail_msg("%s: %d %s %s", body, r.rc, r.err.code, r.err.message);
    assert_string_equal(r.types, types);
    room_events_clear(&r.ev);
}

static void
refused(struct room_state **s, enum room_cmd_type type, const char *body, int64_t now, int rc,
        const char *code)
{
    struct result r = run(s, type, body, now);
    int64_t v = (*s)->version;

    assert_int_equal(r.rc, rc);
    assert_string_equal(r.err.code, code);
    assert_true(r.err.message[0] != '\0');
    assert_int_equal((*s)->version, v);
    room_events_clear(&r.ev);
}

/* A room r1 owned by 1 with members 1, 2, 3. */
static struct room_state *
room_with_members(int64_t now)
{
    struct room_state *s = room_state_new("app1", "r1");

    ok(&s, CMD_CREATE_ROOM,
       "{\"command_id\":\"c0\",\"room_id\":\"r1\",\"owner_uid\":1,"
       "\"title\":\"hello\"}",
       now, "RoomCreated");
    ok(&s, CMD_JOIN_ROOM, "{\"command_id\":\"j1\",\"uid\":1}", now, "RoomUserJoined");
    ok(&s, CMD_JOIN_ROOM, "{\"command_id\":\"j2\",\"uid\":2}", now, "RoomUserJoined");
    ok(&s, CMD_JOIN_ROOM, "{\"command_id\":\"j3\",\"uid\":3}", now, "RoomUserJoined");
    return s;
}

static void
test_create(void **state)
{
    struct room_state *s = room_state_new("app1", "r1");
    struct result r;
    Roomd__V1__RoomCreated *m;

    r = run(&s, CMD_CREATE_ROOM,
            "{\"command_id\":\"c0\",\"room_id\":\"r1\",\"owner_uid\":7,\"title\":\"t\"}", T0);
    assert_int_equal(r.rc, 0);
    assert_string_equal(r.types, "RoomCreated");
    m = roomd__v1__room_created__unpack(NULL, r.ev.v[0].payload_len, r.ev.v[0].payload);
    assert_non_null(m);
    assert_int_equal(m->owner_uid, 7);
    assert_string_equal(m->title, "t");
    assert_int_equal(m->seat_count, 3);
    roomd__v1__room_created__free_unpacked(m, NULL);
    room_events_clear(&r.ev);
    assert_int_equal(s->version, 1);
    assert_int_equal(s->created_at_ms, T0);
    assert_int_equal(s->updated_at_ms, T0);
    assert_int_equal(s->nseats, 3);
    assert_int_equal(s->status, ROOM_OPEN);
    assert_int_equal(s->rocket.level, 1);
    assert_int_equal(s->rocket.utc_day, 20000);
    assert_int_equal(s->nmembers, 0);
    refused(&s, CMD_CREATE_ROOM,
            "{\"command_id\":\"c1\",\"room_id\":\"r1\",\"owner_uid\":7,\"title\":\"t\"}", T0,
            ROOMD_EEXIST, "room_exists");
    room_state_free(s);
}

static void
test_not_found(void **state)
{
    struct room_state *s = room_state_new("app1", "r1");

    refused(&s, CMD_JOIN_ROOM, "{\"command_id\":\"j\",\"uid\":1}", T0, ROOMD_ENOTFOUND,
            "not_found");
    refused(&s, CMD_CLOSE_ROOM, "{\"command_id\":\"x\",\"operator_uid\":1}", T0, ROOMD_ENOTFOUND,
            "not_found");
    room_state_free(s);
}

static void
test_join(void **state)
{
    struct room_state *s = room_with_members(T0);

    assert_int_equal(s->version, 4);
    assert_int_equal(s->nmembers, 3);
    assert_int_equal(s->members[2].uid, 3);
    refused(&s, CMD_JOIN_ROOM, "{\"command_id\":\"j\",\"uid\":2}", T0, ROOMD_ECONFLICT,
            "already_member");
    ok(&s, CMD_JOIN_ROOM, "{\"command_id\":\"j4\",\"uid\":4}", T0 + 1, "RoomUserJoined");
    assert_int_equal(s->members[3].joined_at_ms, T0 + 1);
    refused(&s, CMD_JOIN_ROOM, "{\"command_id\":\"j5\",\"uid\":5}", T0, ROOMD_ECONFLICT,
            "room_full");
    assert_int_equal(s->version, 5);
    assert_int_equal(s->updated_at_ms, T0 + 1);
    room_state_free(s);
}

static void
test_leave(void **state)
{
    struct room_state *s = room_with_members(T0);
    struct result r;
    Roomd__V1__RoomUserLeft *m;

    refused(&s, CMD_LEAVE_ROOM, "{\"command_id\":\"l\",\"uid\":9}", T0, ROOMD_ECONFLICT,
            "not_member");
    ok(&s, CMD_MIC_UP, "{\"command_id\":\"m\",\"uid\":2,\"seat\":1}", T0, "RoomMicChanged");
    r = run(&s, CMD_LEAVE_ROOM, "{\"command_id\":\"l2\",\"uid\":2}", T0);
    assert_int_equal(r.rc, 0);
    assert_string_equal(r.types, "RoomMicChanged,RoomUserLeft");
    m = roomd__v1__room_user_left__unpack(NULL, r.ev.v[1].payload_len, r.ev.v[1].payload);
    assert_int_equal(m->uid, 2);
    assert_int_equal(m->member_count, 2);
    assert_string_equal(m->reason, "leave");
    roomd__v1__room_user_left__free_unpacked(m, NULL);
    room_events_clear(&r.ev);
    assert_int_equal(s->seats[1], 0);
    assert_int_equal(room_state_member_index(s, 2), -1);
    assert_int_equal(s->members[1].uid, 3); /* join order kept */
    ok(&s, CMD_LEAVE_ROOM, "{\"command_id\":\"l3\",\"uid\":3}", T0, "RoomUserLeft");
    room_state_free(s);
}

static void
test_mic(void **state)
{
    struct room_state *s = room_with_members(T0);
    struct result r;
    Roomd__V1__RoomMicChanged *m;

    refused(&s, CMD_MIC_UP, "{\"command_id\":\"m\",\"uid\":9}", T0, ROOMD_ECONFLICT, "not_member");
    refused(&s, CMD_MIC_UP, "{\"command_id\":\"m\",\"uid\":1,\"seat\":3}", T0, ROOMD_EINVAL,
            "invalid_argument");
    r = run(&s, CMD_MIC_UP, "{\"command_id\":\"m1\",\"uid\":1,\"seat\":2}", T0);
    assert_int_equal(r.rc, 0);
    m = roomd__v1__room_mic_changed__unpack(NULL, r.ev.v[0].payload_len, r.ev.v[0].payload);
    assert_int_equal(m->uid, 1);
    assert_int_equal(m->seat, 2);
    assert_true(m->on_mic);
    roomd__v1__room_mic_changed__free_unpacked(m, NULL);
    room_events_clear(&r.ev);
    refused(&s, CMD_MIC_UP, "{\"command_id\":\"m\",\"uid\":1}", T0, ROOMD_ECONFLICT,
            "already_on_mic");
    refused(&s, CMD_MIC_UP, "{\"command_id\":\"m\",\"uid\":2,\"seat\":2}", T0, ROOMD_ECONFLICT,
            "seat_taken");
    ok(&s, CMD_MIC_UP, "{\"command_id\":\"m2\",\"uid\":2}", T0, "RoomMicChanged");
    assert_int_equal(s->seats[0], 2); /* first free seat */
    ok(&s, CMD_JOIN_ROOM, "{\"command_id\":\"j4\",\"uid\":4}", T0, "RoomUserJoined");
    ok(&s, CMD_MIC_UP, "{\"command_id\":\"m3\",\"uid\":3}", T0, "RoomMicChanged");
    assert_int_equal(s->seats[1], 3);
    refused(&s, CMD_MIC_UP, "{\"command_id\":\"m\",\"uid\":4}", T0, ROOMD_ECONFLICT,
            "no_free_seat");

    refused(&s, CMD_MIC_DOWN, "{\"command_id\":\"d\",\"uid\":9}", T0, ROOMD_ECONFLICT,
            "not_member");
    refused(&s, CMD_MIC_DOWN, "{\"command_id\":\"d\",\"uid\":4}", T0, ROOMD_ECONFLICT,
            "not_on_mic");
    ok(&s, CMD_MIC_DOWN, "{\"command_id\":\"d1\",\"uid\":3}", T0, "RoomMicChanged");
    assert_int_equal(s->seats[1], 0);
    assert_int_equal(room_state_seat_of(s, 3), -1);
    room_state_free(s);
}

static void
test_gift(void **state)
{
    struct room_state *s = room_with_members(T0);
    struct result r;
    Roomd__V1__RoomGiftSent *m;

    refused(&s, CMD_SEND_GIFT,
            "{\"command_id\":\"g\",\"uid\":9,\"to_uid\":1,\"gift_id\":\"rose\",\"count\":1,"
            "\"unit_price\":5}",
            T0, ROOMD_ECONFLICT, "not_member");
    refused(&s, CMD_SEND_GIFT,
            "{\"command_id\":\"g\",\"uid\":1,\"to_uid\":9,\"gift_id\":\"rose\",\"count\":1,"
            "\"unit_price\":5}",
            T0, ROOMD_ECONFLICT, "not_member");
    r = run(&s, CMD_SEND_GIFT,
            "{\"command_id\":\"g1\",\"uid\":2,\"to_uid\":1,\"gift_id\":\"rose\",\"count\":3,"
            "\"unit_price\":5}",
            T0);
    assert_int_equal(r.rc, 0);
    assert_string_equal(r.types, "RoomGiftSent");
    m = roomd__v1__room_gift_sent__unpack(NULL, r.ev.v[0].payload_len, r.ev.v[0].payload);
    assert_int_equal(m->total, 15);
    assert_int_equal(m->count, 3);
    assert_string_equal(m->gift_id, "rose");
    assert_int_equal(m->rocket_level, 1);
    assert_int_equal(m->rocket_energy, 15);
    roomd__v1__room_gift_sent__free_unpacked(m, NULL);
    room_events_clear(&r.ev);
    assert_int_equal(s->gift_total, 15);
    assert_int_equal(s->rocket.energy, 15);
    /* the room's gift total and the rocket energy saturate, never wrap */
    s->gift_total = INT64_MAX - 10;
    s->rocket.energy = INT64_MAX - 10;
    ok(&s, CMD_SEND_GIFT,
       "{\"command_id\":\"g2\",\"uid\":2,\"to_uid\":1,\"gift_id\":\"rose\",\"count\":9999,"
       "\"unit_price\":1000000000}",
       T0, "RoomGiftSent,RoomRocketIgnited");
    assert_true(s->gift_total == INT64_MAX);
    assert_true(s->rocket.energy == INT64_MAX);
    room_state_free(s);
}

static void
test_kick(void **state)
{
    struct room_state *s = room_with_members(T0);
    struct result r;
    Roomd__V1__RoomUserKicked *k;

    refused(&s, CMD_KICK_USER, "{\"command_id\":\"k\",\"operator_uid\":2,\"uid\":3}", T0,
            ROOMD_ECONFLICT, "forbidden");
    refused(&s, CMD_KICK_USER, "{\"command_id\":\"k\",\"operator_uid\":1,\"uid\":1}", T0,
            ROOMD_ECONFLICT, "forbidden");
    refused(&s, CMD_KICK_USER, "{\"command_id\":\"k\",\"operator_uid\":1,\"uid\":9}", T0,
            ROOMD_ECONFLICT, "not_member");
    ok(&s, CMD_MIC_UP, "{\"command_id\":\"m\",\"uid\":3}", T0, "RoomMicChanged");
    r = run(&s, CMD_KICK_USER,
            "{\"command_id\":\"k1\",\"operator_uid\":1,\"uid\":3,\"reason\":\"spam\"}", T0);
    assert_int_equal(r.rc, 0);
    assert_string_equal(r.types, "RoomMicChanged,RoomUserKicked,RoomUserLeft");
    k = roomd__v1__room_user_kicked__unpack(NULL, r.ev.v[1].payload_len, r.ev.v[1].payload);
    assert_int_equal(k->operator_uid, 1);
    assert_int_equal(k->uid, 3);
    assert_string_equal(k->reason, "spam");
    assert_int_equal(k->ban_until_ms, T0 + 60000);
    roomd__v1__room_user_kicked__free_unpacked(k, NULL);
    room_events_clear(&r.ev);
    assert_int_equal(room_state_member_index(s, 3), -1);
    assert_int_equal(room_state_seat_of(s, 3), -1);
    /* banned until T0 + 60 s, then welcome again (the expired ban is dropped) */
    refused(&s, CMD_JOIN_ROOM, "{\"command_id\":\"j\",\"uid\":3}", T0 + 59999, ROOMD_ECONFLICT,
            "banned");
    ok(&s, CMD_JOIN_ROOM, "{\"command_id\":\"j9\",\"uid\":3}", T0 + 60000, "RoomUserJoined");
    assert_int_equal(s->nbans, 0);
    room_state_free(s);
}

static void
test_close(void **state)
{
    struct room_state *s = room_with_members(T0);

    ok(&s, CMD_MIC_UP, "{\"command_id\":\"m\",\"uid\":3}", T0, "RoomMicChanged");
    refused(&s, CMD_CLOSE_ROOM, "{\"command_id\":\"x\",\"operator_uid\":2}", T0, ROOMD_ECONFLICT,
            "forbidden");
    ok(&s, CMD_CLOSE_ROOM, "{\"command_id\":\"x1\",\"operator_uid\":1}", T0, "RoomClosed");
    assert_int_equal(s->status, ROOM_CLOSED);
    assert_int_equal(s->nmembers, 0);
    assert_int_equal(room_state_seat_of(s, 3), -1);
    refused(&s, CMD_JOIN_ROOM, "{\"command_id\":\"j\",\"uid\":5}", T0, ROOMD_ECONFLICT,
            "room_closed");
    refused(&s, CMD_CLOSE_ROOM, "{\"command_id\":\"x2\",\"operator_uid\":1}", T0, ROOMD_ECONFLICT,
            "room_closed");
    refused(&s, CMD_LAUNCH_ROCKET,
            "{\"command_id\":\"~rl-r1-20000-1\",\"rocket_id\":\"r1-20000-1\",\"level\":1,"
            "\"launch_at_ms\":5}",
            T0, ROOMD_ECONFLICT, "rocket_stale");
    room_state_free(s);
}

static const char *gift60 = "{\"command_id\":\"%s\",\"uid\":2,\"to_uid\":1,\"gift_id\":\"g\","
                            "\"count\":6,\"unit_price\":10}";

static void
gift(struct room_state **s, const char *cid, int64_t now, const char *types)
{
    char body[256];

    snprintf(body, sizeof(body), gift60, cid);
    ok(s, CMD_SEND_GIFT, body, now, types);
}

static int
launch(struct room_state **s, const char *rocket_id, int level, int64_t at, int64_t now)
{
    char body[256];
    struct result r;

    snprintf(body, sizeof(body),
             "{\"command_id\":\"~rl-%s\",\"rocket_id\":\"%s\",\"level\":%d,\"launch_at_ms\":%lld}",
             rocket_id, rocket_id, level, (long long)at);
    r = run(s, CMD_LAUNCH_ROCKET, body, now);
    if (r.rc == 0)
        assert_string_equal(r.types, "RoomRocketLaunched");
    else
        assert_string_equal(r.err.code, "rocket_stale");
    room_events_clear(&r.ev);
    return r.rc;
}

static void
test_rocket(void **state)
{
    struct room_state *s = room_with_members(T0);
    struct result r;
    Roomd__V1__RoomRocketIgnited *ig;
    char body[256];
    int64_t at;

    gift(&s, "g1", T0, "RoomGiftSent");
    assert_int_equal(s->rocket.energy, 60);
    /* 120 >= 100: ignites */
    snprintf(body, sizeof(body), gift60, "g2");
    r = run(&s, CMD_SEND_GIFT, body, T0 + 5);
    assert_int_equal(r.rc, 0);
    assert_string_equal(r.types, "RoomGiftSent,RoomRocketIgnited");
    ig = roomd__v1__room_rocket_ignited__unpack(NULL, r.ev.v[1].payload_len, r.ev.v[1].payload);
    assert_non_null(ig);
    assert_string_equal(ig->rocket_id, "r1-20000-1");
    assert_int_equal(ig->level, 1);
    assert_int_equal(ig->launch_at_ms, T0 + 5 + 10000);
    assert_string_equal(ig->launch_command_id, "~rl-r1-20000-1");
    roomd__v1__room_rocket_ignited__free_unpacked(ig, NULL);
    room_events_clear(&r.ev);
    at = T0 + 10005;
    assert_int_equal(s->rocket.status, ROCKET_IGNITED);
    assert_int_equal(s->rocket.launch_at_ms, at);
    /* while ignited, gifts add no energy */
    gift(&s, "g3", T0 + 6, "RoomGiftSent");
    assert_int_equal(s->rocket.energy, 120);
    assert_int_equal(s->gift_total, 180);

    /* stale wake-ups: too early, wrong id, wrong level, wrong launch_at */
    assert_int_equal(launch(&s, "r1-20000-1", 1, at, at - 1), ROOMD_ECONFLICT);
    assert_int_equal(launch(&s, "r1-20000-9", 1, at, at), ROOMD_ECONFLICT);
    assert_int_equal(launch(&s, "r1-20000-1", 2, at, at), ROOMD_ECONFLICT);
    assert_int_equal(launch(&s, "r1-20000-1", 1, at + 1, at + 1), ROOMD_ECONFLICT);
    assert_int_equal(s->rocket.status, ROCKET_IGNITED);
    /* the right one launches; a duplicate is stale */
    assert_int_equal(launch(&s, "r1-20000-1", 1, at, at + 3), 0);
    assert_int_equal(s->rocket.status, ROCKET_IDLE);
    assert_int_equal(s->rocket.level, 2);
    assert_int_equal(s->rocket.energy, 0);
    assert_int_equal(s->rocket.launched, 1);
    assert_int_equal(launch(&s, "r1-20000-1", 1, at, at + 4), ROOMD_ECONFLICT);

    /* level 2 (threshold 200), the last level: after its launch, done for the day */
    gift(&s, "g4", at + 10, "RoomGiftSent");
    gift(&s, "g5", at + 10, "RoomGiftSent");
    gift(&s, "g6", at + 10, "RoomGiftSent");
    gift(&s, "g7", at + 20, "RoomGiftSent,RoomRocketIgnited");
    assert_string_equal(s->rocket.rocket_id, "r1-20000-2");
    assert_int_equal(launch(&s, "r1-20000-2", 2, at + 10020, at + 10020), 0);
    assert_int_equal(s->rocket.status, ROCKET_DONE);
    assert_int_equal(s->rocket.launched, 2);
    gift(&s, "g8", at + 30000, "RoomGiftSent");
    assert_int_equal(s->rocket.energy, 0);

    /* next UTC day: the first command resets first (RoomRocketReset), then charges */
    gift(&s, "g9", 20001 * DAY + 1, "RoomRocketReset,RoomGiftSent");
    assert_int_equal(s->rocket.utc_day, 20001);
    assert_int_equal(s->rocket.level, 1);
    assert_int_equal(s->rocket.energy, 60);
    assert_int_equal(s->rocket.launched, 0);
    assert_int_equal(s->rocket.status, ROCKET_IDLE);
    room_state_free(s);
}

static void
test_rocket_day_boundary(void **state)
{
    struct room_state *s = room_with_members(T0);
    int64_t late = 20001 * DAY - 5000; /* 23:59:55 */
    int64_t at = late + 10000;         /* after midnight */
    struct result r;

    gift(&s, "g1", late, "RoomGiftSent");
    gift(&s, "g2", late, "RoomGiftSent,RoomRocketIgnited");
    /* the wake-up after 00:00 UTC is stale: the reset happened first */
    assert_int_equal(launch(&s, "r1-20000-1", 1, at, at), ROOMD_ECONFLICT);
    assert_int_equal(s->rocket.status, ROCKET_IGNITED); /* refused: nothing changed */
    /* any other command on the new day resets */
    r = run(&s, CMD_MIC_UP, "{\"command_id\":\"m\",\"uid\":2}", at);
    assert_int_equal(r.rc, 0);
    assert_string_equal(r.types, "RoomRocketReset,RoomMicChanged");
    room_events_clear(&r.ev);
    assert_int_equal(s->rocket.status, ROCKET_IDLE);
    assert_string_equal(s->rocket.rocket_id, "");
    /* a refused command on the new day does not keep the reset */
    room_state_free(s);
}

static void
test_json_roundtrip(void **state)
{
    struct room_state *s = room_with_members(T0), *t = NULL;
    char *a, *b;

    ok(&s, CMD_MIC_UP, "{\"command_id\":\"m\",\"uid\":3,\"seat\":2}", T0, "RoomMicChanged");
    gift(&s, "g1", T0, "RoomGiftSent");
    gift(&s, "g2", T0, "RoomGiftSent,RoomRocketIgnited");
    ok(&s, CMD_KICK_USER, "{\"command_id\":\"k\",\"operator_uid\":1,\"uid\":3}", T0,
       "RoomMicChanged,RoomUserKicked,RoomUserLeft");
    ok(&s, CMD_MIC_UP, "{\"command_id\":\"m2\",\"uid\":2,\"seat\":1}", T0, "RoomMicChanged");
    a = room_state_to_json(s);
    assert_int_equal(room_state_from_json(a, &t), 0);
    b = room_state_to_json(t);
    assert_string_equal(a, b);
    assert_non_null(strstr(a, "\"owner_uid\":1"));
    assert_non_null(strstr(a, "\"rocket_id\":\"r1-20000-1\""));
    assert_int_equal(t->nbans, 1);
    assert_int_equal(t->nseats, 3);
    free(b);
    /* a clone serializes the same */
    room_state_free(t);
    t = room_state_clone(s);
    b = room_state_to_json(t);
    assert_string_equal(a, b);
    free(a);
    free(b);
    room_state_free(t);
    /* the summary (command answers) keeps member_count and lists neither
     * members, bans nor rules; it is no snapshot */
    s->has_rules = true;
    s->rules.max_members = 9;
    a = room_state_to_json_summary(s);
    assert_non_null(strstr(a, "\"member_count\":2,"));
    assert_null(strstr(a, "\"members\""));
    assert_null(strstr(a, "\"bans\""));
    assert_null(strstr(a, "\"rules\""));
    assert_non_null(strstr(a, "\"seats\":[0,2,0]"));
    assert_int_equal(room_state_from_json(a, &t), ROOMD_EINVAL);
    assert_null(t);
    free(a);
    s->has_rules = false;
    /* byte for byte jansson's canonical form (sorted keys, compact), the
     * title escaped: full and summary, without and with the room's rules */
    strlcpy_(s->title, "a \"quoted\" \\ t\u00eftle/\x01", sizeof(s->title));
    for (int k = 0; k < 4; k++) {
        json_t *j;
        if (k == 2) {
            s->has_rules = true;
            s->rules.max_members = 9;
            s->rules.seat_count = 3;
            s->rules.kick_ban_ms = 600000;
            s->rules.rocket.countdown_ms = 60000;
            s->rules.rocket.nthresholds = 2;
            s->rules.rocket.thresholds[0] = 10;
            s->rules.rocket.thresholds[1] = 50;
        }
        a = k % 2 ? room_state_to_json_summary(s) : room_state_to_json(s);
        if (k == 2)
            assert_non_null(strstr(a, "\"rules\":{\"countdown_ms\":60000,"));
        j = json_loads(a, 0, NULL);
        assert_non_null(j);
        b = json_dumps(j, JSON_SORT_KEYS | JSON_COMPACT);
        assert_string_equal(a, b);
        json_decref(j);
        free(a);
        free(b);
    }
    assert_int_equal(room_state_from_json("{\"app_code\":1}", &t), ROOMD_EINVAL);
    assert_null(t);
    assert_int_equal(room_state_from_json("not json", &t), ROOMD_EINVAL);
    room_state_free(s);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create),
        cmocka_unit_test(test_not_found),
        cmocka_unit_test(test_join),
        cmocka_unit_test(test_leave),
        cmocka_unit_test(test_mic),
        cmocka_unit_test(test_gift),
        cmocka_unit_test(test_kick),
        cmocka_unit_test(test_close),
        cmocka_unit_test(test_rocket),
        cmocka_unit_test(test_rocket_day_boundary),
        cmocka_unit_test(test_json_roundtrip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
