/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_room_rebuild.c: the projection rebuild from the store (src/room/rebuild.c)
 * on a real SQLite store filled through the room service: several apps, more
 * open rooms than one listing page, closed rooms, an app with closed rooms
 * only. A fresh memory projection rebuilt from the store answers what the
 * live-updated one answers; the stop flag ends a rebuild early; the service's
 * background thread rebuilds a fresh projection at open by itself.
 */
#include "helpers.h"

#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/xmalloc.h"
#include "lease/lease.h"
#include "projection/projection.h"
#include "room/command.h"
#include "room/rebuild.h"
#include "room/service.h"
#include "store/group_commit.h"
#include "store/store.h"
#include "wallet/wallet.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NA 205 /* open rooms of app "a": more than one listing page (200) */

struct fx {
    char *dir;
    struct conf *conf;
    struct store *store;
    struct group_commit *gc;
    struct wallet *wallet;
    struct lease *lease;
    struct projection *live; /* updated by the commands */
    struct room_service *svc;
};

static void
svc_open(struct fx *f, struct projection *p, bool rebuild)
{
    struct room_deps d;

    memset(&d, 0, sizeof(d));
    d.conf = f->conf;
    d.store = f->store;
    d.gc = f->gc;
    d.wallet = f->wallet;
    d.lease = f->lease;
    d.projection = p;
    d.projection_rebuild = rebuild;
    assert_int_equal(room_service_open(&f->svc, &d), 0);
}

static void
cmd(struct fx *f, const char *app, enum room_cmd_type t, const char *room, const char *body)
{
    struct room_cmd c;
    struct cmd_error e;
    struct room_reply r = {0};

    if (room_cmd_parse(t, app, room, body, strlen(body), &c, &e) != 0)
        fail_msg("parse %s: %s", body, e.message);
    room_service_execute(f->svc, &c, &r);
    if (r.status != 200)
        fail_msg("%s %s: %d %s", room, body, r.status, r.body);
    room_cmd_clear(&c);
    room_reply_clear(&r);
}

static void
create(struct fx *f, const char *app, const char *room)
{
    char body[128];

    snprintf(body, sizeof(body), "{\"command_id\":\"%s-%s-c\",\"owner_uid\":1,\"title\":\"T %s\"}",
             app, room, room);
    cmd(f, app, CMD_CREATE_ROOM, room, body);
}

static void
join(struct fx *f, const char *app, const char *room, int64_t uid)
{
    char body[128];

    snprintf(body, sizeof(body), "{\"command_id\":\"%s-%s-j%lld\",\"uid\":%lld}", app, room,
             (long long)uid, (long long)uid);
    cmd(f, app, CMD_JOIN_ROOM, room, body);
}

static void
close_room(struct fx *f, const char *app, const char *room)
{
    char body[128];

    snprintf(body, sizeof(body), "{\"command_id\":\"%s-%s-x\",\"operator_uid\":1}", app, room);
    cmd(f, app, CMD_CLOSE_ROOM, room, body);
}

/* All pages of app's room list, concatenated as one JSON array text. */
static char *
all_rooms(struct projection *p, const char *app)
{
    json_t *out = json_array();
    int64_t cursor = 0;
    char *s;

    for (;;) {
        char *js = NULL;
        assert_int_equal(p->ops->list_rooms(p, app, cursor, 100, &js), 0);
        json_t *pg = json_loads(js, 0, NULL);
        free(js);
        assert_non_null(pg);
        json_array_extend(out, json_object_get(pg, "rooms"));
        json_t *next = json_object_get(pg, "next_cursor");
        cursor = json_is_integer(next) ? json_integer_value(next) : -1;
        json_decref(pg);
        if (cursor < 0)
            break;
    }
    s = json_dumps(out, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(out);
    return s;
}

static char *
presence(struct projection *p, const char *app, int64_t uid)
{
    char *js = NULL;

    assert_int_equal(p->ops->presence(p, app, uid, &js), 0);
    return js;
}

static void
assert_same(struct projection *a, struct projection *b, const char *app, size_t want_rooms)
{
    char *x = all_rooms(a, app), *y = all_rooms(b, app);
    json_t *j = json_loads(x, 0, NULL);

    assert_string_equal(x, y);
    assert_int_equal(json_array_size(j), want_rooms);
    json_decref(j);
    free(x);
    free(y);
}

static int
setup(void **state)
{
    struct fx *f = xcalloc(1, sizeof(*f));
    char err[512], room[32];

    f->dir = th_tmpdir();
    f->conf = th_conf_sqlite(f->dir);
    f->conf->store.sqlite.synchronous_full = false;
    f->conf->room.max_members = 50;
    log_close();
    char *lp = xasprintf("%s/roomd.log", f->dir);
    assert_int_equal(log_open(lp, LOG_INFO), 0);
    free(lp);
    if (store_open(&f->store, &f->conf->store, err, sizeof(err)) != 0)
        fail_msg("store_open: %s", err);
    assert_int_equal(group_commit_open(&f->gc, f->store, f->conf->store.group_commit_max), 0);
    assert_int_equal(wallet_open(&f->wallet, &f->conf->wallet, f->store, err, sizeof(err)), 0);
    assert_int_equal(lease_open(&f->lease, f->conf, err, sizeof(err)), 0);
    assert_int_equal(projection_open(&f->live, f->conf, err, sizeof(err)), 0);
    svc_open(f, f->live, false);

    /* app a: NA open rooms, room i has i % 4 members (uids distinct per room) */
    for (int i = 0; i < NA; i++) {
        snprintf(room, sizeof(room), "r%03d", i);
        create(f, "a", room);
        for (int k = 0; k < i % 4; k++)
            join(f, "a", room, 1000 * (i + 1) + k);
    }
    /* app b: two open rooms, one closed with a member in it; uid 7 sits in b1 */
    create(f, "b", "b1");
    join(f, "b", "b1", 7);
    create(f, "b", "b2");
    create(f, "b", "b3");
    join(f, "b", "b3", 8);
    close_room(f, "b", "b3");
    /* app c: closed rooms only */
    create(f, "c", "c1");
    close_room(f, "c", "c1");
    *state = f;
    return 0;
}

static int
teardown(void **state)
{
    struct fx *f = *state;

    room_service_close(f->svc);
    projection_close(f->live);
    lease_close(f->lease);
    wallet_close(f->wallet);
    group_commit_close(f->gc);
    store_close(f->store);
    log_close();
    conf_free(f->conf);
    free(f->dir);
    free(f);
    return 0;
}

static void
test_rebuild_matches_live(void **state)
{
    struct fx *f = *state;
    struct projection *fresh = NULL;
    struct rebuild_stats st;
    char err[256];

    assert_int_equal(projection_open(&fresh, f->conf, err, sizeof(err)), 0);
    assert_int_equal(room_rebuild_projection(f->conf, f->store, fresh, NULL, &st), 0);
    assert_int_equal(st.apps, 2); /* a and b; c has no open room */
    assert_int_equal(st.rooms, NA + 2);
    assert_int_equal(st.skipped, 0);
    assert_same(f->live, fresh, "a", NA);
    assert_same(f->live, fresh, "b", 2);
    assert_same(f->live, fresh, "c", 0);
    for (int64_t uid = 7; uid <= 8; uid++) {
        char *x = presence(f->live, "b", uid), *y = presence(fresh, "b", uid);
        assert_string_equal(x, y);
        free(x);
        free(y);
    }
    char *p = presence(fresh, "b", 7);
    assert_non_null(strstr(p, "\"b1\""));
    free(p);
    p = presence(fresh, "a", 3 * 1000 + 1); /* room r002's second member */
    assert_non_null(strstr(p, "\"r002\""));
    free(p);

    /* a rebuild replaces: a room projected by mistake disappears */
    struct room_state *ghost = room_state_new("b", "ghost");
    ghost->version = 3;
    assert_int_equal(room_state_update_projection(fresh, ghost), 0);
    room_state_free(ghost);
    assert_int_equal(room_rebuild_projection(f->conf, f->store, fresh, NULL, &st), 0);
    assert_same(f->live, fresh, "b", 2);
    projection_close(fresh);
}

static void
test_stop_ends_early(void **state)
{
    struct fx *f = *state;
    struct projection *fresh = NULL;
    struct rebuild_stats st;
    atomic_bool stop;
    char err[256];

    atomic_init(&stop, true);
    assert_int_equal(projection_open(&fresh, f->conf, err, sizeof(err)), 0);
    assert_int_equal(room_rebuild_projection(f->conf, f->store, fresh, &stop, &st), ROOMD_ERETRY);
    assert_int_equal(st.rooms, 0);
    projection_close(fresh);
}

/* The service's thread rebuilds a fresh projection by itself after open. */
static void
test_service_rebuilds_at_open(void **state)
{
    struct fx *f = *state;
    struct projection *fresh = NULL;
    char err[256];

    room_service_close(f->svc);
    assert_int_equal(projection_open(&fresh, f->conf, err, sizeof(err)), 0);
    svc_open(f, fresh, true);
    int64_t t0 = clock_mono_ms();
    for (;;) {
        char *x = all_rooms(f->live, "a"), *y = all_rooms(fresh, "a");
        int same = strcmp(x, y) == 0;
        free(x);
        free(y);
        if (same)
            break;
        assert_true(clock_mono_ms() - t0 < 10000);
        usleep(20 * 1000);
    }
    assert_same(f->live, fresh, "b", 2);
    assert_int_equal(fresh->ops->rebuild_begin(fresh), 0); /* built: nothing more to do */
    /* commands go on updating it */
    join(f, "b", "b2", 9);
    char *p = presence(fresh, "b", 9);
    assert_non_null(strstr(p, "\"b2\""));
    free(p);
    room_service_close(f->svc);
    f->svc = NULL;
    svc_open(f, f->live, false);
    projection_close(fresh);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rebuild_matches_live),
        cmocka_unit_test(test_stop_ends_early),
        cmocka_unit_test(test_service_rebuilds_at_open),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
