/* SPDX-License-Identifier: Apache-2.0 */
/*
 * handoff.c: the in-process hand-off of handoff.h: a bounded ring of rows
 * committed already claimed by "<node>/h", which the workers (worker.c,
 * next_work) take before claiming. Shares struct outbox (internal.h).
 */
#include "outbox/handoff.h"

#include "core/clock.h"
#include "core/sink_bits.h"
#include "core/tree.h"
#include "core/xmalloc.h"
#include "outbox/internal.h"

#include <pthread.h>
#include <search.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Capacity (rows) with handoff_queue -1 (auto): max(this, 4 * workers * batch_size). */
#define HANDOFF_MIN_ROWS 1024

void
handoff_init(struct outbox *ob, const char *node)
{
    snprintf(ob->handoff_by, sizeof(ob->handoff_by), "%.48s/h", node);
    ob->handoff_cap = (size_t)ob->cfg.workers * (size_t)ob->cfg.batch_size * 4;
    if (ob->handoff_cap < HANDOFF_MIN_ROWS)
        ob->handoff_cap = HANDOFF_MIN_ROWS;
    if (ob->cfg.handoff_queue >= 0)
        ob->handoff_cap = (size_t)ob->cfg.handoff_queue;
}

/* ==== rooms in memory (ordering per_room): struct hroom ==== */

static void
hroom_free(void *p)
{
    struct hroom *e = p;

    free(e->name);
    free(e);
}

void
handoff_free(struct outbox *ob)
{
    tdestroy(ob->hrooms, hroom_free);
    ob->hrooms = NULL;
    free(ob->q);
    free(ob->qt);
    free(ob->qr);
    ob->q = NULL;
    ob->qt = NULL;
    ob->qr = NULL;
}

/* The entry of app/room (created with create, else NULL when there is
 * none). Holds ob->pool.mu. */
static struct hroom *
hroom_get(struct outbox *ob, const char *app, const char *room, bool create)
{
    char name[2 * STORE_ID_MAX + 2];
    struct hroom probe = {.name = name}, *e, **found;

    snprintf(name, sizeof(name), "%s\x1f%s", app, room);
    found = tfind(&probe, &ob->hrooms, tree_name_cmp);
    if (found != NULL || !create)
        return found != NULL ? *found : NULL;
    e = xcalloc(1, sizeof(*e));
    e->name = xstrdup(name);
    if (tsearch(e, &ob->hrooms, tree_name_cmp) == NULL)
        abort(); /* out of memory, as xmalloc */
    return e;
}

/* n of e's rows left the process's memory; the entry goes with the last.
 * Holds ob->pool.mu. */
static void
hroom_put(struct outbox *ob, struct hroom *e, size_t n)
{
    e->rows -= n <= e->rows ? n : e->rows;
    if (e->rows > 0)
        return;
    tdelete(e, &ob->hrooms, tree_name_cmp);
    hroom_free(e);
}

/* True when the queued row at ring index i may be taken by the take
 * stamped stamp: no ordering, or no row of its room is in a batch that
 * has not landed, but the ones this take took. */
static bool
takeable(const struct outbox *ob, size_t i, uint64_t stamp)
{
    const struct hroom *e = ob->qr[i];

    return e == NULL || e->in_hands == 0 || e->take == stamp;
}

/* Appends *r (moved in), pushed at pushed_us, of room e (NULL: no
 * ordering) to the ring, growing it. Holds ob->pool.mu. */
static void
q_put(struct outbox *ob, const struct outbox_row *r, int64_t pushed_us, struct hroom *e)
{
    if (ob->qlen == ob->qalloc) {
        size_t alloc = ob->qalloc ? ob->qalloc * 2 : 64;
        struct outbox_row *q = xcalloc(alloc, sizeof(*q));
        int64_t *qt = xcalloc(alloc, sizeof(*qt));
        struct hroom **qr = xcalloc(alloc, sizeof(*qr));

        for (size_t i = 0; i < ob->qlen; i++) {
            q[i] = ob->q[(ob->qhead + i) % ob->qalloc];
            qt[i] = ob->qt[(ob->qhead + i) % ob->qalloc];
            qr[i] = ob->qr[(ob->qhead + i) % ob->qalloc];
        }
        free(ob->q);
        free(ob->qt);
        free(ob->qr);
        ob->q = q;
        ob->qt = qt;
        ob->qr = qr;
        ob->qhead = 0;
        ob->qalloc = alloc;
    }
    size_t at = (ob->qhead + ob->qlen) % ob->qalloc;
    ob->q[at] = *r;
    ob->qt[at] = pushed_us;
    ob->qr[at] = e;
    ob->qlen++;
}

void
handoff_batch_free(struct handoff_batch *b)
{
    outbox_rows_free(b->rows, b->n);
    free(b->pushed_us);
    free(b->rooms);
    free(b->blocked);
    *b = (struct handoff_batch){0};
}

bool
handoff_ready(struct outbox *ob)
{
    for (size_t i = 0; i < ob->qlen; i++)
        if (takeable(ob, (ob->qhead + i) % ob->qalloc, 0))
            return true;
    return false;
}

size_t
handoff_take(struct outbox *ob, size_t max, bool all, struct handoff_batch *b)
{
    size_t cap = ob->qlen < max ? ob->qlen : max, kept = 0;
    uint64_t stamp = ++ob->take_seq;

    *b = (struct handoff_batch){0};
    b->rows = xcalloc(cap ? cap : 1, sizeof(*b->rows));
    b->pushed_us = xcalloc(cap ? cap : 1, sizeof(*b->pushed_us));
    if (ob->cfg.ordering == ORDERING_PER_ROOM && !all) {
        b->rooms = xcalloc(cap ? cap : 1, sizeof(*b->rooms));
        b->blocked = xcalloc(cap ? cap : 1, sizeof(*b->blocked));
    }
    /* Takes the rows that may go, in queue order; the others stay queued,
     * in order, packed from qhead (kept <= i: nothing unread is written). */
    for (size_t i = 0; i < ob->qlen; i++) {
        size_t at = (ob->qhead + i) % ob->qalloc;
        struct hroom *e = ob->qr[at];

        if (b->n < cap && (all || takeable(ob, at, stamp))) {
            b->rows[b->n] = ob->q[at];
            b->pushed_us[b->n] = ob->qt[at];
            if (b->rooms != NULL && e != NULL) {
                e->in_hands++;
                e->take = stamp;
                b->rooms[b->n] = e;
                b->blocked[b->n] = e->blocked;
            }
            b->n++;
            continue;
        }
        size_t to = (ob->qhead + kept++) % ob->qalloc;
        ob->q[to] = ob->q[at];
        ob->qt[to] = ob->qt[at];
        ob->qr[to] = e;
    }
    ob->qlen = kept;
    return b->n;
}

void
handoff_landed(struct outbox *ob, struct hroom *const *rooms, const struct slot *sl, size_t n)
{
    pthread_mutex_lock(&ob->pool.mu);
    for (size_t i = 0; i < n; i++) {
        struct hroom *e = rooms[i];

        if (e == NULL)
            continue;
        if (e->in_hands > 0)
            e->in_hands--;
        e->blocked |= slot_blocks(&sl[i]); /* its later rows in memory are held for those sinks */
    }
    if (ob->qlen > 0)
        pthread_cond_signal(&ob->pool.cv); /* rows of those rooms may go now */
    pthread_mutex_unlock(&ob->pool.mu);
}

void
handoff_done(struct outbox *ob, struct hroom *const *rooms, size_t n)
{
    pthread_mutex_lock(&ob->pool.mu);
    for (size_t i = 0; i < n; i++)
        if (rooms[i] != NULL)
            hroom_put(ob, rooms[i], 1);
    pthread_mutex_unlock(&ob->pool.mu);
}

/* Copies m's committed rows into the queue and gives back the places
 * outbox_handoff_begin took. */
static void
push(struct outbox *ob, const struct mutation *m)
{
    struct outbox_row *rows = xcalloc(m->nevents ? m->nevents : 1, sizeof(*rows));

    /* the rows as store_save inserted them, built outside the lock */
    for (size_t i = 0; i < m->nevents; i++) {
        const struct outbox_new *e = &m->events[i];
        struct outbox_row *r = &rows[i];

        r->id = e->id;
        strlcpy_(r->event_id, e->event_id, sizeof(r->event_id));
        strlcpy_(r->app_code, m->app_code, sizeof(r->app_code));
        strlcpy_(r->room_id, m->room_id, sizeof(r->room_id));
        strlcpy_(r->command_id, m->command_id, sizeof(r->command_id));
        strlcpy_(r->event_type, e->event_type, sizeof(r->event_type));
        r->room_version = m->version;
        r->room_seq = e->room_seq;
        strlcpy_(r->request_id, m->request_id, sizeof(r->request_id));
        strlcpy_(r->traceparent, m->traceparent, sizeof(r->traceparent));
        r->payload = xmalloc(e->payload_len ? e->payload_len : 1);
        if (e->payload_len)
            memcpy(r->payload, e->payload, e->payload_len);
        r->payload_len = e->payload_len;
        r->status = OUTBOX_DELIVERING;
        r->lock_until_ms = m->lock_until_ms;
        strlcpy_(r->locked_by, m->locked_by, sizeof(r->locked_by));
        r->created_at_ms = m->created_at_ms;
    }
    int64_t now_us = clock_mono_us();
    pthread_mutex_lock(&ob->pool.mu);
    struct hroom *e = ob->cfg.ordering == ORDERING_PER_ROOM
                          ? hroom_get(ob, m->app_code, m->room_id, false)
                          : NULL;
    for (size_t i = 0; i < m->nevents; i++) {
        if (rows[i].id > 0) {
            q_put(ob, &rows[i], now_us, e);
            ob->stats.handoff_rows++;
            continue;
        }
        /* a busy room's row (inserted pending), or one whose id the backend
         * did not report: leave it to the claims (after its lock if it was
         * inserted claimed), and hold back the room's rows still in memory
         * that came after it (blocked until none is left) */
        free(rows[i].payload);
        ob->wake_seq++;
        if (e != NULL) {
            if (!m->room_busy)
                e->blocked = SINK_BITS_ALL;
            hroom_put(ob, e, 1);
            e = hroom_get(ob, m->app_code, m->room_id, false); /* gone with its last row */
        }
    }
    ob->reserved -= m->nevents <= ob->reserved ? m->nevents : ob->reserved;
    pthread_cond_signal(&ob->pool.cv);
    pthread_mutex_unlock(&ob->pool.mu);
    free(rows);
}

void
outbox_handoff_set_capacity(struct outbox *ob, size_t rows)
{
    pthread_mutex_lock(&ob->pool.mu);
    ob->handoff_cap = rows;
    pthread_mutex_unlock(&ob->pool.mu);
}

bool
outbox_handoff_begin(struct outbox *ob, struct mutation *m)
{
    size_t n = m->nevents;
    bool ok;

    m->locked_by = NULL;
    if (ob == NULL || n == 0)
        return false;
    m->handoff_if_room_idle = false;
    m->handoff_own_rows = false;
    pthread_mutex_lock(&ob->pool.mu);
    ok = !bg_thread_stopping(&ob->pool) && ob->reserved + ob->qlen + n <= ob->handoff_cap;
    if (ok)
        ob->reserved += n;
    else if (ob->handoff_cap > 0)
        ob->stats.handoff_full++;
    if (ok && ob->cfg.ordering == ORDERING_PER_ROOM) {
        /* per_room: a room with undelivered rows keeps its order through
         * the ordered claim (store_save inserts the rows pending then),
         * unless they are all this hand-off's, still in memory and none
         * of them failed: then the rows queue behind them (room affinity) */
        struct hroom *e = hroom_get(ob, m->app_code, m->room_id, true);

        m->handoff_if_room_idle = true;
        m->handoff_own_rows = e->rows > 0 && e->blocked == 0;
        e->rows += n; /* in memory from now until their completion */
    }
    pthread_mutex_unlock(&ob->pool.mu);
    if (ok) {
        m->locked_by = ob->handoff_by;
        m->lock_until_ms = clock_wall_ms() + ob->cfg.lock_timeout_ms;
    }
    return ok;
}

void
outbox_handoff_end(struct outbox *ob, const struct mutation *m, int rc)
{
    if (ob == NULL)
        return;
    if (m->locked_by != ob->handoff_by) {
        /* not handed off: the rows (if any committed) wait pending for a claim */
        if (rc == 0 && m->nevents > 0)
            outbox_wake(ob);
        return;
    }
    if (rc == 0) {
        if (m->room_busy)
            atomic_fetch_add(&ob->order_busy, 1);
        else if (m->handoff_own_rows)
            atomic_fetch_add(&ob->order_affine, 1);
        push(ob, m); /* rows inserted pending (id 0) wake a claim instead */
        return;
    }
    pthread_mutex_lock(&ob->pool.mu);
    ob->reserved -= m->nevents <= ob->reserved ? m->nevents : ob->reserved;
    if (ob->cfg.ordering == ORDERING_PER_ROOM) {
        struct hroom *e = hroom_get(ob, m->app_code, m->room_id, false);
        if (e != NULL)
            hroom_put(ob, e, m->nevents);
    }
    pthread_mutex_unlock(&ob->pool.mu);
}
