/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tim_gate.c: CreateRoom's synchronous IM group creation behind a circuit
 * (tim_gate.h).
 */
#include "publish/tim_gate.h"

#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/xmalloc.h"
#include "metrics/metrics.h"
#include "publish/tim_client.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

struct tim_gate {
    struct tim_client *tim;
    int failures;
    int64_t probe_ms;
    pthread_mutex_t mu; /* guards what follows */
    int fails;          /* calls in a row without an answer */
    bool open;
    int64_t probe_at_ms; /* clock_mono_ms: the next call let through while open */
    uint64_t skipped, calls;
    bool metrics;
};

static void
collect(void *arg, struct metrics_text *t)
{
    struct tim_gate *g = arg;
    uint64_t skipped, calls;

    pthread_mutex_lock(&g->mu);
    skipped = g->skipped;
    calls = g->calls;
    pthread_mutex_unlock(&g->mu);
    metrics_counter(t, "roomd_im_create_calls_total",
                    "CreateRoom's synchronous IM group creations called", calls);
    metrics_counter(t, "roomd_im_create_skipped_total",
                    "CreateRoom's synchronous IM group creations skipped: IM circuit open (the "
                    "outbox's RoomCreated creates the group)",
                    skipped);
}

struct tim_gate *
tim_gate_open(struct tim_client *tim, int failures, int64_t probe_ms)
{
    struct tim_gate *g = xcalloc(1, sizeof(*g));

    g->tim = tim;
    g->failures = failures > 0 ? failures : 5;
    g->probe_ms = probe_ms > 0 ? probe_ms : 1000;
    pthread_mutex_init(&g->mu, NULL);
    g->metrics = metrics_add_collector(collect, g) == 0;
    return g;
}

/* True when the call may go to IM now (closed, or the open circuit's probe). */
static bool
admit(struct tim_gate *g)
{
    int64_t now = clock_mono_ms();
    bool ok = true;

    pthread_mutex_lock(&g->mu);
    if (g->open) {
        ok = now >= g->probe_at_ms;
        if (ok)
            g->probe_at_ms = now + g->probe_ms;
    }
    if (ok)
        g->calls++;
    else
        g->skipped++;
    pthread_mutex_unlock(&g->mu);
    return ok;
}

/* What the call came to: answered (any IM answer) or not (ROOMD_EUNAVAIL). */
static void
note(struct tim_gate *g, bool answered)
{
    pthread_mutex_lock(&g->mu);
    if (answered) {
        if (g->open)
            log_info("tim", "CreateRoom: IM answers again, group creation resumed", NULL);
        g->open = false;
        g->fails = 0;
    } else if (++g->fails >= g->failures && !g->open) {
        g->open = true;
        g->probe_at_ms = clock_mono_ms() + g->probe_ms;
        log_warn("tim",
                 "CreateRoom: IM does not answer, synchronous group creation skipped "
                 "(RoomCreated creates the groups)",
                 "failures=%d probe_every_ms=%lld", g->fails, (long long)g->probe_ms);
    }
    pthread_mutex_unlock(&g->mu);
}

int
tim_gate_hook(void *arg, const char *app, const char *room_id, const char *title, int64_t owner_uid)
{
    struct tim_gate *g = arg;
    int rc;

    if (!admit(g)) {
        log_debug("tim", "CreateRoom: IM circuit open, group creation skipped",
                  "app_code=%s room_id=%s", app, room_id);
        return ROOMD_EUNAVAIL;
    }
    rc = tim_create_hook(g->tim, app, room_id, title, owner_uid);
    note(g, rc != ROOMD_EUNAVAIL && rc != ROOMD_ETIMEDOUT);
    return rc;
}

void
tim_gate_close(struct tim_gate *g)
{
    if (g == NULL)
        return;
    if (g->metrics)
        metrics_remove_collector(collect, g);
    pthread_mutex_destroy(&g->mu);
    free(g);
}
