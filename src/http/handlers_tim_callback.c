/* SPDX-License-Identifier: Apache-2.0 */
/*
 * handlers_tim_callback.c: POST /callbacks/tim (tencent_im.callback.enabled;
 * docs/room.md, Presence): Tencent IM's State.StateChange callback. No JWT:
 * the request is authenticated by Tencent's signature (tim_callback.h: Sign
 * = sha256(token + RequestTime), RequestTime within
 * tencent_im.callback.max_skew; SdkAppid = tencent_im.sdk_app_id when set).
 * A Login is a heartbeat of the uid in the room the presence projection
 * says it is in; a Logout sets its idle clock past room.member_idle_timeout
 * (the sweeper removes it at its next pass, as any idle member); a
 * Disconnect changes nothing (the timeout decides: networks flap). Another
 * node owns the room: the signed request goes to the owner unchanged. IM
 * ignores an after-event callback's answer; it gets
 * {"ActionStatus":"OK","ErrorCode":0,"ErrorInfo":""} once verified, also
 * when there was nothing to do.
 */
#include "http/router.h"
#include "http/tim_callback.h"

#include "conf/conf.h"
#include "core/log.h"
#include "core/secret.h"
#include "core/xmalloc.h"
#include "projection/projection.h"
#include "room/service.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TIM_OK "{\"ActionStatus\":\"OK\",\"ErrorCode\":0,\"ErrorInfo\":\"\"}"

/* The room the presence projection places uid in, into room (len bytes);
 * false when none (or the projection cannot tell). */
static bool
room_of_uid(const struct http_deps *d, const char *app, int64_t uid, char *room, size_t len)
{
    char *json = NULL;
    json_t *j;
    const char *r;
    bool ok = false;

    if (d->projection == NULL || d->projection->ops->presence(d->projection, app, uid, &json) != 0)
        return false;
    j = json != NULL ? json_loads(json, 0, NULL) : NULL;
    r = json_string_value(json_object_get(j, "room_id"));
    if (r != NULL && http_valid_room_id(r)) {
        strlcpy_(room, r, len);
        ok = true;
    }
    json_decref(j);
    free(json);
    return ok;
}

/* Only digits, letters and ".-_": the query values we send on unescaped. */
static bool
plain(const char *s)
{
    if (s == NULL)
        return false;
    for (; *s; s++)
        if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
              *s == '.' || *s == '-' || *s == '_'))
            return false;
    return true;
}

void
handle_tim_callback(const struct http_deps *d, const struct http_request *req,
                    struct http_response *resp)
{
    const struct conf_tencent_im *ti = &d->conf->tencent_im;
    const char *app = d->conf->app.default_app_code;
    const char *sdk = http_request_query(req, "SdkAppid");
    const char *rt = http_request_query(req, "RequestTime");
    const char *sign = http_request_query(req, "Sign");
    const char *command = http_request_query(req, "CallbackCommand");
    char token[SECRET_MAX], err[256], why[160], room[128], path[512];
    enum tim_state_action action;
    struct room_reply rr;
    int64_t uid;
    int rc;

    if (!ti->callback_enabled) {
        http_response_error(resp, 404, "not_found", "no route %s %s", req->method, req->path);
        return;
    }
    if (ti->sdk_app_id > 0) {
        char want[32];
        snprintf(want, sizeof(want), "%lld", (long long)ti->sdk_app_id);
        if (sdk == NULL || strcmp(sdk, want) != 0) {
            http_response_error(resp, 401, "unauthenticated",
                                "SdkAppid: not this node's tencent_im.sdk_app_id");
            return;
        }
    }
    if (secret_load("tencent_im.callback.token_env", ti->callback_token_env,
                    "tencent_im.callback.token_file", ti->callback_token_file, token, sizeof(token),
                    err, sizeof(err)) != 0) {
        log_warn("http", "IM callback refused: no token", "err=\"%s\"", err);
        http_response_error(resp, 503, "unavailable", "the callback token is not configured");
        return;
    }
    rc = tim_callback_verify(token, rt, sign, (int64_t)time(NULL), ti->callback_max_skew_ms / 1000,
                             why, sizeof(why));
    secret_wipe(token, sizeof(token));
    if (rc != 0) {
        log_warn("http", "IM callback refused", "peer=%s why=\"%s\"",
                 req->peer != NULL ? req->peer : "", why);
        http_response_error(resp, 401, "unauthenticated", "%s", why);
        return;
    }
    rc = tim_callback_parse_state(req->body, req->body_len, &action, &uid, err, sizeof(err));
    if (rc < 0) {
        http_response_field_error(resp, "invalid_argument", "body", err);
        return;
    }
    if (rc > 0 || (command != NULL && strcmp(command, "State.StateChange") != 0) ||
        action == TIM_STATE_OTHER || action == TIM_STATE_DISCONNECT ||
        !room_of_uid(d, app, uid, room, sizeof(room))) {
        http_response_take(resp, 200, xstrdup(TIM_OK)); /* nothing to do */
        return;
    }
    /* the owner verifies the same signed request itself */
    snprintf(path, sizeof(path),
             "/callbacks/tim?SdkAppid=%s&CallbackCommand=State.StateChange&RequestTime=%s&Sign=%s",
             plain(sdk) ? sdk : "", rt, sign);
    struct room_origin o = {
        .method = "POST",
        .path = path,
        .body = req->body,
        .body_len = req->body_len,
        .authorization = NULL,
        .forwarded = req->forwarded_by != NULL,
    };
    memset(&rr, 0, sizeof(rr));
    if (action == TIM_STATE_LOGIN)
        room_service_heartbeat(d->rooms, app, room, uid, &o, &rr);
    else
        room_service_presence_expire(d->rooms, app, room, uid, &o, &rr);
    log_info("http", "IM state change", "uid=%lld room=%s action=%s status=%d", (long long)uid,
             room, action == TIM_STATE_LOGIN ? "Login" : "Logout", rr.status);
    if (rr.status == 503) { /* the owner could not be reached: IM retries? say so */
        http_response_take(resp, 503, rr.body);
        rr.body = NULL;
    } else {
        http_response_take(resp, 200, xstrdup(TIM_OK));
    }
    room_reply_clear(&rr);
}
