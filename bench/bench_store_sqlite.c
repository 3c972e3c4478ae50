/*
 * bench_store_sqlite.c: what group commit buys on SQLite. Writes the same
 * mutations (command log row + 2 outbox rows + a new rooms row) three ways
 * into fresh files, and prints mutations/s for each:
 *   single   one store_save (one transaction, one fsync) per mutation
 *   batch32  one store_save of 32 mutations per transaction
 *   group    64 threads through group_commit (max 32), as roomd runs
 *
 *   bench_store_sqlite [DIR] [MUTATIONS] [full|normal]
 * DIR defaults to ./var (use a real disk: fsync is what is measured).
 * Figures only, no assertions.
 */
#include "conf/conf.h"
#include "core/clock.h"
#include "core/uuid.h"
#include "core/xmalloc.h"
#include "store/group_commit.h"
#include "store/store.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GROUP_THREADS 64
#define BATCH 32

struct bmut {
    struct mutation m;
    struct outbox_new ev[2];
    uint8_t payload[64];
};

static atomic_int seq;

static void
bmut_init(struct bmut *b, const char *tag)
{
    int k = atomic_fetch_add(&seq, 1);
    int64_t now = clock_wall_ms();
    struct mutation *m = &b->m;

    memset(b, 0, sizeof(*b));
    snprintf(m->app_code, sizeof(m->app_code), "bench");
    snprintf(m->room_id, sizeof(m->room_id), "%s-room-%d", tag, k);
    snprintf(m->command_id, sizeof(m->command_id), "%s-cmd-%d", tag, k);
    m->command_type = "CreateRoom";
    m->request = "{\"room_id\":\"r\",\"owner_uid\":42,\"title\":\"a bench room\"}";
    m->response = "{\"room_id\":\"r\",\"version\":1}";
    m->version = 1;
    m->create = true;
    m->created_at_ms = now;
    m->meta = (struct room_meta){.owner_uid = 42,
                                 .title = "a bench room",
                                 .status = "open",
                                 .version = 1,
                                 .rocket_status = "idle",
                                 .rocket_id = "",
                                 .created_at_ms = now,
                                 .updated_at_ms = now};
    memset(b->payload, 0x5a, sizeof(b->payload));
    for (int i = 0; i < 2; i++) {
        uuid_v7(now, b->ev[i].event_id);
        b->ev[i].event_type = i ? "RoomUserJoined" : "RoomCreated";
        b->ev[i].payload = b->payload;
        b->ev[i].payload_len = sizeof(b->payload);
    }
    m->events = b->ev;
    m->nevents = 2;
}

static struct store *
open_fresh(struct conf *c, const char *dir, const char *name)
{
    struct store *st = NULL;
    char err[256];
    char *path = xasprintf("%s/%s", dir, name);
    char *wal = xasprintf("%s-wal", path), *shm = xasprintf("%s-shm", path);

    unlink(path);
    unlink(wal);
    unlink(shm);
    free(c->store.sqlite.path);
    c->store.sqlite.path = path;
    if (store_open(&st, &c->store, err, sizeof(err)) != 0) {
        fprintf(stderr, "store_open %s: %s\n", path, err);
        exit(1);
    }
    free(wal);
    free(shm);
    return st;
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
    struct bmut *b = xmalloc(sizeof(*b));
    int64_t t = clock_mono_us();

    for (int i = 0; i < n; i++) {
        struct mutation *m = &b->m;

        bmut_init(b, "single");
        if (store_save(st, &m, 1) != 0 || m->rc != 0)
            fprintf(stderr, "single: save failed: %s\n", store_errmsg());
    }
    report("single", n, clock_mono_us() - t, n);
    free(b);
}

static void
run_batch(struct store *st, int n)
{
    struct bmut *b = xcalloc(BATCH, sizeof(*b));
    struct mutation *ms[BATCH];
    int64_t t = clock_mono_us();
    int done = 0, txs = 0;

    while (done < n) {
        int k = n - done < BATCH ? n - done : BATCH;

        for (int i = 0; i < k; i++) {
            bmut_init(&b[i], "batch");
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
    struct bmut *b = xmalloc(sizeof(*b));

    for (int i = 0; i < w->n; i++) {
        bmut_init(b, "group");
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

    st = open_fresh(c, dir, "bench-single.db");
    run_single(st, n);
    store_close(st);
    st = open_fresh(c, dir, "bench-batch.db");
    run_batch(st, n * 4);
    store_close(st);
    st = open_fresh(c, dir, "bench-group.db");
    run_group(st, n * 4);
    store_close(st);
    conf_free(c);
    return 0;
}
