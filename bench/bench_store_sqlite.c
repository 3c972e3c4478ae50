/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_store_sqlite.c: what group commit buys on SQLite. Writes the same
 * mutations (command log row + 2 outbox rows + a new rooms row) three ways
 * into fresh files, and prints mutations/s for each:
 *   single   one store_save (one transaction, one fsync) per mutation
 *   batch32  one store_save of 32 mutations per transaction
 *   group    64 threads through group_commit (max 32), as roomd runs
 * and then the claim figure of outbox_worker.ordering: claims of 100 on a
 * backlog of 40000 pending rows in 100 rooms over 100000 delivered ones,
 * per_room and none in turn (bench_claim_ordering).
 *
 *   bench_store_sqlite [DIR] [MUTATIONS] [full|normal]
 * DIR defaults to ./var (use a real disk: fsync is what is measured).
 * Figures only, no assertions.
 */
#include "bench.h"
#include "store/group_commit.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GROUP_THREADS 64
#define BATCH 32

static atomic_int seq;

/* The next mutation of the run: room "<tag>-room-<n>". */
static void
next_mutation(struct bench_mutation *b, const char *tag)
{
    char prefix[32];

    snprintf(prefix, sizeof(prefix), "%s-", tag);
    bench_mutation_init(b, prefix, atomic_fetch_add(&seq, 1), 2);
}

static void
report(const char *what, int n, int64_t us, int txs)
{
    double secs = (double)us / 1e6;

    printf("%-9s %7d mutations in %6.2f s: %9.0f mutations/s, %7.0f transactions/s\n", what, n,
           secs, n / secs, txs / secs);
}

static void
run_single(struct store *st, int n)
{
    struct bench_mutation *b = xmalloc(sizeof(*b));
    int64_t t = clock_mono_us();

    for (int i = 0; i < n; i++) {
        struct mutation *m = &b->m;

        next_mutation(b, "single");
        if (store_save(st, &m, 1) != 0 || m->rc != 0)
            fprintf(stderr, "single: save failed: %s\n", store_errmsg());
    }
    report("single", n, clock_mono_us() - t, n);
    free(b);
}

static void
run_batch(struct store *st, int n)
{
    struct bench_mutation *b = xcalloc(BATCH, sizeof(*b));
    struct mutation *ms[BATCH];
    int64_t t = clock_mono_us();
    int done = 0, txs = 0;

    while (done < n) {
        int k = n - done < BATCH ? n - done : BATCH;

        for (int i = 0; i < k; i++) {
            next_mutation(&b[i], "batch");
            ms[i] = &b[i].m;
        }
        if (store_save(st, ms, (size_t)k) != 0)
            fprintf(stderr, "batch: save failed: %s\n", store_errmsg());
        done += k;
        txs++;
    }
    report("batch32", n, clock_mono_us() - t, txs);
    free(b);
}

struct gworker {
    struct group_commit *gc;
    int n;
};

static void *
gworker_main(void *arg)
{
    struct gworker *w = arg;
    struct bench_mutation *b = xmalloc(sizeof(*b));

    for (int i = 0; i < w->n; i++) {
        next_mutation(b, "group");
        if (group_commit_submit(w->gc, &b->m) != 0)
            fprintf(stderr, "group: save failed: %s\n", store_errmsg());
    }
    free(b);
    return NULL;
}

static void
run_group(struct store *st, int n)
{
    struct group_commit *gc = NULL;
    struct gworker w[GROUP_THREADS];
    pthread_t th[GROUP_THREADS];
    uint64_t batches, muts;
    int64_t t;

    group_commit_open(&gc, st, BATCH);
    t = clock_mono_us();
    for (int i = 0; i < GROUP_THREADS; i++) {
        w[i] = (struct gworker){.gc = gc, .n = n / GROUP_THREADS};
        pthread_create(&th[i], NULL, gworker_main, &w[i]);
    }
    for (int i = 0; i < GROUP_THREADS; i++)
        pthread_join(th[i], NULL);
    t = clock_mono_us() - t;
    group_commit_stats(gc, &batches, &muts);
    group_commit_close(gc);
    report("group64", (int)muts, t, (int)batches);
    printf("          (%.1f mutations per transaction)\n", (double)muts / (double)batches);
}

/* The claim figure on a fresh file: 100000 delivered rows, then 40000
 * pending in 100 rooms (400 each, interleaved as commits of busy rooms). */
static void
run_claims(struct conf *c, const char *dir)
{
    struct store *st = bench_fresh_sqlite(c, dir, "bench-claim.db");
    sqlite3 *db = NULL;
    char *err = NULL;
    static const char fill[] =
        "WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < 140000)"
        " INSERT INTO room_outbox (event_id, app_code, room_id, room_version, command_id,"
        " event_type, payload, status, due_at_ms, created_at_ms, updated_at_ms,"
        " delivered_at_ms, room_seq)"
        " SELECT 'e-' || n, 'bench', CASE WHEN n > 100000 THEN 'new-' || (n % 100)"
        " ELSE 'old-' || (n % 5000) END, n, 'c-' || n, 'RoomUserJoined', zeroblob(64),"
        " CASE WHEN n > 100000 THEN 'pending' ELSE 'delivered' END,"
        " CASE WHEN n > 100000 THEN 1000 + n END, 1000 + n, 1000 + n,"
        " CASE WHEN n > 100000 THEN NULL ELSE 2000 + n END, n / 100 FROM s";

    if (sqlite3_open(c->store.sqlite.path, &db) != SQLITE_OK ||
        sqlite3_exec(db, fill, NULL, NULL, &err) != SQLITE_OK) {
        fprintf(stderr, "fill: %s\n", err ? err : sqlite3_errmsg(db));
        exit(1);
    }
    sqlite3_close(db);
    bench_claim_ordering(st, "sqlite", 100);
    store_close(st);
}

int
main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "./var";
    int n = argc > 2 ? atoi(argv[2]) : 2000;
    struct conf *c = xcalloc(1, sizeof(*c));
    struct store *st;

    conf_defaults(c);
    c->store.sqlite.synchronous_full = !(argc > 3 && strcmp(argv[3], "normal") == 0);
    printf("SQLite %s, synchronous=%s, files in %s; each mutation = 1 command log row +"
           " 2 outbox rows + 1 rooms row\n",
           sqlite3_libversion(), c->store.sqlite.synchronous_full ? "FULL" : "NORMAL", dir);

    st = bench_fresh_sqlite(c, dir, "bench-single.db");
    run_single(st, n);
    store_close(st);
    st = bench_fresh_sqlite(c, dir, "bench-batch.db");
    run_batch(st, n * 4);
    store_close(st);
    st = bench_fresh_sqlite(c, dir, "bench-group.db");
    run_group(st, n * 4);
    store_close(st);
    run_claims(c, dir);
    conf_free(c);
    return 0;
}
