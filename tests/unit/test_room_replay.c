/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_room_replay.c: snapshot + replay reproduces the state exactly. A long
 * random-ish command sequence (fixed seed: joins, leaves, mics, gifts that
 * ignite rockets, launches, kicks, UTC-day changes) runs against a room;
 * the log and snapshots are kept as the store would keep them, then
 * room_load_state() rebuilds the room from the last snapshot + tail and from
 * the whole log, and the serialized states must be equal strings.
 */
#include "helpers.h"

#include "conf/conf.h"
#include "core/err.h"
#include "core/xmalloc.h"
#include "room/cell.h"
#include "room/command.h"
#include "room/state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DAY 86400000LL

static struct conf_room room_conf = {
    .snapshot_every_n = 7,
    .seat_count = 4,
    .max_members = 6,
    .kick_ban_ms = 30000,
    .rocket = {.thresholds = {500, 900, 1500}, .nthresholds = 3, .countdown_ms = 20000},
};

struct log {
    struct command_record *v;
    size_t n, cap;
    char *snapshot; /* latest */
    int64_t snapshot_version;
    size_t snapshot_at; /* log index after the snapshot */
};

static uint64_t rng = 88172645463325252ull;

static uint64_t
next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Runs one command; on success logs it (and snapshots when due). Returns rc. */
static int
step(struct room_state **s, struct log *lg, enum room_cmd_type t, const char *body, int64_t now)
{
    struct room_cmd cmd;
    struct cmd_error ce;
    struct room_events ev = {0};
    struct apply_error ae;
    struct room_state *c = room_state_clone(*s);
    char *req;
    int rc;

    if (room_cmd_parse(t, "app1", t == CMD_CREATE_ROOM ? NULL : "r1", body, strlen(body), &cmd,
                       &ce) != 0)
        fail_msg("parse %s: %s", body, ce.message);
    rc = room_apply(c, &cmd, now, &room_conf, &ev, &ae);
    room_events_clear(&ev);
    if (rc != 0) {
        room_state_free(c);
        room_cmd_clear(&cmd);
        return rc;
    }
    req = room_logged_request(&cmd, *s, c); /* what service.c logs */
    room_state_free(*s);
    *s = c;
    if (lg->n == lg->cap) {
        lg->cap = lg->cap ? lg->cap * 2 : 64;
        lg->v = xrealloc(lg->v, lg->cap * sizeof(*lg->v));
    }
    memset(&lg->v[lg->n], 0, sizeof(lg->v[0]));
    strlcpy_(lg->v[lg->n].room_id, "r1", STORE_ID_MAX);
    strlcpy_(lg->v[lg->n].command_id, cmd.command_id, STORE_ID_MAX);
    lg->v[lg->n].command_type = xstrdup(room_cmd_name(t));
    lg->v[lg->n].request = req;
    lg->v[lg->n].version = c->version;
    lg->v[lg->n].created_at_ms = now;
    lg->n++;
    if (c->version % room_conf.snapshot_every_n == 0) {
        free(lg->snapshot);
        lg->snapshot = room_state_to_json(c);
        lg->snapshot_version = c->version;
        lg->snapshot_at = lg->n;
    }
    room_cmd_clear(&cmd);
    return 0;
}

static char *
rebuild(const struct log *lg, bool from_snapshot, int64_t version)
{
    struct room_load l;
    struct room_state *s = NULL;
    char err[512], *json;

    memset(&l, 0, sizeof(l));
    l.version = version;
    if (from_snapshot && lg->snapshot != NULL) {
        l.snapshot = lg->snapshot;
        l.snapshot_version = lg->snapshot_version;
        l.tail = lg->v + lg->snapshot_at;
        l.ntail = lg->n - lg->snapshot_at;
    } else {
        l.tail = lg->v;
        l.ntail = lg->n;
    }
    if (room_load_state(&l, "app1", "r1", &room_conf, &s, err, sizeof(err)) != 0)
        fail_msg("replay: %s", err);
    json = room_state_to_json(s);
    room_state_free(s);
    return json;
}

static void
test_long_sequence(void **state)
{
    struct room_state *s = room_state_new("app1", "r1");
    struct log lg = {0};
    int64_t now = 20000 * DAY + 1000;
    char body[256], *live, *a, *b;
    int ok = 0, refused = 0, launches = 0, resets_days = 0;

    assert_int_equal(step(&s, &lg, CMD_CREATE_ROOM,
                          "{\"command_id\":\"c\",\"room_id\":\"r1\",\"owner_uid\":1,"
                          "\"title\":\"replay\"}",
                          now),
                     0);
    for (int i = 0; i < 4000; i++) {
        int64_t uid = 1 + (int64_t)(next_rand() % 9), to = 1 + (int64_t)(next_rand() % 9);
        int kind = (int)(next_rand() % 100);
        enum room_cmd_type t;

        /* the config changes while the room lives: later commands take the
         * new rules and their log rows record them */
        if (i == 1500) {
            room_conf.max_members = 4;
            room_conf.kick_ban_ms = 5000;
            room_conf.rocket.thresholds[0] = 300;
        } else if (i == 2800) {
            room_conf.seat_count = 2; /* a room keeps its seats */
            room_conf.rocket.nthresholds = 2;
            room_conf.rocket.countdown_ms = 7000;
        }

        now += 1 + (int64_t)(next_rand() % 4000);
        if (next_rand() % 700 == 0) {
            now += DAY; /* cross one or more UTC midnights */
            resets_days++;
        }
        if (s->rocket.status == ROCKET_IGNITED && next_rand() % 4 == 0) {
            /* the wake-up, sometimes early (stale), sometimes on time */
            int64_t at = s->rocket.launch_at_ms;
            if (next_rand() % 3 != 0 && now < at)
                now = at;
            snprintf(body, sizeof(body),
                     "{\"command_id\":\"~rl-%s\",\"rocket_id\":\"%s\",\"level\":%d,"
                     "\"launch_at_ms\":%lld}",
                     s->rocket.rocket_id, s->rocket.rocket_id, s->rocket.level, (long long)at);
            t = CMD_LAUNCH_ROCKET;
        } else if (kind < 20) {
            snprintf(body, sizeof(body), "{\"command_id\":\"j%d\",\"uid\":%lld}", i,
                     (long long)uid);
            t = CMD_JOIN_ROOM;
        } else if (kind < 28) {
            snprintf(body, sizeof(body), "{\"command_id\":\"l%d\",\"uid\":%lld}", i,
                     (long long)uid);
            t = CMD_LEAVE_ROOM;
        } else if (kind < 40) {
            if (next_rand() % 2)
                snprintf(body, sizeof(body), "{\"command_id\":\"u%d\",\"uid\":%lld,\"seat\":%d}", i,
                         (long long)uid, (int)(next_rand() % 4));
            else
                snprintf(body, sizeof(body), "{\"command_id\":\"u%d\",\"uid\":%lld}", i,
                         (long long)uid);
            t = CMD_MIC_UP;
        } else if (kind < 48) {
            snprintf(body, sizeof(body), "{\"command_id\":\"d%d\",\"uid\":%lld}", i,
                     (long long)uid);
            t = CMD_MIC_DOWN;
        } else if (kind < 94) {
            snprintf(body, sizeof(body),
                     "{\"command_id\":\"g%d\",\"uid\":%lld,\"to_uid\":%lld,\"gift_id\":\"rose\","
                     "\"count\":%d,\"unit_price\":%d}",
                     i, (long long)uid, (long long)to, 1 + (int)(next_rand() % 5),
                     1 + (int)(next_rand() % 60));
            t = CMD_SEND_GIFT;
        } else {
            snprintf(body, sizeof(body),
                     "{\"command_id\":\"k%d\",\"operator_uid\":%lld,\"uid\":%lld,"
                     "\"reason\":\"r%d\"}",
                     i, next_rand() % 3 ? 1LL : (long long)to, (long long)uid, i);
            t = CMD_KICK_USER;
        }
        if (step(&s, &lg, t, body, now) == 0) {
            ok++;
            if (t == CMD_LAUNCH_ROCKET)
                launches++;
        } else {
            refused++;
        }
        /* every snapshot parses back to itself */
        if (lg.snapshot != NULL && lg.snapshot_at == lg.n) {
            struct room_state *p = NULL;
            assert_int_equal(room_state_from_json(lg.snapshot, &p), 0);
            a = room_state_to_json(p);
            assert_string_equal(a, lg.snapshot);
            free(a);
            room_state_free(p);
        }
    }
    print_message("commands ok=%d refused=%d launches=%d day_jumps=%d version=%lld\n", ok, refused,
                  launches, resets_days, (long long)s->version);
    assert_true(ok > 800);
    assert_true(launches >= 2);
    assert_true(s->nbans + s->nmembers > 0);

    assert_int_equal(s->nseats, 4);
    assert_int_equal(s->rules.max_members, 4);
    assert_int_equal(s->rules.rocket.nthresholds, 2);

    /* a replay is the live state whatever the config says now */
    room_conf.seat_count = 1;
    room_conf.max_members = 1;
    room_conf.kick_ban_ms = 0;
    room_conf.rocket.thresholds[0] = 1;
    room_conf.rocket.nthresholds = 1;
    live = room_state_to_json(s);
    a = rebuild(&lg, true, s->version);
    b = rebuild(&lg, false, s->version);
    assert_string_equal(a, live);
    assert_string_equal(b, live);
    free(a);
    free(b);
    free(live);

    /* a log that does not reach the room's version is refused */
    {
        struct room_load l;
        struct room_state *x = NULL;
        char err[256];
        memset(&l, 0, sizeof(l));
        l.tail = lg.v;
        l.ntail = lg.n;
        l.version = s->version + 1;
        assert_int_equal(room_load_state(&l, "app1", "r1", &room_conf, &x, err, sizeof(err)),
                         ROOMD_EINTERNAL);
        assert_null(x);
    }

    for (size_t i = 0; i < lg.n; i++)
        command_record_clear(&lg.v[i]);
    free(lg.v);
    free(lg.snapshot);
    room_state_free(s);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_long_sequence),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
