/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_lease_redis.c: the Redis lease (src/lease/lease_redis.c) against a real
 * redis-server: the shared test server (:6390, scripts/servers.sh) for
 * exclusivity, tokens, renewal, expiry takeover, release and loss; a private
 * redis-server started and stopped by the test for "Redis down, then back".
 */
#include "helpers.h"

#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/xmalloc.h"
#include "lease/lease.h"

#include <hiredis.h>
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

static struct conf *
lease_conf(int port, const char *addr, int64_t ttl_ms, int64_t renew_ms)
{
    struct conf *c = xcalloc(1, sizeof(*c));

    conf_defaults(c);
    c->redis.enabled = true;
    free(c->redis.addr);
    c->redis.addr = xasprintf("127.0.0.1:%d", port);
    free(c->redis.key_prefix);
    c->redis.key_prefix = xstrdup(prefix);
    c->redis.connect_timeout_ms = 300;
    c->redis.command_timeout_ms = 300;
    free(c->lease.driver);
    c->lease.driver = xstrdup("redis");
    c->lease.ttl_ms = ttl_ms;
    c->lease.renew_every_ms = renew_ms;
    free(c->http.advertise_addr);
    c->http.advertise_addr = xstrdup(addr);
    free(c->admin.advertise_addr); /* "10.0.0.1:8080" -> admin "10.0.0.1:9081" */
    c->admin.advertise_addr = xasprintf("%.*s:9081", (int)(strrchr(addr, ':') - addr), addr);
    free(c->app.node_id);
    c->app.node_id = xasprintf("node-%s", addr);
    return c;
}

static struct lease *
open_lease(int port, const char *addr, int64_t ttl_ms, int64_t renew_ms)
{
    struct conf *c = lease_conf(port, addr, ttl_ms, renew_ms);
    struct lease *l = NULL;
    char err[256] = "";

    if (lease_open(&l, c, err, sizeof(err)) != 0)
        fail_msg("lease_open: %s", err);
    conf_free(c);
    return l;
}

static int
acquire(struct lease *l, const char *room, int64_t *token, char *owner, size_t ownerlen)
{
    return l->ops->acquire(l, "hyapp", room, token, owner, ownerlen);
}

static void
redis_do(int port, const char *cmd)
{
    struct timeval tv = {1, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    assert_true(c != NULL && !c->err);
    redisReply *r = redisCommand(c, cmd);
    assert_non_null(r);
    freeReplyObject(r);
    redisFree(c);
}

static int
setup(void **state)
{
    redis_port = th_env_port("ROOMD_REDIS_PORT", 6390);
    if (!th_port_open(redis_port))
        th_skip_or_fail("redis-server not reachable (scripts/servers.sh start build/servers)");
    snprintf(prefix, sizeof(prefix), "roomdtest:%ld:%lld:", (long)getpid(),
             (long long)clock_wall_ms());
    return 0;
}

/* Deletes every key of this run from the shared server. */
static int
teardown(void **state)
{
    struct timeval tv = {1, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", redis_port, tv);
    char cursor[32] = "0", pattern[80];

    if (c == NULL || c->err) {
        if (c != NULL)
            redisFree(c);
        return 0;
    }
    snprintf(pattern, sizeof(pattern), "%s*", prefix);
    do {
        redisReply *r = redisCommand(c, "SCAN %s MATCH %s COUNT 500", cursor, pattern);
        if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
            if (r != NULL)
                freeReplyObject(r);
            break;
        }
        snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
        for (size_t i = 0; i < r->element[1]->elements; i++) {
            redisReply *d = redisCommand(c, "DEL %s", r->element[1]->element[i]->str);
            if (d != NULL)
                freeReplyObject(d);
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    redisFree(c);
    return 0;
}

/* A lease written by a node that does not advertise its admin listener (no
 * admin part): the owner is its public address alone. */
static void
test_owner_without_admin_addr(void **state)
{
    struct lease *b = open_lease(redis_port, "10.0.0.2:8080", 5000, 1000);
    struct timeval tv = {1, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", redis_port, tv);
    char owner[128];
    int64_t t = 0;

    assert_true(c != NULL && !c->err);
    redisReply *r =
        redisCommand(c, "SET %slease:hyapp:old %s PX 5000", prefix, "7 node-old 10.0.0.7:8080");
    assert_true(r != NULL && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    redisFree(c);
    assert_int_equal(acquire(b, "old", &t, owner, sizeof(owner)), ROOMD_ENOTOWNER);
    assert_string_equal(owner, "10.0.0.7:8080");
    lease_close(b);
}

static void
test_exclusive_and_release(void **state)
{
    struct lease *a = open_lease(redis_port, "10.0.0.1:8080", 5000, 1000);
    struct lease *b = open_lease(redis_port, "10.0.0.2:8080", 5000, 1000);
    int64_t ta = 0, ta2 = 0, tb = 0;
    char owner[128];

    assert_int_equal(acquire(a, "r1", &ta, owner, sizeof(owner)), 0);
    assert_true(ta > 0);
    assert_string_equal(owner, "");
    /* A again: same token, from memory */
    assert_int_equal(acquire(a, "r1", &ta2, owner, sizeof(owner)), 0);
    assert_int_equal(ta2, ta);
    /* B is refused and told where the owner is */
    assert_int_equal(acquire(b, "r1", &tb, owner, sizeof(owner)), ROOMD_ENOTOWNER);
    assert_string_equal(owner, "10.0.0.1:8080 10.0.0.1:9081"); /* public, admin */
    /* another room is free for B */
    assert_int_equal(acquire(b, "r2", &tb, owner, sizeof(owner)), 0);
    /* release hands r1 over at once, with a larger token */
    a->ops->release(a, "hyapp", "r1", ta);
    assert_int_equal(acquire(b, "r1", &tb, owner, sizeof(owner)), 0);
    assert_true(tb > ta);
    assert_int_equal(acquire(a, "r1", &ta2, owner, sizeof(owner)), ROOMD_ENOTOWNER);
    assert_string_equal(owner, "10.0.0.2:8080 10.0.0.2:9081");
    /* a release with a stale token does nothing */
    a->ops->release(a, "hyapp", "r1", ta);
    b->ops->release(b, "hyapp", "r1", ta);
    assert_int_equal(acquire(a, "r1", &ta2, owner, sizeof(owner)), ROOMD_ENOTOWNER);
    lease_close(a);
    lease_close(b); /* close releases r1, r2 */
    a = open_lease(redis_port, "10.0.0.1:8080", 5000, 1000);
    assert_int_equal(acquire(a, "r1", &ta2, owner, sizeof(owner)), 0);
    assert_true(ta2 > tb);
    assert_int_equal(acquire(a, "r2", &ta2, owner, sizeof(owner)), 0);
    lease_close(a);
}

static void
test_token_monotonic(void **state)
{
    struct lease *a = open_lease(redis_port, "10.0.0.1:8080", 5000, 1000);
    struct lease *b = open_lease(redis_port, "10.0.0.2:8080", 5000, 1000);
    int64_t last = 0, t = 0;
    char owner[128];

    for (int i = 0; i < 20; i++) {
        struct lease *l = i % 2 ? b : a;
        assert_int_equal(acquire(l, "mono", &t, owner, sizeof(owner)), 0);
        assert_true(t > last);
        last = t;
        l->ops->release(l, "hyapp", "mono", t);
    }
    /* tokens start near the wall clock (ms) so they outgrow a Redis that lost its data */
    assert_true(last > clock_wall_ms() - 60000);
    lease_close(a);
    lease_close(b);
}

static void
test_renewal_keeps_lease(void **state)
{
    struct lease *a = open_lease(redis_port, "10.0.0.1:8080", 600, 150);
    struct lease *b = open_lease(redis_port, "10.0.0.2:8080", 600, 150);
    int64_t ta = 0, t = 0;
    char owner[128];

    assert_int_equal(acquire(a, "renew", &ta, owner, sizeof(owner)), 0);
    for (int i = 0; i < 8; i++) {
        usleep(200 * 1000);
        assert_int_equal(acquire(b, "renew", &t, owner, sizeof(owner)), ROOMD_ENOTOWNER);
        assert_int_equal(acquire(a, "renew", &t, owner, sizeof(owner)), 0);
        assert_int_equal(t, ta);
    }
    lease_close(a);
    lease_close(b);
}

/* The owner dies without releasing (a child process _exits, like kill -9):
 * the other node takes over after the TTL, with a larger token. */
static void
test_expiry_takeover(void **state)
{
    int pipefd[2];
    int64_t tchild = 0, t = 0;
    char owner[128];

    assert_int_equal(pipe(pipefd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct lease *c = open_lease(redis_port, "10.0.0.9:8080", 800, 200);
        int64_t tok = 0;
        char o[128];
        if (acquire(c, "takeover", &tok, o, sizeof(o)) != 0)
            tok = -1;
        if (write(pipefd[1], &tok, sizeof(tok)) != sizeof(tok))
            _exit(2);
        _exit(0);
    }
    close(pipefd[1]);
    assert_int_equal(read(pipefd[0], &tchild, sizeof(tchild)), sizeof(tchild));
    close(pipefd[0]);
    waitpid(pid, NULL, 0);
    assert_true(tchild > 0);

    struct lease *b = open_lease(redis_port, "10.0.0.2:8080", 800, 200);
    int64_t start = clock_mono_ms();
    assert_int_equal(acquire(b, "takeover", &t, owner, sizeof(owner)), ROOMD_ENOTOWNER);
    assert_string_equal(owner, "10.0.0.9:8080 10.0.0.9:9081");
    int rc;
    while ((rc = acquire(b, "takeover", &t, owner, sizeof(owner))) == ROOMD_ENOTOWNER) {
        assert_true(clock_mono_ms() - start < 3000);
        usleep(50 * 1000);
    }
    assert_int_equal(rc, 0);
    assert_true(t > tchild);
    assert_true(clock_mono_ms() - start >= 200); /* it did wait for the TTL */
    lease_close(b);
}

/* Someone else's lease appears under ours (e.g. our key expired during a
 * long pause): the renewer notices and acquire answers ENOTOWNER. */
static void
test_lost_lease_detected(void **state)
{
    struct lease *a = open_lease(redis_port, "10.0.0.1:8080", 600, 100);
    struct lease *b = open_lease(redis_port, "10.0.0.2:8080", 600, 100);
    int64_t ta = 0, tb = 0, t = 0;
    char owner[128], cmd[256];

    assert_int_equal(acquire(a, "lost", &ta, owner, sizeof(owner)), 0);
    snprintf(cmd, sizeof(cmd), "DEL %slease:hyapp:lost", prefix);
    redis_do(redis_port, cmd);
    assert_int_equal(acquire(b, "lost", &tb, owner, sizeof(owner)), 0);
    assert_true(tb > ta);
    int64_t start = clock_mono_ms();
    int rc;
    while ((rc = acquire(a, "lost", &t, owner, sizeof(owner))) == 0) {
        assert_int_equal(t, ta);
        assert_true(clock_mono_ms() - start < 2000);
        usleep(20 * 1000);
    }
    assert_int_equal(rc, ROOMD_ENOTOWNER);
    assert_string_equal(owner, "10.0.0.2:8080 10.0.0.2:9081");
    lease_close(a);
    lease_close(b);
}

/* ==== A private redis-server, stopped and restarted ==== */

static void
test_redis_down_and_back(void **state)
{
    char *dir = th_tmpdir();
    int port = th_free_port();
    int rpid = th_start_redis(port, dir);
    struct lease *a = open_lease(port, "10.0.0.1:8080", 1000, 200);
    struct lease *b = open_lease(port, "10.0.0.2:8080", 1000, 200);
    int64_t ta = 0, t = 0;
    char owner[128];

    assert_int_equal(acquire(a, "down", &ta, owner, sizeof(owner)), 0);
    th_kill(rpid);
    /* B cannot lease anything: unavailable, never a second owner */
    assert_int_equal(acquire(b, "down", &t, owner, sizeof(owner)), ROOMD_EUNAVAIL);
    assert_int_equal(acquire(b, "other", &t, owner, sizeof(owner)), ROOMD_EUNAVAIL);
    /* A's lease stops being usable once its TTL has run out unconfirmed */
    int64_t start = clock_mono_ms();
    int rc;
    while ((rc = acquire(a, "down", &t, owner, sizeof(owner))) == 0) {
        assert_int_equal(t, ta);
        assert_true(clock_mono_ms() - start < 1500);
        usleep(50 * 1000);
    }
    assert_int_equal(rc, ROOMD_EUNAVAIL);

    /* Redis comes back empty; both handles reconnect by themselves */
    rpid = th_start_redis(port, dir);
    start = clock_mono_ms();
    while ((rc = acquire(a, "down", &t, owner, sizeof(owner))) == ROOMD_EUNAVAIL) {
        assert_true(clock_mono_ms() - start < 3000);
        usleep(50 * 1000);
    }
    assert_int_equal(rc, 0);
    assert_true(t > ta); /* fencing survives the data loss */
    assert_int_equal(acquire(b, "down", &t, owner, sizeof(owner)), ROOMD_ENOTOWNER);
    assert_string_equal(owner, "10.0.0.1:8080 10.0.0.1:9081"); /* public, admin */
    assert_int_equal(acquire(b, "other", &t, owner, sizeof(owner)), 0);
    lease_close(a);
    lease_close(b);
    th_kill(rpid);
    char *cmd = xasprintf("rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", dir);
    free(cmd);
    free(dir);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exclusive_and_release),
        cmocka_unit_test(test_owner_without_admin_addr),
        cmocka_unit_test(test_token_monotonic),
        cmocka_unit_test(test_renewal_keeps_lease),
        cmocka_unit_test(test_expiry_takeover),
        cmocka_unit_test(test_lost_lease_detected),
        cmocka_unit_test(test_redis_down_and_back),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
