/* SPDX-License-Identifier: Apache-2.0 */
/*
 * consumer.c: a consumer group on RocketMQ (consumer.h). Read top-down:
 * the kit's verdicts (consume/verdict.c) carried out on RocketMQ
 * (process), rebalancing, the group's position, the pull loop.
 */
#include "rocketmq/consumer.h"

#include "consume/group.h"
#include "consume/roles.h"
#include "consume/verdict.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/thread.h"
#include "core/xmalloc.h"
#include "rocketmq/client.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REBALANCE_MS 2000
#define PULL_BATCH 16
#define IN_PLACE_MAX_MS 1500       /* a holding group's longer holds go through %RETRY% */
#define BROKER_MAX_RECONSUME 10000 /* the kit decides dead letters, never the broker */
#define PURGE_EVERY_MS (10LL * 60 * 1000)
#define POS_EVERY_MS 5000 /* lag, oldest unconsumed, %DLQ% read this often */
/* Pulls without long polling: an idle group waits 20 ms, doubling to 200 ms,
 * between rounds (at most 5 pulls a second per queue while idle). */
#define IDLE_MIN_MS 20
#define IDLE_MAX_MS 200

struct assigned {
    struct rmq_mq mq;
    int64_t offset;    /* next to pull */
    int64_t committed; /* last committed to the broker */
    int64_t retry_at;  /* mono ms: a message not settled waits until then */
    /* the message at the head of the queue and how often it was seen again
     * here without a send-back (held, busy; not outages) */
    int64_t head_offset;
    uint64_t head_repeats;
};

struct rmq_group {
    struct consume_core k; /* handler, options, inbox, counters, circuit */
    struct rmq_client *c;
    char *topic;
    char *retry_topic;
    char *dlq_topic;
    struct bg_thread th;
    struct assigned *as;
    size_t nas, capas;
    int64_t hold_ms; /* of the last HOLD verdict */
};

/* SETTLED: go on past it; HOLD: this queue waits hold_ms for it (the
 * others go on); STOP: this queue waits a retry delay for it. */
enum verdict { SETTLED, HOLD, STOP };

/* ==== verdicts (consume/verdict.c) carried out on RocketMQ ==== */

/* CONSUMER_SEND_MSG_BACK of m at level (-1: %DLQ%); SETTLED, or STOP when
 * the broker did not take it (the queue sees m again later). */
static enum verdict
send_back(struct rmq_group *g, struct assigned *a, const struct rmq_message_ext *m, int level,
          const char *key)
{
    char e[256];

    if (rmq_send_back(g->c, &a->mq, g->k.h.group, m, level, BROKER_MAX_RECONSUME,
                      clock_mono_ms() + 3000, e, sizeof(e)) == 0)
        return SETTLED;
    log_warn("consume", "send-back failed, the queue waits",
             "group=%s key=%s level=%d error=\"%s\"", g->k.h.group, key, level, e);
    return STOP;
}

static enum verdict
hold(struct rmq_group *g, int64_t delay_ms)
{
    g->hold_ms = delay_ms > 0 ? delay_ms : 1;
    return HOLD;
}

/* Handles one message to its verdict (consume/group.h's rules). */
static enum verdict
process(struct rmq_group *g, struct assigned *a, const struct rmq_message_ext *m)
{
    char subject[256];
    struct consume_verdict v;

    snprintf(subject, sizeof(subject), "%s", m->topic);
    if (strncmp(m->topic, "%RETRY%", 7) == 0 &&
        !rmq_prop(m, "RETRY_TOPIC", subject, sizeof(subject)))
        snprintf(subject, sizeof(subject), "%s", m->topic);
    if (a->head_offset != m->queue_offset) {
        a->head_offset = m->queue_offset;
        a->head_repeats = 0;
        if (m->reconsume > 0)
            consume_core_count(&g->k, &g->k.stats.redeliveries);
    }
    struct consume_delivery d = {
        .data = m->body,
        .len = m->len,
        .subject = subject,
        .seq = (uint64_t)m->queue_offset,
        /* the broker's count of send-backs (failures only: outages never
         * send back); this node's repeats of the head without one */
        .delivered = (uint64_t)m->reconsume + 1,
        .repeats = a->head_repeats,
        .nmsg = NULL,
    };
    consume_core_process(&g->k, &d, &v);
    switch (v.action) {
    case CONSUME_ACK:
        return SETTLED;
    case CONSUME_OUTAGE:
        /* ordered consumption's rule: suspend the queue and retry locally,
         * no send-back, so the reconsume count does not grow */
        return hold(g, v.delay_ms);
    case CONSUME_LATER:
        if (g->k.h.holds && v.delay_ms > IN_PLACE_MAX_MS)
            return send_back(g, a, m, rmq_delay_level_not_later(v.delay_ms), v.key);
        a->head_repeats++;
        return hold(g, v.delay_ms);
    case CONSUME_RETRY:
        if (send_back(g, a, m, rmq_delay_level_at_least(v.delay_ms), v.key) != SETTLED)
            return STOP;
        log_info("consume", "reconsume later", "group=%s key=%s retry=%%RETRY%%%s", g->k.h.group,
                 v.key, g->k.h.group);
        return SETTLED;
    case CONSUME_DEAD:
        if (send_back(g, a, m, -1, v.key) != SETTLED)
            return STOP;
        consume_core_dead(&g->k, &v, (uint64_t)m->queue_offset, d.delivered);
        return SETTLED;
    }
    return STOP;
}

/* ==== rebalance (AllocateMessageQueueAveragely) ==== */

static int
cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void
commit(struct rmq_group *g, struct assigned *a)
{
    char e[256];

    if (a->offset == a->committed)
        return;
    if (rmq_update_offset(g->c, &a->mq, g->k.h.group, a->offset, clock_mono_ms() + 3000, e,
                          sizeof(e)) == 0)
        a->committed = a->offset;
}

/* The queues of topic this member takes: appended to *want. */
static int
allocate(struct rmq_group *g, const char *topic, struct rmq_mq **want, size_t *nwant,
         size_t *capwant)
{
    struct rmq_mq *qs = NULL;
    char **ids = NULL;
    int nq = 0, nid = 0, rc;
    char e[256];

    rc = rmq_read_queues(g->c, topic, clock_mono_ms() + 3000, &qs, &nq, e, sizeof(e));
    if (rc != 0 || nq == 0) {
        free(qs);
        return rc;
    }
    rc = rmq_consumer_ids(g->c, qs[0].addr, g->k.h.group, clock_mono_ms() + 3000, &ids, &nid, e,
                          sizeof(e));
    if (rc == ROOMD_ERETRY)
        rmq_heartbeat_now(g->c); /* "no consumer for this group": not registered yet */
    if (rc == 0) {
        qsort(ids, (size_t)nid, sizeof(*ids), cmp_str);
        int idx = -1;
        for (int i = 0; i < nid; i++)
            if (strcmp(ids[i], rmq_client_id(g->c)) == 0)
                idx = i;
        if (idx < 0) {
            rmq_heartbeat_now(g->c); /* not registered yet */
        } else {
            int mod = nq % nid;
            int avg = nq <= nid ? 1 : nq / nid + (mod > 0 && idx < mod ? 1 : 0);
            int start = (mod > 0 && idx < mod) ? idx * avg : idx * avg + mod;
            int take = avg < nq - start ? avg : nq - start;
            for (int i = 0; i < take; i++) {
                *want = xgrow(*want, *nwant, capwant, sizeof(**want));
                (*want)[(*nwant)++] = qs[start + i];
            }
        }
    }
    for (int i = 0; i < nid; i++)
        free(ids[i]);
    free(ids);
    free(qs);
    return rc;
}

static bool
same_mq(const struct rmq_mq *a, const struct rmq_mq *b)
{
    return strcmp(a->topic, b->topic) == 0 && strcmp(a->broker, b->broker) == 0 && a->qid == b->qid;
}

static void
rebalance(struct rmq_group *g)
{
    struct rmq_mq *want = NULL;
    size_t nwant = 0, capwant = 0;

    if (allocate(g, g->topic, &want, &nwant, &capwant) != 0) {
        free(want);
        return; /* keep what we have until the broker answers */
    }
    allocate(g, g->retry_topic, &want, &nwant, &capwant); /* may not exist yet */
    /* drop the queues no longer ours (their offsets committed first) */
    for (size_t i = 0; i < g->nas;) {
        bool keep = false;
        for (size_t k = 0; k < nwant && !keep; k++)
            keep = same_mq(&g->as[i].mq, &want[k]);
        if (keep) {
            i++;
            continue;
        }
        commit(g, &g->as[i]);
        log_info("consume", "queue released", "group=%s topic=%s queue=%s/%d", g->k.h.group,
                 g->as[i].mq.topic, g->as[i].mq.broker, g->as[i].mq.qid);
        g->as[i] = g->as[--g->nas];
    }
    for (size_t k = 0; k < nwant; k++) {
        bool have = false;
        for (size_t i = 0; i < g->nas && !have; i++)
            have = same_mq(&g->as[i].mq, &want[k]);
        if (have)
            continue;
        int64_t off = -1;
        char e[256];
        if (rmq_query_offset(g->c, &want[k], g->k.h.group, clock_mono_ms() + 3000, &off, e,
                             sizeof(e)) != 0)
            continue;
        if (off < 0)
            off = 0; /* CONSUME_FROM_FIRST_OFFSET: a new group reads the queue from the start */
        g->as = xgrow(g->as, g->nas, &g->capas, sizeof(*g->as));
        g->as[g->nas++] = (struct assigned){.mq = want[k], .offset = off, .committed = off};
        log_info("consume", "queue taken", "group=%s topic=%s queue=%s/%d offset=%" PRId64,
                 g->k.h.group, want[k].topic, want[k].broker, want[k].qid, off);
    }
    free(want);
    pthread_mutex_lock(&g->k.mu);
    g->k.stats.bound = g->nas > 0;
    pthread_mutex_unlock(&g->k.mu);
}

/* ==== the group's position: lag, oldest unconsumed, %DLQ% ==== */

/* The store time of the message at offset of mq (0: none or unknown). */
static int64_t
stored_at(struct rmq_group *g, const struct rmq_mq *mq, int64_t offset)
{
    struct rmq_pulled p;
    char e[256];
    int64_t t = 0;

    if (rmq_pull(g->c, mq, g->k.h.group, offset, 1, clock_mono_ms() + 3000, &p, e, sizeof(e)) != 0)
        return 0;
    if (p.code == RMQ_SUCCESS && p.n > 0)
        t = p.msgs[0].store_ms;
    rmq_pulled_free(&p);
    return t;
}

/* Reads the position of this member's queues (lag = the queues' max offset
 * less the group's offset; the oldest unconsumed message's store time) and
 * of %DLQ%<group> (messages stored, the oldest one's time) into the stats,
 * as consume/group.c reads JetStream's. Per node: each member reports its
 * own queues (the group's lag is the sum over its nodes). */
static void
read_position(struct rmq_group *g)
{
    uint64_t lag = 0, pending = 0, dlq = 0;
    int64_t oldest = 0, dlq_first = 0, now = clock_mono_ms();
    bool ok = true, dlq_ok = true;
    char e[256];

    for (size_t i = 0; i < g->nas; i++) {
        struct assigned *a = &g->as[i];
        int64_t mx = 0;
        if (rmq_max_offset(g->c, &a->mq, clock_mono_ms() + 3000, &mx, e, sizeof(e)) != 0) {
            ok = false;
            continue;
        }
        if (mx <= a->offset)
            continue;
        lag += (uint64_t)(mx - a->offset);
        if (a->retry_at > now)
            pending++; /* its head is in hand: held, suspended or failed */
        int64_t t = stored_at(g, &a->mq, a->offset);
        if (t > 0 && (oldest == 0 || t < oldest))
            oldest = t;
    }
    struct rmq_mq *qs = NULL;
    int nq = 0;
    int rc = rmq_read_queues(g->c, g->dlq_topic, clock_mono_ms() + 3000, &qs, &nq, e, sizeof(e));
    if (rc != 0 && rc != ROOMD_ERETRY)
        dlq_ok = false; /* ERETRY: no such topic, no dead letter yet */
    for (int i = 0; i < nq; i++) {
        int64_t lo = 0, hi = 0;
        if (rmq_min_offset(g->c, &qs[i], clock_mono_ms() + 3000, &lo, e, sizeof(e)) != 0 ||
            rmq_max_offset(g->c, &qs[i], clock_mono_ms() + 3000, &hi, e, sizeof(e)) != 0) {
            dlq_ok = false;
            continue;
        }
        if (hi <= lo)
            continue;
        dlq += (uint64_t)(hi - lo);
        int64_t t = stored_at(g, &qs[i], lo);
        if (t > 0 && (dlq_first == 0 || t < dlq_first))
            dlq_first = t;
    }
    free(qs);
    pthread_mutex_lock(&g->k.mu);
    g->k.stats.pos_ok = ok;
    if (ok) {
        g->k.stats.lag = lag;
        g->k.stats.ack_pending = pending;
        g->k.stats.redelivered_pending = 0;
        g->k.stats.oldest_unacked_ms = lag > 0 ? oldest : 0;
    }
    g->k.stats.dlq_ok = dlq_ok;
    if (dlq_ok) {
        g->k.stats.dlq_group_msgs = dlq;
        g->k.stats.dlq_msgs = dlq; /* one %DLQ% topic per group */
        g->k.stats.dlq_oldest_ms = dlq_first;
    }
    pthread_mutex_unlock(&g->k.mu);
}

/* ==== the group thread ==== */

/* Pulls one batch of a and processes it; true when it got messages. */
static bool
pull_one(struct rmq_group *g, struct assigned *a)
{
    struct rmq_pulled p;
    char e[256];
    bool got = false;

    if (clock_mono_ms() < a->retry_at)
        return false;
    if (rmq_pull(g->c, &a->mq, g->k.h.group, a->offset, PULL_BATCH, clock_mono_ms() + 3000, &p, e,
                 sizeof(e)) != 0) {
        consume_core_count(&g->k, &g->k.stats.fetch_errors);
        a->retry_at = clock_mono_ms() + 500;
        return false;
    }
    if (p.code == RMQ_SUCCESS) {
        got = p.n > 0;
        for (int i = 0; i < p.n && !bg_thread_stopping(&g->th); i++) {
            enum verdict v = process(g, a, &p.msgs[i]);
            if (v == HOLD) {
                a->retry_at = clock_mono_ms() + g->hold_ms; /* pulled again from here */
                break;
            }
            if (v != SETTLED) {
                a->retry_at = clock_mono_ms() + consume_retry_delay_ms(&g->k.o, 1);
                break;
            }
            a->offset = p.msgs[i].queue_offset + 1;
        }
    } else {
        a->offset = p.next_begin; /* none new, all filtered, or the offset moved */
    }
    rmq_pulled_free(&p);
    commit(g, a);
    return got;
}

static void *
group_main(void *arg)
{
    struct rmq_group *g = arg;
    int64_t next_rebalance = 0, next_purge = 0, next_pos = 0;
    int64_t idle_ms = IDLE_MIN_MS;

    rmq_heartbeat_now(g->c);
    while (!bg_thread_stopping(&g->th)) {
        if (clock_mono_ms() >= next_rebalance) {
            rebalance(g);
            next_rebalance = clock_mono_ms() + REBALANCE_MS;
        }
        if (clock_mono_ms() >= next_purge) {
            consume_core_purge(&g->k);
            next_purge = clock_mono_ms() + PURGE_EVERY_MS;
        }
        if (clock_mono_ms() >= next_pos) {
            read_position(g);
            next_pos = clock_mono_ms() + POS_EVERY_MS;
        }
        consume_core_probe(&g->k);
        bool got = false;
        for (size_t i = 0; i < g->nas && !bg_thread_stopping(&g->th); i++)
            got = pull_one(g, &g->as[i]) || got;
        idle_ms = got ? IDLE_MIN_MS : (idle_ms * 2 > IDLE_MAX_MS ? IDLE_MAX_MS : idle_ms * 2);
        if (!got) { /* idle: until the next queue's hold ends, idle_ms at most */
            int64_t wait = idle_ms, now = clock_mono_ms();
            for (size_t i = 0; i < g->nas; i++)
                if (g->as[i].retry_at > now && g->as[i].retry_at - now < wait)
                    wait = g->as[i].retry_at - now;
            bg_thread_sleep(&g->th, wait > 0 ? wait : 1);
        }
    }
    for (size_t i = 0; i < g->nas; i++)
        commit(g, &g->as[i]);
    return NULL;
}

/* ==== start / stop ==== */

static void
group_free(struct rmq_group *g)
{
    consume_core_fini(&g->k);
    free(g->as);
    free(g->topic);
    free(g->retry_topic);
    free(g->dlq_topic);
    free(g);
}

int
rmq_group_start(struct rmq_group **out, struct rmq_client *c, const char *topic,
                const struct consume_handler *h, const struct consume_opts *o, char *err,
                size_t errlen)
{
    struct rmq_group *g = xcalloc(1, sizeof(*g));

    *out = NULL;
    g->c = c;
    g->topic = xstrdup(topic);
    g->retry_topic = xasprintf("%%RETRY%%%s", h->group);
    g->dlq_topic = xasprintf("%%DLQ%%%s", h->group);
    bg_thread_init(&g->th);
    int rc = consume_core_init(&g->k, h, o, err, errlen);
    if (rc != 0) {
        free(g->topic);
        free(g->retry_topic);
        free(g->dlq_topic);
        free(g);
        return rc;
    }
    rmq_add_consumer(c, h->group, topic);
    if (bg_thread_spawn(&g->th, group_main, g) != 0) {
        snprintf(err, errlen, "cannot start the %s thread", h->group);
        group_free(g);
        return ROOMD_EIO;
    }
    log_info("consume", "group started on rocketmq", "group=%s topic=%s inbox=%s", h->group, topic,
             inbox_where(g->k.inbox));
    *out = g;
    return 0;
}

void
rmq_group_stop(struct rmq_group *g)
{
    if (g == NULL)
        return;
    bg_thread_stop(&g->th);
    log_info("consume", "group stopped",
             "group=%s handled=%" PRIu64 " duplicates=%" PRIu64 " retried=%" PRIu64
             " outages=%" PRIu64 " dead=%" PRIu64,
             g->k.h.group, g->k.stats.handled, g->k.stats.duplicates, g->k.stats.retried,
             g->k.stats.outages, g->k.stats.dead);
    group_free(g);
}

void
rmq_group_stats(struct rmq_group *g, struct consume_stats *out)
{
    consume_core_stats(&g->k, out);
}

/* ==== the driver of consume/roles.h ==== */

static int
drv_start(void **g, void *conn, const char *topic, const struct consume_handler *h,
          const struct consume_opts *o, char *err, size_t errlen)
{
    return rmq_group_start((struct rmq_group **)g, conn, topic, h, o, err, errlen);
}

static void
drv_stop(void *g)
{
    rmq_group_stop(g);
}

static void
drv_stats(void *g, struct consume_stats *out)
{
    rmq_group_stats(g, out);
}

void
rmq_consume_driver(struct consume_driver *d, struct rmq_client *c)
{
    *d = (struct consume_driver){
        .start = drv_start, .stop = drv_stop, .stats = drv_stats, .conn = c};
}
