/*
 * circuit.c: one circuit breaker per sink (internal.h). Outages cost no
 * attempts (docs/outbox.md): a sink that did not answer (ROOMD_EUNAVAIL)
 * leaves its rows retryable with retry_count unchanged; after
 * outbox_worker.circuit_failures such failures in a row its circuit opens and
 * the sink is not called at all; every circuit_probe_every one call goes
 * through (half-open). Any answer (delivered, refused, "retry later") closes
 * it again and the backlog drains by itself.
 */
#include "outbox/internal.h"

#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/xmalloc.h"
#include "publish/sink.h"

#include <stdio.h>
#include <stdlib.h>

void
circuit_init(struct outbox *ob)
{
    pthread_mutex_init(&ob->circ_mu, NULL);
    ob->circ = xcalloc(ob->nsinks > 0 ? ob->nsinks : 1, sizeof(*ob->circ));
}

void
circuit_free(struct outbox *ob)
{
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

    pthread_mutex_lock(&ob->circ_mu);
    if (answered) {
        if (c->open)
            log_info("outbox", "sink answers again: circuit closed", "sink=%s", name);
        c->open = false;
        c->fails = 0;
    } else if (++c->fails >= ob->cfg.circuit_failures && !c->open) {
        c->open = true;
        c->opened++;
        c->probe_at_ms = clock_mono_ms() + ob->cfg.circuit_probe_ms;
        log_warn("outbox", "sink unreachable: circuit open, no attempts counted",
                 "sink=%s failures=%d probe_every_ms=%lld", name, c->fails,
                 (long long)ob->cfg.circuit_probe_ms);
    }
    pthread_mutex_unlock(&ob->circ_mu);
}

void
circuit_read(struct outbox *ob, size_t k, struct sink_circuit *out)
{
    pthread_mutex_lock(&ob->circ_mu);
    *out = ob->circ[k];
    pthread_mutex_unlock(&ob->circ_mu);
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
