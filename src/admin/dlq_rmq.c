/* SPDX-License-Identifier: Apache-2.0 */
/*
 * admin/dlq_rmq.c: the RocketMQ dead-letter backend (dlq_backend.h): the
 * topics %DLQ%<group> of the configured groups, where the consumer
 * (rocketmq/consumer.c) sends a dead letter back with delay level -1, as
 * RocketMQ clients do. The broker keeps the original message (body,
 * properties, KEYS, TAGS, RETRY_TOPIC = the topic it came from).
 *   - ids: group number (1 IM bridge, 2 notice, 3 activity, 4 rocket open)
 *     x 10^12 + queue offset + 1; a %DLQ% topic has one queue (the
 *     broker's DLQ_NUMS_PER_GROUP), queue 0 is read
 *   - read with PULL_MESSAGE at an offset (the group's name, subscription
 *     "*", nothing committed): no offset of the group moves
 *   - a message cannot be deleted from a RocketMQ topic: a dead letter
 *     replayed or discarded is settled by its audit entry (the rows of the
 *     dlq_* audits name its id) and no longer listed; it expires with the
 *     broker's retention (fileReservedTime) like any message
 *   - reason: undecodable (no key), max_reconsume (reconsumed more than the
 *     group's consumer_max_reconsume_times), else permanent; the handler's
 *     error is in the group's inbox (last_error), not on the message
 *   - replay: sent to %RETRY%<group> (only that group sees it again) with
 *     its KEYS, TAGS and RETRY_TOPIC, after the inbox forgot the key
 */
#include "admin/dlq_backend.h"
#include "admin/internal.h"

#include "conf/conf.h"
#include "consume/group.h"
#include "consume/handlers.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/xmalloc.h"
#include "rocketmq/client.h"
#include "room_events.pb-c.h"
#include "store/admin.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ID_BASE 1000000000000ULL /* 10^12: group number x this + offset + 1 */
#define NGROUPS 4
#define PULL_N 32
#define CALL_MS 3000

struct dlq_scan {
    struct admin *a;
    struct rmq_client *c;
    const char *groups[NGROUPS + 1]; /* [1..4] the configured names */
    const char *topics[NGROUPS + 1]; /* the topic each consumes */
    int max_reconsume[NGROUPS + 1];
    /* each %DLQ% queue's end when the scan first read it (0: not yet): a
     * dead letter stored later (a replay failing again) is for the next
     * scan, so that a bulk run never meets its own replays */
    int64_t hi[NGROUPS + 1];
    uint64_t *settled; /* ids the dlq_* audits name, sorted */
    size_t nsettled, capsettled;
    bool sorted;
};

static const char *
or_default(const char *v, const char *dflt)
{
    return v && *v ? v : dflt;
}

static int
cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void
settle(struct dlq_scan *s, uint64_t id)
{
    s->settled = xgrow(s->settled, s->nsettled, &s->capsettled, sizeof(*s->settled));
    s->settled[s->nsettled++] = id;
    s->sorted = false;
}

static bool
settled(struct dlq_scan *s, uint64_t id)
{
    if (s->nsettled == 0)
        return false;
    if (!s->sorted) {
        qsort(s->settled, s->nsettled, sizeof(*s->settled), cmp_u64);
        s->sorted = true;
    }
    return bsearch(&id, s->settled, s->nsettled, sizeof(id), cmp_u64) != NULL;
}

/* The ids of every dlq_* audit's rows (this driver's ids: >= ID_BASE). */
static int
load_settled(struct dlq_scan *s, struct admin_reply *r)
{
    int64_t before = 0;

    if (!admin_store_has_audit(s->a->store))
        return 0;
    for (;;) {
        struct admin_audit *au = NULL;
        size_t n = 0;
        int rc = admin_store_audit_list(s->a->store, before, 500, &au, &n);
        if (rc != 0) {
            admin_reply_store(s->a, r, rc);
            return rc;
        }
        for (size_t i = 0; i < n; i++) {
            before = au[i].id;
            if (strncmp(au[i].action, "dlq_", 4) != 0)
                continue;
            int64_t after = 0;
            for (;;) {
                struct admin_audit_row *rows = NULL;
                size_t nr = 0;
                if ((rc = admin_store_audit_rows(s->a->store, au[i].id, after, 1000, &rows, &nr)) !=
                    0) {
                    admin_audits_free(au, n);
                    admin_reply_store(s->a, r, rc);
                    return rc;
                }
                for (size_t k = 0; k < nr; k++) {
                    after = rows[k].outbox_id;
                    if ((uint64_t)rows[k].outbox_id >= ID_BASE)
                        settle(s, (uint64_t)rows[k].outbox_id);
                }
                free(rows);
                if (nr < 1000)
                    break;
            }
        }
        admin_audits_free(au, n);
        if (n < 500)
            return 0;
    }
}

static int
rmq_open(struct admin *a, struct dlq_scan **out, struct admin_reply *r)
{
    const struct conf_rocketmq *mq = &a->conf->rocketmq;
    struct dlq_scan *s = xcalloc(1, sizeof(*s));

    s->a = a;
    s->c = a->rmq;
    s->groups[1] = or_default(mq->room_outbox.tencent_im_consumer_group, "hyapp-room-im-bridge");
    s->groups[2] = or_default(mq->room_outbox.notice_consumer_group, "hyapp-notice-room-outbox");
    s->groups[3] =
        or_default(mq->room_outbox.activity_consumer_group, "hyapp-activity-room-outbox");
    s->groups[4] = or_default(mq->rocket_launch.consumer_group, "hyapp-room-rocket-open");
    for (int g = 1; g <= NGROUPS; g++) {
        s->topics[g] = g == 4 ? or_default(mq->rocket_launch.topic, "hyapp_room_rocket_launch")
                              : or_default(mq->room_outbox.topic, "hyapp_room_outbox");
        s->max_reconsume[g] = g == 4 ? mq->rocket_launch.consumer_max_reconsume_times
                                     : mq->room_outbox.consumer_max_reconsume_times;
    }
    if (load_settled(s, r) != 0) {
        free(s->settled);
        free(s);
        return ROOMD_EUNAVAIL;
    }
    *out = s;
    return 0;
}

static void
rmq_close(struct dlq_scan *s)
{
    if (s == NULL)
        return;
    free(s->settled);
    free(s);
}

static const char *
rmq_where(struct dlq_scan *s)
{
    (void)s;
    return "%DLQ%<group>";
}

static void
rmq_letter_free(struct dlq_letter *d)
{
    free(d->own);
    memset(d, 0, sizeof(*d));
}

static int
group_no(struct dlq_scan *s, const char *group)
{
    for (int g = 1; g <= NGROUPS; g++)
        if (strcmp(s->groups[g], group) == 0)
            return g;
    return 0;
}

/* d from m, dead letter of group number g (body copied). */
static void
letter_of(struct dlq_scan *s, int g, const struct rmq_message_ext *m, struct dlq_letter *d)
{
    char buf[256];

    memset(d, 0, sizeof(*d));
    d->seq = (uint64_t)g * ID_BASE + (uint64_t)m->queue_offset + 1;
    snprintf(d->group, sizeof(d->group), "%s", s->groups[g]);
    snprintf(d->subject, sizeof(d->subject), "%s",
             rmq_prop(m, "RETRY_TOPIC", buf, sizeof(buf)) ?: s->topics[g]);
    int rc = g == 4 ? consume_rocket_key(NULL, m->body, m->len, d->key, sizeof(d->key))
                    : consume_envelope_key(NULL, m->body, m->len, d->key, sizeof(d->key));
    if (rc != 0)
        d->key[0] = '\0';
    d->deliveries = (uint64_t)(m->reconsume > 0 ? m->reconsume : 1);
    snprintf(d->reason, sizeof(d->reason), "%s",
             rc != 0 ? consume_dead_reason_names[CONSUME_DEAD_UNDECODABLE]
             : m->reconsume > s->max_reconsume[g]
                 ? consume_dead_reason_names[CONSUME_DEAD_MAX_RECONSUME]
                 : consume_dead_reason_names[CONSUME_DEAD_PERMANENT]);
    snprintf(d->error, sizeof(d->error), "-");
    d->stored_ms = m->store_ms;
    d->own = xmalloc(m->len + 1);
    memcpy(d->own, m->body, m->len);
    d->data = d->own;
    d->len = m->len;
}

/* The first unsettled dead letter of group number g at queue offset >= from:
 * 0 (in *out), ROOMD_ENOTFOUND, or ROOMD_EUNAVAIL with err. */
static int
scan_group(struct dlq_scan *s, int g, int64_t from, struct dlq_letter *out, char *err,
           size_t errlen)
{
    char topic[192];
    struct rmq_mq *qs = NULL;
    int nq = 0;

    snprintf(topic, sizeof(topic), "%%DLQ%%%s", s->groups[g]);
    int rc = rmq_read_queues(s->c, topic, clock_mono_ms() + CALL_MS, &qs, &nq, err, errlen);
    if (rc == ROOMD_ERETRY || (rc == 0 && nq == 0)) {
        free(qs);
        return ROOMD_ENOTFOUND; /* no such topic: no dead letter yet */
    }
    if (rc != 0)
        return ROOMD_EUNAVAIL;
    struct rmq_mq q = qs[0];
    for (int i = 0; i < nq; i++)
        if (qs[i].qid == 0)
            q = qs[i];
    free(qs);
    int64_t lo = 0, hi = s->hi[g];
    if (rmq_min_offset(s->c, &q, clock_mono_ms() + CALL_MS, &lo, err, errlen) != 0 ||
        (hi <= 0 && rmq_max_offset(s->c, &q, clock_mono_ms() + CALL_MS, &hi, err, errlen) != 0))
        return ROOMD_EUNAVAIL;
    s->hi[g] = hi;
    for (int64_t off = from > lo ? from : lo; off < hi;) {
        struct rmq_pulled p;
        if (rmq_pull(s->c, &q, s->groups[g], off, PULL_N, clock_mono_ms() + CALL_MS, &p, err,
                     errlen) != 0)
            return ROOMD_EUNAVAIL;
        if (p.code != RMQ_SUCCESS || p.n == 0) {
            int64_t next = p.next_begin > off ? p.next_begin : hi;
            rmq_pulled_free(&p);
            off = next;
            continue;
        }
        for (int i = 0; i < p.n; i++) {
            uint64_t id = (uint64_t)g * ID_BASE + (uint64_t)p.msgs[i].queue_offset + 1;
            if (p.msgs[i].queue_offset < from || p.msgs[i].queue_offset >= hi || settled(s, id))
                continue;
            letter_of(s, g, &p.msgs[i], out);
            rmq_pulled_free(&p);
            return 0;
        }
        off = p.msgs[p.n - 1].queue_offset + 1;
        rmq_pulled_free(&p);
    }
    return ROOMD_ENOTFOUND;
}

static int
rmq_next(struct dlq_scan *s, uint64_t after, const char *group, struct dlq_letter *out)
{
    char err[256];
    int only = group && *group ? group_no(s, group) : 0;

    if (group && *group && only == 0)
        return ROOMD_ENOTFOUND;
    for (int g = after / ID_BASE > 0 ? (int)(after / ID_BASE) : 1; g <= NGROUPS; g++) {
        if (only != 0 && g != only)
            continue;
        /* ids of g are g x 10^12 + offset + 1: after's offset + 1 is the next */
        int64_t from = (uint64_t)g == after / ID_BASE ? (int64_t)(after % ID_BASE) : 0;
        int rc = scan_group(s, g, from, out, err, sizeof(err));
        if (rc != ROOMD_ENOTFOUND)
            return rc;
    }
    return ROOMD_ENOTFOUND;
}

static int
rmq_get(struct dlq_scan *s, uint64_t seq, struct dlq_letter *out, char *err, size_t errlen)
{
    int g = (int)(seq / ID_BASE);
    int64_t off = (int64_t)(seq % ID_BASE) - 1;

    if (g < 1 || g > NGROUPS || off < 0 || settled(s, seq))
        return ROOMD_ENOTFOUND;
    int rc = scan_group(s, g, off, out, err, errlen);
    if (rc == 0 && out->seq != seq) {
        rmq_letter_free(out);
        return ROOMD_ENOTFOUND;
    }
    return rc;
}

static int
rmq_republish(struct dlq_scan *s, const struct dlq_letter *d, char *err, size_t errlen)
{
    const struct conf_rocketmq *mq = &s->a->conf->rocketmq;
    char retry[192], tags[128] = "";
    int g = group_no(s, d->group);
    struct rmq_send_result res;

    snprintf(retry, sizeof(retry), "%%RETRY%%%s", d->group);
    /* the TAGS the consumers filter on: the event_type of an outbox event */
    if (g == 4) {
        snprintf(tags, sizeof(tags), "wakeup");
    } else {
        Roomd__V1__RoomOutboxEvent *ev =
            roomd__v1__room_outbox_event__unpack(NULL, d->len, d->data);
        if (ev && ev->event_type)
            snprintf(tags, sizeof(tags), "%s", ev->event_type);
        if (ev)
            roomd__v1__room_outbox_event__free_unpacked(ev, NULL);
    }
    struct rmq_msg m = {.topic = retry,
                        .tags = *tags ? tags : NULL,
                        .keys = *d->key ? d->key : NULL,
                        .body = d->data,
                        .len = d->len,
                        .retry_topic = d->subject};
    const char *producer =
        g == 4 ? or_default(mq->rocket_launch.producer_group, "hyapp-room-rocket-open-producer")
               : or_default(mq->room_outbox.producer_group, "hyapp-room-outbox-producer");
    int64_t wait = mq->send_timeout_ms > 0 ? mq->send_timeout_ms : 3000;
    return rmq_send(s->c, producer, &m, clock_mono_ms() + wait, &res, err, errlen);
}

static bool
rmq_remove(struct dlq_scan *s, const struct dlq_letter *d)
{
    settle(s, d->seq); /* for the rest of this scan; the audit entry keeps it settled */
    return true;
}

const struct dlq_backend dlq_backend_rocketmq = {
    .name = "rocketmq",
    .open = rmq_open,
    .close = rmq_close,
    .where = rmq_where,
    .next = rmq_next,
    .get = rmq_get,
    .republish = rmq_republish,
    .remove = rmq_remove,
    .letter_free = rmq_letter_free,
};
