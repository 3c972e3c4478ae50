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

static const struct mys_sql SQL_ROCKETS = {
    S_ROCKETS, "SELECT app_code, room_id, rocket_id, rocket_level, rocket_launch_at_ms"
               " FROM rooms WHERE rocket_status='ignited' ORDER BY app_code, room_id"};
/* a range of the primary key: app_code>=? bounds it, the OR filters */
static const struct mys_sql SQL_ROOMS_LIST = {
    S_ROOMS_LIST, "SELECT app_code, room_id, owner_uid, title, status, version, fence_token,"
                  " created_at_ms, updated_at_ms FROM rooms"
                  " WHERE app_code>=? AND (app_code>? OR room_id>?)"
                  " AND (?=0 OR status='open') ORDER BY app_code, room_id LIMIT ?"};

static void
read_rocket(const struct rows *r, struct rocket_pending *rp)
{
    memset(rp, 0, sizeof(*rp));
    strlcpy_(rp->app_code, r_str(r, 0), sizeof(rp->app_code));
    strlcpy_(rp->room_id, r_str(r, 1), sizeof(rp->room_id));
    strlcpy_(rp->rocket_id, r_str(r, 2), sizeof(rp->rocket_id));
    rp->level = (int)r_i64(r, 3);
    rp->launch_at_ms = r_i64(r, 4);
}

struct rockets_ctx {
    struct rocket_pending *out;
    size_t n;
};

static int
rockets_fn(struct conn *c, void *arg)
{
    struct rockets_ctx *x = arg;
    struct params p = {0};
    struct rows r;
    size_t cap = 0;
    int rc;

    free(x->out);
    x->out = NULL;
    x->n = 0;
    if ((rc = mys_st_query(c, &SQL_ROCKETS, &p, &r, "sssii")) == 0) {
        while ((rc = mys_st_fetch(c, &r)) == 1) {
            x->out = xgrow(x->out, x->n, &cap, sizeof(*x->out));
            read_rocket(&r, &x->out[x->n++]);
        }
    }
    mys_rows_done(&r);
    return rc;
}

int
mys_rockets_pending(struct store *s, struct rocket_pending **out, size_t *n)
{
    struct rockets_ctx x = {NULL, 0};
    int rc = mys_run((struct mstore *)s, rockets_fn, &x);

    if (rc != 0) {
        free(x.out);
        x.out = NULL;
        x.n = 0;
    }
    *out = x.out;
    *n = x.n;
    return rc;
}

static void
read_room_row(const struct rows *r, struct room_row *rr)
{
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

struct rooms_list_ctx {
    const char *after_app, *after_room;
    bool open_only;
    int limit;
    struct room_row *rows;
    size_t n;
};

static int
rooms_list_fn(struct conn *c, void *arg)
{
    struct rooms_list_ctx *x = arg;
    struct params p = {0};
    struct rows r;
    size_t cap = 0;
    int rc;

    room_rows_free(x->rows, x->n);
    x->rows = NULL;
    x->n = 0;
    p_str(&p, x->after_app);
    p_str(&p, x->after_app);
    p_str(&p, x->after_room);
    p_i64(&p, x->open_only ? 1 : 0);
    p_i64(&p, x->limit);
    if ((rc = mys_st_query(c, &SQL_ROOMS_LIST, &p, &r, "ssissiiii")) == 0) {
        while ((rc = mys_st_fetch(c, &r)) == 1) {
            x->rows = xgrow(x->rows, x->n, &cap, sizeof(*x->rows));
            read_room_row(&r, &x->rows[x->n++]);
        }
    }
    mys_rows_done(&r);
    return rc;
}

int
mys_rooms_list(struct store *s, const char *after_app, const char *after_room, bool open_only,
               int limit, struct room_row **rows, size_t *n)
{
    struct rooms_list_ctx x = {after_app, after_room, open_only, limit, NULL, 0};
    int rc = mys_run((struct mstore *)s, rooms_list_fn, &x);

    if (rc != 0) {
        room_rows_free(x.rows, x.n);
        x.rows = NULL;
        x.n = 0;
    }
    *rows = x.rows;
    *n = x.n;
    return rc;
}
