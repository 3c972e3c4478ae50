/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bus.c: the JetStream connection shared by the mq sink, the rocket sink
 * and the consumer groups (see bus.h for the names it derives). Connects
 * with reconnect-forever and RetryOnFailedConnect, so roomd starts with the
 * broker down; (re)creates the streams lazily in bus_ensure().
 */
#include "publish/bus.h"

#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/xmalloc.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NS_PER_MS 1000000LL
#define DEFAULT_SEND_TIMEOUT_MS 3000
#define DEFAULT_MAX_AGE_MS (72LL * 3600 * 1000)
#define DEFAULT_DUP_WINDOW_MS (10LL * 60 * 1000)
#define DLQ_TOPIC "hyapp_dlq"

struct bus {
    atomic_int refs;
    const struct conf_rocketmq *cfg;
    natsOptions *opts;
    natsConnection *nc;
    jsCtx *js;
    char *stream[BUS_STREAM_COUNT_];
    char *prefix[BUS_STREAM_COUNT_];
    bool want[BUS_STREAM_COUNT_];

    pthread_mutex_t setup_mu; /* one stream setup at a time */
    atomic_bool ready;        /* streams set up since the last (re)connect */
    atomic_bool closing;      /* bus_unref closes: a disconnect is expected */
    atomic_int last_setup_rc; /* to log a failing setup once, not per call */
    /* A publish that got no PubAck marks the connection stalled (a broken
     * TCP connection nats.c has not noticed yet, or a stream without its
     * quorum): until then, publishes fail at once, one probe at a time. */
    atomic_int_fast64_t stalled_until_ms; /* clock_mono_ms; 0 = not stalled */

    pthread_mutex_t close_mu;
    pthread_cond_t close_cv;
    bool closed; /* the closed callback ran */
};

/* ==== names ==== */

static char *
stream_name_of(const char *prefix)
{
    char *s = xstrdup(prefix);

    for (char *p = s; *p; p++) {
        int ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                 *p == '_' || *p == '-';
        if (!ok)
            *p = '_';
    }
    return s;
}

static const char *
nz(const char *s, const char *dflt)
{
    return s && *s ? s : dflt;
}

const char *
bus_stream_name(struct bus *b, enum bus_stream which)
{
    return b->stream[which];
}

const char *
bus_subject_prefix(struct bus *b, enum bus_stream which)
{
    return b->prefix[which];
}

int
bus_subject(struct bus *b, enum bus_stream which, const char *token, char *buf, size_t len)
{
    if (token == NULL || *token == '\0' || strpbrk(token, ".*> \t\r\n") != NULL)
        return ROOMD_EINVAL;
    int n = snprintf(buf, len, "%s.%s", b->prefix[which], token);
    return n < 0 || (size_t)n >= len ? ROOMD_EINVAL : 0;
}

jsCtx *
bus_js(struct bus *b)
{
    return b->js;
}

natsConnection *
bus_nc(struct bus *b)
{
    return b->nc;
}

int64_t
bus_api_wait_ms(struct bus *b)
{
    int64_t w = b->cfg->send_timeout_ms > 0 ? b->cfg->send_timeout_ms : DEFAULT_SEND_TIMEOUT_MS;
    return w < 100 ? 100 : w;
}

int
bus_status_rc(natsStatus s, jsErrCode jerr)
{
    if (s == NATS_OK)
        return 0;
    if (s == NATS_MAX_PAYLOAD || jerr == JSStreamMessageExceedsMaximumErr)
        return ROOMD_EPERM;
    /* JetStream itself did not answer: nobody listens on the API subject
     * (the server's "503 No Responders", which nats.c gives as
     * NATS_NO_RESPONDERS with jerr JSNotEnabledErr: JetStream restarting or
     * off), or the cluster has no meta leader (JSClusterNotAvailErr, an
     * election). An outage, like a broken connection. */
    if (s == NATS_NO_RESPONDERS || jerr == JSNotEnabledErr || jerr == JSClusterNotAvailErr)
        return ROOMD_EUNAVAIL;
    return jerr != 0 ? ROOMD_ERETRY : ROOMD_EUNAVAIL;
}

bool
bus_connected(struct bus *b)
{
    return natsConnection_Status(b->nc) == NATS_CONN_STATUS_CONNECTED;
}

/* ==== connection callbacks (nats.c's callback thread) ==== */

/* A connection or reconnection: the server may be new or may have lost or
 * changed its streams (a new store dir, a different node): they are set up
 * again on next use (idempotent). */
static void
note_connected(natsConnection *nc, struct bus *b, const char *msg)
{
    char url[256] = "";

    natsConnection_GetConnectedUrl(nc, url, sizeof(url));
    atomic_store(&b->ready, false);
    log_info("bus", msg, "url=%s", url);
}

static void
on_connected(natsConnection *nc, void *arg)
{
    note_connected(nc, arg, "broker connected");
}

static void
on_disconnected(natsConnection *nc, void *arg)
{
    struct bus *b = arg;

    (void)nc;
    /* not ready: bus_ensure (every publish and probe) fails at once while
     * disconnected instead of parking in the reconnect buffer until its
     * deadline (the worker's other sinks wait for that answer: issue 26) */
    atomic_store(&b->ready, false);
    if (atomic_load(&b->closing))
        return;
    log_warn("bus", "broker disconnected", "reconnect=%s", "forever");
}

static void
on_reconnected(natsConnection *nc, void *arg)
{
    note_connected(nc, arg, "broker reconnected");
}

static void
on_closed(natsConnection *nc, void *arg)
{
    struct bus *b = arg;

    (void)nc;
    pthread_mutex_lock(&b->close_mu);
    b->closed = true;
    pthread_cond_broadcast(&b->close_cv);
    pthread_mutex_unlock(&b->close_mu);
}

static void
on_error(natsConnection *nc, natsSubscription *sub, natsStatus err, void *arg)
{
    (void)nc;
    (void)sub;
    (void)arg;
    log_warn("bus", "async error", "status=\"%s\"", natsStatus_GetText(err));
}

/* ==== open / close ==== */

static void
bus_free(struct bus *b)
{
    for (int i = 0; i < BUS_STREAM_COUNT_; i++) {
        free(b->stream[i]);
        free(b->prefix[i]);
    }
    natsOptions_Destroy(b->opts);
    pthread_mutex_destroy(&b->setup_mu);
    pthread_mutex_destroy(&b->close_mu);
    pthread_cond_destroy(&b->close_cv);
    free(b);
}

int
bus_open(struct bus **out, const struct conf_rocketmq *cfg, const char *client_name, char *err,
         size_t errlen)
{
    struct bus *b = xcalloc(1, sizeof(*b));
    const char *ns = cfg->namespace_ ? cfg->namespace_ : "";
    natsStatus s;
    int rc = 0;

    *out = NULL;
    atomic_init(&b->refs, 1);
    atomic_init(&b->ready, false);
    atomic_init(&b->closing, false);
    atomic_init(&b->last_setup_rc, 0);
    b->cfg = cfg;
    pthread_mutex_init(&b->setup_mu, NULL);
    pthread_mutex_init(&b->close_mu, NULL);
    pthread_cond_init(&b->close_cv, NULL);

    b->prefix[BUS_STREAM_OUTBOX] =
        xasprintf("%s%s", ns, nz(cfg->room_outbox.topic, "hyapp_room_outbox"));
    b->prefix[BUS_STREAM_ROCKET] =
        xasprintf("%s%s", ns, nz(cfg->rocket_launch.topic, "hyapp_room_rocket_launch"));
    b->prefix[BUS_STREAM_DLQ] = xasprintf("%s%s", ns, DLQ_TOPIC);
    for (int i = 0; i < BUS_STREAM_COUNT_; i++)
        b->stream[i] = stream_name_of(b->prefix[i]);
    b->want[BUS_STREAM_OUTBOX] = true;
    b->want[BUS_STREAM_DLQ] = true;
    b->want[BUS_STREAM_ROCKET] = cfg->rocket_launch.enabled;

    if (cfg->nname_servers <= 0) {
        snprintf(err, errlen, "rocketmq.name_servers: no NATS URL configured");
        rc = ROOMD_EINVAL;
        goto out;
    }
    s = natsOptions_Create(&b->opts);
    if (s == NATS_OK)
        s = natsOptions_SetServers(b->opts, (const char **)cfg->name_servers, cfg->nname_servers);
    if (s == NATS_OK && cfg->access_key && *cfg->access_key)
        s = natsOptions_SetUserInfo(b->opts, cfg->access_key,
                                    cfg->secret_key ? cfg->secret_key : "");
    if (s == NATS_OK)
        s = natsOptions_SetName(b->opts, client_name ? client_name : "roomd");
    if (s == NATS_OK)
        s = natsOptions_SetTimeout(b->opts, 2000);
    if (s == NATS_OK)
        s = natsOptions_SetMaxReconnect(b->opts, -1);
    if (s == NATS_OK)
        s = natsOptions_SetReconnectWait(b->opts, 250);
    if (s == NATS_OK)
        s = natsOptions_SetReconnectJitter(b->opts, 250, 1000);
    if (s == NATS_OK)
        s = natsOptions_SetPingInterval(b->opts, 5000);
    if (s == NATS_OK)
        s = natsOptions_SetMaxPingsOut(b->opts, 2);
    if (s == NATS_OK)
        s = natsOptions_SetRetryOnFailedConnect(b->opts, true, on_connected, b);
    if (s == NATS_OK)
        s = natsOptions_SetDisconnectedCB(b->opts, on_disconnected, b);
    if (s == NATS_OK)
        s = natsOptions_SetReconnectedCB(b->opts, on_reconnected, b);
    if (s == NATS_OK)
        s = natsOptions_SetClosedCB(b->opts, on_closed, b);
    if (s == NATS_OK)
        s = natsOptions_SetErrorHandler(b->opts, on_error, b);
    if (s != NATS_OK) {
        snprintf(err, errlen, "rocketmq.name_servers: %s", natsStatus_GetText(s));
        rc = ROOMD_EINVAL;
        goto out;
    }
    s = natsConnection_Connect(&b->nc, b->opts);
    if (s == NATS_NOT_YET_CONNECTED) {
        log_warn("bus", "broker not reachable yet, retrying in the background", "url=%s",
                 cfg->name_servers[0]);
    } else if (s != NATS_OK) {
        snprintf(err, errlen, "rocketmq.name_servers: connect: %s", natsStatus_GetText(s));
        rc = ROOMD_EINVAL;
        goto out;
    }
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Wait = bus_api_wait_ms(b);
    s = natsConnection_JetStream(&b->js, b->nc, &jo);
    if (s != NATS_OK) {
        snprintf(err, errlen, "rocketmq: jetstream context: %s", natsStatus_GetText(s));
        rc = ROOMD_EINVAL;
        goto out;
    }
    if (bus_connected(b)) {
        char e[256];
        if (bus_ensure(b, e, sizeof(e)) != 0)
            log_warn("bus", "stream setup deferred", "error=\"%s\"", e);
    }
    *out = b;
    return 0;
out:
    if (b->js)
        jsCtx_Destroy(b->js);
    if (b->nc) {
        natsConnection_Close(b->nc);
        natsConnection_Destroy(b->nc);
        b->nc = NULL;
    }
    bus_free(b);
    return rc;
}

void
bus_ref(struct bus *b)
{
    atomic_fetch_add(&b->refs, 1);
}

void
bus_unref(struct bus *b)
{
    if (b == NULL || atomic_fetch_sub(&b->refs, 1) != 1)
        return;
    atomic_store(&b->closing, true);
    jsCtx_Destroy(b->js);
    natsConnection_Close(b->nc);
    /* The closed callback is the last one nats.c calls with b as closure:
     * wait for it (bounded) before freeing b. */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 2;
    pthread_mutex_lock(&b->close_mu);
    while (!b->closed) {
        if (pthread_cond_timedwait(&b->close_cv, &b->close_mu, &ts) != 0)
            break;
    }
    pthread_mutex_unlock(&b->close_mu);
    natsConnection_Destroy(b->nc);
    bus_free(b);
}

void
bus_library_shutdown(void)
{
    nats_CloseAndWait(2000);
}

/* ==== streams and consumers ==== */

static int
setup_stream(struct bus *b, enum bus_stream w, char *err, size_t errlen)
{
    const struct conf_rocketmq *c = b->cfg;
    jsStreamConfig sc;
    jsStreamInfo *si = NULL;
    jsOptions jo;
    jsErrCode jerr = 0;
    char subject[256];
    const char *subjects[1] = {subject};
    int64_t max_age = c->stream_max_age_ms > 0 ? c->stream_max_age_ms : DEFAULT_MAX_AGE_MS;
    int64_t dup = c->duplicate_window_ms > 0 ? c->duplicate_window_ms : DEFAULT_DUP_WINDOW_MS;

    /* dead letters wait for an operator: their own, longer retention (0: unlimited) */
    if (w == BUS_STREAM_DLQ)
        max_age = c->dlq_max_age_ms;
    if (max_age > 0 && dup > max_age)
        dup = max_age;
    snprintf(subject, sizeof(subject), "%s.*", b->prefix[w]);
    jsStreamConfig_Init(&sc);
    sc.Name = b->stream[w];
    sc.Subjects = subjects;
    sc.SubjectsLen = 1;
    sc.Storage = js_FileStorage;
    sc.Retention = js_LimitsPolicy;
    sc.Replicas = c->stream_replicas > 0 ? c->stream_replicas : 1;
    sc.MaxAge = max_age * NS_PER_MS;
    sc.Duplicates = dup * NS_PER_MS;
    jsOptions_Init(&jo);
    jo.Wait = bus_api_wait_ms(b);

    natsStatus s = js_AddStream(&si, b->js, &sc, &jo, &jerr);
    if (s != NATS_OK && jerr == JSStreamNameExistErr) {
        /* Exists with another config (replicas, age, window): update it. */
        jerr = 0;
        s = js_UpdateStream(&si, b->js, &sc, &jo, &jerr);
    }
    jsStreamInfo_Destroy(si);
    if (s != NATS_OK) {
        snprintf(err, errlen, "stream %s: %s (jerr %d): %s", b->stream[w], natsStatus_GetText(s),
                 (int)jerr, nats_GetLastError(NULL));
        return bus_status_rc(s, jerr);
    }
    return 0;
}

int
bus_ensure(struct bus *b, char *err, size_t errlen)
{
    int rc = 0;

    if (atomic_load(&b->ready))
        return 0;
    if (!bus_connected(b)) {
        snprintf(err, errlen, "broker not connected");
        return ROOMD_EUNAVAIL;
    }
    pthread_mutex_lock(&b->setup_mu);
    if (!atomic_load(&b->ready)) {
        for (int i = 0; i < BUS_STREAM_COUNT_ && rc == 0; i++)
            if (b->want[i])
                rc = setup_stream(b, (enum bus_stream)i, err, errlen);
        if (rc == 0)
            atomic_store(&b->ready, true);
        int prev = atomic_exchange(&b->last_setup_rc, rc);
        if (rc != 0 && prev == 0)
            log_warn("bus", "stream setup failed", "error=\"%s\"", err);
        else if (rc == 0)
            log_info("bus", "streams ready", "outbox=%s rocket=%s dlq=%s",
                     b->stream[BUS_STREAM_OUTBOX],
                     b->want[BUS_STREAM_ROCKET] ? b->stream[BUS_STREAM_ROCKET] : "-",
                     b->stream[BUS_STREAM_DLQ]);
    }
    pthread_mutex_unlock(&b->setup_mu);
    return rc;
}

void
bus_invalidate(struct bus *b)
{
    atomic_store(&b->ready, false);
}

int
bus_ensure_consumer(struct bus *b, enum bus_stream which, const char *durable, int64_t ack_wait_ms,
                    int64_t max_deliver, int64_t max_ack_pending, char *err, size_t errlen)
{
    jsConsumerConfig cc;
    jsConsumerInfo *ci = NULL;
    jsOptions jo;
    jsErrCode jerr = 0;
    int rc = bus_ensure(b, err, errlen);

    if (rc != 0)
        return rc;
    jsConsumerConfig_Init(&cc);
    cc.Durable = durable;
    cc.AckPolicy = js_AckExplicit;
    cc.AckWait = ack_wait_ms * NS_PER_MS;
    cc.MaxDeliver = max_deliver;
    cc.DeliverPolicy = js_DeliverAll;
    if (max_ack_pending > 0)
        cc.MaxAckPending = max_ack_pending;
    jsOptions_Init(&jo);
    jo.Wait = bus_api_wait_ms(b);

    natsStatus s = js_AddConsumer(&ci, b->js, b->stream[which], &cc, &jo, &jerr);
    if (s != NATS_OK && jerr != JSStreamNotFoundErr) {
        /* Exists with another config (AckWait, MaxDeliver ...): update. */
        jsConsumerInfo_Destroy(ci);
        ci = NULL;
        jerr = 0;
        s = js_UpdateConsumer(&ci, b->js, b->stream[which], &cc, &jo, &jerr);
    }
    jsConsumerInfo_Destroy(ci);
    if (s != NATS_OK) {
        if (jerr == JSStreamNotFoundErr)
            bus_invalidate(b);
        snprintf(err, errlen, "consumer %s on %s: %s (jerr %d): %s", durable, b->stream[which],
                 natsStatus_GetText(s), (int)jerr, nats_GetLastError(NULL));
        return ROOMD_ERETRY;
    }
    return 0;
}

int
bus_consumer_pos(struct bus *b, enum bus_stream which, const char *durable,
                 struct bus_consumer_pos *out, char *err, size_t errlen)
{
    jsConsumerInfo *ci = NULL;
    jsStreamInfo *si = NULL;
    natsMsg *m = NULL;
    jsOptions jo;
    jsErrCode jerr = 0;
    natsStatus s;

    memset(out, 0, sizeof(*out));
    if (!bus_connected(b)) {
        snprintf(err, errlen, "broker not connected");
        return ROOMD_EUNAVAIL;
    }
    jsOptions_Init(&jo);
    jo.Wait = bus_api_wait_ms(b);
    s = js_GetConsumerInfo(&ci, b->js, b->stream[which], durable, &jo, &jerr);
    if (s == NATS_OK)
        s = js_GetStreamInfo(&si, b->js, b->stream[which], &jo, &jerr);
    if (s != NATS_OK) {
        snprintf(err, errlen, "consumer %s on %s: %s (jerr %d)", durable, b->stream[which],
                 natsStatus_GetText(s), (int)jerr);
        jsConsumerInfo_Destroy(ci);
        return bus_status_rc(s, jerr);
    }
    out->last_seq = si->State.LastSeq;
    out->ack_floor = ci->AckFloor.Stream;
    out->ack_pending = ci->NumAckPending > 0 ? (uint64_t)ci->NumAckPending : 0;
    out->redelivered = ci->NumRedelivered > 0 ? (uint64_t)ci->NumRedelivered : 0;
    out->num_pending = ci->NumPending;
    /* the first message past the floor is the oldest one not acknowledged;
     * one removed by retention (or of another subject) gives no age */
    if (out->last_seq > out->ack_floor &&
        js_GetMsg(&m, b->js, b->stream[which], out->ack_floor + 1, &jo, &jerr) == NATS_OK) {
        out->oldest_unacked_ms = natsMsg_GetTime(m) / NS_PER_MS;
        natsMsg_Destroy(m);
    }
    jsConsumerInfo_Destroy(ci);
    jsStreamInfo_Destroy(si);
    return 0;
}

int
bus_stream_oldest(struct bus *b, enum bus_stream which, const char *token, uint64_t *msgs,
                  uint64_t *token_msgs, int64_t *first_ms, char *err, size_t errlen)
{
    jsStreamInfo *si = NULL;
    jsOptions jo;
    jsErrCode jerr = 0;
    char subject[256] = "";

    *msgs = 0;
    *token_msgs = 0;
    *first_ms = 0;
    if (token != NULL && bus_subject(b, which, token, subject, sizeof(subject)) != 0) {
        snprintf(err, errlen, "no subject for %s", token);
        return ROOMD_EINVAL;
    }
    if (!bus_connected(b)) {
        snprintf(err, errlen, "broker not connected");
        return ROOMD_EUNAVAIL;
    }
    jsOptions_Init(&jo);
    jo.Wait = bus_api_wait_ms(b);
    if (*subject)
        jo.Stream.Info.SubjectsFilter = subject;
    natsStatus s = js_GetStreamInfo(&si, b->js, b->stream[which], &jo, &jerr);
    if (s != NATS_OK) {
        snprintf(err, errlen, "stream %s: %s (jerr %d)", b->stream[which], natsStatus_GetText(s),
                 (int)jerr);
        return bus_status_rc(s, jerr);
    }
    *msgs = si->State.Msgs;
    for (int i = 0; si->State.Subjects != NULL && i < si->State.Subjects->Count; i++)
        if (strcmp(si->State.Subjects->List[i].Subject, subject) == 0)
            *token_msgs = si->State.Subjects->List[i].Msgs;
    if (si->State.Msgs > 0)
        *first_ms = si->State.FirstTime / NS_PER_MS;
    jsStreamInfo_Destroy(si);
    return 0;
}

/* ==== publishing ==== */

/* How long a stalled connection fails publishes at once before one probes. */
#define STALL_PROBE_MS 500

bool
bus_stalled(struct bus *b, char *err, size_t errlen)
{
    int64_t now = clock_mono_ms();
    int_fast64_t until = atomic_load(&b->stalled_until_ms);

    if (until == 0)
        return false;
    if (now >= until &&
        atomic_compare_exchange_strong(&b->stalled_until_ms, &until, now + STALL_PROBE_MS))
        return false; /* the probe */
    snprintf(err, errlen, "broker stalled: no PubAck recently; probing every %d ms",
             STALL_PROBE_MS);
    return true;
}

int
bus_ready(void *arg, char *why, size_t whylen)
{
    struct bus *b = arg;

    if (!bus_connected(b)) {
        snprintf(why, whylen, "broker not connected (reconnecting)");
        return ROOMD_EUNAVAIL;
    }
    if (atomic_load(&b->stalled_until_ms) != 0) {
        snprintf(why, whylen, "broker stalled: publishes get no PubAck");
        return ROOMD_EUNAVAIL;
    }
    return 0;
}

void
bus_note_publish(struct bus *b, natsStatus s, jsErrCode jerr)
{
    if (s == NATS_OK || jerr != 0)
        atomic_store(&b->stalled_until_ms, 0); /* the broker answered */
    else if (s == NATS_TIMEOUT)
        atomic_store(&b->stalled_until_ms, clock_mono_ms() + STALL_PROBE_MS);
}

int
bus_publish_msg(struct bus *b, enum bus_stream w, natsMsg *msg, const char *msg_id,
                int64_t deadline_mono_ms, bool *dup, uint64_t *seq, char *err, size_t errlen)
{
    int attempts = 1 + (b->cfg->retry > 0 ? b->cfg->retry : 0);
    int rc = ROOMD_ERETRY;

    for (int i = 0; i < attempts; i++) {
        int64_t left = deadline_mono_ms - clock_mono_ms();
        if (left <= 0) {
            if (i == 0)
                snprintf(err, errlen, "publish deadline passed");
            return ROOMD_EUNAVAIL;
        }
        /* Not connected, or connected but stalled: fail at once rather than
         * park until the deadline (the worker retries; no attempt counted). */
        if ((rc = bus_ensure(b, err, errlen)) != 0)
            return rc;
        if (bus_stalled(b, err, errlen))
            return ROOMD_EUNAVAIL;
        jsPubOptions po;
        jsPubAck *pa = NULL;
        jsErrCode jerr = 0;
        jsPubOptions_Init(&po);
        po.MsgId = msg_id;
        po.ExpectStream = b->stream[w];
        po.MaxWait = left < bus_api_wait_ms(b) ? left : bus_api_wait_ms(b);
        natsStatus s = js_PublishMsg(&pa, b->js, msg, &po, &jerr);
        bus_note_publish(b, s, jerr);
        if (s == NATS_OK) {
            if (dup)
                *dup = pa->Duplicate;
            if (seq)
                *seq = pa->Sequence;
            jsPubAck_Destroy(pa);
            return 0;
        }
        rc = bus_status_rc(s, jerr);
        snprintf(err, errlen, "publish %s: %s (jerr %d)", natsMsg_GetSubject(msg),
                 natsStatus_GetText(s), (int)jerr);
        if (s == NATS_NO_RESPONDERS || jerr == JSStreamNotFoundErr)
            bus_invalidate(b); /* the stream is gone: set it up again */
        if (rc == ROOMD_EPERM)
            return rc;
    }
    return rc;
}

int
bus_probe(struct bus *b, enum bus_stream w, int64_t deadline_mono_ms, char *err, size_t errlen)
{
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    jsOptions jo;
    int64_t left = deadline_mono_ms - clock_mono_ms();
    int rc;

    if ((rc = bus_ensure(b, err, errlen)) != 0)
        return rc;
    if (left <= 0) {
        snprintf(err, errlen, "probe deadline passed");
        return ROOMD_EUNAVAIL;
    }
    jsOptions_Init(&jo);
    jo.Wait = left < bus_api_wait_ms(b) ? left : bus_api_wait_ms(b);
    natsStatus s = js_GetStreamInfo(&si, b->js, b->stream[w], &jo, &jerr);
    jsStreamInfo_Destroy(si);
    if (s == NATS_OK) {
        bus_note_publish(b, NATS_OK, 0); /* the stream's leader answered: not stalled */
        return 0;
    }
    snprintf(err, errlen, "stream %s info: %s (jerr %d)", b->stream[w], natsStatus_GetText(s),
             (int)jerr);
    if (s == NATS_NO_RESPONDERS || jerr == JSStreamNotFoundErr)
        bus_invalidate(b); /* set the streams up again on the next use */
    return bus_status_rc(s, jerr);
}

int
bus_message_build(struct bus *b, const struct bus_message *m, natsMsg **out, char *err,
                  size_t errlen)
{
    char subject[256];

    *out = NULL;
    if (bus_subject(b, m->stream, m->token, subject, sizeof(subject)) != 0) {
        snprintf(err, errlen, "\"%s\" cannot be a subject token", m->token ? m->token : "");
        return ROOMD_EPERM;
    }
    if (natsMsg_Create(out, subject, NULL, (const char *)m->data, (int)m->len) != NATS_OK ||
        (m->header != NULL && natsMsgHeader_Set(*out, m->header, m->header_value) != NATS_OK)) {
        natsMsg_Destroy(*out);
        *out = NULL;
        snprintf(err, errlen, "cannot build the message for %s", subject);
        return ROOMD_ERETRY;
    }
    return 0;
}

int
bus_publish(struct bus *b, const struct bus_message *m, int64_t deadline_mono_ms, bool *dup,
            uint64_t *seq, char *err, size_t errlen)
{
    natsMsg *msg;
    int rc;

    if ((rc = bus_message_build(b, m, &msg, err, errlen)) != 0)
        return rc;
    rc = bus_publish_msg(b, m->stream, msg, m->msg_id, deadline_mono_ms, dup, seq, err, errlen);
    natsMsg_Destroy(msg);
    return rc;
}
