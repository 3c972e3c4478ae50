/* SPDX-License-Identifier: Apache-2.0 */
/*
 * admin/dlq.c: the consumer groups' dead letters (docs/bus.md), on the
 * broker of the configured driver through its dead-letter backend
 * (dlq_backend.h: JetStream's stream <ns>hyapp_dlq, dlq_js.c; RocketMQ's
 * %DLQ%<group> topics, dlq_rmq.c). Listed,
 * shown (the envelope decoded), replayed into their group, discarded, or
 * purged (every dead letter of one group discarded). The group's inbox is
 * reached through the inbox interface (store/inbox.h), opened as the
 * group opens it (consume_group_inbox_open): the MySQL inbox from any node,
 * the SQLite one on the node that holds its file.
 *   replay   the inbox forgets the dead key (inbox_forget_dead), the bytes
 *            go back to their group (JetStream: the original subject under
 *            a new Msg-Id, the other groups see the event_id done and ack
 *            it; RocketMQ: %RETRY%<group>), the dead letter is removed
 *            (deleted from the stream; RocketMQ: settled by the audit
 *            entry); audited dlq_replay
 *   discard  the key stays settled (inbox_dead with the reason: a
 *            redelivery of the original is acked unhandled), the dead
 *            letter is removed; audited dlq_discard
 *   purge    discard for every dead letter of one group; audited dlq_purge
 */
#include "admin/internal.h"

#include "admin/dlq_backend.h"

#include "conf/conf.h"
#include "consume/roles.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/xmalloc.h"
#include "outbox/outbox.h"
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

void
admin_set_rmq(struct admin *a, struct rmq_client *c)
{
    a->rmq = c;
}

const struct dlq_backend *
admin_dlq_backend(struct admin *a)
{
    if (a->rmq != NULL)
        return &dlq_backend_rocketmq;
    if (a->bus != NULL)
        return &dlq_backend_jetstream;
    return NULL;
}

/* The message as the API shows it; full adds the decoded event. */
static json_t *
message_json(const struct dlq_letter *d, bool full)
{
    json_t *o = json_pack("{s:I, s:s, s:s, s:I, s:s, s:s, s:s, s:I}", "seq", (json_int_t)d->seq,
                          "group", d->group, "subject", d->subject, "deliveries",
                          (json_int_t)d->deliveries, "reason", d->error, "key", d->key,
                          "dead_reason", d->reason, "stored_at_ms", (json_int_t)d->stored_ms);
    Roomd__V1__RoomOutboxEvent *ev = roomd__v1__room_outbox_event__unpack(NULL, d->len, d->data);

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

/* The backend and a scan of it for this request, or false with 404 / 503
 * in r (no broker for the consumer groups here, or it does not answer). */
static bool
scan_open(struct admin *a, const struct dlq_backend **b, struct dlq_scan **s, struct admin_reply *r)
{
    *s = NULL;
    if ((*b = admin_dlq_backend(a)) == NULL) {
        admin_reply_error(r, 404, "not_found", NULL,
                          "no consumer dead letters here: rocketmq.enabled is false");
        return false;
    }
    return (*b)->open(a, s, r) == 0;
}

/* Dead letter seq into *d, or false with 404 / 503 in r. */
static bool
get_letter(const struct dlq_backend *b, struct dlq_scan *s, uint64_t seq, struct dlq_letter *d,
           struct admin_reply *r)
{
    char err[256] = "";
    int rc = b->get(s, seq, d, err, sizeof(err));

    if (rc == 0)
        return true;
    if (rc == ROOMD_ENOTFOUND)
        admin_reply_error(r, 404, "not_found", "seq", "no dead letter %" PRIu64, seq);
    else
        admin_reply_error(r, 503, "unavailable", NULL, "broker: %s", err);
    return false;
}

void
admin_dlq_list(struct admin *a, admin_lookup_fn q, void *ctx, struct admin_reply *r)
{
    int64_t after, limit;
    const char *group = q ? q(ctx, "group") : NULL;
    const struct dlq_backend *b;
    struct dlq_scan *s;

    if (!admin_query_int(q, ctx, "after", 0, INT64_MAX, 0, &after, r) ||
        !admin_query_int(q, ctx, "limit", 1, 500, 50, &limit, r) || !scan_open(a, &b, &s, r))
        return;
    json_t *arr = json_array();
    uint64_t seq = (uint64_t)after, next = 0;
    struct dlq_letter d;
    int rc;
    while ((rc = b->next(s, seq, group, &d)) == 0) {
        seq = d.seq;
        json_array_append_new(arr, message_json(&d, false));
        b->letter_free(&d);
        if (json_array_size(arr) == (size_t)limit) {
            next = seq;
            break;
        }
    }
    if (rc == ROOMD_EUNAVAIL) {
        json_decref(arr);
        admin_reply_error(r, 503, "unavailable", NULL, "broker: the dead letters cannot be read");
    } else {
        json_t *o =
            json_pack("{s:o, s:s, s:s}", "messages", arr, "stream", b->where(s), "driver", b->name);
        json_object_set_new(o, "next_after", next ? json_integer((json_int_t)next) : json_null());
        admin_reply_ok(r, o);
    }
    b->close(s);
}

void
admin_dlq_show(struct admin *a, uint64_t seq, struct admin_reply *r)
{
    const struct dlq_backend *b;
    struct dlq_scan *s;
    struct dlq_letter d;

    if (!scan_open(a, &b, &s, r))
        return;
    if (get_letter(b, s, seq, &d, r)) {
        admin_reply_ok(r, message_json(&d, true));
        b->letter_free(&d);
    }
    b->close(s);
}

/* ==== one dead letter: the message, its group and key, its inbox ==== */

struct dead_letter {
    const struct dlq_backend *b;
    struct dlq_scan *s;
    struct dlq_letter l;
    uint64_t seq;
    const char *group, *key;     /* of l ("" when absent) */
    json_t *shown;               /* message_json(l, false) */
    struct consume_inbox *inbox; /* the group's, opened for the operation */
};

static void
dl_free(struct dead_letter *d)
{
    inbox_close(d->inbox);
    json_decref(d->shown);
    if (d->b != NULL && d->l.own != NULL)
        d->b->letter_free(&d->l);
    d->inbox = NULL;
    d->shown = NULL;
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

/* Reads dead letter seq of scan s with its group's inbox into d. False
 * with the answer in r (d freed). */
static bool
dl_get(struct admin *a, const struct dlq_backend *b, struct dlq_scan *s, uint64_t seq,
       struct dead_letter *d, struct admin_reply *r)
{
    memset(d, 0, sizeof(*d));
    d->b = b;
    d->s = s;
    d->seq = seq;
    if (!get_letter(b, s, seq, &d->l, r)) {
        d->b = NULL;
        return false;
    }
    d->group = d->l.group;
    d->key = d->l.key;
    d->shown = message_json(&d->l, false);
    if (*d->key == '\0' || *d->l.subject == '\0' || *d->group == '\0') {
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

/* Removes d from the dead letters; true when it is gone. */
static bool
dl_delete(const struct dead_letter *d)
{
    return d->b->remove(d->s, &d->l);
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

/* Sends d's bytes back to their group. 0 or a 503 in r. */
static int
republish(const struct dead_letter *d, struct admin_reply *r)
{
    char e[256] = "";
    int rc = d->b->republish(d->s, &d->l, e, sizeof(e));

    if (rc != 0)
        admin_reply_error(r, 503, "unavailable", NULL, "broker: republish: %s", e);
    return rc;
}

/* The replay of d: the inbox forgets the dead key, the bytes go back, the
 * dead letter is removed. 0, or an answer in r; *st the key's state before. */
static int
replay_one(struct dead_letter *d, enum inbox_state *st, bool *deleted, struct admin_reply *r)
{
    int rc;

    /* the inbox forgets the dead key first, so the group handles the
     * message when it comes back (a key in any other state stays) */
    if ((rc = inbox_state(d->inbox, d->key, st)) != 0 ||
        (rc = inbox_forget_dead(d->inbox, d->key, NULL)) != 0) {
        reply_inbox(r, d, rc);
        return rc;
    }
    if ((rc = republish(d, r)) != 0)
        return rc;
    *deleted = dl_delete(d);
    return 0;
}

void
admin_dlq_replay(struct admin *a, const char *actor, uint64_t seq, struct admin_reply *r)
{
    const struct dlq_backend *b;
    struct dlq_scan *s;
    struct dead_letter d;
    enum inbox_state st = INBOX_ABSENT;
    int64_t id = 0;
    bool deleted = false;

    if (!writable(a, r) || !scan_open(a, &b, &s, r))
        return;
    if (!dl_get(a, b, s, seq, &d, r))
        goto done;
    if (replay_one(&d, &st, &deleted, r) != 0)
        goto out;
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
done:
    b->close(s);
}

/* ==== discard and purge ==== */

/* Discards d: its key stays settled in the inbox (dead, with the reason;
 * a key the group has done since stays done), so a redelivery of the
 * original is acknowledged unhandled; then the dead letter is removed.
 * A key the group is handling again (received / progress: replayed
 * meanwhile) is refused. Returns 0, or an answer in r. */
static int
discard_one(const char *actor, struct dead_letter *d, enum inbox_state *st, struct admin_reply *r)
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
    if (!dl_delete(d)) {
        admin_reply_error(r, 503, "unavailable", NULL, "broker: cannot delete dead letter %" PRIu64,
                          d->seq);
        return ROOMD_EUNAVAIL;
    }
    return 0;
}

void
admin_dlq_discard(struct admin *a, const char *actor, uint64_t seq, struct admin_reply *r)
{
    const struct dlq_backend *b;
    struct dlq_scan *s;
    struct dead_letter d;
    enum inbox_state st;
    struct admin_audit_row row;
    int64_t id = 0;

    if (!writable(a, r) || !scan_open(a, &b, &s, r))
        return;
    if (dl_get(a, b, s, seq, &d, r)) {
        audit_row_of(&d, &row);
        if (discard_one(actor, &d, &st, r) == 0 &&
            audit(a, actor, "dlq_discard", d.group, seq, &row, 1, &id, r) == 0) {
            json_object_set_new(d.shown, "discarded", json_true());
            json_object_set_new(d.shown, "inbox", json_string(inbox_state_name(st)));
            json_object_set_new(d.shown, "audit_id", json_integer(id));
            admin_reply_ok(r, json_incref(d.shown));
        }
        dl_free(&d);
    }
    b->close(s);
}

/* admin_dlq_purge's walk over the dead letters of group. */
static void
purge_group(struct admin *a, const struct dlq_backend *b, struct dlq_scan *s, const char *actor,
            const char *group, struct admin_reply *r)
{
    struct admin_audit_row *rows = NULL;
    size_t n = 0, cap = 0;
    int64_t id = 0, skipped = 0;
    uint64_t seq = 0;
    struct dlq_letter l;
    int rc;

    while ((rc = b->next(s, seq, group, &l)) == 0) {
        seq = l.seq;
        b->letter_free(&l);
        struct dead_letter d;
        enum inbox_state st;
        struct admin_reply one = {0};
        if (!dl_get(a, b, s, seq, &d, &one) || discard_one(actor, &d, &st, &one) != 0) {
            /* an inbox or broker failure stops the purge; a key in flight
             * or an undecodable one is skipped */
            bool stop = one.status >= 500;
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
    if (rc == ROOMD_EUNAVAIL)
        admin_reply_error(r, 503, "unavailable", NULL, "broker: the dead letters cannot be read");
    else if (audit(a, actor, "dlq_purge", group, 0, rows, n, &id, r) == 0)
        admin_reply_ok(r,
                       json_pack("{s:s, s:I, s:I, s:I}", "group", group, "discarded", (json_int_t)n,
                                 "skipped", (json_int_t)skipped, "audit_id", (json_int_t)id));
    free(rows);
}

void
admin_dlq_purge(struct admin *a, const char *actor, const char *body, size_t len,
                struct admin_reply *r)
{
    const struct dlq_backend *b;
    struct dlq_scan *s;

    if (!writable(a, r))
        return;
    json_t *in = json_loadb(body ? body : "", len, 0, NULL);
    const char *group = json_string_value(json_object_get(in, "group"));
    if (admin_dlq_backend(a) == NULL || !json_is_object(in) || group == NULL || *group == '\0') {
        if (admin_dlq_backend(a) == NULL)
            scan_open(a, &b, &s, r); /* the 404 */
        else
            admin_reply_error(r, 400, "invalid_argument", "group",
                              "body: want {\"group\": \"<consumer group>\"}");
        json_decref(in);
        return;
    }
    if (scan_open(a, &b, &s, r)) {
        purge_group(a, b, s, actor, group, r);
        b->close(s);
    }
    json_decref(in);
}

/* ==== for the bulk operations (dlq_bulk.c) ==== */

json_t *
admin_dlq_message_json(const struct dlq_letter *d, bool full)
{
    return message_json(d, full);
}

int
admin_dlq_act(struct admin *a, const struct dlq_backend *b, struct dlq_scan *s, const char *actor,
              uint64_t seq, bool replay, char *why, size_t whylen)
{
    struct admin_reply r = {0};
    struct dead_letter d;
    enum inbox_state st = INBOX_ABSENT;
    bool deleted = false;
    int rc = ROOMD_EPERM;

    if (!dl_get(a, b, s, seq, &d, &r))
        goto out;
    rc = replay ? replay_one(&d, &st, &deleted, &r) : discard_one(actor, &d, &st, &r);
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
