/*
 * sink_bus.c: the mq-mode sink. Publishes each event's packed envelope
 * (roomd.v1.RoomOutboxEvent) to "<ns><topic>.<event_type>" on the outbox
 * stream with Nats-Msg-Id = event_id; delivered only after the stream's
 * PubAck (a Duplicate ack counts). Broker down -> ROOMD_ERETRY.
 * The JetStream plumbing is in bus.c; the consumers in consume/group.c.
 */
#include "publish/sink_bus.h"

#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/xmalloc.h"
#include "publish/bus.h"
#include "store/store.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Batches up to this size are published one synchronous publish at a time. */
#define SYNC_BATCH_MAX 3
/* A context's bound on unacknowledged publishes: above any batch_size, so a
 * batch never blocks on its own window. */
#define SLOT_MAX_PENDING 65536

struct batch;

/* One asynchronous JetStream context, kept for the next batch: setting one
 * up (its reply subscription) costs ~0.7 ms, a batch of 100 publishes ~3. */
struct js_slot {
    jsCtx *js;
    struct batch *cur; /* the batch publishing through js (ack_cb's closure) */
    struct js_slot *next;
};

struct sink_bus {
    struct sink base; /* first member */
    struct bus *bus;
    pthread_mutex_t mu;   /* guards idle */
    struct js_slot *idle; /* contexts no batch uses; one per concurrent batch at most */
    struct js_slot *dead; /* contexts whose acks may still come (freed at close) */
};

/* The message of one event: its envelope, deduplicated by event_id. */
static struct bus_message
event_message(const struct outbox_event *ev)
{
    return (struct bus_message){.stream = BUS_STREAM_OUTBOX,
                                .token = ev->row->event_type,
                                .data = ev->envelope,
                                .len = ev->envelope_len,
                                .msg_id = ev->row->event_id};
}

static int
bus_sink_publish(struct sink *s, const struct outbox_event *ev, int64_t deadline_mono_ms, char *err,
                 size_t errlen)
{
    struct sink_bus *sb = (struct sink_bus *)s;
    struct bus_message m = event_message(ev);
    bool dup = false;
    uint64_t seq = 0;
    int rc;

    rc = bus_publish(sb->bus, &m, deadline_mono_ms, &dup, &seq, err, errlen);
    if (rc == 0)
        log_debug("bus", "event published", "event_id=%s event_type=%s seq=%llu duplicate=%d",
                  m.msg_id, m.token, (unsigned long long)seq, (int)dup);
    return rc;
}

/* ==== the batch: asynchronous publish, one wait ==== */

/* One publish_batch call. The jsCtx it takes from the pool gets every
 * PubAck through ack_cb; a lost ack is taken back from the context at the
 * deadline (js_PublishAsyncGetPendingList), never pending forever
 * (jetstream.md pitfall 3). */
struct batch {
    const struct outbox_event *evs;
    size_t n;
    int *rcs;
    char *errs;
    size_t errlen;
    size_t next_ack; /* where ack_cb looks first */
};

static void
set_result(struct batch *bt, size_t i, int rc, const char *fmt, const char *a, const char *b)
{
    bt->rcs[i] = rc;
    if (rc != 0)
        snprintf(bt->errs + i * bt->errlen, bt->errlen, fmt, a, b);
    else
        bt->errs[i * bt->errlen] = '\0';
}

static void
ack_cb(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *closure)
{
    struct batch *bt = ((struct js_slot *)closure)->cur;
    const char *id = NULL;

    (void)js;
    (void)pa;
    if (bt != NULL && natsMsgHeader_Get(msg, "Nats-Msg-Id", &id) == NATS_OK) {
        /* acks come in publish order: look from the one after the last */
        for (size_t k = 0, i = bt->next_ack; k < bt->n; k++, i = (i + 1) % bt->n) {
            if (strcmp(bt->evs[i].row->event_id, id) != 0)
                continue;
            bt->next_ack = (i + 1) % bt->n;
            if (pae == NULL)
                set_result(bt, i, 0, "", "", "");
            else
                set_result(bt, i, bus_status_rc(pae->Err, pae->ErrCode), "publish %s: %s",
                           natsMsg_GetSubject(msg),
                           pae->ErrText ? pae->ErrText : natsStatus_GetText(pae->Err));
            break;
        }
    }
    natsMsg_Destroy(msg);
}

/* An idle context of sb, or a new one (NULL when nats.c cannot make one). */
static struct js_slot *
slot_take(struct sink_bus *sb)
{
    struct js_slot *slot;
    jsOptions jo;

    pthread_mutex_lock(&sb->mu);
    if ((slot = sb->idle) != NULL)
        sb->idle = slot->next;
    pthread_mutex_unlock(&sb->mu);
    if (slot != NULL)
        return slot;
    slot = xcalloc(1, sizeof(*slot));
    jsOptions_Init(&jo);
    jo.Wait = bus_api_wait_ms(sb->bus);
    jo.PublishAsync.AckHandler = ack_cb;
    jo.PublishAsync.AckHandlerClosure = slot;
    jo.PublishAsync.MaxPending = SLOT_MAX_PENDING;
    if (natsConnection_JetStream(&slot->js, bus_nc(sb->bus), &jo) != NATS_OK) {
        free(slot);
        return NULL;
    }
    return slot;
}

static void
slot_put(struct sink_bus *sb, struct js_slot *slot)
{
    slot->cur = NULL;
    pthread_mutex_lock(&sb->mu);
    slot->next = sb->idle;
    sb->idle = slot;
    pthread_mutex_unlock(&sb->mu);
}

/* Retires a context whose acks may still come: ack_cb ignores them. */
static void
slot_retire(struct sink_bus *sb, struct js_slot *slot)
{
    pthread_mutex_lock(&sb->mu);
    slot->cur = NULL;
    slot->next = sb->dead;
    sb->dead = slot;
    pthread_mutex_unlock(&sb->mu);
}

static void
slots_free(struct js_slot *slot)
{
    while (slot != NULL) {
        struct js_slot *next = slot->next;
        jsCtx_Destroy(slot->js);
        free(slot);
        slot = next;
    }
}

static void
bus_sink_publish_batch(struct sink *s, const struct outbox_event *evs, size_t n,
                       int64_t deadline_mono_ms, int *rcs, char *errs, size_t errlen)
{
    struct sink_bus *sb = (struct sink_bus *)s;
    struct batch bt = {.evs = evs, .n = n, .rcs = rcs, .errs = errs, .errlen = errlen};
    char err[256] = "";
    struct js_slot *slot;
    jsCtx *js;

    if (n <= SYNC_BATCH_MAX) {
        /* a few events (light load: the outbox hand-off takes rows as they
         * commit): synchronous publishes wait for their PubAcks sooner than
         * setting up an asynchronous context (~0.7 ms here) would */
        for (size_t i = 0; i < n; i++)
            rcs[i] = bus_sink_publish(s, &evs[i], deadline_mono_ms, errs + i * errlen, errlen);
        return;
    }
    for (size_t i = 0; i < n; i++)
        set_result(&bt, i, ROOMD_ERETRY, "%s%s", "no PubAck before the publish deadline", "");
    if (bus_ensure(sb->bus, err, sizeof(err)) != 0) {
        for (size_t i = 0; i < n; i++)
            set_result(&bt, i, ROOMD_ERETRY, "%s%s", err, "");
        return;
    }
    if ((slot = slot_take(sb)) == NULL) {
        for (size_t i = 0; i < n; i++) /* fall back to one at a time */
            rcs[i] = bus_sink_publish(s, &evs[i], deadline_mono_ms, errs + i * errlen, errlen);
        return;
    }
    slot->cur = &bt;
    js = slot->js;
    for (size_t i = 0; i < n; i++) {
        struct bus_message m = event_message(&evs[i]);
        natsMsg *msg = NULL;
        jsPubOptions po;
        int64_t left = deadline_mono_ms - clock_mono_ms();
        int rc;

        if (left <= 0)
            break; /* the rest keep "no PubAck before the deadline" */
        if ((rc = bus_message_build(sb->bus, &m, &msg, err, sizeof(err))) != 0) {
            set_result(&bt, i, rc, "%s%s", err, "");
            continue;
        }
        /* no per-message MaxWait: nats.c would keep a timer entry per message
         * until it expires, long after its ack, in a context that lives on;
         * the wait below is bounded and takes back what stayed unacked */
        jsPubOptions_Init(&po);
        po.MsgId = m.msg_id;
        po.ExpectStream = bus_stream_name(sb->bus, m.stream);
        natsStatus st = js_PublishMsgAsync(js, &msg, &po);
        if (st != NATS_OK) {
            set_result(&bt, i, bus_status_rc(st, 0), "publish %s: %s", natsMsg_GetSubject(msg),
                       natsStatus_GetText(st));
            natsMsg_Destroy(msg); /* still ours when the call failed */
        }
    }
    /* Every acknowledged message ends in ack_cb (ack or error); wait for
     * all until the deadline, then take back the unacknowledged ones (their
     * results stay ERETRY), so the context is empty for its next batch. */
    jsPubOptions wo;
    jsPubOptions_Init(&wo);
    int64_t left = deadline_mono_ms - clock_mono_ms();
    wo.MaxWait = left > 0 ? left : 1;
    if (js_PublishAsyncComplete(js, &wo) != NATS_OK) {
        natsMsgList pending = {0};
        if (js_PublishAsyncGetPendingList(&pending, js) == NATS_OK)
            natsMsgList_Destroy(&pending); /* their results stay ERETRY */
        wo.MaxWait = 100;
        if (js_PublishAsyncComplete(js, &wo) != NATS_OK) {
            /* a callback may still come: this context cannot serve another batch */
            slot_retire(sb, slot);
            slot = NULL;
        }
    }
    if (slot != NULL)
        slot_put(sb, slot);
    for (size_t i = 0; i < n; i++)
        if (rcs[i] == 0)
            log_debug("bus", "event published", "event_id=%s", evs[i].row->event_id);
}

static void
bus_sink_close(struct sink *s)
{
    struct sink_bus *sb = (struct sink_bus *)s;

    slots_free(sb->idle);
    slots_free(sb->dead);
    pthread_mutex_destroy(&sb->mu);
    bus_unref(sb->bus);
    free(sb);
}

int
sink_bus_open(struct sink **out, struct bus *bus)
{
    struct sink_bus *sb = xcalloc(1, sizeof(*sb));

    sb->base.name = "bus";
    sb->base.bit = SINK_BIT_BUS;
    sb->base.accepts = NULL;
    sb->base.publish = bus_sink_publish;
    sb->base.close = bus_sink_close;
    sb->base.publish_batch = bus_sink_publish_batch;
    sb->base.no_json = true; /* the packed envelope only */
    pthread_mutex_init(&sb->mu, NULL);
    bus_ref(bus);
    sb->bus = bus;
    *out = &sb->base;
    return 0;
}
