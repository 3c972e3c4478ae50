/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rocket_open.c: hyapp-room-rocket-open. Each wake-up
 * (roomd.v1.RocketLaunchWakeup, published by sink_rocket.c) is held with
 * NakWithDelay until launch_at_ms, then sent in-process as LaunchRocket with
 * the reserved command_id of its rocket (rocket_launch_command_id: the id a
 * wake-up carries from before the reserved namespace is not used). The Room Cell re-validates
 * status, rocket_id, level, launch_at_ms and the UTC day: a stale or repeated wake-up answers 409
 * rocket_stale (or a replay), which is success here. Every redelivery re-checks the clock, so a
 * restart or a lost Nak only delays, never skips.
 */
#include "consume/handlers.h"

#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "room/command.h"
#include "room/service.h"
#include "room_events.pb-c.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* How soon a wake-up the room's owner could not take is tried again. */
#define ROCKET_NOT_OWNER_RETRY_MS 250

static int
launch(struct room_service *rooms, const Roomd__V1__RocketLaunchWakeup *w, struct consume_msg *m)
{
    struct room_cmd cmd;
    struct cmd_error ce;
    struct room_reply reply = {0};
    char body[512], cid[STORE_ID_MAX];
    int rc;

    memset(&cmd, 0, sizeof(cmd));
    memset(&ce, 0, sizeof(ce));
    rocket_launch_command_id(w->rocket_id, cid, sizeof(cid));
    int n = snprintf(body, sizeof(body),
                     "{\"command_id\":\"%s\",\"rocket_id\":\"%s\",\"level\":%d,"
                     "\"launch_at_ms\":%" PRId64 "}",
                     cid, w->rocket_id, w->level, w->launch_at_ms);
    if (n < 0 || (size_t)n >= sizeof(body) || strpbrk(w->rocket_id, "\"\\")) {
        snprintf(m->err, sizeof(m->err), "wake-up fields do not fit a command");
        return ROOMD_EPERM;
    }
    rc = room_cmd_parse(CMD_LAUNCH_ROCKET, w->app_code, w->room_id, body, (size_t)n, &cmd, &ce);
    if (rc != 0) {
        snprintf(m->err, sizeof(m->err), "LaunchRocket refused: %s: %s", ce.field, ce.message);
        return ROOMD_EPERM;
    }
    /* Another node may own the room: the service forwards the launch there
     * (cluster.forward), as it would an HTTP request. */
    char path[160];
    snprintf(path, sizeof(path), "/internal/v1/rooms/%s/rocket/launch", w->room_id);
    struct room_origin origin = {
        .method = "POST", .path = path, .body = body, .body_len = (size_t)n};
    room_service_execute_from(rooms, &cmd, &origin, &reply);
    room_cmd_clear(&cmd);

    int st = reply.status;
    if (st == 200 || st == 404 || st == 409) {
        /* Launched, replayed, or stale/closed/unknown room: all settled. */
        log_info("consume", "rocket wake-up handled",
                 "app=%s room=%s rocket_id=%s level=%d launch_at_ms=%" PRId64
                 " status=%d late_ms=%" PRId64 " replay=%d",
                 w->app_code, w->room_id, w->rocket_id, w->level, w->launch_at_ms, st,
                 clock_wall_ms() - w->launch_at_ms, (int)reply.replay);
        rc = 0;
    } else if (st == 503) {
        /* not_owner (the owner could not be reached), fenced, or the lease or
         * store briefly unavailable: the room has (or will have) an owner, so
         * try again within a second, without counting a failure. */
        log_info("consume", "rocket wake-up not launched yet, again shortly",
                 "app=%s room=%s rocket_id=%s owner=%s", w->app_code, w->room_id, w->rocket_id,
                 reply.owner[0] ? reply.owner : "-");
        m->hold_ms = ROCKET_NOT_OWNER_RETRY_MS;
        rc = 0;
    } else if (st >= 500 || st == 429) {
        snprintf(m->err, sizeof(m->err), "LaunchRocket answered %d", st);
        rc = ROOMD_ERETRY;
    } else {
        snprintf(m->err, sizeof(m->err), "LaunchRocket answered %d", st);
        rc = ROOMD_EPERM;
    }
    room_reply_clear(&reply);
    return rc;
}

static int
rocket_handle(void *arg, struct consume_msg *m)
{
    struct room_service *rooms = arg;
    Roomd__V1__RocketLaunchWakeup *w =
        roomd__v1__rocket_launch_wakeup__unpack(NULL, m->len, m->data);
    int rc;

    if (w == NULL || !w->command_id || !*w->command_id) {
        snprintf(m->err, sizeof(m->err), "wake-up does not decode");
        rc = ROOMD_EPERM;
        goto out;
    }
    int64_t now = clock_wall_ms();
    if (now < w->launch_at_ms) {
        /* Not yet: park it on the broker until launch_at_ms. */
        m->hold_ms = w->launch_at_ms - now;
        rc = 0;
        goto out;
    }
    rc = launch(rooms, w, m);
out:
    if (w)
        roomd__v1__rocket_launch_wakeup__free_unpacked(w, NULL);
    return rc;
}

void
consume_rocket_open_handler(struct consume_handler *h, const char *group,
                            struct room_service *rooms)
{
    memset(h, 0, sizeof(*h));
    h->group = group && *group ? group : "hyapp-room-rocket-open";
    h->stream = BUS_STREAM_ROCKET;
    h->holds = true;
    h->key = consume_rocket_key;
    h->handle = rocket_handle;
    h->arg = rooms;
}
