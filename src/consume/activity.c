/* SPDX-License-Identifier: Apache-2.0 */
/*
 * activity.c: hyapp-activity-room-outbox (seed: activity-service 消费房间事实).
 * With activity.enabled, every room fact goes to the activity service's gRPC
 * room event entry, the same call as the direct sink (sink_activity.c:
 * /activity.v1.RoomEventService/Consume), idempotent by event_id at both
 * ends (the group's inbox settles an event_id once; the service answers
 * ALREADY_EXISTS for one it had). Its answer is the group's verdict: an
 * outage or "not now" is redelivered, a refusal is a dead letter.
 * As an example beside it (and alone without activity.enabled) it keeps
 * per-room gift totals (RoomGiftSent) and the rocket launches
 * (RoomRocketLaunched) in the group's inbox database (store/inbox.h: the
 * shared MySQL database when the store is MySQL, so the figures are per app
 * whichever node consumed), in the same transaction as the inbox row, so a
 * redelivered event never counts twice, on any node.
 *   activity_room_totals(app_code, room_id, gifts, gift_value, last_event_id)
 *   activity_rocket_launches(app_code, room_id, rocket_id, level,
 *                            launched_at_ms, event_id)
 */
#include "consume/handlers.h"

#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "publish/sink.h"
#include "room_events.pb-c.h"

#include <stdio.h>
#include <string.h>

#define MY_OPTS " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"

static const struct consume_sql room_totals = {
    "CREATE TABLE IF NOT EXISTS activity_room_totals("
    " app_code TEXT NOT NULL, room_id TEXT NOT NULL,"
    " gifts INTEGER NOT NULL, gift_value INTEGER NOT NULL, last_event_id TEXT,"
    " PRIMARY KEY(app_code, room_id))",
    "CREATE TABLE IF NOT EXISTS activity_room_totals("
    " app_code VARBINARY(64) NOT NULL, room_id VARBINARY(64) NOT NULL,"
    " gifts BIGINT NOT NULL, gift_value BIGINT NOT NULL, last_event_id VARBINARY(64) NULL,"
    " PRIMARY KEY(app_code, room_id))" MY_OPTS,
};
static const struct consume_sql rocket_launches = {
    "CREATE TABLE IF NOT EXISTS activity_rocket_launches("
    " app_code TEXT NOT NULL, room_id TEXT NOT NULL, rocket_id TEXT NOT NULL,"
    " level INTEGER NOT NULL, launched_at_ms INTEGER NOT NULL, event_id TEXT NOT NULL,"
    " PRIMARY KEY(app_code, room_id, rocket_id))",
    "CREATE TABLE IF NOT EXISTS activity_rocket_launches("
    " app_code VARBINARY(64) NOT NULL, room_id VARBINARY(64) NOT NULL,"
    " rocket_id VARBINARY(64) NOT NULL, level INT NOT NULL, launched_at_ms BIGINT NOT NULL,"
    " event_id VARBINARY(64) NOT NULL, PRIMARY KEY(app_code, room_id, rocket_id))" MY_OPTS,
};
static const struct consume_sql *const schema[] = {&room_totals, &rocket_launches, NULL};

/* ?1 app, ?2 room, ?3 count, ?4 total, ?5 (unused), ?6 event_id */
static const struct consume_sql add_gift = {
    "INSERT INTO activity_room_totals(app_code, room_id, gifts, gift_value, last_event_id)"
    " VALUES(?1, ?2, ?3, ?4, ?6) ON CONFLICT(app_code, room_id) DO UPDATE SET"
    " gifts = gifts + ?3, gift_value = gift_value + ?4, last_event_id = ?6",
    "INSERT INTO activity_room_totals(app_code, room_id, gifts, gift_value, last_event_id)"
    " VALUES(?1, ?2, ?3, ?4, ?6) ON DUPLICATE KEY UPDATE"
    " gifts = gifts + ?3, gift_value = gift_value + ?4, last_event_id = ?6",
};
/* ?1 app, ?2 room, ?3 level, ?4 launched_at_ms, ?5 rocket_id, ?6 event_id */
static const struct consume_sql add_launch = {
    "INSERT OR IGNORE INTO activity_rocket_launches(app_code, room_id, level, launched_at_ms,"
    " rocket_id, event_id) VALUES(?1, ?2, ?3, ?4, ?5, ?6)",
    "INSERT IGNORE INTO activity_rocket_launches(app_code, room_id, level, launched_at_ms,"
    " rocket_id, event_id) VALUES(?1, ?2, ?3, ?4, ?5, ?6)",
};

static int
run(struct consume_msg *m, const struct consume_sql *q, const Roomd__V1__RoomOutboxEvent *ev,
    int64_t a, int64_t b, const char *text)
{
    return consume_exec(m, q, NULL, 0, "ssiiss", ev->app_code, ev->room_id, a, b, text,
                        ev->event_id);
}

static int
apply(struct consume_msg *m, const Roomd__V1__RoomOutboxEvent *ev)
{
    ProtobufCBinaryData p = ev->payload;

    if (strcmp(ev->event_type, "RoomGiftSent") == 0) {
        Roomd__V1__RoomGiftSent *g = roomd__v1__room_gift_sent__unpack(NULL, p.len, p.data);
        if (g == NULL)
            return ROOMD_EPERM;
        int64_t total = g->total ? g->total : (int64_t)g->count * g->unit_price;
        int rc = run(m, &add_gift, ev, g->count, total, "");
        roomd__v1__room_gift_sent__free_unpacked(g, NULL);
        return rc;
    }
    if (strcmp(ev->event_type, "RoomRocketLaunched") == 0) {
        Roomd__V1__RoomRocketLaunched *r =
            roomd__v1__room_rocket_launched__unpack(NULL, p.len, p.data);
        if (r == NULL)
            return ROOMD_EPERM;
        int rc =
            run(m, &add_launch, ev, r->level, r->launched_at_ms, r->rocket_id ? r->rocket_id : "");
        roomd__v1__room_rocket_launched__free_unpacked(r, NULL);
        return rc;
    }
    return 0; /* other facts: nothing to keep, still recorded as consumed */
}

/* The longest the service's call may take (the direct sink's
 * publish_timeout's default). */
#define SERVICE_TIMEOUT_MS 3000

static int
activity_handle(void *arg, struct consume_msg *m)
{
    struct sink *service = arg;
    Roomd__V1__RoomOutboxEvent *ev = roomd__v1__room_outbox_event__unpack(NULL, m->len, m->data);
    int rc;

    if (ev == NULL) {
        snprintf(m->err, sizeof(m->err), "envelope does not decode");
        return ROOMD_EPERM;
    }
    if (service != NULL) {
        struct outbox_event oe = {.envelope = m->data, .envelope_len = m->len};
        char err[sizeof(m->err)] = "";

        rc = service->publish(service, &oe, clock_mono_ms() + SERVICE_TIMEOUT_MS, err, sizeof(err));
        if (rc != 0) {
            snprintf(m->err, sizeof(m->err), "%s", *err ? err : roomd_strerror(rc));
            goto out;
        }
    }
    if ((rc = consume_tx_begin(m)) != 0)
        goto out;
    rc = apply(m, ev);
    if (rc != 0) {
        if (rc == ROOMD_EPERM)
            snprintf(m->err, sizeof(m->err), "%s: payload does not decode", ev->event_type);
        consume_tx_rollback(m);
        goto out;
    }
    rc = consume_tx_commit_done(m);
out:
    roomd__v1__room_outbox_event__free_unpacked(ev, NULL);
    return rc;
}

void
consume_activity_handler(struct consume_handler *h, const char *group, struct sink *service)
{
    memset(h, 0, sizeof(*h));
    h->arg = service;
    h->max_handle_ms = service != NULL ? SERVICE_TIMEOUT_MS : 0;
    h->group = group && *group ? group : "hyapp-activity-room-outbox";
    h->stream = BUS_STREAM_OUTBOX;
    h->schema = schema;
    h->handle = activity_handle;
}
