/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_group_commit.c: group commit on a real SQLite file: 16 threads commit
 * many mutations on distinct rooms; every one commits, batches are fewer than
 * mutations (the committer really groups), and one poisoned mutation (a
 * reused command_id) fails alone while its batch commits.
 */
#include "helpers.h"
#include "store_suite.h"

#include "conf/conf.h"
#include "core/err.h"
#include "core/xmalloc.h"
#include "store/group_commit.h"
#include "store/store.h"

#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NTHREADS 16
#define PER_THREAD 40
#define T0 1000000000LL

struct worker {
    struct group_commit *gc;
    int idx;
    int failures;
    int poisoned_rc;
};

static void *
worker_main(void *arg)
{
    struct worker *w = arg;

    for (int i = 0; i < PER_THREAD; i++) {
        char room[32], cmd[32];
        struct mutation *m;
        int rc;

        snprintf(room, sizeof(room), "t%d-r%d", w->idx, i);
        snprintf(cmd, sizeof(cmd), "t%d-c%d", w->idx, i);
        m = store_suite_mutation("gc", room, cmd, 1, 2, T0 + i);
        rc = group_commit_submit(w->gc, m);
        if (rc != m->rc || rc != 0)
            w->failures++;
        free(m);
        if (w->idx == 0 && i == PER_THREAD / 2) {
            /* The poison: a new room under an already used command_id. */
            m = store_suite_mutation("gc", "poison-room", "t0-c0", 1, 1, T0);
            w->poisoned_rc = group_commit_submit(w->gc, m);
            free(m);
        }
    }
    return NULL;
}

static int
rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    return remove(path);
}

static void
t_group_commit(void **state)
{
    char *dir = th_tmpdir();
    struct conf *c = th_conf_sqlite(dir);
    struct store *st = store_suite_open(c);
    struct group_commit *gc = NULL;
    struct worker w[NTHREADS];
    pthread_t th[NTHREADS];
    struct outbox_counts oc;
    struct room_load l;
    uint64_t batches, muts;

    assert_int_equal(group_commit_open(&gc, st, 32), 0);
    for (int i = 0; i < NTHREADS; i++) {
        w[i] = (struct worker){.gc = gc, .idx = i};
        assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < NTHREADS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(w[i].failures, 0);
    }
    assert_int_equal(w[0].poisoned_rc, ROOMD_EREUSED);
    group_commit_stats(gc, &batches, &muts);
    group_commit_close(gc);
    print_message("group commit: %llu mutations in %llu batches\n", (unsigned long long)muts,
                  (unsigned long long)batches);
    assert_int_equal(muts, NTHREADS * PER_THREAD + 1);
    assert_true(batches < muts);

    assert_int_equal(store_outbox_counts(st, &oc), 0);
    assert_int_equal(oc.pending, NTHREADS * PER_THREAD * 2);
    assert_int_equal(store_load_room(st, "gc", "poison-room", &l), ROOMD_ENOTFOUND);
    assert_int_equal(store_load_room(st, "gc", "t15-r39", &l), 0);
    assert_int_equal(l.version, 1);
    room_load_clear(&l);

    store_close(st);
    conf_free(c);
    nftw(dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
    free(dir);
}

/* Closing drains: a submit racing with close either commits or is refused,
 * never hangs; and close with nothing queued returns at once. */
static void
t_close_empty(void **state)
{
    char *dir = th_tmpdir();
    struct conf *c = th_conf_sqlite(dir);
    struct store *st = store_suite_open(c);
    struct group_commit *gc = NULL;
    uint64_t b, m;

    assert_int_equal(group_commit_open(&gc, st, 1), 0);
    struct mutation *x = store_suite_mutation("gc", "r1", "c1", 1, 1, T0);
    assert_int_equal(group_commit_submit(gc, x), 0);
    free(x);
    group_commit_stats(gc, &b, &m);
    assert_int_equal(b, 1);
    assert_int_equal(m, 1);
    group_commit_close(gc);
    group_commit_close(NULL);
    store_close(st);
    conf_free(c);
    nftw(dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
    free(dir);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(t_group_commit),
        cmocka_unit_test(t_close_empty),
    };

    return cmocka_run_group_tests_name("group_commit", tests, NULL, NULL);
}
