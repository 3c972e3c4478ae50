/* SPDX-License-Identifier: Apache-2.0 */
/*
 * notice.c: hyapp-notice-room-outbox. For the facts that notify one user
 * privately (RoomUserKicked), writes notice_delivery_events (idempotent by
 * event_id) and then sends the C2C notice through the IM client. The send
 * is a remote, non-transactional effect, so the row is a state machine:
 *   received --send ok--> sent      (in one transaction with the inbox row)
 *   received --IM off---> skipped
 * A redelivery finds "sent" and does nothing; one that finds "received"
 * (a crash between the send and the commit) resends with the same
 * notice id, which IM discards as a duplicate (MsgRandom/MsgSeq derived
 * from it). With the MySQL inbox the table is shared by the nodes and the
 * kit's claim keeps a second node from sending while the first one does.
 *   notice_delivery_events(event_id PK, app_code, room_id, uid, kind, body,
 *                          status, attempts, created_ms, sent_ms, last_error)
 */
#include "consume/handlers.h"

#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/xmalloc.h"
#include "room_events.pb-c.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct consume_sql notice_table = {
    "CREATE TABLE IF NOT EXISTS notice_delivery_events("
    " event_id TEXT PRIMARY KEY, app_code TEXT NOT NULL, room_id TEXT NOT NULL,"
    " uid INTEGER NOT NULL, kind TEXT NOT NULL, body TEXT NOT NULL,"
    " status TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,"
    " created_ms INTEGER NOT NULL, sent_ms INTEGER, last_error TEXT)",
    "CREATE TABLE IF NOT EXISTS notice_delivery_events("
    " event_id VARBINARY(64) NOT NULL PRIMARY KEY, app_code VARBINARY(64) NOT NULL,"
    " room_id VARBINARY(64) NOT NULL, uid BIGINT NOT NULL, kind VARCHAR(32) NOT NULL,"
    " body TEXT NOT NULL, status VARCHAR(16) NOT NULL, attempts INT NOT NULL DEFAULT 0,"
    " created_ms BIGINT NOT NULL, sent_ms BIGINT NULL, last_error BLOB NULL)"
    " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
};
static const struct consume_sql *const schema[] = {&notice_table, NULL};

static const struct consume_sql insert_notice = {
    "INSERT OR IGNORE INTO notice_delivery_events(event_id, app_code, room_id, uid, kind, body,"
    " status, created_ms) VALUES(?1, ?2, ?3, ?4, ?5, ?6, 'received', ?7)",
    "INSERT IGNORE INTO notice_delivery_events(event_id, app_code, room_id, uid, kind, body,"
    " status, created_ms) VALUES(?1, ?2, ?3, ?4, ?5, ?6, 'received', ?7)",
};
static const struct consume_sql status_of = {
    "SELECT status FROM notice_delivery_events WHERE event_id = ?1", NULL};
static const struct consume_sql count_attempt = {
    "UPDATE notice_delivery_events SET attempts = attempts + 1, last_error = ?2"
    " WHERE event_id = ?1",
    NULL};
static const struct consume_sql mark_final = {
    "UPDATE notice_delivery_events SET status = ?2, sent_ms = ?3, attempts = attempts + 1"
    " WHERE event_id = ?1",
    NULL};

static char *
kicked_body(const Roomd__V1__RoomOutboxEvent *ev, const Roomd__V1__RoomUserKicked *k)
{
    json_t *o =
        json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:s, s:I}", "type", "RoomUserKicked", "event_id",
                  ev->event_id, "app_code", ev->app_code, "room_id", ev->room_id, "uid",
                  (json_int_t)k->uid, "operator_uid", (json_int_t)k->operator_uid, "reason",
                  k->reason ? k->reason : "", "ban_until_ms", (json_int_t)k->ban_until_ms);
    char *s = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(o);
    return s;
}

static int
notice_handle(void *arg, struct consume_msg *m)
{
    const struct consume_notice_sender *n = arg;
    Roomd__V1__RoomOutboxEvent *ev = roomd__v1__room_outbox_event__unpack(NULL, m->len, m->data);
    Roomd__V1__RoomUserKicked *k = NULL;
    char *body = NULL, status[16] = "";
    int rc = 0;

    if (ev == NULL) {
        snprintf(m->err, sizeof(m->err), "envelope does not decode");
        return ROOMD_EPERM;
    }
    if (strcmp(ev->event_type, "RoomUserKicked") != 0)
        goto out; /* not a private notice: consumed, nothing to do */
    k = roomd__v1__room_user_kicked__unpack(NULL, ev->payload.len, ev->payload.data);
    if (k == NULL) {
        snprintf(m->err, sizeof(m->err), "RoomUserKicked payload does not decode");
        rc = ROOMD_EPERM;
        goto out;
    }
    body = kicked_body(ev, k);
    /* 1. The notice row, once per event_id. */
    if ((rc = consume_exec(m, &insert_notice, NULL, 0, "sssissi", ev->event_id, ev->app_code,
                           ev->room_id, (int64_t)k->uid, "RoomUserKicked", body,
                           clock_wall_ms())) != 0 ||
        (rc = consume_exec(m, &status_of, status, sizeof(status), "s", ev->event_id)) != 0)
        goto out;
    if (strcmp(status, "received") != 0)
        goto out; /* sent or skipped earlier: the inbox row is what was missing */

    /* 2. The remote effect. */
    const char *final = "sent";
    if (n->send == NULL) {
        final = "skipped";
    } else {
        char e[256] = "";
        rc = n->send(n->arg, ev->app_code, k->uid, ev->event_id, body, e, sizeof(e));
        if (rc != 0) {
            consume_exec(m, &count_attempt, NULL, 0, "ss", ev->event_id, e);
            snprintf(m->err, sizeof(m->err), "c2c notice: %s", e);
            goto out;
        }
    }
    /* 3. received -> sent, with the inbox row, in one transaction. */
    if ((rc = consume_tx_begin(m)) != 0)
        goto out;
    if ((rc = consume_exec(m, &mark_final, NULL, 0, "ssi", ev->event_id, final, clock_wall_ms())) !=
        0) {
        consume_tx_rollback(m);
        goto out;
    }
    rc = consume_tx_commit_done(m);
    if (rc == 0)
        log_info("consume", "private notice delivered",
                 "event_id=%s app=%s room=%s uid=%" PRId64 " status=%s", ev->event_id, ev->app_code,
                 ev->room_id, k->uid, final);
out:
    free(body);
    if (k)
        roomd__v1__room_user_kicked__free_unpacked(k, NULL);
    roomd__v1__room_outbox_event__free_unpacked(ev, NULL);
    return rc;
}

/* The circuit's probe: the sender's IM account check. */
static int
notice_probe(void *arg, int64_t deadline, char *err, size_t errlen)
{
    const struct consume_notice_sender *n = arg;

    return n->probe ? n->probe(n->arg, deadline, err, errlen) : 0;
}

void
consume_notice_handler(struct consume_handler *h, const char *group,
                       const struct consume_notice_sender *sender)
{
    memset(h, 0, sizeof(*h));
    h->group = group && *group ? group : "hyapp-notice-room-outbox";
    h->stream = BUS_STREAM_OUTBOX;
    h->schema = schema;
    h->handle = notice_handle;
    h->max_handle_ms = sender->budget_ms;
    h->arg = (void *)sender;
    if (sender->send != NULL) {
        h->downstream = "im";
        h->probe = notice_probe;
    }
}
