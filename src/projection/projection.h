/* SPDX-License-Identifier: Apache-2.0 */
/*
 * projection.h: read models kept beside the authority, best effort: the
 * room list (by online count and recent gifts) and user presence (which room
 * a user is in). projection_memory.c (one node) and projection_redis.c.
 * A failed update never fails the command; rebuild() repairs after an outage.
 *
 * Threads: any, concurrently. Calls block on Redis (bounded timeout).
 */
#ifndef ROOMD_PROJECTION_H
#define ROOMD_PROJECTION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct conf;
struct store;
struct projection;

#define PROJ_ID_MAX 64     /* app, room_id: as STORE_ID_MAX */
#define PROJ_TITLE_MAX 128 /* title bytes, as ROOM_TITLE_MAX */

/* What the projections keep of one room, filled by the room layer from its
 * state (room_state_project, src/room/state.c) so this layer needs nothing
 * of room/. uids and joined_ms are malloc'd arrays of nuids each (NULL when
 * none), owned by the struct: proj_room_clear frees them. */
struct proj_room {
    char app[PROJ_ID_MAX];
    char room_id[PROJ_ID_MAX];
    char title[PROJ_TITLE_MAX + 1];
    int64_t owner_uid;
    int64_t version;
    int64_t updated_at_ms;
    int64_t gift_total;
    bool closed;
    int online;    /* members; 0 when closed */
    int64_t *uids; /* members, join order; NULL when closed */
    size_t nuids;
    int64_t *joined_ms; /* joined_at_ms of each member */
};

/* Frees r's arrays and zeroes *r (r itself is the caller's). Thread: any. */
void proj_room_clear(struct proj_room *r);

struct projection_ops {
    /* Reflects r (the room just committed; borrowed for the call). Returns 0
     * or an error (logged by the caller, never fails the command). */
    int (*update)(struct projection *p, const struct proj_room *r);
    /* JSON page of rooms for app: {"rooms":[...],"next_cursor":..}. *json malloc'd. */
    int (*list_rooms)(struct projection *p, const char *app, int64_t cursor, int limit,
                      char **json);
    /* JSON presence of uid: {"uid":..,"room_id":..|null}. *json malloc'd. */
    int (*presence)(struct projection *p, const char *app, int64_t uid, char **json);
    /* Drops everything projected for app (rebuild's first step). */
    int (*clear)(struct projection *p, const char *app);
    void (*close)(struct projection *p);
    /* Asks whether the projection must be rebuilt from the store now. Returns
     * 1 when it never held or lost what it projects and this caller is to
     * rebuild it (memory: once after open; Redis: the "built" marker key is
     * gone, e.g. Redis restarted empty, and this caller took the rebuild lock,
     * so one node of many rebuilds), 0 when not, or ROOMD_EUNAVAIL. Each 1
     * must be answered by rebuild_end. */
    int (*rebuild_begin)(struct projection *p);
    /* Ends what rebuild_begin started: ok marks the projection complete,
     * otherwise the next rebuild_begin answers 1 again. */
    void (*rebuild_end)(struct projection *p, bool ok);
};

struct projection {
    const struct projection_ops *ops;
};

/* The operations of every backend, written once: a backend names its
 * functions <prefix>_<op> and builds its table from this list
 * (projection_memory.c: mem_, projection_redis.c: rp_). */
#define PROJECTION_OPS(X)                                                                          \
    X(update)                                                                                      \
    X(list_rooms)                                                                                  \
    X(presence)                                                                                    \
    X(clear)                                                                                       \
    X(close)                                                                                       \
    X(rebuild_begin)                                                                               \
    X(rebuild_end)

/* Opens the projection named by conf->projection.driver (memory | redis).
 * Returns 0 and *out, or ROOMD_EINVAL with err. A Redis that is down is not
 * an error: updates are kept and replayed when it is back. Thread: main. */
int projection_open(struct projection **out, const struct conf *conf, char *err, size_t errlen);
void projection_close(struct projection *p);

/* Yields the rooms a rebuild re-projects: returns 1 and *r (borrowed until
 * the next call), 0 at the end, or a negative ROOMD_E* code. */
typedef int (*projection_next_fn)(void *arg, const struct proj_room **r);

/* Replaces what is projected for app by the rooms next() yields (after an
 * outage, a Redis flush, or at start-up from the store). Returns 0 or the
 * first error. Thread: any; blocks. The room service drives it
 * (src/room/rebuild.c) whenever rebuild_begin answers 1. */
int projection_rebuild(struct projection *p, const char *app, projection_next_fn next, void *arg);

#endif
