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
 */
#include "outbox/outbox.h"

#include "outbox/internal.h"

#include "conf/conf.h"
#include "core/backoff.h"
#include "core/clock.h"
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

/* One sink's reason in a row's last_error. */
#define SINK_ERR_LEN 256
/* Retries of a batch completion while the store is briefly unavailable. */
#define COMPLETE_TRIES 3

/* ==== waiting ==== */

static bool
stopping(struct outbox *ob)
{
    return bg_thread_stopping(&ob->pool);
}

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

/* ==== one row ==== */

static void
append_error(char *buf, const char *sink, const char *msg)
{
    size_t len = strlen(buf);

    if (len + 3 >= LAST_ERROR_MAX)
        return;
    snprintf(buf + len, LAST_ERROR_MAX - len, "%s%s: %s", len > 0 ? "; " : "", sink,
             *msg ? msg : "failed");
    for (char *p = buf + len; *p; p++)
        if (*p == '"' || *p == '\n')
            *p = '\''; /* keeps the logfmt line one line, its quoting intact */
}

/* Hands a row back without an attempt (its lock is too short to publish
 * safely, or we are stopping): retryable now, nothing counted. */
static void
release_row(const struct outbox_row *row, struct outbox_result *res, int64_t now)
{
    res->status = OUTBOX_RETRYABLE;
    res->retry_count = row->retry_count;
    res->sinks_done = row->sinks_done;
    res->next_retry_at_ms = now;
    res->last_error = row->last_error;
}

/* Notes that sink s was called for sl (or timed out before) with outcome o. */
static void
note_call(struct slot *sl, const struct sink *s, enum sink_call o)
{
    int b = __builtin_ctz(s->bit);

    sl->tried |= s->bit;
    if (o != CALL_OK)
        sl->failed |= s->bit;
    if (b < OUTBOX_SINK_BITS)
        sl->outcome[b] = (uint8_t)o;
}

/* Marks sl failed for sink s by an outage (why): retried, no attempt counted. */
static void
outage(struct slot *sl, const struct sink *s, const char *why)
{
    append_error(sl->err, s->name, why);
    if (sl->rc == 0)
        sl->rc = ROOMD_ERETRY;
}

/* Records what sink k answered (prc, reason serr) for sl, and feeds its circuit. */
static void
sink_outcome(struct outbox *ob, size_t k, struct slot *sl, int prc, const char *serr)
{
    const struct sink *s = ob->sinks[k];

    note_call(sl, s, sink_call_of(prc));
    circuit_note(ob, k, prc != ROOMD_EUNAVAIL);
    if (prc == ROOMD_EUNAVAIL) {
        outage(sl, s, *serr ? serr : roomd_strerror(prc));
    } else if (prc == 0) {
        sl->done |= s->bit;
    } else if (prc == ROOMD_EPERM) {
        append_error(sl->err, s->name, serr);
        sl->rc = ROOMD_EPERM;
        sl->finished = true; /* a sink refused for good: the rest are not called */
    } else {
        append_error(sl->err, s->name, *serr ? serr : roomd_strerror(prc));
        sl->rc = ROOMD_ERETRY;
        sl->counted = true;
    }
}

/* True when sink s still has to deliver sl. */
static bool
sink_needed(const struct slot *sl, struct sink *s)
{
    return !sl->released && !sl->finished && !(sl->done & s->bit) &&
           (s->accepts == NULL || s->accepts(s, &sl->ev));
}

/* Calls sink k's publish for sl unless deadline already passed or its
 * circuit is open. */
static void
publish_one(struct outbox *ob, size_t k, struct slot *sl, int64_t deadline)
{
    struct sink *s = ob->sinks[k];
    char serr[SINK_ERR_LEN] = "";

    if (clock_mono_ms() >= deadline) {
        outage(sl, s, "publish_timeout exceeded before the call");
        note_call(sl, s, CALL_TIMEOUT);
        return;
    }
    if (!circuit_admit(ob, k)) {
        outage(sl, s, "circuit open: the sink did not answer lately");
        return;
    }
    sink_outcome(ob, k, sl, s->publish(s, &sl->ev, deadline, serr, sizeof(serr)), serr);
}

/* One batch sink's call for a batch: the events of the slots that need it
 * (idx: their slots), and what it answered. */
struct batch_call {
    size_t ks; /* the sink */
    struct outbox_event *evs;
    size_t *idx;
    int *rcs;
    char *errs;
    size_t k;     /* events in the call */
    void *handle; /* publish_start's, while the answers are outstanding */
};

/*
 * Calls the batch sink ks once for every slot of sl[lo..hi) that still
 * needs it (rows whose earlier sinks refused for good are left out, as
 * calling the sinks row by row would), within deadline. With async and a
 * sink that offers publish_start, returns with the answers outstanding
 * (bc->handle; batch_call_end collects them); else with them in.
 */
static void
batch_call_begin(struct outbox *ob, size_t ks, struct slot *sl, size_t lo, size_t hi,
                 int64_t deadline, bool async, struct batch_call *bc)
{
    struct sink *s = ob->sinks[ks];
    size_t n = hi - lo;

    *bc = (struct batch_call){.ks = ks};
    bc->evs = xcalloc(n, sizeof(*bc->evs));
    bc->idx = xcalloc(n, sizeof(*bc->idx));
    bc->rcs = xcalloc(n, sizeof(*bc->rcs));
    bc->errs = xcalloc(n, SINK_ERR_LEN);
    for (size_t i = lo; i < hi; i++)
        if (sink_needed(&sl[i], s)) {
            bc->idx[bc->k] = i;
            bc->evs[bc->k++] = sl[i].ev;
        }
    if (bc->k > 0 && clock_mono_ms() >= deadline) {
        for (size_t j = 0; j < bc->k; j++) {
            outage(&sl[bc->idx[j]], s, "publish_timeout exceeded before the call");
            note_call(&sl[bc->idx[j]], s, CALL_TIMEOUT);
        }
        bc->k = 0;
    } else if (bc->k > 0 && !circuit_admit(ob, ks)) {
        for (size_t j = 0; j < bc->k; j++)
            outage(&sl[bc->idx[j]], s, "circuit open: the sink did not answer lately");
        bc->k = 0;
    } else if (bc->k > 0 && async && s->publish_start != NULL) {
        bc->handle = s->publish_start(s, bc->evs, bc->k, deadline, bc->rcs, bc->errs, SINK_ERR_LEN);
    } else if (bc->k > 0) {
        s->publish_batch(s, bc->evs, bc->k, deadline, bc->rcs, bc->errs, SINK_ERR_LEN);
    }
}

/* Waits for bc's outstanding answers (if any), records them in sl and
 * frees bc's arrays. */
static void
batch_call_end(struct outbox *ob, struct slot *sl, struct batch_call *bc)
{
    struct sink *s = ob->sinks[bc->ks];

    if (bc->handle != NULL)
        s->publish_finish(s, bc->handle);
    for (size_t j = 0; j < bc->k; j++) {
        bc->errs[(j + 1) * SINK_ERR_LEN - 1] = '\0';
        sink_outcome(ob, bc->ks, &sl[bc->idx[j]], bc->rcs[j], bc->errs + j * SINK_ERR_LEN);
    }
    free(bc->errs);
    free(bc->rcs);
    free(bc->idx);
    free(bc->evs);
    memset(bc, 0, sizeof(*bc));
}

/*
 * Fills res from sl's outcome (delivered, retryable with backoff, failed)
 * and logs at most one line: a failed attempt. *errtext gets the malloc'd
 * last_error (or NULL) that res points at.
 */
static void
finish_row(struct outbox *ob, const struct slot *sl, struct outbox_result *res, char **errtext)
{
    const struct conf_outbox *cfg = &ob->cfg;
    const struct outbox_row *row = sl->row;
    bool permanent = sl->rc == ROOMD_EPERM;
    int64_t now = clock_wall_ms();

    res->sinks_done = sl->done;
    res->retry_count = row->retry_count;
    res->next_retry_at_ms = 0;
    res->last_error = NULL;
    *errtext = NULL;
    if (sl->rc == 0) {
        res->status = OUTBOX_DELIVERED;
        return;
    }
    if (sl->held && !permanent && !sl->counted) {
        /* Held behind an earlier row of its room: retryable now, nothing
         * counted; the ordered claim takes it once that row is done. */
        char why[LAST_ERROR_MAX];

        snprintf(why, sizeof(why), "%s%sheld: an earlier event of its room is not delivered",
                 sl->err, *sl->err ? "; " : "");
        *errtext = xstrdup(why);
        res->last_error = *errtext;
        res->status = OUTBOX_RETRYABLE;
        res->next_retry_at_ms = now;
        return;
    }
    if (!permanent && !sl->counted) {
        /* Only outages: the event is not at fault. Again after a probe
         * interval, retry_count unchanged; never failed for this. */
        *errtext = xstrdup(sl->err);
        res->last_error = *errtext;
        res->status = OUTBOX_RETRYABLE;
        res->next_retry_at_ms = now + cfg->circuit_probe_ms;
        atomic_fetch_add(&ob->outage_rows, 1);
        log_debug("outbox", "sink unreachable, no attempt counted",
                  "id=%lld event_id=%s retry_count=%d err=\"%s\"", (long long)row->id,
                  row->event_id, row->retry_count, sl->err);
        return;
    }
    res->retry_count = row->retry_count + 1;
    *errtext = xstrdup(sl->err);
    res->last_error = *errtext;
    if (!permanent && res->retry_count < cfg->max_retry_count) {
        res->status = OUTBOX_RETRYABLE;
        res->next_retry_at_ms =
            now + backoff_delay_ms(res->retry_count, cfg->initial_backoff_ms, cfg->max_backoff_ms);
        log_warn("outbox", "publish failed, will retry",
                 "id=%lld event_id=%s event_type=%s attempt=%d next_retry_at_ms=%lld "
                 "sinks_done=%u err=\"%s\"",
                 (long long)row->id, row->event_id, row->event_type, res->retry_count,
                 (long long)res->next_retry_at_ms, (unsigned)sl->done, sl->err);
    } else {
        res->status = OUTBOX_FAILED;
        if (cfg->ordering == ORDERING_PER_ROOM)
            atomic_fetch_add(&ob->order_failed, 1); /* the room's later events go on */
        log_error("outbox", "dead letter: event failed",
                  "id=%lld event_id=%s event_type=%s attempt=%d permanent=%d sinks_done=%u "
                  "err=\"%s\"",
                  (long long)row->id, row->event_id, row->event_type, res->retry_count,
                  (int)permanent, (unsigned)sl->done, sl->err);
    }
}

/* ==== one batch ==== */

/* Feeds the per-sink metrics with what sl's attempt came to (res, already
 * filled): each call's outcome, the commit -> delivered lag of each sink
 * that delivered it now (lag_us), a dead letter's missing sinks. */
static void
record_metrics(struct outbox *ob, const struct slot *sl, const struct outbox_result *res,
               int64_t lag_us)
{
    uint32_t now_done = sl->done & ~sl->row->sinks_done;

    for (int b = 0; b < OUTBOX_SINK_BITS; b++) {
        uint32_t bit = 1u << b;
        if (sl->tried & bit)
            outbox_metrics_attempt(ob, bit, (enum sink_call)sl->outcome[b]);
        if (now_done & bit)
            outbox_metrics_delivered(ob, bit, lag_us);
    }
    if (res->status == OUTBOX_FAILED)
        outbox_metrics_dead_letter(ob, sl->failed);
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

/*
 * A batch from its publish to its completion: one claim (up to
 * claim_batches x batch_size rows, published batch_size at a time) or one
 * take of the hand-off queue. The worker keeps one in the air (the last
 * batch sink's answers outstanding) while it claims and publishes the next:
 * the window of outstanding acks across batches. rows (and pushed_us, for
 * handed-off rows) are the flight's.
 */
struct flight {
    struct outbox_row *rows;
    size_t n;
    int64_t *pushed_us;   /* clock_mono_us of each handed-off row's push, or NULL */
    struct hroom **rooms; /* ordering per_room: each handed-off row's room, or NULL */
    struct slot *sl;
    struct outbox_result *res;
    char **errs;
    struct batch_call air; /* air.handle: the answers still outstanding */
    int64_t t0, t1, t2;    /* built from, published from, answered at */
};

/* True when no sink after ks has anything to do for sl[0..n) (none needs
 * an answer of ks first): then ks may be left in the air. */
static bool
last_needed_sink(struct outbox *ob, size_t ks, const struct slot *sl, size_t n)
{
    for (size_t k = ks + 1; k < ob->nsinks; k++)
        for (size_t i = 0; i < n; i++)
            if (sink_needed(&sl[i], ob->sinks[k]))
                return false;
    return true;
}

/*
 * Publishes the part sl[lo..hi) of flight f (at most batch_size rows): the
 * outcome of a row is what calling the sinks one by one gives: every sink
 * not yet in sinks_done that accepts it, in sink order, stopping at a
 * permanent refusal. before marks the rooms the rows before lo left
 * undelivered (their rows here are held); blocked is scratch; both have a
 * place per room of f (f->n).
 *
 * Phase 1, row by row: the sinks before the first one offering
 * publish_batch (first_batch), within publish_timeout per row. A row is
 * published only while its lock outlasts that deadline, so no other
 * claimer can deliver it inside our window; otherwise (or when stopping) it
 * is handed back. Phase 2, sink by sink: from the first batch sink on, one
 * publish_batch call for the part's rows that need it (publish() per row
 * for the others), within one publish_timeout for the part, again only
 * while every lock outlasts it. With may_fly, the last batch sink that has
 * work, when no sink after it has any, is left in the air (publish_start,
 * f->air): flight_land collects it. Else every answer is in on return.
 */
static void
publish_part(struct outbox *ob, struct flight *f, size_t first_batch, size_t lo, size_t hi,
             const bool *before, bool *blocked, bool may_fly)
{
    const struct outbox_row *rows = f->rows;
    struct slot *sl = f->sl;
    size_t rooms = f->n;
    int64_t timeout = ob->cfg.publish_timeout_ms;

    /* phase 1: row by row (a row is held when an earlier one of its room,
     * handled before it, is undelivered) */
    memcpy(blocked, before, rooms * sizeof(*blocked));
    for (size_t i = lo; i < hi; i++) {
        int64_t now = clock_wall_ms();
        int64_t deadline = clock_mono_ms() + timeout;

        if (stopping(ob) || now + timeout > rows[i].lock_until_ms) {
            sl[i].released = true;
            note_room(&sl[i], blocked);
            continue;
        }
        hold_if_blocked(ob, &sl[i], blocked);
        for (size_t k = 0; k < first_batch; k++)
            if (sink_needed(&sl[i], ob->sinks[k]))
                publish_one(ob, k, &sl[i], deadline);
        note_room(&sl[i], blocked);
    }
    if (first_batch == ob->nsinks)
        return;

    /* phase 2: sink by sink, one call per batch sink */
    int64_t now = clock_wall_ms();
    int64_t deadline = clock_mono_ms() + timeout;

    for (size_t i = lo; i < hi; i++)
        if (!sl[i].released && now + timeout > rows[i].lock_until_ms) {
            if (first_batch == 0 || stopping(ob)) {
                sl[i].released = true; /* nothing called yet: no attempt */
            } else if (!sl[i].finished) {
                outage(&sl[i], ob->sinks[first_batch], "lock too short for the batch sinks");
                sl[i].finished = true;
            }
        }
    for (size_t k = first_batch; k < ob->nsinks; k++) {
        struct sink *s = ob->sinks[k];

        /* a batch sink gets a room's rows of the part in one call, in order
         * (one connection keeps them in order); a row after one it refused
         * is not sent to the next sink */
        hold_later(ob, sl, lo, hi, before, blocked, rooms);
        if (s->publish_batch != NULL) {
            bool last = may_fly && last_needed_sink(ob, k, sl + lo, hi - lo);

            batch_call_begin(ob, k, sl, lo, hi, deadline, last, &f->air);
            if (f->air.handle != NULL)
                return; /* in the air; nothing after it */
            batch_call_end(ob, sl, &f->air);
            continue;
        }
        memcpy(blocked, before, rooms * sizeof(*blocked));
        for (size_t i = lo; i < hi; i++) {
            hold_if_blocked(ob, &sl[i], blocked);
            if (sink_needed(&sl[i], s))
                publish_one(ob, k, &sl[i], deadline);
            note_room(&sl[i], blocked);
        }
    }
}

/*
 * Builds rows[0..n) (each claimed by rows[i].locked_by until
 * rows[i].lock_until_ms) and publishes them batch_size rows at a time, in
 * order (publish_part): a sink call never gets more than batch_size rows.
 * Each part's answers are in before the next part is published, so a row
 * of a part not delivered holds its room's rows in the later parts, as
 * within one part; only the last part may stay in the air. Each part has
 * its own publish_timeout and checks its rows' locks against it. The rows
 * of a room blocked at the take (b->blocked) are held from the start.
 * Returns the flight; it owns b's arrays.
 */
static struct flight *
flight_start(struct outbox *ob, struct handoff_batch *b)
{
    struct outbox_row *rows = b->rows;
    size_t n = b->n;
    size_t part = (size_t)ob->cfg.batch_size;
    struct flight *f = xcalloc(1, sizeof(*f));
    struct slot *sl = xcalloc(n, sizeof(*sl));
    size_t first_batch = ob->nsinks;
    bool need_json = false, *before, *blocked;

    *f = (struct flight){
        .rows = rows, .n = n, .pushed_us = b->pushed_us, .rooms = b->rooms, .sl = sl};
    f->res = xcalloc(n, sizeof(*f->res));
    f->errs = xcalloc(n, sizeof(*f->errs));
    for (size_t k = 0; k < ob->nsinks; k++) {
        if (ob->sinks[k]->publish_batch != NULL && first_batch == ob->nsinks)
            first_batch = k;
        need_json = need_json || !ob->sinks[k]->no_json;
    }
    f->t0 = clock_mono_us();
    for (size_t i = 0; i < n; i++) {
        uint8_t *env = NULL;
        size_t envlen = 0;
        char *json = NULL;

        sl[i].row = &rows[i];
        sl[i].done = rows[i].sinks_done;
        if (outbox_event_build(&rows[i], &env, &envlen, need_json ? &json : NULL) != 0) {
            /* A poison event: the payload cannot become an event and retrying
             * cannot help. Dead letter at once, one log line. */
            snprintf(sl[i].err, sizeof(sl[i].err),
                     "poison: payload does not decode as event_type %s", rows[i].event_type);
            sl[i].rc = ROOMD_EPERM;
            sl[i].finished = true;
        }
        sl[i].ev = (struct outbox_event){
            .row = &rows[i], .envelope = env, .envelope_len = envlen, .json = json};
    }

    number_rooms(sl, n);
    before = xcalloc(n > 0 ? n : 1, sizeof(*before));
    blocked = xcalloc(n > 0 ? n : 1, sizeof(*blocked));
    /* room affinity: a room whose earlier rows in memory were not delivered
     * has every row of this batch held (retried after them, in order) */
    for (size_t i = 0; b->blocked != NULL && i < n; i++)
        if (b->blocked[i])
            before[sl[i].room] = true;
    free(b->blocked);
    *b = (struct handoff_batch){0};

    f->t1 = clock_mono_us();
    for (size_t lo = 0; lo < n; lo += part) {
        size_t hi = n - lo > part ? lo + part : n;

        publish_part(ob, f, first_batch, lo, hi, before, blocked, hi == n);
        for (size_t i = lo; i < hi && hi < n; i++)
            note_room(&sl[i], before); /* the part's answers are in */
    }
    free(blocked);
    free(before);
    return f;
}

/* Collects f's outstanding answers and fills f->res with each row's
 * outcome (and the metrics); f is then ready to be completed. */
static void
flight_land(struct outbox *ob, struct flight *f)
{
    const struct outbox_row *rows = f->rows;

    if (f->air.handle != NULL)
        batch_call_end(ob, f->sl, &f->air);
    f->t2 = clock_mono_us();
    for (size_t i = 0; i < f->n; i++) {
        f->res[i].id = rows[i].id;
        f->res[i].locked_by = rows[i].locked_by;
        if (f->sl[i].released) {
            release_row(&rows[i], &f->res[i], clock_wall_ms());
        } else {
            finish_row(ob, &f->sl[i], &f->res[i], &f->errs[i]);
            /* commit -> now: the push time of a handed-off row, else its created_at */
            int64_t lag_us = f->pushed_us != NULL
                                 ? f->t2 - f->pushed_us[i]
                                 : (clock_wall_ms() - rows[i].created_at_ms) * 1000;
            record_metrics(ob, &f->sl[i], &f->res[i], lag_us);
        }
        f->res[i].now_ms = clock_wall_ms();
    }
    if (f->rooms != NULL)
        handoff_landed(ob, f->rooms, f->sl, f->n);
}

/* Counts f's times (complete_us: its completion, or 0 when it shared a
 * claim's transaction) and frees it. */
static void
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
static void
flight_complete(struct outbox *ob, struct flight *f)
{
    if (f == NULL)
        return;
    int64_t t = clock_mono_us();
    complete_batch(ob, f->rows, f->res, f->n);
    flight_free(ob, f, clock_mono_us() - t);
}

/*
 * Landed flights whose completions wait to be written together: one store
 * transaction for several batches (issue 13: on MariaDB each completion
 * transaction is a commit and its round trips). A waiting flight's rows
 * stay delivering (claimed by this worker's claimer or "<node>/h") and, in
 * memory, counted in their rooms (handoff_done comes with the completion),
 * so the store's room check and the hand-off's room affinity see them busy
 * exactly as while their acks were outstanding; a crash before the write
 * leaves them to the claims once their lock expires (at least once). The
 * worker writes them when it has nothing else to do at once, before a
 * claim, on stop, and as soon as outbox_worker.complete_gather passed
 * since the first one landed or GATHER_ROWS_PER_BATCH x batch_size rows
 * wait (complete_gather 0: each on its own, at once). complete_gather <
 * lock_timeout - publish_timeout (conf.c), and before waiting for another
 * batch's answers the worker writes them when their earliest lock would
 * not outlast that wait (gather_before_land), so the write comes before
 * the rows' lock expires.
 */
#define GATHER_ROWS_PER_BATCH 4

struct gather {
    struct flight **f;
    size_t n, alloc, rows;
    int64_t since_ms;    /* clock_mono_ms when the first one was added */
    int64_t lock_min_ms; /* the earliest lock_until_ms of their rows (wall clock) */
};

/* Writes the completions of every flight of g in one store_outbox_complete
 * (with complete_batch's retries), stamped with the time of the write, and
 * frees the flights; g is empty after. Blocks on the store. */
static void
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
static void
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
static void
gather_before_land(struct outbox *ob, struct gather *g)
{
    if (g->n > 0 && g->lock_min_ms - clock_wall_ms() <= 2 * ob->cfg.publish_timeout_ms)
        gather_flush(ob, g);
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
 * One claim. done, when not NULL, is a landed flight whose completion goes
 * into the claim's transaction (store_outbox_complete_claim: one commit per
 * batch on MySQL); it is freed here either way. Sets when the worker claims
 * next. Returns the claimed rows (*n of them; NULL and 0 when none or the
 * claim failed), claimed by w until their lock_until_ms.
 */
static struct outbox_row *
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
    }
    return rows;
}

/* True when w claims again at once (its last claim was a full batch). */
static bool
claims_next(struct worker *w)
{
    bool again;

    pthread_mutex_lock(&w->ob->pool.mu);
    again = w->next_claim_ms == 0 && !w->down;
    pthread_mutex_unlock(&w->ob->pool.mu);
    return again;
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
