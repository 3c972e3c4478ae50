/* SPDX-License-Identifier: Apache-2.0 */
/* thread.c: the background thread lifecycle of thread.h. */
#include "core/thread.h"

#include "core/clock.h"
#include "core/err.h"
#include "core/xmalloc.h"

#include <stdlib.h>
#include <time.h>

void
bg_thread_init(struct bg_thread *t)
{
    pthread_mutex_init(&t->mu, NULL);
    clock_cond_init(&t->cv);
    atomic_init(&t->stop, false);
    t->wakes = 0;
    t->tids = NULL;
    t->n = t->cap = 0;
    t->inited = true;
}

int
bg_thread_spawn(struct bg_thread *t, void *(*fn)(void *), void *arg)
{
    t->tids = xgrow(t->tids, t->n, &t->cap, sizeof(*t->tids));
    if (pthread_create(&t->tids[t->n], NULL, fn, arg) != 0)
        return ROOMD_EINTERNAL;
    t->n++;
    return 0;
}

int
bg_thread_start(struct bg_thread *t, void *(*fn)(void *), void *arg)
{
    bg_thread_init(t);
    if (bg_thread_spawn(t, fn, arg) != 0) {
        bg_thread_stop(t);
        return ROOMD_EINTERNAL;
    }
    return 0;
}

void *
bg_thread_start_owner(struct bg_thread *t, void *(*fn)(void *), void *owner)
{
    if (bg_thread_start(t, fn, owner) != 0) {
        free(owner);
        return NULL;
    }
    return owner;
}

void
bg_thread_stop_free(struct bg_thread *t, void *owner)
{
    bg_thread_stop(t);
    free(owner);
}

void
bg_thread_request_stop(struct bg_thread *t)
{
    pthread_mutex_lock(&t->mu);
    atomic_store(&t->stop, true);
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

void
bg_thread_stop(struct bg_thread *t)
{
    if (!t->inited)
        return;
    bg_thread_request_stop(t);
    for (size_t i = 0; i < t->n; i++)
        pthread_join(t->tids[i], NULL);
    free(t->tids);
    t->tids = NULL;
    t->n = t->cap = 0;
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
    t->inited = false;
}

bool
bg_thread_stopping(const struct bg_thread *t)
{
    return atomic_load(&t->stop);
}

void
bg_thread_wake(struct bg_thread *t)
{
    pthread_mutex_lock(&t->mu);
    t->wakes++;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

bool
bg_thread_wait_locked(struct bg_thread *t, int64_t ms)
{
    struct timespec ts;

    if (!atomic_load(&t->stop) && t->wakes == 0 && ms > 0) {
        clock_mono_deadline(&ts, ms);
        pthread_cond_timedwait(&t->cv, &t->mu, &ts);
    }
    t->wakes = 0;
    return atomic_load(&t->stop);
}

bool
bg_thread_sleep(struct bg_thread *t, int64_t ms)
{
    struct timespec ts;
    bool stop;

    clock_mono_deadline(&ts, ms > 0 ? ms : 0);
    pthread_mutex_lock(&t->mu);
    while (!atomic_load(&t->stop) && t->wakes == 0 && ms > 0)
        if (pthread_cond_timedwait(&t->cv, &t->mu, &ts) != 0)
            break;
    t->wakes = 0;
    stop = atomic_load(&t->stop);
    pthread_mutex_unlock(&t->mu);
    return stop;
}
