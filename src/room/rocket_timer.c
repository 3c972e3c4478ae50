/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rocket_timer.c: the in-process rocket launch timer (see rocket_timer.h).
 * One thread sleeps until the earliest launch_at_ms (at most a second at a
 * time, so a shifted test clock is noticed), pops every due wake-up and
 * executes its LaunchRocket outside the lock.
 */
#include "room/rocket_timer.h"

#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/thread.h"
#include "core/xmalloc.h"
#include "room/apply.h"
#include "room/service.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct wakeup {
    int64_t launch_at_ms;
    int level;
    char app[STORE_ID_MAX];
    char room_id[STORE_ID_MAX];
    char rocket_id[STORE_ID_MAX];
};

struct rocket_timer {
    struct room_service *svc;
    struct bg_thread th; /* th.mu guards heap, n, cap */
    struct wakeup *heap;
    size_t n, cap;
};

static void
heap_push(struct rocket_timer *t, const struct wakeup *w)
{
    size_t i;

    t->heap = xgrow(t->heap, t->n, &t->cap, sizeof(*t->heap));
    i = t->n++;
    while (i > 0 && t->heap[(i - 1) / 2].launch_at_ms > w->launch_at_ms) {
        t->heap[i] = t->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    t->heap[i] = *w;
}

static struct wakeup
heap_pop(struct rocket_timer *t)
{
    struct wakeup top = t->heap[0], last = t->heap[--t->n];
    size_t i = 0;

    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        int64_t v = last.launch_at_ms;
        if (l < t->n && t->heap[l].launch_at_ms < v) {
            m = l;
            v = t->heap[l].launch_at_ms;
        }
        if (r < t->n && t->heap[r].launch_at_ms < v)
            m = r;
        if (m == i)
            break;
        t->heap[i] = t->heap[m];
        i = m;
    }
    if (t->n > 0)
        t->heap[i] = last;
    return top;
}

static void
launch(struct rocket_timer *t, const struct wakeup *w)
{
    char cid[STORE_ID_MAX], *body;
    struct room_cmd cmd;
    struct cmd_error ce;
    struct room_reply reply = {0};

    rocket_launch_command_id(w->rocket_id, cid, sizeof(cid));
    body = xasprintf("{\"command_id\":\"%s\",\"rocket_id\":\"%s\",\"level\":%d,"
                     "\"launch_at_ms\":%lld}",
                     cid, w->rocket_id, w->level, (long long)w->launch_at_ms);
    if (room_cmd_parse(CMD_LAUNCH_ROCKET, w->app, w->room_id, body, strlen(body), &cmd, &ce) != 0) {
        log_warn("room", "rocket wake-up refused", "app=%s room=%s rocket=%s err=\"%s\"", w->app,
                 w->room_id, w->rocket_id, ce.message);
        free(body);
        return;
    }
    free(body);
    room_service_execute(t->svc, &cmd, &reply);
    log_info("room", "rocket wake-up", "app=%s room=%s rocket=%s level=%d status=%d", w->app,
             w->room_id, w->rocket_id, w->level, reply.status);
    room_reply_clear(&reply);
    room_cmd_clear(&cmd);
}

static void *
timer_main(void *arg)
{
    struct rocket_timer *t = arg;
    int64_t wait_ms = 0;

    pthread_mutex_lock(&t->th.mu);
    while (!bg_thread_wait_locked(&t->th, wait_ms)) {
        int64_t now = clock_wall_ms();
        wait_ms = 1000;
        if (t->n > 0 && t->heap[0].launch_at_ms <= now) {
            struct wakeup w = heap_pop(t);
            pthread_mutex_unlock(&t->th.mu);
            launch(t, &w);
            pthread_mutex_lock(&t->th.mu);
            wait_ms = 0;
            continue;
        }
        if (t->n > 0 && t->heap[0].launch_at_ms - now < wait_ms)
            wait_ms = t->heap[0].launch_at_ms - now;
    }
    pthread_mutex_unlock(&t->th.mu);
    return NULL;
}

int
rocket_timer_open(struct rocket_timer **out, struct room_service *svc)
{
    struct rocket_timer *t = xcalloc(1, sizeof(*t));

    t->svc = svc;
    *out = bg_thread_start_owner(&t->th, timer_main, t);
    return *out != NULL ? 0 : ROOMD_EINTERNAL;
}

void
rocket_timer_close(struct rocket_timer *t)
{
    if (t == NULL)
        return;
    bg_thread_stop(&t->th);
    free(t->heap);
    free(t);
}

void
rocket_timer_schedule(struct rocket_timer *t, const char *app, const char *room_id,
                      const char *rocket_id, int level, int64_t launch_at_ms)
{
    struct wakeup w;

    memset(&w, 0, sizeof(w));
    w.launch_at_ms = launch_at_ms;
    w.level = level;
    strlcpy_(w.app, app, sizeof(w.app));
    strlcpy_(w.room_id, room_id, sizeof(w.room_id));
    strlcpy_(w.rocket_id, rocket_id, sizeof(w.rocket_id));
    pthread_mutex_lock(&t->th.mu);
    heap_push(t, &w);
    pthread_cond_signal(&t->th.cv);
    pthread_mutex_unlock(&t->th.mu);
}

size_t
rocket_timer_pending(struct rocket_timer *t)
{
    size_t n;

    pthread_mutex_lock(&t->th.mu);
    n = t->n;
    pthread_mutex_unlock(&t->th.mu);
    return n;
}
