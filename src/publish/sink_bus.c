/*
 * sink_bus.c: the mq-mode sink. Publishes each event's packed envelope
 * (roomd.v1.RoomOutboxEvent) to "<ns><topic>.<event_type>" on the outbox
 * stream with Nats-Msg-Id = event_id; delivered only after the stream's
 * PubAck (a Duplicate ack counts). Broker down -> ROOMD_ERETRY.
 * The JetStream plumbing is in bus.c; the consumers in consume/group.c.
 */
#include "publish/sink_bus.h"

#include "core/err.h"
#include "core/log.h"
#include "core/xmalloc.h"
#include "publish/bus.h"
#include "store/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sink_bus {
    struct sink base; /* first member */
    struct bus *bus;
};

static int
bus_sink_publish(struct sink *s, const struct outbox_event *ev, int64_t deadline_mono_ms, char *err,
                 size_t errlen)
{
    struct sink_bus *sb = (struct sink_bus *)s;
    const struct outbox_row *row = ev->row;
    char subject[256];
    natsMsg *msg = NULL;
    bool dup = false;
    uint64_t seq = 0;
    int rc;

    if (bus_subject(sb->bus, BUS_STREAM_OUTBOX, row->event_type, subject, sizeof(subject)) != 0) {
        snprintf(err, errlen, "event_type \"%s\" cannot be a subject token", row->event_type);
        return ROOMD_EPERM;
    }
    if (natsMsg_Create(&msg, subject, NULL, (const char *)ev->envelope, (int)ev->envelope_len) !=
        NATS_OK) {
        snprintf(err, errlen, "cannot build the message");
        return ROOMD_ERETRY;
    }
    rc = bus_publish_msg(sb->bus, BUS_STREAM_OUTBOX, msg, row->event_id, deadline_mono_ms, &dup,
                         &seq, err, errlen);
    natsMsg_Destroy(msg);
    if (rc == 0)
        log_debug("bus", "event published", "event_id=%s subject=%s seq=%llu duplicate=%d",
                  row->event_id, subject, (unsigned long long)seq, (int)dup);
    return rc;
}

static void
bus_sink_close(struct sink *s)
{
    struct sink_bus *sb = (struct sink_bus *)s;

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
    bus_ref(bus);
    sb->bus = bus;
    *out = &sb->base;
    return 0;
}
