/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pbjson.c: see pbjson.h. from_message reads a message unpacked by
 * protobuf-c through its field descriptors (offset, quantifier for oneofs);
 * to_wire writes the wire format itself (tag, varint, length-delimited), so
 * no message struct is built for an answer. Repeated scalars are written
 * unpacked, which every proto3 parser accepts.
 */
#include "peer/pbjson.h"

#include "core/xmalloc.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* ---- message -> JSON ------------------------------------------------------------ */

/* True when the oneof member f of m is the one set. */
static bool
oneof_set(const ProtobufCMessage *m, const ProtobufCFieldDescriptor *f)
{
    uint32_t which = *(const uint32_t *)((const char *)m + f->quantifier_offset);
    return which == f->id;
}

/* The JSON of m's field f (a scalar, not repeated); NULL for its proto3 zero
 * value unless keep_zero, and for a type the messages do not use. */
static json_t *
scalar_json(const ProtobufCMessage *m, const ProtobufCFieldDescriptor *f, bool keep_zero)
{
    const char *p = (const char *)m + f->offset;
    json_int_t i;
    double d;

    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_ENUM:
        i = *(const int32_t *)p;
        break;
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        i = *(const uint32_t *)p;
        break;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        i = *(const int64_t *)p;
        /* a uint64 above INT64_MAX is no valid id or count: keep it out of range */
        if (i < 0 && (f->type == PROTOBUF_C_TYPE_UINT64 || f->type == PROTOBUF_C_TYPE_FIXED64))
            i = -1;
        break;
    case PROTOBUF_C_TYPE_BOOL:
        return keep_zero || *(const protobuf_c_boolean *)p
                   ? json_boolean(*(const protobuf_c_boolean *)p)
                   : NULL;
    case PROTOBUF_C_TYPE_FLOAT:
    case PROTOBUF_C_TYPE_DOUBLE:
        d = f->type == PROTOBUF_C_TYPE_FLOAT ? *(const float *)p : *(const double *)p;
        return keep_zero || d != 0 ? json_real(d) : NULL;
    case PROTOBUF_C_TYPE_STRING: {
        const char *s = *(char *const *)p;
        /* protobuf-c checked the UTF-8; a NUL inside cannot reach here */
        if (s != NULL && s[0] != '\0')
            return json_string(s);
        return keep_zero ? json_string("") : NULL;
    }
    default:
        return NULL;
    }
    return keep_zero || i != 0 ? json_integer(i) : NULL;
}

json_t *
pbjson_from_message(const ProtobufCMessage *m, bool keep_zero)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;
    json_t *o = json_object();

    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        bool oneof = (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) != 0;
        json_t *v;

        if (f->label == PROTOBUF_C_LABEL_REPEATED || (oneof && !oneof_set(m, f)))
            continue;
        if ((v = scalar_json(m, f, keep_zero || oneof)) != NULL)
            json_object_set_new(o, f->name, v);
    }
    return o;
}

/* ---- JSON -> wire ----------------------------------------------------------------- */

struct buf {
    uint8_t *p;
    size_t n, cap;
};

static void
put(struct buf *b, const void *src, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void
put_varint(struct buf *b, uint64_t v)
{
    uint8_t tmp[10];
    size_t n = 0;

    do {
        tmp[n] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v != 0)
            tmp[n] |= 0x80;
        n++;
    } while (v != 0);
    put(b, tmp, n);
}

enum { WIRE_VARINT = 0, WIRE_LEN = 2 };

static void
put_tag(struct buf *b, uint32_t id, int wire)
{
    put_varint(b, ((uint64_t)id << 3) | (uint64_t)wire);
}

static void encode_object(struct buf *b, const json_t *j, const ProtobufCMessageDescriptor *d);

/* Writes one value v of field f (a repeated field's element). Values of the
 * wrong JSON type are skipped. */
static void
encode_value(struct buf *b, const ProtobufCFieldDescriptor *f, const json_t *v)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_ENUM:
        if (json_is_integer(v)) {
            put_tag(b, f->id, WIRE_VARINT);
            /* a negative int32 is sign-extended to 10 bytes, as the spec says */
            put_varint(b, (uint64_t)(int64_t)json_integer_value(v));
        }
        break;
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SINT64:
        if (json_is_integer(v)) {
            int64_t x = json_integer_value(v);
            put_tag(b, f->id, WIRE_VARINT);
            put_varint(b, ((uint64_t)x << 1) ^ (uint64_t)(x >> 63));
        }
        break;
    case PROTOBUF_C_TYPE_BOOL:
        if (json_is_boolean(v)) {
            put_tag(b, f->id, WIRE_VARINT);
            put_varint(b, json_is_true(v) ? 1 : 0);
        }
        break;
    case PROTOBUF_C_TYPE_STRING:
        if (json_is_string(v)) {
            put_tag(b, f->id, WIRE_LEN);
            put_varint(b, json_string_length(v));
            put(b, json_string_value(v), json_string_length(v));
        }
        break;
    case PROTOBUF_C_TYPE_MESSAGE:
        if (json_is_object(v)) {
            struct buf sub = {0};
            encode_object(&sub, v, f->descriptor);
            put_tag(b, f->id, WIRE_LEN);
            put_varint(b, sub.n);
            if (sub.n > 0)
                put(b, sub.p, sub.n);
            free(sub.p);
        }
        break;
    default: /* fixed-width, float and bytes: none in our answers */
        break;
    }
}

static void
encode_object(struct buf *b, const json_t *j, const ProtobufCMessageDescriptor *d)
{
    if (!json_is_object(j))
        return;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        const json_t *v = json_object_get(j, f->name);
        size_t k;
        const json_t *e;

        if (v == NULL || json_is_null(v))
            continue;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            if (json_is_array(v))
                json_array_foreach(v, k, e) encode_value(b, f, e);
            continue;
        }
        encode_value(b, f, v);
    }
}

uint8_t *
pbjson_to_wire(const json_t *j, const ProtobufCMessageDescriptor *d, size_t *len)
{
    struct buf b = {0};

    encode_object(&b, j, d);
    if (b.p == NULL)
        b.p = xmalloc(1);
    *len = b.n;
    return b.p;
}
