/* SPDX-License-Identifier: Apache-2.0 */
/*
 * state.h: RoomState, the authoritative in-memory state of one room, owned
 * by its cell (cell.c). Commands mutate a clone (room_state_clone), and the
 * cell swaps the clone in only after the commit succeeded. The JSON form
 * (room_state_to_json) is both the snapshot stored in room_snapshots and the
 * answer of GET /v1/rooms/{id}; from_json(to_json(s)) == s exactly. A
 * command's answer carries its summary (room_state_to_json_summary).
 *
 * A room_state is not thread-safe; its cell serializes access.
 */
#ifndef ROOMD_ROOM_STATE_H
#define ROOMD_ROOM_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "conf/conf.h"
#include "store/store.h"

#define ROOM_TITLE_MAX 128
#define ROOM_MAX_SEATS 32

enum room_status { ROOM_OPEN = 0, ROOM_CLOSED };
enum rocket_status { ROCKET_IDLE = 0, ROCKET_IGNITED, ROCKET_DONE };

struct room_member {
    int64_t uid;
    int64_t joined_at_ms;
};

struct room_ban {
    int64_t uid;
    int64_t until_ms;
};

struct room_rocket {
    enum rocket_status status;
    int level;                    /* level being charged or ignited, 1-based */
    int64_t energy;               /* energy toward this level's threshold */
    int64_t utc_day;              /* the UTC day this state belongs to */
    char rocket_id[STORE_ID_MAX]; /* set while ignited */
    int64_t ignited_at_ms;
    int64_t launch_at_ms;
    int launched; /* rockets launched today */
};

struct room_state {
    char app_code[STORE_ID_MAX];
    char room_id[STORE_ID_MAX];
    int64_t owner_uid;
    char title[ROOM_TITLE_MAX + 1];
    enum room_status status;
    int64_t version;
    int64_t created_at_ms;
    int64_t updated_at_ms;
    struct room_member *members; /* in join order */
    size_t nmembers, cap_members;
    int nseats;
    int64_t seats[ROOM_MAX_SEATS]; /* uid on each seat, 0 = free */
    struct room_ban *bans;
    size_t nbans, cap_bans;
    int64_t gift_total; /* sum of all gift values (saturates at INT64_MAX) */
    struct room_rocket rocket;
    /* The rules this room applies: the room.* keys that decide a command's
     * outcome (seat_count, max_members, kick_ban_ms, rocket thresholds and
     * countdown; the other fields are 0). A room takes the configured rules
     * with a command whose log row records them (room_request_with_rules),
     * so a replay applies exactly the rules each command ran with.
     * has_rules false: a room loaded from a snapshot written before rules
     * were kept (its tail replays with the current config, as it always did). */
    bool has_rules;
    struct conf_room rules;
};

struct room_state *room_state_new(const char *app, const char *room_id);
/* Deep copy. */
struct room_state *room_state_clone(const struct room_state *s);
void room_state_free(struct room_state *s);

/* Returns a malloc'd compact JSON text with sorted keys. */
char *room_state_to_json(const struct room_state *s);
/* The summary of s in a command's answer (docs/http.md, "A command's
 * answer"): the same keys without the lists that grow with the room
 * ("members", "bans") and without "rules", so that its size does not
 * depend on the room's size: every answer is stored in the command log
 * and returned again by an idempotent replay. member_count stays exact.
 * Not a snapshot: from_json refuses it. Returns a malloc'd text. */
char *room_state_to_json_summary(const struct room_state *s);
/* Parses a snapshot. Returns 0 and *out, or ROOMD_EINVAL. */
int room_state_from_json(const char *json, struct room_state **out);

/* The rule fields of c (room_state.rules) as a JSON object (new reference)
 * {"countdown_ms","kick_ban_ms","max_members","seat_count","thresholds"}. */
json_t *room_rules_to_json(const struct conf_room *c);
/* Reads such an object into *out (other fields zeroed). 0 or ROOMD_EINVAL. */
int room_rules_from_json(json_t *o, struct conf_room *out);
/* True when a and b have the same rule fields, seat_count aside (a room
 * keeps the seats it was created with). */
bool room_rules_equal(const struct conf_room *a, const struct conf_room *b);
struct proj_room;
struct projection;
/* Fills *out (overwritten; free its arrays with proj_room_clear) with what
 * the projections keep of s (projection.h). Never fails. */
void room_state_project(const struct room_state *s, struct proj_room *out);
/* Reflects s in p (best effort, as projection_ops.update): returns its rc.
 * Blocks as p's update does; thread: any. */
int room_state_update_projection(struct projection *p, const struct room_state *s);

/* Member helpers: index or -1. */
int room_state_member_index(const struct room_state *s, int64_t uid);
int room_state_seat_of(const struct room_state *s, int64_t uid);

#endif
