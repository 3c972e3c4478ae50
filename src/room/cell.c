/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cell.c: the Room Cells (see cell.h): the map, the FIFO ticket lock of
 * each cell, loading a room (lease, snapshot + replay of the log tail,
 * room_load_state) and the idle-eviction thread.
 *
 * Locking: the map mutex guards the hash chains and each cell's refs and
 * last_used_ms; a cell's own mutex guards only its tickets. Everything else
 * in a cell belongs to the ticket holder. A cell with refs == 0 has neither
 * holder nor waiter, and nobody can take a ref without the map mutex, so
 * eviction may unlink and free it.
 */
#include "room/cell.h"

#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/thread.h"
#include "core/xmalloc.h"
#include "lease/lease.h"
#include "room/command.h"
#include "room/presence.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cell_map {
    const struct conf *conf;
    struct store *store;
    struct lease *lease;
    pthread_mutex_t mu;
    struct cell **buckets;
    size_t nbuckets; /* power of two */
    size_t count;
    struct bg_thread evictor; /* zeroed while room.idle_evict_ms is 0 */
};

/* ---- replay ------------------------------------------------------------------------ */

int
room_load_state(const struct room_load *l, const char *app, const char *room_id,
                const struct conf_room *rc, struct room_state **out, char *err, size_t errlen)
{
    struct room_state *s = NULL;
    int rc_ = ROOMD_EINTERNAL;

    *out = NULL;
    if (l->snapshot != NULL) {
        if (room_state_from_json(l->snapshot, &s) != 0) {
            snprintf(err, errlen, "snapshot v%lld does not parse", (long long)l->snapshot_version);
            goto out;
        }
        if (s->version != l->snapshot_version) {
            snprintf(err, errlen, "snapshot holds v%lld, row says v%lld", (long long)s->version,
                     (long long)l->snapshot_version);
            goto out;
        }
    } else {
        s = room_state_new(app, room_id);
    }
    for (size_t i = 0; i < l->ntail; i++) {
        const struct command_record *r = &l->tail[i];
        int type = room_cmd_parse_name(r->command_type ? r->command_type : "");
        struct room_cmd cmd;
        struct cmd_error ce;
        struct room_events ev = {0};
        struct apply_error ae;
        int a;

        if (type < 0 || room_cmd_parse_logged((enum room_cmd_type)type, app, room_id, r->request,
                                              &cmd, &ce) != 0) {
            snprintf(err, errlen, "log v%lld (%s): request does not parse", (long long)r->version,
                     r->command_id);
            goto out;
        }
        a = room_apply(s, &cmd, r->created_at_ms, rc, &ev, &ae);
        room_events_clear(&ev);
        room_cmd_clear(&cmd);
        if (a != 0) {
            snprintf(err, errlen, "log v%lld (%s): replay refused: %s", (long long)r->version,
                     r->command_id, ae.message);
            goto out;
        }
        if (s->version != r->version) {
            snprintf(err, errlen, "log v%lld (%s): replay reached v%lld", (long long)r->version,
                     r->command_id, (long long)s->version);
            goto out;
        }
    }
    if (s->version != l->version) {
        snprintf(err, errlen, "replay reached v%lld, the room is at v%lld", (long long)s->version,
                 (long long)l->version);
        goto out;
    }
    *out = s;
    s = NULL;
    rc_ = 0;
out:
    room_state_free(s);
    return rc_;
}

/* ---- the map ------------------------------------------------------------------------ */

static uint32_t
key_hash(const char *app, const char *room_id)
{
    uint32_t h = 2166136261u;

    for (const char *p = app; *p; p++)
        h = (h ^ (uint8_t)*p) * 16777619u;
    h = (h ^ 0xff) * 16777619u;
    for (const char *p = room_id; *p; p++)
        h = (h ^ (uint8_t)*p) * 16777619u;
    return h;
}

static struct cell **
slot_of(struct cell_map *m, const char *app, const char *room_id, uint32_t h)
{
    struct cell **pp = &m->buckets[h & (m->nbuckets - 1)];

    while (*pp != NULL && ((*pp)->hash != h || strcmp((*pp)->app, app) != 0 ||
                           strcmp((*pp)->room_id, room_id) != 0))
        pp = &(*pp)->next;
    return pp;
}

static void
grow(struct cell_map *m)
{
    size_t n = m->nbuckets * 2;
    struct cell **b = xcalloc(n, sizeof(*b));

    for (size_t i = 0; i < m->nbuckets; i++) {
        struct cell *c = m->buckets[i], *next;
        for (; c != NULL; c = next) {
            next = c->next;
            c->next = b[c->hash & (n - 1)];
            b[c->hash & (n - 1)] = c;
        }
    }
    free(m->buckets);
    m->buckets = b;
    m->nbuckets = n;
}

static void
unlink_cell(struct cell_map *m, struct cell *c)
{
    struct cell **pp = slot_of(m, c->app, c->room_id, c->hash);

    if (*pp == c) {
        *pp = c->next;
        m->count--;
    }
}

/* Frees an unlinked cell, giving its lease back. */
static void
destroy_cell(struct cell_map *m, struct cell *c)
{
    if (c->leased && m->lease != NULL)
        m->lease->ops->release(m->lease, c->app, c->room_id, c->lease_token);
    room_state_free(c->state);
    free(c->pres);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
}

/* ---- loading ----------------------------------------------------------------------- */

/* Makes sure the lease is held (renewing it every lease.renew_every_ms) and
 * the state loaded. Called by the ticket holder. */
static int
ensure_loaded(struct cell_map *m, struct cell *c, char *owner, size_t ownerlen)
{
    const struct conf *conf = m->conf;
    int64_t now = clock_mono_ms(), token = 0;
    struct room_load l;
    char err[512];
    int rc;

    if (m->lease != NULL && (!c->loaded || conf->lease.renew_every_ms <= 0 ||
                             now - c->lease_at_ms >= conf->lease.renew_every_ms)) {
        rc = m->lease->ops->acquire(m->lease, c->app, c->room_id, &token, owner, ownerlen);
        if (rc != 0) {
            /* not ours (any more): forget what we had, idle clocks too */
            pthread_mutex_lock(&m->mu);
            presence_clear_locked(c);
            pthread_mutex_unlock(&m->mu);
            room_state_free(c->state);
            c->state = NULL;
            c->loaded = false;
            c->leased = false;
            return rc;
        }
        if (c->loaded && token != c->lease_token) {
            /* we lost the lease in between: someone else may have committed */
            room_state_free(c->state);
            c->state = NULL;
            c->loaded = false;
        }
        c->leased = true;
        c->lease_token = token;
        c->lease_at_ms = now;
        pthread_mutex_lock(&m->mu);
        c->pres_fresh_until_ms =
            conf->lease.renew_every_ms > 0 ? now + conf->lease.renew_every_ms : now;
        pthread_mutex_unlock(&m->mu);
    } else if (m->lease == NULL) {
        pthread_mutex_lock(&m->mu);
        c->pres_fresh_until_ms = INT64_MAX; /* one node: always the owner */
        pthread_mutex_unlock(&m->mu);
    }
    if (c->loaded)
        return 0;

    /* A lease token (Redis lease): claim the room's fence before loading, so
     * a former owner (paused past its lease) can no longer commit from now
     * on, and the state loaded below is the last it can ever have written. */
    if (c->leased && c->lease_token > 0) {
        rc = store_fence_room(m->store, c->app, c->room_id, c->lease_token);
        if (rc != 0) {
            log_warn("room", "fence claim failed", "app=%s room=%s token=%lld rc=%s err=\"%s\"",
                     c->app, c->room_id, (long long)c->lease_token, roomd_strerror(rc),
                     store_errmsg());
            return rc;
        }
    }
    memset(&l, 0, sizeof(l));
    rc = store_load_room(m->store, c->app, c->room_id, &l);
    if (rc == ROOMD_ENOTFOUND) {
        c->state = NULL;
        c->event_seq = 0;
        c->loaded = true;
        pthread_mutex_lock(&m->mu);
        presence_reset_locked(c, NULL, clock_mono_ms());
        pthread_mutex_unlock(&m->mu);
        return 0;
    }
    if (rc != 0) {
        log_warn("room", "load failed", "app=%s room=%s rc=%s err=\"%s\"", c->app, c->room_id,
                 roomd_strerror(rc), store_errmsg());
        return rc;
    }
    rc = room_load_state(&l, c->app, c->room_id, &conf->room, &c->state, err, sizeof(err));
    if (rc != 0)
        log_error("room", "replay failed", "app=%s room=%s err=\"%s\"", c->app, c->room_id, err);
    else
        log_debug("room", "cell loaded", "app=%s room=%s version=%lld snapshot=%lld tail=%zu",
                  c->app, c->room_id, (long long)l.version, (long long)l.snapshot_version, l.ntail);
    c->event_seq = l.event_seq;
    room_load_clear(&l);
    if (rc != 0)
        return rc;
    c->loaded = true;
    /* a room loaded (first touch, takeover, reload): every member's idle
     * clock starts now, never earlier */
    pthread_mutex_lock(&m->mu);
    presence_reset_locked(c, c->state, clock_mono_ms());
    pthread_mutex_unlock(&m->mu);
    return 0;
}

int
cell_acquire(struct cell_map *m, const char *app, const char *room_id, struct cell **out,
             char *owner, size_t ownerlen, int64_t *lease_us)
{
    uint32_t h = key_hash(app, room_id);
    struct cell **pp, *c;
    uint64_t ticket;
    int64_t t0;
    int rc;

    *out = NULL;
    pthread_mutex_lock(&m->mu);
    pp = slot_of(m, app, room_id, h);
    if ((c = *pp) == NULL) {
        c = xcalloc(1, sizeof(*c));
        strlcpy_(c->app, app, sizeof(c->app));
        strlcpy_(c->room_id, room_id, sizeof(c->room_id));
        c->hash = h;
        pthread_mutex_init(&c->mu, NULL);
        pthread_cond_init(&c->cv, NULL);
        *pp = c;
        if (++m->count > 2 * m->nbuckets)
            grow(m);
    }
    c->refs++;
    pthread_mutex_unlock(&m->mu);

    pthread_mutex_lock(&c->mu);
    ticket = c->next_ticket++;
    while (c->serving != ticket)
        pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);

    t0 = clock_mono_us();
    rc = ensure_loaded(m, c, owner, ownerlen);
    *lease_us = clock_mono_us() - t0;
    if (rc != 0) {
        cell_release(m, c, true);
        return rc;
    }
    *out = c;
    return 0;
}

void
cell_release(struct cell_map *m, struct cell *c, bool drop)
{
    struct cell *dead = NULL;

    if (drop) {
        room_state_free(c->state);
        c->state = NULL;
        c->loaded = false;
    }
    pthread_mutex_lock(&c->mu);
    c->serving++;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);

    pthread_mutex_lock(&m->mu);
    if (drop)
        presence_clear_locked(c);
    c->last_used_ms = clock_mono_ms();
    if (--c->refs == 0 && (!c->loaded || c->state == NULL)) {
        unlink_cell(m, c);
        dead = c;
    }
    pthread_mutex_unlock(&m->mu);
    if (dead != NULL)
        destroy_cell(m, dead);
}

size_t
cell_map_count(struct cell_map *m)
{
    size_t n;

    pthread_mutex_lock(&m->mu);
    n = m->count;
    pthread_mutex_unlock(&m->mu);
    return n;
}

void
cell_map_lock(struct cell_map *m)
{
    pthread_mutex_lock(&m->mu);
}

void
cell_map_unlock(struct cell_map *m)
{
    pthread_mutex_unlock(&m->mu);
}

struct cell *
cell_lookup_locked(struct cell_map *m, const char *app, const char *room_id)
{
    return *slot_of(m, app, room_id, key_hash(app, room_id));
}

void
cell_map_each_locked(struct cell_map *m, void (*fn)(struct cell *c, void *arg), void *arg)
{
    for (size_t i = 0; i < m->nbuckets; i++)
        for (struct cell *c = m->buckets[i]; c != NULL; c = c->next)
            fn(c, arg);
}

/* ---- eviction ----------------------------------------------------------------------- */

size_t
cell_map_evict(struct cell_map *m, int64_t idle_ms)
{
    struct cell *dead = NULL, *c;
    int64_t now = clock_mono_ms();
    size_t n = 0;

    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < m->nbuckets; i++) {
        struct cell **pp = &m->buckets[i];
        while ((c = *pp) != NULL) {
            /* a room whose members' idle clocks run stays (presence.c) */
            if (c->refs == 0 && now - c->last_used_ms >= idle_ms &&
                !(c->npres > 0 && m->conf->room.member_idle_timeout_ms > 0)) {
                *pp = c->next;
                m->count--;
                c->next = dead;
                dead = c;
                n++;
            } else {
                pp = &c->next;
            }
        }
    }
    pthread_mutex_unlock(&m->mu);
    while ((c = dead) != NULL) {
        dead = c->next;
        log_debug("room", "cell evicted", "app=%s room=%s", c->app, c->room_id);
        destroy_cell(m, c);
    }
    return n;
}

static void *
evict_main(void *arg)
{
    struct cell_map *m = arg;
    int64_t idle = m->conf->room.idle_evict_ms;
    int64_t every = idle / 4 < 10 ? 10 : idle / 4 > 1000 ? 1000 : idle / 4;

    while (!bg_thread_sleep(&m->evictor, every))
        cell_map_evict(m, idle);
    return NULL;
}

int
cell_map_open(struct cell_map **out, const struct conf *conf, struct store *store,
              struct lease *lease)
{
    struct cell_map *m = xcalloc(1, sizeof(*m));

    m->conf = conf;
    m->store = store;
    m->lease = lease;
    m->nbuckets = 256;
    m->buckets = xcalloc(m->nbuckets, sizeof(*m->buckets));
    pthread_mutex_init(&m->mu, NULL);
    if (conf->room.idle_evict_ms > 0 && bg_thread_start(&m->evictor, evict_main, m) != 0) {
        cell_map_close(m);
        *out = NULL;
        return ROOMD_EINTERNAL;
    }
    *out = m;
    return 0;
}

void
cell_map_close(struct cell_map *m)
{
    if (m == NULL)
        return;
    bg_thread_stop(&m->evictor);
    for (size_t i = 0; i < m->nbuckets; i++) {
        struct cell *c = m->buckets[i], *next;
        for (; c != NULL; c = next) {
            next = c->next;
            destroy_cell(m, c);
        }
    }
    free(m->buckets);
    pthread_mutex_destroy(&m->mu);
    free(m);
}
