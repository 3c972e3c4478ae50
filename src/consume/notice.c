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
 * from it).
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
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int
notice_init(void *arg, sqlite3 *db, char *err, size_t errlen)
{
    static const char schema[] =
        "CREATE TABLE IF NOT EXISTS notice_delivery_events("
        " event_id TEXT PRIMARY KEY, app_code TEXT NOT NULL, room_id TEXT NOT NULL,"
        " uid INTEGER NOT NULL, kind TEXT NOT NULL, body TEXT NOT NULL,"
        " status TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,"
        " created_ms INTEGER NOT NULL, sent_ms INTEGER, last_error TEXT);";
    char *msg = NULL;

    (void)arg;
    if (sqlite3_exec(db, schema, NULL, NULL, &msg) != SQLITE_OK) {
        snprintf(err, errlen, "notice tables: %s", msg ? msg : "?");
        sqlite3_free(msg);
        return ROOMD_EIO;
    }
    return 0;
}

/* Runs one statement binding text/int parameters given as a format:
 * 's' text, 'i' int64. Returns 0 or ROOMD_EIO. With status != NULL reads
 * the first text column of the first row into it. */
static int
stmt(sqlite3 *db, const char *sql, const char *types, char *status, size_t slen, ...)
{
    sqlite3_stmt *st = NULL;
    va_list ap;
    int rc = 0;

    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        return ROOMD_EIO;
    va_start(ap, slen);
    for (int i = 0; types[i]; i++) {
        if (types[i] == 's')
            sqlite3_bind_text(st, i + 1, va_arg(ap, const char *), -1, SQLITE_TRANSIENT);
        else
            sqlite3_bind_int64(st, i + 1, va_arg(ap, int64_t));
    }
    va_end(ap);
    int r = sqlite3_step(st);
    if (r == SQLITE_ROW && status)
        snprintf(status, slen, "%s", (const char *)sqlite3_column_text(st, 0));
    else if (r == SQLITE_DONE && status)
        *status = '\0';
    else if (r != SQLITE_ROW && r != SQLITE_DONE)
        rc = ROOMD_EIO;
    sqlite3_finalize(st);
    return rc;
}

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
    if (stmt(m->db,
             "INSERT OR IGNORE INTO notice_delivery_events(event_id, app_code, room_id, uid,"
             " kind, body, status, created_ms) VALUES(?1, ?2, ?3, ?4, ?5, ?6, 'received', ?7)",
             "sssissi", NULL, 0, ev->event_id, ev->app_code, ev->room_id, (int64_t)k->uid,
             "RoomUserKicked", body, clock_wall_ms()) != 0 ||
        stmt(m->db, "SELECT status FROM notice_delivery_events WHERE event_id = ?1", "s", status,
             sizeof(status), ev->event_id) != 0) {
        snprintf(m->err, sizeof(m->err), "notice_delivery_events: %s", sqlite3_errmsg(m->db));
        rc = ROOMD_EIO;
        goto out;
    }
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
            snprintf(m->err, sizeof(m->err), "c2c notice: %s", e);
            stmt(m->db,
                 "UPDATE notice_delivery_events SET attempts = attempts + 1, last_error = ?2"
                 " WHERE event_id = ?1",
                 "ss", NULL, 0, ev->event_id, e);
            goto out;
        }
    }
    /* 3. received -> sent, with the inbox row, in one transaction. */
    if ((rc = consume_tx_begin(m)) != 0)
        goto out;
    if (stmt(m->db,
             "UPDATE notice_delivery_events SET status = ?2, sent_ms = ?3,"
             " attempts = attempts + 1 WHERE event_id = ?1",
             "ssi", NULL, 0, ev->event_id, final, clock_wall_ms()) != 0) {
        snprintf(m->err, sizeof(m->err), "notice_delivery_events: %s", sqlite3_errmsg(m->db));
        consume_tx_rollback(m);
        rc = ROOMD_EIO;
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

void
consume_notice_handler(struct consume_handler *h, const char *group,
                       const struct consume_notice_sender *sender)
{
    memset(h, 0, sizeof(*h));
    h->group = group && *group ? group : "hyapp-notice-room-outbox";
    h->stream = BUS_STREAM_OUTBOX;
    h->init = notice_init;
    h->handle = notice_handle;
    h->arg = (void *)sender;
}
