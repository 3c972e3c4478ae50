/* SPDX-License-Identifier: Apache-2.0 */
/* throttle.c: failed admin authentications per address (throttle.h). */
#include "auth/throttle.h"

#include "core/clock.h"
#include "core/xmalloc.h"
#include "metrics/metrics.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define THROTTLE_SLOTS 1024
#define THROTTLE_MAX_MS 10000

struct slot {
    char addr[48];   /* "" = free */
    uint32_t fails;  /* in a row */
    int64_t until;   /* monotonic ms: no check before this */
    int64_t last_ms; /* the last failure */
};

struct auth_throttle {
    pthread_mutex_t mu;
    int64_t base_ms; /* the first wait; 0 = none */
    struct slot slots[THROTTLE_SLOTS];
    _Atomic uint64_t failures, throttled;
};

static void
collect(void *arg, struct metrics_text *mt)
{
    struct auth_throttle *t = arg;

    metrics_counter(mt, "roomd_admin_auth_failures_total",
                    "admin authentications refused (wrong or missing admin token)",
                    atomic_load(&t->failures));
    metrics_counter(mt, "roomd_admin_auth_throttled_total",
                    "admin requests refused unchecked: their address is waiting after failures",
                    atomic_load(&t->throttled));
}

struct auth_throttle *
auth_throttle_open(int64_t base_ms)
{
    struct auth_throttle *t = xcalloc(1, sizeof(*t));

    t->base_ms = base_ms;
    pthread_mutex_init(&t->mu, NULL);
    metrics_add_collector(collect, t);
    return t;
}

void
auth_throttle_close(struct auth_throttle *t)
{
    if (t == NULL)
        return;
    metrics_remove_collector(collect, t);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

/* The slot of addr; with make, a free or the least recently failed one
 * taken for it. NULL when absent (make false). Called under t->mu. */
static struct slot *
slot_of(struct auth_throttle *t, const char *addr, bool make)
{
    struct slot *oldest = &t->slots[0];

    for (size_t i = 0; i < THROTTLE_SLOTS; i++) {
        struct slot *s = &t->slots[i];
        if (strcmp(s->addr, addr) == 0 && s->addr[0] != '\0')
            return s;
        if (s->addr[0] == '\0' || s->last_ms < oldest->last_ms)
            oldest = s;
    }
    if (!make)
        return NULL;
    memset(oldest, 0, sizeof(*oldest));
    strlcpy_(oldest->addr, addr, sizeof(oldest->addr));
    return oldest;
}

int64_t
auth_throttle_wait_ms(struct auth_throttle *t, const char *addr)
{
    int64_t wait = 0, now;

    if (t == NULL || addr == NULL || addr[0] == '\0')
        return 0;
    now = clock_mono_ms();
    pthread_mutex_lock(&t->mu);
    struct slot *s = slot_of(t, addr, false);
    if (s != NULL && s->until > now)
        wait = s->until - now;
    pthread_mutex_unlock(&t->mu);
    if (wait > 0)
        atomic_fetch_add(&t->throttled, 1);
    return wait;
}

void
auth_throttle_result(struct auth_throttle *t, const char *addr, bool ok)
{
    int64_t now, delay;

    if (t == NULL || addr == NULL || addr[0] == '\0')
        return;
    now = clock_mono_ms();
    if (!ok)
        atomic_fetch_add(&t->failures, 1);
    pthread_mutex_lock(&t->mu);
    struct slot *s = slot_of(t, addr, !ok);
    if (s != NULL && ok) {
        s->addr[0] = '\0'; /* forgotten */
    } else if (s != NULL) {
        if (now - s->last_ms > 6 * THROTTLE_MAX_MS)
            s->fails = 0; /* an old mistake does not count */
        s->fails++;
        delay = t->base_ms == 0 ? 0
                : s->fails > 20 ? THROTTLE_MAX_MS
                                : t->base_ms << (s->fails - 1);
        s->until = now + (delay < THROTTLE_MAX_MS ? delay : THROTTLE_MAX_MS);
        s->last_ms = now;
    }
    pthread_mutex_unlock(&t->mu);
}
