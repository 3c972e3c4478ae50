/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_projection.c: the room list and presence projections. One suite runs
 * on both drivers: memory, and redis against the real test redis-server
 * (:6390, a fresh key prefix per run). Then the Redis-only case: a private
 * redis-server stopped and restarted, parked updates replayed.
 */
#include "helpers.h"

#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/xmalloc.h"
#include "projection/projection.h"
#include "room/state.h"

#include <hiredis.h>
#include <jansson.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static int redis_port;
static char prefix[64];
static const int64_t T0 = INT64_C(1796000000000); /* some hour, ms */

/* ==== Building states by hand ==== */

static struct room_state *
state(const char *app, const char *room, int64_t version, const int64_t *uids, size_t n,
      int64_t gifts, int64_t at_ms)
{
    struct room_state *s = xcalloc(1, sizeof(*s));

    strlcpy_(s->app_code, app, sizeof(s->app_code));
    strlcpy_(s->room_id, room, sizeof(s->room_id));
    snprintf(s->title, sizeof(s->title), "title of %s", room);
    s->owner_uid = 1;
    s->version = version;
    s->updated_at_ms = at_ms;
    s->created_at_ms = T0;
    s->gift_total = gifts;
    s->members = xcalloc(n + 1, sizeof(*s->members));
    for (size_t i = 0; i < n; i++) {
        s->members[i].uid = uids[i];
        s->members[i].joined_at_ms = at_ms - 1000 + (int64_t)i;
    }
    s->nmembers = s->cap_members = n;
    s->nseats = 8;
    return s;
}

static void
state_free(struct room_state *s)
{
    free(s->members);
    free(s);
}

static int
put(struct projection *p, const char *app, const char *room, int64_t version, const int64_t *uids,
    size_t n, int64_t gifts, int64_t at_ms)
{
    struct room_state *s = state(app, room, version, uids, n, gifts, at_ms);
    int rc = room_state_update_projection(p, s);

    state_free(s);
    return rc;
}

/* ==== Reading answers ==== */

static json_t *
list(struct projection *p, const char *app, int64_t cursor, int limit)
{
    char *js = NULL;
    json_error_t e;

    assert_int_equal(p->ops->list_rooms(p, app, cursor, limit, &js), 0);
    json_t *o = json_loads(js, 0, &e);
    assert_non_null(o);
    free(js);
    return o;
}

/* The room ids of a page joined by ',' into buf. */
static const char *
ids(json_t *page, char *buf, size_t len)
{
    json_t *rooms = json_object_get(page, "rooms"), *r;
    size_t i;

    buf[0] = '\0';
    json_array_foreach(rooms, i, r)
    {
        if (i > 0)
            strncat(buf, ",", len - strlen(buf) - 1);
        strncat(buf, json_string_value(json_object_get(r, "room_id")), len - strlen(buf) - 1);
    }
    return buf;
}

static json_t *
entry(json_t *page, const char *room)
{
    json_t *rooms = json_object_get(page, "rooms"), *r;
    size_t i;

    json_array_foreach(rooms, i, r)
    {
        if (strcmp(json_string_value(json_object_get(r, "room_id")), room) == 0)
            return r;
    }
    return NULL;
}

static int64_t
ival(json_t *o, const char *k)
{
    return json_integer_value(json_object_get(o, k));
}

/* room_id of uid's presence, "" for null; static buffer. */
static const char *
where(struct projection *p, const char *app, int64_t uid)
{
    static char buf[64];
    char *js = NULL;
    json_error_t e;

    assert_int_equal(p->ops->presence(p, app, uid, &js), 0);
    json_t *o = json_loads(js, 0, &e);
    assert_non_null(o);
    assert_int_equal(ival(o, "uid"), uid);
    json_t *r = json_object_get(o, "room_id");
    strlcpy_(buf, json_is_string(r) ? json_string_value(r) : "", sizeof(buf));
    assert_true(json_is_string(r) || json_is_null(r));
    json_decref(o);
    free(js);
    return buf;
}

/* ==== The suite, on either driver ==== */

static struct conf *
proj_conf(const char *driver, int port)
{
    struct conf *c = xcalloc(1, sizeof(*c));

    conf_defaults(c);
    free(c->projection.driver);
    c->projection.driver = xstrdup(driver);
    c->redis.enabled = strcmp(driver, "redis") == 0;
    free(c->redis.addr);
    c->redis.addr = xasprintf("127.0.0.1:%d", port);
    free(c->redis.key_prefix);
    c->redis.key_prefix = xstrdup(prefix);
    c->redis.connect_timeout_ms = 300;
    c->redis.command_timeout_ms = 300;
    return c;
}

static struct projection *
open_proj(const char *driver, int port)
{
    struct conf *c = proj_conf(driver, port);
    struct projection *p = NULL;
    char err[256] = "";

    if (projection_open(&p, c, err, sizeof(err)) != 0)
        fail_msg("projection_open(%s): %s", driver, err);
    assert_non_null(p);
    conf_free(c);
    return p;
}

struct rebuild_src {
    struct room_state **v;
    size_t n, at;
    struct proj_room cur; /* the one yielded */
};

static int
rebuild_next(void *arg, const struct proj_room **r)
{
    struct rebuild_src *s = arg;

    proj_room_clear(&s->cur);
    if (s->at == s->n)
        return 0;
    room_state_project(s->v[s->at++], &s->cur);
    *r = &s->cur;
    return 1;
}

static void
suite(struct projection *p, const char *app)
{
    char buf[256];
    const int64_t a_uids[] = {11, 12}, b_uids[] = {21, 22, 23, 24, 25}, d_uids[] = {41, 42};
    json_t *pg;

    /* ranking by online count */
    assert_int_equal(put(p, app, "A", 1, a_uids, 2, 0, T0), 0);
    assert_int_equal(put(p, app, "B", 1, b_uids, 5, 0, T0), 0);
    assert_int_equal(put(p, app, "C", 1, NULL, 0, 0, T0), 0);
    pg = list(p, app, 0, 10);
    assert_string_equal(ids(pg, buf, sizeof(buf)), "B,A,C");
    assert_true(json_is_null(json_object_get(pg, "next_cursor")));
    /* a cursor past any list saturates: an empty last page, never an overflow */
    {
        json_t *far = list(p, app, INT64_MAX, 100);
        assert_string_equal(ids(far, buf, sizeof(buf)), "");
        assert_true(json_is_null(json_object_get(far, "next_cursor")));
        json_decref(far);
        far = list(p, app, INT64_MAX - 5, 100);
        assert_string_equal(ids(far, buf, sizeof(buf)), "");
        json_decref(far);
    }
    json_t *b = entry(pg, "B");
    assert_int_equal(ival(b, "online"), 5);
    assert_int_equal(ival(b, "version"), 1);
    assert_int_equal(ival(b, "owner_uid"), 1);
    assert_string_equal(json_string_value(json_object_get(b, "title")), "title of B");
    json_decref(pg);

    /* equal online counts: recent gifts decide; gifts from the first sighting are not recent */
    assert_int_equal(put(p, app, "D", 1, d_uids, 2, 100000, T0), 0);
    assert_int_equal(put(p, app, "D", 2, d_uids, 2, 100100, T0 + 1000), 0); /* +100 */
    assert_int_equal(put(p, app, "A", 2, a_uids, 2, 500, T0 + 1000), 0);    /* +500 */
    pg = list(p, app, 0, 10);
    assert_string_equal(ids(pg, buf, sizeof(buf)), "B,A,D,C");
    assert_int_equal(ival(entry(pg, "A"), "recent_gifts"), 500);
    assert_int_equal(ival(entry(pg, "D"), "recent_gifts"), 100);
    assert_int_equal(ival(entry(pg, "D"), "gift_total"), 100100);
    json_decref(pg);
    /* two hours later the old gifts are no longer recent */
    assert_int_equal(put(p, app, "A", 3, a_uids, 2, 500, T0 + 2 * 3600000 + 5000), 0);
    pg = list(p, app, 0, 10);
    assert_int_equal(ival(entry(pg, "A"), "recent_gifts"), 0);
    assert_string_equal(ids(pg, buf, sizeof(buf)), "B,D,A,C");
    json_decref(pg);

    /* paging */
    pg = list(p, app, 0, 2);
    assert_string_equal(ids(pg, buf, sizeof(buf)), "B,D");
    assert_int_equal(ival(pg, "next_cursor"), 2);
    json_decref(pg);
    pg = list(p, app, 2, 2);
    assert_string_equal(ids(pg, buf, sizeof(buf)), "A,C");
    assert_true(json_is_null(json_object_get(pg, "next_cursor")));
    json_decref(pg);
    pg = list(p, app, 10, 2);
    assert_string_equal(ids(pg, buf, sizeof(buf)), "");
    json_decref(pg);

    /* presence follows joins and leaves */
    assert_string_equal(where(p, app, 11), "A");
    assert_string_equal(where(p, app, 23), "B");
    assert_string_equal(where(p, app, 999), "");
    const int64_t a_left[] = {12};
    assert_int_equal(put(p, app, "A", 4, a_left, 1, 500, T0 + 2 * 3600000 + 6000), 0);
    assert_string_equal(where(p, app, 11), "");
    assert_string_equal(where(p, app, 12), "A");
    /* 12 also joins C: presence moves to C and a later update of A does not steal it back */
    const int64_t c_uids[] = {12};
    assert_int_equal(put(p, app, "C", 2, c_uids, 1, 0, T0 + 2 * 3600000 + 7000), 0);
    assert_string_equal(where(p, app, 12), "C");
    assert_int_equal(put(p, app, "A", 5, a_left, 1, 700, T0 + 2 * 3600000 + 8000), 0);
    assert_string_equal(where(p, app, 12), "C");
    /* leaving A (the older room) keeps presence in C */
    assert_int_equal(put(p, app, "A", 6, NULL, 0, 700, T0 + 2 * 3600000 + 9000), 0);
    assert_string_equal(where(p, app, 12), "C");

    /* a late (older) update changes nothing */
    assert_int_equal(put(p, app, "B", 1, a_uids, 2, 0, T0), 0);
    pg = list(p, app, 0, 10);
    assert_int_equal(ival(entry(pg, "B"), "online"), 5);
    json_decref(pg);
    assert_string_equal(where(p, app, 21), "B");

    /* closing B: out of the list, its members nowhere */
    struct room_state *s = state(app, "B", 2, b_uids, 5, 0, T0 + 2 * 3600000 + 10000);
    s->status = ROOM_CLOSED;
    assert_int_equal(room_state_update_projection(p, s), 0);
    state_free(s);
    pg = list(p, app, 0, 10);
    assert_string_equal(ids(pg, buf, sizeof(buf)), "D,C,A");
    json_decref(pg);
    assert_string_equal(where(p, app, 21), "");

    /* another app sees nothing of this one */
    char other[64];
    snprintf(other, sizeof(other), "%s-other", app);
    pg = list(p, other, 0, 10);
    assert_string_equal(ids(pg, buf, sizeof(buf)), "");
    json_decref(pg);
    assert_string_equal(where(p, other, 12), "");
    assert_int_equal(put(p, other, "X", 1, c_uids, 1, 0, T0), 0);
    assert_string_equal(where(p, other, 12), "X");
    assert_string_equal(where(p, app, 12), "C");

    /* rebuild replaces everything of the app */
    const int64_t r1[] = {71, 72, 73}, r2[] = {81};
    struct room_state *v[2] = {state(app, "R1", 9, r1, 3, 10, T0),
                               state(app, "R2", 4, r2, 1, 0, T0)};
    struct rebuild_src src = {.v = v, .n = 2};
    assert_int_equal(projection_rebuild(p, app, rebuild_next, &src), 0);
    state_free(v[0]);
    state_free(v[1]);
    pg = list(p, app, 0, 10);
    assert_string_equal(ids(pg, buf, sizeof(buf)), "R1,R2");
    json_decref(pg);
    assert_string_equal(where(p, app, 12), "");
    assert_string_equal(where(p, app, 72), "R1");
    assert_string_equal(where(p, other, 12), "X"); /* other app untouched */
}

static void
test_memory(void **state_)
{
    struct projection *p = open_proj("memory", 1);

    suite(p, "hyapp");
    projection_close(p);
}

static void
test_redis(void **state_)
{
    if (!th_port_open(redis_port))
        th_skip_or_fail("redis-server not reachable (scripts/servers.sh start build/servers)");
    struct projection *p = open_proj("redis", redis_port);
    suite(p, "hyapp");
    /* a second handle (another node) sees the same */
    struct projection *q = open_proj("redis", redis_port);
    char buf[64];
    json_t *pg = list(q, "hyapp", 0, 10);
    assert_string_equal(ids(pg, buf, sizeof(buf)), "R1,R2");
    json_decref(pg);
    projection_close(q);
    assert_int_equal(p->ops->clear(p, "hyapp"), 0);
    assert_int_equal(p->ops->clear(p, "hyapp-other"), 0);
    projection_close(p);
}

/* ==== The rebuild protocol (rebuild_begin / rebuild_end) ==== */

static void
test_rebuild_protocol_memory(void **state_)
{
    struct projection *p = open_proj("memory", 1);

    assert_int_equal(p->ops->rebuild_begin(p), 1); /* empty after open */
    assert_int_equal(p->ops->rebuild_begin(p), 0); /* being rebuilt */
    p->ops->rebuild_end(p, false);
    assert_int_equal(p->ops->rebuild_begin(p), 1); /* failed: again */
    p->ops->rebuild_end(p, true);
    assert_int_equal(p->ops->rebuild_begin(p), 0);
    assert_int_equal(p->ops->rebuild_begin(p), 0);
    projection_close(p);
}

static void
redis_del(int port, const char *key)
{
    struct timeval tv = {1, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);

    assert_true(c != NULL && !c->err);
    redisReply *r = redisCommand(c, "DEL %s", key);
    assert_non_null(r);
    freeReplyObject(r);
    redisFree(c);
}

/* Two handles (two nodes) on one Redis: one rebuilds, the marker says when
 * it is needed again (Redis lost its data). */
static void
test_rebuild_protocol_redis(void **state_)
{
    if (!th_port_open(redis_port))
        th_skip_or_fail("redis-server not reachable (scripts/servers.sh start build/servers)");
    struct projection *p = open_proj("redis", redis_port), *q = open_proj("redis", redis_port);
    char *built = xasprintf("%sproj_meta:built", prefix);

    assert_int_equal(p->ops->rebuild_begin(p), 1); /* no marker yet */
    assert_int_equal(q->ops->rebuild_begin(q), 0); /* p holds the lock */
    assert_int_equal(p->ops->rebuild_begin(p), 0);
    p->ops->rebuild_end(p, false); /* failed: lock released, no marker */
    assert_int_equal(q->ops->rebuild_begin(q), 1);
    q->ops->rebuild_end(q, true);
    assert_int_equal(p->ops->rebuild_begin(p), 0);
    assert_int_equal(q->ops->rebuild_begin(q), 0);
    redis_del(redis_port, built); /* as if Redis restarted empty */
    assert_int_equal(q->ops->rebuild_begin(q), 1);
    q->ops->rebuild_end(q, true);
    assert_int_equal(p->ops->rebuild_begin(p), 0);
    redis_del(redis_port, built);
    free(built);
    projection_close(p);
    projection_close(q);
}

/* ==== Redis down, then back ==== */

static void
test_redis_down_and_back(void **state_)
{
    char *dir = th_tmpdir();
    int port = th_free_port();
    int rpid = th_start_redis(port, dir);
    struct projection *p = open_proj("redis", port);
    const int64_t u[] = {5, 6};
    char *js = NULL, buf[64];

    assert_int_equal(put(p, "hyapp", "K", 1, u, 2, 0, T0), 0);
    th_kill(rpid);
    /* down: updates fail (never blocking the command long) and are parked; reads fail */
    int64_t t0 = clock_mono_ms();
    assert_int_equal(put(p, "hyapp", "K", 2, u, 1, 0, T0 + 1), ROOMD_EUNAVAIL);
    assert_int_equal(put(p, "hyapp", "L", 1, u, 2, 0, T0 + 2), ROOMD_EUNAVAIL);
    assert_int_equal(put(p, "hyapp", "L", 2, u, 2, 0, T0 + 3), ROOMD_EUNAVAIL);
    assert_true(clock_mono_ms() - t0 < 1000);
    assert_int_equal(p->ops->list_rooms(p, "hyapp", 0, 10, &js), ROOMD_EUNAVAIL);
    assert_null(js);
    assert_int_equal(p->ops->presence(p, "hyapp", 5, &js), ROOMD_EUNAVAIL);
    assert_int_equal(p->ops->rebuild_begin(p), ROOMD_EUNAVAIL); /* cannot tell */

    /* back, empty: the parked updates are replayed by themselves */
    rpid = th_start_redis(port, dir);
    int64_t start = clock_mono_ms();
    for (;;) {
        js = NULL;
        if (p->ops->list_rooms(p, "hyapp", 0, 10, &js) == 0) {
            json_error_t e;
            json_t *pg = json_loads(js, 0, &e);
            free(js);
            ids(pg, buf, sizeof(buf));
            int done = strcmp(buf, "L,K") == 0;
            if (done) {
                assert_int_equal(ival(entry(pg, "K"), "version"), 2);
                assert_int_equal(ival(entry(pg, "K"), "online"), 1);
                assert_int_equal(ival(entry(pg, "L"), "version"), 2);
            }
            json_decref(pg);
            if (done)
                break;
        } else {
            free(js);
        }
        assert_true(clock_mono_ms() - start < 5000);
        usleep(50 * 1000);
    }
    assert_string_equal(where(p, "hyapp", 5), "L");
    /* Redis came back empty: the missing marker asks for a rebuild from the store */
    assert_int_equal(p->ops->rebuild_begin(p), 1);
    p->ops->rebuild_end(p, true);
    assert_int_equal(p->ops->rebuild_begin(p), 0);
    projection_close(p);
    th_kill(rpid);
    char *cmd = xasprintf("rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", dir);
    free(cmd);
    free(dir);
}

static int
setup(void **state_)
{
    redis_port = th_env_port("ROOMD_REDIS_PORT", 6390);
    snprintf(prefix, sizeof(prefix), "roomdtest:%ld:%lld:", (long)getpid(),
             (long long)clock_wall_ms());
    return 0;
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_memory),
        cmocka_unit_test(test_redis),
        cmocka_unit_test(test_rebuild_protocol_memory),
        cmocka_unit_test(test_rebuild_protocol_redis),
        cmocka_unit_test(test_redis_down_and_back),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
