/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sqlite/rooms.c: rooms read in bulk: ignited rockets (launch timer rebuild)
 * and the keyset-paged rooms list (projection rebuilds).
 */
#include "store/sqlite/internal.h"

#include "core/err.h"
#include "core/xmalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

SQ_SQL(ROCKETS, "SELECT app_code, room_id, rocket_id, rocket_level, rocket_launch_at_ms"
                " FROM rooms WHERE rocket_status = 'ignited'");
/* a range of the primary key: app_code >= ?1 bounds it, the OR filters */
SQ_SQL(ROOMS_LIST, "SELECT app_code, room_id, owner_uid, title, status, version, fence_token,"
                   " created_at_ms, updated_at_ms FROM rooms"
                   " WHERE app_code >= ?1 AND (app_code > ?1 OR room_id > ?2)"
                   " AND (?3 = 0 OR status = 'open') ORDER BY app_code, room_id LIMIT ?4");

int
sq_rockets_pending(struct store *st, struct rocket_pending **out, size_t *n)
{
    struct sq_all x = {sizeof(**out), store_rocket_cols, "rockets_pending", NULL, 0};

    return sq_read_list(st, &SQL_ROCKETS, NULL, &x, out, n);
}

int
sq_rooms_list(struct store *st, const char *after_app, const char *after_room, bool open_only,
              int limit, struct room_row **rows, size_t *n)
{
    struct sq_store *s = (struct sq_store *)st;
    struct conn *c = sq_reader_get(s);
    sqlite3_stmt *q =
        sq_bound(c, &SQL_ROOMS_LIST, "ssdd", after_app, after_room, open_only ? 1 : 0, limit);
    struct sq_all x = {sizeof(**rows), store_room_cols, "rooms_list", NULL, 0};
    int rc;

    rc = sq_read_all(c, q, &x);
    sq_reader_put(s, c);
    *rows = x.rows;
    *n = x.n;
    return rc;
}
