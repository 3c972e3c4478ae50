/*
 * bench.h: what the store benches share. Each bench_*.c is a program of its
 * own (no common library), so these are static inline, included where used:
 * a CreateRoom mutation with fixed-size events, and a fresh SQLite store.
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

#endif
