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
    void (*close)(struct projection *p);
};

struct projection {
    const struct projection_ops *ops;
};

int projection_open(struct projection **out, const struct conf *conf, char *err, size_t errlen);
void projection_close(struct projection *p);

#endif
