/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ticker.c: ticker.h on core/thread.h's bg_thread (start, stop flag, a
 * monotonic timed wait, join): the loop is "call fn, sleep every_ms".
 */
#include "http/ticker.h"

#include "core/err.h"
#include "core/thread.h"
#include "core/xmalloc.h"

#include <stdlib.h>

struct ticker {
    struct bg_thread bg;
    int64_t every_ms;
    void (*fn)(void *);
    void *arg;
};

static void *
ticker_main(void *p)
{
    struct ticker *t = p;

    do
        t->fn(t->arg);
    while (!bg_thread_sleep(&t->bg, t->every_ms));
    return NULL;
}

int
ticker_start(struct ticker **out, int64_t every_ms, void (*fn)(void *), void *arg)
{
    struct ticker *t = xcalloc(1, sizeof(*t));

    t->every_ms = every_ms > 0 ? every_ms : 1;
    t->fn = fn;
    t->arg = arg;
    *out = bg_thread_start_owner(&t->bg, ticker_main, t);
    return *out != NULL ? 0 : ROOMD_ENOMEM;
}

void
ticker_stop(struct ticker *t)
{
    if (t != NULL)
        bg_thread_stop_free(&t->bg, t);
}
