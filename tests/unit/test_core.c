/* SPDX-License-Identifier: Apache-2.0 */
/* test_core.c: core utilities: error table, backoff bounds, UUIDv7, UTC days,
 * background threads, the driver-by-name lookup, xmemdup, the name-keyed
 * tree comparator. */
#include "helpers.h"

#include "core/backoff.h"
#include "core/clock.h"
#include "core/driver.h"
#include "core/err.h"
#include "core/sink_bits.h"
#include "core/thread.h"
#include "core/tree.h"
#include "core/uuid.h"
#include "core/xmalloc.h"
#include "store/store.h"

#include <pthread.h>
#include <search.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void
test_err_table(void **state)
{
    assert_int_equal(roomd_err_http_status(0), 200);
    assert_int_equal(roomd_err_http_status(ROOMD_ENOTFOUND), 404);
    assert_int_equal(roomd_err_http_status(ROOMD_EFUNDS), 402);
    assert_int_equal(roomd_err_http_status(ROOMD_ETOOBIG), 413);
    assert_int_equal(roomd_err_http_status(ROOMD_EUNAVAIL), 503);
    assert_string_equal(roomd_err_code(ROOMD_EREUSED), "idempotency_key_reused");
    assert_true(roomd_err_retryable(ROOMD_EUNAVAIL));
    assert_false(roomd_err_retryable(ROOMD_EPERM));
    assert_false(roomd_err_retryable(ROOMD_EINVAL));
    assert_string_equal(roomd_strerror(-12345), "unknown error");
}

static void
test_backoff(void **state)
{
    /* 100ms doubling, capped at 1s */
    assert_int_equal(backoff_ceiling_ms(1, 100, 1000), 100);
    assert_int_equal(backoff_ceiling_ms(2, 100, 1000), 200);
    assert_int_equal(backoff_ceiling_ms(4, 100, 1000), 800);
    assert_int_equal(backoff_ceiling_ms(5, 100, 1000), 1000);
    assert_int_equal(backoff_ceiling_ms(60, 5000, 300000), 300000);
    for (int n = 1; n < 12; n++)
        for (int i = 0; i < 200; i++) {
            int64_t c = backoff_ceiling_ms(n, 100, 1000);
            int64_t d = backoff_delay_ms(n, 100, 1000);
            assert_true(d >= c / 2 && d <= c);
        }
}

static void
test_uuid_v7(void **state)
{
    char a[UUID_STR_LEN], b[UUID_STR_LEN];

    uuid_v7(1700000000000, a);
    uuid_v7(1700000000001, b);
    assert_int_equal(strlen(a), 36);
    assert_int_equal(a[14], '7');                /* version */
    assert_true(strchr("89ab", a[19]) != NULL);  /* variant */
    assert_memory_equal(a, "018bcfe5-6800", 13); /* 48-bit ms prefix */
    for (int i = 0; i < 36; i++)                 /* 8-4-4-4-12 lowercase hex digits */
        if (i == 8 || i == 13 || i == 18 || i == 23)
            assert_int_equal(a[i], '-');
        else
            assert_true(strchr("0123456789abcdef", a[i]) != NULL && a[i] != '\0');
    assert_true(strcmp(a, b) < 0); /* time ordered */
    uuid_v7(1700000000000, b);
    assert_string_not_equal(a, b); /* random tail */
}

/* Ids drawn by several threads at once, in the same millisecond (so the
 * random tail alone keeps them apart): none repeats. Each thread draws many
 * more ids than one refill of its random pool holds. */
#define UUID_THREADS 4
#define UUID_PER_THREAD 2000

static void *
uuid_burst(void *arg)
{
    char(*ids)[UUID_STR_LEN] = arg;

    for (int i = 0; i < UUID_PER_THREAD; i++)
        uuid_v7(1700000000000, ids[i]);
    return NULL;
}

static int
uuid_cmp(const void *a, const void *b)
{
    return strcmp(a, b);
}

static void
test_uuid_v7_unique_across_threads(void **state)
{
    char(*ids)[UUID_STR_LEN] = calloc(UUID_THREADS * UUID_PER_THREAD, UUID_STR_LEN);
    pthread_t t[UUID_THREADS];

    assert_non_null(ids);
    for (int i = 0; i < UUID_THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, uuid_burst, ids + i * UUID_PER_THREAD), 0);
    for (int i = 0; i < UUID_THREADS; i++)
        pthread_join(t[i], NULL);
    qsort(ids, UUID_THREADS * UUID_PER_THREAD, UUID_STR_LEN, uuid_cmp);
    for (int i = 1; i < UUID_THREADS * UUID_PER_THREAD; i++)
        assert_string_not_equal(ids[i - 1], ids[i]);
    free(ids);
}

/* After a fork the child's ids differ from the parent's, although the
 * child starts with a copy of the parent's memory (its buffered random bytes
 * too): the parent and the child each draw the next ids of the same millisecond. */
static void
test_uuid_v7_unique_across_fork(void **state)
{
    char parent[8][UUID_STR_LEN], child[8][UUID_STR_LEN], first[UUID_STR_LEN];
    int fd[2];
    pid_t pid;
    int status;

    uuid_v7(1700000000000, first); /* the parent's pool now holds unused bytes */
    assert_int_equal(pipe(fd), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        for (int i = 0; i < 8; i++)
            uuid_v7(1700000000000, child[i]);
        _exit(write(fd[1], child, sizeof(child)) == (ssize_t)sizeof(child) ? 0 : 1);
    }
    close(fd[1]);
    for (int i = 0; i < 8; i++)
        uuid_v7(1700000000000, parent[i]);
    assert_int_equal(read(fd[0], child, sizeof(child)), (ssize_t)sizeof(child));
    close(fd[0]);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    for (int i = 0; i < 8; i++)
        for (int k = 0; k < 8; k++)
            assert_string_not_equal(parent[i], child[k]);
}

static void
test_utc_day(void **state)
{
    assert_int_equal(clock_utc_day(0), 0);
    assert_int_equal(clock_utc_day(86399999), 0);
    assert_int_equal(clock_utc_day(86400000), 1);
    assert_int_equal(clock_utc_day(-1), -1);
    char buf[32];
    clock_format_utc(1700000000123, buf, sizeof(buf));
    assert_string_equal(buf, "2023-11-14T22:13:20.123Z");
    int64_t before = clock_wall_ms();
    clock_set_offset_ms(86400000);
    assert_true(clock_wall_ms() - before >= 86400000);
    clock_set_offset_ms(0);
}

/* bg_thread: a pool of sleepers all return at the stop, long before their
 * 60 s timeout; a wake given before the wait is not lost. */
struct sleeper {
    struct bg_thread *t;
    atomic_int rounds;
};

static void *
sleeper_main(void *arg)
{
    struct sleeper *s = arg;

    while (!bg_thread_sleep(s->t, 60000))
        atomic_fetch_add(&s->rounds, 1);
    return NULL;
}

static void
test_bg_thread(void **state)
{
    struct bg_thread t;
    struct sleeper s = {&t, 0};

    (void)state;
    bg_thread_init(&t);
    bg_thread_wake(&t); /* counted: the first wait returns at once */
    assert_false(bg_thread_sleep(&t, 60000));
    for (int i = 0; i < 3; i++)
        assert_int_equal(bg_thread_spawn(&t, sleeper_main, &s), 0);
    bg_thread_wake(&t);
    for (int i = 0; i < 500 && atomic_load(&s.rounds) == 0; i++)
        usleep(10000);
    assert_int_equal(atomic_load(&s.rounds), 1); /* one wake wakes one sleeper once */
    int64_t t0 = clock_mono_ms();
    assert_false(bg_thread_stopping(&t));
    bg_thread_stop(&t);
    assert_true(clock_mono_ms() - t0 < 10000);
    assert_false(t.inited);
    bg_thread_stop(&t); /* twice: a no-op */

    struct bg_thread never = {0};
    bg_thread_stop(&never); /* never initialized: a no-op */
}

static void
test_driver_pick(void **state)
{
    static const char *const names[] = {"local", "redis", NULL};
    char err[128] = "";

    (void)state;
    assert_int_equal(driver_pick("lease.driver", "local", names, err, sizeof err), 0);
    assert_int_equal(driver_pick("lease.driver", "redis", names, err, sizeof err), 1);
    assert_string_equal(err, "");
    assert_int_equal(driver_pick("lease.driver", "etcd", names, err, sizeof err), -1);
    assert_string_equal(err, "lease.driver: unknown driver \"etcd\" (local|redis)");
    assert_int_equal(driver_pick("wallet.driver", NULL, names, err, sizeof err), -1);
    assert_string_equal(err, "wallet.driver: unknown driver \"\" (local|redis)");
}

static void
test_xmemdup(void **state)
{
    const int64_t v[3] = {7, -1, INT64_MAX};
    int64_t *c = xmemdup(v, sizeof v);

    (void)state;
    assert_ptr_not_equal(c, v);
    assert_memory_equal(c, v, sizeof v);
    free(c);
    assert_null(xmemdup(NULL, 0)); /* an empty array stays NULL */
}

struct named {
    char *name;
    int n;
};

static void
test_tree_name_cmp(void **state)
{
    struct named a = {"app:r2", 2}, b = {"app:r1", 1}, probe = {"app:r2", 0};
    void *root = NULL;

    (void)state;
    assert_true(tree_name_cmp(&a, &b) > 0);
    assert_int_equal(tree_name_cmp(&a, &probe), 0);
    tsearch(&a, &root, tree_name_cmp);
    tsearch(&b, &root, tree_name_cmp);
    void *hit = tfind(&probe, &root, tree_name_cmp);
    assert_non_null(hit);
    assert_int_equal((*(struct named **)hit)->n, 2);
    probe.name = "app:r3";
    assert_null(tfind(&probe, &root, tree_name_cmp));
    tdelete(&a, &root, tree_name_cmp);
    tdelete(&b, &root, tree_name_cmp);
    assert_null(root);
}

/* Every sinks_done bit has a name that parses back to it (the wallet's
 * too); no other bit has one; the limited sinks carry only their event. */
static void
test_sink_bits(void **state)
{
    (void)state;
    int named = 0;
    for (int b = 0; b < 32; b++) {
        uint32_t bit = 1u << b;
        const char *name = sink_bit_name(bit);
        if (!(SINK_BITS_ALL & bit)) {
            assert_string_equal(name, "");
            continue;
        }
        assert_true(*name != '\0');
        assert_int_equal(sink_bit_parse(name), bit);
        assert_non_null(strstr(sink_bit_names(), name));
        assert_true(b < OUTBOX_SINK_BITS); /* outbox_counts tracks it */
        named++;
    }
    assert_int_equal(named, 6);
    assert_string_equal(sink_bit_name(SINK_BIT_WALLET), "wallet");
    assert_int_equal(sink_bit_parse("wallet"), SINK_BIT_WALLET);
    assert_int_equal(sink_bit_parse(""), 0);
    assert_int_equal(sink_bit_parse("fax"), 0);
    assert_int_equal(sink_bit_parse(NULL), 0);
    assert_true(sink_bit_carries(SINK_BIT_TIM, "RoomUserJoined"));
    assert_false(sink_bit_carries(SINK_BIT_ROCKET, "RoomUserJoined"));
    assert_true(sink_bit_carries(SINK_BIT_ROCKET, "RoomRocketIgnited"));
    assert_false(sink_bit_carries(SINK_BIT_WALLET, "RoomUserJoined"));
    assert_true(sink_bit_carries(SINK_BIT_WALLET, "RoomGiftSent"));
}

/* The per-sink oldest undelivered counts only rows carrying the sink: joins
 * stuck on IM leave the rocket and wallet ages at 0. */
static void
test_counts_oldest_per_sink(void **state)
{
    (void)state;
    struct outbox_counts c = {0};

    outbox_counts_oldest(&c, SINK_BIT_LOG, "RoomUserJoined", 1000);
    outbox_counts_oldest(&c, SINK_BIT_LOG | SINK_BIT_TIM, "RoomRocketIgnited", 2000);
    outbox_counts_oldest(&c, SINK_BIT_LOG | SINK_BIT_TIM, "RoomGiftSent", 3000);
    assert_int_equal(c.oldest_undelivered_ms, 1000);
    assert_int_equal(c.oldest_missing_ms[1], 1000); /* tim: the join */
    assert_int_equal(c.oldest_missing_ms[0], 0);    /* log delivered all */
    assert_int_equal(c.oldest_missing_ms[4], 2000); /* rocket: its ignition only */
    assert_int_equal(c.oldest_missing_ms[5], 3000); /* wallet: the gift only */
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_err_table),
        cmocka_unit_test(test_backoff),
        cmocka_unit_test(test_uuid_v7),
        cmocka_unit_test(test_uuid_v7_unique_across_threads),
        cmocka_unit_test(test_uuid_v7_unique_across_fork),
        cmocka_unit_test(test_utc_day),
        cmocka_unit_test(test_bg_thread),
        cmocka_unit_test(test_driver_pick),
        cmocka_unit_test(test_xmemdup),
        cmocka_unit_test(test_tree_name_cmp),
        cmocka_unit_test(test_sink_bits),
        cmocka_unit_test(test_counts_oldest_per_sink),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
