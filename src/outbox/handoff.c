/*
 * handoff.c: the in-process hand-off of handoff.h: a bounded ring of rows
 * committed already claimed by "<node>/h", which the workers (worker.c,
 * next_work) take before claiming. Shares struct outbox (internal.h).
 */
#include "outbox/handoff.h"

#include "core/clock.h"
#include "core/xmalloc.h"
#include "outbox/internal.h"

#include <pthread.h>
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

void
handoff_free(struct outbox *ob)
{
    free(ob->q);
    free(ob->qt);
    ob->q = NULL;
    ob->qt = NULL;
}

/* Appends *r (moved in), pushed at pushed_us, to the ring, growing it.
 * Holds ob->pool.mu. */
static void
q_put(struct outbox *ob, const struct outbox_row *r, int64_t pushed_us)
{
    if (ob->qlen == ob->qalloc) {
        size_t alloc = ob->qalloc ? ob->qalloc * 2 : 64;
        struct outbox_row *q = xcalloc(alloc, sizeof(*q));
        int64_t *qt = xcalloc(alloc, sizeof(*qt));

        for (size_t i = 0; i < ob->qlen; i++) {
            q[i] = ob->q[(ob->qhead + i) % ob->qalloc];
            qt[i] = ob->qt[(ob->qhead + i) % ob->qalloc];
        }
        free(ob->q);
        free(ob->qt);
        ob->q = q;
        ob->qt = qt;
        ob->qhead = 0;
        ob->qalloc = alloc;
    }
    ob->q[(ob->qhead + ob->qlen) % ob->qalloc] = *r;
    ob->qt[(ob->qhead + ob->qlen) % ob->qalloc] = pushed_us;
    ob->qlen++;
}

struct outbox_row *
handoff_take(struct outbox *ob, size_t max, size_t *n, int64_t **pushed_us)
{
    size_t k = ob->qlen < max ? ob->qlen : max;
    struct outbox_row *rows = xcalloc(k ? k : 1, sizeof(*rows));
    int64_t *t = xcalloc(k ? k : 1, sizeof(*t));

    for (size_t i = 0; i < k; i++) {
        rows[i] = ob->q[ob->qhead];
        t[i] = ob->qt[ob->qhead];
        ob->qhead = (ob->qhead + 1) % ob->qalloc;
    }
    ob->qlen -= k;
    *n = k;
    if (pushed_us != NULL)
        *pushed_us = t;
    else
        free(t);
    return rows;
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
    for (size_t i = 0; i < m->nevents; i++) {
        if (rows[i].id > 0) {
            q_put(ob, &rows[i], now_us);
            ob->stats.handoff_rows++;
            continue;
        }
        /* a backend that did not report the row's id: leave the row to the
         * claims (after its lock if it was inserted claimed) */
        free(rows[i].payload);
        ob->wake_seq++;
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
    pthread_mutex_lock(&ob->pool.mu);
    ok = !bg_thread_stopping(&ob->pool) && ob->reserved + ob->qlen + n <= ob->handoff_cap;
    if (ok)
        ob->reserved += n;
    else if (ob->handoff_cap > 0)
        ob->stats.handoff_full++;
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
        push(ob, m);
        return;
    }
    pthread_mutex_lock(&ob->pool.mu);
    ob->reserved -= m->nevents <= ob->reserved ? m->nevents : ob->reserved;
    pthread_mutex_unlock(&ob->pool.mu);
}
