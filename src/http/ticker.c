/*
 * ticker.c: ticker.h on a pthread, a mutex and a condition variable on the
 * monotonic clock (so a wall-clock jump neither stalls nor races it).
 */
#include "http/ticker.h"

#include "core/err.h"
#include "core/xmalloc.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

struct ticker {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    int64_t every_ms;
    void (*fn)(void *);
    void *arg;
};

static void *
ticker_main(void *p)
{
    struct ticker *t = p;
    struct timespec at;

    pthread_mutex_lock(&t->mu);
    while (!t->stop) {
        pthread_mutex_unlock(&t->mu);
        t->fn(t->arg);
        clock_gettime(CLOCK_MONOTONIC, &at);
        at.tv_sec += t->every_ms / 1000;
        at.tv_nsec += (t->every_ms % 1000) * 1000000L;
        if (at.tv_nsec >= 1000000000L) {
            at.tv_sec++;
            at.tv_nsec -= 1000000000L;
        }
        pthread_mutex_lock(&t->mu);
        while (!t->stop && pthread_cond_timedwait(&t->cv, &t->mu, &at) == 0)
            ;
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

int
ticker_start(struct ticker **out, int64_t every_ms, void (*fn)(void *), void *arg)
{
    struct ticker *t = xcalloc(1, sizeof(*t));
    pthread_condattr_t ca;

    *out = NULL;
    t->every_ms = every_ms > 0 ? every_ms : 1;
    t->fn = fn;
    t->arg = arg;
    pthread_mutex_init(&t->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&t->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&t->thread, NULL, ticker_main, t) != 0) {
        pthread_cond_destroy(&t->cv);
        pthread_mutex_destroy(&t->mu);
        free(t);
        return ROOMD_ENOMEM;
    }
    *out = t;
    return 0;
}

void
ticker_stop(struct ticker *t)
{
    if (t == NULL)
        return;
    pthread_mutex_lock(&t->mu);
    t->stop = true;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->thread, NULL);
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
    free(t);
}
