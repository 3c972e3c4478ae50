/* SPDX-License-Identifier: Apache-2.0 */
/*
 * apply.h: private to src/room. What the per-command apply steps
 * (cmd_*.c) share with the dispatcher (apply.c): the refusal helper, event
 * packing, and the rocket rules of cmd_rocket.c used by gifts and by the
 * lazy UTC-day reset. Every function here is pure (no clock, no I/O).
 */
#ifndef ROOMD_ROOM_APPLY_H
#define ROOMD_ROOM_APPLY_H

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "room/command.h"

struct conf_room;

/* Fills *e (code, formatted message) and returns rc. */
int apply_fail(struct apply_error *e, int rc, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Packs m and appends it to ev as an event of type (a static string). */
void room_events_push(struct room_events *ev, const char *type, const ProtobufCMessage *m);

/* The apply step of each command: same contract as room_apply, called after
 * the common checks (room exists and is open, UTC-day reset done). They do
 * not bump the version. */
typedef int cmd_apply_fn(struct room_state *s, const struct room_cmd *cmd, int64_t now_ms,
                         const struct conf_room *rc, struct room_events *ev, struct apply_error *e);
cmd_apply_fn cmd_create_apply, cmd_join_apply, cmd_leave_apply, cmd_mic_up_apply,
    cmd_mic_down_apply, cmd_gift_apply, cmd_kick_apply, cmd_close_apply, cmd_launch_apply;

/* Returns 0 when uid is a member, else fills *e with 409 not_member. */
int apply_need_member(const struct room_state *s, int64_t uid, struct apply_error *e);
/* Takes member uid off its seat, if any (appending RoomMicChanged
 * on_mic=false), and out of the members, keeping join order. */
void apply_remove_member(struct room_state *s, int64_t uid, struct room_events *ev);
/* Appends RoomUserLeft for uid with reason and the member count now. */
void apply_push_left(const struct room_state *s, int64_t uid, const char *reason,
                     struct room_events *ev);

/* ---- rocket rules (cmd_rocket.c) ---- */

/* Fresh rocket of the UTC day of now_ms (level 1, no energy, idle). */
void rocket_init(struct room_rocket *r, int64_t now_ms);
/* When now_ms is on a later UTC day than the rocket's, resets it and appends
 * RoomRocketReset. */
void rocket_reset_if_new_day(struct room_state *s, int64_t now_ms, struct room_events *ev);
/* Adds gift energy when the rocket is charging; returns true when this
 * ignited it (the caller appends RoomRocketIgnited with rocket_push_ignited
 * after its own event). */
bool rocket_add_energy(struct room_state *s, int64_t amount, int64_t now_ms,
                       const struct conf_room *rc);
void rocket_push_ignited(const struct room_state *s, struct room_events *ev);

#endif
