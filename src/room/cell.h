/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cell.h: private to src/room. The Room Cells: one in-memory owner of each
 * room's state, found by (app_code, room_id) in a map. Each cell is a FIFO
 * ticket lock: commands on one room run one at a time in arrival order,
 * commands on different rooms in parallel. The ticket holder alone touches
 * the cell's state. First touch loads the room (lease, snapshot + replay of
 * the log tail); an eviction thread drops cells idle longer than
 * room.idle_evict_ms. Read service.c for how a command uses a cell.
 */
#ifndef ROOMD_ROOM_CELL_H
#define ROOMD_ROOM_CELL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "room/state.h"
#include "store/store.h"

struct conf;
struct conf_room;
struct lease;
struct cell_map;

/* One member's idle clock (presence.c): kept by the room's owner only, in
 * memory, never in the store. */
struct presence_entry {
    int64_t uid;
    int64_t joined_at_ms; /* the membership's join time: names its idle leave */
    int64_t seen_ms;      /* monotonic: last heartbeat or command of the uid */
    bool leaving;         /* an idle leave is on its way (at most one per idle period) */
};

struct cell {
    char app[STORE_ID_MAX];
    char room_id[STORE_ID_MAX];
    /* map mutex */
    struct cell *next;
    uint32_t hash;
    int refs;             /* holders + waiters; evictable at 0 */
    int64_t last_used_ms; /* monotonic; written before the ticket ends */
    /* ticket lock */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t next_ticket, serving;
    /* ticket holder only */
    bool loaded;              /* state reflects the store as of lease_token */
    struct room_state *state; /* NULL: the room does not exist (yet) */
    int64_t event_seq;        /* rooms.event_seq: room_seq of the room's last event */
    bool leased;
    int64_t lease_token;
    int64_t lease_at_ms; /* monotonic time of the last lease acquire */
    /* map mutex: presence (presence.c). While synced, pres[] holds exactly
     * the room's members (sorted by uid), and heartbeats are answered from
     * it without the room's turn until fresh_until_ms (monotonic: the next
     * lease renewal is due). */
    bool pres_synced;
    int64_t pres_fresh_until_ms;
    struct presence_entry *pres;
    size_t npres, cap_pres;
};

/* Starts the map and its eviction thread (when room.idle_evict_ms > 0).
 * store and lease are borrowed. Thread: main. */
int cell_map_open(struct cell_map **out, const struct conf *conf, struct store *store,
                  struct lease *lease);
/* Stops eviction and frees every cell, releasing their leases. No cell may
 * be held. NULL is a no-op. */
void cell_map_close(struct cell_map *m);

/*
 * Waits for the room's turn (FIFO), then makes sure this node holds the
 * room's lease and the cell is loaded. Returns 0 with *out held (end the
 * turn with cell_release), or on failure holds nothing: ROOMD_ENOTOWNER
 * (owner[] = the owner's address), ROOMD_EUNAVAIL (lease or store down),
 * ROOMD_EINTERNAL (the log does not replay to the stored version).
 * *lease_us gets the time spent on the lease and on loading.
 * Thread: any; blocks behind earlier commands on the room and on the store.
 */
int cell_acquire(struct cell_map *m, const char *app, const char *room_id, struct cell **out,
                 char *owner, size_t ownerlen, int64_t *lease_us);
/* Ends the turn. drop: forget the state (a commit was fenced) so the next
 * command reloads it. A cell of a room that does not exist is removed when
 * nobody else waits for it. */
void cell_release(struct cell_map *m, struct cell *c, bool drop);
/* Cells in memory. */
size_t cell_map_count(struct cell_map *m);
/* Runs one eviction pass now with the given idle limit (tests). Returns the
 * number of cells evicted. */
size_t cell_map_evict(struct cell_map *m, int64_t idle_ms);

/* The map mutex (guards the chains, refs, last_used_ms and the presence
 * fields of every cell). Thread: any; never held across I/O. */
void cell_map_lock(struct cell_map *m);
void cell_map_unlock(struct cell_map *m);
/* The cell of (app, room_id) or NULL; the map mutex must be held. */
struct cell *cell_lookup_locked(struct cell_map *m, const char *app, const char *room_id);
/* Calls fn(c, arg) for every cell; the map mutex must be held (fn must not
 * take it, nor a cell's turn). */
void cell_map_each_locked(struct cell_map *m, void (*fn)(struct cell *c, void *arg), void *arg);

/*
 * Rebuilds a room's state from what store_load_room returned: the snapshot
 * (or an empty room) and then room_apply of each tail command at its stored
 * created_at_ms. Each replayed version must equal the logged one and the
 * last must equal l->version. Returns 0 and *out, or ROOMD_EINTERNAL with
 * err filled. Pure.
 */
int room_load_state(const struct room_load *l, const char *app, const char *room_id,
                    const struct conf_room *rc, struct room_state **out, char *err, size_t errlen);

#endif
