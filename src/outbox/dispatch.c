/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dispatch.c: the OUTBOX PATH's publish of one batch (seed 发布模式, 重试和死信):
 * each claimed or handed-off row's event built once (event.c), sent to the
 * sinks of the publish mode not yet in its sinks_done (row by row, then one
 * call per batch sink, at most batch_size rows per call), each answer
 * recorded and fed to the sink's circuit (circuit.c), rows of a room held
 * behind an undelivered one (order.c), and each row's outcome (delivered,
 * retryable with backoff, failed) filled in for its completion (claim.c).
 * Called by the worker thread that owns the flight (worker.c); blocks on
 * the sinks up to publish_timeout per part.
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
void
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
    if (o != CALL_OK) {
        sl->failed |= s->bit;
        sl->missed |= s->bit;
    }
    if (b < OUTBOX_SINK_BITS)
        sl->outcome[b] = (uint8_t)o;
}

/* Marks sl failed for sink s by an outage (why): retried, no attempt counted. */
static void
outage(struct slot *sl, const struct sink *s, const char *why)
{
    append_error(sl->err, s->name, why);
    sl->missed |= s->bit;
    if (sl->rc == 0)
        sl->rc = ROOMD_ERETRY;
}

/*
 * Poison versus outage (seed 重试和死信, issue 26): whether sink k's peer
 * answers while a call to it begun at started_ms (clock_mono_ms) got no
 * answer (a timeout, a transport failure). It does when it answered another
 * call since (another event, a probe), else when its probe answers now
 * (sink.h probe; asked once per call: *peer caches it, -1 not asked yet).
 * Then the event itself is at fault and its failure counts as an attempt,
 * so an event that fails alone reaches failed after max_retry_count; in an
 * outage nothing answers and no attempt is counted. Blocks up to
 * publish_timeout on the probe.
 */
static bool
peer_answers(struct outbox *ob, size_t k, int64_t started_ms, int *peer)
{
    struct sink *s = ob->sinks[k];
    char err[SINK_ERR_LEN] = "";

    if (circuit_answered_since(ob, k, started_ms))
        return true;
    if (*peer < 0) {
        *peer = s->probe != NULL && s->probe(s, clock_mono_ms() + ob->cfg.publish_timeout_ms, err,
                                             sizeof(err)) != ROOMD_EUNAVAIL;
        if (*peer)
            circuit_note(ob, k, true);
    }
    return *peer > 0;
}

/* Records what sink k answered (prc, reason serr) for sl to the call begun
 * at started_ms, and feeds its circuit (peer: peer_answers' cache). */
static void
sink_outcome(struct outbox *ob, size_t k, struct slot *sl, int prc, const char *serr,
             int64_t started_ms, int *peer)
{
    const struct sink *s = ob->sinks[k];

    note_call(sl, s, sink_call_of(prc));
    if (prc == ROOMD_ELIMIT) {
        /* throttled (sink.h): the peer's rate limit, not the event's fault
         * and no outage: retried after a delay, no attempt counted, the
         * circuit not fed (so a long rate limit never opens it and holds
         * every room), no poison check (whatever else answered) */
        outage(sl, s, *serr ? serr : "throttled: the peer's rate limit");
        sl->throttled = true;
        return;
    }
    circuit_note(ob, k, prc != ROOMD_EUNAVAIL);
    if (prc == ROOMD_EUNAVAIL && peer_answers(ob, k, started_ms, peer)) {
        char why[SINK_ERR_LEN + 64];

        snprintf(why, sizeof(why), "%s (the sink answers other calls: counted)",
                 *serr ? serr : roomd_strerror(prc));
        append_error(sl->err, s->name, why);
        if (sl->rc != ROOMD_EPERM)
            sl->rc = ROOMD_ERETRY;
        sl->counted = true;
    } else if (prc == ROOMD_EUNAVAIL) {
        outage(sl, s, *serr ? serr : roomd_strerror(prc));
    } else if (prc == 0) {
        sl->done |= s->bit;
    } else if (prc == ROOMD_EPERM) {
        /* a sink refused for good: that sink is failed for the row, the
         * other sinks are still called (dual mode: each sink's delivery is
         * independent; the row is a dead letter naming the refusal, its
         * sinks_done the sinks that delivered it) */
        append_error(sl->err, s->name, serr);
        sl->rc = ROOMD_EPERM;
    } else {
        append_error(sl->err, s->name, *serr ? serr : roomd_strerror(prc));
        if (sl->rc != ROOMD_EPERM)
            sl->rc = ROOMD_ERETRY;
        sl->counted = true;
    }
}

bool
sink_needed(const struct slot *sl, struct sink *s)
{
    return !sl->released && !sl->finished && !(sl->done & s->bit) && !(sl->hold & s->bit) &&
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
    int64_t started = clock_mono_ms();
    int peer = -1;
    int prc = s->publish(s, &sl->ev, deadline, serr, sizeof(serr));
    sink_outcome(ob, k, sl, prc, serr, started, &peer);
}

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

    *bc = (struct batch_call){.ks = ks, .started_ms = clock_mono_ms()};
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
    int peer = -1; /* one probe for the call's rows at most */

    if (bc->handle != NULL)
        s->publish_finish(s, bc->handle);
    for (size_t j = 0; j < bc->k; j++) {
        bc->errs[(j + 1) * SINK_ERR_LEN - 1] = '\0';
        sink_outcome(ob, bc->ks, &sl[bc->idx[j]], bc->rcs[j], bc->errs + j * SINK_ERR_LEN,
                     bc->started_ms, &peer);
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
    if (sl->hold != 0 && !permanent && !sl->counted && (sl->missed & ~sl->hold) == 0) {
        /* Held behind an earlier row of its room for some sinks (the
         * others delivered it): retryable now, nothing counted; the
         * ordered claim takes it again only for a sink no earlier row of
         * its room still lacks (store/<backend>/outbox.c), so once that
         * row is done, not at the claims' rate. */
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
        /* Only outages or throttling: the event is not at fault. Again
         * after a probe interval, retry_count unchanged; never failed for
         * this. */
        *errtext = xstrdup(sl->err);
        res->last_error = *errtext;
        res->status = OUTBOX_RETRYABLE;
        res->next_retry_at_ms = now + cfg->circuit_probe_ms;
        atomic_fetch_add(sl->throttled ? &ob->throttled_rows : &ob->outage_rows, 1);
        log_debug("outbox",
                  sl->throttled ? "sink throttled, no attempt counted"
                                : "sink unreachable, no attempt counted",
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
 * permanent refusal. before marks, per room, the sinks the rows before lo
 * (and the rows outside the batch) did not deliver (its rows here are held
 * for those sinks); blocked is scratch; both have a sinks_done mask per
 * room of f (f->n).
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
             const uint32_t *before, uint32_t *blocked, bool may_fly)
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

        if (bg_thread_stopping(&ob->pool) || now + timeout > rows[i].lock_until_ms) {
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
            if (first_batch == 0 || bg_thread_stopping(&ob->pool)) {
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
struct flight *
flight_start(struct outbox *ob, struct handoff_batch *b)
{
    struct outbox_row *rows = b->rows;
    size_t n = b->n;
    size_t part = (size_t)ob->cfg.batch_size;
    struct flight *f = xcalloc(1, sizeof(*f));
    struct slot *sl = xcalloc(n, sizeof(*sl));
    size_t first_batch = ob->nsinks;
    bool need_json = false;
    uint32_t *before, *blocked;

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
    /* the sinks an earlier row of a room outside the batch did not deliver
     * (room affinity: its rows in memory; a claim: its rows not claimed
     * with these) hold every row of the room in this batch for them
     * (retried after those rows, in order); the other sinks go on */
    for (size_t i = 0; i < n; i++)
        before[sl[i].room] |= rows[i].held_sinks | (b->blocked != NULL ? b->blocked[i] : 0);
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
void
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
    test_crash("after_answer");
}
