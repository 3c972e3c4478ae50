/*
 * admin/dlq.c: the consumer groups' dead letters (docs/bus.md): the messages
 * of the JetStream stream <ns>hyapp_dlq, one subject per group, each the
 * original bytes with the Roomd-* headers the consumer kit set. Listed,
 * shown (the envelope decoded) and replayed into their group: the group's
 * inbox forgets the key it had marked dead (<consumer_store_dir>/<group>.db),
 * the bytes go back to their original subject under a new Msg-Id (the other
 * groups see the event_id done and ack it), the dead letter is deleted from
 * the DLQ stream and the replay is audited.
 */
#include "admin/internal.h"

#include "admin/store.h"
#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/xmalloc.h"
#include "outbox/outbox.h"
#include "publish/bus.h"
#include "room_events.pb-c.h"
#include "store/store.h"

#include <inttypes.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void
admin_set_bus(struct admin *a, struct bus *bus)
{
    a->bus = bus;
}

const char *
admin_dlq_header(natsMsg *m, const char *name)
{
    const char *v = NULL;
    return natsMsgHeader_Get(m, name, &v) == NATS_OK && v != NULL ? v : "";
}

static const char *
header(natsMsg *m, const char *name)
{
    const char *v = NULL;
    return natsMsgHeader_Get(m, name, &v) == NATS_OK && v != NULL ? v : "";
}

/* The message as the API shows it; full adds the decoded event. */
json_t *
admin_dlq_message_json(natsMsg *m, uint64_t seq, bool full)
{
    const char *data = natsMsg_GetData(m);
    int len = natsMsg_GetDataLength(m);
    json_t *o =
        json_pack("{s:I, s:s, s:s, s:I, s:s, s:s}", "seq", (json_int_t)seq, "group",
                  header(m, "Roomd-Group"), "subject", header(m, "Roomd-Subject"), "deliveries",
                  (json_int_t)strtoll(header(m, "Roomd-Deliveries"), NULL, 10), "reason",
                  header(m, "Roomd-Error"), "key", header(m, "Roomd-Key"));
    Roomd__V1__RoomOutboxEvent *ev =
        roomd__v1__room_outbox_event__unpack(NULL, (size_t)len, (const uint8_t *)data);

    if (ev == NULL) {
        json_object_set_new(o, "event_id", json_string(""));
        json_object_set_new(o, "event_type", json_string("?"));
        if (full)
            json_object_set_new(o, "event_error",
                                json_string("the message is not a RoomOutboxEvent"));
        return o;
    }
    json_object_set_new(o, "event_id", json_string(ev->event_id));
    json_object_set_new(o, "event_type", json_string(ev->event_type));
    json_object_set_new(o, "app_code", json_string(ev->app_code));
    json_object_set_new(o, "room_id", json_string(ev->room_id));
    if (full) { /* the same JSON the outbox shows, from the envelope's fields */
        struct outbox_row row = {.room_version = ev->room_version,
                                 .payload = ev->payload.data,
                                 .payload_len = ev->payload.len,
                                 .created_at_ms = ev->occurred_at_ms};
        uint8_t *env = NULL;
        size_t envlen = 0;
        char *json = NULL;
        snprintf(row.event_id, sizeof(row.event_id), "%s", ev->event_id);
        snprintf(row.app_code, sizeof(row.app_code), "%s", ev->app_code);
        snprintf(row.room_id, sizeof(row.room_id), "%s", ev->room_id);
        snprintf(row.command_id, sizeof(row.command_id), "%s", ev->command_id);
        snprintf(row.event_type, sizeof(row.event_type), "%s", ev->event_type);
        if (outbox_event_build(&row, &env, &envlen, &json) == 0 && json != NULL)
            json_object_set_new(o, "event", json_loads(json, 0, NULL));
        free(env);
        free(json);
    }
    roomd__v1__room_outbox_event__free_unpacked(ev, NULL);
    return o;
}

/* False and a 404 in r when the consumer groups' stream is not used here. */
static bool
have_bus(struct admin *a, struct admin_reply *r)
{
    if (a->bus != NULL)
        return true;
    admin_reply_error(r, 404, "not_found", NULL,
                      "no consumer dead letters here: rocketmq.enabled is false");
    return false;
}

static void
reply_nats(struct admin_reply *r, const char *what, natsStatus s, jsErrCode jerr)
{
    admin_reply_error(r, 503, "unavailable", NULL, "broker: %s: %s (%d)", what,
                      natsStatus_GetText(s), (int)jerr);
}

/* Dead letter seq, or NULL with 404 / 503 in r. */
static natsMsg *
get_msg(struct admin *a, uint64_t seq, struct admin_reply *r)
{
    natsMsg *m = NULL;
    jsErrCode jerr = 0;
    natsStatus s =
        js_GetMsg(&m, bus_js(a->bus), bus_stream_name(a->bus, BUS_STREAM_DLQ), seq, NULL, &jerr);

    if (s == NATS_OK)
        return m;
    if (s == NATS_NOT_FOUND || jerr == JSNoMessageFoundErr)
        admin_reply_error(r, 404, "not_found", "seq", "no dead letter %" PRIu64, seq);
    else
        reply_nats(r, "get", s, jerr);
    return NULL;
}

void
admin_dlq_list(struct admin *a, admin_lookup_fn q, void *ctx, struct admin_reply *r)
{
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    int64_t after, limit;
    const char *group = q ? q(ctx, "group") : NULL;

    if (!have_bus(a, r) || !admin_query_int(q, ctx, "after", 0, INT64_MAX, 0, &after, r) ||
        !admin_query_int(q, ctx, "limit", 1, 500, 50, &limit, r))
        return;
    natsStatus s =
        js_GetStreamInfo(&si, bus_js(a->bus), bus_stream_name(a->bus, BUS_STREAM_DLQ), NULL, &jerr);
    if (s != NATS_OK) {
        reply_nats(r, "stream info", s, jerr);
        return;
    }
    uint64_t first = si->State.FirstSeq, last = si->State.LastSeq;
    jsStreamInfo_Destroy(si);
    json_t *arr = json_array();
    uint64_t seq = (uint64_t)after + 1 > first ? (uint64_t)after + 1 : first, next = 0;
    for (; seq <= last && first > 0; seq++) {
        natsMsg *m = NULL;
        if (js_GetMsg(&m, bus_js(a->bus), bus_stream_name(a->bus, BUS_STREAM_DLQ), seq, NULL,
                      &jerr) != NATS_OK)
            continue; /* deleted (replayed) */
        if (group == NULL || *group == '\0' || strcmp(header(m, "Roomd-Group"), group) == 0)
            json_array_append_new(arr, admin_dlq_message_json(m, seq, false));
        natsMsg_Destroy(m);
        if (json_array_size(arr) == (size_t)limit) {
            next = seq;
            break;
        }
    }
    json_t *o =
        json_pack("{s:o, s:s}", "messages", arr, "stream", bus_stream_name(a->bus, BUS_STREAM_DLQ));
    json_object_set_new(o, "next_after", next ? json_integer((json_int_t)next) : json_null());
    admin_reply_ok(r, o);
}

void
admin_dlq_show(struct admin *a, uint64_t seq, struct admin_reply *r)
{
    natsMsg *m;

    if (!have_bus(a, r) || (m = get_msg(a, seq, r)) == NULL)
        return;
    admin_reply_ok(r, admin_dlq_message_json(m, seq, true));
    natsMsg_Destroy(m);
}

/* Makes group's inbox forget key (marked dead), so the group handles the
 * replayed message. Returns 0, or -1 with why. */
static int
inbox_forget(struct admin *a, const char *group, const char *key, char *why, size_t len)
{
    const char *dir = a->conf->rocketmq.consumer_store_dir;
    char *path = xasprintf("%s/%s.db", dir && *dir ? dir : "./var/consumers", group);
    sqlite3 *db = NULL;
    sqlite3_stmt *q = NULL;
    int rc = -1;

    if (access(path, F_OK) != 0) {
        snprintf(why, len, "the inbox of group %s (%s) is not on this machine", group, path);
    } else if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK ||
               sqlite3_prepare_v2(db, "DELETE FROM inbox WHERE key = ?1 AND state = 'dead'", -1, &q,
                                  NULL) != SQLITE_OK) {
        snprintf(why, len, "inbox %s: %s", path, db ? sqlite3_errmsg(db) : "cannot open");
    } else {
        sqlite3_busy_timeout(db, 5000);
        sqlite3_bind_text(q, 1, key, -1, SQLITE_STATIC);
        if (sqlite3_step(q) == SQLITE_DONE)
            rc = 0;
        else
            snprintf(why, len, "inbox %s: %s", path, sqlite3_errmsg(db));
    }
    sqlite3_finalize(q);
    sqlite3_close(db);
    free(path);
    return rc;
}

int
admin_dlq_replay_msg(struct admin *a, natsMsg *m, uint64_t seq, bool *deleted, char *why,
                     size_t whylen)
{
    char msg_id[128], e[256];
    natsMsg *out = NULL;
    jsErrCode jerr = 0;
    const char *group = header(m, "Roomd-Group"), *key = header(m, "Roomd-Key");
    const char *subject = header(m, "Roomd-Subject");
    const char *rocket = bus_subject_prefix(a->bus, BUS_STREAM_ROCKET);
    enum bus_stream home = rocket && strncmp(subject, rocket, strlen(rocket)) == 0
                               ? BUS_STREAM_ROCKET
                               : BUS_STREAM_OUTBOX;

    *deleted = false;
    if (*key == '\0' || *subject == '\0') {
        snprintf(why, whylen, "dead letter %" PRIu64 " was undecodable: no key to replay", seq);
        return ROOMD_EPERM;
    }
    if (inbox_forget(a, group, key, why, whylen) != 0)
        return ROOMD_EPERM;
    snprintf(msg_id, sizeof(msg_id), "replay-%s-%" PRIu64, group, seq);
    snprintf(e, sizeof(e), "cannot build the message");
    int rc =
        natsMsg_Create(&out, subject, NULL, natsMsg_GetData(m), natsMsg_GetDataLength(m)) == NATS_OK
            ? bus_publish_msg(a->bus, home, out, msg_id, clock_mono_ms() + bus_api_wait_ms(a->bus),
                              NULL, NULL, e, sizeof(e))
            : ROOMD_ERETRY;
    natsMsg_Destroy(out);
    if (rc != 0) {
        snprintf(why, whylen, "broker: republish: %s", e);
        return ROOMD_EUNAVAIL;
    }
    *deleted = js_DeleteMsg(bus_js(a->bus), bus_stream_name(a->bus, BUS_STREAM_DLQ), seq, NULL,
                            &jerr) == NATS_OK;
    return 0;
}

void
admin_dlq_replay(struct admin *a, const char *actor, uint64_t seq, struct admin_reply *r)
{
    char why[512];
    natsMsg *m;
    int64_t audit = 0;
    bool deleted = false;

    if (a->readonly) {
        admin_reply_error(r, 405, "read_only", NULL, "this handle is read-only");
        return;
    }
    if (!have_bus(a, r) || (m = get_msg(a, seq, r)) == NULL)
        return;
    char *group = xstrdup(header(m, "Roomd-Group")), *key = xstrdup(header(m, "Roomd-Key"));
    json_t *shown = admin_dlq_message_json(m, seq, false);
    int rc = admin_dlq_replay_msg(a, m, seq, &deleted, why, sizeof(why));

    if (rc == ROOMD_EPERM) {
        admin_reply_error(r, 409, "not_replayable", "seq", "%s", why);
        goto out;
    }
    if (rc != 0) {
        admin_reply_error(r, 503, "unavailable", NULL, "%s", why);
        goto out;
    }
    struct admin_audit_row row = {.outbox_id = (int64_t)seq};
    snprintf(row.event_id, sizeof(row.event_id), "%s",
             json_string_value(json_object_get(shown, "event_id")));
    json_t *fj = json_pack("{s:s, s:I}", "group", group, "seq", (json_int_t)seq);
    char *filter = json_dumps(fj, JSON_COMPACT);
    json_decref(fj);
    rc = admin_store_audit_record(a->store, actor, "dlq_replay", filter, &row, 1, clock_wall_ms(),
                                  &audit);
    free(filter);
    if (rc != 0) {
        admin_reply_store(a, r, rc);
        goto out;
    }
    json_object_set_new(shown, "replayed", json_true());
    json_object_set_new(shown, "audit_id", json_integer(audit));
    json_object_set_new(shown, "dead_letter_deleted", json_boolean(deleted));
    admin_reply_ok(r, shown);
    shown = NULL;
out:
    json_decref(shown);
    natsMsg_Destroy(m);
    free(group);
    free(key);
}
