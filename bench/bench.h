/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench.h: what the store benches share. Each bench_*.c is a program of its
 * own (no common library), so these are static inline, included where used:
 * a CreateRoom mutation with fixed-size events, a fresh SQLite store, and
 * the claim comparison (ordering per_room vs none) over one backlog.
 */
#ifndef ROOMD_BENCH_H
#define ROOMD_BENCH_H

#include "conf/conf.h"
#include "core/clock.h"
#include "core/uuid.h"
#include "core/xmalloc.h"
#include "store/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One mutation and the events and payload it points into. */
struct bench_mutation {
    struct mutation m;
    struct outbox_new ev[2];
    uint8_t payload[64];
};

/* Fills b with a CreateRoom of room "<prefix>room-<k>" (command
 * "<prefix>cmd-<k>", app "bench") and nev (1 or 2) events of 64 bytes:
 * RoomCreated, then RoomUserJoined. */
static inline void
bench_mutation_init(struct bench_mutation *b, const char *prefix, int k, size_t nev)
{
    int64_t now = clock_wall_ms();
    struct mutation *m = &b->m;

    memset(b, 0, sizeof(*b));
    snprintf(m->app_code, sizeof(m->app_code), "bench");
    snprintf(m->room_id, sizeof(m->room_id), "%sroom-%d", prefix, k);
    snprintf(m->command_id, sizeof(m->command_id), "%scmd-%d", prefix, k);
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
    for (size_t i = 0; i < nev && i < 2; i++) {
        uuid_v7(now, b->ev[i].event_id);
        b->ev[i].event_type = i ? "RoomUserJoined" : "RoomCreated";
        b->ev[i].payload = b->payload;
        b->ev[i].payload_len = sizeof(b->payload);
    }
    m->events = b->ev;
    m->nevents = nev < 2 ? nev : 2;
}

/* Opens the SQLite store of c at "<dir>/<name>" after removing that file
 * and its -wal and -shm; c->store.sqlite.path becomes the new path. Exits
 * on failure. */
static inline struct store *
bench_fresh_sqlite(struct conf *c, const char *dir, const char *name)
{
    struct store *st = NULL;
    char err[256];
    char *path = xasprintf("%s/%s", dir, name);
    char *wal = xasprintf("%s-wal", path), *shm = xasprintf("%s-shm", path);

    unlink(path);
    unlink(wal);
    unlink(shm);
    free(wal);
    free(shm);
    free(c->store.sqlite.path);
    c->store.sqlite.path = path;
    if (store_open(&st, &c->store, err, sizeof(err)) != 0) {
        fprintf(stderr, "store_open %s: %s\n", path, err);
        exit(1);
    }
    return st;
}

/* One claim of up to 100 rows at now, per_room or not, whose rows are
 * completed delivered at once (a draining backlog). Adds the claim's time
 * (µs, completion excluded) to *us and its rows to *rows. Exits on failure. */
static inline void
bench_claim_drain_one(struct store *st, int64_t now, bool per_room, int64_t *us, size_t *rows)
{
    struct outbox_row *r;
    size_t n;
    int64_t t0 = clock_mono_us();

    if (store_outbox_claim_ordered(st, now, now + 600000, "bench", 100, per_room, &r, &n) != 0) {
        fprintf(stderr, "claim: %s\n", store_errmsg());
        exit(1);
    }
    *us += clock_mono_us() - t0;
    *rows += n;
    struct outbox_result *res = xcalloc(n ? n : 1, sizeof(*res));
    for (size_t k = 0; k < n; k++)
        res[k] = (struct outbox_result){
            .id = r[k].id, .locked_by = "bench", .status = OUTBOX_DELIVERED, .now_ms = now};
    if (n > 0 && store_outbox_complete(st, res, n) != 0) {
        fprintf(stderr, "complete: %s\n", store_errmsg());
        exit(1);
    }
    free(res);
    outbox_rows_free(r, n);
}

/* The claim figure of outbox_worker.ordering: claims rounds x (one per_room,
 * one none, in turn, on the same backlog, so both see the same table and
 * load) and prints each one's µs per claim and per row, and the ratio. */
static inline void
bench_claim_ordering(struct store *st, const char *what, int rounds)
{
    int64_t us[2] = {0, 0}, now = clock_wall_ms();
    size_t rows[2] = {0, 0};

    for (int i = 0; i < rounds; i++)
        for (int k = 0; k < 2; k++)
            bench_claim_drain_one(st, now, k == 0, &us[k], &rows[k]);
    for (int k = 0; k < 2; k++)
        printf("claim %-8s %-9s %4d claims of 100: %7.0f us/claim, %5.1f us/row (%zu rows)\n",
               k == 0 ? "per_room" : "none", what, rounds, (double)us[k] / rounds,
               rows[k] ? (double)us[k] / (double)rows[k] : 0.0, rows[k]);
    printf("claim per_room/none %s: %.2fx per row\n", what,
           rows[0] && rows[1] && us[1]
               ? ((double)us[0] / (double)rows[0]) / ((double)us[1] / (double)rows[1])
               : 0.0);
}

#endif
