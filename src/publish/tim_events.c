/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tim_events.c: the Tencent IM actions of one room event (tim_client_deliver),
 * shared by the direct IM sink and the broker's IM bridge, and CreateRoom's
 * synchronous EnsureGroup (tim_create_hook). The event -> IM calls table is
 * in docs/direct.md; keep the two in step.
 */
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/xmalloc.h"
#include "peer/pbjson.h"
#include "publish/sink.h"
#include "publish/tim_client.h"
#include "room_events.pb-c.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the event as JSON, when the caller has none ---------------------------------- */

static const struct {
    const char *type;
    const ProtobufCMessageDescriptor *desc;
    const char *priority; /* MsgPriority: High for control events (AVChatRoom drops by it) */
} event_types[] = {
    {"RoomCreated", &roomd__v1__room_created__descriptor, "High"},
    {"RoomUserJoined", &roomd__v1__room_user_joined__descriptor, "Low"},
    {"RoomUserLeft", &roomd__v1__room_user_left__descriptor, "Low"},
    {"RoomMicChanged", &roomd__v1__room_mic_changed__descriptor, "High"},
    {"RoomGiftSent", &roomd__v1__room_gift_sent__descriptor, "Normal"},
    {"RoomUserKicked", &roomd__v1__room_user_kicked__descriptor, "High"},
    {"RoomClosed", &roomd__v1__room_closed__descriptor, "High"},
    {"RoomRocketIgnited", &roomd__v1__room_rocket_ignited__descriptor, "High"},
    {"RoomRocketLaunched", &roomd__v1__room_rocket_launched__descriptor, "High"},
    {"RoomRocketReset", &roomd__v1__room_rocket_reset__descriptor, "Low"},
};

static int
type_index(const char *type)
{
    for (size_t i = 0; i < sizeof(event_types) / sizeof(event_types[0]); i++)
        if (strcmp(event_types[i].type, type) == 0)
            return (int)i;
    return -1;
}

/* Builds the event JSON: the envelope fields with the payload as an object;
 * room_seq too, as in the direct sink's JSON (outbox_event_build), so a
 * client sees a gap in the group's messages and catches up (docs/room.md). */
static char *
envelope_json(const Roomd__V1__RoomOutboxEvent *e, const ProtobufCMessage *payload)
{
    json_t *o =
        json_pack("{s:s, s:s, s:s, s:I, s:I, s:s, s:I, s:s}", "event_id", e->event_id, "app_code",
                  e->app_code, "room_id", e->room_id, "room_version", (json_int_t)e->room_version,
                  "room_seq", (json_int_t)e->room_seq, "event_type", e->event_type,
                  "occurred_at_ms", (json_int_t)e->occurred_at_ms, "command_id", e->command_id);
    char *s;

    if (o == NULL)
        return NULL;
    json_object_set_new(o, "payload", payload ? pbjson_from_message(payload, true) : json_object());
    s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    return s;
}

/* ---- one event ---------------------------------------------------------------------- */

struct ctx {
    struct tim_client *c;
    const Roomd__V1__RoomOutboxEvent *e;
    const char *json;
    const char *priority;
    char group[TIM_GROUP_ID_MAX];
    bool quiet; /* TIM_DELIVER_NO_MESSAGE: membership calls only */
    int64_t deadline;
    char *err;
    size_t errlen;
};

static bool
membership_calls(const struct ctx *x)
{
    /* AVChatRoom members join through the client SDK only (add 10007, delete 10004). */
    return strcmp(tim_client_group_type(x->c), "AVChatRoom") != 0;
}

/* Sends the event's message. When the group is missing (IM was down at
 * CreateRoom and the RoomCreated row is not yet delivered) it is created
 * first and the send retried once; closing events treat a missing group as
 * done (nothing left to tell). */
static int
send_event(struct ctx *x, bool closing)
{
    if (x->quiet)
        return 0; /* its message is a coalesced one (sink_tim.c) */
    int code = -1;
    int rc = tim_send_group_custom(x->c, x->group, x->json, x->e->event_type, x->e->event_id,
                                   x->priority, x->deadline, &code, x->err, x->errlen);

    if (rc == 0 || (code != 10010 && code != 10015))
        return rc;
    if (closing)
        return 0;
    log_info("tim", "group missing; creating it", "group=%s event_id=%s", x->group, x->e->event_id);
    if ((rc = tim_ensure_group(x->c, x->group, x->e->room_id, x->deadline, x->err, x->errlen)) != 0)
        return rc;
    return tim_send_group_custom(x->c, x->group, x->json, x->e->event_type, x->e->event_id,
                                 x->priority, x->deadline, NULL, x->err, x->errlen);
}

static int
on_created(struct ctx *x, const Roomd__V1__RoomCreated *p)
{
    int rc = tim_ensure_group(x->c, x->group, p && p->title ? p->title : "", x->deadline, x->err,
                              x->errlen);
    return rc != 0 ? rc : send_event(x, false);
}

static int
on_joined(struct ctx *x, const Roomd__V1__RoomUserJoined *p)
{
    char acct[24];
    int rc;

    snprintf(acct, sizeof(acct), "%" PRId64, p->uid);
    if (membership_calls(x)) {
        int code = -1;
        rc = tim_add_member(x->c, x->group, acct, x->deadline, &code, x->err, x->errlen);
        if (rc != 0 && (code == 10010 || code == 10015)) {
            /* The group is missing (as in send_event): create it, add again. */
            if ((rc = tim_ensure_group(x->c, x->group, x->e->room_id, x->deadline, x->err,
                                       x->errlen)) == 0)
                rc = tim_add_member(x->c, x->group, acct, x->deadline, NULL, x->err, x->errlen);
        }
        if (rc != 0)
            return rc;
    }
    return send_event(x, false);
}

static int
on_left(struct ctx *x, const Roomd__V1__RoomUserLeft *p)
{
    bool closing = p->reason && strcmp(p->reason, "closed") == 0;
    char acct[24];
    int rc, code = -1;

    snprintf(acct, sizeof(acct), "%" PRId64, p->uid);
    if ((rc = send_event(x, closing)) != 0)
        return rc;
    if (!membership_calls(x))
        return 0;
    rc = tim_delete_member(x->c, x->group, acct, p->reason, x->deadline, &code, x->err, x->errlen);
    if (rc != 0 && closing && (code == 10010 || code == 10015))
        return 0; /* the group went with the room */
    return rc;
}

static int
on_kicked(struct ctx *x, const Roomd__V1__RoomUserKicked *p)
{
    int64_t now = clock_wall_ms(), secs;
    char acct[24];
    int rc, code = -1;
    enum tim_class cls;

    snprintf(acct, sizeof(acct), "%" PRId64, p->uid);
    /* The High-priority kick message: the client SDK leaves the group on it. */
    if ((rc = send_event(x, false)) != 0)
        return rc;
    if (membership_calls(x))
        return tim_delete_member(x->c, x->group, acct, p->reason, x->deadline, NULL, x->err,
                                 x->errlen);
    if (p->ban_until_ms <= now)
        return 0; /* no ban: the kick message is the whole kick */
    secs = (p->ban_until_ms - now + 999) / 1000;
    rc = tim_ban_member(x->c, x->group, acct, secs, p->reason, x->deadline, &code, x->err,
                        x->errlen);
    cls = tim_classify(code);
    if (rc == 0 || code <= 0 || (cls != TIM_CLASS_PERM && cls != TIM_CLASS_UNKNOWN))
        return rc;
    /* Banning needs a paid edition and a console switch: fall back to a mute. */
    log_info("tim", "ban_group_member refused; muting instead", "group=%s code=%d", x->group, code);
    return tim_mute_member(x->c, x->group, acct, secs, x->deadline, x->err, x->errlen);
}

static int
on_closed(struct ctx *x)
{
    int rc = send_event(x, true);
    return rc != 0 ? rc : tim_destroy_group(x->c, x->group, x->deadline, x->err, x->errlen);
}

int
tim_client_deliver(struct tim_client *c, const uint8_t *envelope, size_t envelope_len,
                   const char *json, int64_t deadline, char *err, size_t errlen)
{
    return tim_client_deliver_flags(c, envelope, envelope_len, json, 0, deadline, err, errlen);
}

int
tim_client_deliver_flags(struct tim_client *c, const uint8_t *envelope, size_t envelope_len,
                         const char *json, unsigned flags, int64_t deadline, char *err,
                         size_t errlen)
{
    Roomd__V1__RoomOutboxEvent *e;
    ProtobufCMessage *payload = NULL;
    char *built = NULL;
    struct ctx x = {.c = c,
                    .deadline = deadline,
                    .err = err,
                    .errlen = errlen,
                    .quiet = (flags & TIM_DELIVER_NO_MESSAGE) != 0};
    int ti, rc;

    err[0] = '\0';
    e = roomd__v1__room_outbox_event__unpack(NULL, envelope_len, envelope);
    if (e == NULL) {
        snprintf(err, errlen, "tim: envelope does not decode");
        return ROOMD_EPERM;
    }
    ti = type_index(e->event_type);
    if (ti >= 0) {
        payload =
            protobuf_c_message_unpack(event_types[ti].desc, NULL, e->payload.len, e->payload.data);
        if (payload == NULL) {
            snprintf(err, errlen, "tim: %s payload does not decode", e->event_type);
            rc = ROOMD_EPERM;
            goto out;
        }
    }
    if (json == NULL && (json = built = envelope_json(e, payload)) == NULL) {
        snprintf(err, errlen, "tim: cannot build the event JSON");
        rc = ROOMD_EPERM;
        goto out;
    }
    x.e = e;
    x.json = json;
    x.priority = ti >= 0 ? event_types[ti].priority : "Normal";
    tim_group_id(e->app_code, e->room_id, x.group, sizeof(x.group));

    if (payload != NULL && strcmp(e->event_type, "RoomCreated") == 0)
        rc = on_created(&x, (const Roomd__V1__RoomCreated *)payload);
    else if (payload != NULL && strcmp(e->event_type, "RoomUserJoined") == 0)
        rc = on_joined(&x, (const Roomd__V1__RoomUserJoined *)payload);
    else if (payload != NULL && strcmp(e->event_type, "RoomUserLeft") == 0)
        rc = on_left(&x, (const Roomd__V1__RoomUserLeft *)payload);
    else if (payload != NULL && strcmp(e->event_type, "RoomUserKicked") == 0)
        rc = on_kicked(&x, (const Roomd__V1__RoomUserKicked *)payload);
    else if (strcmp(e->event_type, "RoomClosed") == 0)
        rc = on_closed(&x);
    else
        rc = send_event(&x, false);
out:
    if (payload != NULL)
        protobuf_c_message_free_unpacked(payload, NULL);
    roomd__v1__room_outbox_event__free_unpacked(e, NULL);
    free(built);
    return rc;
}

int
tim_client_deliver_event(struct tim_client *c, const struct outbox_event *ev, int64_t deadline,
                         char *err, size_t errlen)
{
    return tim_client_deliver(c, ev->envelope, ev->envelope_len, ev->json, deadline, err, errlen);
}

int
tim_create_hook(void *arg, const char *app, const char *room_id, const char *title,
                int64_t owner_uid)
{
    struct tim_client *c = arg;
    char group[TIM_GROUP_ID_MAX], err[512];
    int rc;

    (void)owner_uid; /* Owner_Account must be an imported IM account: the admin owns it */
    tim_group_id(app, room_id, group, sizeof(group));
    /* The whole EnsureGroup (create, maybe get_group_info) within tencent_im.timeout. */
    rc = tim_ensure_group(c, group, title, clock_mono_ms() + tim_client_timeout_ms(c), err,
                          sizeof(err));
    if (rc != 0)
        log_warn("tim", "CreateRoom: create_group failed; RoomCreated will retry",
                 "group=%s rc=%s err=\"%s\"", group, roomd_err_code(rc), err);
    return rc;
}
