/* SPDX-License-Identifier: Apache-2.0 */
/*
 * claim.c: the OUTBOX PATH's store side (seed 数据状态): a worker's claim of
 * due rows (with a landed batch's completion in the same transaction when
 * it claims at once), and the completions of landed batches, alone or
 * gathered several into one transaction, fenced by locked_by and retried
 * while the store is briefly unavailable. Called by the worker threads
 * (worker.c); blocks on the store.
 */
#include "outbox/internal.h"

#include "conf/conf.h"
#include "core/backoff.h"
#include "core/clock.h"
#include "core/crash.h"
#include "core/err.h"
#include "core/log.h"
#include "core/xmalloc.h"
#include "publish/sink.h"
#include "store/store.h"

#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Retries of a batch completion while the store is briefly unavailable. */
#define COMPLETE_TRIES 3

/* ==== store state, logged once per change ==== */

static void
store_trouble(struct outbox *ob, const char *what, int rc)
{
    if (!atomic_exchange(&ob->store_down, true))
        log_warn("outbox", "store unavailable, backing off", "op=%s rc=%s err=\"%s\"", what,
                 roomd_strerror(rc), store_errmsg());
}

static void
store_fine(struct outbox *ob)
{
    if (atomic_exchange(&ob->store_down, false))
        log_info("outbox", "store available again", NULL);
}

/* Logs the completions the store refused (res[i].rc ESTALE). */
static void
log_refused(const struct outbox_row *rows, const struct outbox_result *res, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (res[i].rc == ROOMD_ESTALE)
            log_warn("outbox",
                     "completion refused: the lock expired and another claimer took "
                     "the row",
                     "id=%lld event_id=%s locked_by=%s status=%s", (long long)rows[i].id,
                     rows[i].event_id, res[i].locked_by, outbox_status_name(res[i].status));
}

/* Writes the outcomes res[0..n), fenced by locked_by (each res[i].rc set).
 * Returns false when the store could not take them now (after
 * COMPLETE_TRIES): they are left, and the rows are reclaimed after their
 * lock expires. Blocks on the store. */
static bool
complete_results(struct outbox *ob, struct outbox_result *res, size_t n)
{
    int rc = 0;

    pthread_mutex_lock(&ob->pool.mu);
    ob->stats.completions++;
    pthread_mutex_unlock(&ob->pool.mu);

    for (int attempt = 0; attempt < COMPLETE_TRIES; attempt++) {
        if ((rc = store_outbox_complete(ob->store, res, n)) == 0)
            break;
        store_trouble(ob, "complete", rc);
        usleep(100 * 1000);
    }
    if (rc != 0)
        return false;
    store_fine(ob);
    return true;
}

/* complete_results, then logs the refused completions of rows. */
static void
complete_batch(struct outbox *ob, const struct outbox_row *rows, struct outbox_result *res,
               size_t n)
{
    if (complete_results(ob, res, n))
        log_refused(rows, res, n);
}

/* Counts f's times (complete_us: its completion, or 0 when it shared a
 * claim's transaction) and frees it. */
void
flight_free(struct outbox *ob, struct flight *f, int64_t complete_us)
{
    pthread_mutex_lock(&ob->pool.mu);
    ob->stats.batches++;
    ob->stats.batch_rows += f->n;
    ob->stats.build_us += f->t1 - f->t0;
    ob->stats.publish_us += f->t2 - f->t1;
    ob->stats.complete_us += complete_us;
    for (size_t i = 0; f->pushed_us != NULL && i < f->n; i++)
        if (!f->sl[i].released && f->sl[i].rc == 0) {
            int64_t b = (f->t2 - f->pushed_us[i]) / OUTBOX_LAT_BUCKET_US;
            ob->stats.handoff_lat[b < OUTBOX_LAT_BUCKETS ? b : OUTBOX_LAT_BUCKETS - 1]++;
            ob->stats.handoff_lat_sum_us += f->t2 - f->pushed_us[i];
        }
    pthread_mutex_unlock(&ob->pool.mu);
    for (size_t i = 0; i < f->n; i++) {
        free(f->errs[i]);
        free((void *)f->sl[i].ev.envelope);
        free((void *)f->sl[i].ev.json);
    }
    if (f->rooms != NULL)
        handoff_done(ob, f->rooms, f->n);
    outbox_rows_free(f->rows, f->n);
    free(f->pushed_us);
    free(f->rooms);
    free(f->errs);
    free(f->res);
    free(f->sl);
    free(f);
}

/* Completes a landed flight on its own and frees it (NULL: nothing). */
void
flight_complete(struct outbox *ob, struct flight *f)
{
    if (f == NULL)
        return;
    int64_t t = clock_mono_us();
    complete_batch(ob, f->rows, f->res, f->n);
    flight_free(ob, f, clock_mono_us() - t);
}

/* Writes the completions of every flight of g in one store_outbox_complete
 * (with complete_batch's retries), stamped with the time of the write, and
 * frees the flights; g is empty after. Blocks on the store. */
void
gather_flush(struct outbox *ob, struct gather *g)
{
    if (g->n <= 1) {
        if (g->n == 1)
            flight_complete(ob, g->f[0]);
        g->n = g->rows = 0;
        return;
    }
    struct outbox_result *res = xcalloc(g->rows, sizeof(*res));
    int64_t now = clock_wall_ms();
    size_t at = 0;

    for (size_t i = 0; i < g->n; i++) {
        memcpy(res + at, g->f[i]->res, g->f[i]->n * sizeof(*res));
        at += g->f[i]->n;
    }
    /* one write time (updated_at_ms, delivered_at_ms) for all: the rows of
     * every batch with the same outcome share the store's statements */
    for (size_t i = 0; i < g->rows; i++)
        res[i].now_ms = now;
    int64_t t = clock_mono_us();
    bool ok = complete_results(ob, res, g->rows);
    int64_t share = (clock_mono_us() - t) / (int64_t)g->n;

    at = 0;
    for (size_t i = 0; i < g->n; i++) {
        struct flight *f = g->f[i];

        for (size_t j = 0; j < f->n; j++)
            f->res[j].rc = res[at + j].rc;
        at += f->n;
        if (ok)
            log_refused(f->rows, f->res, f->n);
        flight_free(ob, f, share);
    }
    free(res);
    g->n = g->rows = 0;
}

/* Adds the landed flight f (NULL: nothing) to g, and writes g when it is
 * due (complete_gather or the rows bound). */
void
gather_add(struct outbox *ob, struct gather *g, struct flight *f)
{
    if (f != NULL) {
        if (g->n == g->alloc) {
            g->alloc = g->alloc ? 2 * g->alloc : 8;
            g->f = xrealloc(g->f, g->alloc * sizeof(*g->f));
        }
        if (g->n == 0) {
            g->since_ms = clock_mono_ms();
            g->lock_min_ms = INT64_MAX;
        }
        for (size_t j = 0; j < f->n; j++)
            if (f->rows[j].lock_until_ms < g->lock_min_ms)
                g->lock_min_ms = f->rows[j].lock_until_ms;
        g->f[g->n++] = f;
        g->rows += f->n;
    }
    if (g->n > 0 && (g->rows >= GATHER_ROWS_PER_BATCH * (size_t)ob->cfg.batch_size ||
                     clock_mono_ms() - g->since_ms >= ob->cfg.complete_gather_ms))
        gather_flush(ob, g);
}

/* Before the worker waits up to publish_timeout for a batch's answers:
 * writes g now when its earliest lock would not outlast that wait and one
 * more publish_timeout for the write's retries. */
void
gather_before_land(struct outbox *ob, struct gather *g)
{
    if (g->n > 0 && g->lock_min_ms - clock_wall_ms() <= 2 * ob->cfg.publish_timeout_ms)
        gather_flush(ob, g);
}

/*
 * One claim. done, when not NULL, is a landed flight whose completion goes
 * into the claim's transaction (store_outbox_complete_claim: one commit per
 * batch on MySQL); it is freed here either way. Sets when the worker claims
 * next. Returns the claimed rows (*n of them; NULL and 0 when none or the
 * claim failed), claimed by w until their lock_until_ms.
 */
struct outbox_row *
claim(struct worker *w, struct flight *done, size_t *n)
{
    struct outbox *ob = w->ob;
    const struct conf_outbox *cfg = &ob->cfg;
    struct outbox_row *rows = NULL;
    /* a deep backlog (the last claim brought a full batch): claim_batches batches */
    int64_t want = (int64_t)cfg->batch_size * (w->deep ? cfg->claim_batches : 1);
    int limit = want < INT_MAX ? (int)want : INT_MAX;
    int64_t now = clock_wall_ms();
    int64_t lock_until = now + cfg->lock_timeout_ms;
    int64_t next, t0 = clock_mono_us();
    bool completed = false;
    int rc;

    bool per_room = cfg->ordering == ORDERING_PER_ROOM;

    *n = 0;
    if (circuit_all_probed(ob)) {
        /* No sink's peer answers: rows claimed now would be handed back
         * undelivered, due again a probe interval later, and so kept from a
         * node whose sinks answer. Land what is done; claim again after a
         * probe interval (the prober closes the circuits without rows). */
        flight_complete(ob, done);
        w->deep = false;
        pthread_mutex_lock(&ob->pool.mu);
        w->next_claim_ms = clock_mono_ms() + cfg->circuit_probe_ms;
        ob->stats.claims_paused++;
        pthread_mutex_unlock(&ob->pool.mu);
        return NULL;
    }
    if (per_room) {
        /* rows that lack only sinks whose circuit is open wait parked (not
         * claimed, holding their room for those sinks) until one closes */
        uint32_t open = circuit_parked(ob), enabled = 0;

        for (size_t k = 0; k < ob->nsinks; k++)
            enabled |= ob->sinks[k]->bit;
        store_outbox_park(ob->store, open != 0 ? enabled & ~open : 0);
    }
    if (done != NULL) {
        /* the completion first in the same transaction: the (ordered) claim
         * sees the landed rows' rooms free, and their next rows come */
        rc = store_outbox_complete_claim(ob->store, done->res, done->n, now, lock_until,
                                         w->locked_by, limit, per_room, &rows, n, &completed);
        if (completed) {
            log_refused(done->rows, done->res, done->n);
            flight_free(ob, done, 0);
        } else {
            flight_complete(ob, done); /* on its own, with its retries */
        }
    } else {
        rc = store_outbox_claim_ordered(ob->store, now, lock_until, w->locked_by, limit, per_room,
                                        &rows, n);
    }
    int64_t claim_us = clock_mono_us() - t0;
    if (rc != 0) {
        store_trouble(ob, "claim", rc);
        w->deep = false;
        int64_t initial = cfg->poll_interval_ms < 100 ? cfg->poll_interval_ms : 100;
        int64_t cap = cfg->poll_interval_ms > 2000 ? cfg->poll_interval_ms : 2000;
        pthread_mutex_lock(&ob->pool.mu);
        w->down = true;
        w->down_count++;
        w->next_claim_ms = clock_mono_ms() + backoff_delay_ms(w->down_count, initial, cap);
        pthread_mutex_unlock(&ob->pool.mu);
        *n = 0;
        return NULL;
    }
    store_fine(ob);
    /* A full batch (batch_size rows or more): claim again at once, up to
     * claim_batches batches (and let an idle worker claim too); else idle
     * until woken or polled. Ordered, any rows: again after this batch,
     * since completing them lets their rooms' next rows be claimed. */
    w->deep = *n >= (size_t)cfg->batch_size;
    next = w->deep || (per_room && *n > 0) ? 0 : clock_mono_ms() + cfg->poll_interval_ms;
    pthread_mutex_lock(&ob->pool.mu);
    w->down = false;
    w->down_count = 0;
    w->next_claim_ms = next;
    ob->stats.claims++;
    ob->stats.claimed_rows += *n;
    if (*n > ob->stats.claim_max)
        ob->stats.claim_max = *n;
    ob->stats.claim_us += claim_us;
    pthread_mutex_unlock(&ob->pool.mu);
    if (w->deep)
        outbox_wake(ob);
    for (size_t i = 0; i < *n; i++) {
        rows[i].lock_until_ms = lock_until;
        strlcpy_(rows[i].locked_by, w->locked_by, sizeof(rows[i].locked_by));
    }
    if (*n == 0) {
        free(rows);
        rows = NULL;
    } else {
        test_crash("after_claim");
    }
    return rows;
}

/* True when w claims again at once (its last claim was a full batch). */
bool
claims_next(struct worker *w)
{
    bool again;

    pthread_mutex_lock(&w->ob->pool.mu);
    again = w->next_claim_ms == 0 && !w->down;
    pthread_mutex_unlock(&w->ob->pool.mu);
    return again;
}
