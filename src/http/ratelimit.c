/*
 * ratelimit.c: the CreateRoom rate limit (router.h, http_create_allowed):
 * room.max_creates_per_minute per (app, owner_uid), counted in fixed
 * one-minute windows in a table of RL_SLOTS slots indexed by a hash of the
 * key. A slot taken by another key is reset for the new one, so a collision
 * can only let a creator through early (fail open), never refuse one that is
 * under its limit. Process-wide; not shared between nodes.
 */
#include "http/router.h"

#include "core/clock.h"

#include <pthread.h>
#include <string.h>

#define RL_SLOTS 4096
#define RL_WINDOW_MS 60000

struct rl_slot {
    uint64_t key;
    int64_t window; /* clock_mono / RL_WINDOW_MS */
    int count;
};

static struct rl_slot slots[RL_SLOTS];
static pthread_mutex_t rl_mu = PTHREAD_MUTEX_INITIALIZER;

/* FNV-1a of app, then the owner's bytes; never 0 (0 marks a free slot). */
static uint64_t
key_of(const char *app, int64_t owner)
{
    uint64_t h = 1469598103934665603ULL;

    for (const char *p = app; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    for (int i = 0; i < 8; i++)
        h = (h ^ (uint64_t)((owner >> (8 * i)) & 0xff)) * 1099511628211ULL;
    return h ? h : 1;
}

int
http_create_allowed(int per_minute, const char *app, int64_t owner)
{
    int64_t now = clock_mono_us() / 1000, window = now / RL_WINDOW_MS;
    uint64_t key = key_of(app, owner);
    struct rl_slot *s = &slots[key % RL_SLOTS];
    int retry = 0;

    if (per_minute <= 0)
        return 0;
    pthread_mutex_lock(&rl_mu);
    if (s->key != key || s->window != window) {
        s->key = key;
        s->window = window;
        s->count = 0;
    }
    if (s->count >= per_minute)
        retry = (int)((RL_WINDOW_MS - now % RL_WINDOW_MS + 999) / 1000);
    else
        s->count++;
    pthread_mutex_unlock(&rl_mu);
    return retry;
}
