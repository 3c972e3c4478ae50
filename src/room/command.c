/* SPDX-License-Identifier: Apache-2.0 */
/*
 * command.c: command names, and room_cmd_parse(): strict validation of a
 * command body (every field typed and bounded, unknown fields refused, the
 * error naming the field) and the canonical request JSON that the command
 * log stores, idempotency compares, and a replay parses again.
 * The apply steps live in cmd_*.c, dispatched by apply.c.
 *
 * How to add a command (this file owns the list of commands):
 *  1. command.h: its enum room_cmd_type value (before CMD_COUNT_) and any
 *     new field of struct room_cmd; here: its name in cmd_names, its
 *     fields in fields_of, their checks in the parse switch.
 *  2. cmd_<name>.c: its apply step (pure: state, command, now -> state +
 *     events), declared in apply.h, dispatched in apply.c; its events in
 *     proto/room_events.proto; the file in CMakeLists.txt.
 *  3. The routes: http/router.c (path, listener), the acting uid in
 *     http/handlers_room.c, proto/room_service.proto + rpc/server.c COMMAND().
 *  4. service.c needs no change unless the command has an effect outside
 *     the store (then a stage of its own, see its head comment).
 *  5. Tests: tests/unit/test_room_apply.c + test_room_replay.c (the replay
 *     reproduces it), the endpoint x caller matrix (tests/integ/
 *     test_http_auth.py, test_grpc.py); docs/room.md, docs/openapi.yaml.
 */
#include "room/command.h"

#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/uuid.h"
#include "core/xmalloc.h"
#include "room/text.h"
#include "store/store.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROOM_ID_MAX 48 /* Tencent IM GroupId limit */
#define GIFT_COUNT_MAX 9999
#define REASON_MAX 255

static const char *const cmd_names[CMD_COUNT_] = {
    "CreateRoom", "JoinRoom", "LeaveRoom", "MicUp",        "MicDown",
    "SendGift",   "KickUser", "CloseRoom", "LaunchRocket",
};

const char *const *
room_cmd_names(void)
{
    return cmd_names;
}

const char *
room_cmd_name(enum room_cmd_type t)
{
    return (unsigned)t < CMD_COUNT_ ? cmd_names[t] : "Unknown";
}

int
room_cmd_parse_name(const char *name)
{
    for (int i = 0; i < CMD_COUNT_; i++)
        if (strcmp(name, cmd_names[i]) == 0)
            return i;
    return -1;
}

void
room_cmd_clear(struct room_cmd *cmd)
{
    free(cmd->request);
    memset(cmd, 0, sizeof(*cmd));
    cmd->seat = -1;
}

void
room_events_clear(struct room_events *ev)
{
    for (size_t i = 0; i < ev->n; i++)
        free(ev->v[i].payload);
    free(ev->v);
    memset(ev, 0, sizeof(*ev));
}

/* ---- validation helpers --------------------------------------------------------- */

static int
fail(struct cmd_error *e, const char *field, const char *fmt, ...)
{
    va_list ap;
    char msg[200];

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    strlcpy_(e->field, field, sizeof(e->field));
    snprintf(e->message, sizeof(e->message), "%s: %s", field, msg);
    return ROOMD_EINVAL;
}

static int
id_char_ok(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == ':' || c == '-';
}

/* True when s is 1..maxlen bytes of [A-Za-z0-9_.:-]. */
static int
id_ok(const char *s, size_t maxlen)
{
    size_t n = strlen(s);

    if (n == 0 || n > maxlen)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!id_char_ok(s[i]))
            return 0;
    return 1;
}

/* A room id: an id that is not "." or ".." (a path segment of its own). */
static int
room_id_ok(const char *s)
{
    return id_ok(s, ROOM_ID_MAX) && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

/* Finds field in o: 0 and *v, 1 when absent and optional, or ROOMD_EINVAL
 * (e set) when absent and required. The get_* readers below start here. */
static int
get_field(json_t *o, const char *field, int required, json_t **v, struct cmd_error *e)
{
    *v = json_object_get(o, field);
    if (*v != NULL)
        return 0;
    return required ? fail(e, field, "is required") : 1;
}

/* Reads an identifier field into dst. Returns 0 (found), 1 (absent and
 * optional) or ROOMD_EINVAL. */
static int
get_id(json_t *o, const char *field, size_t maxlen, int required, char *dst, size_t dstlen,
       struct cmd_error *e)
{
    json_t *v;
    int rc = get_field(o, field, required, &v, e);

    if (rc != 0)
        return rc;
    if (!json_is_string(v) || !id_ok(json_string_value(v), maxlen))
        return fail(e, field, "must be a string of 1..%zu characters [A-Za-z0-9_.:-]", maxlen);
    strlcpy_(dst, json_string_value(v), dstlen);
    return 0;
}

/* Reads an integer field in [lo, hi]. Returns 0, 1 (absent, optional) or EINVAL. */
static int
get_int(json_t *o, const char *field, int64_t lo, int64_t hi, int required, int64_t *out,
        struct cmd_error *e)
{
    json_t *v;
    int rc = get_field(o, field, required, &v, e);

    if (rc != 0)
        return rc;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        if (lo == 1 && hi == INT64_MAX)
            return fail(e, field, "must be a positive integer");
        return fail(e, field, "must be an integer in %lld..%lld", (long long)lo, (long long)hi);
    }
    *out = json_integer_value(v);
    return 0;
}

static int
get_uid(json_t *o, const char *field, int64_t *out, struct cmd_error *e)
{
    return get_int(o, field, 1, INT64_MAX, 1, out, e);
}

/* Reads a text field of minlen..maxlen bytes (jansson guarantees UTF-8). */
static int
get_text(json_t *o, const char *field, size_t minlen, size_t maxlen, int required, char *dst,
         size_t dstlen, struct cmd_error *e)
{
    json_t *v;
    int rc = get_field(o, field, required, &v, e);
    size_t n;

    if (rc != 0)
        return rc;
    if (!json_is_string(v))
        return fail(e, field, "must be a string");
    n = json_string_length(v);
    if (n < minlen || n > maxlen || strlen(json_string_value(v)) != n)
        return fail(e, field, "must be %zu..%zu bytes of UTF-8 text", minlen, maxlen);
    strlcpy_(dst, json_string_value(v), dstlen);
    return 0;
}

/* Field lists per command; "type" and "room_id" are accepted by all (the
 * canonical request carries both). */
static const char *const fields_of[CMD_COUNT_][8] = {
    [CMD_CREATE_ROOM] = {"command_id", "owner_uid", "title"},
    [CMD_JOIN_ROOM] = {"command_id", "uid"},
    [CMD_LEAVE_ROOM] = {"command_id", "uid"},
    [CMD_MIC_UP] = {"command_id", "uid", "seat"},
    [CMD_MIC_DOWN] = {"command_id", "uid"},
    [CMD_SEND_GIFT] = {"command_id", "uid", "to_uid", "gift_id", "count", "unit_price"},
    [CMD_KICK_USER] = {"command_id", "operator_uid", "uid", "reason"},
    [CMD_CLOSE_ROOM] = {"command_id", "operator_uid"},
    [CMD_LAUNCH_ROCKET] = {"command_id", "rocket_id", "level", "launch_at_ms"},
};

static int
field_known(enum room_cmd_type t, const char *key)
{
    if (strcmp(key, "type") == 0 || strcmp(key, "room_id") == 0)
        return 1;
    for (int i = 0; i < 8 && fields_of[t][i] != NULL; i++)
        if (strcmp(key, fields_of[t][i]) == 0)
            return 1;
    return 0;
}

/* Validates the fields specific to cmd->type into cmd. */
static int
parse_fields(json_t *o, struct room_cmd *cmd, struct cmd_error *e)
{
    int64_t v;
    int rc;

    switch (cmd->type) {
    case CMD_CREATE_ROOM:
        if ((rc = get_uid(o, "owner_uid", &cmd->owner_uid, e)) != 0)
            return rc;
        return get_text(o, "title", 1, ROOM_TITLE_MAX, 1, cmd->title, sizeof(cmd->title), e);
    case CMD_JOIN_ROOM:
    case CMD_LEAVE_ROOM:
    case CMD_MIC_DOWN:
        return get_uid(o, "uid", &cmd->uid, e);
    case CMD_MIC_UP:
        if ((rc = get_uid(o, "uid", &cmd->uid, e)) != 0)
            return rc;
        rc = get_int(o, "seat", 0, ROOM_MAX_SEATS - 1, 0, &v, e);
        if (rc < 0)
            return rc;
        cmd->seat = rc == 0 ? (int)v : -1;
        return 0;
    case CMD_SEND_GIFT:
        if ((rc = get_uid(o, "uid", &cmd->uid, e)) != 0 ||
            (rc = get_uid(o, "to_uid", &cmd->to_uid, e)) != 0 ||
            (rc = get_id(o, "gift_id", STORE_ID_MAX - 1, 1, cmd->gift_id, sizeof(cmd->gift_id),
                         e)) != 0 ||
            (rc = get_int(o, "count", 1, GIFT_COUNT_MAX, 1, &cmd->count, e)) != 0)
            return rc;
        /* optional: the price the client saw (the catalog's must equal it) */
        if ((rc = get_int(o, "unit_price", 1, STORE_GIFT_VALUE_MAX, 0, &cmd->unit_price, e)) < 0)
            return rc;
        cmd->price_named = rc == 0;
        cmd->energy_per_unit = cmd->unit_price; /* until the catalog prices it */
        return 0;                               /* count * unit_price <= 9999e9: no overflow */
    case CMD_KICK_USER:
        if ((rc = get_uid(o, "operator_uid", &cmd->operator_uid, e)) != 0 ||
            (rc = get_uid(o, "uid", &cmd->uid, e)) != 0)
            return rc;
        rc = get_text(o, "reason", 0, REASON_MAX, 0, cmd->reason, sizeof(cmd->reason), e);
        return rc < 0 ? rc : 0;
    case CMD_CLOSE_ROOM:
        return get_uid(o, "operator_uid", &cmd->operator_uid, e);
    case CMD_LAUNCH_ROCKET:
        if ((rc = get_id(o, "rocket_id", STORE_ID_MAX - 1, 1, cmd->rocket_id,
                         sizeof(cmd->rocket_id), e)) != 0 ||
            (rc = get_int(o, "level", 1, CONF_MAX_ROCKET_LEVELS, 1, &v, e)) != 0)
            return rc;
        cmd->level = (int)v;
        return get_int(o, "launch_at_ms", 1, INT64_MAX, 1, &cmd->launch_at_ms, e);
    default:
        return fail(e, "type", "unknown command type");
    }
}

/* One field of the canonical request: an identifier (id_ok: written quoted,
 * nothing to escape), free text (escaped) or an integer. */
struct req_field {
    const char *key;
    enum { F_ID, F_TEXT, F_INT } kind;
    const char *s;
    int64_t n;
};

static int
field_cmp(const void *a, const void *b)
{
    return strcmp(((const struct req_field *)a)->key, ((const struct req_field *)b)->key);
}

/* The canonical request: every validated field, "type" and "room_id", keys
 * sorted, compact: what jansson's json_dumps(JSON_SORT_KEYS | JSON_COMPACT)
 * gives, written directly (jansson's object + sorted dump of it was ~4% of
 * roomd's CPU at 64 clients, bench/README.md; test_room_parse compares the
 * two byte for byte). */
static char *
canonical_request(const struct room_cmd *cmd)
{
    struct req_field f[8];
    struct text t = {0};
    size_t n = 0;

#define ID(k, v) (f[n++] = (struct req_field){k, F_ID, v, 0})
#define TEXT(k, v) (f[n++] = (struct req_field){k, F_TEXT, v, 0})
#define INT(k, v) (f[n++] = (struct req_field){k, F_INT, NULL, v})
    ID("type", room_cmd_name(cmd->type));
    ID("room_id", cmd->room_id);
    ID("command_id", cmd->command_id);
    switch (cmd->type) {
    case CMD_CREATE_ROOM:
        INT("owner_uid", cmd->owner_uid);
        TEXT("title", cmd->title);
        break;
    case CMD_JOIN_ROOM:
    case CMD_LEAVE_ROOM:
    case CMD_MIC_DOWN:
        INT("uid", cmd->uid);
        break;
    case CMD_MIC_UP:
        INT("uid", cmd->uid);
        if (cmd->seat >= 0)
            INT("seat", cmd->seat);
        break;
    case CMD_SEND_GIFT:
        INT("uid", cmd->uid);
        INT("to_uid", cmd->to_uid);
        ID("gift_id", cmd->gift_id);
        INT("count", cmd->count);
        if (cmd->price_named)
            INT("unit_price", cmd->unit_price);
        break;
    case CMD_KICK_USER:
        INT("operator_uid", cmd->operator_uid);
        INT("uid", cmd->uid);
        TEXT("reason", cmd->reason);
        break;
    case CMD_CLOSE_ROOM:
        INT("operator_uid", cmd->operator_uid);
        break;
    case CMD_LAUNCH_ROCKET:
        ID("rocket_id", cmd->rocket_id);
        INT("level", cmd->level);
        INT("launch_at_ms", cmd->launch_at_ms);
        break;
    default:
        break;
    }
#undef ID
#undef TEXT
#undef INT
    qsort(f, n, sizeof(f[0]), field_cmp);
    for (size_t i = 0; i < n; i++) {
        text_printf(&t, "%s\"%s\":", i ? "," : "{", f[i].key);
        if (f[i].kind == F_INT)
            text_printf(&t, "%lld", (long long)f[i].n);
        else if (f[i].kind == F_TEXT)
            text_json_string(&t, f[i].s);
        else
            text_printf(&t, "\"%s\"", f[i].s);
    }
    text_puts(&t, "}");
    return text_take(&t);
}

/* Generated room ids: a UUIDv7 without dashes (32 hex characters). */
static void
generate_room_id(char *dst, size_t len)
{
    char u[UUID_STR_LEN];
    size_t j = 0;

    uuid_v7(clock_wall_ms(), u);
    for (size_t i = 0; u[i] != '\0' && j + 1 < len; i++)
        if (u[i] != '-')
            dst[j++] = u[i];
    dst[j] = '\0';
}

void
rocket_launch_command_id(const char *rocket_id, char *out, size_t len)
{
    if (snprintf(out, len, ROOM_RESERVED_ID_PREFIX "rl-%s", rocket_id) >= (int)len)
        out[len - 1] = '\0';
}

/* Reads the command_id. Client commands take 1..63 characters of the id
 * charset; the reserved prefix belongs to roomd alone. Only
 * cmd->command_id's syntax is checked here; reserved_id_ok checks the rest
 * once the command's other fields are known. */
static int
get_command_id(json_t *o, struct room_cmd *cmd, bool from_log, struct cmd_error *e)
{
    json_t *v = json_object_get(o, "command_id");
    const char *id = json_is_string(v) ? json_string_value(v) : NULL;
    size_t plen = strlen(ROOM_RESERVED_ID_PREFIX);

    if (id != NULL && strncmp(id, ROOM_RESERVED_ID_PREFIX, plen) == 0) {
        if (!from_log && cmd->type != CMD_LAUNCH_ROCKET)
            return fail(e, "command_id",
                        "ids starting with \"%s\" are reserved for the commands roomd issues "
                        "itself",
                        ROOM_RESERVED_ID_PREFIX);
        if (!id_ok(id + plen, STORE_ID_MAX - 1 - plen))
            return fail(e, "command_id", "must be a string of 1..%d characters [A-Za-z0-9_.:-]",
                        STORE_ID_MAX - 1);
        strlcpy_(cmd->command_id, id, sizeof(cmd->command_id));
        return 0;
    }
    return get_id(o, "command_id", STORE_ID_MAX - 1, 1, cmd->command_id, sizeof(cmd->command_id),
                  e);
}

/* LaunchRocket is issued by roomd itself (its timer, the broker wake-up):
 * its command_id must be the reserved id rocket_launch_command_id derives
 * from its rocket_id, and that rocket_id must be this room's
 * ("<room_id>-<utc_day>-<level>"), so the id is scoped by room and no
 * client request can take it first. A logged command is not checked: the
 * log holds what committed (older logs have "rl-..." launch ids). */
static int
reserved_id_ok(const struct room_cmd *cmd, bool from_log, struct cmd_error *e)
{
    char want[STORE_ID_MAX];
    size_t n = strlen(cmd->room_id);

    if (from_log || cmd->type != CMD_LAUNCH_ROCKET)
        return 0;
    if (strncmp(cmd->rocket_id, cmd->room_id, n) != 0 || cmd->rocket_id[n] != '-')
        return fail(e, "rocket_id", "must be a rocket of room %s", cmd->room_id);
    rocket_launch_command_id(cmd->rocket_id, want, sizeof(want));
    if (strcmp(cmd->command_id, want) != 0)
        return fail(e, "command_id", "must be \"%s\" (the reserved id of this launch)", want);
    return 0;
}

static int parse_object(enum room_cmd_type type, const char *app, const char *path_room_id,
                        json_t *o, bool from_log, struct room_cmd *cmd, struct cmd_error *e);

static int
parse(enum room_cmd_type type, const char *app, const char *path_room_id, const char *body,
      size_t len, bool from_log, struct room_cmd *cmd, struct cmd_error *e)
{
    json_error_t jerr;
    json_t *o;
    int rc;

    o = json_loadb(body ? body : "", len, JSON_REJECT_DUPLICATES, &jerr);
    if (o == NULL) {
        memset(cmd, 0, sizeof(*cmd));
        memset(e, 0, sizeof(*e));
        cmd->seat = -1;
        cmd->type = type;
        return fail(e, "body", "invalid JSON at line %d column %d: %s", jerr.line, jerr.column,
                    jerr.text);
    }
    rc = parse_object(type, app, path_room_id, o, from_log, cmd, e);
    json_decref(o);
    return rc;
}

int
room_cmd_parse_json(enum room_cmd_type type, const char *app, const char *path_room_id,
                    struct json_t *o, struct room_cmd *cmd, struct cmd_error *e)
{
    return parse_object(type, app, path_room_id, o, false, cmd, e);
}

/* Validates the body object o (a logged request when from_log) into cmd. */
static int
parse_object(enum room_cmd_type type, const char *app, const char *path_room_id, json_t *o,
             bool from_log, struct room_cmd *cmd, struct cmd_error *e)
{
    json_t *v;
    const char *key;
    char body_room[STORE_ID_MAX] = "";
    int rc;

    memset(cmd, 0, sizeof(*cmd));
    memset(e, 0, sizeof(*e));
    cmd->seat = -1;
    cmd->type = type;
    if ((unsigned)type >= CMD_COUNT_)
        return fail(e, "type", "unknown command type");
    if (app == NULL || !id_ok(app, STORE_ID_MAX - 1))
        return fail(e, "app_code", "must be 1..%d characters [A-Za-z0-9_.:-]", STORE_ID_MAX - 1);
    strlcpy_(cmd->app_code, app, sizeof(cmd->app_code));
    if (path_room_id != NULL && !room_id_ok(path_room_id)) {
        rc = fail(e, "room_id", "must be a string of 1..%d characters [A-Za-z0-9_.:-], not . or ..",
                  ROOM_ID_MAX);
        goto out;
    }
    if (!json_is_object(o)) {
        rc = fail(e, "body", "must be a JSON object");
        goto out;
    }
    if (from_log && (v = json_object_get(o, "rules")) != NULL) {
        if (room_rules_from_json(v, &cmd->rules) != 0) {
            rc = fail(e, "rules", "recorded rules do not parse");
            goto out;
        }
        cmd->has_rules = true;
        json_object_del(o, "rules");
    }
    if (from_log && (v = json_object_get(o, "catalog")) != NULL) {
        json_int_t price, energy, version;
        if (type != CMD_SEND_GIFT || json_unpack(v, "{s:I, s:I, s:I}", "energy_per_unit", &energy,
                                                 "unit_price", &price, "version", &version) != 0) {
            rc = fail(e, "catalog", "the recorded catalog price does not parse");
            goto out;
        }
        cmd->catalog.unit_price = price;
        cmd->catalog.energy_per_unit = energy;
        cmd->catalog.version = version;
        cmd->priced = true;
        json_object_del(o, "catalog");
    }
    cmd->from_log = from_log;
    json_object_foreach(o, key, v)
    {
        if (!field_known(type, key)) {
            char f[64];
            strlcpy_(f, key, sizeof(f));
            rc = fail(e, f, "unknown field");
            goto out;
        }
    }
    if ((v = json_object_get(o, "type")) != NULL &&
        (!json_is_string(v) || strcmp(json_string_value(v), room_cmd_name(type)) != 0)) {
        rc = fail(e, "type", "must be \"%s\"", room_cmd_name(type));
        goto out;
    }
    if ((rc = get_command_id(o, cmd, from_log, e)) != 0)
        goto out;
    rc = get_id(o, "room_id", ROOM_ID_MAX, 0, body_room, sizeof(body_room), e);
    if (rc < 0)
        goto out;
    if (rc == 0 && !room_id_ok(body_room)) {
        rc = fail(e, "room_id", "must not be . or ..");
        goto out;
    }
    if (path_room_id != NULL) {
        if (rc == 0 && strcmp(body_room, path_room_id) != 0) {
            rc = fail(e, "room_id", "does not match the room in the path");
            goto out;
        }
        strlcpy_(cmd->room_id, path_room_id, sizeof(cmd->room_id));
    } else if (rc == 0) {
        strlcpy_(cmd->room_id, body_room, sizeof(cmd->room_id));
    } else if (type == CMD_CREATE_ROOM) {
        generate_room_id(cmd->room_id, sizeof(cmd->room_id));
        cmd->room_id_generated = true;
    } else {
        rc = fail(e, "room_id", "is required");
        goto out;
    }
    if ((rc = parse_fields(o, cmd, e)) != 0 || (rc = reserved_id_ok(cmd, from_log, e)) != 0)
        goto out;
    if (cmd->priced) { /* a replay applies the price the live command applied */
        cmd->unit_price = cmd->catalog.unit_price;
        cmd->energy_per_unit = cmd->catalog.energy_per_unit;
    } else if (from_log && type == CMD_SEND_GIFT && !cmd->price_named) {
        rc = fail(e, "unit_price", "a logged gift has neither unit_price nor catalog");
        goto out;
    }
    cmd->request = canonical_request(cmd);
    rc = 0;
out:
    if (rc != 0) {
        free(cmd->request);
        cmd->request = NULL;
    }
    return rc;
}

int
room_cmd_parse(enum room_cmd_type type, const char *app, const char *path_room_id, const char *body,
               size_t len, struct room_cmd *cmd, struct cmd_error *e)
{
    return parse(type, app, path_room_id, body, len, false, cmd, e);
}

int
room_cmd_parse_logged(enum room_cmd_type type, const char *app, const char *room_id,
                      const char *request, struct room_cmd *cmd, struct cmd_error *e)
{
    return parse(type, app, room_id, request, strlen(request ? request : ""), true, cmd, e);
}

int
room_cmd_idle_leave(const char *app, const char *room_id, int64_t uid, int64_t joined_at_ms,
                    struct room_cmd *cmd)
{
    struct cmd_error ce;
    uint64_t h = 1469598103934665603ull;
    char body[96];

    snprintf(body, sizeof(body), "{\"command_id\":\"idle\",\"uid\":%lld}", (long long)uid);
    if (parse(CMD_LEAVE_ROOM, app, room_id, body, strlen(body), false, cmd, &ce) != 0)
        return ROOMD_EINVAL;
    for (const char *p = room_id; *p; p++)
        h = (h ^ (uint8_t)*p) * 1099511628211ull;
    snprintf(cmd->command_id, sizeof(cmd->command_id), ROOM_IDLE_LEAVE_PREFIX "%lld-%lld-%016llx",
             (long long)uid, (long long)joined_at_ms, (unsigned long long)h);
    free(cmd->request);
    cmd->request = canonical_request(cmd);
    cmd->idle_leave = true;
    cmd->idle_joined_at_ms = joined_at_ms;
    return 0;
}

int
room_cmd_set_idempotency_key(json_t *body, const char *key, const char *name, struct cmd_error *e)
{
    json_t *v;

    memset(e, 0, sizeof(*e));
    if (!json_is_object(body))
        return 0; /* room_cmd_parse says what is wrong with it */
    v = json_object_get(body, "command_id");
    if (v != NULL && (!json_is_string(v) || strcmp(json_string_value(v), key) != 0))
        return fail(e, "command_id", "differs from the %s", name);
    json_object_set_new(body, "command_id", json_string(key));
    return 0;
}
