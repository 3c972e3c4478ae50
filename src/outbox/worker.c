/*
 * worker.c: the OUTBOX PATH (ARCHITECTURE §2; seed 数据状态, 重试和死信).
 * cfg->workers threads each loop: take rows the command path handed off
 * (already claimed at insert, outbox_handoff_*), or claim a batch (a wake-up
 * after a commit that could not hand off, poll_interval, start-up) -> build
 * each event once (event.c) -> publish to the sinks not yet done (a batch
 * sink once per batch) -> complete the batch, fenced by locked_by.
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
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A row's last_error as the worker builds it (sink: reason; ...), and one
 * sink's reason. */
#define LAST_ERROR_MAX 512
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

/* One row of a batch while it is published. */
struct slot {
    const struct outbox_row *row;
    struct outbox_event ev; /* built once; ev.envelope / ev.json are ours */
    bool released;          /* handed back unpublished (release_row) */
    bool finished;          /* no further sink is called: poison or a permanent refusal */
    int rc;                 /* 0 so far, ROOMD_ERETRY or ROOMD_EPERM */
    bool counted;           /* a sink answered "not now": the failure costs an attempt;
                             * false with rc ERETRY: only outages (no answer, circuit
                             * open, no time left), which cost none */
    uint32_t done;          /* sinks_done so far */
    uint32_t tried;         /* sinks called in this attempt (bits) */
    uint32_t failed;        /* of those, the ones that did not deliver */
    uint8_t outcome[OUTBOX_SINK_BITS]; /* enum sink_call, by bit index */
    char err[LAST_ERROR_MAX];
};

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

/*
 * Calls the batch sink s once for every slot of sl[0..n) that still needs it
 * (rows whose earlier sinks refused for good are left out, as calling the
 * sinks row by row would), within deadline.
 */
static void
publish_batch(struct outbox *ob, size_t ks, struct slot *sl, size_t n, int64_t deadline)
{
    struct sink *s = ob->sinks[ks];
    struct outbox_event *evs = xcalloc(n, sizeof(*evs));
    size_t *idx = xcalloc(n, sizeof(*idx));
    int *rcs = xcalloc(n, sizeof(*rcs));
    char *errs = xcalloc(n, SINK_ERR_LEN);
    size_t k = 0;

    for (size_t i = 0; i < n; i++)
        if (sink_needed(&sl[i], s)) {
            idx[k] = i;
            evs[k++] = sl[i].ev;
        }
    if (k > 0 && clock_mono_ms() >= deadline) {
        for (size_t j = 0; j < k; j++) {
            outage(&sl[idx[j]], s, "publish_timeout exceeded before the call");
            note_call(&sl[idx[j]], s, CALL_TIMEOUT);
        }
    } else if (k > 0 && !circuit_admit(ob, ks)) {
        for (size_t j = 0; j < k; j++)
            outage(&sl[idx[j]], s, "circuit open: the sink did not answer lately");
    } else if (k > 0) {
        s->publish_batch(s, evs, k, deadline, rcs, errs, SINK_ERR_LEN);
        for (size_t j = 0; j < k; j++) {
            errs[(j + 1) * SINK_ERR_LEN - 1] = '\0';
            sink_outcome(ob, ks, &sl[idx[j]], rcs[j], errs + j * SINK_ERR_LEN);
        }
    }
    free(errs);
    free(rcs);
    free(idx);
    free(evs);
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

/* Writes the batch's outcomes, fenced by locked_by. A completion the store
 * cannot take now is left: the rows are reclaimed after their lock expires. */
static void
complete_batch(struct outbox *ob, const struct outbox_row *rows, struct outbox_result *res,
               size_t n)
{
    int rc = 0;

    for (int attempt = 0; attempt < COMPLETE_TRIES; attempt++) {
        if ((rc = store_outbox_complete(ob->store, res, n)) == 0)
            break;
        store_trouble(ob, "complete", rc);
        usleep(100 * 1000);
    }
    if (rc != 0)
        return;
    store_fine(ob);
    for (size_t i = 0; i < n; i++)
        if (res[i].rc == ROOMD_ESTALE)
            log_warn("outbox",
                     "completion refused: the lock expired and another claimer took "
                     "the row",
                     "id=%lld event_id=%s locked_by=%s status=%s", (long long)rows[i].id,
                     rows[i].event_id, res[i].locked_by, outbox_status_name(res[i].status));
}

/*
 * Publishes rows[0..n) (each claimed by rows[i].locked_by until
 * rows[i].lock_until_ms) and completes them. Sinks run in their order; the
 * outcome of a row is what calling them one by one gives: every sink not yet
 * in sinks_done that accepts it, stopping at a permanent refusal.
 *
 * Phase 1, row by row: the sinks before the first one offering
 * publish_batch, within publish_timeout per row. A row is published only
 * while its lock outlasts that deadline, so no other claimer can deliver it
 * inside our window; otherwise (or when stopping) it is handed back.
 * Phase 2, sink by sink: from the first batch sink on, one publish_batch
 * call for all the rows that need it (publish() per row for the others),
 * within one publish_timeout for the batch, again only while every lock
 * outlasts it.
 */
static void
run_batch(struct outbox *ob, const struct outbox_row *rows, size_t n, const int64_t *pushed_us)
{
    struct slot *sl = xcalloc(n, sizeof(*sl));
    struct outbox_result *res = xcalloc(n, sizeof(*res));
    char **errs = xcalloc(n, sizeof(*errs));
    size_t first_batch = ob->nsinks;
    int64_t timeout = ob->cfg.publish_timeout_ms;
    bool need_json = false;

    for (size_t k = 0; k < ob->nsinks; k++) {
        if (ob->sinks[k]->publish_batch != NULL && first_batch == ob->nsinks)
            first_batch = k;
        need_json = need_json || !ob->sinks[k]->no_json;
    }
    int64_t t0 = clock_mono_us();
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

    int64_t t1 = clock_mono_us();
    /* phase 1: row by row */
    for (size_t i = 0; i < n; i++) {
        int64_t now = clock_wall_ms();
        int64_t deadline = clock_mono_ms() + timeout;

        if (stopping(ob) || now + timeout > rows[i].lock_until_ms) {
            sl[i].released = true;
            continue;
        }
        for (size_t k = 0; k < first_batch; k++)
            if (sink_needed(&sl[i], ob->sinks[k]))
                publish_one(ob, k, &sl[i], deadline);
    }

    /* phase 2: sink by sink, one call per batch sink */
    if (first_batch < ob->nsinks) {
        int64_t now = clock_wall_ms();
        int64_t deadline = clock_mono_ms() + timeout;

        for (size_t i = 0; i < n; i++)
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

            if (s->publish_batch != NULL) {
                publish_batch(ob, k, sl, n, deadline);
                continue;
            }
            for (size_t i = 0; i < n; i++)
                if (sink_needed(&sl[i], s))
                    publish_one(ob, k, &sl[i], deadline);
        }
    }

    int64_t t2 = clock_mono_us();
    for (size_t i = 0; i < n; i++) {
        res[i].id = rows[i].id;
        res[i].locked_by = rows[i].locked_by;
        if (sl[i].released) {
            release_row(&rows[i], &res[i], clock_wall_ms());
        } else {
            finish_row(ob, &sl[i], &res[i], &errs[i]);
            /* commit -> now: the push time of a handed-off row, else its created_at */
            int64_t lag_us = pushed_us != NULL ? t2 - pushed_us[i]
                                               : (clock_wall_ms() - rows[i].created_at_ms) * 1000;
            record_metrics(ob, &sl[i], &res[i], lag_us);
        }
        res[i].now_ms = clock_wall_ms();
    }
    complete_batch(ob, rows, res, n);
    int64_t t3 = clock_mono_us();
    pthread_mutex_lock(&ob->pool.mu);
    ob->stats.batches++;
    ob->stats.build_us += t1 - t0;
    ob->stats.publish_us += t2 - t1;
    ob->stats.complete_us += t3 - t2;
    for (size_t i = 0; pushed_us != NULL && i < n; i++)
        if (!sl[i].released && sl[i].rc == 0) {
            int64_t b = (t2 - pushed_us[i]) / OUTBOX_LAT_BUCKET_US;
            ob->stats.handoff_lat[b < OUTBOX_LAT_BUCKETS ? b : OUTBOX_LAT_BUCKETS - 1]++;
            ob->stats.handoff_lat_sum_us += t2 - pushed_us[i];
        }
    pthread_mutex_unlock(&ob->pool.mu);
    for (size_t i = 0; i < n; i++) {
        free(errs[i]);
        free((void *)sl[i].ev.envelope);
        free((void *)sl[i].ev.json);
    }
    free(errs);
    free(res);
    free(sl);
}

/* ==== the worker loop ==== */

enum work { WORK_STOP, WORK_CLAIM, WORK_HANDOFF };

/*
 * Waits for the worker's next job: a claim (its poll is due, or a wake-up
 * came and the store is not down), or a batch from the hand-off queue
 * (*rows, *n; the caller frees them). When both wait they alternate, so
 * neither starves the other.
 */
static enum work
next_work(struct worker *w, struct outbox_row **rows, size_t *n, int64_t **pushed_us)
{
    struct outbox *ob = w->ob;
    enum work what;

    pthread_mutex_lock(&ob->pool.mu);
    for (;;) {
        int64_t now = clock_mono_ms();
        bool claim_due = now >= w->next_claim_ms || (!w->down && ob->wake_seq != ob->taken_seq);
        bool queued = ob->qlen > 0;

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
            *rows = handoff_take(ob, (size_t)ob->cfg.batch_size, n, pushed_us);
            if (ob->qlen > 0)
                pthread_cond_signal(&ob->pool.cv); /* the rest to another idle worker */
            what = WORK_HANDOFF;
            break;
        }
        bg_thread_wait_locked(&ob->pool, w->next_claim_ms - now);
    }
    w->last_was_claim = what == WORK_CLAIM;
    pthread_mutex_unlock(&ob->pool.mu);
    return what;
}

/* One claim and its batch. Sets when the worker claims next. */
static void
claim_and_run(struct worker *w)
{
    struct outbox *ob = w->ob;
    const struct conf_outbox *cfg = &ob->cfg;
    struct outbox_row *rows = NULL;
    size_t n = 0;
    int64_t now = clock_wall_ms();
    int64_t lock_until = now + cfg->lock_timeout_ms;
    int64_t next;

    int64_t t0 = clock_mono_us();
    int rc =
        store_outbox_claim(ob->store, now, lock_until, w->locked_by, cfg->batch_size, &rows, &n);
    int64_t claim_us = clock_mono_us() - t0;
    if (rc != 0) {
        store_trouble(ob, "claim", rc);
        int64_t initial = cfg->poll_interval_ms < 100 ? cfg->poll_interval_ms : 100;
        int64_t cap = cfg->poll_interval_ms > 2000 ? cfg->poll_interval_ms : 2000;
        pthread_mutex_lock(&ob->pool.mu);
        w->down = true;
        w->down_count++;
        w->next_claim_ms = clock_mono_ms() + backoff_delay_ms(w->down_count, initial, cap);
        pthread_mutex_unlock(&ob->pool.mu);
        return;
    }
    store_fine(ob);
    /* A full batch: claim again at once (and let an idle worker claim too);
     * else idle until woken or polled. */
    next = n == (size_t)cfg->batch_size ? 0 : clock_mono_ms() + cfg->poll_interval_ms;
    pthread_mutex_lock(&ob->pool.mu);
    w->down = false;
    w->down_count = 0;
    w->next_claim_ms = next;
    ob->stats.claims++;
    ob->stats.claimed_rows += n;
    ob->stats.claim_us += claim_us;
    pthread_mutex_unlock(&ob->pool.mu);
    if (n == (size_t)cfg->batch_size)
        outbox_wake(ob);
    for (size_t i = 0; i < n; i++) {
        rows[i].lock_until_ms = lock_until;
        strlcpy_(rows[i].locked_by, w->locked_by, sizeof(rows[i].locked_by));
    }
    if (n > 0)
        run_batch(ob, rows, n, NULL);
    outbox_rows_free(rows, n);
}

static void *
worker_main(void *arg)
{
    struct worker *w = arg;
    struct outbox_row *rows = NULL;
    int64_t *pushed_us = NULL;
    size_t n = 0;

    /* next_claim_ms 0: claim at once on start, rows left by a previous run */
    for (;;) {
        switch (next_work(w, &rows, &n, &pushed_us)) {
        case WORK_STOP:
            return NULL;
        case WORK_CLAIM:
            claim_and_run(w);
            break;
        case WORK_HANDOFF:
            run_batch(w->ob, rows, n, pushed_us);
            outbox_rows_free(rows, n);
            free(pushed_us);
            rows = NULL;
            pushed_us = NULL;
            break;
        }
    }
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

int
outbox_open(struct outbox **out, const struct conf_outbox *cfg, const struct conf_store *retention,
            struct store *store, const char *node_id, struct sink **sinks, size_t nsinks)
{
    struct outbox *ob = xcalloc(1, sizeof(*ob));
    char node[STORE_ID_MAX];
    int rc = 0;

    *out = NULL;
    ob->cfg = *cfg;
    if (ob->cfg.workers < 1)
        ob->cfg.workers = 1;
    if (ob->cfg.batch_size < 1)
        ob->cfg.batch_size = 1;
    if (ob->cfg.poll_interval_ms < 1)
        ob->cfg.poll_interval_ms = 1000;
    if (ob->cfg.lock_timeout_ms < 1)
        ob->cfg.lock_timeout_ms = 60000;
    if (ob->cfg.circuit_failures < 1)
        ob->cfg.circuit_failures = 5;
    if (ob->cfg.circuit_probe_ms < 1)
        ob->cfg.circuit_probe_ms = 1000;
    ob->store = store;
    ob->nsinks = nsinks;
    ob->sinks = xcalloc(nsinks > 0 ? nsinks : 1, sizeof(*ob->sinks));
    for (size_t i = 0; i < nsinks; i++)
        ob->sinks[i] = sinks[i];
    bg_thread_init(&ob->pool);
    circuit_init(ob);
    atomic_init(&ob->store_down, false);
    outbox_metrics_init(ob);

    if (ob->cfg.lock_timeout_ms <= ob->cfg.publish_timeout_ms)
        log_warn("outbox", "lock_timeout <= publish_timeout: rows are handed back unpublished",
                 "lock_timeout_ms=%lld publish_timeout_ms=%lld", (long long)ob->cfg.lock_timeout_ms,
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
             "workers=%d batch_size=%d poll_interval_ms=%lld lock_timeout_ms=%lld sinks=%zu "
             "node=%s handoff_rows=%zu",
             ob->nworkers, ob->cfg.batch_size, (long long)ob->cfg.poll_interval_ms,
             (long long)ob->cfg.lock_timeout_ms, nsinks, node, ob->handoff_cap);
    *out = ob;
    return 0;
}

/* At close: rows still in the hand-off queue go back to the store at once
 * (retryable now, no attempt counted) rather than waiting for their lock to
 * expire. If the store refuses, they are reclaimed after the lock. */
static void
release_queued(struct outbox *ob)
{
    size_t n = 0;
    struct outbox_row *rows = ob->qlen > 0 ? handoff_take(ob, ob->qlen, &n, NULL) : NULL;
    struct outbox_result *res;
    int64_t now = clock_wall_ms();

    if (n == 0) {
        free(rows);
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
    outbox_rows_free(rows, n);
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
