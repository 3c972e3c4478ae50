/* SPDX-License-Identifier: Apache-2.0 */
/*
 * group_commit.c: the group committer of group_commit.h, without a thread of
 * its own. Callers append a waiter to a FIFO. When fewer than max_leaders
 * commits are running, the caller becomes a leader: it takes itself and up
 * to max_batch - 1 more waiters from the queue (never one already named a
 * leader), calls store_save once for all of them on its own thread, wakes
 * them and, when more queued meanwhile, names the first waiting one the next
 * leader. A lone command thus commits with no thread hand-off at all; under
 * load each command is woken once (its batch ended, or it leads the next
 * one) instead of twice (caller -> committer -> caller), and outside
 * gc->lock: each waiter sleeps on a semaphore of its own, posted after the
 * leader dropped the lock, and returns without taking the lock again (what
 * it reads was written before the post), so a woken follower never blocks
 * on the lock its waker holds (s14-cpu measured one context switch per
 * command less and -13..-15% of roomd's CPU per command on MariaDB).
 *
 * max_leaders is the store's save_writers: 1 on SQLite (one writer), more on
 * MySQL (each batch on its own pooled connection). Two batches in flight
 * never hold mutations of one room (a room's cell waits for its commit
 * before the next command), and what they can both lock (accounts, owner
 * locks, command_ids) is locked in key order or retried by the backend
 * after a deadlock or lock wait timeout, the transaction rolled back first.
 */
#include "store/group_commit.h"

#include "core/err.h"
#include "core/log.h"
#include "core/xmalloc.h"
#include "store/store.h"

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

struct waiter {
    struct mutation *m;
    bool done;     /* its batch ended: m->rc and err are final */
    bool lead;     /* named a leader: it commits the next batch it takes */
    char err[256]; /* detail text for the caller's thread */
    sem_t wake;    /* posted (gc->lock dropped) once done or lead is set */
    struct waiter *next;
};

struct group_commit {
    struct store *store;
    int max_batch, max_leaders;
    pthread_mutex_t lock;
    pthread_cond_t idle;        /* signalled when the last leader is done (close waits) */
    struct waiter *head, *tail; /* FIFO of queued waiters */
    int leaders;                /* leaders committing or named */
    bool closing;
    uint64_t batches, mutations;
};

/* Takes w out of the queue (it is in it). Holds gc->lock. */
static void
unlink_waiter(struct group_commit *gc, struct waiter *w)
{
    struct waiter **p = &gc->head, *prev = NULL;

    while (*p != w) {
        prev = *p;
        p = &(*p)->next;
    }
    *p = w->next;
    if (gc->tail == w)
        gc->tail = prev;
    w->next = NULL;
}

/* The first queued waiter not named a leader, or NULL. Holds gc->lock. */
static struct waiter *
first_unnamed(const struct group_commit *gc)
{
    struct waiter *w = gc->head;

    while (w != NULL && w->lead)
        w = w->next;
    return w;
}

/* Commits one batch: self (a named leader, queued) first, then the waiters
 * queued behind that no other leader was named for; then wakes them and the
 * next leader. Takes and drops gc->lock; self is done on return. */
static void
lead(struct group_commit *gc, struct waiter *self)
{
    struct waiter **ws = xcalloc((size_t)gc->max_batch, sizeof(*ws));
    struct mutation **muts = xcalloc((size_t)gc->max_batch, sizeof(*muts));
    size_t n = 0;

    pthread_mutex_lock(&gc->lock);
    unlink_waiter(gc, self);
    ws[n++] = self;
    for (struct waiter *w; n < (size_t)gc->max_batch && (w = first_unnamed(gc)) != NULL;) {
        unlink_waiter(gc, w);
        ws[n++] = w;
    }
    for (size_t i = 0; i < n; i++)
        muts[i] = ws[i]->m;
    pthread_mutex_unlock(&gc->lock);

    int rc = store_save(gc->store, muts, n);
    if (rc != 0)
        log_warn("store", "group commit failed", "mutations=%zu rc=%s err=\"%s\"", n,
                 roomd_strerror(rc), store_errmsg());
    for (size_t i = 0; i < n; i++) {
        struct waiter *w = ws[i];
        if (rc != 0)
            strlcpy_(w->err, store_errmsg(), sizeof(w->err));
        else if (w->m->rc != 0)
            snprintf(w->err, sizeof(w->err), "command %s: %s", w->m->command_id,
                     roomd_strerror(w->m->rc));
    }

    pthread_mutex_lock(&gc->lock);
    gc->batches++;
    gc->mutations += n;
    for (size_t i = 0; i < n; i++)
        ws[i]->done = true;
    struct waiter *next = first_unnamed(gc);
    if (next != NULL)
        next->lead = true; /* this leader's place goes to it */
    else if (--gc->leaders == 0)
        pthread_cond_broadcast(&gc->idle);
    pthread_mutex_unlock(&gc->lock);
    /* gc may be closed from here on: only the waiters are touched */
    /* the next leader first: its batch's round trips start while the
     * followers woken below compete for the cores (posted last, it started
     * ~2 ms later at 64 clients on MariaDB: fewer, larger, slower batches) */
    if (next != NULL)
        sem_post(&next->wake);
    for (size_t i = 1; i < n; i++) /* ws[0] is self */
        sem_post(&ws[i]->wake);
    free(ws);
    free(muts);
}

int
group_commit_open(struct group_commit **out, struct store *store, int max_batch)
{
    struct group_commit *gc = xcalloc(1, sizeof(*gc));

    gc->store = store;
    gc->max_batch = max_batch >= 1 ? max_batch : 1;
    gc->max_leaders = store->save_writers >= 1 ? store->save_writers : 1;
    pthread_mutex_init(&gc->lock, NULL);
    pthread_cond_init(&gc->idle, NULL);
    *out = gc;
    return 0;
}

void
group_commit_close(struct group_commit *gc)
{
    if (gc == NULL)
        return;
    pthread_mutex_lock(&gc->lock);
    gc->closing = true;
    while (gc->leaders > 0)
        pthread_cond_wait(&gc->idle, &gc->lock);
    pthread_mutex_unlock(&gc->lock);
    pthread_cond_destroy(&gc->idle);
    pthread_mutex_destroy(&gc->lock);
    free(gc);
}

int
group_commit_submit(struct group_commit *gc, struct mutation *m)
{
    struct waiter w = {.m = m};

    sem_init(&w.wake, 0, 0);
    pthread_mutex_lock(&gc->lock);
    if (gc->closing) {
        pthread_mutex_unlock(&gc->lock);
        sem_destroy(&w.wake);
        store_set_errmsg("group commit is closing");
        return m->rc = ROOMD_EUNAVAIL;
    }
    if (gc->tail != NULL)
        gc->tail->next = &w;
    else
        gc->head = &w;
    gc->tail = &w;
    if (gc->leaders < gc->max_leaders) {
        gc->leaders++;
        w.lead = true;
    }
    bool lead_now = w.lead;
    pthread_mutex_unlock(&gc->lock);
    /* else done or lead is set (under gc->lock) before the post that wakes w */
    while (!lead_now && sem_wait(&w.wake) != 0 && errno == EINTR)
        continue;
    if (!w.done)
        lead(gc, &w); /* w is in its own batch, so the batch ends it */
    sem_destroy(&w.wake);
    if (m->rc != 0)
        store_set_errmsg("%s", w.err);
    return m->rc;
}

void
group_commit_stats(struct group_commit *gc, uint64_t *batches, uint64_t *mutations)
{
    pthread_mutex_lock(&gc->lock);
    *batches = gc->batches;
    *mutations = gc->mutations;
    pthread_mutex_unlock(&gc->lock);
}
