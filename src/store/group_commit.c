/*
 * group_commit.c: the group committer of group_commit.h, without a thread of
 * its own. Callers append a waiter to a FIFO. When no commit is running, the
 * caller becomes the leader: it takes up to max_batch waiters from the head
 * (itself first), calls store_save once for all of them on its own thread,
 * wakes the others and, when more queued meanwhile, makes the new head the
 * next leader. A lone command thus commits with no thread hand-off at all;
 * under load each command is woken once (its batch ended, or it leads the
 * next one) instead of twice (caller -> committer -> caller).
 */
#include "store/group_commit.h"

#include "core/err.h"
#include "core/log.h"
#include "core/xmalloc.h"
#include "store/store.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

struct waiter {
    struct mutation *m;
    bool done;     /* its batch ended: m->rc and err are final */
    bool lead;     /* it is at the head and must commit the next batch */
    char err[256]; /* detail text for the caller's thread */
    pthread_cond_t cond;
    struct waiter *next;
};

struct group_commit {
    struct store *store;
    int max_batch;
    pthread_mutex_t lock;
    pthread_cond_t idle;        /* signalled when the last leader is done (close waits) */
    struct waiter *head, *tail; /* FIFO of queued waiters */
    bool busy;                  /* a leader is committing or has been named */
    bool closing;
    struct mutation **muts; /* the leader's scratch, max_batch each */
    struct waiter **ws;
    uint64_t batches, mutations;
};

/* Commits one batch from the head of the queue, which is the caller's own
 * waiter. Holds gc->lock on entry and return (dropped around store_save). */
static void
lead(struct group_commit *gc)
{
    size_t n = 0;

    while (gc->head != NULL && n < (size_t)gc->max_batch) {
        struct waiter *w = gc->head;

        gc->head = w->next;
        if (gc->head == NULL)
            gc->tail = NULL;
        gc->ws[n] = w;
        gc->muts[n++] = w->m;
    }
    pthread_mutex_unlock(&gc->lock);

    int rc = store_save(gc->store, gc->muts, n);
    if (rc != 0)
        log_warn("store", "group commit failed", "mutations=%zu rc=%s err=\"%s\"", n,
                 roomd_strerror(rc), store_errmsg());
    for (size_t i = 0; i < n; i++) {
        struct waiter *w = gc->ws[i];
        if (rc != 0)
            strlcpy_(w->err, store_errmsg(), sizeof(w->err));
        else if (w->m->rc != 0)
            snprintf(w->err, sizeof(w->err), "command %s: %s", w->m->command_id,
                     roomd_strerror(w->m->rc));
    }

    pthread_mutex_lock(&gc->lock);
    gc->batches++;
    gc->mutations += n;
    for (size_t i = 0; i < n; i++) {
        gc->ws[i]->done = true;
        pthread_cond_signal(&gc->ws[i]->cond);
    }
    if (gc->head != NULL) {
        gc->head->lead = true; /* busy stays: the next leader is named */
        pthread_cond_signal(&gc->head->cond);
    } else {
        gc->busy = false;
        pthread_cond_broadcast(&gc->idle);
    }
}

int
group_commit_open(struct group_commit **out, struct store *store, int max_batch)
{
    struct group_commit *gc = xcalloc(1, sizeof(*gc));

    gc->store = store;
    gc->max_batch = max_batch >= 1 ? max_batch : 1;
    gc->muts = xcalloc((size_t)gc->max_batch, sizeof(*gc->muts));
    gc->ws = xcalloc((size_t)gc->max_batch, sizeof(*gc->ws));
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
    while (gc->busy)
        pthread_cond_wait(&gc->idle, &gc->lock);
    pthread_mutex_unlock(&gc->lock);
    pthread_cond_destroy(&gc->idle);
    pthread_mutex_destroy(&gc->lock);
    free(gc->muts);
    free(gc->ws);
    free(gc);
}

int
group_commit_submit(struct group_commit *gc, struct mutation *m)
{
    struct waiter w = {.m = m};

    pthread_cond_init(&w.cond, NULL);
    pthread_mutex_lock(&gc->lock);
    if (gc->closing) {
        pthread_mutex_unlock(&gc->lock);
        pthread_cond_destroy(&w.cond);
        store_set_errmsg("group commit is closing");
        return m->rc = ROOMD_EUNAVAIL;
    }
    if (gc->tail != NULL)
        gc->tail->next = &w;
    else
        gc->head = &w;
    gc->tail = &w;
    if (!gc->busy) {
        gc->busy = true;
        w.lead = true;
    }
    while (!w.done) {
        if (w.lead) {
            w.lead = false;
            lead(gc); /* w is the head, so this batch ends it */
            continue;
        }
        pthread_cond_wait(&w.cond, &gc->lock);
    }
    pthread_mutex_unlock(&gc->lock);
    pthread_cond_destroy(&w.cond);
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
