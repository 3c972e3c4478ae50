/* SPDX-License-Identifier: Apache-2.0 */
/*
 * roles.c: starts and stops the configured consumer groups (roles.h). The
 * handlers are in activity.c, notice.c, im_bridge.c and rocket_open.c.
 */
#include "consume/roles.h"

#include "conf/conf.h"
#include "consume/group.h"
#include "consume/handlers.h"
#include "store/inbox.h"
#include "core/err.h"
#include "core/log.h"
#include "core/xmalloc.h"
#include "metrics/metrics.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NROLES 4

struct consume_roles {
    struct consume_group *g[NROLES]; /* index = bit number of the role */
    struct consume_handler h[NROLES];
    bool im_bridge_open;
    bool metrics; /* collect_metrics is registered */
    struct consume_notice_sender notice_sender;
};

/* The groups' inbox retention: keys purged before they were settled (their
 * effect may be missing; each is also a warning in the log). */
static void
collect_metrics(void *arg, struct metrics_text *t)
{
    struct consume_roles *r = arg;
    char labels[160];

    metrics_family(t, "roomd_consumer_inbox_purged_unsettled_total", "counter",
                   "Inbox keys deleted by retention that were never done or dead, by group.");
    for (int i = 0; i < NROLES; i++) {
        struct consume_stats st;
        if (r->g[i] == NULL)
            continue;
        consume_group_stats(r->g[i], &st);
        snprintf(labels, sizeof(labels), "group=\"%s\"", r->h[i].group);
        metrics_count(t, "roomd_consumer_inbox_purged_unsettled_total", labels,
                      st.purged_unsettled);
    }
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
    const struct conf_rocketmq *mq = &c->rocketmq;
    struct consume_roles *r = xcalloc(1, sizeof(*r));
    int rc = 0;

    *out = NULL;
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
            consume_activity_handler(h, mq->room_outbox.activity_consumer_group);
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
        if (rc == 0)
            rc = consume_group_start(&r->g[i], bus, h, &o, err, errlen);
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
        consume_group_stop(r->g[i]);
    if (r->im_bridge_open)
        consume_im_bridge_release(&r->h[0]);
    consume_notice_sender_close(&r->notice_sender);
    free(r);
}
