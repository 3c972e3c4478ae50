/* SPDX-License-Identifier: Apache-2.0 */
/*
 * verdict.c: the consumer kit's verdicts for every broker driver
 * (verdict.h; the rules in group.h). Read top-down: counters, the key and
 * envelope, the circuit, the claim and room_seq rule, then process.
 */
#include "consume/verdict.h"

#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "room_events.pb-c.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* Deliveries past the last allowed one that still get no verdict (the
 * process died or hung in the handler each time) end in the DLQ too. */
#define CRASH_SLACK 2
/* A room_seq gap: deliveries held before handling anyway, and the hold. */
#define CONSUME_GAP_HOLDS 8
#define CONSUME_GAP_HOLD_MS 250

/* ==== counters ==== */

void
consume_core_count(struct consume_core *k, uint64_t *field)
{
    pthread_mutex_lock(&k->mu);
    (*field)++;
    pthread_mutex_unlock(&k->mu);
}

void
consume_core_stats(struct consume_core *k, struct consume_stats *out)
{
    pthread_mutex_lock(&k->mu);
    *out = k->stats;
    pthread_mutex_unlock(&k->mu);
}

/* One run of the handler into the processing histogram. */
static void
observe(struct consume_core *k, int64_t us)
{
    pthread_mutex_lock(&k->mu);
    for (int i = 0; i < CONSUME_PROC_BUCKETS; i++)
        if (us <= consume_proc_le_us[i])
            k->stats.proc_cum[i]++;
    k->stats.proc_count++;
    k->stats.proc_sum_us += us;
    pthread_mutex_unlock(&k->mu);
}

/* ==== the key and the envelope ==== */

/* What the kit reads of a RoomOutboxEvent besides its event_id. */
struct envelope {
    char app[64];
    char room[64];
    int64_t room_seq; /* 0: none */
};

/* The event_id of a RoomOutboxEvent into key, the rest into env (NULL: not
 * wanted); 0 or ROOMD_EINVAL. */
static int
envelope_ids(const uint8_t *data, size_t len, char *key, size_t keylen, struct envelope *env)
{
    Roomd__V1__RoomOutboxEvent *ev = roomd__v1__room_outbox_event__unpack(NULL, len, data);
    int rc = 0;

    if (ev == NULL || ev->event_id == NULL || *ev->event_id == '\0') {
        rc = ROOMD_EINVAL;
    } else {
        snprintf(key, keylen, "%s", ev->event_id);
        if (env) {
            snprintf(env->app, sizeof(env->app), "%s", ev->app_code ? ev->app_code : "");
            snprintf(env->room, sizeof(env->room), "%s", ev->room_id ? ev->room_id : "");
            env->room_seq = ev->room_seq;
        }
    }
    if (ev)
        roomd__v1__room_outbox_event__free_unpacked(ev, NULL);
    return rc;
}

int
consume_envelope_key(void *arg, const uint8_t *data, size_t len, char *key, size_t keylen)
{
    (void)arg;
    return envelope_ids(data, len, key, keylen, NULL);
}

/* ==== outages: the transport circuit (group.h) ==== */

/* True when rc says the downstream did not answer (or only with its rate
 * limit): an outage, which costs the event no attempt. */
static bool
transport_failure(int rc)
{
    return rc == ROOMD_EUNAVAIL || rc == ROOMD_ETIMEDOUT || rc == ROOMD_ELIMIT;
}

int64_t
consume_core_outage_delay_ms(const struct consume_core *k)
{
    int64_t d = consume_retry_delay_ms(&k->o, 1);

    return d > k->o.circuit_probe_ms ? d : k->o.circuit_probe_ms;
}

/* True when the handler may be called: no downstream, the circuit closed,
 * or open with its half-open probe due (this call is it). */
static bool
circuit_admit(struct consume_core *k)
{
    bool ok = true;
    int64_t now = clock_mono_ms();

    if (k->h.downstream == NULL)
        return true;
    pthread_mutex_lock(&k->mu);
    if (k->stats.circuit_open) {
        ok = now >= k->circ_probe_at_ms;
        if (ok)
            k->circ_probe_at_ms = now + k->o.circuit_probe_ms;
    }
    pthread_mutex_unlock(&k->mu);
    return ok;
}

/* Notes one call of the downstream: answered (any verdict but a transport
 * failure) closes the circuit; circuit_failures failures in a row open it. */
static void
circuit_note(struct consume_core *k, bool answered, const char *why)
{
    bool opened = false, closed = false;

    if (k->h.downstream == NULL)
        return;
    pthread_mutex_lock(&k->mu);
    k->stats.downstream_up = answered;
    if (answered) {
        closed = k->stats.circuit_open;
        k->stats.circuit_open = false;
        k->circ_fails = 0;
    } else {
        snprintf(k->stats.downstream_err, sizeof(k->stats.downstream_err), "%s", why);
        if (++k->circ_fails >= k->o.circuit_failures && !k->stats.circuit_open) {
            k->stats.circuit_open = opened = true;
            k->stats.circuit_opened++;
            k->circ_probe_at_ms = clock_mono_ms() + k->o.circuit_probe_ms;
        }
    }
    pthread_mutex_unlock(&k->mu);
    if (opened)
        log_warn("consume", "downstream unreachable: circuit open, no attempts counted",
                 "group=%s downstream=%s failures=%d probe_every_ms=%" PRId64 " error=\"%s\"",
                 k->h.group, k->h.downstream, k->o.circuit_failures, k->o.circuit_probe_ms, why);
    if (closed)
        log_info("consume", "downstream answers again: circuit closed", "group=%s downstream=%s",
                 k->h.group, k->h.downstream);
}

void
consume_core_probe(struct consume_core *k)
{
    char err[256] = "";
    bool due;

    if (k->h.downstream == NULL || k->h.probe == NULL)
        return;
    pthread_mutex_lock(&k->mu);
    due = k->stats.circuit_open && clock_mono_ms() >= k->circ_probe_at_ms;
    if (due)
        k->circ_probe_at_ms = clock_mono_ms() + k->o.circuit_probe_ms;
    pthread_mutex_unlock(&k->mu);
    if (!due)
        return;
    int rc = k->h.probe(k->h.arg, clock_mono_ms() + k->o.circuit_probe_ms, err, sizeof(err));
    circuit_note(k, rc != ROOMD_EUNAVAIL, err);
}

/* ==== verdict helpers ==== */

static void
later(struct consume_core *k, struct consume_verdict *v, int64_t delay_ms, uint64_t *counter)
{
    v->action = CONSUME_LATER;
    v->delay_ms = delay_ms;
    consume_core_count(k, counter);
}

static void
outage(struct consume_core *k, struct consume_verdict *v, uint64_t *counter)
{
    v->action = CONSUME_OUTAGE;
    v->delay_ms = consume_core_outage_delay_ms(k);
    consume_core_count(k, counter);
}

static void
dead(struct consume_verdict *v, enum consume_dead_reason reason, const char *why)
{
    v->action = CONSUME_DEAD;
    v->reason = reason;
    snprintf(v->why, sizeof(v->why), "%s", why && *why ? why : "-");
}

/* Claims key in the inbox: true when this delivery is to be handled (with
 * *failures), false when it got its verdict here (settled: ACK; another
 * owner's claim or no inbox: LATER). */
static bool
claim(struct consume_core *k, struct consume_verdict *v, const char *app, int *failures)
{
    enum inbox_claim res = INBOX_CLAIMED;
    int64_t until = 0;
    const char *key = v->key;

    if (inbox_claim(k->inbox, key, app, &res, failures, &until) != 0) {
        log_warn("consume", "inbox read failed", "group=%s key=%s error=\"%s\"", k->h.group, key,
                 inbox_errmsg(k->inbox));
        later(k, v, consume_retry_delay_ms(&k->o, 1), &k->stats.retried);
        consume_core_count(k, &k->stats.retried_inbox);
        return false;
    }
    if (res == INBOX_SETTLED) {
        /* A redelivery of something already settled: no second effect. */
        v->action = CONSUME_ACK;
        consume_core_count(k, &k->stats.duplicates);
        log_debug("consume", "duplicate acknowledged", "group=%s key=%s", k->h.group, key);
        return false;
    }
    if (res == INBOX_BUSY) {
        /* Another node has it in hand: look again when its claim expires
         * (it is settled by then, or taken over from a dead node). */
        int64_t d = until - clock_wall_ms() + 100;
        later(k, v, d < 100 ? 100 : d, &k->stats.busy);
        log_info("consume", "claimed by another node, later", "group=%s key=%s delay_ms=%" PRId64,
                 k->h.group, key, d);
        return false;
    }
    return true;
}

/* The room_seq rule of group.h for the outbox event env: true when this
 * delivery goes on to the claim, false when it was held here (a gap). At or
 * below the mark it goes on too: the event_id inbox tells a duplicate from
 * an event its room went on without (held too long, or retried), which must
 * still be done. A mark that cannot be read lets the event through. */
static bool
room_turn(struct consume_core *k, struct consume_verdict *v, const struct envelope *env,
          uint64_t delivered)
{
    int64_t mark = 0;

    if (env->room_seq <= 0)
        return true;
    if (inbox_mark_get(k->inbox, env->app, env->room, &mark) != 0) {
        log_warn("consume", "room_seq mark read failed", "group=%s key=%s error=\"%s\"", k->h.group,
                 v->key, inbox_errmsg(k->inbox));
        return true;
    }
    if (mark > 0 && env->room_seq > mark + 1) {
        /* holds count as deliveries: stay below the kit's delivery limit */
        if (delivered <= CONSUME_GAP_HOLDS && delivered <= (uint64_t)k->o.max_reconsume) {
            later(k, v, CONSUME_GAP_HOLD_MS, &k->stats.held);
            return false;
        }
        log_warn("consume", "room_seq gap: handled without the earlier events",
                 "group=%s key=%s room=%s room_seq=%" PRId64 " mark=%" PRId64, k->h.group, v->key,
                 env->room, env->room_seq, mark);
    }
    return true;
}

/* ==== one delivery ==== */

void
consume_core_process(struct consume_core *k, const struct consume_delivery *d,
                     struct consume_verdict *v)
{
    struct envelope env = {0};
    int failures = 0, rc;
    uint64_t delivered = d->delivered > 0 ? d->delivered : 1;

    memset(v, 0, sizeof(*v));
    /* the downstream is known not to answer: no call, no attempt */
    if (!circuit_admit(k)) {
        outage(k, v, &k->stats.circuit_skipped);
        return;
    }
    rc = k->h.key ? k->h.key(k->h.arg, d->data, d->len, v->key, sizeof(v->key))
                  : envelope_ids(d->data, d->len, v->key, sizeof(v->key), &env);
    if (rc != 0) {
        v->key[0] = '\0';
        dead(v, CONSUME_DEAD_UNDECODABLE, "undecodable message");
        return;
    }
    /* an outbox event: order and dedupe by its room's high-water mark */
    bool ordered = k->h.key == NULL && k->o.room_order;
    if (ordered && !room_turn(k, v, &env, delivered + d->repeats))
        return;
    if (!claim(k, v, env.app, &failures))
        return;
    /* attempts so far: the shared inbox counts them for every node; else
     * the broker's delivery count stands in for them */
    uint64_t attempts = inbox_shared(k->inbox) ? (uint64_t)failures + 1 : delivered;
    if (!k->h.holds && attempts > (uint64_t)k->o.max_reconsume + 1 + CRASH_SLACK) {
        dead(v, CONSUME_DEAD_NO_VERDICT, "delivery limit reached without a verdict");
        return;
    }

    struct consume_msg m = {
        .group = k->h.group,
        .subject = d->subject,
        .data = d->data,
        .len = d->len,
        .key = v->key,
        .stream_seq = d->seq,
        .num_delivered = delivered,
        .failures = failures,
        .nmsg = d->nmsg,
        .inbox = k->inbox,
        .mark = {.app = env.app, .room = env.room, .seq = ordered ? env.room_seq : 0},
    };
    int64_t t0 = clock_mono_us();
    rc = k->h.handle(k->h.arg, &m);
    observe(k, clock_mono_us() - t0);
    if (inbox_in_tx(k->inbox)) {
        inbox_tx_rollback(k->inbox);
        if (rc == 0) {
            rc = ROOMD_EINTERNAL;
            snprintf(m.err, sizeof(m.err), "handler left a transaction open");
        }
    }
    if (rc == ROOMD_ESTALE) {
        /* Our claim expired and another node took the key over: it settles
         * it; this delivery comes back to find that out. */
        log_info("consume", "claim taken over by another node", "group=%s key=%s", k->h.group,
                 v->key);
        later(k, v, k->o.ack_wait_ms, &k->stats.busy);
        return;
    }
    circuit_note(k, !transport_failure(rc), m.err);
    if (transport_failure(rc)) {
        /* An outage: the event is not at fault; it comes back, no failure.
         * A claim not given back expires (claim_ms) and its takeover counts. */
        if (inbox_release(k->inbox, v->key) != 0)
            log_warn("consume", "inbox release failed: the claim expires instead",
                     "group=%s key=%s error=\"%s\"", k->h.group, v->key, inbox_errmsg(k->inbox));
        outage(k, v, &k->stats.outages);
        log_info("consume", "downstream unreachable, redelivery without an attempt",
                 "group=%s key=%s delay_ms=%" PRId64 " error=\"%s\"", k->h.group, v->key,
                 v->delay_ms, m.err);
        return;
    }
    if (rc == 0 && m.hold_ms > 0) {
        inbox_release(k->inbox, v->key);
        later(k, v, m.hold_ms, &k->stats.held);
        return;
    }
    if (rc == 0) {
        int drc = m.done ? 0 : inbox_done(k->inbox, v->key, &m.mark);
        if (drc != 0 && drc != ROOMD_ESTALE) {
            /* Not recorded: no Ack, so the redelivery finds our claim and
             * repeats the (idempotent) effect, then records it. */
            log_warn("consume", "inbox write failed after the effect, again shortly",
                     "group=%s key=%s error=\"%s\"", k->h.group, v->key, inbox_errmsg(k->inbox));
            later(k, v, consume_retry_delay_ms(&k->o, 1), &k->stats.retried);
            consume_core_count(k, &k->stats.retried_inbox);
            return;
        }
        v->action = CONSUME_ACK;
        consume_core_count(k, &k->stats.handled);
        return;
    }
    if (!roomd_err_retryable(rc)) {
        dead(v, CONSUME_DEAD_PERMANENT, *m.err ? m.err : roomd_strerror(rc));
        return;
    }
    failures = 0;
    if (inbox_fail(k->inbox, v->key, m.err, &failures) != 0)
        log_warn("consume", "inbox write failed", "group=%s key=%s error=\"%s\"", k->h.group,
                 v->key, inbox_errmsg(k->inbox));
    if (!k->h.holds && !inbox_shared(k->inbox) && (uint64_t)failures < delivered)
        failures = (int)delivered; /* redeliveries without a verdict count as failures too */
    if (failures > k->o.max_reconsume) {
        dead(v, CONSUME_DEAD_MAX_RECONSUME, *m.err ? m.err : roomd_strerror(rc));
        return;
    }
    v->action = CONSUME_RETRY;
    v->failures = failures;
    v->delay_ms = consume_retry_delay_ms(&k->o, failures);
    snprintf(v->why, sizeof(v->why), "%s", m.err);
    consume_core_count(k, &k->stats.retried);
    log_info("consume", "message failed, redelivery scheduled",
             "group=%s key=%s failures=%d delay_ms=%" PRId64 " error=\"%s\"", k->h.group, v->key,
             failures, v->delay_ms, m.err);
}

void
consume_core_dead(struct consume_core *k, const struct consume_verdict *v, uint64_t seq,
                  uint64_t delivered)
{
    if (*v->key && inbox_dead(k->inbox, v->key, v->why) != 0)
        log_warn("consume", "inbox write failed", "group=%s key=%s error=\"%s\"", k->h.group,
                 v->key, inbox_errmsg(k->inbox));
    pthread_mutex_lock(&k->mu);
    k->stats.dead++;
    k->stats.dead_by[v->reason]++;
    pthread_mutex_unlock(&k->mu);
    log_warn("consume", "message dead-lettered",
             "group=%s key=%s seq=%" PRIu64 " deliveries=%" PRIu64 " reason=%s error=\"%s\"",
             k->h.group, v->key, seq, delivered, consume_dead_reason_names[v->reason], v->why);
}

/* ==== lifetime ==== */

void
consume_core_purge(struct consume_core *k)
{
    int64_t unsettled = 0;

    if (inbox_purge(k->inbox, clock_wall_ms() - k->o.inbox_keep_ms, &unsettled) != 0) {
        log_warn("consume", "inbox purge failed", "group=%s error=\"%s\"", k->h.group,
                 inbox_errmsg(k->inbox));
        return;
    }
    if (unsettled <= 0)
        return;
    pthread_mutex_lock(&k->mu);
    k->stats.purged_unsettled += (uint64_t)unsettled;
    pthread_mutex_unlock(&k->mu);
    log_warn("consume", "purged inbox keys never settled: their effect may be missing",
             "group=%s keys=%lld older_than_ms=%lld", k->h.group, (long long)unsettled,
             (long long)k->o.inbox_keep_ms);
}

int
consume_core_init(struct consume_core *k, const struct consume_handler *h,
                  const struct consume_opts *o, char *err, size_t errlen)
{
    memset(k, 0, sizeof(*k));
    k->h = *h;
    k->o = *o;
    if (k->o.circuit_failures <= 0)
        k->o.circuit_failures = 5;
    if (k->o.circuit_probe_ms <= 0)
        k->o.circuit_probe_ms = 1000;
    pthread_mutex_init(&k->mu, NULL);
    k->stats.downstream_up = true;
    struct inbox_config ic = {
        .group = h->group,
        .driver = o->inbox,
        .store_dir = o->store_dir,
        .store = o->store,
        .owner = o->owner,
        /* longer than one handle() may take, so a slow effect is never
         * redone by another node while it still runs */
        .claim_ms = (h->max_handle_ms > o->ack_wait_ms ? h->max_handle_ms : o->ack_wait_ms) + 1000,
        .schema = h->schema,
    };
    int rc = inbox_open(&k->inbox, &ic, err, errlen);
    if (rc != 0) {
        pthread_mutex_destroy(&k->mu);
        k->inbox = NULL;
        return rc;
    }
    log_info("consume", "group inbox open", "group=%s inbox=%s where=\"%s\"", h->group,
             inbox_name(k->inbox), inbox_where(k->inbox));
    return 0;
}

void
consume_core_fini(struct consume_core *k)
{
    if (k->inbox == NULL)
        return;
    inbox_close(k->inbox);
    k->inbox = NULL;
    pthread_mutex_destroy(&k->mu);
}
