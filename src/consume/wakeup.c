/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wakeup.c: the rocket wake-up's inbox key, shared by the rocket open group
 * (rocket_open.c) and the tests. The message itself is built by
 * publish/sink_rocket.c.
 */
#include "consume/handlers.h"

#include "core/err.h"
#include "room_events.pb-c.h"

#include <stdio.h>

int
consume_rocket_key(void *arg, const uint8_t *data, size_t len, char *key, size_t keylen)
{
    Roomd__V1__RocketLaunchWakeup *w = roomd__v1__rocket_launch_wakeup__unpack(NULL, len, data);
    int rc = 0;

    (void)arg;
    if (w == NULL || !w->app_code || !*w->app_code || !w->room_id || !*w->room_id ||
        !w->rocket_id || !*w->rocket_id)
        rc = ROOMD_EINVAL;
    else
        snprintf(key, keylen, "rocket-%s-%s-%s", w->app_code, w->room_id, w->rocket_id);
    if (w)
        roomd__v1__rocket_launch_wakeup__free_unpacked(w, NULL);
    return rc;
}
