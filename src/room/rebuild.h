/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rebuild.h: private to src/room. Keeps the projection (projection.h)
 * complete: a background thread asks the projection every second whether it
 * must be rebuilt (after open; after Redis lost its data) and, when so, feeds
 * projection_rebuild() app by app with the state of every open room read from
 * the store. Read rebuild.c.
 */
#ifndef ROOMD_ROOM_REBUILD_H
#define ROOMD_ROOM_REBUILD_H

#include <stdatomic.h>
#include <stddef.h>

struct conf;
struct store;
struct projection;
struct room_rebuild;

/* What one rebuild did. */
struct rebuild_stats {
    size_t apps;    /* apps rebuilt */
    size_t rooms;   /* open rooms projected */
    size_t skipped; /* rooms whose log did not replay (logged; left out) */
};

/*
 * Rebuilds p from the store now, in the calling thread: for each app with
 * open rooms, projection_rebuild() with the state of each open room (latest
 * snapshot + log tail, replayed as a cell loads it, but read-only: no cell,
 * no lease). Stops early with ROOMD_ERETRY when *stop becomes true (stop may
 * be NULL). Returns 0 or the first store/projection error. Blocks.
 */
int room_rebuild_projection(const struct conf *conf, struct store *store, struct projection *p,
                            const atomic_bool *stop, struct rebuild_stats *stats);

/* Starts the thread (borrowed arguments must outlive it). Thread: main. */
int room_rebuild_start(struct room_rebuild **out, const struct conf *conf, struct store *store,
                       struct projection *p);
/* Stops it (an ongoing rebuild ends at its next room) and frees. NULL is a no-op. */
void room_rebuild_stop(struct room_rebuild *rb);

#endif
