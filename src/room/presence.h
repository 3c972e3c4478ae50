/* SPDX-License-Identifier: Apache-2.0 */
/*
 * presence.h: private to src/room. Presence expiry (docs/room.md,
 * Presence): the owner of a room keeps, in memory only, each member's idle
 * clock (struct presence_entry in its cell, guarded by the map mutex). A
 * heartbeat or a command of the member resets it; a member silent for
 * room.member_idle_timeout is removed by a LeaveRoom of roomd's own
 * (room_cmd_idle_leave: reserved id, one per membership) sent through the
 * normal command path by the sweeper thread. A room loaded by a node (first
 * touch, takeover after the owner died) starts every clock at load.
 */
#ifndef ROOMD_ROOM_PRESENCE_H
#define ROOMD_ROOM_PRESENCE_H

#include <stdbool.h>
#include <stdint.h>

#include "room/cell.h"
#include "room/command.h"

struct room_service;
struct presence_sweeper;

/* ---- the table of one cell; the caller holds the map mutex ---- */

/* Makes c's table the members of s (NULL: none), each clock at now
 * (monotonic ms), and marks it synced. */
void presence_reset_locked(struct cell *c, const struct room_state *s, int64_t now);
/* Forgets c's table (the state was dropped or the lease lost): heartbeats
 * take the room's turn again until the next load. */
void presence_clear_locked(struct cell *c);
/* uid's entry, or NULL. */
struct presence_entry *presence_find_locked(struct cell *c, int64_t uid);

/* ---- the command path; the caller holds c's turn ---- */

/* After cmd ran in c's turn (committed or not): a committed join adds its
 * member, a committed leave or kick removes one, a committed close empties
 * the table; the acting uid's clock restarts. Takes the map mutex. */
void presence_after_command(struct cell_map *m, struct cell *c, const struct room_cmd *cmd,
                            bool committed);
/* An idle leave in its turn: true when the membership it names is still
 * silent for timeout_ms (so it may commit). Takes the map mutex. */
bool presence_still_idle(struct cell_map *m, struct cell *c, const struct room_cmd *cmd,
                         int64_t timeout_ms);

/* ---- the heartbeat fast path ---- */

/* Answers a heartbeat of uid in (app, room_id) from memory when this node
 * owns the room with a fresh lease and a synced table: returns 1 (a
 * member: its clock restarted, or with expire_ms > 0 set expire_ms in the
 * past: the member is silent for that long already), 0 (not a member) or
 * -1 (unknown here: take the room's turn). Never blocks on I/O. Thread: any. */
int presence_heartbeat_fast(struct cell_map *m, const char *app, const char *room_id, int64_t uid,
                            int64_t expire_ms);
/* In the room's turn: restarts uid's clock (expire_ms > 0: as above). True
 * when uid is in the table. */
bool presence_touch(struct cell_map *m, struct cell *c, int64_t uid, int64_t expire_ms);

/* ---- the sweeper ---- */

/* Starts the thread that sends the idle leaves (every
 * room.member_idle_timeout / 4, at most 1 s) and keeps the leases of rooms
 * with members renewed. svc and m are borrowed. *out NULL when
 * room.member_idle_timeout is 0. Thread: main. */
int presence_sweeper_open(struct presence_sweeper **out, struct room_service *svc,
                          struct cell_map *m, int64_t timeout_ms, int64_t renew_every_ms);
/* Stops and joins it. NULL is a no-op. */
void presence_sweeper_close(struct presence_sweeper *p);
/* Idle leaves sent and committed since open (tests, metrics). */
void presence_sweeper_counts(struct presence_sweeper *p, uint64_t *sent, uint64_t *left);

#endif
