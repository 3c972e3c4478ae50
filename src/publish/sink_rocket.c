/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sink_rocket.c: the rocket launch wake-up sink. For each RoomRocketIgnited
 * row it publishes a roomd.v1.RocketLaunchWakeup (app_code, room_id,
 * rocket_id, level, launch_at_ms, command_id = the ignition's
 * launch_command_id) to "<ns><rocket topic>.wakeup" with header Launch-At.
 * The group hyapp-room-rocket-open (consume/rocket_open.c) holds it until
 * launch_at_ms and sends LaunchRocket; the Room Cell re-validates.
 */
#include "publish/sink_bus.h"

#include "core/err.h"
#include "core/log.h"
#include "core/xmalloc.h"
#include "publish/bus.h"
#include "room_events.pb-c.h"
#include "store/store.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int
rocket_wakeup_build(const struct outbox_row *row, struct rocket_wakeup *out, char *err,
                    size_t errlen)
{
    Roomd__V1__RoomRocketIgnited *ig = NULL;
    Roomd__V1__RocketLaunchWakeup wk = ROOMD__V1__ROCKET_LAUNCH_WAKEUP__INIT;

    memset(out, 0, sizeof(*out));
    ig = roomd__v1__room_rocket_ignited__unpack(NULL, row->payload_len, row->payload);
    if (ig == NULL || ig->rocket_id == NULL || *ig->rocket_id == '\0') {
        snprintf(err, errlen, "RoomRocketIgnited payload does not decode");
        if (ig)
            roomd__v1__room_rocket_ignited__free_unpacked(ig, NULL);
        return ROOMD_EPERM;
    }
    wk.app_code = (char *)row->app_code;
    wk.room_id = (char *)row->room_id;
    wk.rocket_id = ig->rocket_id;
    wk.level = ig->level;
    wk.launch_at_ms = ig->launch_at_ms;
    wk.command_id = ig->launch_command_id;
    out->len = roomd__v1__rocket_launch_wakeup__get_packed_size(&wk);
    out->buf = xmalloc(out->len ? out->len : 1);
    roomd__v1__rocket_launch_wakeup__pack(&wk, out->buf);
    out->launch_at_ms = ig->launch_at_ms;
    out->level = ig->level;
    /* rocket_id alone is the room's business; the app and room make the
     * dedupe key unique across rooms whatever rocket ids look like. */
    out->msg_id = xasprintf("rocket-%s-%s-%s", row->app_code, row->room_id, ig->rocket_id);
    out->rocket_id = xstrdup(ig->rocket_id);
    roomd__v1__room_rocket_ignited__free_unpacked(ig, NULL);
    return 0;
}

void
rocket_wakeup_free(struct rocket_wakeup *w)
{
    free(w->buf);
    free(w->msg_id);
    free(w->rocket_id);
    memset(w, 0, sizeof(*w));
}

static int
rocket_publish(struct sink *s, const struct outbox_event *ev, int64_t deadline_mono_ms, char *err,
               size_t errlen)
{
    const struct outbox_row *row = ev->row;
    struct bus_message m = {.stream = BUS_STREAM_ROCKET, .token = "wakeup", .header = "Launch-At"};
    struct rocket_wakeup w;
    char at[32];
    bool dup = false;
    int rc = rocket_wakeup_build(row, &w, err, errlen);

    if (rc != 0)
        return rc;
    m.data = w.buf;
    m.len = w.len;
    snprintf(at, sizeof(at), "%" PRId64, w.launch_at_ms);
    m.header_value = at;
    m.msg_id = w.msg_id;
    rc = bus_publish(sink_bus_of(s), &m, deadline_mono_ms, &dup, NULL, err, errlen);
    if (rc == 0)
        log_info("bus", "rocket wake-up scheduled",
                 "app=%s room=%s rocket_id=%s level=%d launch_at_ms=%" PRId64 " duplicate=%d",
                 row->app_code, row->room_id, w.rocket_id, w.level, w.launch_at_ms, (int)dup);
    rocket_wakeup_free(&w);
    return rc;
}

int
sink_rocket_open(struct sink **out, struct bus *bus)
{
    *out = sink_bus_new(bus, "rocket", SINK_BIT_ROCKET, sink_accepts_carried, rocket_publish);
    return 0;
}
