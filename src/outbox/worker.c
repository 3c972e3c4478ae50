/* SPDX-License-Identifier: Apache-2.0 */
/*
 * worker.c: the OUTBOX PATH (ARCHITECTURE §2; seed 数据状态, 重试和死信).
 * cfg->workers threads each loop: take rows the command path handed off
 * (already claimed at insert, outbox_handoff_*), or claim a batch (a wake-up
 * after a commit that could not hand off, poll_interval, start-up) -> build
 * each event once (event.c) -> publish to the sinks not yet done (a batch
 * sink once per batch of at most batch_size rows; a claim after a full one
 * takes up to claim_batches batches, published one after the other) ->
 * complete the claim's rows in one transaction, fenced by locked_by. A batch
 * whose last sink answers asynchronously stays in the air (struct flight)
 * while the worker takes and publishes the next one; its completion then
 * shares the next claim's transaction when a claim comes at once.
 * Outcomes: delivered, retryable with backoff, failed (dead letter).
 * Read top-down; docs/outbox.md; sinks are in publish/, the SQL in store/.
 * This file: the loop (next_work, worker_main) and open/close; a batch's
 * publish is dispatch.c, its claim and completion claim.c, the per-room
 * order inside a batch order.c, the sinks' circuits circuit.c.
 */
#include "outbox/outbox.h"

#include "outbox/internal.h"

#include "conf/conf.h"
#include "core/backoff.h"
#include "core/clock.h"
#include "core/crash.h"
#include "core/err.h"
#include "core/log.h"
#include "core/xmalloc.h"
#include "metrics/metrics.h"
#include "outbox/handoff.h"
#include "outbox/retention.h"
#include "publish/sink.h"
#include "store/store.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ==== waiting ==== */

void
outbox_wake(struct outbox *ob)
{
    if (ob == NULL)
        return;
    pthread_mutex_lock(&ob->pool.mu);
    ob->wake_seq++;
    pthread_cond_signal(&ob->pool.cv);
    pthread_mutex_unlock(&ob->pool.mu);
}

void
outbox_stats(struct outbox *ob, struct outbox_stats *out)
{
    pthread_mutex_lock(&ob->pool.mu);
    *out = ob->stats;
    pthread_mutex_unlock(&ob->pool.mu);
    out->order_held = (uint64_t)atomic_load(&ob->order_held);
    out->order_failed = (uint64_t)atomic_load(&ob->order_failed);
    out->order_busy = (uint64_t)atomic_load(&ob->order_busy);
    out->order_affine = (uint64_t)atomic_load(&ob->order_affine);
}

int64_t
outbox_stats_handoff_pct_us(const struct outbox_stats *s, double p)
{
    uint64_t total = 0, seen = 0;

    for (int b = 0; b < OUTBOX_LAT_BUCKETS; b++)
        total += s->handoff_lat[b];
    if (total == 0)
        return 0;
    for (int b = 0; b < OUTBOX_LAT_BUCKETS; b++) {
        seen += s->handoff_lat[b];
        if ((double)seen >= p * (double)total)
            return (int64_t)(b + 1) * OUTBOX_LAT_BUCKET_US;
    }
    return (int64_t)OUTBOX_LAT_BUCKETS * OUTBOX_LAT_BUCKET_US;
}

/* ==== the worker loop ==== */

enum work { WORK_STOP, WORK_CLAIM, WORK_HANDOFF, WORK_NONE };

/*
 * Waits for the worker's next job: a claim (its poll is due, or a wake-up
 * came and the store is not down), or a batch from the hand-off queue
 * (*b; the caller owns it). When both wait they alternate, so neither
 * starves the other. Waits for a job until clock_mono_ms reaches until_ms
 * (0: not at all, the worker has a batch in the air to land; INT64_MAX: as
 * long as it takes), then returns WORK_NONE.
 */
static enum work
next_work(struct worker *w, int64_t until_ms, struct handoff_batch *b)
{
    struct outbox *ob = w->ob;
    enum work what;

    pthread_mutex_lock(&ob->pool.mu);
    for (;;) {
        int64_t now = clock_mono_ms();
        bool claim_due = now >= w->next_claim_ms || (!w->down && ob->wake_seq != ob->taken_seq);
        bool queued = handoff_ready(ob);

        if (bg_thread_stopping(&ob->pool)) {
            what = WORK_STOP;
            break;
        }
        if (claim_due && (!queued || !w->last_was_claim)) {
            if (!w->down)
                ob->taken_seq = ob->wake_seq;
            what = WORK_CLAIM;
            break;
        }
        if (queued) {
            handoff_take(ob, (size_t)ob->cfg.batch_size, false, b);
            if (handoff_ready(ob))
                pthread_cond_signal(&ob->pool.cv); /* the rest to another idle worker */
            what = WORK_HANDOFF;
            break;
        }
        if (now >= until_ms) {
            pthread_mutex_unlock(&ob->pool.mu);
            return WORK_NONE;
        }
        bg_thread_wait_locked(&ob->pool,
                              (w->next_claim_ms < until_ms ? w->next_claim_ms : until_ms) - now);
    }
    w->last_was_claim = what == WORK_CLAIM;
    pthread_mutex_unlock(&ob->pool.mu);
    return what;
}

/*
 * The worker: batch k+1 is claimed (or taken from the hand-off queue) and
 * published while batch k's acks are in the air (air); k then lands, and
 * its completion goes into the next claim's transaction when a claim comes
 * at once (done), else it is gathered (struct gather) with the other landed
 * batches' and written with them, while k+1's acks are in the air.
 */
static void *
worker_main(void *arg)
{
    struct worker *w = arg;
    struct outbox *ob = w->ob;
    struct flight *air = NULL, *done = NULL;
    struct gather g = {0};

    /* next_claim_ms 0: claim at once on start, rows left by a previous run */
    for (;;) {
        struct handoff_batch b = {0};
        bool idle = air == NULL && done == NULL;
        /* idle with gathered completions: wait for work until they are due */
        int64_t until = !idle ? 0 : g.n > 0 ? g.since_ms + ob->cfg.complete_gather_ms : INT64_MAX;
        enum work what = next_work(w, until, &b);

        if (what == WORK_STOP || what == WORK_NONE) {
            /* nothing to do at once: land what is in the air; the gathered
             * completions are written when due, on stop, or once the wait
             * for work ran out */
            if (air != NULL) {
                gather_before_land(ob, &g);
                flight_land(ob, air);
            }
            gather_add(ob, &g, done);
            gather_add(ob, &g, air);
            if (what == WORK_STOP || idle)
                gather_flush(ob, &g);
            air = done = NULL;
            if (what == WORK_STOP)
                break;
            continue;
        }
        if (what == WORK_CLAIM) {
            gather_flush(ob, &g); /* the gathered ones before the claim's */
            b.rows = claim(w, done, &b.n);
            done = NULL;
        } else if (b.n > 0) {
            test_crash("after_claim"); /* handed-off rows: claimed at their insert */
        }
        struct flight *next = b.n > 0 ? flight_start(ob, &b) : NULL;
        if (next == NULL)
            handoff_batch_free(&b);
        gather_add(ob, &g, done); /* a hand-off batch came instead of a claim */
        done = NULL;
        if (air != NULL) {
            gather_before_land(ob, &g);
            flight_land(ob, air);
            done = air;
        }
        air = NULL;
        if (next != NULL && next->air.handle == NULL) {
            flight_land(ob, next); /* nothing in the air: landed already */
            gather_add(ob, &g, done);
            done = next;
        } else {
            air = next;
        }
        /* keep a landed batch for the next claim's transaction only when
         * that claim comes at once */
        if (done != NULL && !claims_next(w)) {
            gather_add(ob, &g, done);
            done = NULL;
        }
    }
    free(g.f);
    return NULL;
}

/* ==== open / close ==== */

static void
node_name(const char *node_id, char *buf, size_t len)
{
    char host[64] = "host";

    if (node_id != NULL && *node_id) {
        strlcpy_(buf, node_id, len);
        return;
    }
    gethostname(host, sizeof(host) - 1);
    host[sizeof(host) - 1] = '\0';
    snprintf(buf, len, "%s-%d", host, (int)getpid());
}

/* v, or dflt when v is below 1 (a setting left 0 by a caller that filled
 * struct conf_outbox by hand). */
static int64_t
positive_or(int64_t v, int64_t dflt)
{
    return v < 1 ? dflt : v;
}

int
outbox_open(struct outbox **out, const struct conf_outbox *cfg, const struct conf_store *retention,
            struct store *store, const char *node_id, struct sink **sinks, size_t nsinks)
{
    struct outbox *ob = xcalloc(1, sizeof(*ob));
    char node[STORE_ID_MAX];
    int rc = 0;

    *out = NULL;
    ob->cfg = *cfg;
    ob->cfg.workers = (int)positive_or(ob->cfg.workers, 1);
    ob->cfg.batch_size = (int)positive_or(ob->cfg.batch_size, 1);
    ob->cfg.claim_batches = (int)positive_or(ob->cfg.claim_batches, 1);
    ob->cfg.poll_interval_ms = positive_or(ob->cfg.poll_interval_ms, 1000);
    ob->cfg.lock_timeout_ms = positive_or(ob->cfg.lock_timeout_ms, 60000);
    ob->cfg.circuit_failures = (int)positive_or(ob->cfg.circuit_failures, 5);
    ob->cfg.circuit_probe_ms = positive_or(ob->cfg.circuit_probe_ms, 1000);
    ob->store = store;
    ob->nsinks = nsinks;
    ob->sinks = xcalloc(nsinks > 0 ? nsinks : 1, sizeof(*ob->sinks));
    for (size_t i = 0; i < nsinks; i++)
        ob->sinks[i] = sinks[i];
    bg_thread_init(&ob->pool);
    circuit_init(ob);
    atomic_init(&ob->store_down, false);
    outbox_metrics_init(ob);

    int64_t parts_ms; /* a deep claim's publish time at most; overflow: "too long" */
    if (__builtin_mul_overflow((int64_t)ob->cfg.claim_batches, ob->cfg.publish_timeout_ms,
                               &parts_ms))
        parts_ms = INT64_MAX;
    if (ob->cfg.lock_timeout_ms <= ob->cfg.publish_timeout_ms)
        log_warn("outbox", "lock_timeout <= publish_timeout: rows are handed back unpublished",
                 "lock_timeout_ms=%lld publish_timeout_ms=%lld", (long long)ob->cfg.lock_timeout_ms,
                 (long long)ob->cfg.publish_timeout_ms);
    else if (ob->cfg.lock_timeout_ms <= parts_ms)
        log_warn("outbox",
                 "lock_timeout <= claim_batches x publish_timeout: a deep claim's last "
                 "batches may be handed back unpublished",
                 "lock_timeout_ms=%lld claim_batches=%d publish_timeout_ms=%lld",
                 (long long)ob->cfg.lock_timeout_ms, ob->cfg.claim_batches,
                 (long long)ob->cfg.publish_timeout_ms);

    node_name(node_id, node, sizeof(node));
    handoff_init(ob, node);
    ob->nworkers = ob->cfg.workers;
    ob->workers = xcalloc((size_t)ob->nworkers, sizeof(*ob->workers));
    for (int i = 0; i < ob->nworkers; i++) {
        struct worker *w = &ob->workers[i];
        w->ob = ob;
        snprintf(w->locked_by, sizeof(w->locked_by), "%.48s/w%d", node, i); /* fits 63 */
        w->next_claim_ms = 0;
        if ((rc = bg_thread_spawn(&ob->pool, worker_main, w)) != 0)
            break;
    }
    if (rc == 0)
        rc = retention_open(&ob->retention, retention, store);
    if (rc != 0) {
        outbox_close(ob);
        return rc;
    }
    if (metrics_add_collector(outbox_collect_metrics, ob) == 0)
        ob->metrics = true;
    log_info("outbox", "workers started",
             "workers=%d batch_size=%d claim_batches=%d poll_interval_ms=%lld "
             "lock_timeout_ms=%lld sinks=%zu node=%s handoff_rows=%zu",
             ob->nworkers, ob->cfg.batch_size, ob->cfg.claim_batches,
             (long long)ob->cfg.poll_interval_ms, (long long)ob->cfg.lock_timeout_ms, nsinks, node,
             ob->handoff_cap);
    *out = ob;
    return 0;
}

/* At close: rows still in the hand-off queue go back to the store at once
 * (retryable now, no attempt counted) rather than waiting for their lock to
 * expire. If the store refuses, they are reclaimed after the lock. */
static void
release_queued(struct outbox *ob)
{
    struct handoff_batch b;
    size_t n = handoff_take(ob, ob->qlen, true, &b);
    struct outbox_row *rows = b.rows;
    struct outbox_result *res;
    int64_t now = clock_wall_ms();

    if (n == 0) {
        handoff_batch_free(&b);
        return;
    }
    res = xcalloc(n, sizeof(*res));
    for (size_t i = 0; i < n; i++) {
        res[i].id = rows[i].id;
        res[i].locked_by = rows[i].locked_by;
        release_row(&rows[i], &res[i], now);
        res[i].now_ms = now;
    }
    if (store_outbox_complete(ob->store, res, n) != 0)
        log_warn("outbox", "cannot hand back queued rows, reclaimed after their lock",
                 "rows=%zu err=\"%s\"", n, store_errmsg());
    else
        log_info("outbox", "handed back queued rows", "rows=%zu", n);
    free(res);
    handoff_batch_free(&b);
}

int
outbox_sink_up(struct outbox *ob, const char *name)
{
    return ob != NULL ? outbox_metrics_sink_up(ob, name) : -1;
}

void
outbox_close(struct outbox *ob)
{
    if (ob == NULL)
        return;
    if (ob->metrics)
        metrics_remove_collector(outbox_collect_metrics, ob);
    bg_thread_stop(&ob->pool); /* joins the workers */
    circuit_stop(ob);          /* joins the prober: the sinks close next */
    release_queued(ob);
    retention_close(ob->retention);
    for (size_t i = 0; i < ob->nsinks; i++)
        if (ob->sinks[i] != NULL && ob->sinks[i]->close != NULL)
            ob->sinks[i]->close(ob->sinks[i]);
    handoff_free(ob);
    circuit_free(ob);
    free(ob->workers);
    free(ob->sinks);
    free(ob);
}
