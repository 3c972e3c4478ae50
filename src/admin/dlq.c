/* SPDX-License-Identifier: Apache-2.0 */
/*
 * admin/dlq.c: the consumer groups' dead letters (docs/bus.md): the messages
 * of the JetStream stream <ns>hyapp_dlq, one subject per group, each the
 * original bytes with the Roomd-* headers the consumer kit set. Listed,
 * shown (the envelope decoded), replayed into their group, discarded, or
 * purged (every dead letter of one group discarded). The group's inbox is
 * reached through the inbox interface (store/inbox.h), opened as the
 * group opens it (consume_group_inbox_open): the MySQL inbox from any node,
 * the SQLite one on the node that holds its file.
 *   replay   the inbox forgets the dead key (inbox_forget_dead), the bytes
 *            go back to their original subject under a new Msg-Id (the
 *            other groups see the event_id done and ack it), the dead
 *            letter is deleted from the DLQ stream; audited dlq_replay
 *   discard  the key stays settled (inbox_dead with the reason: a
 *            redelivery of the original is acked unhandled), the dead
 *            letter is deleted; audited dlq_discard
 *   purge    discard for every dead letter of one group; audited dlq_purge
 */
#include "admin/internal.h"

#include "conf/conf.h"
#include "consume/roles.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/xmalloc.h"
#include "outbox/outbox.h"
#include "publish/bus.h"
#include "room_events.pb-c.h"
#include "store/admin.h"
#include "store/inbox.h"
#include "store/store.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void
admin_set_bus(struct admin *a, struct bus *bus)
{
    a->bus = bus;
}

static const char *
header(natsMsg *m, const char *name)
{
    const char *v = NULL;
    return natsMsgHeader_Get(m, name, &v) == NATS_OK && v != NULL ? v : "";
}

/* The message as the API shows it; full adds the decoded event. */
static json_t *
message_json(natsMsg *m, uint64_t seq, bool full)
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

/* The DLQ stream's first and last sequence (0, 0: empty). False with a 503
 * in r. */
static bool
dlq_range(struct admin *a, uint64_t *first, uint64_t *last, struct admin_reply *r)
{
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    natsStatus s =
        js_GetStreamInfo(&si, bus_js(a->bus), bus_stream_name(a->bus, BUS_STREAM_DLQ), NULL, &jerr);

    if (s != NATS_OK) {
        reply_nats(r, "stream info", s, jerr);
        return false;
    }
    *first = si->State.FirstSeq;
    *last = si->State.LastSeq;
    jsStreamInfo_Destroy(si);
    return true;
}

/* Dead letter seq when group (NULL or "": any) is its group, else NULL (also
 * when deleted: replayed or discarded). */
static natsMsg *
dlq_msg_of(struct admin *a, uint64_t seq, const char *group)
{
    natsMsg *m = NULL;
    jsErrCode jerr = 0;

    if (js_GetMsg(&m, bus_js(a->bus), bus_stream_name(a->bus, BUS_STREAM_DLQ), seq, NULL, &jerr) !=
        NATS_OK)
        return NULL;
    if (group == NULL || *group == '\0' || strcmp(header(m, "Roomd-Group"), group) == 0)
        return m;
    natsMsg_Destroy(m);
    return NULL;
}

void
admin_dlq_list(struct admin *a, admin_lookup_fn q, void *ctx, struct admin_reply *r)
{
    int64_t after, limit;
    uint64_t first, last;
    const char *group = q ? q(ctx, "group") : NULL;

    if (!have_bus(a, r) || !admin_query_int(q, ctx, "after", 0, INT64_MAX, 0, &after, r) ||
        !admin_query_int(q, ctx, "limit", 1, 500, 50, &limit, r) || !dlq_range(a, &first, &last, r))
        return;
    json_t *arr = json_array();
    uint64_t seq = (uint64_t)after + 1 > first ? (uint64_t)after + 1 : first, next = 0;
    for (; seq <= last && first > 0; seq++) {
        natsMsg *m = dlq_msg_of(a, seq, group);
        if (m == NULL)
            continue;
        json_array_append_new(arr, message_json(m, seq, false));
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
    admin_reply_ok(r, message_json(m, seq, true));
    natsMsg_Destroy(m);
}

/* ==== one dead letter: the message, its group and key, its inbox ==== */

struct dead_letter {
    uint64_t seq;
    natsMsg *m;
    const char *group, *key, *subject; /* the message's headers ("" when absent) */
    json_t *shown;                     /* message_json(m, seq, false) */
    struct consume_inbox *inbox;       /* the group's, opened for the operation */
};

static void
dl_free(struct dead_letter *d)
{
    inbox_close(d->inbox);
    json_decref(d->shown);
    natsMsg_Destroy(d->m);
    memset(d, 0, sizeof(*d));
}

/* Opens d->inbox, the inbox of d->group as this config's groups open it,
 * on any node (consume_group_inbox_open). False with 409 / 503 / 500 in r. */
static bool
dl_inbox(struct admin *a, struct dead_letter *d, struct admin_reply *r)
{
    char err[384];
    int rc = consume_group_inbox_open(&d->inbox, a->conf, d->group, err, sizeof(err));

    if (rc == 0)
        return true;
    if (rc == ROOMD_ENOTFOUND || rc == ROOMD_EINVAL)
        admin_reply_error(r, 409, "inbox_not_here", "seq", "%s", err);
    else
        admin_reply_error(r, rc == ROOMD_EUNAVAIL ? 503 : 500,
                          rc == ROOMD_EUNAVAIL ? "unavailable" : "internal", NULL, "inbox: %s",
                          err);
    return false;
}

/* Reads dead letter seq with its group's inbox into d. False with the
 * answer in r (d freed). */
static bool
dl_get(struct admin *a, uint64_t seq, struct dead_letter *d, struct admin_reply *r)
{
    memset(d, 0, sizeof(*d));
    d->seq = seq;
    if ((d->m = get_msg(a, seq, r)) == NULL)
        return false;
    d->group = header(d->m, "Roomd-Group");
    d->key = header(d->m, "Roomd-Key");
    d->subject = header(d->m, "Roomd-Subject");
    d->shown = message_json(d->m, seq, false);
    if (*d->key == '\0' || *d->subject == '\0' || *d->group == '\0') {
        admin_reply_error(r, 409, "not_replayable", "seq",
                          "dead letter %" PRIu64 " was undecodable: no group or key", seq);
    } else if (dl_inbox(a, d, r)) {
        return true;
    }
    dl_free(d);
    return false;
}

/* An inbox failure of d: 503 when it may pass, else 500. */
static void
reply_inbox(struct admin_reply *r, const struct dead_letter *d, int rc)
{
    admin_reply_error(r, rc == ROOMD_EUNAVAIL || rc == ROOMD_ERETRY ? 503 : 500,
                      rc == ROOMD_EUNAVAIL || rc == ROOMD_ERETRY ? "unavailable" : "internal", NULL,
                      "inbox of %s (%s): %s", d->group, inbox_where(d->inbox),
                      inbox_errmsg(d->inbox));
}

/* Deletes d from the DLQ stream; true when it is gone. */
static bool
dl_delete(struct admin *a, const struct dead_letter *d)
{
    jsErrCode jerr = 0;
    return js_DeleteMsg(bus_js(a->bus), bus_stream_name(a->bus, BUS_STREAM_DLQ), d->seq, NULL,
                        &jerr) == NATS_OK;
}

/* Audits action over rows[0..n) of group, done at once, filter
 * {"group"[,"seq"]} (seq 0: none). 0 and *id, or a reply in r. */
static int
audit(struct admin *a, const char *actor, const char *action, const char *group, uint64_t seq,
      const struct admin_audit_row *rows, size_t n, int64_t *id, struct admin_reply *r)
{
    json_t *fj = json_pack("{s:s}", "group", group);
    if (seq > 0)
        json_object_set_new(fj, "seq", json_integer((json_int_t)seq));
    char *filter = json_dumps(fj, JSON_COMPACT);
    json_decref(fj);
    int rc =
        admin_store_audit_record(a->store, actor, action, filter, rows, n, clock_wall_ms(), id);
    free(filter);
    if (rc != 0)
        admin_reply_store(a, r, rc);
    return rc;
}

static void
audit_row_of(const struct dead_letter *d, struct admin_audit_row *row)
{
    memset(row, 0, sizeof(*row));
    row->outbox_id = (int64_t)d->seq;
    snprintf(row->event_id, sizeof(row->event_id), "%s",
             json_string_value(json_object_get(d->shown, "event_id")));
}

static bool
writable(struct admin *a, struct admin_reply *r)
{
    if (!a->readonly)
        return true;
    admin_reply_error(r, 405, "read_only", NULL, "this handle is read-only");
    return false;
}

/* ==== replay ==== */

/* Sends d's bytes back to their original subject under a new Msg-Id. 0 or
 * a 503 in r. */
static int
republish(struct admin *a, const struct dead_letter *d, struct admin_reply *r)
{
    char msg_id[128], e[256];
    natsMsg *out = NULL;
    const char *rocket = bus_subject_prefix(a->bus, BUS_STREAM_ROCKET);
    enum bus_stream home = rocket && strncmp(d->subject, rocket, strlen(rocket)) == 0
                               ? BUS_STREAM_ROCKET
                               : BUS_STREAM_OUTBOX;

    snprintf(msg_id, sizeof(msg_id), "replay-%s-%" PRIu64, d->group, d->seq);
    snprintf(e, sizeof(e), "cannot build the message");
    int rc =
        natsMsg_Create(&out, d->subject, NULL, natsMsg_GetData(d->m),
                       natsMsg_GetDataLength(d->m)) == NATS_OK
            ? bus_publish_msg(a->bus, home, out, msg_id, clock_mono_ms() + bus_api_wait_ms(a->bus),
                              NULL, NULL, e, sizeof(e))
            : ROOMD_ERETRY;
    natsMsg_Destroy(out);
    if (rc != 0)
        admin_reply_error(r, 503, "unavailable", NULL, "broker: republish: %s", e);
    return rc;
}

void
admin_dlq_replay(struct admin *a, const char *actor, uint64_t seq, struct admin_reply *r)
{
    struct dead_letter d;
    enum inbox_state st = INBOX_ABSENT;
    int64_t id = 0;
    int rc;

    if (!writable(a, r) || !have_bus(a, r) || !dl_get(a, seq, &d, r))
        return;
    /* the inbox forgets the dead key first, so the group handles the
     * message when it comes back (a key in any other state stays) */
    if ((rc = inbox_state(d.inbox, d.key, &st)) != 0 ||
        (rc = inbox_forget_dead(d.inbox, d.key, NULL)) != 0) {
        reply_inbox(r, &d, rc);
        goto out;
    }
    if (republish(a, &d, r) != 0)
        goto out;
    bool deleted = dl_delete(a, &d);
    struct admin_audit_row row;
    audit_row_of(&d, &row);
    if (audit(a, actor, "dlq_replay", d.group, seq, &row, 1, &id, r) != 0)
        goto out;
    json_object_set_new(d.shown, "replayed", json_true());
    json_object_set_new(d.shown, "inbox", json_string(inbox_state_name(st)));
    json_object_set_new(d.shown, "audit_id", json_integer(id));
    json_object_set_new(d.shown, "dead_letter_deleted", json_boolean(deleted));
    admin_reply_ok(r, json_incref(d.shown));
out:
    dl_free(&d);
}

/* ==== discard and purge ==== */

/* Discards d: its key stays settled in the inbox (dead, with the reason;
 * a key the group has done since stays done), so a redelivery of the
 * original is acknowledged unhandled; then the dead letter is deleted.
 * A key the group is handling again (received / progress: replayed
 * meanwhile) is refused. Returns 0, or an answer in r. */
static int
discard_one(struct admin *a, const char *actor, struct dead_letter *d, enum inbox_state *st,
            struct admin_reply *r)
{
    char why[128];
    int rc = inbox_state(d->inbox, d->key, st);

    if (rc != 0) {
        reply_inbox(r, d, rc);
        return rc;
    }
    if (*st == INBOX_RECEIVED || *st == INBOX_PROGRESS) {
        admin_reply_error(r, 409, "in_flight", "seq",
                          "group %s is handling %s again (inbox: %s): not discarded", d->group,
                          d->key, inbox_state_name(*st));
        return ROOMD_ECONFLICT;
    }
    snprintf(why, sizeof(why), "dead letter %" PRIu64 " discarded by %s", d->seq, actor);
    if (*st != INBOX_DONE && (rc = inbox_dead(d->inbox, d->key, why)) != 0) {
        reply_inbox(r, d, rc);
        return rc;
    }
    if (!dl_delete(a, d)) {
        admin_reply_error(r, 503, "unavailable", NULL, "broker: cannot delete dead letter %" PRIu64,
                          d->seq);
        return ROOMD_EUNAVAIL;
    }
    return 0;
}

void
admin_dlq_discard(struct admin *a, const char *actor, uint64_t seq, struct admin_reply *r)
{
    struct dead_letter d;
    enum inbox_state st;
    struct admin_audit_row row;
    int64_t id = 0;

    if (!writable(a, r) || !have_bus(a, r) || !dl_get(a, seq, &d, r))
        return;
    audit_row_of(&d, &row);
    if (discard_one(a, actor, &d, &st, r) == 0 &&
        audit(a, actor, "dlq_discard", d.group, seq, &row, 1, &id, r) == 0) {
        json_object_set_new(d.shown, "discarded", json_true());
        json_object_set_new(d.shown, "inbox", json_string(inbox_state_name(st)));
        json_object_set_new(d.shown, "audit_id", json_integer(id));
        admin_reply_ok(r, json_incref(d.shown));
    }
    dl_free(&d);
}

/* admin_dlq_purge's walk over the DLQ stream for group. */
static void
purge_group(struct admin *a, const char *actor, const char *group, struct admin_reply *r)
{
    struct admin_audit_row *rows = NULL;
    size_t n = 0, cap = 0;
    int64_t id = 0, skipped = 0;
    uint64_t first, last;

    if (!dlq_range(a, &first, &last, r))
        return;
    for (uint64_t seq = first; first > 0 && seq <= last; seq++) {
        natsMsg *m = dlq_msg_of(a, seq, group);
        if (m == NULL)
            continue;
        natsMsg_Destroy(m);
        struct dead_letter d;
        enum inbox_state st;
        struct admin_reply one = {0};
        if (!dl_get(a, seq, &d, &one) || discard_one(a, actor, &d, &st, &one) != 0) {
            /* an inbox or broker failure stops the purge; a key in flight
             * or an undecodable one is skipped */
            bool stop = one.status >= 500;
            if (d.m != NULL)
                dl_free(&d);
            if (stop) {
                free(rows);
                *r = one;
                return;
            }
            admin_reply_clear(&one);
            skipped++;
            continue;
        }
        if (n == cap)
            rows = xrealloc(rows, (cap = cap ? 2 * cap : 64) * sizeof(*rows));
        audit_row_of(&d, &rows[n++]);
        dl_free(&d);
    }
    if (audit(a, actor, "dlq_purge", group, 0, rows, n, &id, r) == 0)
        admin_reply_ok(r,
                       json_pack("{s:s, s:I, s:I, s:I}", "group", group, "discarded", (json_int_t)n,
                                 "skipped", (json_int_t)skipped, "audit_id", (json_int_t)id));
    free(rows);
}

void
admin_dlq_purge(struct admin *a, const char *actor, const char *body, size_t len,
                struct admin_reply *r)
{
    if (!writable(a, r) || !have_bus(a, r))
        return;
    json_t *in = json_loadb(body ? body : "", len, 0, NULL);
    const char *group = json_string_value(json_object_get(in, "group"));
    if (!json_is_object(in) || group == NULL || *group == '\0') {
        json_decref(in);
        admin_reply_error(r, 400, "invalid_argument", "group",
                          "body: want {\"group\": \"<consumer group>\"}");
        return;
    }
    purge_group(a, actor, group, r);
    json_decref(in);
}

/* ==== for the bulk operations (dlq_bulk.c) ==== */

const char *
admin_dlq_header(natsMsg *m, const char *name)
{
    return header(m, name);
}

json_t *
admin_dlq_message_json(natsMsg *m, uint64_t seq, bool full)
{
    return message_json(m, seq, full);
}

int
admin_dlq_act(struct admin *a, const char *actor, uint64_t seq, bool replay, char *why,
              size_t whylen)
{
    struct admin_reply r = {0};
    struct dead_letter d;
    enum inbox_state st = INBOX_ABSENT;
    int rc = ROOMD_EPERM;

    if (!dl_get(a, seq, &d, &r))
        goto out;
    if (replay) {
        if ((rc = inbox_state(d.inbox, d.key, &st)) != 0 ||
            (rc = inbox_forget_dead(d.inbox, d.key, NULL)) != 0)
            reply_inbox(&r, &d, rc);
        else if ((rc = republish(a, &d, &r)) == 0)
            dl_delete(a, &d);
    } else {
        rc = discard_one(a, actor, &d, &st, &r);
    }
    dl_free(&d);
out:
    if (rc != 0) {
        json_t *j = r.body ? json_loads(r.body, 0, NULL) : NULL;
        const char *msg =
            json_string_value(json_object_get(json_object_get(j, "error"), "message"));
        snprintf(why, whylen, "%s", msg ? msg : "failed");
        json_decref(j);
    }
    admin_reply_clear(&r);
    return rc != 0 ? (rc < 0 ? rc : ROOMD_EPERM) : 0;
}
