/* SPDX-License-Identifier: Apache-2.0 */
/*
 * handlers_heartbeat.c: POST /v1/rooms/{id}/heartbeat {"uid":N} (docs/room.md,
 * Presence). HTTP only: the body ({"uid"} and nothing else; the gRPC twin's
 * room_id becomes the path), the acting-uid
 * check of auth (a user token heartbeats for itself, a service token for any
 * uid of its app); the room service answers from the owner's memory
 * (room_service_heartbeat), forwarding to the owner like a command.
 */
#include "http/router.h"

#include "core/xmalloc.h"
#include "room/service.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The uid of a heartbeat body, or 0 with the 400 in resp. */
static int64_t
heartbeat_uid(const struct http_request *req, struct http_response *resp)
{
    json_error_t je;
    json_t *j, *v;
    const char *key;
    int64_t uid = 0;

    j = req->body_len > 0
            ? json_loadb(req->body, req->body_len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je)
            : NULL;
    if (j == NULL) {
        http_response_field_error(resp, "invalid_json", "body",
                                  "body: want a JSON object {\"uid\":N}");
        return 0;
    }
    if (!json_is_object(j)) {
        http_response_field_error(resp, "invalid_argument", "body", "body: must be a JSON object");
        goto out;
    }
    json_object_foreach(j, key, v)
    {
        if (strcmp(key, "uid") != 0) {
            char f[64], msg[128];
            strlcpy_(f, key, sizeof(f));
            snprintf(msg, sizeof(msg), "%s: unknown field", f);
            http_response_field_error(resp, "invalid_argument", f, msg);
            goto out;
        }
    }
    v = json_object_get(j, "uid");
    if (!json_is_integer(v) || json_integer_value(v) <= 0) {
        http_response_field_error(resp, "invalid_argument", "uid",
                                  "uid: must be a positive integer");
        goto out;
    }
    uid = json_integer_value(v);
out:
    json_decref(j);
    return uid;
}

void
handle_heartbeat(const struct http_deps *d, const struct http_request *req,
                 const struct auth_principal *p, const char *app, const char *room_id,
                 struct http_response *resp)
{
    struct room_reply rr;
    enum auth_reason ar;
    int64_t uid;
    char *body;

    memset(&rr, 0, sizeof(rr));
    if ((uid = heartbeat_uid(req, resp)) == 0)
        return;
    if ((ar = auth_may_act_as(p, app, uid)) != AUTH_OK) {
        http_refuse(d, req, ar, resp);
        return;
    }
    struct room_origin o = http_room_origin(req);
    room_service_heartbeat(d->rooms, app, room_id, uid, &o, &rr);
    body = rr.body;
    rr.body = NULL;
    if (body == NULL)
        body = xasprintf("{\"error\":{\"code\":\"internal\",\"message\":\"no reply\"}}");
    if (rr.owner[0] != '\0')
        http_response_header(resp, "X-Room-Owner", rr.owner);
    http_response_take(resp, rr.status, body);
    room_reply_clear(&rr);
}
