/* SPDX-License-Identifier: Apache-2.0 */
/*
 * roles.c: starts and stops the configured consumer groups (roles.h). The
 * handlers are in activity.c, notice.c, im_bridge.c and rocket_open.c.
 */
#include "consume/roles.h"

#include "conf/conf.h"
#include "consume/group.h"
#include "consume/handlers.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/xmalloc.h"
#include "metrics/metrics.h"
#include "publish/sink.h"
#include "publish/sink_activity.h"
#include "store/inbox.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NROLES 4

struct consume_roles {
    void *g[NROLES]; /* index = bit number of the role; the driver's groups */
    struct consume_driver d;
    struct consume_handler h[NROLES];
    bool im_bridge_open;
    bool metrics; /* collect_metrics is registered */
    struct consume_notice_sender notice_sender;
    const struct conf *conf;
    struct sink *activity_service; /* activity.enabled: the activity group's calls */
};

/* The dead-letter stream: per group, and the oldest one against the
 * retention (rocketmq.dlq_max_age) so that an alert fires before it expires. */
static void
collect_dlq(struct consume_roles *r, const struct consume_stats *st, struct metrics_text *t)
{
    char labels[200];
    int any = -1;
    int64_t now = clock_wall_ms();

    metrics_family(t, "roomd_consumer_dlq_messages", "gauge",
                   "Dead letters of the group waiting on the dead-letter stream, by group.");
    for (int i = 0; i < NROLES; i++)
        if (r->g[i] != NULL && st[i].dlq_ok) {
            snprintf(labels, sizeof(labels), "group=\"%s\"", r->h[i].group);
            metrics_count(t, "roomd_consumer_dlq_messages", labels, st[i].dlq_group_msgs);
            if (any < 0)
                any = i;
        }
    metrics_family(t, "roomd_consumer_dlq_oldest_age_seconds", "gauge",
                   "Age of the oldest message on the dead-letter stream (0: none).");
    metrics_family(t, "roomd_consumer_dlq_max_age_seconds", "gauge",
                   "The dead-letter stream's retention, rocketmq.dlq_max_age (0: unlimited).");
    if (any < 0)
        return;
    int64_t first = st[any].dlq_oldest_ms;
    metrics_value(t, "roomd_consumer_dlq_oldest_age_seconds", "",
                  first > 0 && now > first ? (double)(now - first) / 1000.0 : 0.0);
    metrics_value(t, "roomd_consumer_dlq_max_age_seconds", "",
                  (double)r->conf->rocketmq.dlq_max_age_ms / 1000.0);
}

/* Writes one counter family over the groups: each group's value of field. */
#define FAMILY(t, r, name, help, field)                                                            \
    do {                                                                                           \
        metrics_family(t, name, "counter", help);                                                  \
        for (int i_ = 0; i_ < NROLES; i_++)                                                        \
            if ((r)->g[i_] != NULL) {                                                              \
                snprintf(labels, sizeof(labels), "group=\"%s\"", (r)->h[i_].group);                \
                metrics_count(t, name, labels, st[i_].field);                                      \
            }                                                                                      \
    } while (0)

/* The groups' metrics (docs/metrics.md "Consumer groups"): counters by
 * group and reason, the processing histogram, the circuit, and the
 * position at the broker (lag, ack pending, oldest unacknowledged age). */
static void
collect_metrics(void *arg, struct metrics_text *t)
{
    struct consume_roles *r = arg;
    struct consume_stats st[NROLES];
    char labels[200];
    int64_t now = clock_wall_ms();

    for (int i = 0; i < NROLES; i++)
        if (r->g[i] != NULL)
            r->d.stats(r->g[i], &st[i]);
    FAMILY(t, r, "roomd_consumer_handled_total",
           "Messages a consumer group's handler did, by group.", handled);
    FAMILY(t, r, "roomd_consumer_duplicates_total",
           "Redeliveries of settled messages acknowledged without a second effect, by group.",
           duplicates);
    FAMILY(t, r, "roomd_consumer_redeliveries_total",
           "Deliveries JetStream counted more than once, by group.", redeliveries);
    FAMILY(t, r, "roomd_consumer_held_total",
           "Messages held back (room order, rocket wake-ups), by group; no failure.", held);
    FAMILY(t, r, "roomd_consumer_busy_total",
           "Deliveries that found another node's claim, by group; no failure.", busy);
    FAMILY(t, r, "roomd_consumer_fetch_errors_total", "Failed fetches from the broker, by group.",
           fetch_errors);
    FAMILY(t, r, "roomd_consumer_inbox_purged_unsettled_total",
           "Inbox keys deleted by retention that were never done or dead, by group.",
           purged_unsettled);
    FAMILY(t, r, "roomd_consumer_circuit_opened_total",
           "Times a group's downstream circuit opened (downstream unreachable).", circuit_opened);

    metrics_family(t, "roomd_consumer_retried_total", "counter",
                   "Messages Nak'ed to come back, by group and reason: failure and inbox count "
                   "toward consumer_max_reconsume_times; outage and circuit_open do not.");
    metrics_family(t, "roomd_consumer_dead_letters_total", "counter",
                   "Messages a consumer group dead-lettered, by group and reason.");
    metrics_family(t, "roomd_consumer_processing_seconds", "histogram",
                   "Time a consumer group's handler took per message.");
    for (int i = 0; i < NROLES; i++) {
        const char *g = r->h[i].group;
        if (r->g[i] == NULL)
            continue;
        static const char *const why[] = {"failure", "inbox", "outage", "circuit_open"};
        uint64_t v[] = {st[i].retried - st[i].retried_inbox, st[i].retried_inbox, st[i].outages,
                        st[i].circuit_skipped};
        for (int k = 0; k < 4; k++) {
            snprintf(labels, sizeof(labels), "group=\"%s\",reason=\"%s\"", g, why[k]);
            metrics_count(t, "roomd_consumer_retried_total", labels, v[k]);
        }
        for (int k = 0; k < CONSUME_DEAD_REASONS_; k++) {
            snprintf(labels, sizeof(labels), "group=\"%s\",reason=\"%s\"", g,
                     consume_dead_reason_names[k]);
            metrics_count(t, "roomd_consumer_dead_letters_total", labels, st[i].dead_by[k]);
        }
        snprintf(labels, sizeof(labels), "group=\"%s\"", g);
        metrics_histogram(t, "roomd_consumer_processing_seconds", labels, consume_proc_le_us,
                          st[i].proc_cum, CONSUME_PROC_BUCKETS, st[i].proc_count,
                          st[i].proc_sum_us);
    }

    metrics_family(t, "roomd_consumer_bound", "gauge",
                   "1 while the group's pull subscription is up, by group.");
    for (int i = 0; i < NROLES; i++)
        if (r->g[i] != NULL) {
            snprintf(labels, sizeof(labels), "group=\"%s\"", r->h[i].group);
            metrics_count(t, "roomd_consumer_bound", labels, st[i].bound);
        }
    metrics_family(t, "roomd_consumer_circuit_open", "gauge",
                   "1 while the group's downstream circuit is open, by group and downstream.");
    for (int i = 0; i < NROLES; i++)
        if (r->g[i] != NULL && r->h[i].downstream != NULL) {
            snprintf(labels, sizeof(labels), "group=\"%s\",downstream=\"%s\"", r->h[i].group,
                     r->h[i].downstream);
            metrics_count(t, "roomd_consumer_circuit_open", labels, st[i].circuit_open);
        }
    /* the position at the broker: the same for every node of a group */
    metrics_family(t, "roomd_consumer_lag", "gauge",
                   "The stream's last sequence minus the group's ack floor, by group.");
    metrics_family(t, "roomd_consumer_ack_pending", "gauge",
                   "Messages delivered to the group and not acknowledged yet, by group.");
    metrics_family(t, "roomd_consumer_oldest_unacked_age_seconds", "gauge",
                   "Age of the oldest message the group has not acknowledged (0: none), by group.");
    for (int i = 0; i < NROLES; i++) {
        if (r->g[i] == NULL || !st[i].pos_ok)
            continue; /* unknown: no sample rather than a wrong one */
        snprintf(labels, sizeof(labels), "group=\"%s\"", r->h[i].group);
        metrics_count(t, "roomd_consumer_lag", labels, st[i].lag);
        metrics_count(t, "roomd_consumer_ack_pending", labels, st[i].ack_pending);
        double age = st[i].oldest_unacked_ms > 0 && now > st[i].oldest_unacked_ms
                         ? (double)(now - st[i].oldest_unacked_ms) / 1000.0
                         : 0.0;
        metrics_value(t, "roomd_consumer_oldest_unacked_age_seconds", labels, age);
    }
    collect_dlq(r, st, t);
}

int
consume_roles_downstream_up(void *arg, const char *downstream)
{
    struct consume_roles *r = arg;
    int up = -1;

    if (r == NULL)
        return -1;
    for (int i = 0; i < NROLES; i++) {
        struct consume_stats st;
        if (r->g[i] == NULL || r->h[i].downstream == NULL ||
            strcmp(r->h[i].downstream, downstream) != 0)
            continue;
        r->d.stats(r->g[i], &st);
        up = (up != 0) && st.downstream_up && !st.circuit_open;
    }
    return up;
}

int
consume_roles_ready(void *arg, char *why, size_t whylen)
{
    struct consume_roles *r = arg;
    size_t len = 0;
    int rc = 0;

    why[0] = '\0';
    for (int i = 0; i < NROLES; i++) {
        struct consume_stats st;
        if (r->g[i] == NULL || r->h[i].downstream == NULL)
            continue;
        r->d.stats(r->g[i], &st);
        if (st.downstream_up && !st.circuit_open)
            continue;
        len += (size_t)snprintf(why + len, len < whylen ? whylen - len : 0,
                                "%s%s unreachable (%s%s): %s", rc != 0 ? ", " : "",
                                r->h[i].downstream, r->h[i].group,
                                st.circuit_open ? ", circuit open" : "", st.downstream_err);
        rc = ROOMD_EUNAVAIL;
        if (len >= whylen)
            break;
    }
    return rc;
}

unsigned
consume_roles_configured(const struct conf *c)
{
    const struct conf_rocketmq *mq = &c->rocketmq;
    unsigned r = 0;

    if (!mq->enabled)
        return 0;
    if (mq->room_outbox.tencent_im_consumer_enabled)
        r |= CONSUME_ROLE_IM_BRIDGE;
    if (mq->room_outbox.notice_consumer_enabled)
        r |= CONSUME_ROLE_NOTICE;
    if (mq->room_outbox.activity_consumer_enabled)
        r |= CONSUME_ROLE_ACTIVITY;
    if (mq->rocket_launch.enabled)
        r |= CONSUME_ROLE_ROCKET_OPEN;
    return r;
}

unsigned
consume_role_parse(const char *name)
{
    static const struct {
        const char *a, *b;
        unsigned bit;
    } names[] = {
        {"im-bridge", "hyapp-room-im-bridge", CONSUME_ROLE_IM_BRIDGE},
        {"notice", "hyapp-notice-room-outbox", CONSUME_ROLE_NOTICE},
        {"activity", "hyapp-activity-room-outbox", CONSUME_ROLE_ACTIVITY},
        {"rocket-open", "hyapp-room-rocket-open", CONSUME_ROLE_ROCKET_OPEN},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strcmp(name, names[i].a) == 0 || strcmp(name, names[i].b) == 0)
            return names[i].bit;
    return 0;
}

/* A group's options: the rocketmq section's, and the store's database and
 * this node's name for a MySQL inbox. */
static void
opts_of(struct consume_opts *o, const struct conf *c, int max_reconsume)
{
    consume_opts_from_conf(o, &c->rocketmq, max_reconsume);
    o->store = &c->store;
    o->owner = c->app.node_id;
}

/* The JetStream driver: the consumer kit of consume/group.c on a bus. */
static int
js_start(void **g, void *conn, const char *topic, const struct consume_handler *h,
         const struct consume_opts *o, char *err, size_t errlen)
{
    (void)topic; /* the stream is h->stream */
    return consume_group_start((struct consume_group **)g, conn, h, o, err, errlen);
}

static void
js_stop(void *g)
{
    consume_group_stop(g);
}

static void
js_stats(void *g, struct consume_stats *out)
{
    consume_group_stats(g, out);
}

int
consume_group_inbox_open(struct consume_inbox **out, const struct conf *c, const char *group,
                         char *err, size_t errlen)
{
    struct consume_opts o;
    size_t n = strspn(group, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-");

    *out = NULL;
    if (*group == '\0' || *group == '.' || group[n] != '\0' || n > 63) {
        snprintf(err, errlen, "not a consumer group name: \"%.64s\"", group);
        return ROOMD_EINVAL;
    }
    opts_of(&o, c, 0);
    struct inbox_config ic = {
        .group = group,
        .driver = o.inbox,
        .store_dir = o.store_dir,
        .store = o.store,
        .owner = o.owner,
        .existing = true,
    };
    return inbox_open(out, &ic, err, errlen);
}

int
consume_roles_start(struct consume_roles **out, const struct conf *c, struct bus *bus,
                    struct room_service *rooms, unsigned roles, char *err, size_t errlen)
{
    struct consume_driver d = {.start = js_start, .stop = js_stop, .stats = js_stats, .conn = bus};

    return consume_roles_start_on(out, c, &d, rooms, roles, err, errlen);
}

int
consume_roles_start_on(struct consume_roles **out, const struct conf *c,
                       const struct consume_driver *d, struct room_service *rooms, unsigned roles,
                       char *err, size_t errlen)
{
    const struct conf_rocketmq *mq = &c->rocketmq;
    struct consume_roles *r = xcalloc(1, sizeof(*r));
    int rc = 0;

    r->conf = c;
    *out = NULL;
    r->d = *d;
    for (int i = 0; i < NROLES && rc == 0; i++) {
        unsigned bit = 1u << i;
        struct consume_handler *h = &r->h[i];
        struct consume_opts o;

        if (!(roles & bit))
            continue;
        opts_of(&o, c, mq->room_outbox.consumer_max_reconsume_times);
        o.room_order = c->outbox_worker.ordering == ORDERING_PER_ROOM;
        switch (bit) {
        case CONSUME_ROLE_IM_BRIDGE:
            rc = consume_im_bridge_handler(h, c, err, errlen);
            r->im_bridge_open = rc == 0;
            break;
        case CONSUME_ROLE_NOTICE:
            rc = consume_notice_sender_open(&r->notice_sender, c, err, errlen);
            if (rc == 0)
                consume_notice_handler(h, mq->room_outbox.notice_consumer_group, &r->notice_sender);
            break;
        case CONSUME_ROLE_ACTIVITY:
            if (c->activity.enabled)
                rc = sink_activity_open(&r->activity_service, &c->activity, err, errlen);
            if (rc == 0)
                consume_activity_handler(h, mq->room_outbox.activity_consumer_group,
                                         r->activity_service);
            break;
        case CONSUME_ROLE_ROCKET_OPEN:
            if (rooms == NULL) {
                snprintf(err, errlen, "the rocket open group runs inside roomd only");
                rc = ROOMD_EINVAL;
                break;
            }
            opts_of(&o, c, mq->rocket_launch.consumer_max_reconsume_times);
            /* Every parked countdown is an unacknowledged message. */
            o.max_ack_pending = 100000;
            consume_rocket_open_handler(h, mq->rocket_launch.consumer_group, rooms);
            break;
        }
        const char *topic =
            bit == CONSUME_ROLE_ROCKET_OPEN ? mq->rocket_launch.topic : mq->room_outbox.topic;
        if (rc == 0)
            rc = r->d.start(&r->g[i], r->d.conn, topic, h, &o, err, errlen);
    }
    if (rc != 0) {
        consume_roles_stop(r);
        return rc;
    }
    r->metrics = metrics_add_collector(collect_metrics, r) == 0;
    *out = r;
    return 0;
}

void
consume_roles_stop(struct consume_roles *r)
{
    if (r == NULL)
        return;
    if (r->metrics)
        metrics_remove_collector(collect_metrics, r);
    for (int i = 0; i < NROLES; i++)
        if (r->g[i] != NULL)
            r->d.stop(r->g[i]);
    if (r->im_bridge_open)
        consume_im_bridge_release(&r->h[0]);
    consume_notice_sender_close(&r->notice_sender);
    if (r->activity_service != NULL)
        r->activity_service->close(r->activity_service);
    free(r);
}
