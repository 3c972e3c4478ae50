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

static void
read_rocket(const struct rows *r, void *out)
{
    struct rocket_pending *rp = out;

    memset(rp, 0, sizeof(*rp));
    strlcpy_(rp->app_code, r_str(r, 0), sizeof(rp->app_code));
    strlcpy_(rp->room_id, r_str(r, 1), sizeof(rp->room_id));
    strlcpy_(rp->rocket_id, r_str(r, 2), sizeof(rp->rocket_id));
    rp->level = (int)r_i64(r, 3);
    rp->launch_at_ms = r_i64(r, 4);
}

static void
free_rockets(void *rows, size_t n)
{
    (void)n;
    free(rows);
}

int
mys_rockets_pending(struct store *s, struct rocket_pending **out, size_t *n)
{
    struct all_ctx x = {&SQL_ROCKETS, "sssii",      {.n = 0}, sizeof(**out),
                        read_rocket,  free_rockets, NULL,     0};
    int rc = mys_read_all((struct mstore *)s, &x);

    *out = x.rows;
    *n = x.n;
    return rc;
}

static void
read_room_row(const struct rows *r, void *out)
{
    struct room_row *rr = out;
    const char *title = r_str(r, 3), *status = r_str(r, 4);

    memset(rr, 0, sizeof(*rr));
    strlcpy_(rr->app_code, r_str(r, 0), sizeof(rr->app_code));
    strlcpy_(rr->room_id, r_str(r, 1), sizeof(rr->room_id));
    rr->owner_uid = r_i64(r, 2);
    rr->title = xstrdup(title ? title : "");
    strlcpy_(rr->status, status ? status : "", sizeof(rr->status));
    rr->version = r_i64(r, 5);
    rr->fence_token = r_i64(r, 6);
    rr->created_at_ms = r_i64(r, 7);
    rr->updated_at_ms = r_i64(r, 8);
}

static void
free_room_rows(void *rows, size_t n)
{
    room_rows_free(rows, n);
}

int
mys_rooms_list(struct store *s, const char *after_app, const char *after_room, bool open_only,
               int limit, struct room_row **rows, size_t *n)
{
    struct all_ctx x = {&SQL_ROOMS_LIST, "ssissiiii",    {.n = 0}, sizeof(**rows),
                        read_room_row,   free_room_rows, NULL,     0};
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
