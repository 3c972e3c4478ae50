/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rebuild.c: the projection rebuild from the store (rebuild.h).
 *
 * Source of truth: the projection needs each open room's members (online
 * count, presence) and gift total, which only the room state holds, so each
 * open room is loaded as a cell would load it (store_load_room: the latest
 * snapshot + the log tail, replayed by room_load_state) but read-only,
 * without a cell or a lease. Rooms are listed with store_rooms_list in keyset
 * pages; each app is rebuilt on its own (projection_rebuild clears that app
 * first), and its rooms are listed only after that clear, so every state fed
 * in is at least as new as any live update the clear wiped; live updates that
 * race with the rebuild are ordered by version inside the projection.
 * "Recent gifts" restart from zero for rebuilt rooms (the hour buckets are
 * not in the state).
 */
#include "room/rebuild.h"

#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/thread.h"
#include "core/xmalloc.h"
#include "projection/projection.h"
#include "room/cell.h"
#include "store/store.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PAGE 200
#define POLL_MS 1000       /* how often the thread asks rebuild_begin */
#define RETRY_MAX_MS 30000 /* backoff cap after a failed rebuild */

/* ---- one rebuild -------------------------------------------------------------------- */

/* The projection_next_fn source: the open rooms of one app, page by page. */
struct feed {
    const struct conf *conf;
    struct store *store;
    const atomic_bool *stop;
    char app[STORE_ID_MAX];      /* the app being rebuilt */
    char after[STORE_ID_MAX];    /* the last room_id of app listed */
    char next_app[STORE_ID_MAX]; /* the app after this one; "" when none */
    struct room_row *rows;       /* the current page */
    size_t n, i;
    bool last_page;        /* the current page is the last one */
    struct proj_room proj; /* yielded; cleared at the next call */
    size_t rooms, skipped;
};

static void
feed_reset(struct feed *f, const char *app)
{
    room_rows_free(f->rows, f->n);
    f->rows = NULL;
    f->n = f->i = 0;
    f->last_page = false;
    strlcpy_(f->app, app, sizeof(f->app));
    f->after[0] = '\0';
    f->next_app[0] = '\0';
}

static int
feed_next(void *arg, const struct proj_room **out)
{
    struct feed *f = arg;
    struct room_state *st = NULL;
    struct room_load l;
    char err[256];
    int rc;

    proj_room_clear(&f->proj);
    for (;;) {
        if (f->stop != NULL && atomic_load(f->stop))
            return ROOMD_ERETRY;
        if (f->i == f->n) {
            if (f->last_page)
                return 0;
            room_rows_free(f->rows, f->n);
            f->rows = NULL;
            f->n = f->i = 0;
            rc = store_rooms_list(f->store, f->app, f->after, true, PAGE, &f->rows, &f->n);
            if (rc != 0)
                return rc;
            f->last_page = f->n < PAGE;
            if (f->n == 0)
                return 0;
        }
        const struct room_row *r = &f->rows[f->i++];
        if (strcmp(r->app_code, f->app) != 0) {
            /* the listing crossed into the next app: this one is done */
            strlcpy_(f->next_app, r->app_code, sizeof(f->next_app));
            f->last_page = true;
            f->i = f->n;
            return 0;
        }
        strlcpy_(f->after, r->room_id, sizeof(f->after));
        memset(&l, 0, sizeof(l));
        rc = store_load_room(f->store, f->app, r->room_id, &l);
        if (rc == ROOMD_ENOTFOUND)
            continue;
        if (rc != 0)
            return rc;
        rc = room_load_state(&l, f->app, r->room_id, &f->conf->room, &st, err, sizeof(err));
        room_load_clear(&l);
        if (rc != 0) {
            log_error("projection", "rebuild: room does not replay, left out",
                      "app=%s room=%s "
                      "err=\"%s\"",
                      f->app, r->room_id, err);
            f->skipped++;
            continue;
        }
        f->rooms++;
        room_state_project(st, &f->proj);
        room_state_free(st);
        *out = &f->proj;
        return 1;
    }
}

int
room_rebuild_projection(const struct conf *conf, struct store *store, struct projection *p,
                        const atomic_bool *stop, struct rebuild_stats *stats)
{
    struct feed f;
    int rc;

    memset(&f, 0, sizeof(f));
    memset(stats, 0, sizeof(*stats));
    f.conf = conf;
    f.store = store;
    f.stop = stop;
    /* the first app with an open room */
    rc = store_rooms_list(store, "", "", true, 1, &f.rows, &f.n);
    if (rc == 0 && f.n == 1)
        strlcpy_(f.next_app, f.rows[0].app_code, sizeof(f.next_app));
    while (rc == 0 && f.next_app[0] != '\0') {
        char app[STORE_ID_MAX];

        strlcpy_(app, f.next_app, sizeof(app));
        feed_reset(&f, app);
        rc = projection_rebuild(p, app, feed_next, &f);
        if (rc == 0)
            stats->apps++;
    }
    stats->rooms = f.rooms;
    stats->skipped = f.skipped;
    proj_room_clear(&f.proj);
    room_rows_free(f.rows, f.n);
    return rc;
}

/* ---- the thread ------------------------------------------------------------------- */

struct room_rebuild {
    const struct conf *conf;
    struct store *store;
    struct projection *p;
    struct bg_thread th;
};

static void *
rebuild_main(void *arg)
{
    struct room_rebuild *rb = arg;
    int64_t wait = 0, backoff = POLL_MS;

    while (!bg_thread_sleep(&rb->th, wait)) {
        int go = rb->p->ops->rebuild_begin(rb->p);
        wait = POLL_MS;
        if (go != 1)
            continue; /* nothing to do, or the projection cannot tell yet */

        struct rebuild_stats st;
        int64_t t0 = clock_mono_ms();
        int rc = room_rebuild_projection(rb->conf, rb->store, rb->p, &rb->th.stop, &st);
        rb->p->ops->rebuild_end(rb->p, rc == 0);
        if (rc == 0) {
            log_info("projection", "rebuilt from the store",
                     "apps=%zu rooms=%zu skipped=%zu "
                     "ms=%lld",
                     st.apps, st.rooms, st.skipped, (long long)(clock_mono_ms() - t0));
            backoff = POLL_MS;
        } else if (!bg_thread_stopping(&rb->th)) {
            log_warn("projection", "rebuild failed, retrying", "rc=%s err=\"%s\" retry_ms=%lld",
                     roomd_strerror(rc), store_errmsg(), (long long)backoff);
            wait = backoff;
            backoff = backoff * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : backoff * 2;
        }
    }
    return NULL;
}

int
room_rebuild_start(struct room_rebuild **out, const struct conf *conf, struct store *store,
                   struct projection *p)
{
    struct room_rebuild *rb = xcalloc(1, sizeof(*rb));

    rb->conf = conf;
    rb->store = store;
    rb->p = p;
    *out = bg_thread_start_owner(&rb->th, rebuild_main, rb);
    return *out != NULL ? 0 : ROOMD_EINTERNAL;
}

void
room_rebuild_stop(struct room_rebuild *rb)
{
    if (rb != NULL)
        bg_thread_stop_free(&rb->th, rb);
}
