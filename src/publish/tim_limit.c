/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tim_limit.c: the IM token buckets (tim_limit.h). A bucket is the time of
 * its next free slot (µs, monotonic): taking a slot moves it 1/rate later.
 * API buckets are few (one per IM API used) and live in a small array; group
 * buckets live in a hash table whose idle entries (slot in the past by more
 * than a second) are reused, so it stays as large as the number of groups
 * busy at once.
 */
#include "publish/tim_limit.h"

#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/xmalloc.h"
#include "metrics/metrics.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define API_MAX 32
#define NAME_MAX_ 64
#define GROUP_SLOTS 1024 /* hash chains */

struct bucket {
    char name[NAME_MAX_];
    int64_t next_us; /* the next free slot */
    struct bucket *chain;
};

struct tim_limit {
    pthread_mutex_t mu;
    int refs;
    int64_t api_gap_us, group_gap_us; /* 0 = off */
    struct bucket apis[API_MAX];
    int napis;
    struct bucket *groups[GROUP_SLOTS];
    atomic_uint_fast64_t waited, wait_us, refused;
    atomic_int_fast64_t refused_at_us; /* clock_mono_us of the last rate-limit answer, 0 none */
};

static pthread_mutex_t shared_mu = PTHREAD_MUTEX_INITIALIZER;
static struct tim_limit *shared;

static void
collect(void *arg, struct metrics_text *t)
{
    struct tim_limit *l = arg;

    metrics_counter(t, "roomd_tim_rate_waits_total", "IM calls that waited for a token bucket.",
                    atomic_load(&l->waited));
    metrics_family(t, "roomd_tim_rate_wait_seconds_total", "counter",
                   "Time IM calls waited for a token bucket.");
    metrics_value(t, "roomd_tim_rate_wait_seconds_total", "",
                  (double)atomic_load(&l->wait_us) / 1e6);
    metrics_counter(t, "roomd_tim_rate_limited_total",
                    "IM rate-limit answers (waited out and sent again).", atomic_load(&l->refused));
}

struct tim_limit *
tim_limit_get(int per_api_per_s, int per_group_per_s)
{
    pthread_mutex_lock(&shared_mu);
    if (shared == NULL) {
        shared = xcalloc(1, sizeof(*shared));
        pthread_mutex_init(&shared->mu, NULL);
        shared->api_gap_us = per_api_per_s > 0 ? 1000000 / per_api_per_s : 0;
        shared->group_gap_us = per_group_per_s > 0 ? 1000000 / per_group_per_s : 0;
        if (metrics_add_collector(collect, shared) != 0)
            log_warn("tim", "no /metrics slot for the IM rate limits", NULL);
    }
    shared->refs++;
    struct tim_limit *l = shared;
    pthread_mutex_unlock(&shared_mu);
    return l;
}

void
tim_limit_release(struct tim_limit *l)
{
    if (l == NULL)
        return;
    pthread_mutex_lock(&shared_mu);
    if (--l->refs == 0) {
        metrics_remove_collector(collect, l);
        for (int i = 0; i < GROUP_SLOTS; i++) {
            for (struct bucket *b = l->groups[i], *next; b != NULL; b = next) {
                next = b->chain;
                free(b);
            }
        }
        pthread_mutex_destroy(&l->mu);
        free(l);
        shared = NULL;
    }
    pthread_mutex_unlock(&shared_mu);
}

static uint32_t
hash(const char *s)
{
    uint32_t h = 2166136261u;

    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

/* The bucket named name in l (created or an idle one reused). Under l->mu. */
static struct bucket *
api_bucket(struct tim_limit *l, const char *name)
{
    for (int i = 0; i < l->napis; i++)
        if (strcmp(l->apis[i].name, name) == 0)
            return &l->apis[i];
    if (l->napis == API_MAX)
        return &l->apis[API_MAX - 1]; /* never with the APIs roomd calls */
    struct bucket *b = &l->apis[l->napis++];
    strlcpy_(b->name, name, sizeof(b->name));
    return b;
}

static struct bucket *
group_bucket(struct tim_limit *l, const char *name, int64_t now)
{
    struct bucket **head = &l->groups[hash(name) % GROUP_SLOTS], *idle = NULL;

    for (struct bucket *b = *head; b != NULL; b = b->chain) {
        if (strcmp(b->name, name) == 0)
            return b;
        if (idle == NULL && b->next_us + 1000000 < now)
            idle = b;
    }
    if (idle == NULL) {
        idle = xcalloc(1, sizeof(*idle));
        idle->chain = *head;
        *head = idle;
    }
    strlcpy_(idle->name, name, sizeof(idle->name));
    idle->next_us = 0;
    return idle;
}

int
tim_limit_wait(struct tim_limit *l, const char *api, const char *group, int64_t deadline_mono_ms)
{
    int64_t now = clock_mono_us(), at = now;
    struct bucket *a = NULL, *g = NULL;

    pthread_mutex_lock(&l->mu);
    if (l->api_gap_us > 0) {
        a = api_bucket(l, api);
        if (a->next_us > at)
            at = a->next_us;
    }
    if (l->group_gap_us > 0 && group != NULL) {
        g = group_bucket(l, group, now);
        if (g->next_us > at)
            at = g->next_us;
    }
    if (at > deadline_mono_ms * 1000) {
        pthread_mutex_unlock(&l->mu);
        return ROOMD_ETIMEDOUT;
    }
    if (a != NULL)
        a->next_us = at + l->api_gap_us;
    if (g != NULL)
        g->next_us = at + l->group_gap_us;
    pthread_mutex_unlock(&l->mu);
    if (at > now) {
        struct timespec ts = {(at - now) / 1000000, ((at - now) % 1000000) * 1000};
        atomic_fetch_add(&l->waited, 1);
        atomic_fetch_add(&l->wait_us, (uint64_t)(at - now));
        nanosleep(&ts, NULL);
    }
    return 0;
}

void
tim_limit_refused(struct tim_limit *l)
{
    atomic_fetch_add(&l->refused, 1);
    atomic_store(&l->refused_at_us, clock_mono_us());
}

bool
tim_limit_refused_within(struct tim_limit *l, int64_t ms)
{
    int64_t at = atomic_load(&l->refused_at_us);

    return at != 0 && clock_mono_us() - at < ms * 1000;
}

int64_t
tim_limit_group_backlog_us(struct tim_limit *l, const char *group)
{
    int64_t now = clock_mono_us(), wait = 0;

    if (l->group_gap_us <= 0 || group == NULL)
        return 0;
    pthread_mutex_lock(&l->mu);
    for (struct bucket *b = l->groups[hash(group) % GROUP_SLOTS]; b != NULL; b = b->chain)
        if (strcmp(b->name, group) == 0) {
            wait = b->next_us > now ? b->next_us - now : 0;
            break;
        }
    pthread_mutex_unlock(&l->mu);
    return wait;
}

int64_t
tim_limit_group_gap_us(const struct tim_limit *l)
{
    return l->group_gap_us;
}
