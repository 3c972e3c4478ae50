/* SPDX-License-Identifier: Apache-2.0 */
/*
 * consumer.c: a consumer group on RocketMQ (consumer.h). Read top-down:
 * the verdicts of one message (process), rebalancing, the pull loop.
 */
#include "rocketmq/consumer.h"

#include "consume/group.h"
#include "consume/roles.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/thread.h"
#include "core/xmalloc.h"
#include "rocketmq/client.h"
#include "room_events.pb-c.h"
#include "store/inbox.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REBALANCE_MS 2000
#define PULL_BATCH 16
#define IN_PLACE_MAX_MS 1500 /* "later" waits this long at most on the thread */
#define GAP_HOLDS 8          /* as the kit: a room_seq gap is held this often */
#define GAP_HOLD_MS 250
#define BROKER_MAX_RECONSUME 10000 /* the kit decides dead letters, never the broker */
#define PURGE_EVERY_MS (10LL * 60 * 1000)
/* Pulls without long polling: an idle group waits 20 ms, doubling to 200 ms,
 * between rounds (at most 5 pulls a second per queue while idle). */
#define IDLE_MIN_MS 20
#define IDLE_MAX_MS 200

struct assigned {
    struct rmq_mq mq;
    int64_t offset;    /* next to pull */
    int64_t committed; /* last committed to the broker */
    int64_t retry_at;  /* mono ms: a message not settled waits until then */
};

struct rmq_group {
    struct rmq_client *c;
    struct consume_handler h;
    struct consume_opts o;
    struct consume_inbox *inbox;
    char *topic;
    char *retry_topic;
    struct bg_thread th;
    struct assigned *as;
    size_t nas, capas;
    pthread_mutex_t stats_mu;
    struct consume_stats stats;
    int64_t hold_ms; /* of the last HOLD verdict */
};

/* SETTLED: go on past it; HOLD: this queue waits hold_ms for it (the
 * others go on); STOP: this queue waits a retry delay for it. */
enum verdict { SETTLED, HOLD, STOP };

static void
count(struct rmq_group *g, uint64_t *field)
{
    pthread_mutex_lock(&g->stats_mu);
    (*field)++;
    pthread_mutex_unlock(&g->stats_mu);
}

/* ==== verdicts ==== */

static enum verdict
dead_letter(struct rmq_group *g, struct assigned *a, const struct rmq_message_ext *m,
            const char *key, const char *why)
{
    char e[256];

    if (rmq_send_back(g->c, &a->mq, g->h.group, m, -1, 0, clock_mono_ms() + 3000, e, sizeof(e)) !=
        0) {
        log_warn("consume", "dead letter send-back failed, will retry",
                 "group=%s key=%s error=\"%s\"", g->h.group, key, e);
        return STOP;
    }
    if (*key && inbox_dead(g->inbox, key, why) != 0)
        log_warn("consume", "inbox write failed", "group=%s key=%s error=\"%s\"", g->h.group, key,
                 inbox_errmsg(g->inbox));
    count(g, &g->stats.dead);
    log_warn("consume", "message dead-lettered", "group=%s key=%s dlq=%%DLQ%%%s error=\"%s\"",
             g->h.group, key, g->h.group, why ? why : "");
    return SETTLED;
}

/* See m again after delay_ms without a failure: its queue waits when short, else
 * through %RETRY% at the longest delay level not later (then again). */
static enum verdict
later(struct rmq_group *g, struct assigned *a, const struct rmq_message_ext *m, int64_t delay_ms,
      uint64_t *counter)
{
    char e[256];

    count(g, counter);
    if (delay_ms <= IN_PLACE_MAX_MS) {
        g->hold_ms = delay_ms > 0 ? delay_ms : 1; /* its queue waits; the others go on */
        return HOLD;
    }
    int level = rmq_delay_level_not_later(delay_ms);
    if (rmq_send_back(g->c, &a->mq, g->h.group, m, level, BROKER_MAX_RECONSUME,
                      clock_mono_ms() + 3000, e, sizeof(e)) != 0) {
        log_warn("consume", "send-back failed, later", "group=%s error=\"%s\"", g->h.group, e);
        return STOP;
    }
    return SETTLED;
}

/* Handles one message to its verdict (consume/group.h's rules). */
static enum verdict
process(struct rmq_group *g, struct assigned *a, const struct rmq_message_ext *m)
{
    char key[CONSUME_KEY_MAX] = "", app[64] = "", room[128] = "";
    int64_t room_seq = 0;
    int failures = 0, rc;
    char subject[256];

    snprintf(subject, sizeof(subject), "%s", m->topic);
    if (strncmp(m->topic, "%RETRY%", 7) == 0 &&
        !rmq_prop(m, "RETRY_TOPIC", subject, sizeof(subject)))
        snprintf(subject, sizeof(subject), "%s", m->topic);
    if (g->h.key) {
        rc = g->h.key(g->h.arg, m->body, m->len, key, sizeof(key));
    } else {
        Roomd__V1__RoomOutboxEvent *ev =
            roomd__v1__room_outbox_event__unpack(NULL, m->len, m->body);
        rc = ev && ev->event_id && *ev->event_id ? 0 : ROOMD_EINVAL;
        if (rc == 0) {
            snprintf(key, sizeof(key), "%s", ev->event_id);
            snprintf(app, sizeof(app), "%s", ev->app_code ? ev->app_code : "");
            snprintf(room, sizeof(room), "%s", ev->room_id ? ev->room_id : "");
            room_seq = ev->room_seq;
        }
        if (ev)
            roomd__v1__room_outbox_event__free_unpacked(ev, NULL);
    }
    if (rc != 0)
        return dead_letter(g, a, m, "", "undecodable message");
    bool ordered = g->h.key == NULL && g->o.room_order;
    if (ordered && room_seq > 0) {
        for (int i = 0; i < GAP_HOLDS && !bg_thread_stopping(&g->th); i++) {
            int64_t mark = 0;
            if (inbox_mark_get(g->inbox, app, room, &mark) != 0 || mark <= 0 ||
                room_seq <= mark + 1)
                break;
            count(g, &g->stats.held);
            bg_thread_sleep(&g->th, GAP_HOLD_MS);
        }
    }
    enum inbox_claim res = INBOX_CLAIMED;
    int64_t until = 0;
    if (inbox_claim(g->inbox, key, app, &res, &failures, &until) != 0) {
        log_warn("consume", "inbox read failed", "group=%s key=%s error=\"%s\"", g->h.group, key,
                 inbox_errmsg(g->inbox));
        return STOP;
    }
    if (res == INBOX_SETTLED) {
        count(g, &g->stats.duplicates);
        return SETTLED;
    }
    if (res == INBOX_BUSY)
        return later(g, a, m, until - clock_wall_ms() + 100, &g->stats.busy);

    struct consume_msg cm = {
        .group = g->h.group,
        .subject = subject,
        .data = m->body,
        .len = m->len,
        .key = key,
        .stream_seq = (uint64_t)m->queue_offset,
        .num_delivered = (uint64_t)m->reconsume + 1,
        .failures = failures,
        .nmsg = NULL,
        .inbox = g->inbox,
        .mark = {.app = app, .room = room, .seq = ordered ? room_seq : 0},
    };
    rc = g->h.handle(g->h.arg, &cm);
    if (inbox_in_tx(g->inbox)) {
        inbox_tx_rollback(g->inbox);
        if (rc == 0) {
            rc = ROOMD_EINTERNAL;
            snprintf(cm.err, sizeof(cm.err), "handler left a transaction open");
        }
    }
    if (rc == ROOMD_ESTALE)
        return later(g, a, m, g->o.ack_wait_ms, &g->stats.busy);
    if (rc == 0 && cm.hold_ms > 0) {
        inbox_release(g->inbox, key);
        return later(g, a, m, cm.hold_ms, &g->stats.held);
    }
    if (rc == 0) {
        int drc = cm.done ? 0 : inbox_done(g->inbox, key, &cm.mark);
        if (drc != 0 && drc != ROOMD_ESTALE) {
            log_warn("consume", "inbox write failed after the effect, again shortly",
                     "group=%s key=%s error=\"%s\"", g->h.group, key, inbox_errmsg(g->inbox));
            return STOP;
        }
        count(g, &g->stats.handled);
        return SETTLED;
    }
    if (!roomd_err_retryable(rc))
        return dead_letter(g, a, m, key, *cm.err ? cm.err : roomd_strerror(rc));
    failures = 0;
    if (inbox_fail(g->inbox, key, cm.err, &failures) != 0)
        log_warn("consume", "inbox write failed", "group=%s key=%s error=\"%s\"", g->h.group, key,
                 inbox_errmsg(g->inbox));
    if (!inbox_shared(g->inbox) && failures < m->reconsume + 1)
        failures = m->reconsume + 1; /* the broker's count stands in for a node's own */
    if (failures > g->o.max_reconsume)
        return dead_letter(g, a, m, key, *cm.err ? cm.err : roomd_strerror(rc));
    int64_t delay = consume_retry_delay_ms(&g->o, failures);
    char e[256];
    if (rmq_send_back(g->c, &a->mq, g->h.group, m, rmq_delay_level_at_least(delay),
                      BROKER_MAX_RECONSUME, clock_mono_ms() + 3000, e, sizeof(e)) != 0) {
        log_warn("consume", "send-back failed, later", "group=%s key=%s error=\"%s\"", g->h.group,
                 key, e);
        return STOP;
    }
    count(g, &g->stats.retried);
    log_info("consume", "message failed, reconsume later",
             "group=%s key=%s failures=%d delay_ms=%" PRId64 " retry=%%RETRY%%%s error=\"%s\"",
             g->h.group, key, failures, delay, g->h.group, cm.err);
    return SETTLED;
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
    if (rmq_update_offset(g->c, &a->mq, g->h.group, a->offset, clock_mono_ms() + 3000, e,
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
    rc = rmq_consumer_ids(g->c, qs[0].addr, g->h.group, clock_mono_ms() + 3000, &ids, &nid, e,
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
        log_info("consume", "queue released", "group=%s topic=%s queue=%s/%d", g->h.group,
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
        if (rmq_query_offset(g->c, &want[k], g->h.group, clock_mono_ms() + 3000, &off, e,
                             sizeof(e)) != 0)
            continue;
        if (off < 0)
            off = 0; /* CONSUME_FROM_FIRST_OFFSET: a new group reads the queue from the start */
        g->as = xgrow(g->as, g->nas, &g->capas, sizeof(*g->as));
        g->as[g->nas++] = (struct assigned){.mq = want[k], .offset = off, .committed = off};
        log_info("consume", "queue taken", "group=%s topic=%s queue=%s/%d offset=%" PRId64,
                 g->h.group, want[k].topic, want[k].broker, want[k].qid, off);
    }
    free(want);
    pthread_mutex_lock(&g->stats_mu);
    g->stats.bound = g->nas > 0;
    pthread_mutex_unlock(&g->stats_mu);
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
    if (rmq_pull(g->c, &a->mq, g->h.group, a->offset, PULL_BATCH, clock_mono_ms() + 3000, &p, e,
                 sizeof(e)) != 0) {
        count(g, &g->stats.fetch_errors);
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
                a->retry_at = clock_mono_ms() + consume_retry_delay_ms(&g->o, 1);
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
    int64_t next_rebalance = 0, next_purge = 0;

    int64_t idle_ms = IDLE_MIN_MS;

    rmq_heartbeat_now(g->c);
    while (!bg_thread_stopping(&g->th)) {
        if (clock_mono_ms() >= next_rebalance) {
            rebalance(g);
            next_rebalance = clock_mono_ms() + REBALANCE_MS;
        }
        if (clock_mono_ms() >= next_purge) {
            int64_t unsettled = 0;
            inbox_purge(g->inbox, clock_wall_ms() - g->o.inbox_keep_ms, &unsettled);
            next_purge = clock_mono_ms() + PURGE_EVERY_MS;
        }
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
    inbox_close(g->inbox);
    free(g->as);
    free(g->topic);
    free(g->retry_topic);
    pthread_mutex_destroy(&g->stats_mu);
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
    g->h = *h;
    g->o = *o;
    g->topic = xstrdup(topic);
    g->retry_topic = xasprintf("%%RETRY%%%s", h->group);
    pthread_mutex_init(&g->stats_mu, NULL);
    bg_thread_init(&g->th);
    struct inbox_config ic = {
        .group = h->group,
        .driver = o->inbox,
        .store_dir = o->store_dir,
        .store = o->store,
        .owner = o->owner,
        .claim_ms = (h->max_handle_ms > o->ack_wait_ms ? h->max_handle_ms : o->ack_wait_ms) + 1000,
        .schema = h->schema,
    };
    int rc = inbox_open(&g->inbox, &ic, err, errlen);
    if (rc != 0) {
        group_free(g);
        return rc;
    }
    rmq_add_consumer(c, h->group, topic);
    if (bg_thread_spawn(&g->th, group_main, g) != 0) {
        snprintf(err, errlen, "cannot start the %s thread", h->group);
        group_free(g);
        return ROOMD_EIO;
    }
    log_info("consume", "group started on rocketmq", "group=%s topic=%s inbox=%s", h->group, topic,
             inbox_where(g->inbox));
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
             " dead=%" PRIu64,
             g->h.group, g->stats.handled, g->stats.duplicates, g->stats.retried, g->stats.dead);
    group_free(g);
}

void
rmq_group_stats(struct rmq_group *g, struct consume_stats *out)
{
    pthread_mutex_lock(&g->stats_mu);
    *out = g->stats;
    pthread_mutex_unlock(&g->stats_mu);
    /* no downstream health on this driver yet (docs/rocketmq.md): never
     * reported down, so readiness and the im gauge follow the outbox's sinks */
    out->downstream_up = true;
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
