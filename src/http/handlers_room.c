/*
 * handlers_room.c: the room handlers, kept thin: HTTP -> room_cmd_parse ->
 * room_service_execute -> reply (room/service.h builds the JSON answer).
 * What is added here is HTTP only: invalid_json vs invalid_argument, the
 * Idempotent-Replay and X-Room-Owner headers, Retry-After, the metrics.
 */
#include "http/router.h"

#include "core/clock.h"
#include "core/xmalloc.h"
#include "metrics/metrics.h"
#include "room/service.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* Checks that body is syntactically JSON, so a parse failure answers
 * invalid_json and everything else invalid_argument naming the field. */
static bool
check_json(const struct http_request *req, struct http_response *resp)
{
    json_error_t je;
    json_t *j;

    if (req->body_len == 0) {
        http_response_field_error(resp, "invalid_json", "body", "body: empty, want a JSON object");
        return false;
    }
    j = json_loadb(req->body, req->body_len, JSON_DECODE_ANY, &je);
    if (j == NULL) {
        char msg[320];
        snprintf(msg, sizeof(msg), "body: invalid JSON at line %d column %d: %s", je.line,
                 je.column, je.text);
        http_response_field_error(resp, "invalid_json", "body", msg);
        return false;
    }
    json_decref(j);
    return true;
}

/* The request as the room service forwards it to the room's owner. */
static struct room_origin
origin_of(const struct http_request *req)
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

/* Moves a room_reply into resp; adds "owner" to a not-owner error body. */
static void
reply_to_response(struct room_reply *rr, struct http_response *resp)
{
    char *body = rr->body;

    rr->body = NULL;
    if (body == NULL)
        body = xasprintf("{\"error\":{\"code\":\"internal\",\"message\":\"no reply\"}}");
    if (rr->owner[0] != '\0') {
        json_t *j = json_loads(body, 0, NULL);
        json_t *e = j ? json_object_get(j, "error") : NULL;
        if (json_is_object(e) && json_object_get(e, "owner") == NULL) {
            json_object_set_new(e, "owner", json_string(rr->owner));
            char *text = json_dumps(j, JSON_COMPACT);
            if (text != NULL) {
                free(body);
                body = text;
            }
        }
        json_decref(j);
        http_response_header(resp, "X-Room-Owner", rr->owner);
    }
    if (rr->replay)
        http_response_header(resp, "Idempotent-Replay", "true");
    http_response_take(resp, rr->status, body);
}

void
handle_command(const struct http_deps *d, const struct http_request *req, enum room_cmd_type type,
               const char *app, const char *room_id, struct http_response *resp)
{
    struct room_cmd cmd;
    struct cmd_error ce;
    struct room_reply rr;
    int64_t t0 = clock_mono_us();

    memset(&cmd, 0, sizeof(cmd));
    memset(&ce, 0, sizeof(ce));
    memset(&rr, 0, sizeof(rr));
    if (!check_json(req, resp))
        goto out;
    if (room_cmd_parse(type, app, room_id, req->body, req->body_len, &cmd, &ce) != 0) {
        const char *field = ce.field[0] ? ce.field : "body";
        http_response_field_error(resp, "invalid_argument", field,
                                  ce.message[0] ? ce.message : "invalid request");
        goto out;
    }
    struct room_origin o = origin_of(req);
    room_service_execute_from(d->rooms, &cmd, &o, &rr);
    reply_to_response(&rr, resp);
out:
    metrics_command_observe((int)type, resp->status, clock_mono_us() - t0);
    room_reply_clear(&rr);
    room_cmd_clear(&cmd);
}

void
handle_get_room(const struct http_deps *d, const struct http_request *req, const char *app,
                const char *room_id, struct http_response *resp)
{
    struct room_reply rr;
    struct room_origin o = origin_of(req);

    memset(&rr, 0, sizeof(rr));
    room_service_get(d->rooms, app, room_id, &o, &rr);
    reply_to_response(&rr, resp);
    room_reply_clear(&rr);
}
