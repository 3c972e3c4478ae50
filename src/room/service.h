/* SPDX-License-Identifier: Apache-2.0 */
/*
 * service.h: the COMMAND PATH entry point. room_service_execute() runs one
 * parsed and authorized write command through the stages of ARCHITECTURE §2
 * (service.c names them): route/forward + cell turn -> price (SendGift: the
 * gift catalog) -> apply on a clone ->
 * wallet hold (SendGift) -> SaveMutation via group commit (its unique
 * command_id key is the idempotency check: a duplicate is answered from the
 * log) -> swap, projection, rocket timer -> answer + timing log.
 * Read it top-down in service.c.
 */
#ifndef ROOMD_ROOM_SERVICE_H
#define ROOMD_ROOM_SERVICE_H

#include <stdbool.h>
#include <stdint.h>

#include "room/command.h"

struct conf;
struct store;
struct group_commit;
struct wallet;
struct lease;
struct projection;
struct outbox;
struct room_service;

/* CreateRoom's synchronous side call (Tencent IM create_group). Returns 0 or
 * an error; an error never fails the command (the outbox RoomCreated
 * compensates). Thread: any; blocks up to its own timeout. */
typedef int (*room_create_hook)(void *arg, const char *app, const char *room_id, const char *title,
                                int64_t owner_uid);

struct room_reply;

/* Where a command (or GET) came from, so a node that does not own the room
 * can send it unchanged to the owner (cluster/forward.h). All borrowed. */
struct room_origin {
    const char *method; /* "POST", "GET" */
    const char *path;   /* "/v1/rooms/r1/join" (no query string) */
    const char *body;   /* the request body as received ("" for a GET) */
    size_t body_len;
    const char *authorization; /* the caller's Authorization header, NULL = none */
    bool forwarded;            /* it carries the hop header: never forward it again */
};

/* Sends o to the room's owner and fills *reply with the owner's answer:
 * owner_addr is its public listener (http.advertise_addr), admin_addr its
 * admin listener (admin.advertise_addr, "" when the owner did not advertise
 * one); an /internal/v1 path goes to the admin listener. Returns 0, or an
 * error when the owner could not be reached (*reply untouched).
 * Thread: any; blocks (bounded by its own timeout). */
typedef int (*room_forward_fn)(void *arg, const char *owner_addr, const char *admin_addr,
                               const char *app, const struct room_origin *o,
                               struct room_reply *reply);

/* Everything the service uses; all borrowed and must outlive it. NULL lease
 * means the local lease; NULL projection/outbox/create_hook are skipped. */
struct room_deps {
    const struct conf *conf;
    struct store *store;
    struct group_commit *gc;
    struct wallet *wallet;
    struct lease *lease;
    struct projection *projection;
    struct outbox *outbox;
    room_create_hook create_hook;
    void *create_hook_arg;
    room_forward_fn forward; /* NULL: answer 503 not_owner instead (cluster.forward off) */
    void *forward_arg;
    bool rocket_timer;       /* wake ourselves at launch_at_ms (no broker) */
    bool projection_rebuild; /* keep the projection complete: rebuild it from the
                              * store in the background after open and whenever
                              * it lost its data (src/room/rebuild.c) */
};

/* The answer to one command. */
struct room_reply {
    int status;            /* HTTP status */
    char *body;            /* JSON, malloc'd (room_reply_clear frees) */
    bool replay;           /* Idempotent-Replay: true */
    int retry_after;       /* seconds of a Retry-After header (429 too_many_rooms), 0 = none */
    char owner[128];       /* ENOTOWNER: owner's address (public listener), else "" */
    char owner_admin[128]; /* ENOTOWNER: owner's admin listener, "" = not advertised */
};
void room_reply_clear(struct room_reply *r);
/* Sets *r to status with the error body {"error":{"code":..,"message":..}}
 * (ARCHITECTURE §6), plus "owner" when r->owner is set (not_owner), freeing
 * a previous body. */
void room_reply_error(struct room_reply *r, int status, const char *code, const char *message);

/* Starts the service (cells, idle eviction, the rocket timer rebuilt from
 * store_rockets_pending when deps->rocket_timer, the projection rebuild
 * thread when deps->projection_rebuild). Does not wait for the projection
 * rebuild. Thread: main. */
int room_service_open(struct room_service **out, const struct room_deps *deps);
/* Stops timers and eviction, frees all cells. No execute may be in flight. */
void room_service_close(struct room_service *svc);

/*
 * Executes cmd (validated by room_cmd_parse; borrowed) and fills *reply.
 * Blocks until the command committed or failed. A failed command changes
 * nothing and writes no outbox row. Logs one room_command_timing line.
 * Thread: any; commands on one room run one at a time in arrival order,
 * commands on different rooms in parallel.
 */
void room_service_execute(struct room_service *svc, const struct room_cmd *cmd,
                          struct room_reply *reply);
/* As room_service_execute; when another node owns the room and origin is not
 * NULL (nor already forwarded) and forwarding is on, the request is sent to
 * the owner and *reply is the owner's answer (forward_ms of the timing line;
 * result "forwarded"). A forwarding failure answers 503 not_owner.
 * Thread: any; blocks, also on the owner. */
void room_service_execute_from(struct room_service *svc, const struct room_cmd *cmd,
                               const struct room_origin *origin, struct room_reply *reply);

/* GET /v1/rooms/{id}: the current state as JSON into *reply (200 or 404);
 * forwarded to the owner like room_service_execute_from when origin is not
 * NULL. Thread: any; blocks. */
void room_service_get(struct room_service *svc, const char *app, const char *room_id,
                      const struct room_origin *origin, struct room_reply *reply);

/*
 * POST /v1/rooms/{id}/heartbeat (docs/room.md, Presence): uid is alive in
 * the room. On the owner, from memory (no store write, no turn on the room
 * while its lease is fresh); forwarded to the owner like a command when
 * origin is not NULL. *reply: 200 {"idle_timeout_ms","room_id","uid"},
 * 404 not_found (no such room), 409 not_member, 503 (owner unreachable,
 * store down). The caller authorized uid. Thread: any; the fast path never
 * blocks on I/O, the slow one blocks as room_service_get does.
 */
void room_service_heartbeat(struct room_service *svc, const char *app, const char *room_id,
                            int64_t uid, const struct room_origin *origin,
                            struct room_reply *reply);
/* As room_service_heartbeat, but uid's idle clock is set to
 * room.member_idle_timeout in the past: the sweeper removes the member at
 * its next pass (the IM logout of POST /callbacks/tim). 200 as a
 * heartbeat's answer. Thread: any; blocks as room_service_heartbeat. */
void room_service_presence_expire(struct room_service *svc, const char *app, const char *room_id,
                                  int64_t uid, const struct room_origin *origin,
                                  struct room_reply *reply);
/* Heartbeats answered, and how many of them took the room's turn (slow
 * path), and the idle leaves sent / committed since open (metrics, bench). */
void room_service_presence_counts(struct room_service *svc, uint64_t *heartbeats, uint64_t *slow,
                                  uint64_t *idle_sent, uint64_t *idle_left);

/* Number of cells in memory (tests, metrics). */
size_t room_service_cells(struct room_service *svc);
/* Rocket wake-ups waiting in the in-process timer (tests, metrics). */
size_t room_service_rockets_pending(struct room_service *svc);

#endif
