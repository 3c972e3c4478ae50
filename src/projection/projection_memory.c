/* SPDX-License-Identifier: Apache-2.0 */
/*
 * projection_memory.c: the one-node projection (projection.h): the room list
 * and presence in this process, two tsearch trees behind one mutex. Same
 * answers as projection_redis.c; ranking and JSON in proj_room.c.
 */
#include "projection/projection.h"

#include "conf/conf.h"
#include "core/err.h"
#include "core/xmalloc.h"
#include "projection/proj_room.h"

#include <pthread.h>
#include <search.h>
#include <stdlib.h>
#include <string.h>

int projection_memory_open(struct projection **out, const struct conf *conf, char *err,
                           size_t errlen);

struct mroom {
    struct proj_room r; /* uids = current members */
    int64_t gift_bucket, gift_cur, gift_prev;
};

struct mpres {
    char app[PROJ_ID_MAX];
    int64_t uid;
    char room_id[PROJ_ID_MAX];
    int64_t since_ms;
};

struct projection_memory {
    struct projection base;
    pthread_mutex_t mu;
    bool built;      /* a rebuild from the store completed */
    bool rebuilding; /* between rebuild_begin (1) and rebuild_end */
    void *rooms;     /* struct mroom by (app, room_id) */
    void *presence;  /* struct mpres by (app, uid) */
};

static int
room_cmp(const void *a, const void *b)
{
    const struct mroom *x = a, *y = b;
    int c = strcmp(x->r.app, y->r.app);

    return c ? c : strcmp(x->r.room_id, y->r.room_id);
}

static int
pres_cmp(const void *a, const void *b)
{
    const struct mpres *x = a, *y = b;
    int c = strcmp(x->app, y->app);

    return c ? c : (x->uid > y->uid) - (x->uid < y->uid);
}

static void
mroom_free(void *p)
{
    struct mroom *m = p;

    proj_room_clear(&m->r);
    free(m);
}

static struct mpres *
pres_find(struct projection_memory *pm, const char *app, int64_t uid)
{
    struct mpres probe;
    void *n;

    strlcpy_(probe.app, app, sizeof(probe.app));
    probe.uid = uid;
    n = tfind(&probe, &pm->presence, pres_cmp);
    return n ? *(struct mpres **)n : NULL;
}

static int
has_uid(const struct proj_room *r, int64_t uid)
{
    for (size_t i = 0; i < r->nuids; i++)
        if (r->uids[i] == uid)
            return 1;
    return 0;
}

/* Applies one reduced state; caller holds mu. */
static void
apply(struct projection_memory *pm, const struct proj_room *nr)
{
    struct mroom probe, *m;
    void *n;
    bool fresh = false;

    memset(&probe, 0, sizeof(probe));
    strlcpy_(probe.r.app, nr->app, sizeof(probe.r.app));
    strlcpy_(probe.r.room_id, nr->room_id, sizeof(probe.r.room_id));
    n = tfind(&probe, &pm->rooms, room_cmp);
    if (n == NULL) {
        m = xcalloc(1, sizeof(*m));
        strlcpy_(m->r.app, nr->app, sizeof(m->r.app));
        strlcpy_(m->r.room_id, nr->room_id, sizeof(m->r.room_id));
        tsearch(m, &pm->rooms, room_cmp);
        fresh = true;
    } else {
        m = *(struct mroom **)n;
        if (nr->version <= m->r.version)
            return; /* older than what is shown: a late update */
    }
    /* gifts seen for the first time have no known hour: not "recent" */
    int64_t delta = fresh ? 0 : nr->gift_total - m->r.gift_total;
    proj_gift_buckets(nr->updated_at_ms / PROJ_HOUR_MS, delta, &m->gift_bucket, &m->gift_cur,
                      &m->gift_prev);

    /* presence: who left points nowhere (unless already elsewhere); who joined points here */
    for (size_t i = 0; i < m->r.nuids; i++) {
        if (has_uid(nr, m->r.uids[i]))
            continue;
        struct mpres *p = pres_find(pm, nr->app, m->r.uids[i]);
        if (p != NULL && strcmp(p->room_id, nr->room_id) == 0) {
            tdelete(p, &pm->presence, pres_cmp);
            free(p);
        }
    }
    for (size_t i = 0; i < nr->nuids; i++) {
        if (!fresh && has_uid(&m->r, nr->uids[i]))
            continue;
        struct mpres *p = pres_find(pm, nr->app, nr->uids[i]);
        if (p == NULL) {
            p = xcalloc(1, sizeof(*p));
            strlcpy_(p->app, nr->app, sizeof(p->app));
            p->uid = nr->uids[i];
            tsearch(p, &pm->presence, pres_cmp);
        }
        strlcpy_(p->room_id, nr->room_id, sizeof(p->room_id));
        p->since_ms = nr->joined_ms[i];
    }
    proj_room_clear(&m->r);
    proj_room_copy(&m->r, nr);
}

static int
mem_update(struct projection *p, const struct proj_room *r)
{
    struct projection_memory *pm = (struct projection_memory *)p;

    pthread_mutex_lock(&pm->mu);
    apply(pm, r);
    pthread_mutex_unlock(&pm->mu);
    return 0;
}

/* ==== Listing ==== */

struct collect {
    const char *app;
    struct mroom **v;
    size_t n, cap;
};

static void
collect_room(const void *nodep, VISIT which, void *arg)
{
    struct collect *c = arg;
    struct mroom *m = *(struct mroom *const *)nodep;

    if (which != postorder && which != leaf)
        return;
    if (m->r.closed || strcmp(m->r.app, c->app) != 0)
        return;
    c->v = xgrow(c->v, c->n, &c->cap, sizeof(*c->v));
    c->v[c->n++] = m;
}

static int
rank_cmp(const void *a, const void *b)
{
    const struct mroom *x = *(struct mroom *const *)a, *y = *(struct mroom *const *)b;
    double sx = proj_score(x->r.online, x->gift_cur + x->gift_prev);
    double sy = proj_score(y->r.online, y->gift_cur + y->gift_prev);

    if (sx != sy)
        return sx < sy ? 1 : -1;
    return -strcmp(x->r.room_id, y->r.room_id);
}

static int
mem_list_rooms(struct projection *p, const char *app, int64_t cursor, int limit, char **json)
{
    struct projection_memory *pm = (struct projection_memory *)p;
    struct collect c = {.app = app};
    json_t *rooms = json_array();
    int64_t next = -1;

    proj_clamp_page(&cursor, &limit);
    pthread_mutex_lock(&pm->mu);
    twalk_r(pm->rooms, collect_room, &c);
    if (c.n > 1)
        qsort(c.v, c.n, sizeof(*c.v), rank_cmp);
    for (size_t i = (size_t)cursor; i < c.n && i < (size_t)cursor + (size_t)limit; i++) {
        const struct mroom *m = c.v[i];
        json_array_append_new(rooms,
                              proj_entry_json(m->r.room_id, m->r.title, m->r.owner_uid, m->r.online,
                                              m->gift_cur + m->gift_prev, m->r.gift_total,
                                              m->r.version, m->r.updated_at_ms));
    }
    if ((size_t)cursor + (size_t)limit < c.n)
        next = cursor + limit;
    pthread_mutex_unlock(&pm->mu);
    free(c.v);
    *json = proj_page_json(rooms, next);
    return 0;
}

static int
mem_presence(struct projection *p, const char *app, int64_t uid, char **json)
{
    struct projection_memory *pm = (struct projection_memory *)p;

    pthread_mutex_lock(&pm->mu);
    struct mpres *pr = pres_find(pm, app, uid);
    *json = proj_presence_json(uid, pr ? pr->room_id : NULL, pr ? pr->since_ms : 0);
    pthread_mutex_unlock(&pm->mu);
    return 0;
}

/* ==== Clear, close ==== */

struct victims {
    const char *app;
    void **v;
    size_t n, cap;
    int rooms; /* 1: collecting mroom, 0: mpres */
};

static void
collect_app(const void *nodep, VISIT which, void *arg)
{
    struct victims *c = arg;
    void *e = *(void *const *)nodep;
    const char *app = c->rooms ? ((struct mroom *)e)->r.app : ((struct mpres *)e)->app;

    if ((which != postorder && which != leaf) || strcmp(app, c->app) != 0)
        return;
    c->v = xgrow(c->v, c->n, &c->cap, sizeof(*c->v));
    c->v[c->n++] = e;
}

static int
mem_clear(struct projection *p, const char *app)
{
    struct projection_memory *pm = (struct projection_memory *)p;
    struct victims r = {.app = app, .rooms = 1}, u = {.app = app, .rooms = 0};

    pthread_mutex_lock(&pm->mu);
    twalk_r(pm->rooms, collect_app, &r);
    twalk_r(pm->presence, collect_app, &u);
    for (size_t i = 0; i < r.n; i++) {
        tdelete(r.v[i], &pm->rooms, room_cmp);
        mroom_free(r.v[i]);
    }
    for (size_t i = 0; i < u.n; i++) {
        tdelete(u.v[i], &pm->presence, pres_cmp);
        free(u.v[i]);
    }
    pthread_mutex_unlock(&pm->mu);
    free(r.v);
    free(u.v);
    return 0;
}

/* Empty after open: the first caller rebuilds it, once. */
static int
mem_rebuild_begin(struct projection *p)
{
    struct projection_memory *pm = (struct projection_memory *)p;
    int go;

    pthread_mutex_lock(&pm->mu);
    go = !pm->built && !pm->rebuilding;
    if (go)
        pm->rebuilding = true;
    pthread_mutex_unlock(&pm->mu);
    return go;
}

static void
mem_rebuild_end(struct projection *p, bool ok)
{
    struct projection_memory *pm = (struct projection_memory *)p;

    pthread_mutex_lock(&pm->mu);
    pm->rebuilding = false;
    pm->built = ok;
    pthread_mutex_unlock(&pm->mu);
}

static void
mem_close(struct projection *p)
{
    struct projection_memory *pm = (struct projection_memory *)p;

    tdestroy(pm->rooms, mroom_free);
    tdestroy(pm->presence, free);
    pthread_mutex_destroy(&pm->mu);
    free(pm);
}

#define MEM_OP(op) .op = mem_##op,
static const struct projection_ops memory_ops = {PROJECTION_OPS(MEM_OP)};
#undef MEM_OP

int
projection_memory_open(struct projection **out, const struct conf *conf, char *err, size_t errlen)
{
    struct projection_memory *pm = xcalloc(1, sizeof(*pm));

    pm->base.ops = &memory_ops;
    pthread_mutex_init(&pm->mu, NULL);
    *out = &pm->base;
    return 0;
}
