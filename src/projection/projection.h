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
struct room_state;
struct store;
struct projection;

struct projection_ops {
    /* Reflects st (the state just committed). Returns 0 or an error (logged
     * by the caller, never fails the command). */
    int (*update)(struct projection *p, const struct room_state *st);
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

/* Opens the projection named by conf->projection.driver (memory | redis).
 * Returns 0 and *out, or ROOMD_EINVAL with err. A Redis that is down is not
 * an error: updates are kept and replayed when it is back. Thread: main. */
int projection_open(struct projection **out, const struct conf *conf, char *err, size_t errlen);
void projection_close(struct projection *p);

/* Yields the states a rebuild re-projects: returns 1 and *st (borrowed until
 * the next call), 0 at the end, or a negative ROOMD_E* code. */
typedef int (*projection_next_fn)(void *arg, const struct room_state **st);

/* Replaces what is projected for app by the states next() yields (after an
 * outage, a Redis flush, or at start-up from the store). Returns 0 or the
 * first error. Thread: any; blocks. The room service drives it
 * (src/room/rebuild.c) whenever rebuild_begin answers 1. */
int projection_rebuild(struct projection *p, const char *app, projection_next_fn next, void *arg);

#endif
