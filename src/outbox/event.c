/* SPDX-License-Identifier: Apache-2.0 */
/*
 * event.c: what the sinks receive for one room_outbox row: the packed
 * roomd.v1.RoomOutboxEvent envelope and its JSON form, whose "payload" is the
 * row's protobuf payload decoded generically from the descriptor that
 * event_type names (a protobuf-c message -> jansson walk over the descriptor's
 * fields). Called once per row by worker.c; roomctl uses it to show a row.
 */
#include "outbox/outbox.h"

#include "core/err.h"
#include "core/xmalloc.h"
#include "room_events.pb-c.h"
#include "store/store.h"

#include <inttypes.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The payload message of each event type (ARCHITECTURE §5). */
static const ProtobufCMessageDescriptor *const payload_types[] = {
    &roomd__v1__room_created__descriptor,         &roomd__v1__room_user_joined__descriptor,
    &roomd__v1__room_user_left__descriptor,       &roomd__v1__room_mic_changed__descriptor,
    &roomd__v1__room_gift_sent__descriptor,       &roomd__v1__room_user_kicked__descriptor,
    &roomd__v1__room_closed__descriptor,          &roomd__v1__room_rocket_ignited__descriptor,
    &roomd__v1__room_rocket_launched__descriptor, &roomd__v1__room_rocket_reset__descriptor,
};

/* Returns the descriptor for "RoomGiftSent" or "roomd.v1.RoomGiftSent", or NULL. */
static const ProtobufCMessageDescriptor *
payload_descriptor(const char *event_type)
{
    for (size_t i = 0; i < sizeof(payload_types) / sizeof(payload_types[0]); i++) {
        const ProtobufCMessageDescriptor *d = payload_types[i];
        if (strcmp(event_type, d->short_name) == 0 || strcmp(event_type, d->name) == 0)
            return d;
    }
    return NULL;
}

/* ==== generic protobuf-c message -> JSON ==== */

static json_t *message_to_json(const ProtobufCMessage *m);

static json_t *
bytes_to_json(const ProtobufCBinaryData *b)
{
    /* base64, as the protobuf JSON mapping writes bytes */
    size_t cap = 4 * ((b->len + 2) / 3) + 1;
    unsigned char *out = xmalloc(cap);
    json_t *j;

    EVP_EncodeBlock(out, b->data, (int)b->len);
    j = json_string((const char *)out);
    free(out);
    return j;
}

/* Converts the scalar or message at p (one element) of field f. NULL when the
 * value cannot be represented (e.g. a string that is not UTF-8). */
static json_t *
value_to_json(const ProtobufCFieldDescriptor *f, const void *p)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
        return json_integer(*(const int32_t *)p);
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        return json_integer(*(const int64_t *)p);
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        return json_integer(*(const uint32_t *)p);
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64: {
        uint64_t v = *(const uint64_t *)p;
        if (v <= (uint64_t)INT64_MAX)
            return json_integer((json_int_t)v);
        char buf[24];
        snprintf(buf, sizeof(buf), "%" PRIu64, v);
        return json_string(buf);
    }
    case PROTOBUF_C_TYPE_FLOAT:
        return json_real(*(const float *)p);
    case PROTOBUF_C_TYPE_DOUBLE:
        return json_real(*(const double *)p);
    case PROTOBUF_C_TYPE_BOOL:
        return json_boolean(*(const protobuf_c_boolean *)p);
    case PROTOBUF_C_TYPE_ENUM: {
        int v = *(const int *)p;
        const ProtobufCEnumValue *ev =
            protobuf_c_enum_descriptor_get_value((const ProtobufCEnumDescriptor *)f->descriptor, v);
        return ev != NULL ? json_string(ev->name) : json_integer(v);
    }
    case PROTOBUF_C_TYPE_STRING: {
        const char *s = *(char *const *)p;
        return json_string(s != NULL ? s : "");
    }
    case PROTOBUF_C_TYPE_BYTES:
        return bytes_to_json((const ProtobufCBinaryData *)p);
    case PROTOBUF_C_TYPE_MESSAGE: {
        const ProtobufCMessage *sub = *(ProtobufCMessage *const *)p;
        return sub != NULL ? message_to_json(sub) : json_null();
    }
    }
    return NULL;
}

static size_t
value_size(ProtobufCType t)
{
    switch (t) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        return 4;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        return 8;
    case PROTOBUF_C_TYPE_FLOAT:
        return sizeof(float);
    case PROTOBUF_C_TYPE_DOUBLE:
        return sizeof(double);
    case PROTOBUF_C_TYPE_BOOL:
        return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_ENUM:
        return sizeof(int);
    case PROTOBUF_C_TYPE_STRING:
        return sizeof(char *);
    case PROTOBUF_C_TYPE_BYTES:
        return sizeof(ProtobufCBinaryData);
    case PROTOBUF_C_TYPE_MESSAGE:
        return sizeof(ProtobufCMessage *);
    }
    return 0;
}

/*
 * Walks m's descriptor: every field by its proto name; repeated fields as
 * arrays; proto3 scalars always (defaults included, so consumers see every
 * key); optional fields and oneof members only when present. Returns a new
 * object, or NULL when a value cannot be represented in JSON.
 */
static json_t *
message_to_json(const ProtobufCMessage *m)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;
    const char *base = (const char *)m;
    json_t *obj = json_object();

    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        const void *member = base + f->offset;
        json_t *v = NULL;

        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)(base + f->quantifier_offset);
            const char *arr = *(char *const *)member;
            v = json_array();
            for (size_t k = 0; k < n; k++) {
                json_t *e = value_to_json(f, arr + k * value_size(f->type));
                if (e == NULL || json_array_append_new(v, e) != 0) {
                    json_decref(v);
                    v = NULL;
                    break;
                }
            }
        } else if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
            if (*(const uint32_t *)(base + f->quantifier_offset) != f->id)
                continue;
            v = value_to_json(f, member);
        } else if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->type != PROTOBUF_C_TYPE_MESSAGE &&
                   f->type != PROTOBUF_C_TYPE_STRING) {
            if (!*(const protobuf_c_boolean *)(base + f->quantifier_offset))
                continue;
            v = value_to_json(f, member);
        } else {
            v = value_to_json(f, member);
        }
        if (v == NULL || json_object_set_new(obj, f->name, v) != 0) {
            json_decref(obj);
            return NULL;
        }
    }
    return obj;
}

/* ==== the envelope ==== */

int
outbox_event_build(const struct outbox_row *row, uint8_t **envelope, size_t *envelope_len,
                   char **json)
{
    const ProtobufCMessageDescriptor *d = payload_descriptor(row->event_type);
    ProtobufCMessage *payload = NULL;
    json_t *obj = NULL, *pj = NULL;
    char *text = NULL;
    int rc = ROOMD_EINVAL;

    *envelope = NULL;
    *envelope_len = 0;
    if (json != NULL)
        *json = NULL;
    if (d == NULL)
        goto out;
    payload = protobuf_c_message_unpack(d, NULL, row->payload_len, row->payload);
    if (payload == NULL)
        goto out;
    if (json == NULL)
        goto envelope; /* the payload decodes: not poison; no JSON wanted */
    if ((pj = message_to_json(payload)) == NULL)
        goto out;

    obj = json_pack("{s:s, s:s, s:s, s:I, s:I, s:s, s:I, s:s}", "event_id", row->event_id,
                    "app_code", row->app_code, "room_id", row->room_id, "room_version",
                    (json_int_t)row->room_version, "room_seq", (json_int_t)row->room_seq,
                    "event_type", row->event_type, "occurred_at_ms", (json_int_t)row->created_at_ms,
                    "command_id", row->command_id);
    if (obj != NULL && row->request_id[0] != '\0') {
        json_t *md = json_pack("{s:s}", "request_id", row->request_id);
        if (row->traceparent[0] != '\0')
            json_object_set_new(md, "traceparent", json_string(row->traceparent));
        json_object_set_new(obj, "metadata", md);
    }
    if (obj == NULL || json_object_set_new(obj, "payload", pj) != 0) {
        pj = NULL;
        goto out;
    }
    pj = NULL;
    if ((text = json_dumps(obj, JSON_COMPACT)) == NULL)
        goto out;

envelope:;
    Roomd__V1__RoomOutboxEvent ev = ROOMD__V1__ROOM_OUTBOX_EVENT__INIT;
    ev.event_id = (char *)row->event_id;
    ev.app_code = (char *)row->app_code;
    ev.room_id = (char *)row->room_id;
    ev.room_version = row->room_version;
    ev.event_type = (char *)row->event_type;
    ev.occurred_at_ms = row->created_at_ms;
    ev.command_id = (char *)row->command_id;
    ev.room_seq = row->room_seq;
    ev.payload.data = row->payload;
    ev.payload.len = row->payload_len;
    /* the command's request ids (X-Request-Id, traceparent) */
    Roomd__V1__RoomOutboxEvent__MetadataEntry md[2] = {
        ROOMD__V1__ROOM_OUTBOX_EVENT__METADATA_ENTRY__INIT,
        ROOMD__V1__ROOM_OUTBOX_EVENT__METADATA_ENTRY__INIT};
    Roomd__V1__RoomOutboxEvent__MetadataEntry *mdp[2] = {&md[0], &md[1]};
    if (row->request_id[0] != '\0') {
        md[0].key = "request_id";
        md[0].value = (char *)row->request_id;
        ev.n_metadata = 1;
        if (row->traceparent[0] != '\0') {
            md[1].key = "traceparent";
            md[1].value = (char *)row->traceparent;
            ev.n_metadata = 2;
        }
        ev.metadata = mdp;
    }
    size_t len = roomd__v1__room_outbox_event__get_packed_size(&ev);
    *envelope = xmalloc(len > 0 ? len : 1);
    *envelope_len = roomd__v1__room_outbox_event__pack(&ev, *envelope);
    if (json != NULL)
        *json = text; /* jansson allocates with malloc */
    text = NULL;
    rc = 0;
out:
    free(text);
    json_decref(pj);
    json_decref(obj);
    if (payload != NULL)
        protobuf_c_message_free_unpacked(payload, NULL);
    return rc;
}
