/* SPDX-License-Identifier: Apache-2.0 */
/*
 * admin/dlq_js.c: the JetStream dead-letter backend (dlq_backend.h): the
 * stream <ns>hyapp_dlq, one subject per group, each message the original
 * bytes with the Roomd-* headers the consumer kit set (consume/group.c).
 */
#include "admin/dlq_backend.h"
#include "admin/internal.h"

#include "core/clock.h"
#include "core/err.h"
#include "core/xmalloc.h"
#include "publish/bus.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct dlq_scan {
    struct admin *a;
    uint64_t first, last; /* the stream's range at open (0, 0: empty) */
};

static const char *
header(natsMsg *m, const char *name)
{
    const char *v = NULL;
    return natsMsgHeader_Get(m, name, &v) == NATS_OK && v != NULL ? v : "";
}

static int
js_open(struct admin *a, struct dlq_scan **out, struct admin_reply *r)
{
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    natsStatus s =
        js_GetStreamInfo(&si, bus_js(a->bus), bus_stream_name(a->bus, BUS_STREAM_DLQ), NULL, &jerr);

    if (s != NATS_OK) {
        admin_reply_error(r, 503, "unavailable", NULL, "broker: stream info: %s (%d)",
                          natsStatus_GetText(s), (int)jerr);
        return ROOMD_EUNAVAIL;
    }
    struct dlq_scan *sc = xcalloc(1, sizeof(*sc));
    sc->a = a;
    sc->first = si->State.FirstSeq;
    sc->last = si->State.LastSeq;
    jsStreamInfo_Destroy(si);
    *out = sc;
    return 0;
}

static void
js_close(struct dlq_scan *s)
{
    free(s);
}

static const char *
js_where(struct dlq_scan *s)
{
    return bus_stream_name(s->a->bus, BUS_STREAM_DLQ);
}

static void
js_letter_free(struct dlq_letter *d)
{
    natsMsg_Destroy(d->own);
    memset(d, 0, sizeof(*d));
}

/* d from message m of sequence seq (m owned by d from now on). */
static void
letter_of(natsMsg *m, uint64_t seq, struct dlq_letter *d)
{
    memset(d, 0, sizeof(*d));
    d->seq = seq;
    d->own = m;
    snprintf(d->group, sizeof(d->group), "%s", header(m, "Roomd-Group"));
    snprintf(d->key, sizeof(d->key), "%s", header(m, "Roomd-Key"));
    snprintf(d->subject, sizeof(d->subject), "%s", header(m, "Roomd-Subject"));
    snprintf(d->reason, sizeof(d->reason), "%s", header(m, "Roomd-Reason"));
    snprintf(d->error, sizeof(d->error), "%s", header(m, "Roomd-Error"));
    d->deliveries = strtoull(header(m, "Roomd-Deliveries"), NULL, 10);
    d->stored_ms = natsMsg_GetTime(m) / 1000000;
    d->data = (const uint8_t *)natsMsg_GetData(m);
    d->len = (size_t)natsMsg_GetDataLength(m);
}

static int
js_get(struct dlq_scan *s, uint64_t seq, struct dlq_letter *out, char *err, size_t errlen)
{
    natsMsg *m = NULL;
    jsErrCode jerr = 0;
    natsStatus st = js_GetMsg(&m, bus_js(s->a->bus), bus_stream_name(s->a->bus, BUS_STREAM_DLQ),
                              seq, NULL, &jerr);

    if (st == NATS_OK) {
        letter_of(m, seq, out);
        return 0;
    }
    if (st == NATS_NOT_FOUND || jerr == JSNoMessageFoundErr)
        return ROOMD_ENOTFOUND;
    snprintf(err, errlen, "get: %s (%d)", natsStatus_GetText(st), (int)jerr);
    return ROOMD_EUNAVAIL;
}

static int
js_next(struct dlq_scan *s, uint64_t after, const char *group, struct dlq_letter *out)
{
    char err[128];

    for (uint64_t seq = after + 1 > s->first ? after + 1 : s->first; s->first > 0 && seq <= s->last;
         seq++) {
        if (js_get(s, seq, out, err, sizeof(err)) != 0)
            continue; /* deleted: replayed or discarded */
        if (group == NULL || *group == '\0' || strcmp(out->group, group) == 0)
            return 0;
        js_letter_free(out);
    }
    return ROOMD_ENOTFOUND;
}

static int
js_republish(struct dlq_scan *s, const struct dlq_letter *d, char *err, size_t errlen)
{
    char msg_id[192];
    natsMsg *out = NULL;
    struct bus *bus = s->a->bus;
    const char *rocket = bus_subject_prefix(bus, BUS_STREAM_ROCKET);
    enum bus_stream home = rocket && strncmp(d->subject, rocket, strlen(rocket)) == 0
                               ? BUS_STREAM_ROCKET
                               : BUS_STREAM_OUTBOX;

    snprintf(msg_id, sizeof(msg_id), "replay-%s-%" PRIu64, d->group, d->seq);
    snprintf(err, errlen, "cannot build the message");
    int rc = natsMsg_Create(&out, d->subject, NULL, (const char *)d->data, (int)d->len) == NATS_OK
                 ? bus_publish_msg(bus, home, out, msg_id, clock_mono_ms() + bus_api_wait_ms(bus),
                                   NULL, NULL, err, errlen)
                 : ROOMD_ERETRY;
    natsMsg_Destroy(out);
    return rc;
}

static bool
js_remove(struct dlq_scan *s, const struct dlq_letter *d)
{
    jsErrCode jerr = 0;
    return js_DeleteMsg(bus_js(s->a->bus), bus_stream_name(s->a->bus, BUS_STREAM_DLQ), d->seq, NULL,
                        &jerr) == NATS_OK;
}

const struct dlq_backend dlq_backend_jetstream = {
    .name = "jetstream",
    .open = js_open,
    .close = js_close,
    .where = js_where,
    .next = js_next,
    .get = js_get,
    .republish = js_republish,
    .remove = js_remove,
    .letter_free = js_letter_free,
};
