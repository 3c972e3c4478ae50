/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_memory.c: what a room costs in memory (issue 13), figures only.
 * room_service_execute in this process (SQLite in DIR, synchronous normal,
 * group commit, local lease, no wallet, outbox or projection), then:
 *   idle     N rooms created and left idle in their cells
 *   evicted  the same N rooms after idle eviction dropped every cell
 *   active   A rooms with 100 members each (100 joins per room), cached
 * Each figure is the growth of the heap in use (mallinfo2: arena + mmap
 * bytes handed out) divided by the rooms, and the growth of RSS (after
 * malloc_trim) the same way. A warm-up of W rooms, created and evicted
 * first, fills SQLite's page cache and the allocator's arenas so they are
 * not counted.
 *
 *   bench_memory [DIR] [N] [A]   (DIR ./var, N 5000, A 20)
 * Prints "memory idle_room_bytes=... evicted_room_bytes=... active_room_bytes=..."
 * (heap) and the RSS figures beside them.
 */
#include "bench.h"
#include "core/log.h"
#include "lease/lease.h"
#include "room/command.h"
#include "room/service.h"
#include "store/group_commit.h"

#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define THREADS 8
#define MEMBERS 100
#define EVICT_MS 3000

static struct conf *conf;
static struct room_service *svc;

struct mem {
    double heap, rss; /* bytes */
};

static struct mem
measure(void)
{
    struct mallinfo2 mi;
    long pages = 0, resident = 0;
    FILE *f;

    malloc_trim(0);
    mi = mallinfo2();
    if ((f = fopen("/proc/self/statm", "r")) != NULL) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
            resident = 0;
        fclose(f);
    }
    return (struct mem){.heap = (double)(mi.uordblks + mi.hblkhd),
                        .rss = (double)resident * (double)sysconf(_SC_PAGESIZE)};
}

/* Runs one command; exits unless it answers 200. */
static void
exec_cmd(enum room_cmd_type type, const char *room, const char *body)
{
    struct room_cmd cmd;
    struct cmd_error ce;
    struct room_reply r;

    if (room_cmd_parse(type, "bench", room, body, strlen(body), &cmd, &ce) != 0) {
        fprintf(stderr, "parse: %s: %s\n", ce.field, ce.message);
        exit(1);
    }
    room_service_execute(svc, &cmd, &r);
    if (r.status != 200) {
        fprintf(stderr, "%s %s: %d %s\n", room_cmd_name(type), room, r.status, r.body);
        exit(1);
    }
    room_reply_clear(&r);
    room_cmd_clear(&cmd);
}

struct job {
    const char *prefix;
    int rooms, members; /* members 0: create only */
    atomic_int next;
};

/* Creates rooms "<prefix>-<k>" taken from j->next, each with j->members joins. */
static void *
job_main(void *arg)
{
    struct job *j = arg;
    char room[64], body[256];
    int k;

    while ((k = atomic_fetch_add(&j->next, 1)) < j->rooms) {
        snprintf(room, sizeof(room), "%s-%d", j->prefix, k);
        snprintf(body, sizeof(body),
                 "{\"command_id\":\"c-%s\",\"room_id\":\"%s\",\"owner_uid\":1,\"title\":\"bench\"}",
                 room, room);
        exec_cmd(CMD_CREATE_ROOM, room, body);
        for (int u = 0; u < j->members; u++) {
            snprintf(body, sizeof(body), "{\"command_id\":\"j-%s-%d\",\"uid\":%d}", room, u,
                     1000 + u);
            exec_cmd(CMD_JOIN_ROOM, room, body);
        }
    }
    return NULL;
}

static void
run_job(const char *prefix, int rooms, int members)
{
    struct job j = {.prefix = prefix, .rooms = rooms, .members = members};
    pthread_t th[THREADS];

    for (int i = 0; i < THREADS; i++)
        pthread_create(&th[i], NULL, job_main, &j);
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
}

/* Waits until idle eviction dropped every cell (at most 4 eviction periods). */
static void
wait_evicted(void)
{
    int64_t t0 = clock_mono_ms();
    struct timespec tick = {0, 50 * 1000000};

    while (room_service_cells(svc) > 0 && clock_mono_ms() - t0 < 4 * EVICT_MS)
        nanosleep(&tick, NULL);
    if (room_service_cells(svc) > 0)
        fprintf(stderr, "%zu cells still cached\n", room_service_cells(svc));
}

int
main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "./var";
    int n = argc > 2 ? atoi(argv[2]) : 5000;
    int a = argc > 3 ? atoi(argv[3]) : 20;
    struct group_commit *gc = NULL;
    struct lease *lease = NULL;
    struct room_deps d;
    struct store *st;
    struct mem m0, m1, m2, m3;
    char err[256];
    int64_t t0;

    conf = xcalloc(1, sizeof(*conf));
    conf_defaults(conf);
    conf->store.sqlite.synchronous_full = false;
    conf->room.idle_evict_ms = EVICT_MS;
    conf->room.max_rooms_per_owner = 0; /* one owner creates every room */
    char *logf = xasprintf("%s/bench_memory.log", dir);
    log_open(logf, LOG_WARN); /* the room_command_timing lines go here */
    free(logf);
    st = bench_fresh_sqlite(conf, dir, "bench_memory.db");
    if (group_commit_open(&gc, st, conf->store.group_commit_max) != 0 ||
        lease_open(&lease, conf, err, sizeof(err)) != 0) {
        fprintf(stderr, "setup failed\n");
        return 1;
    }
    memset(&d, 0, sizeof(d));
    d.conf = conf;
    d.store = st;
    d.gc = gc;
    d.lease = lease;
    if (room_service_open(&svc, &d) != 0) {
        fprintf(stderr, "room_service_open failed\n");
        return 1;
    }

    run_job("w", n, 1); /* warm-up */
    wait_evicted();
    m0 = measure();
    t0 = clock_mono_ms();
    run_job("i", n, 0);
    m1 = measure();
    if (clock_mono_ms() - t0 >= EVICT_MS)
        fprintf(stderr, "creating took longer than the eviction delay: figures are low\n");
    wait_evicted();
    m2 = measure();
    run_job("a", a, MEMBERS);
    m3 = measure();

    printf("memory idle_room_bytes=%.0f evicted_room_bytes=%.0f active_room_bytes=%.0f"
           " (heap in use; %d idle rooms, %d rooms of %d members)\n",
           (m1.heap - m0.heap) / n, (m2.heap - m0.heap) / n, (m3.heap - m2.heap) / a, n, a,
           MEMBERS);
    printf("memory rss idle_room_bytes=%.0f evicted_room_bytes=%.0f active_room_bytes=%.0f"
           " (RSS after malloc_trim)\n",
           (m1.rss - m0.rss) / n, (m2.rss - m0.rss) / n, (m3.rss - m2.rss) / a);

    room_service_close(svc);
    lease_close(lease);
    group_commit_close(gc);
    store_close(st);
    conf_free(conf);
    return 0;
}
