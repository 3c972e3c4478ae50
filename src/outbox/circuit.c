/* SPDX-License-Identifier: Apache-2.0 */
/*
 * circuit.c: one circuit breaker per sink (internal.h). Outages cost no
 * attempts (docs/outbox.md): a sink that did not answer (ROOMD_EUNAVAIL)
 * leaves its rows retryable with retry_count unchanged; after
 * outbox_worker.circuit_failures such failures in a row its circuit opens and
 * the sink is not called at all; every circuit_probe_every one call goes
 * through (half-open). Any answer (delivered, refused, "retry later") closes
 * it again and the backlog drains by itself.
 *
 * The half-open probe is an event's call when one comes by probe_at_ms;
 * else the prober thread sends the sink's own probe (sink.h: stream info,
 * account check, health check) once it is due. So a node with no rows for
 * the sink (another node delivered them) still closes the circuit within
 * about circuit_probe_every of the sink's return, and during an outage the
 * circuit stays open: only an answer closes it, never a quiet interval.
 */
#include "outbox/internal.h"

#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/thread.h"
#include "core/xmalloc.h"
#include "publish/sink.h"

#include <stdio.h>
#include <stdlib.h>

/* Sends sink k's probe when its circuit is open and the probe is due (no
 * event took it; taking it sets the next one, as circuit_admit does, but
 * counts no skipped call), and notes the outcome. Blocks up to
 * publish_timeout. */
static void
probe_sink(struct outbox *ob, size_t k)
{
    struct sink *s = ob->sinks[k];
    struct sink_circuit *c = &ob->circ[k];
    int64_t now = clock_mono_ms();
    char err[256] = "";
    bool due;

    if (s->probe == NULL)
        return;
    pthread_mutex_lock(&ob->circ_mu);
    due = c->open && now >= c->probe_at_ms;
    if (due)
        c->probe_at_ms = now + ob->cfg.circuit_probe_ms;
    pthread_mutex_unlock(&ob->circ_mu);
    if (!due)
        return;
    int rc = s->probe(s, clock_mono_ms() + ob->cfg.publish_timeout_ms, err, sizeof(err));
    log_debug("outbox", "circuit probe", "sink=%s rc=%s err=\"%s\"", s->name, roomd_strerror(rc),
              err);
    circuit_note(ob, k, rc != ROOMD_EUNAVAIL);
}

/* Milliseconds until the next probe is due (circuit_probe_every when no
 * circuit with a probe is open), at least 10. */
static int64_t
next_probe_in(struct outbox *ob)
{
    int64_t now = clock_mono_ms(), wait = ob->cfg.circuit_probe_ms;

    pthread_mutex_lock(&ob->circ_mu);
    for (size_t k = 0; k < ob->nsinks; k++)
        if (ob->circ[k].open && ob->sinks[k]->probe != NULL && ob->circ[k].probe_at_ms - now < wait)
            wait = ob->circ[k].probe_at_ms - now;
    pthread_mutex_unlock(&ob->circ_mu);
    return wait > 10 ? wait : 10;
}

/* The prober thread: probes each open circuit when due, until stopped. */
static void *
prober_main(void *arg)
{
    struct outbox *ob = arg;

    while (!bg_thread_sleep(&ob->prober, next_probe_in(ob)))
        for (size_t k = 0; k < ob->nsinks && !bg_thread_stopping(&ob->prober); k++)
            probe_sink(ob, k);
    return NULL;
}

void
circuit_init(struct outbox *ob)
{
    bool probes = false;

    pthread_mutex_init(&ob->circ_mu, NULL);
    ob->circ = xcalloc(ob->nsinks > 0 ? ob->nsinks : 1, sizeof(*ob->circ));
    for (size_t k = 0; k < ob->nsinks; k++)
        probes = probes || ob->sinks[k]->probe != NULL;
    if (probes && bg_thread_start(&ob->prober, prober_main, ob) != 0)
        log_warn("outbox", "no prober thread: open circuits are probed by events only", NULL);
}

void
circuit_stop(struct outbox *ob)
{
    bg_thread_stop(&ob->prober); /* a no-op when never started, or stopped */
}

void
circuit_free(struct outbox *ob)
{
    circuit_stop(ob);
    free(ob->circ);
    ob->circ = NULL;
    pthread_mutex_destroy(&ob->circ_mu);
}

bool
circuit_admit(struct outbox *ob, size_t k)
{
    struct sink_circuit *c = &ob->circ[k];
    int64_t now = clock_mono_ms();
    bool ok = true;

    pthread_mutex_lock(&ob->circ_mu);
    if (c->open) {
        ok = now >= c->probe_at_ms; /* half-open: this call is the probe */
        if (ok)
            c->probe_at_ms = now + ob->cfg.circuit_probe_ms;
        else
            c->skipped++;
    }
    pthread_mutex_unlock(&ob->circ_mu);
    return ok;
}

void
circuit_note(struct outbox *ob, size_t k, bool answered)
{
    struct sink_circuit *c = &ob->circ[k];
    const char *name = ob->sinks[k]->name;
    bool closed = false;

    pthread_mutex_lock(&ob->circ_mu);
    if (answered) {
        if (c->open) {
            log_info("outbox", "sink answers again: circuit closed", "sink=%s", name);
            closed = true;
        }
        c->open = false;
        c->fails = 0;
        c->answered_ms = clock_mono_ms();
    } else if (++c->fails >= ob->cfg.circuit_failures && !c->open) {
        c->open = true;
        c->opened++;
        c->probe_at_ms = clock_mono_ms() + ob->cfg.circuit_probe_ms;
        log_warn("outbox", "sink unreachable: circuit open, no attempts counted",
                 "sink=%s failures=%d probe_every_ms=%lld", name, c->fails,
                 (long long)ob->cfg.circuit_probe_ms);
    }
    pthread_mutex_unlock(&ob->circ_mu);
    if (closed)
        outbox_wake(ob); /* the rows parked for it (circuit_parked) are claimable again */
}

bool
circuit_answered_since(struct outbox *ob, size_t k, int64_t since_ms)
{
    bool yes;

    pthread_mutex_lock(&ob->circ_mu);
    yes = ob->circ[k].answered_ms > since_ms;
    pthread_mutex_unlock(&ob->circ_mu);
    return yes;
}

void
circuit_read(struct outbox *ob, size_t k, struct sink_circuit *out)
{
    pthread_mutex_lock(&ob->circ_mu);
    *out = ob->circ[k];
    pthread_mutex_unlock(&ob->circ_mu);
}

/* True when sink k's peer is known not to answer: its own circuit is open,
 * or that of another sink reaching the same peer (sink.h). Holds circ_mu. */
static bool
peer_down(const struct outbox *ob, size_t k)
{
    if (ob->circ[k].open)
        return true;
    for (size_t j = 0; j < ob->nsinks && ob->sinks[k]->peer != NULL; j++)
        if (j != k && ob->sinks[j]->peer == ob->sinks[k]->peer && ob->circ[j].open)
            return true;
    return false;
}

uint32_t
circuit_parked(struct outbox *ob)
{
    uint32_t bits = 0;

    if (ob->prober.n == 0)
        return 0; /* no prober: an event's call is the only probe */
    pthread_mutex_lock(&ob->circ_mu);
    for (size_t k = 0; k < ob->nsinks; k++)
        if (ob->sinks[k]->probe != NULL && peer_down(ob, k))
            bits |= ob->sinks[k]->bit;
    pthread_mutex_unlock(&ob->circ_mu);
    return bits;
}

bool
circuit_all_probed(struct outbox *ob)
{
    bool all = ob->nsinks > 0 && ob->prober.n > 0;

    pthread_mutex_lock(&ob->circ_mu);
    for (size_t k = 0; k < ob->nsinks && all; k++)
        all = peer_down(ob, k) && ob->sinks[k]->probe != NULL;
    pthread_mutex_unlock(&ob->circ_mu);
    return all;
}

int
outbox_sinks_ready(void *arg, char *why, size_t whylen)
{
    struct outbox *ob = arg;
    size_t len = 0;
    int rc = 0;

    why[0] = '\0';
    pthread_mutex_lock(&ob->circ_mu);
    for (size_t k = 0; k < ob->nsinks; k++) {
        if (!ob->circ[k].open)
            continue;
        len += (size_t)snprintf(why + len, len < whylen ? whylen - len : 0, "%s%s: circuit open",
                                rc != 0 ? ", " : "", ob->sinks[k]->name);
        rc = ROOMD_EUNAVAIL;
        if (len >= whylen)
            break;
    }
    pthread_mutex_unlock(&ob->circ_mu);
    return rc;
}
