/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sink_bus.c: the mq-mode sink. Publishes each event's packed envelope
 * (roomd.v1.RoomOutboxEvent) to "<ns><topic>.<event_type>" on the outbox
 * stream with Nats-Msg-Id = event_id; delivered only after the stream's
 * PubAck (a Duplicate ack counts). Broker down or stalled -> ROOMD_EUNAVAIL at once.
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
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Batches up to this size are published one synchronous publish at a time. */
#define SYNC_BATCH_MAX 3

/*
 * An asynchronous publishing context (jsCtx), used by one batch at a time
 * and kept for the next one: nats.c gives each context its own reply
 * subscription, with a delivery thread of its own, and a MaxWait timer, so
 * one set up and torn down per batch cost a thread's start and end on every
 * batch. ack_cb's closure is the context; bt is the batch publishing
 * through it (written before that batch's first publish).
 */
struct actx {
    jsCtx *js;
    struct batch *bt;
    struct actx *next; /* the sink's pool of idle contexts */
};

struct sink_bus {
    struct sink base; /* first member */
    struct bus *bus;
    pthread_mutex_t pool_mu;
    struct actx *pool; /* idle contexts, each with no message outstanding */
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

/* One batch between publish_start and publish_finish. Its context (ax,
 * its own for the time) gets every PubAck through ack_cb (per-message
 * MaxWait, so a lost ack ends as a timeout, never pending forever:
 * jetstream.md pitfall 3). Several batches of one worker may be in flight
 * at once, each with its own context. */
struct batch {
    struct sink_bus *sb;
    const struct outbox_event *evs;
    size_t n;
    int *rcs;
    char *errs;
    size_t errlen;
    int64_t deadline;
    struct actx *ax;
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

/* nats.c's thread of the context's reply subscription: one answer (an
 * ack, an error or the MaxWait timeout) of a message of the batch using
 * the context. */
static void
ack_cb(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *closure)
{
    struct batch *bt = ((struct actx *)closure)->bt;
    const char *id = NULL;

    (void)js;
    (void)pa;
    if (bt != NULL && natsMsgHeader_Get(msg, "Nats-Msg-Id", &id) == NATS_OK) {
        for (size_t i = 0; i < bt->n; i++) {
            if (strcmp(bt->evs[i].row->event_id, id) != 0)
                continue;
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

/* An idle context of sb's pool, or a new one (NULL when nats.c refuses).
 * Thread: a worker's; does not block. */
static struct actx *
actx_get(struct sink_bus *sb)
{
    struct actx *ax;
    jsOptions jo;

    pthread_mutex_lock(&sb->pool_mu);
    if ((ax = sb->pool) != NULL)
        sb->pool = ax->next;
    pthread_mutex_unlock(&sb->pool_mu);
    if (ax != NULL)
        return ax;
    ax = xcalloc(1, sizeof(*ax));
    jsOptions_Init(&jo);
    jo.Wait = bus_api_wait_ms(sb->bus);
    jo.PublishAsync.AckHandler = ack_cb;
    jo.PublishAsync.AckHandlerClosure = ax;
    jo.PublishAsync.MaxPending = INT32_MAX; /* a batch's messages never stall */
    if (natsConnection_JetStream(&ax->js, bus_nc(sb->bus), &jo) != NATS_OK) {
        free(ax);
        return NULL;
    }
    return ax;
}

/* Gives ax back to the pool when no answer can still come (ok: every
 * message of its batch answered), else destroys it. */
static void
actx_put(struct sink_bus *sb, struct actx *ax, bool ok)
{
    ax->bt = NULL;
    if (!ok) {
        jsCtx_Destroy(ax->js);
        free(ax);
        return;
    }
    pthread_mutex_lock(&sb->pool_mu);
    ax->next = sb->pool;
    sb->pool = ax;
    pthread_mutex_unlock(&sb->pool_mu);
}

/* One event at a time, synchronously (rcs final). */
static void
publish_each(struct sink *s, const struct outbox_event *evs, size_t n, int64_t deadline_mono_ms,
             int *rcs, char *errs, size_t errlen)
{
    for (size_t i = 0; i < n; i++)
        rcs[i] = bus_sink_publish(s, &evs[i], deadline_mono_ms, errs + i * errlen, errlen);
}

static void *
bus_sink_publish_start(struct sink *s, const struct outbox_event *evs, size_t n,
                       int64_t deadline_mono_ms, int *rcs, char *errs, size_t errlen)
{
    struct sink_bus *sb = (struct sink_bus *)s;
    struct batch *bt;
    char err[256] = "";

    if (n <= SYNC_BATCH_MAX) {
        /* a few events (light load: the outbox hand-off takes rows as they
         * commit): synchronous publishes on the bus's own context, with no
         * hop through a context's subscription thread (with contexts pooled,
         * 0 here measured the same at half load: bench/README.md) */
        publish_each(s, evs, n, deadline_mono_ms, rcs, errs, errlen);
        return NULL;
    }
    bt = xcalloc(1, sizeof(*bt));
    *bt = (struct batch){.sb = sb,
                         .evs = evs,
                         .n = n,
                         .rcs = rcs,
                         .errs = errs,
                         .errlen = errlen,
                         .deadline = deadline_mono_ms};
    for (size_t i = 0; i < n; i++)
        set_result(bt, i, ROOMD_EUNAVAIL, "%s%s", "no PubAck before the publish deadline", "");
    int rc0 = bus_ensure(sb->bus, err, sizeof(err));
    if (rc0 == 0 && bus_stalled(sb->bus, err, sizeof(err)))
        rc0 = ROOMD_EUNAVAIL;
    if (rc0 != 0) {
        for (size_t i = 0; i < n; i++)
            set_result(bt, i, rc0, "%s%s", err, "");
        free(bt);
        return NULL;
    }
    if ((bt->ax = actx_get(sb)) == NULL) {
        free(bt);
        publish_each(s, evs, n, deadline_mono_ms, rcs, errs, errlen); /* one at a time */
        return NULL;
    }
    bt->ax->bt = bt;
    for (size_t i = 0; i < n; i++) {
        struct bus_message m = event_message(&evs[i]);
        natsMsg *msg = NULL;
        jsPubOptions po;
        int64_t left = deadline_mono_ms - clock_mono_ms();
        int rc;

        if (left <= 0)
            break; /* the rest keep "no PubAck before the deadline" */
        if ((rc = bus_message_build(sb->bus, &m, &msg, err, sizeof(err))) != 0) {
            set_result(bt, i, rc, "%s%s", err, "");
            continue;
        }
        jsPubOptions_Init(&po);
        po.MsgId = m.msg_id;
        po.ExpectStream = bus_stream_name(sb->bus, m.stream);
        po.MaxWait = left;
        natsStatus st = js_PublishMsgAsync(bt->ax->js, &msg, &po);
        if (st != NATS_OK) {
            set_result(bt, i, bus_status_rc(st, 0), "publish %s: %s", natsMsg_GetSubject(msg),
                       natsStatus_GetText(st));
            natsMsg_Destroy(msg); /* still ours when the call failed */
        }
    }
    return bt;
}

static void
bus_sink_publish_finish(struct sink *s, void *handle)
{
    struct batch *bt = handle;
    jsPubOptions wo;
    bool answered = false;

    (void)s;
    /* Every message ends in ack_cb (ack, error or its MaxWait timeout);
     * wait for all, a little past the deadline for the timeouts. */
    jsPubOptions_Init(&wo);
    int64_t left = bt->deadline - clock_mono_ms();
    wo.MaxWait = (left > 0 ? left : 1) + 250;
    /* OK once every message's callback returned (nats.c counts a message
     * answered after its callback): the context may serve another batch */
    bool all = js_PublishAsyncComplete(bt->ax->js, &wo) == NATS_OK;
    if (!all) {
        natsMsgList pending = {0};
        if (js_PublishAsyncGetPendingList(&pending, bt->ax->js) == NATS_OK)
            natsMsgList_Destroy(&pending); /* their results stay EUNAVAIL */
        wo.MaxWait = 100;
        js_PublishAsyncComplete(bt->ax->js, &wo); /* a callback in flight */
    }
    actx_put(bt->sb, bt->ax, all);
    for (size_t i = 0; i < bt->n; i++) {
        answered = answered || bt->rcs[i] != ROOMD_EUNAVAIL;
        if (bt->rcs[i] == 0)
            log_debug("bus", "event published", "event_id=%s", bt->evs[i].row->event_id);
    }
    if (bt->n > 0) /* any answer clears a stall; none at all marks one */
        bus_note_publish(bt->sb->bus, answered ? NATS_OK : NATS_TIMEOUT, 0);
    free(bt);
}

static void
bus_sink_publish_batch(struct sink *s, const struct outbox_event *evs, size_t n,
                       int64_t deadline_mono_ms, int *rcs, char *errs, size_t errlen)
{
    void *h = bus_sink_publish_start(s, evs, n, deadline_mono_ms, rcs, errs, errlen);

    if (h != NULL)
        bus_sink_publish_finish(s, h);
}

/* The circuit's probe (sink.h): the info of the sink's stream. */
static int
bus_sink_probe(struct sink *s, int64_t deadline_mono_ms, char *err, size_t errlen)
{
    struct sink_bus *sb = (struct sink_bus *)s;
    enum bus_stream w = s->bit == SINK_BIT_ROCKET ? BUS_STREAM_ROCKET : BUS_STREAM_OUTBOX;

    return bus_probe(sb->bus, w, deadline_mono_ms, err, errlen);
}

static void
bus_sink_close(struct sink *s)
{
    struct sink_bus *sb = (struct sink_bus *)s;

    while (sb->pool != NULL) { /* every batch finished: all are idle */
        struct actx *ax = sb->pool;

        sb->pool = ax->next;
        jsCtx_Destroy(ax->js);
        free(ax);
    }
    pthread_mutex_destroy(&sb->pool_mu);
    bus_unref(sb->bus);
    free(sb);
}

struct sink *
sink_bus_new(struct bus *bus, const char *name, uint32_t bit,
             bool (*accepts)(struct sink *, const struct outbox_event *),
             int (*publish)(struct sink *, const struct outbox_event *, int64_t, char *, size_t))
{
    struct sink_bus *sb = xcalloc(1, sizeof(*sb));

    /* no_json: the packed envelope and the row only */
    sink_init(&sb->base, name, bit, accepts, publish, bus_sink_close, true);
    sb->base.probe = bus_sink_probe;
    sb->base.peer = bus; /* the bus and rocket sinks: one connection */
    pthread_mutex_init(&sb->pool_mu, NULL);
    bus_ref(bus);
    sb->bus = bus;
    return &sb->base;
}

struct bus *
sink_bus_of(struct sink *s)
{
    return ((struct sink_bus *)s)->bus;
}

int
sink_bus_open(struct sink **out, struct bus *bus)
{
    struct sink *s = sink_bus_new(bus, "bus", SINK_BIT_BUS, NULL, bus_sink_publish);

    s->publish_batch = bus_sink_publish_batch;
    s->publish_start = bus_sink_publish_start;
    s->publish_finish = bus_sink_publish_finish;
    *out = s;
    return 0;
}
