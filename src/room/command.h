/* SPDX-License-Identifier: Apache-2.0 */
/*
 * command.h: room write commands as data, and room_apply(), the one pure
 * function that turns (state, command, now) into a new state plus events.
 * The live path (service.c) and the replay of the command log on load
 * (cell.c) both call room_apply, so replay reproduces state exactly: every
 * input that is not in the command (the time, generated ids) is derived from
 * the command log row (created_at_ms, command_id, version).
 *
 * One file per command: cmd_create.c, cmd_join.c, ... each defining
 * its apply step; command.c parses/validates JSON and dispatches.
 * Thread: any (pure functions).
 */
#ifndef ROOMD_ROOM_COMMAND_H
#define ROOMD_ROOM_COMMAND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "conf/conf.h"
#include "room/state.h"
#include "store/store.h"

struct conf_room;

enum room_cmd_type {
    CMD_CREATE_ROOM = 0,
    CMD_JOIN_ROOM,
    CMD_LEAVE_ROOM,
    CMD_MIC_UP,
    CMD_MIC_DOWN,
    CMD_SEND_GIFT,
    CMD_KICK_USER,
    CMD_CLOSE_ROOM,
    CMD_LAUNCH_ROCKET,
    CMD_COUNT_
};

/* "CreateRoom", ... (the command_type column and timing log). */
const char *room_cmd_name(enum room_cmd_type t);
int room_cmd_parse_name(const char *name); /* -1 when unknown */
/* Every command type's name, indexed by enum room_cmd_type (CMD_COUNT_
 * entries; static): what room_service_open hands metrics_command_names. */
const char *const *room_cmd_names(void);

struct room_cmd {
    enum room_cmd_type type;
    char app_code[STORE_ID_MAX];
    char room_id[STORE_ID_MAX];
    char command_id[STORE_ID_MAX];
    int64_t uid;          /* join/leave/mic/gift sender/kick target */
    int64_t owner_uid;    /* create */
    int64_t operator_uid; /* kick, close */
    int64_t to_uid;       /* gift */
    int seat;             /* mic up: requested seat, -1 = first free */
    char title[ROOM_TITLE_MAX + 1];
    char gift_id[STORE_ID_MAX];
    int64_t count;
    int64_t unit_price;      /* gift: the price applied (the request's, then the catalog's) */
    int64_t energy_per_unit; /* gift: rocket energy per unit (= unit_price without a catalog) */
    bool price_named;        /* gift: the request named unit_price (optional with the catalog) */
    bool priced;             /* gift: priced by the catalog (room_cmd_price; "catalog" in the
                              * log row, which a replay applies again) */
    struct {
        int64_t unit_price, energy_per_unit, version; /* the catalog row it was priced by */
    } catalog;
    char reason[256];
    char rocket_id[STORE_ID_MAX]; /* launch */
    int level;                    /* launch */
    int64_t launch_at_ms;         /* launch */
    char *request;                /* canonical request JSON (sorted keys), malloc'd */
    bool room_id_generated;       /* create without room_id: the id was generated, so an
                                   * idempotent retry compares requests ignoring room_id */
    bool from_log;                /* parsed by room_cmd_parse_logged (a replay) */
    bool has_rules;               /* from_log: the row recorded the rules it took */
    struct conf_room rules;       /* those rules (room_state.rules) */
    /* An idle leave (presence.c, room_cmd_idle_leave): the membership it
     * ends; the service re-checks in the room's turn that the member is
     * still silent. Never parsed from a request. */
    bool idle_leave;
    int64_t idle_joined_at_ms;
};

/* The reserved command_id namespace: ids starting with this prefix belong to
 * the commands roomd issues itself (LaunchRocket). It lies outside the id
 * charset clients may use, so no client request, now or logged before,
 * can hold one; a client command_id starting with it is refused (400 naming
 * command_id). */
#define ROOM_RESERVED_ID_PREFIX "~"

/* The deterministic command_id of the launch of rocket_id:
 * "~rl-<rocket_id>" (rocket_id is "<room_id>-<utc_day>-<level>", at most 57
 * bytes, so this fits in 63), written to out (len bytes). Thread: any. */
void rocket_launch_command_id(const char *rocket_id, char *out, size_t len);

/* The reserved command_id prefix of the LeaveRoom roomd issues for a member
 * silent past room.member_idle_timeout (presence.c); its RoomUserLeft
 * carries reason "idle". */
#define ROOM_IDLE_LEAVE_PREFIX ROOM_RESERVED_ID_PREFIX "il-"

/* Builds into *cmd (free with room_cmd_clear) the LeaveRoom of uid's
 * membership of (app, room_id) that began at joined_at_ms, with the
 * deterministic command_id "~il-<uid>-<joined_at_ms>-<hash of room_id>": a
 * new owner derives the same id, so the member leaves at most once however
 * often the leave is tried. Returns 0, or ROOMD_EINVAL (bad app/room).
 * Thread: any (pure). */
int room_cmd_idle_leave(const char *app, const char *room_id, int64_t uid, int64_t joined_at_ms,
                        struct room_cmd *cmd);

/* A validation failure: the field at fault and a message. */
struct cmd_error {
    char field[64];
    char message[256];
};

/*
 * Parses and validates a command body (JSON object) for type. app and
 * path_room_id come from the request line (path_room_id NULL for create).
 * Returns 0 and fills *cmd (free with room_cmd_clear), or ROOMD_EINVAL with
 * *e naming the field ("uid: must be a positive integer"). Unknown fields
 * are refused. Builds cmd->request, which also equals the stored request a
 * replay parses again.
 */
int room_cmd_parse(enum room_cmd_type type, const char *app, const char *path_room_id,
                   const char *body, size_t len, struct room_cmd *cmd, struct cmd_error *e);
/* The same for a request read back from the command log (replay): the
 * reserved-id rules are not applied, since the log holds what committed,
 * and the "rules" the row recorded (room_logged_request) go to
 * cmd->rules. request is the stored request (NUL-terminated); cmd->request
 * becomes its canonical request without "rules". */
int room_cmd_parse_logged(enum room_cmd_type type, const char *app, const char *room_id,
                          const char *request, struct room_cmd *cmd, struct cmd_error *e);
/* As room_cmd_parse, for a body the caller already parsed (jansson object,
 * borrowed): the HTTP handler parses once to tell invalid_json apart. */
struct json_t;
int room_cmd_parse_json(enum room_cmd_type type, const char *app, const char *path_room_id,
                        struct json_t *body, struct room_cmd *cmd, struct cmd_error *e);
void room_cmd_clear(struct room_cmd *cmd);

/*
 * Makes key (an Idempotency-Key header, an idempotency-key gRPC metadata
 * value; name says which, for the message) the command_id of body, a JSON
 * object (borrowed, changed in place). A body command_id other than key is
 * ROOMD_EINVAL with *e naming "command_id"; else returns 0. The key's format
 * is then checked by room_cmd_parse as the command_id's. Thread: any.
 */
struct json_t;
int room_cmd_set_idempotency_key(struct json_t *body, const char *key, const char *name,
                                 struct cmd_error *e);

/* One event produced by a command, before it gets its event_id. */
struct room_event {
    const char *type; /* static "RoomUserJoined" ... */
    uint8_t *payload; /* packed protobuf, malloc'd */
    size_t payload_len;
};

struct room_events {
    struct room_event *v;
    size_t n, cap;
};
void room_events_clear(struct room_events *ev);

/* Result details of apply when it refuses: ROOMD_ENOTFOUND / ECONFLICT /
 * EINVAL plus a code ("seat_taken", "not_member", "room_closed", "banned",
 * "rocket_stale") and message for the JSON error. */
struct apply_error {
    char code[64];
    char message[256];
};

/*
 * The rules (ARCHITECTURE §5, docs/room.md "Replay is deterministic"): a
 * room applies its own rules (room_state.rules). room_apply of a live
 * command gives the room the configured rules rc when it has none or they
 * changed; the command's log row then records them, and a replay takes the
 * rules only from the log, never from the config of the day.
 *
 * Applies cmd to s (a clone owned by the caller) at time now_ms, appending
 * events to ev. On success bumps s->version by one and returns 0; a no-op
 * command (stale/duplicate LaunchRocket) returns ROOMD_ECONFLICT with code
 * "rocket_stale" and leaves s untouched in meaning (caller discards the clone).
 * Any refusal returns a negative code with *e filled; s is then garbage
 * (discard the clone). For CMD_CREATE_ROOM, s is a fresh room_state_new().
 * Also performs the lazy UTC-day rocket reset (RoomRocketReset).
 */
int room_apply(struct room_state *s, const struct room_cmd *cmd, int64_t now_ms,
               const struct conf_room *rc, struct room_events *ev, struct apply_error *e);

/* Prices gift cmd by its catalog row (unit price, energy, version): what
 * room_apply then applies and room_logged_request records ("catalog").
 * Thread: any (pure). */
void room_cmd_price(struct room_cmd *cmd, const struct gift_item *g);

/* The request the command log stores for cmd, which turned before (NULL:
 * no room yet) into after with room_apply: cmd->request, plus "rules" (as
 * room_rules_to_json) when the command gave the room rules it did not
 * have, plus "catalog" ({"energy_per_unit","unit_price","version"}) when
 * the catalog priced it. Returns a malloc'd string. Thread: any (pure). */
char *room_logged_request(const struct room_cmd *cmd, const struct room_state *before,
                          const struct room_state *after);

#endif
