/* SPDX-License-Identifier: Apache-2.0 */
/*
 * group.c: the consumer kit (see group.h for the contract and the inbox).
 * Read top-down: options, the handler's view of the inbox (inbox.h), the
 * verdicts of consume/verdict.c carried out on JetStream (process,
 * dead_letter), then the group thread (bind, fetch loop).
 */
#include "consume/group.h"

#include "consume/verdict.h"

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
    struct consume_core k; /* handler, options, inbox, counters, circuit (verdict.h) */
    struct bus *bus;
    natsSubscription *sub;
    struct bg_thread th;
    int last_bind_rc;
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

/* ==== verdicts (consume/verdict.c) carried out on JetStream ==== */

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
dead_letter(struct consume_group *g, natsMsg *msg, const struct consume_verdict *v, uint64_t seq,
            uint64_t delivered)
{
    char subject[256], seqs[32], dels[32], e[256];
    natsMsg *dm = NULL;
    jsOptions jo;
    int rc = ROOMD_ERETRY;
    const char *group = g->k.h.group;

    snprintf(seqs, sizeof(seqs), "%" PRIu64, seq);
    snprintf(dels, sizeof(dels), "%" PRIu64, delivered);
    char *msg_id = xasprintf("dlq-%s-%" PRIu64, group, seq);
    snprintf(e, sizeof(e), "cannot build the dead letter");
    if (bus_subject(g->bus, BUS_STREAM_DLQ, group, subject, sizeof(subject)) == 0 &&
        natsMsg_Create(&dm, subject, NULL, natsMsg_GetData(msg), natsMsg_GetDataLength(msg)) ==
            NATS_OK &&
        natsMsgHeader_Set(dm, "Roomd-Group", group) == NATS_OK &&
        natsMsgHeader_Set(dm, "Roomd-Subject", natsMsg_GetSubject(msg)) == NATS_OK &&
        natsMsgHeader_Set(dm, "Roomd-Stream-Seq", seqs) == NATS_OK &&
        natsMsgHeader_Set(dm, "Roomd-Deliveries", dels) == NATS_OK &&
        natsMsgHeader_Set(dm, "Roomd-Key", v->key) == NATS_OK &&
        natsMsgHeader_Set(dm, "Roomd-Reason", consume_dead_reason_names[v->reason]) == NATS_OK &&
        natsMsgHeader_Set(dm, "Roomd-Error", v->why) == NATS_OK)
        rc = bus_publish_msg(g->bus, BUS_STREAM_DLQ, dm, msg_id,
                             clock_mono_ms() + bus_api_wait_ms(g->bus), NULL, NULL, e, sizeof(e));
    natsMsg_Destroy(dm);
    free(msg_id);
    if (rc != 0) {
        log_warn("consume", "dead letter publish failed, will retry",
                 "group=%s key=%s error=\"%s\"", group, v->key, e);
        natsMsg_NakWithDelay(msg, consume_retry_delay_ms(&g->k.o, 1), ack_opts(g, &jo));
        return;
    }
    natsMsg_Term(msg, ack_opts(g, &jo));
    consume_core_dead(&g->k, v, seq, delivered);
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

/* Handles one fetched message to its verdict (see group.h, verdict.h). */
static void
process(struct consume_group *g, natsMsg *msg)
{
    jsMsgMetaData *meta = NULL;
    uint64_t seq = 0, delivered = 1;
    jsOptions jo;
    jsErrCode jerr = 0;
    struct consume_verdict v;

    if (natsMsg_GetMetaData(&meta, msg) == NATS_OK) {
        seq = meta->Sequence.Stream;
        delivered = meta->NumDelivered;
        jsMsgMetaData_Destroy(meta);
    }
    if (delivered > 1)
        consume_core_count(&g->k, &g->k.stats.redeliveries);
    /* outage Naks are deliveries that were no attempts (this node's) */
    uint64_t naks = outage_naks(g, seq, false);
    struct consume_delivery d = {
        .data = (const uint8_t *)natsMsg_GetData(msg),
        .len = (size_t)natsMsg_GetDataLength(msg),
        .subject = natsMsg_GetSubject(msg),
        .seq = seq,
        .delivered = delivered > naks ? delivered - naks : 1,
        .nmsg = msg,
    };
    consume_core_process(&g->k, &d, &v);
    switch (v.action) {
    case CONSUME_ACK:
        if (natsMsg_AckSync(msg, ack_opts(g, &jo), &jerr) != NATS_OK)
            log_warn("consume", "ack failed; the redelivery will be deduplicated",
                     "group=%s key=%s", g->k.h.group, v.key);
        break;
    case CONSUME_OUTAGE:
        outage_naks(g, seq, true);
        natsMsg_NakWithDelay(msg, v.delay_ms, ack_opts(g, &jo));
        break;
    case CONSUME_LATER:
    case CONSUME_RETRY:
        natsMsg_NakWithDelay(msg, v.delay_ms, ack_opts(g, &jo));
        break;
    case CONSUME_DEAD:
        dead_letter(g, msg, &v, seq, d.delivered);
        break;
    }
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
    pthread_mutex_lock(&g->k.mu);
    g->k.stats.bound = false;
    pthread_mutex_unlock(&g->k.mu);
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
    int rc = bus_ensure_consumer(g->bus, g->k.h.stream, g->k.h.group, g->k.o.ack_wait_ms, -1,
                                 g->k.o.max_ack_pending, err, errlen);

    if (rc != 0)
        return rc;
    snprintf(subject, sizeof(subject), "%s.*", bus_subject_prefix(g->bus, g->k.h.stream));
    jsSubOptions_Init(&so);
    so.Stream = bus_stream_name(g->bus, g->k.h.stream);
    so.Consumer = g->k.h.group;
    natsStatus s = js_PullSubscribe(&g->sub, bus_js(g->bus), subject, g->k.h.group,
                                    ack_opts(g, &jo), &so, &jerr);
    if (s != NATS_OK) {
        snprintf(err, errlen, "pull subscribe %s: %s (jerr %d)", g->k.h.group,
                 natsStatus_GetText(s), (int)jerr);
        g->sub = NULL;
        return ROOMD_ERETRY;
    }
    pthread_mutex_lock(&g->k.mu);
    g->k.stats.bound = true;
    pthread_mutex_unlock(&g->k.mu);
    return 0;
}

/* The group's lag and oldest unacknowledged message, from the broker. */
static void
read_position(struct consume_group *g)
{
    struct bus_consumer_pos p;
    char err[256];
    int rc = bus_consumer_pos(g->bus, g->k.h.stream, g->k.h.group, &p, err, sizeof(err));
    uint64_t dlq_all = 0, dlq_mine = 0;
    int64_t dlq_first = 0;
    char e2[256];
    int drc = bus_stream_oldest(g->bus, BUS_STREAM_DLQ, g->k.h.group, &dlq_all, &dlq_mine,
                                &dlq_first, e2, sizeof(e2));

    pthread_mutex_lock(&g->k.mu);
    g->k.stats.pos_ok = rc == 0;
    if (rc == 0) {
        g->k.stats.lag = p.last_seq > p.ack_floor ? p.last_seq - p.ack_floor : 0;
        g->k.stats.ack_pending = p.ack_pending;
        g->k.stats.redelivered_pending = p.redelivered;
        g->k.stats.oldest_unacked_ms = g->k.stats.lag > 0 ? p.oldest_unacked_ms : 0;
    }
    g->k.stats.dlq_ok = drc == 0;
    if (drc == 0) {
        g->k.stats.dlq_msgs = dlq_all;
        g->k.stats.dlq_group_msgs = dlq_mine;
        g->k.stats.dlq_oldest_ms = dlq_first;
    }
    pthread_mutex_unlock(&g->k.mu);
    if (rc != 0)
        log_debug("consume", "consumer position unknown", "group=%s error=\"%s\"", g->k.h.group,
                  err);
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
                             g->k.h.group, err);
                g->last_bind_rc = rc;
                bg_thread_sleep(&g->th, backoff);
                backoff = backoff * 2 > 2000 ? 2000 : backoff * 2;
                continue;
            }
            g->last_bind_rc = 0;
            backoff = 100;
            log_info("consume", "group bound", "group=%s stream=%s db=%s", g->k.h.group,
                     bus_stream_name(g->bus, g->k.h.stream), inbox_where(g->k.inbox));
        }
        if (clock_mono_ms() >= next_purge) { /* idle or not: a fetch timeout skips the rest */
            consume_core_purge(&g->k);
            next_purge = clock_mono_ms() + PURGE_EVERY_MS;
        }
        if (clock_mono_ms() >= next_pos) {
            read_position(g);
            next_pos = clock_mono_ms() + CONSUME_POS_EVERY_MS;
        }
        consume_core_probe(&g->k);
        natsMsgList list = {0};
        jsErrCode jerr = 0;
        int64_t t0 = clock_mono_ms();
        natsStatus s = natsSubscription_Fetch(&list, g->sub, g->k.o.fetch_batch,
                                              g->k.o.fetch_timeout_ms, &jerr);
        if (s == NATS_TIMEOUT) {
            /* "No messages" -- also returned at once for a stale 408 from
             * an earlier pull (nats.c 3.4.1 pitfall 1): never spin. */
            if (clock_mono_ms() - t0 < 2)
                bg_thread_sleep(&g->th, 5);
            errs = 0;
            continue;
        }
        if (s != NATS_OK) {
            consume_core_count(&g->k, &g->k.stats.fetch_errors);
            if (errs++ == 0)
                log_warn("consume", "fetch failed", "group=%s status=\"%s\" jerr=%d", g->k.h.group,
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
    bg_thread_stop(&g->th); /* a no-op once consume_group_stop joined */
    consume_core_fini(&g->k);
    bus_unref(g->bus);
    free(g);
}

int
consume_group_start(struct consume_group **out, struct bus *bus, const struct consume_handler *h,
                    const struct consume_opts *o, char *err, size_t errlen)
{
    struct consume_group *g = xcalloc(1, sizeof(*g));
    struct consume_opts oo = *o;

    *out = NULL;
    if (oo.fetch_batch <= 0 || oo.fetch_batch > 64)
        oo.fetch_batch = 16;
    /* nats.c's Fetch waits for a full batch (or the timeout): a held message
     * coming due mid-fetch would wait up to fetch_timeout. A group that holds
     * messages until a time (rocket wake-ups) fetches one at a time. */
    if (h->holds)
        oo.fetch_batch = 1;
    if (oo.fetch_timeout_ms <= 0)
        oo.fetch_timeout_ms = 1000;
    bg_thread_init(&g->th);
    int rc = consume_core_init(&g->k, h, &oo, err, errlen);
    if (rc != 0) {
        free(g);
        return rc;
    }
    bus_ref(bus);
    g->bus = bus;
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
             g->k.h.group, g->k.stats.handled, g->k.stats.duplicates, g->k.stats.retried,
             g->k.stats.busy, g->k.stats.dead);
    group_free(g);
}

void
consume_group_stats(struct consume_group *g, struct consume_stats *out)
{
    consume_core_stats(&g->k, out);
}