/*
 * group_commit.c: the committer thread of group_commit.h. Callers append a
 * waiter to a FIFO and sleep on their own condition; the committer takes up
 * to max_batch waiters, calls store_save once for all of them, and wakes
 * each. While it commits, new callers queue up and form the next batch.
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
    bool done;
    char err[256]; /* detail text for the caller's thread */
    pthread_cond_t cond;
    struct waiter *next;
};

struct group_commit {
    struct store *store;
    int max_batch;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t work;        /* signalled when the queue gets a waiter or on close */
    struct waiter *head, *tail; /* FIFO of queued waiters */
    bool closing;
    uint64_t batches, mutations;
};

static void *
committer(void *arg)
{
    struct group_commit *gc = arg;
    struct mutation **muts = xcalloc((size_t)gc->max_batch, sizeof(*muts));
    struct waiter **ws = xcalloc((size_t)gc->max_batch, sizeof(*ws));

    pthread_mutex_lock(&gc->lock);
    for (;;) {
        size_t n = 0;

        while (gc->head == NULL && !gc->closing)
            pthread_cond_wait(&gc->work, &gc->lock);
        if (gc->head == NULL) /* closing and drained */
            break;
        while (gc->head != NULL && n < (size_t)gc->max_batch) {
            struct waiter *w = gc->head;

            gc->head = w->next;
            if (gc->head == NULL)
                gc->tail = NULL;
            ws[n] = w;
            muts[n++] = w->m;
        }
        pthread_mutex_unlock(&gc->lock);

        int rc = store_save(gc->store, muts, n);
        if (rc != 0)
            log_warn("store", "group commit failed", "mutations=%zu rc=%s err=\"%s\"", n,
                     roomd_strerror(rc), store_errmsg());

        pthread_mutex_lock(&gc->lock);
        gc->batches++;
        gc->mutations += n;
        for (size_t i = 0; i < n; i++) {
            if (rc != 0)
                strlcpy_(ws[i]->err, store_errmsg(), sizeof(ws[i]->err));
            else if (muts[i]->rc != 0)
                snprintf(ws[i]->err, sizeof(ws[i]->err), "command %s: %s", muts[i]->command_id,
                         roomd_strerror(muts[i]->rc));
            ws[i]->done = true;
            pthread_cond_signal(&ws[i]->cond);
        }
    }
    pthread_mutex_unlock(&gc->lock);
    free(muts);
    free(ws);
    return NULL;
}

int
group_commit_open(struct group_commit **out, struct store *store, int max_batch)
{
    struct group_commit *gc = xcalloc(1, sizeof(*gc));

    *out = NULL;
    gc->store = store;
    gc->max_batch = max_batch >= 1 ? max_batch : 1;
    pthread_mutex_init(&gc->lock, NULL);
    pthread_cond_init(&gc->work, NULL);
    if (pthread_create(&gc->thread, NULL, committer, gc) != 0) {
        pthread_cond_destroy(&gc->work);
        pthread_mutex_destroy(&gc->lock);
        free(gc);
        return ROOMD_EINTERNAL;
    }
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
    pthread_cond_signal(&gc->work);
    pthread_mutex_unlock(&gc->lock);
    pthread_join(gc->thread, NULL);
    pthread_cond_destroy(&gc->work);
    pthread_mutex_destroy(&gc->lock);
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
    pthread_cond_signal(&gc->work);
    while (!w.done)
        pthread_cond_wait(&w.cond, &gc->lock);
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
