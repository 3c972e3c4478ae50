/* SPDX-License-Identifier: Apache-2.0 */
/*
 * group.c: the consumer kit (see group.h for the contract and the inbox).
 * Read top-down: options, the handler's view of the inbox (inbox.h), the
 * per-message verdicts (claim, process, dead_letter), then the group
 * thread (bind, fetch loop).
 */
#include "consume/group.h"

#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/thread.h"
#include "core/xmalloc.h"
#include "room_events.pb-c.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEFAULT_ACK_WAIT_MS 30000
#define PURGE_EVERY_MS (10LL * 60 * 1000)
/* Deliveries past the last allowed one that still get no verdict (the
 * process died or hung in the handler each time) end in the DLQ too. */
#define CRASH_SLACK 2
/* A room_seq gap: deliveries held before handling anyway, and the hold. */
#define CONSUME_GAP_HOLDS 8
#define CONSUME_GAP_HOLD_MS 250
/* The group's position at the broker (lag, oldest unacknowledged) is read this often. */
#define CONSUME_POS_EVERY_MS 5000
/* Outage Naks remembered per stream sequence (SQLite inbox: JetStream's
 * delivery count stands in for the failures, less these). */
#define OUTAGE_SLOTS 256

const char *const consume_dead_reason_names[CONSUME_DEAD_REASONS_] = {"permanent", "max_reconsume",
                                                                      "undecodable", "no_verdict"};
const int64_t consume_proc_le_us[CONSUME_PROC_BUCKETS] = {
    1000, 5000, 10000, 25000, 50000, 100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000};

/* RocketMQ's reconsume levels 3..18 (10s 30s 1m 2m ... 2h). */
static const int64_t rocketmq_delays_ms[] = {
    10000,  30000,  60000,  120000, 180000,  240000,  300000,  360000,
    420000, 480000, 540000, 600000, 1200000, 1800000, 3600000, 7200000,
};

struct consume_group {
    struct bus *bus;
    struct consume_handler h;
    struct consume_opts o;
    struct consume_inbox *inbox;
    natsSubscription *sub;
    struct bg_thread th;
    pthread_mutex_t stats_mu;
    struct consume_stats stats;
    int last_bind_rc;
    /* the transport circuit (group.h), under stats_mu with the stats */
    int circ_fails;
    int64_t circ_probe_at_ms;
    /* outage Naks by stream sequence (group thread only) */
    struct {
        uint64_t seq;
        uint64_t naks;
    } outage[OUTAGE_SLOTS];
};

/* ==== options ==== */

void
consume_opts_from_conf(struct consume_opts *o, const struct conf_rocketmq *c, int max_reconsume)
{
    memset(o, 0, sizeof(*o));
    o->store_dir =
        c->consumer_store_dir && *c->consumer_store_dir ? c->consumer_store_dir : "./var/consumers";
    o->inbox = (enum inbox_driver)c->consumer_inbox;
    o->ack_wait_ms = c->consumer_ack_wait_ms > 0 ? c->consumer_ack_wait_ms : DEFAULT_ACK_WAIT_MS;
    o->max_reconsume = max_reconsume >= 0 ? max_reconsume : 16;
    if (c->nconsumer_retry_delays > 0) {
        o->ndelays = c->nconsumer_retry_delays > 16 ? 16 : c->nconsumer_retry_delays;
        memcpy(o->delays_ms, c->consumer_retry_delays_ms, sizeof(int64_t) * o->ndelays);
    } else {
        o->ndelays = 16;
        memcpy(o->delays_ms, rocketmq_delays_ms, sizeof(rocketmq_delays_ms));
    }
    o->fetch_batch = 16;
    o->fetch_timeout_ms = 1000;
    int64_t age = c->stream_max_age_ms > 0 ? c->stream_max_age_ms : 72LL * 3600 * 1000;
    o->inbox_keep_ms = age + 24LL * 3600 * 1000; /* longer than any redelivery */
    o->circuit_failures = c->consumer_circuit_failures > 0 ? c->consumer_circuit_failures : 5;
    o->circuit_probe_ms = c->consumer_circuit_probe_ms > 0 ? c->consumer_circuit_probe_ms : 1000;
}

int64_t
consume_retry_delay_ms(const struct consume_opts *o, int failures)
{
    if (o->ndelays <= 0)
        return 1000;
    int i = failures - 1;
    if (i < 0)
        i = 0;
    if (i >= o->ndelays)
        i = o->ndelays - 1;
    return o->delays_ms[i];
}

/* ==== the handler's view of the inbox ==== */

int
consume_tx_begin(struct consume_msg *m)
{
    int rc = inbox_tx_begin(m->inbox, m->key);

    if (rc != 0)
        snprintf(m->err, sizeof(m->err), "inbox: %s", inbox_errmsg(m->inbox));
    return rc;
}

int
consume_tx_commit_done(struct consume_msg *m)
{
    int rc = inbox_tx_commit_done(m->inbox, m->key, &m->mark);

    if (rc != 0) {
        snprintf(m->err, sizeof(m->err), "inbox: %s", inbox_errmsg(m->inbox));
        return rc;
    }
    m->done = true;
    return 0;
}

void
consume_tx_rollback(struct consume_msg *m)
{
    inbox_tx_rollback(m->inbox);
}

int
consume_exec(struct consume_msg *m, const struct consume_sql *q, char *out, size_t outlen,
             const char *types, ...)
{
    struct consume_arg a[9];
    va_list ap;
    int n = 0;

    va_start(ap, types);
    for (; types[n] && n < 9; n++) {
        a[n].type = types[n];
        if (types[n] == 'i')
            a[n].i = va_arg(ap, int64_t);
        else
            a[n].s = va_arg(ap, const char *);
    }
    va_end(ap);
    int rc = inbox_exec(m->inbox, q, a, n, out, outlen);
    if (rc != 0)
        snprintf(m->err, sizeof(m->err), "%s", inbox_errmsg(m->inbox));
    return rc;
}

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

/* ==== verdicts ==== */

static void
count(struct consume_group *g, uint64_t *field)
{
    pthread_mutex_lock(&g->stats_mu);
    (*field)++;
    pthread_mutex_unlock(&g->stats_mu);
}

/* One run of the handler into the processing histogram. */
static void
observe(struct consume_group *g, int64_t us)
{
    pthread_mutex_lock(&g->stats_mu);
    for (int i = 0; i < CONSUME_PROC_BUCKETS; i++)
        if (us <= consume_proc_le_us[i])
            g->stats.proc_cum[i]++;
    g->stats.proc_count++;
    g->stats.proc_sum_us += us;
    pthread_mutex_unlock(&g->stats_mu);
}

static jsOptions *
ack_opts(struct consume_group *g, jsOptions *jo)
{
    jsOptions_Init(jo);
    jo->Wait = bus_api_wait_ms(g->bus);
    return jo;
}

/* Publishes the message to "<ns>hyapp_dlq.<group>", waits for the PubAck,
 * then Terms it. On failure the message is Nak'ed to come back. */
static void
dead_letter(struct consume_group *g, natsMsg *msg, const char *key, uint64_t seq,
            uint64_t delivered, enum consume_dead_reason reason, const char *why)
{
    char subject[256], seqs[32], dels[32], e[256];
    natsMsg *dm = NULL;
    jsOptions jo;
    int rc = ROOMD_ERETRY;

    snprintf(seqs, sizeof(seqs), "%" PRIu64, seq);
    snprintf(dels, sizeof(dels), "%" PRIu64, delivered);
    char *msg_id = xasprintf("dlq-%s-%" PRIu64, g->h.group, seq);
    snprintf(e, sizeof(e), "cannot build the dead letter");
    if (bus_subject(g->bus, BUS_STREAM_DLQ, g->h.group, subject, sizeof(subject)) == 0 &&
        natsMsg_Create(&dm, subject, NULL, natsMsg_GetData(msg), natsMsg_GetDataLength(msg)) ==
            NATS_OK &&
        natsMsgHeader_Set(dm, "Roomd-Group", g->h.group) == NATS_OK &&
        natsMsgHeader_Set(dm, "Roomd-Subject", natsMsg_GetSubject(msg)) == NATS_OK &&
        natsMsgHeader_Set(dm, "Roomd-Stream-Seq", seqs) == NATS_OK &&
        natsMsgHeader_Set(dm, "Roomd-Deliveries", dels) == NATS_OK &&
        natsMsgHeader_Set(dm, "Roomd-Key", key) == NATS_OK &&
        natsMsgHeader_Set(dm, "Roomd-Reason", consume_dead_reason_names[reason]) == NATS_OK &&
        natsMsgHeader_Set(dm, "Roomd-Error", why && *why ? why : "-") == NATS_OK)
        rc = bus_publish_msg(g->bus, BUS_STREAM_DLQ, dm, msg_id,
                             clock_mono_ms() + bus_api_wait_ms(g->bus), NULL, NULL, e, sizeof(e));
    natsMsg_Destroy(dm);
    free(msg_id);
    if (rc != 0) {
        log_warn("consume", "dead letter publish failed, will retry",
                 "group=%s key=%s error=\"%s\"", g->h.group, key, e);
        natsMsg_NakWithDelay(msg, consume_retry_delay_ms(&g->o, 1), ack_opts(g, &jo));
        return;
    }
    natsMsg_Term(msg, ack_opts(g, &jo));
    if (*key && inbox_dead(g->inbox, key, why) != 0)
        log_warn("consume", "inbox write failed", "group=%s key=%s error=\"%s\"", g->h.group, key,
                 inbox_errmsg(g->inbox));
    pthread_mutex_lock(&g->stats_mu);
    g->stats.dead++;
    g->stats.dead_by[reason]++;
    pthread_mutex_unlock(&g->stats_mu);
    log_warn("consume", "message dead-lettered",
             "group=%s key=%s stream_seq=%" PRIu64 " deliveries=%" PRIu64 " reason=%s error=\"%s\"",
             g->h.group, key, seq, delivered, consume_dead_reason_names[reason], why ? why : "");
}

/* Nak without counting a failure: see it again after delay_ms. */
static void
later(struct consume_group *g, natsMsg *msg, int64_t delay_ms, uint64_t *counter)
{
    jsOptions jo;

    natsMsg_NakWithDelay(msg, delay_ms, ack_opts(g, &jo));
    count(g, counter);
}

/* ==== outages: the transport circuit (group.h) ==== */

/* True when rc says the downstream did not answer (or only with its rate
 * limit): an outage, which costs the event no attempt. */
static bool
transport_failure(int rc)
{
    return rc == ROOMD_EUNAVAIL || rc == ROOMD_ETIMEDOUT || rc == ROOMD_ELIMIT;
}

/* The Nak delay of an outage: no sooner than the next probe. */
static int64_t
outage_delay_ms(const struct consume_group *g)
{
    int64_t d = consume_retry_delay_ms(&g->o, 1);

    return d > g->o.circuit_probe_ms ? d : g->o.circuit_probe_ms;
}

/* True when the handler may be called: no downstream, the circuit closed,
 * or open with its half-open probe due (this call is it). */
static bool
circuit_admit(struct consume_group *g)
{
    bool ok = true;
    int64_t now = clock_mono_ms();

    if (g->h.downstream == NULL)
        return true;
    pthread_mutex_lock(&g->stats_mu);
    if (g->stats.circuit_open) {
        ok = now >= g->circ_probe_at_ms;
        if (ok)
            g->circ_probe_at_ms = now + g->o.circuit_probe_ms;
    }
    pthread_mutex_unlock(&g->stats_mu);
    return ok;
}

/* Notes one call of the downstream: answered (any verdict but a transport
 * failure) closes the circuit; circuit_failures failures in a row open it. */
static void
circuit_note(struct consume_group *g, bool answered, const char *why)
{
    bool opened = false, closed = false;

    if (g->h.downstream == NULL)
        return;
    pthread_mutex_lock(&g->stats_mu);
    g->stats.downstream_up = answered;
    if (answered) {
        closed = g->stats.circuit_open;
        g->stats.circuit_open = false;
        g->circ_fails = 0;
    } else {
        snprintf(g->stats.downstream_err, sizeof(g->stats.downstream_err), "%s", why);
        if (++g->circ_fails >= g->o.circuit_failures && !g->stats.circuit_open) {
            g->stats.circuit_open = opened = true;
            g->stats.circuit_opened++;
            g->circ_probe_at_ms = clock_mono_ms() + g->o.circuit_probe_ms;
        }
    }
    pthread_mutex_unlock(&g->stats_mu);
    if (opened)
        log_warn("consume", "downstream unreachable: circuit open, no attempts counted",
                 "group=%s downstream=%s failures=%d probe_every_ms=%" PRId64 " error=\"%s\"",
                 g->h.group, g->h.downstream, g->o.circuit_failures, g->o.circuit_probe_ms, why);
    if (closed)
        log_info("consume", "downstream answers again: circuit closed", "group=%s downstream=%s",
                 g->h.group, g->h.downstream);
}

/* The group thread's probe of an open circuit no message probed in time. */
static void
circuit_probe(struct consume_group *g)
{
    char err[256] = "";
    bool due;

    if (g->h.downstream == NULL || g->h.probe == NULL)
        return;
    pthread_mutex_lock(&g->stats_mu);
    due = g->stats.circuit_open && clock_mono_ms() >= g->circ_probe_at_ms;
    if (due)
        g->circ_probe_at_ms = clock_mono_ms() + g->o.circuit_probe_ms;
    pthread_mutex_unlock(&g->stats_mu);
    if (!due)
        return;
    int rc = g->h.probe(g->h.arg, clock_mono_ms() + g->o.circuit_probe_ms, err, sizeof(err));
    circuit_note(g, rc != ROOMD_EUNAVAIL, err);
}

/* Outage Naks of stream sequence seq so far (add: one more now). */
static uint64_t
outage_naks(struct consume_group *g, uint64_t seq, bool add)
{
    size_t i = (size_t)(seq % OUTAGE_SLOTS);

    if (g->outage[i].seq != seq) {
        if (!add)
            return 0;
        g->outage[i].seq = seq;
        g->outage[i].naks = 0;
    }
    if (add)
        g->outage[i].naks++;
    return g->outage[i].naks;
}

/* Nak of an outage: no failure counted (counter: outages or circuit_skipped). */
static void
outage_later(struct consume_group *g, natsMsg *msg, uint64_t seq, uint64_t *counter)
{
    outage_naks(g, seq, true);
    later(g, msg, outage_delay_ms(g), counter);
}

/* Claims key in the inbox: true when this delivery is to be handled (with
 * *failures), false when it got its verdict here (settled: Ack; another
 * owner's claim or no inbox: later). */
static bool
claim(struct consume_group *g, natsMsg *msg, const char *key, const char *app, int *failures)
{
    enum inbox_claim res = INBOX_CLAIMED;
    int64_t until = 0;
    jsOptions jo;
    jsErrCode jerr = 0;

    if (inbox_claim(g->inbox, key, app, &res, failures, &until) != 0) {
        log_warn("consume", "inbox read failed", "group=%s key=%s error=\"%s\"", g->h.group, key,
                 inbox_errmsg(g->inbox));
        later(g, msg, consume_retry_delay_ms(&g->o, 1), &g->stats.retried);
        count(g, &g->stats.retried_inbox);
        return false;
    }
    if (res == INBOX_SETTLED) {
        /* A redelivery of something already settled: no second effect. */
        natsMsg_AckSync(msg, ack_opts(g, &jo), &jerr);
        count(g, &g->stats.duplicates);
        log_debug("consume", "duplicate acknowledged", "group=%s key=%s", g->h.group, key);
        return false;
    }
    if (res == INBOX_BUSY) {
        /* Another node has it in hand: look again when its claim expires
         * (it is settled by then, or taken over from a dead node). */
        int64_t d = until - clock_wall_ms() + 100;
        later(g, msg, d < 100 ? 100 : d, &g->stats.busy);
        log_info("consume", "claimed by another node, later", "group=%s key=%s delay_ms=%" PRId64,
                 g->h.group, key, d);
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
room_turn(struct consume_group *g, natsMsg *msg, const char *key, const struct envelope *env,
          uint64_t delivered)
{
    int64_t mark = 0;

    if (env->room_seq <= 0)
        return true;
    if (inbox_mark_get(g->inbox, env->app, env->room, &mark) != 0) {
        log_warn("consume", "room_seq mark read failed", "group=%s key=%s error=\"%s\"", g->h.group,
                 key, inbox_errmsg(g->inbox));
        return true;
    }
    if (mark > 0 && env->room_seq > mark + 1) {
        /* holds count as deliveries: stay below the kit's delivery limit */
        if (delivered <= CONSUME_GAP_HOLDS && delivered <= (uint64_t)g->o.max_reconsume) {
            later(g, msg, CONSUME_GAP_HOLD_MS, &g->stats.held);
            return false;
        }
        log_warn("consume", "room_seq gap: handled without the earlier events",
                 "group=%s key=%s room=%s room_seq=%" PRId64 " mark=%" PRId64, g->h.group, key,
                 env->room, env->room_seq, mark);
    }
    return true;
}

/* Handles one fetched message to its verdict (see group.h). */
static void
process(struct consume_group *g, natsMsg *msg)
{
    jsMsgMetaData *meta = NULL;
    char key[CONSUME_KEY_MAX] = "";
    struct envelope env = {0};
    int failures = 0, rc;
    uint64_t seq = 0, delivered = 1;
    jsOptions jo;
    jsErrCode jerr = 0;
    const uint8_t *data = (const uint8_t *)natsMsg_GetData(msg);
    size_t len = (size_t)natsMsg_GetDataLength(msg);

    if (natsMsg_GetMetaData(&meta, msg) == NATS_OK) {
        seq = meta->Sequence.Stream;
        delivered = meta->NumDelivered;
        jsMsgMetaData_Destroy(meta);
    }
    if (delivered > 1)
        count(g, &g->stats.redeliveries);
    /* the downstream is known not to answer: no call, no attempt */
    if (!circuit_admit(g)) {
        outage_later(g, msg, seq, &g->stats.circuit_skipped);
        return;
    }
    /* outage Naks are deliveries that were no attempts (this node's) */
    uint64_t naks = outage_naks(g, seq, false);
    delivered = delivered > naks ? delivered - naks : 1;
    rc = g->h.key ? g->h.key(g->h.arg, data, len, key, sizeof(key))
                  : envelope_ids(data, len, key, sizeof(key), &env);
    if (rc != 0) {
        dead_letter(g, msg, "", seq, delivered, CONSUME_DEAD_UNDECODABLE, "undecodable message");
        return;
    }
    /* an outbox event: order and dedupe by its room's high-water mark */
    bool ordered = g->h.key == NULL && g->o.room_order;
    if (ordered && !room_turn(g, msg, key, &env, delivered))
        return;
    if (!claim(g, msg, key, env.app, &failures))
        return;
    /* attempts so far: the shared inbox counts them for every node; else
     * JetStream's delivery count stands in for them */
    uint64_t attempts = inbox_shared(g->inbox) ? (uint64_t)failures + 1 : delivered;
    if (!g->h.holds && attempts > (uint64_t)g->o.max_reconsume + 1 + CRASH_SLACK) {
        dead_letter(g, msg, key, seq, delivered, CONSUME_DEAD_NO_VERDICT,
                    "delivery limit reached without a verdict");
        return;
    }

    struct consume_msg m = {
        .group = g->h.group,
        .subject = natsMsg_GetSubject(msg),
        .data = data,
        .len = len,
        .key = key,
        .stream_seq = seq,
        .num_delivered = delivered,
        .failures = failures,
        .nmsg = msg,
        .inbox = g->inbox,
        .mark = {.app = env.app, .room = env.room, .seq = ordered ? env.room_seq : 0},
    };
    int64_t t0 = clock_mono_us();
    rc = g->h.handle(g->h.arg, &m);
    observe(g, clock_mono_us() - t0);
    if (inbox_in_tx(g->inbox)) {
        inbox_tx_rollback(g->inbox);
        if (rc == 0) {
            rc = ROOMD_EINTERNAL;
            snprintf(m.err, sizeof(m.err), "handler left a transaction open");
        }
    }
    if (rc == ROOMD_ESTALE) {
        /* Our claim expired and another node took the key over: it settles
         * it; this delivery comes back to find that out. */
        log_info("consume", "claim taken over by another node", "group=%s key=%s", g->h.group, key);
        later(g, msg, g->o.ack_wait_ms, &g->stats.busy);
        return;
    }
    circuit_note(g, !transport_failure(rc), m.err);
    if (transport_failure(rc)) {
        /* An outage: the event is not at fault; it comes back, no failure.
         * A claim not given back expires (claim_ms) and its takeover counts. */
        if (inbox_release(g->inbox, key) != 0)
            log_warn("consume", "inbox release failed: the claim expires instead",
                     "group=%s key=%s error=\"%s\"", g->h.group, key, inbox_errmsg(g->inbox));
        outage_later(g, msg, seq, &g->stats.outages);
        log_info("consume", "downstream unreachable, redelivery without an attempt",
                 "group=%s key=%s delay_ms=%" PRId64 " error=\"%s\"", g->h.group, key,
                 outage_delay_ms(g), m.err);
        return;
    }
    if (rc == 0 && m.hold_ms > 0) {
        inbox_release(g->inbox, key);
        later(g, msg, m.hold_ms, &g->stats.held);
        return;
    }
    if (rc == 0) {
        int drc = m.done ? 0 : inbox_done(g->inbox, key, &m.mark);
        if (drc != 0 && drc != ROOMD_ESTALE) {
            /* Not recorded: no Ack, so the redelivery finds our claim and
             * repeats the (idempotent) effect, then records it. */
            log_warn("consume", "inbox write failed after the effect, again shortly",
                     "group=%s key=%s error=\"%s\"", g->h.group, key, inbox_errmsg(g->inbox));
            later(g, msg, consume_retry_delay_ms(&g->o, 1), &g->stats.retried);
            count(g, &g->stats.retried_inbox);
            return;
        }
        if (natsMsg_AckSync(msg, ack_opts(g, &jo), &jerr) != NATS_OK)
            log_warn("consume", "ack failed; the redelivery will be deduplicated",
                     "group=%s key=%s", g->h.group, key);
        count(g, &g->stats.handled);
        return;
    }
    if (!roomd_err_retryable(rc)) {
        dead_letter(g, msg, key, seq, delivered, CONSUME_DEAD_PERMANENT,
                    *m.err ? m.err : roomd_strerror(rc));
        return;
    }
    failures = 0;
    if (inbox_fail(g->inbox, key, m.err, &failures) != 0)
        log_warn("consume", "inbox write failed", "group=%s key=%s error=\"%s\"", g->h.group, key,
                 inbox_errmsg(g->inbox));
    if (!g->h.holds && !inbox_shared(g->inbox) && (uint64_t)failures < delivered)
        failures = (int)delivered; /* AckWait expiries count as failures too */
    if (failures > g->o.max_reconsume) {
        dead_letter(g, msg, key, seq, delivered, CONSUME_DEAD_MAX_RECONSUME,
                    *m.err ? m.err : roomd_strerror(rc));
        return;
    }
    int64_t delay = consume_retry_delay_ms(&g->o, failures);
    natsMsg_NakWithDelay(msg, delay, ack_opts(g, &jo));
    count(g, &g->stats.retried);
    log_info("consume", "message failed, redelivery scheduled",
             "group=%s key=%s failures=%d delay_ms=%" PRId64 " error=\"%s\"", g->h.group, key,
             failures, delay, m.err);
}

/* ==== the group thread ==== */

static void
unbind(struct consume_group *g)
{
    if (g->sub) {
        natsSubscription_Unsubscribe(g->sub);
        natsSubscription_Destroy(g->sub);
        g->sub = NULL;
    }
    pthread_mutex_lock(&g->stats_mu);
    g->stats.bound = false;
    pthread_mutex_unlock(&g->stats_mu);
}

static int
bind(struct consume_group *g, char *err, size_t errlen)
{
    char subject[256];
    jsSubOptions so;
    jsOptions jo;
    jsErrCode jerr = 0;
    /* The kit decides when a message is dead (CRASH_SLACK included), so
     * the server never stops delivering on its own. */
    int rc = bus_ensure_consumer(g->bus, g->h.stream, g->h.group, g->o.ack_wait_ms, -1,
                                 g->o.max_ack_pending, err, errlen);

    if (rc != 0)
        return rc;
    snprintf(subject, sizeof(subject), "%s.*", bus_subject_prefix(g->bus, g->h.stream));
    jsSubOptions_Init(&so);
    so.Stream = bus_stream_name(g->bus, g->h.stream);
    so.Consumer = g->h.group;
    natsStatus s = js_PullSubscribe(&g->sub, bus_js(g->bus), subject, g->h.group, ack_opts(g, &jo),
                                    &so, &jerr);
    if (s != NATS_OK) {
        snprintf(err, errlen, "pull subscribe %s: %s (jerr %d)", g->h.group, natsStatus_GetText(s),
                 (int)jerr);
        g->sub = NULL;
        return ROOMD_ERETRY;
    }
    pthread_mutex_lock(&g->stats_mu);
    g->stats.bound = true;
    pthread_mutex_unlock(&g->stats_mu);
    return 0;
}

/* Retention of the inbox (inbox_purge): keys older than inbox_keep_ms, past
 * any redelivery. An unsettled one deleted is an event whose effect may
 * never have been done (its consumer died and the stream no longer holds
 * it): logged and counted, for an operator to look at. */
static void
purge_inbox(struct consume_group *g)
{
    int64_t unsettled = 0;

    if (inbox_purge(g->inbox, clock_wall_ms() - g->o.inbox_keep_ms, &unsettled) != 0) {
        log_warn("consume", "inbox purge failed", "group=%s error=\"%s\"", g->h.group,
                 inbox_errmsg(g->inbox));
        return;
    }
    if (unsettled <= 0)
        return;
    pthread_mutex_lock(&g->stats_mu);
    g->stats.purged_unsettled += (uint64_t)unsettled;
    pthread_mutex_unlock(&g->stats_mu);
    log_warn("consume", "purged inbox keys never settled: their effect may be missing",
             "group=%s keys=%lld older_than_ms=%lld", g->h.group, (long long)unsettled,
             (long long)g->o.inbox_keep_ms);
}

/* The group's lag and oldest unacknowledged message, from the broker. */
static void
read_position(struct consume_group *g)
{
    struct bus_consumer_pos p;
    char err[256];
    int rc = bus_consumer_pos(g->bus, g->h.stream, g->h.group, &p, err, sizeof(err));
    uint64_t dlq_all = 0, dlq_mine = 0;
    int64_t dlq_first = 0;
    char e2[256];
    int drc = bus_stream_oldest(g->bus, BUS_STREAM_DLQ, g->h.group, &dlq_all, &dlq_mine, &dlq_first,
                                e2, sizeof(e2));

    pthread_mutex_lock(&g->stats_mu);
    g->stats.pos_ok = rc == 0;
    if (rc == 0) {
        g->stats.lag = p.last_seq > p.ack_floor ? p.last_seq - p.ack_floor : 0;
        g->stats.ack_pending = p.ack_pending;
        g->stats.redelivered_pending = p.redelivered;
        g->stats.oldest_unacked_ms = g->stats.lag > 0 ? p.oldest_unacked_ms : 0;
    }
    g->stats.dlq_ok = drc == 0;
    if (drc == 0) {
        g->stats.dlq_msgs = dlq_all;
        g->stats.dlq_group_msgs = dlq_mine;
        g->stats.dlq_oldest_ms = dlq_first;
    }
    pthread_mutex_unlock(&g->stats_mu);
    if (rc != 0)
        log_debug("consume", "consumer position unknown", "group=%s error=\"%s\"", g->h.group, err);
}

static void *
group_main(void *arg)
{
    struct consume_group *g = arg;
    int64_t backoff = 100, next_purge = 0, next_pos = 0;
    int errs = 0;
    char err[512];

    while (!bg_thread_stopping(&g->th)) {
        if (g->sub == NULL) {
            int rc = bind(g, err, sizeof(err));
            if (rc != 0) {
                if (g->last_bind_rc == 0)
                    log_warn("consume", "group not bound yet, retrying", "group=%s error=\"%s\"",
                             g->h.group, err);
                g->last_bind_rc = rc;
                bg_thread_sleep(&g->th, backoff);
                backoff = backoff * 2 > 2000 ? 2000 : backoff * 2;
                continue;
            }
            g->last_bind_rc = 0;
            backoff = 100;
            log_info("consume", "group bound", "group=%s stream=%s db=%s", g->h.group,
                     bus_stream_name(g->bus, g->h.stream), inbox_where(g->inbox));
        }
        if (clock_mono_ms() >= next_purge) { /* idle or not: a fetch timeout skips the rest */
            purge_inbox(g);
            next_purge = clock_mono_ms() + PURGE_EVERY_MS;
        }
        if (clock_mono_ms() >= next_pos) {
            read_position(g);
            next_pos = clock_mono_ms() + CONSUME_POS_EVERY_MS;
        }
        circuit_probe(g);
        natsMsgList list = {0};
        jsErrCode jerr = 0;
        int64_t t0 = clock_mono_ms();
        natsStatus s =
            natsSubscription_Fetch(&list, g->sub, g->o.fetch_batch, g->o.fetch_timeout_ms, &jerr);
        if (s == NATS_TIMEOUT) {
            /* "No messages" -- also returned at once for a stale 408 from
             * an earlier pull (nats.c 3.4.1 pitfall 1): never spin. */
            if (clock_mono_ms() - t0 < 2)
                bg_thread_sleep(&g->th, 5);
            errs = 0;
            continue;
        }
        if (s != NATS_OK) {
            count(g, &g->stats.fetch_errors);
            if (errs++ == 0)
                log_warn("consume", "fetch failed", "group=%s status=\"%s\" jerr=%d", g->h.group,
                         natsStatus_GetText(s), (int)jerr);
            bg_thread_sleep(&g->th, errs * 100 > 1000 ? 1000 : errs * 100);
            if (errs >= 3 && bus_connected(g->bus)) {
                unbind(g); /* consumer or stream gone: set up and bind again */
                bus_invalidate(g->bus);
            }
            continue;
        }
        errs = 0;
        for (int i = 0; i < list.Count; i++)
            process(g, list.Msgs[i]);
        natsMsgList_Destroy(&list);
    }
    unbind(g);
    return NULL;
}

/* ==== start / stop ==== */

static void
group_free(struct consume_group *g)
{
    inbox_close(g->inbox);
    bus_unref(g->bus);
    bg_thread_stop(&g->th); /* a no-op once consume_group_stop joined */
    pthread_mutex_destroy(&g->stats_mu);
    free(g);
}

int
consume_group_start(struct consume_group **out, struct bus *bus, const struct consume_handler *h,
                    const struct consume_opts *o, char *err, size_t errlen)
{
    struct consume_group *g = xcalloc(1, sizeof(*g));

    *out = NULL;
    g->h = *h;
    g->o = *o;
    if (g->o.fetch_batch <= 0 || g->o.fetch_batch > 64)
        g->o.fetch_batch = 16;
    /* nats.c's Fetch waits for a full batch (or the timeout): a held message
     * coming due mid-fetch would wait up to fetch_timeout. A group that holds
     * messages until a time (rocket wake-ups) fetches one at a time. */
    if (g->h.holds)
        g->o.fetch_batch = 1;
    if (g->o.fetch_timeout_ms <= 0)
        g->o.fetch_timeout_ms = 1000;
    bus_ref(bus);
    g->bus = bus;
    pthread_mutex_init(&g->stats_mu, NULL);
    g->stats.downstream_up = true;
    if (g->o.circuit_failures <= 0)
        g->o.circuit_failures = 5;
    if (g->o.circuit_probe_ms <= 0)
        g->o.circuit_probe_ms = 1000;
    bg_thread_init(&g->th);
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
    int rc = inbox_open(&g->inbox, &ic, err, errlen);
    if (rc != 0) {
        group_free(g);
        return rc;
    }
    log_info("consume", "group inbox open", "group=%s inbox=%s where=\"%s\"", h->group,
             inbox_name(g->inbox), inbox_where(g->inbox));
    if (bg_thread_spawn(&g->th, group_main, g) != 0) {
        snprintf(err, errlen, "cannot start the %s thread", h->group);
        group_free(g);
        return ROOMD_EIO;
    }
    *out = g;
    return 0;
}

void
consume_group_stop(struct consume_group *g)
{
    if (g == NULL)
        return;
    bg_thread_stop(&g->th);
    log_info("consume", "group stopped",
             "group=%s handled=%" PRIu64 " duplicates=%" PRIu64 " retried=%" PRIu64 " busy=%" PRIu64
             " dead=%" PRIu64,
             g->h.group, g->stats.handled, g->stats.duplicates, g->stats.retried, g->stats.busy,
             g->stats.dead);
    group_free(g);
}

void
consume_group_stats(struct consume_group *g, struct consume_stats *out)
{
    pthread_mutex_lock(&g->stats_mu);
    *out = g->stats;
    pthread_mutex_unlock(&g->stats_mu);
}
