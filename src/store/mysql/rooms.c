/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mysql/rooms.c: rooms read in bulk: ignited rockets (launch timer rebuild)
 * and the keyset-paged rooms list (projection rebuilds).
 */
#include "store/mysql/internal.h"

#include "core/err.h"
#include "core/xmalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

MYS_SQL(ROCKETS, "SELECT app_code, room_id, rocket_id, rocket_level, rocket_launch_at_ms"
                 " FROM rooms WHERE rocket_status='ignited' ORDER BY app_code, room_id");
/* a range of the primary key: app_code>=? bounds it, the OR filters */
MYS_SQL(ROOMS_LIST, "SELECT app_code, room_id, owner_uid, title, status, version, fence_token,"
                    " created_at_ms, updated_at_ms FROM rooms"
                    " WHERE app_code>=? AND (app_code>? OR room_id>?)"
                    " AND (?=0 OR status='open') ORDER BY app_code, room_id LIMIT ?");

int
mys_rockets_pending(struct store *s, struct rocket_pending **out, size_t *n)
{
    struct all_ctx x = {&SQL_ROCKETS, "sssii", {.n = 0}, sizeof(**out), store_rocket_cols, NULL, 0};
    int rc = mys_read_all((struct mstore *)s, &x);

    *out = x.rows;
    *n = x.n;
    return rc;
}

int
mys_rooms_list(struct store *s, const char *after_app, const char *after_room, bool open_only,
               int limit, struct room_row **rows, size_t *n)
{
    struct all_ctx x = {&SQL_ROOMS_LIST, "ssissiiii", {.n = 0}, sizeof(**rows),
                        store_room_cols, NULL,        0};
    int rc;

    p_str(&x.p, after_app);
    p_str(&x.p, after_app);
    p_str(&x.p, after_room);
    p_i64(&x.p, open_only ? 1 : 0);
    p_i64(&x.p, limit);
    rc = mys_read_all((struct mstore *)s, &x);
    *rows = x.rows;
    *n = x.n;
    return rc;
}
