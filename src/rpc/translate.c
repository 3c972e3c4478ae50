/* SPDX-License-Identifier: Apache-2.0 */
/*
 * translate.c: a gRPC call <-> the HTTP request of its route (internal.h),
 * for server.c. Read top-down:
 *   md_*             the call's metadata
 *   status_of        the gRPC status of an HTTP answer (docs/grpc.md)
 *   rpc_set_error    status + message + google.rpc.Status details
 *   rpc_to_request   message + metadata -> struct http_request
 *   rpc_reply        struct http_response -> reply message or status + details
 *   rpc_strings_ok   the message's strings, checked as HTTP checks JSON
 */
#include "rpc/internal.h"

#include "core/xmalloc.h"
#include "peer/pbjson.h"
#include "room_service.pb-c.h"
#include "rpc_status.pb-c.h"

#include <grpc/slice.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ==== One call's pieces ==== */

static const char *
query_get(void *ctx, const char *name)
{
    struct query *q = ctx;

    for (int i = 0; i < q->n; i++)
        if (strcmp(q->name[i], name) == 0)
            return q->value[i];
    return NULL;
}

/* The value of metadata key (lower case), NULL when absent. */
static const grpc_slice *
md_find(const grpc_metadata_array *md, const char *key)
{
    for (size_t i = 0; i < md->count; i++) {
        const grpc_slice *k = &md->metadata[i].key;
        if (GRPC_SLICE_LENGTH(*k) == strlen(key) &&
            memcmp(GRPC_SLICE_START_PTR(*k), key, GRPC_SLICE_LENGTH(*k)) == 0)
            return &md->metadata[i].value;
    }
    return NULL;
}

/* The value of metadata key as a C string into out: 1, or 0 when absent, -1
 * when it does not fit outlen. */
static int
md_get(const grpc_metadata_array *md, const char *key, char *out, size_t outlen)
{
    const grpc_slice *v = md_find(md, key);

    if (v == NULL)
        return 0;
    if (GRPC_SLICE_LENGTH(*v) >= outlen)
        return -1;
    memcpy(out, GRPC_SLICE_START_PTR(*v), GRPC_SLICE_LENGTH(*v));
    out[GRPC_SLICE_LENGTH(*v)] = '\0';
    return 1;
}

/* A copy of the value of metadata key (malloc'd), NULL when absent. */
char *
rpc_md_dup(const grpc_metadata_array *md, const char *key)
{
    const grpc_slice *v = md_find(md, key);
    char *out;

    if (v == NULL)
        return NULL;
    out = xmalloc(GRPC_SLICE_LENGTH(*v) + 1);
    memcpy(out, GRPC_SLICE_START_PTR(*v), GRPC_SLICE_LENGTH(*v));
    out[GRPC_SLICE_LENGTH(*v)] = '\0';
    return out;
}

/* ==== Status and details ==== */

/* The gRPC status of an HTTP answer (docs/grpc.md has the table). */
static grpc_status_code
status_of(int http_status, const char *code)
{
    switch (http_status) {
    case 400:
        return GRPC_STATUS_INVALID_ARGUMENT;
    case 401:
        return GRPC_STATUS_UNAUTHENTICATED;
    case 402: /* insufficient_balance: top up first; retrying as is cannot succeed */
        return GRPC_STATUS_FAILED_PRECONDITION;
    case 403:
        return GRPC_STATUS_PERMISSION_DENIED;
    case 404:
        return GRPC_STATUS_NOT_FOUND;
    case 405:
        return GRPC_STATUS_UNIMPLEMENTED;
    case 409:
        if (strcmp(code, "room_exists") == 0)
            return GRPC_STATUS_ALREADY_EXISTS;
        if (strcmp(code, "idempotency_key_reused") == 0)
            return GRPC_STATUS_ABORTED;         /* retry with a new command_id */
        return GRPC_STATUS_FAILED_PRECONDITION; /* the room's state refuses it */
    case 410: /* command_id_expired: a gift paid before its log row was purged; new id */
        return GRPC_STATUS_ABORTED;
    case 413:
    case 429:
        return GRPC_STATUS_RESOURCE_EXHAUSTED;
    case 503:
        return GRPC_STATUS_UNAVAILABLE;
    case 504:
        return GRPC_STATUS_DEADLINE_EXCEEDED;
    default:
        return http_status >= 200 && http_status < 300 ? GRPC_STATUS_OK : GRPC_STATUS_INTERNAL;
    }
}

/* Packs a google.rpc.Any of message m into *any (value malloc'd). */
static void
pack_any(Google__Rpc__Any *any, const char *type_url, const ProtobufCMessage *m)
{
    google__rpc__any__init(any);
    any->type_url = (char *)type_url;
    any->value.len = protobuf_c_message_get_packed_size(m);
    any->value.data = xmalloc(any->value.len + 1);
    protobuf_c_message_pack(m, any->value.data);
}

/* Sets a's error: status st, message, and the details google.rpc.Status with
 * an ErrorInfo (reason code; metadata http_status, field, owner) and, with a
 * field, a BadRequest. */
void
rpc_set_error(struct answer *a, grpc_status_code st, int http_status, const char *code,
              const char *field, const char *message)
{
    Google__Rpc__Status rs = GOOGLE__RPC__STATUS__INIT;
    Google__Rpc__ErrorInfo info = GOOGLE__RPC__ERROR_INFO__INIT;
    Google__Rpc__ErrorInfo__MetadataEntry md[3], *mdp[3];
    Google__Rpc__BadRequest br = GOOGLE__RPC__BAD_REQUEST__INIT;
    Google__Rpc__BadRequest__FieldViolation fv = GOOGLE__RPC__BAD_REQUEST__FIELD_VIOLATION__INIT;
    Google__Rpc__BadRequest__FieldViolation *fvp = &fv;
    Google__Rpc__Any any[2], *anyp[2] = {&any[0], &any[1]};
    char hs[16];
    size_t nmd = 0;

    a->status = st;
    strlcpy_(a->message, message, sizeof(a->message));
    snprintf(hs, sizeof(hs), "%d", http_status);
    info.reason = (char *)code;
    info.domain = (char *)"roomd";
    md[nmd] = (Google__Rpc__ErrorInfo__MetadataEntry)GOOGLE__RPC__ERROR_INFO__METADATA_ENTRY__INIT;
    md[nmd].key = (char *)"http_status";
    md[nmd++].value = hs;
    if (field != NULL && field[0] != '\0') {
        md[nmd] =
            (Google__Rpc__ErrorInfo__MetadataEntry)GOOGLE__RPC__ERROR_INFO__METADATA_ENTRY__INIT;
        md[nmd].key = (char *)"field";
        md[nmd++].value = (char *)field;
    }
    if (a->owner[0] != '\0') {
        md[nmd] =
            (Google__Rpc__ErrorInfo__MetadataEntry)GOOGLE__RPC__ERROR_INFO__METADATA_ENTRY__INIT;
        md[nmd].key = (char *)"owner";
        md[nmd++].value = a->owner;
    }
    for (size_t i = 0; i < nmd; i++)
        mdp[i] = &md[i];
    info.n_metadata = nmd;
    info.metadata = mdp;
    pack_any(&any[0], "type.googleapis.com/google.rpc.ErrorInfo", &info.base);
    rs.n_details = 1;
    if (field != NULL && field[0] != '\0') {
        fv.field = (char *)field;
        fv.description = (char *)message;
        br.n_field_violations = 1;
        br.field_violations = &fvp;
        pack_any(&any[1], "type.googleapis.com/google.rpc.BadRequest", &br.base);
        rs.n_details = 2;
    }
    rs.code = (int32_t)st;
    rs.message = a->message;
    rs.details = anyp;
    free(a->details);
    a->details_len = protobuf_c_message_get_packed_size(&rs.base);
    a->details = xmalloc(a->details_len + 1);
    protobuf_c_message_pack(&rs.base, a->details);
    for (size_t i = 0; i < rs.n_details; i++)
        free(any[i].value.data);
}

/* ==== Message + metadata -> HTTP request ==== */

/* Appends s percent-encoded (all but [A-Za-z0-9_.~-]) to path. */
static void
append_segment(char *path, size_t len, const char *s)
{
    size_t n = strlen(path);

    for (; *s != '\0' && n + 4 < len; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            c == '_' || c == '.' || c == '~' || c == '-')
            path[n++] = (char)c;
        else
            n += (size_t)snprintf(path + n, len - n, "%%%02X", c);
    }
    path[n] = '\0';
}

/* Fills path from m->route, taking {room_id} / {uid} out of fields (a path
 * segment over HTTP). False with a's INVALID_ARGUMENT when one is absent. */
static bool
build_path(const struct method *m, json_t *fields, char *path, size_t len, struct answer *a)
{
    const char *r = m->route;

    path[0] = '\0';
    while (*r != '\0') {
        const char *open = strchr(r, '{');
        if (open == NULL) {
            strlcpy_(path + strlen(path), r, len - strlen(path));
            break;
        }
        size_t plen = strlen(path), seg = (size_t)(open - r);
        if (plen + seg < len) {
            memcpy(path + plen, r, seg);
            path[plen + seg] = '\0';
        }
        const char *close = strchr(open, '}');
        char name[32], text[64], msg[96];
        snprintf(name, sizeof(name), "%.*s", (int)(close - open - 1), open + 1);
        json_t *v = json_object_get(fields, name);
        if (json_is_string(v))
            strlcpy_(text, json_string_value(v), sizeof(text));
        else if (json_is_integer(v))
            snprintf(text, sizeof(text), "%lld", (long long)json_integer_value(v));
        else
            text[0] = '\0';
        if (text[0] == '\0') {
            snprintf(msg, sizeof(msg), "%s: is required", name);
            rpc_set_error(a, GRPC_STATUS_INVALID_ARGUMENT, 400, "invalid_argument", name, msg);
            return false;
        }
        /* the router's own check, before a '/' in it could change the route */
        if (strcmp(name, "room_id") == 0 && !http_valid_room_id(text)) {
            rpc_set_error(a, GRPC_STATUS_INVALID_ARGUMENT, 400, "invalid_argument", name,
                          "room_id: must match [A-Za-z0-9_.:-]{1,63}, not . or ..");
            return false;
        }
        append_segment(path, len, text);
        json_object_del(fields, name);
        r = close + 1;
    }
    return true;
}

void
rpc_request_clear(struct built *b)
{
    free(b->body);
    b->body = NULL;
    free(b->idempotency_key);
    b->idempotency_key = NULL;
    if (b->authorization != NULL) {
        explicit_bzero(b->authorization, strlen(b->authorization));
        free(b->authorization);
        b->authorization = NULL;
    }
}

/*
 * Turns the request message (wire bytes) of m into the HTTP request of m's
 * route in *b. False with a's status when the message does not parse or a
 * path field is missing.
 */
bool
rpc_to_request(const struct method *m, const uint8_t *data, size_t len,
               const grpc_metadata_array *md, struct built *b, struct answer *a)
{
    ProtobufCMessage *msg = protobuf_c_message_unpack(m->in, NULL, len, data);
    json_t *fields;
    bool ok = false;

    if (msg == NULL) {
        char text[128];
        snprintf(text, sizeof(text), "body: not a valid %s message", m->in->name);
        rpc_set_error(a, GRPC_STATUS_INVALID_ARGUMENT, 400, "invalid_argument", "body", text);
        return false;
    }
    fields = pbjson_from_message(msg, false);
    protobuf_c_message_free_unpacked(msg, NULL);
    memset(&b->req, 0, sizeof(b->req));
    b->req.listener = m->on;
    b->req.method = m->http_method;
    b->req.path = b->path;
    b->authorization = rpc_md_dup(md, "authorization");
    b->req.authorization = b->authorization;
    switch (md_get(md, "x-app-code", b->app, sizeof(b->app))) {
    case 1:
        b->req.app_header = b->app;
        break;
    case -1:
        rpc_set_error(a, GRPC_STATUS_INVALID_ARGUMENT, 400, "invalid_argument", "X-App-Code",
                      "X-App-Code: must match [a-z0-9_-]{1,32}");
        goto out;
    default:
        break;
    }
    if (!build_path(m, fields, b->path, sizeof(b->path), a))
        goto out;
    if (strcmp(m->http_method, "GET") == 0) {
        /* what is left are the query arguments (ListRooms: cursor, limit) */
        for (unsigned i = 0; i < m->in->n_fields && b->q.n < 4; i++) {
            json_t *v = json_object_get(fields, m->in->fields[i].name);
            if (!json_is_integer(v))
                continue;
            b->q.name[b->q.n] = m->in->fields[i].name; /* static */
            snprintf(b->q.value[b->q.n], sizeof(b->q.value[0]), "%lld",
                     (long long)json_integer_value(v));
            b->q.n++;
        }
        b->req.query = query_get;
        b->req.query_ctx = &b->q;
        b->req.body = "";
    } else {
        /* the handler makes it the command_id, as HTTP's Idempotency-Key */
        b->idempotency_key = rpc_md_dup(md, "idempotency-key");
        b->req.idempotency_key = b->idempotency_key;
        b->req.content_type = "application/json";
        b->body = json_dumps(fields, JSON_COMPACT);
        if (b->body == NULL)
            abort();
        b->req.body = b->body;
        b->req.body_len = strlen(b->body);
    }
    ok = true;
out:
    json_decref(fields);
    return ok;
}

/* ==== HTTP response -> reply ==== */

void
rpc_reply(const struct method *m, const struct http_response *resp, struct answer *a)
{
    json_t *j = resp->body ? json_loads(resp->body, 0, NULL) : NULL;

    for (int i = 0; i < resp->nheaders; i++) {
        if (strcmp(resp->headers[i].name, "Idempotent-Replay") == 0)
            a->replay = true;
        else if (strcmp(resp->headers[i].name, "X-Room-Owner") == 0)
            strlcpy_(a->owner, resp->headers[i].value, sizeof(a->owner));
    }
    if (resp->status >= 200 && resp->status < 300 && j != NULL) {
        a->status = GRPC_STATUS_OK;
        a->body = pbjson_to_wire(j, m->out, &a->body_len);
    } else {
        json_t *e = json_object_get(j, "error");
        const char *code = json_string_value(json_object_get(e, "code"));
        const char *msg = json_string_value(json_object_get(e, "message"));
        const char *field = json_string_value(json_object_get(e, "field"));
        code = code ? code : "internal";
        rpc_set_error(a, status_of(resp->status, code), resp->status, code, field,
                      msg ? msg : "no answer");
    }
    json_decref(j);
}

/* ==== The message's strings ==== */

/* Reads a varint at p[*i..len) into *v; false when it does not end in it. */
static bool
varint(const uint8_t *p, size_t len, size_t *i, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; *i < len && shift < 64; shift += 7) {
        uint8_t c = p[(*i)++];
        *v |= (uint64_t)(c & 0x7f) << shift;
        if ((c & 0x80) == 0)
            return true;
    }
    return false;
}

/* True when the bytes p[0..n) are a string field's value roomd takes: valid
 * UTF-8 (jansson's check, json_stringn) with no NUL byte. */
static bool
text_ok(const uint8_t *p, size_t n)
{
    json_t *j;

    if (memchr(p, '\0', n) != NULL || (j = json_stringn((const char *)p, n)) == NULL)
        return false;
    json_decref(j);
    return true;
}

/* Checks every string field of message type d in its wire bytes p[0..len)
 * (and of the messages inside it), as HTTP refuses such JSON: false with
 * the field's name in *bad when one holds a NUL byte or is not valid UTF-8
 * (protobuf-c would cut it at the NUL: "r1\0x" would be room r1). Other
 * malformations are left to protobuf_c_message_unpack. */
bool
rpc_strings_ok(const ProtobufCMessageDescriptor *d, const uint8_t *p, size_t len, const char **bad)
{
    size_t i = 0;
    uint64_t tag, n;

    while (i < len) {
        if (!varint(p, len, &i, &tag))
            return true;
        switch (tag & 7) {
        case 0:
            if (!varint(p, len, &i, &n))
                return true;
            break;
        case 1:
            i += 8;
            break;
        case 5:
            i += 4;
            break;
        case 2: {
            const ProtobufCFieldDescriptor *f =
                tag >> 3 <= UINT32_MAX
                    ? protobuf_c_message_descriptor_get_field(d, (unsigned)(tag >> 3))
                    : NULL;
            if (!varint(p, len, &i, &n) || n > len - i)
                return true;
            if (f != NULL && f->type == PROTOBUF_C_TYPE_STRING && !text_ok(p + i, n)) {
                *bad = f->name;
                return false;
            }
            if (f != NULL && f->type == PROTOBUF_C_TYPE_MESSAGE &&
                !rpc_strings_ok(f->descriptor, p + i, n, bad))
                return false;
            i += n;
            break;
        }
        default:
            return true;
        }
    }
    return true;
}
