/*
 * activity.c: hyapp-activity-room-outbox, a reference activity consumer.
 * Keeps per-room gift totals (RoomGiftSent) and the rocket launches
 * (RoomRocketLaunched) in the group's own database, in the same
 * transaction as the inbox row, so a redelivered event never counts twice.
 *   activity_room_totals(app_code, room_id, gifts, gift_value, last_event_id)
 *   activity_rocket_launches(app_code, room_id, rocket_id, level,
 *                            launched_at_ms, event_id)
 */
#include "consume/handlers.h"

#include "core/err.h"
#include "core/log.h"
#include "room_events.pb-c.h"

#include <stdio.h>
#include <string.h>

static int
activity_init(void *arg, sqlite3 *db, char *err, size_t errlen)
{
    static const char schema[] =
        "CREATE TABLE IF NOT EXISTS activity_room_totals("
        " app_code TEXT NOT NULL, room_id TEXT NOT NULL,"
        " gifts INTEGER NOT NULL, gift_value INTEGER NOT NULL, last_event_id TEXT,"
        " PRIMARY KEY(app_code, room_id));"
        "CREATE TABLE IF NOT EXISTS activity_rocket_launches("
        " app_code TEXT NOT NULL, room_id TEXT NOT NULL, rocket_id TEXT NOT NULL,"
        " level INTEGER NOT NULL, launched_at_ms INTEGER NOT NULL, event_id TEXT NOT NULL,"
        " PRIMARY KEY(app_code, room_id, rocket_id));";
    char *msg = NULL;

    (void)arg;
    if (sqlite3_exec(db, schema, NULL, NULL, &msg) != SQLITE_OK) {
        snprintf(err, errlen, "activity tables: %s", msg ? msg : "?");
        sqlite3_free(msg);
        return ROOMD_EIO;
    }
    return 0;
}

static int
run(sqlite3 *db, const char *sql, const Roomd__V1__RoomOutboxEvent *ev, int64_t a, int64_t b,
    const char *text)
{
    sqlite3_stmt *st = NULL;
    int rc;

    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        return ROOMD_EIO;
    sqlite3_bind_text(st, 1, ev->app_code, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, ev->room_id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, a);
    sqlite3_bind_int64(st, 4, b);
    sqlite3_bind_text(st, 5, text, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 6, ev->event_id, -1, SQLITE_STATIC);
    rc = sqlite3_step(st) == SQLITE_DONE ? 0 : ROOMD_EIO;
    sqlite3_finalize(st);
    return rc;
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
        int rc = run(m->db,
                     "INSERT INTO activity_room_totals(app_code, room_id, gifts, gift_value,"
                     " last_event_id) VALUES(?1, ?2, ?3, ?4, ?6)"
                     " ON CONFLICT(app_code, room_id) DO UPDATE SET gifts = gifts + ?3,"
                     " gift_value = gift_value + ?4, last_event_id = ?6",
                     ev, g->count, total, "");
        roomd__v1__room_gift_sent__free_unpacked(g, NULL);
        return rc;
    }
    if (strcmp(ev->event_type, "RoomRocketLaunched") == 0) {
        Roomd__V1__RoomRocketLaunched *r =
            roomd__v1__room_rocket_launched__unpack(NULL, p.len, p.data);
        if (r == NULL)
            return ROOMD_EPERM;
        int rc = run(m->db,
                     "INSERT OR IGNORE INTO activity_rocket_launches(app_code, room_id,"
                     " level, launched_at_ms, rocket_id, event_id)"
                     " VALUES(?1, ?2, ?3, ?4, ?5, ?6)",
                     ev, r->level, r->launched_at_ms, r->rocket_id ? r->rocket_id : "");
        roomd__v1__room_rocket_launched__free_unpacked(r, NULL);
        return rc;
    }
    return 0; /* other facts: nothing to keep, still recorded as consumed */
}

static int
activity_handle(void *arg, struct consume_msg *m)
{
    Roomd__V1__RoomOutboxEvent *ev = roomd__v1__room_outbox_event__unpack(NULL, m->len, m->data);
    int rc;

    (void)arg;
    if (ev == NULL) {
        snprintf(m->err, sizeof(m->err), "envelope does not decode");
        return ROOMD_EPERM;
    }
    if ((rc = consume_tx_begin(m)) != 0)
        goto out;
    rc = apply(m, ev);
    if (rc != 0) {
        snprintf(m->err, sizeof(m->err), "%s: %s", ev->event_type,
                 rc == ROOMD_EPERM ? "payload does not decode" : sqlite3_errmsg(m->db));
        consume_tx_rollback(m);
        goto out;
    }
    rc = consume_tx_commit_done(m);
out:
    roomd__v1__room_outbox_event__free_unpacked(ev, NULL);
    return rc;
}

void
consume_activity_handler(struct consume_handler *h, const char *group)
{
    memset(h, 0, sizeof(*h));
    h->group = group && *group ? group : "hyapp-activity-room-outbox";
    h->stream = BUS_STREAM_OUTBOX;
    h->init = activity_init;
    h->handle = activity_handle;
}
