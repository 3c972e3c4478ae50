/* SPDX-License-Identifier: Apache-2.0 */
/*
 * handlers_room.c: the room handlers, kept thin: HTTP -> room_cmd_parse ->
 * room_service_execute -> reply (room/service.h builds the JSON answer).
 * What is added here is HTTP only: invalid_json vs invalid_argument (the body
 * is parsed once, here), the acting-uid check of auth, the Idempotent-Replay
 * and X-Room-Owner headers, Retry-After, the metrics.
 */
#include "http/router.h"

#include "conf/conf.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/xmalloc.h"
#include "metrics/metrics.h"
#include "room/service.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* Parses the body once: NULL and an invalid_json 400 in resp when it is
 * not JSON; the object then goes to room_cmd_parse_json. */
static json_t *
parse_body(const struct http_request *req, struct http_response *resp)
{
    json_error_t je;
    json_t *j;

    if (req->body_len == 0) {
        http_response_field_error(resp, "invalid_json", "body", "body: empty, want a JSON object");
        return NULL;
    }
    j = json_loadb(req->body, req->body_len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
    if (j == NULL) {
        char msg[320];
        snprintf(msg, sizeof(msg), "body: invalid JSON at line %d column %d: %s", je.line,
                 je.column, je.text);
        http_response_field_error(resp, "invalid_json", "body", msg);
    }
    return j;
}

struct room_origin
http_room_origin(const struct http_request *req)
{
    struct room_origin o = {
        .method = req->method,
        .path = req->path,
        .body = req->body,
        .body_len = req->body_len,
        .authorization = req->authorization,
        .forwarded = req->forwarded_by != NULL,
    };
    return o;
}

/* Moves a room_reply into resp (the not-owner body already names the owner). */
static void
reply_to_response(struct room_reply *rr, struct http_response *resp)
{
    char *body = rr->body;

    rr->body = NULL;
    if (body == NULL)
        body = xasprintf("{\"error\":{\"code\":\"internal\",\"message\":\"no reply\"}}");
    if (rr->owner[0] != '\0')
        http_response_header(resp, "X-Room-Owner", rr->owner);
    if (rr->replay)
        http_response_header(resp, "Idempotent-Replay", "true");
    if (rr->retry_after > 0) {
        char ra[16];
        snprintf(ra, sizeof(ra), "%d", rr->retry_after);
        http_response_header(resp, "Retry-After", ra);
    }
    http_response_take(resp, rr->status, body);
}

/* CreateRoom committed (or replayed): 201 with the room's Location. A
 * room_id the request named is the answer's too; only a create without one
 * reads it from the answer, since a replay (or the owner's answer to a
 * forwarded create) carries the id generated there, not cmd's. */
static void
created(const struct room_cmd *cmd, struct room_reply *rr, struct http_response *resp)
{
    json_t *j = NULL;
    const char *id = cmd->room_id;
    char loc[160];

    rr->status = 201;
    if (cmd->room_id_generated) {
        j = json_loads(rr->body, 0, NULL);
        id = json_string_value(json_object_get(j, "room_id"));
    }
    if (id != NULL) {
        snprintf(loc, sizeof(loc), "/v1/rooms/%s", id);
        http_response_header(resp, "Location", loc);
    }
    json_decref(j);
}

/* The uid a command acts as (auth: a user token may act only as itself);
 * 0 for LaunchRocket (admin listener only). */
static int64_t
acting_uid(const struct room_cmd *cmd)
{
    switch (cmd->type) {
    case CMD_CREATE_ROOM:
        return cmd->owner_uid;
    case CMD_KICK_USER:
    case CMD_CLOSE_ROOM:
        return cmd->operator_uid;
    case CMD_LAUNCH_ROCKET:
        return 0;
    default:
        return cmd->uid; /* join, leave, mic up/down, the gift's sender */
    }
}

void
handle_command(const struct http_deps *d, const struct http_request *req,
               const struct auth_principal *p, enum room_cmd_type type, const char *app,
               const char *room_id, struct http_response *resp)
{
    struct room_cmd cmd;
    struct cmd_error ce;
    struct room_reply rr;
    enum auth_reason ar;
    int retry;
    int64_t t0 = clock_mono_us();
    json_t *body = NULL;
    char *forward_body = NULL;

    memset(&cmd, 0, sizeof(cmd));
    memset(&ce, 0, sizeof(ce));
    memset(&rr, 0, sizeof(rr));
    if ((body = parse_body(req, resp)) == NULL)
        goto out;
    if (req->idempotency_key != NULL &&
        room_cmd_set_idempotency_key(body, req->idempotency_key, "Idempotency-Key", &ce) != 0) {
        http_response_field_error(resp, "invalid_argument", ce.field, ce.message);
        goto out;
    }
    if (room_cmd_parse_json(type, app, room_id, body, &cmd, &ce) != 0) {
        const char *field = ce.field[0] ? ce.field : "body";
        http_response_field_error(resp, "invalid_argument", field,
                                  ce.message[0] ? ce.message : "invalid request");
        goto out;
    }
    if ((ar = auth_may_act_as(p, app, acting_uid(&cmd))) != AUTH_OK) {
        http_refuse(d, req, ar, resp);
        goto out;
    }
    if (p->service && p->uid == 0) /* a named service acted for the uid: its token's sub */
        log_info("http", "service command", "service=%s app=%s room=%s command=%s command_id=%s",
                 p->sub, app, cmd.room_id, room_cmd_name(type), cmd.command_id);
    if (type == CMD_CREATE_ROOM &&
        (retry = http_create_allowed(d->conf->room.max_creates_per_minute, app, cmd.owner_uid)) >
            0) {
        char ra[16];
        snprintf(ra, sizeof(ra), "%d", retry);
        http_response_error(resp, 429, "rate_limited",
                            "owner_uid: more than room.max_creates_per_minute (%d) rooms this "
                            "minute",
                            d->conf->room.max_creates_per_minute);
        http_response_header(resp, "Retry-After", ra);
        goto out;
    }
    struct room_origin o = http_room_origin(req);
    if (req->idempotency_key != NULL) {
        /* forwarded, the owner reads the command_id from the body */
        forward_body = json_dumps(body, JSON_COMPACT);
        if (forward_body == NULL)
            abort();
        o.body = forward_body;
        o.body_len = strlen(forward_body);
    }
    room_service_execute_from(d->rooms, &cmd, &o, &rr);
    if (type == CMD_CREATE_ROOM && rr.status == 200)
        created(&cmd, &rr, resp);
    reply_to_response(&rr, resp);
out:
    free(forward_body);
    json_decref(body);
    metrics_command_observe((int)type, resp->status, clock_mono_us() - t0);
    room_reply_clear(&rr);
    room_cmd_clear(&cmd);
}

void
handle_get_room(const struct http_deps *d, const struct http_request *req, const char *app,
                const char *room_id, struct http_response *resp)
{
    struct room_reply rr;
    struct room_origin o = http_room_origin(req);

    memset(&rr, 0, sizeof(rr));
    room_service_get(d->rooms, app, room_id, &o, &rr);
    reply_to_response(&rr, resp);
    room_reply_clear(&rr);
}
