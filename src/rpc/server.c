/* SPDX-License-Identifier: Apache-2.0 */
/*
 * server.c: the gRPC API (server.h). Read top-down:
 *   methods[]      the RPCs and the HTTP route each one is
 *   worker_main    one thread: request a call, serve it, repeat
 *   serve          one call: receive, to_request, router_handle, reply
 *   to_request     message + metadata -> struct http_request
 *   reply          struct http_response -> reply message or status + details
 * Status mapping (docs/grpc.md): status_of().
 */
#include "rpc/server.h"

#include "conf/conf.h"
#include "core/err.h"
#include "core/log.h"
#include "core/xmalloc.h"
#include "http/router.h"
#include "metrics/metrics.h"
#include "room/command.h"
#include "room_service.pb-c.h"
#include "peer/grpc_peer.h"
#include "peer/pbjson.h"
#include "rpc_status.pb-c.h"

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SHUTDOWN_GRACE_MS 5000

/* ==== The RPCs: each is the HTTP route of the same name ==== */

struct method {
    const char *path; /* "/roomd.v1.RoomService/JoinRoom" */
    const ProtobufCMessageDescriptor *in, *out;
    const char *http_method; /* "POST" | "GET" */
    const char *route;       /* "{room_id}" and "{uid}" come from the message's fields */
    enum http_listener on;   /* whose auth: a JWT (public) or the admin token (internal) */
};

#define SVC "/roomd.v1.RoomService/"
#define ISVC "/roomd.v1.RoomInternalService/"

/* A room command of a JWT: POSTed, answered by a roomd.v1.CommandReply. */
#define COMMAND(name, in, route)                                                                   \
    {                                                                                              \
        SVC name, &in, &roomd__v1__command_reply__descriptor, "POST", route, HTTP_PUBLIC           \
    }

static const struct method methods[] = {
    COMMAND("CreateRoom", roomd__v1__create_room_request__descriptor, "/v1/rooms"),
    COMMAND("JoinRoom", roomd__v1__join_room_request__descriptor, "/v1/rooms/{room_id}/join"),
    COMMAND("LeaveRoom", roomd__v1__leave_room_request__descriptor, "/v1/rooms/{room_id}/leave"),
    COMMAND("MicUp", roomd__v1__mic_up_request__descriptor, "/v1/rooms/{room_id}/mic/up"),
    COMMAND("MicDown", roomd__v1__mic_down_request__descriptor, "/v1/rooms/{room_id}/mic/down"),
    COMMAND("SendGift", roomd__v1__send_gift_request__descriptor, "/v1/rooms/{room_id}/gifts"),
    COMMAND("KickUser", roomd__v1__kick_user_request__descriptor, "/v1/rooms/{room_id}/kick"),
    COMMAND("CloseRoom", roomd__v1__close_room_request__descriptor, "/v1/rooms/{room_id}/close"),
    {ISVC "LaunchRocket", &roomd__v1__launch_rocket_request__descriptor,
     &roomd__v1__command_reply__descriptor, "POST", "/internal/v1/rooms/{room_id}/rocket/launch",
     HTTP_ADMIN},
    {SVC "GetRoom", &roomd__v1__get_room_request__descriptor, &roomd__v1__room__descriptor, "GET",
     "/v1/rooms/{room_id}", HTTP_PUBLIC},
    {SVC "ListRooms", &roomd__v1__list_rooms_request__descriptor, &roomd__v1__room_list__descriptor,
     "GET", "/v1/rooms", HTTP_PUBLIC},
    {SVC "GetPresence", &roomd__v1__get_presence_request__descriptor,
     &roomd__v1__presence__descriptor, "GET", "/v1/users/{uid}/presence", HTTP_PUBLIC},
};
#define NMETHODS (sizeof(methods) / sizeof(methods[0]))

#define NCODES 17 /* gRPC status codes 0..16 */

struct rpc_server {
    const struct http_deps *d; /* NULL until rpc_server_start */
    const char *listen;        /* conf->grpc.listen, borrowed */
    grpc_server *server;
    int nworkers;
    struct worker *workers;
    /* roomd_grpc_calls_total{method,code}; row NMETHODS counts unknown methods */
    _Atomic uint64_t calls[NMETHODS + 1][NCODES];
    bool collecting;
};

struct worker {
    struct rpc_server *s;
    grpc_completion_queue *cq;
    pthread_t thread;
    bool started;
};

/* ==== One call's pieces ==== */

/* The answer being built: status, details, metadata. */
struct answer {
    grpc_status_code status;
    char message[512];
    uint8_t *body; /* packed reply message (OK only), malloc'd */
    size_t body_len;
    uint8_t *details; /* packed google.rpc.Status (errors), malloc'd */
    size_t details_len;
    bool replay;
    char owner[160];
};

/* The query arguments of a GET route (ListRooms): name -> text. */
struct query {
    const char *name[4];
    char value[4][32];
    int n;
};

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
static char *
md_dup(const grpc_metadata_array *md, const char *key)
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
static void
set_error(struct answer *a, grpc_status_code st, int http_status, const char *code,
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
            set_error(a, GRPC_STATUS_INVALID_ARGUMENT, 400, "invalid_argument", name, msg);
            return false;
        }
        /* the router's own check, before a '/' in it could change the route */
        if (strcmp(name, "room_id") == 0 && !http_valid_room_id(text)) {
            set_error(a, GRPC_STATUS_INVALID_ARGUMENT, 400, "invalid_argument", name,
                      "room_id: must match [A-Za-z0-9_.:-]{1,63}, not . or ..");
            return false;
        }
        append_segment(path, len, text);
        json_object_del(fields, name);
        r = close + 1;
    }
    return true;
}

/* What to_request builds; freed by request_clear. */
struct built {
    struct http_request req;
    char path[256];
    char app[64];          /* X-App-Code, validated by the router */
    char *authorization;   /* the authorization metadata, malloc'd; never logged */
    char *idempotency_key; /* the idempotency-key metadata, malloc'd */
    char *body;
    struct query q;
};

static void
request_clear(struct built *b)
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
static bool
to_request(const struct method *m, const uint8_t *data, size_t len, const grpc_metadata_array *md,
           struct built *b, struct answer *a)
{
    ProtobufCMessage *msg = protobuf_c_message_unpack(m->in, NULL, len, data);
    json_t *fields;
    bool ok = false;

    if (msg == NULL) {
        char text[128];
        snprintf(text, sizeof(text), "body: not a valid %s message", m->in->name);
        set_error(a, GRPC_STATUS_INVALID_ARGUMENT, 400, "invalid_argument", "body", text);
        return false;
    }
    fields = pbjson_from_message(msg, false);
    protobuf_c_message_free_unpacked(msg, NULL);
    memset(&b->req, 0, sizeof(b->req));
    b->req.listener = m->on;
    b->req.method = m->http_method;
    b->req.path = b->path;
    b->authorization = md_dup(md, "authorization");
    b->req.authorization = b->authorization;
    switch (md_get(md, "x-app-code", b->app, sizeof(b->app))) {
    case 1:
        b->req.app_header = b->app;
        break;
    case -1:
        set_error(a, GRPC_STATUS_INVALID_ARGUMENT, 400, "invalid_argument", "X-App-Code",
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
        b->idempotency_key = md_dup(md, "idempotency-key");
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

static void
reply(const struct method *m, const struct http_response *resp, struct answer *a)
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
        set_error(a, status_of(resp->status, code), resp->status, code, field,
                  msg ? msg : "no answer");
    }
    json_decref(j);
}

/* ==== Serving one call ==== */

/* Runs one batch of ops on call and waits for it on cq. */
static bool
run_batch(grpc_call *call, grpc_completion_queue *cq, grpc_op *ops, size_t n)
{
    if (grpc_call_start_batch(call, ops, n, ops, NULL) != GRPC_CALL_OK)
        return false;
    grpc_event e = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    return e.type == GRPC_OP_COMPLETE && e.success;
}

static bool
deadline_passed(gpr_timespec deadline)
{
    return gpr_time_cmp(gpr_now(deadline.clock_type), deadline) >= 0;
}

static const struct method *
find_method(grpc_slice path)
{
    for (size_t i = 0; i < NMETHODS; i++)
        if (GRPC_SLICE_LENGTH(path) == strlen(methods[i].path) &&
            memcmp(GRPC_SLICE_START_PTR(path), methods[i].path, GRPC_SLICE_LENGTH(path)) == 0)
            return &methods[i];
    return NULL;
}

/* Reads the one request message of call into a malloc'd buffer; NULL when
 * the client sent none (or went away). */
static uint8_t *
receive(grpc_call *call, grpc_completion_queue *cq, size_t *len)
{
    grpc_byte_buffer *bb = NULL;
    grpc_byte_buffer_reader rd;
    grpc_op op;
    uint8_t *out;

    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &bb;
    if (!run_batch(call, cq, &op, 1) || bb == NULL)
        return NULL;
    grpc_byte_buffer_reader_init(&rd, bb);
    grpc_slice all = grpc_byte_buffer_reader_readall(&rd);
    grpc_byte_buffer_reader_destroy(&rd);
    grpc_byte_buffer_destroy(bb);
    *len = GRPC_SLICE_LENGTH(all);
    out = xmalloc(*len + 1);
    memcpy(out, GRPC_SLICE_START_PTR(all), *len);
    grpc_slice_unref(all);
    return out;
}

/* Sends a's answer: initial metadata, the message (OK), the status with its
 * trailers, and waits for the client's close. */
static void
send_answer(grpc_call *call, grpc_completion_queue *cq, const struct answer *a)
{
    grpc_metadata initial[1], trailing[2];
    size_t ninitial = 0, ntrailing = 0;
    grpc_byte_buffer *bb = NULL;
    grpc_slice details = grpc_slice_from_copied_string(a->message);
    grpc_op ops[4];
    size_t nops = 0;
    int cancelled = 0;

    memset(initial, 0, sizeof(initial));
    memset(trailing, 0, sizeof(trailing));
    memset(ops, 0, sizeof(ops));
    if (a->replay) {
        initial[ninitial].key = grpc_slice_from_static_string("idempotent-replay");
        initial[ninitial++].value = grpc_slice_from_static_string("true");
    }
    if (a->owner[0] != '\0') {
        trailing[ntrailing].key = grpc_slice_from_static_string("x-room-owner");
        trailing[ntrailing++].value = grpc_slice_from_copied_string(a->owner);
    }
    if (a->details != NULL) {
        trailing[ntrailing].key = grpc_slice_from_static_string("grpc-status-details-bin");
        trailing[ntrailing++].value =
            grpc_slice_from_copied_buffer((const char *)a->details, a->details_len);
    }
    ops[nops].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[nops].data.send_initial_metadata.count = ninitial;
    ops[nops++].data.send_initial_metadata.metadata = initial;
    if (a->status == GRPC_STATUS_OK) {
        grpc_slice s = grpc_slice_from_copied_buffer((const char *)a->body, a->body_len);
        bb = grpc_raw_byte_buffer_create(&s, 1);
        grpc_slice_unref(s);
        ops[nops].op = GRPC_OP_SEND_MESSAGE;
        ops[nops++].data.send_message.send_message = bb;
    }
    ops[nops].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[nops].data.send_status_from_server.status = a->status;
    ops[nops].data.send_status_from_server.status_details = &details;
    ops[nops].data.send_status_from_server.trailing_metadata_count = ntrailing;
    ops[nops++].data.send_status_from_server.trailing_metadata = trailing;
    ops[nops].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[nops++].data.recv_close_on_server.cancelled = &cancelled;
    run_batch(call, cq, ops, nops);
    for (size_t i = 0; i < ntrailing; i++)
        grpc_slice_unref(trailing[i].value);
    grpc_slice_unref(details);
    if (bb != NULL)
        grpc_byte_buffer_destroy(bb);
}

/*
 * Serves one call. A deadline that passed before the command starts answers
 * DEADLINE_EXCEEDED and runs nothing; one that passes while it runs does not
 * stop it: the command commits or not as a whole, the client sees
 * DEADLINE_EXCEEDED, and a retry with the same command_id tells which.
 */
static void
serve(struct rpc_server *s, grpc_completion_queue *cq, grpc_call *call, const grpc_call_details *cd,
      const grpc_metadata_array *md)
{
    const struct method *m = find_method(cd->method);
    struct answer a;
    struct built b;
    struct http_response resp;
    uint8_t *data = NULL;
    size_t len = 0;

    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    memset(&resp, 0, sizeof(resp));
    data = receive(call, cq, &len);
    if (m == NULL) {
        char *name = grpc_slice_to_c_string(cd->method);
        snprintf(a.message, sizeof(a.message), "no method %.200s", name);
        gpr_free(name);
        set_error(&a, GRPC_STATUS_UNIMPLEMENTED, 404, "not_found", NULL, a.message);
    } else if (data == NULL) {
        set_error(&a, GRPC_STATUS_INVALID_ARGUMENT, 400, "invalid_argument", "body",
                  "body: no request message");
    } else if (deadline_passed(cd->deadline)) {
        set_error(&a, GRPC_STATUS_DEADLINE_EXCEEDED, 504, "deadline_exceeded", NULL,
                  "the deadline passed before the command started: nothing was done");
    } else if (to_request(m, data, len, md, &b, &a)) {
        router_handle(s->d, &b.req, &resp);
        reply(m, &resp, &a);
    }
    send_answer(call, cq, &a);
    if ((unsigned)a.status < NCODES)
        atomic_fetch_add(&s->calls[m != NULL ? (size_t)(m - methods) : NMETHODS][a.status], 1);
    http_response_clear(&resp);
    request_clear(&b);
    free(data);
    free(a.body);
    free(a.details);
}

/* One worker: asks for the next call on its own queue and serves it, until
 * the server shuts down (the request then completes unsuccessfully). */
static void *
worker_main(void *arg)
{
    struct worker *w = arg;

    for (;;) {
        grpc_call *call = NULL;
        grpc_call_details cd;
        grpc_metadata_array md;

        grpc_call_details_init(&cd);
        grpc_metadata_array_init(&md);
        bool got = grpc_server_request_call(w->s->server, &call, &cd, &md, w->cq, w->cq, w) ==
                   GRPC_CALL_OK;
        if (got) {
            grpc_event e =
                grpc_completion_queue_next(w->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
            got = e.type == GRPC_OP_COMPLETE && e.success;
        }
        if (got)
            serve(w->s, w->cq, call, &cd, &md);
        if (call != NULL)
            grpc_call_unref(call);
        grpc_call_details_destroy(&cd);
        grpc_metadata_array_destroy(&md);
        if (!got)
            return NULL;
    }
}

/* ==== Open / close ==== */

/* The /metrics lines: calls by method and status, the ones seen. */
static void
collect(void *arg, struct metrics_text *t)
{
    struct rpc_server *s = arg;
    char labels[128];

    metrics_family(t, "roomd_grpc_calls_total", "counter",
                   "gRPC calls answered, by method and status code");
    for (size_t i = 0; i <= NMETHODS; i++) {
        const char *name = i < NMETHODS ? strrchr(methods[i].path, '/') + 1 : "unknown";
        for (int c = 0; c < NCODES; c++) {
            uint64_t v = atomic_load(&s->calls[i][c]);
            if (v == 0)
                continue;
            snprintf(labels, sizeof(labels), "method=\"%s\",code=\"%s\"", name,
                     grpc_peer_status_name(c));
            metrics_count(t, "roomd_grpc_calls_total", labels, v);
        }
    }
}

int
rpc_server_bind(struct rpc_server **out, const struct conf *conf, char *err, size_t errlen)
{
    struct rpc_server *s;
    grpc_server_credentials *creds;
    grpc_arg args[1];
    grpc_channel_args chargs;
    int port;

    *out = NULL;
    if (conf->grpc.listen == NULL || conf->grpc.listen[0] == '\0')
        return 0;
    grpc_init();
    s = xcalloc(1, sizeof(*s));
    s->listen = conf->grpc.listen;
    s->nworkers = conf->grpc.workers;
    s->workers = xcalloc((size_t)s->nworkers, sizeof(*s->workers));
    memset(args, 0, sizeof(args));
    args[0].type = GRPC_ARG_INTEGER;
    args[0].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[0].value.integer = (int)conf->http.max_body_bytes; /* above: RESOURCE_EXHAUSTED */
    chargs.num_args = 1;
    chargs.args = args;
    s->server = grpc_server_create(&chargs, NULL);
    for (int i = 0; i < s->nworkers; i++) {
        s->workers[i].s = s;
        s->workers[i].cq = grpc_completion_queue_create_for_next(NULL);
        grpc_server_register_completion_queue(s->server, s->workers[i].cq, NULL);
    }
    creds = grpc_insecure_server_credentials_create();
    port = grpc_server_add_http2_port(s->server, conf->grpc.listen, creds); /* binds, listens */
    grpc_server_credentials_release(creds);
    if (port <= 0) {
        snprintf(err, errlen, "grpc.listen %s: cannot bind", conf->grpc.listen);
        rpc_server_close(s);
        return ROOMD_EUNAVAIL;
    }
    *out = s;
    return 0;
}

int
rpc_server_start(struct rpc_server *s, const struct http_deps *d, char *err, size_t errlen)
{
    if (s == NULL)
        return 0;
    s->d = d;
    grpc_server_start(s->server);
    for (int i = 0; i < s->nworkers; i++) {
        if (pthread_create(&s->workers[i].thread, NULL, worker_main, &s->workers[i]) != 0) {
            snprintf(err, errlen, "grpc: cannot start worker thread %d", i);
            return ROOMD_EINTERNAL;
        }
        s->workers[i].started = true;
    }
    s->collecting = metrics_add_collector(collect, s) == 0;
    log_info("rpc", "gRPC API serving", "listen=%s workers=%d", s->listen, s->nworkers);
    return 0;
}

void
rpc_server_close(struct rpc_server *s)
{
    grpc_completion_queue *done;
    grpc_event e;

    if (s == NULL)
        return;
    if (s->collecting)
        metrics_remove_collector(collect, s);
    done = grpc_completion_queue_create_for_pluck(NULL);
    grpc_server_shutdown_and_notify(s->server, done, s);
    e = grpc_completion_queue_pluck(
        done, s,
        gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                     gpr_time_from_millis(SHUTDOWN_GRACE_MS, GPR_TIMESPAN)),
        NULL);
    if (e.type == GRPC_QUEUE_TIMEOUT) {
        grpc_server_cancel_all_calls(s->server);
        grpc_completion_queue_pluck(done, s, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    }
    for (int i = 0; i < s->nworkers; i++)
        if (s->workers[i].started)
            pthread_join(s->workers[i].thread, NULL);
    grpc_server_destroy(s->server);
    for (int i = 0; i < s->nworkers; i++) {
        grpc_completion_queue_shutdown(s->workers[i].cq);
        while (
            grpc_completion_queue_next(s->workers[i].cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL)
                .type != GRPC_QUEUE_SHUTDOWN)
            ;
        grpc_completion_queue_destroy(s->workers[i].cq);
    }
    grpc_completion_queue_shutdown(done);
    grpc_completion_queue_destroy(done);
    free(s->workers);
    free(s);
    grpc_shutdown_blocking();
}
