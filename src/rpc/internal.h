/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rpc/internal.h: private to src/rpc. What server.c (the RPCs, serving a
 * call, open/close) and translate.c (a call's message and metadata -> the
 * HTTP request of its route, the HTTP response -> the reply or a status
 * with details) share: one RPC's description, the answer being built, the
 * request built for the router.
 */
#ifndef ROOMD_RPC_INTERNAL_H
#define ROOMD_RPC_INTERNAL_H

#include "http/router.h"

#include <grpc/grpc.h>
#include <protobuf-c/protobuf-c.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One RPC: the HTTP route of the same name (server.c's methods[]). */
struct method {
    const char *path; /* "/roomd.v1.RoomService/JoinRoom" */
    const ProtobufCMessageDescriptor *in, *out;
    const char *http_method; /* "POST" | "GET" */
    const char *route;       /* "{room_id}" and "{uid}" come from the message's fields */
    enum http_listener on;   /* whose auth: a JWT (public) or the admin token (internal) */
};

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

/* What rpc_to_request builds; freed by rpc_request_clear. */
struct built {
    struct http_request req;
    char path[256];
    char app[64];          /* X-App-Code, validated by the router */
    char *authorization;   /* the authorization metadata, malloc'd; never logged */
    char *idempotency_key; /* the idempotency-key metadata, malloc'd */
    char *body;
    struct query q;
};

/* Sets a's error: status st, message, and the details google.rpc.Status with
 * an ErrorInfo (reason code; metadata http_status, field, owner) and, with a
 * field, a BadRequest. field may be NULL. */
void rpc_set_error(struct answer *a, grpc_status_code st, int http_status, const char *code,
                   const char *field, const char *message);
/* A copy of the value of metadata key (lower case; malloc'd), NULL when absent. */
char *rpc_md_dup(const grpc_metadata_array *md, const char *key);
/* Checks every string field of message type d in its wire bytes p[0..len):
 * false with the field's name in *bad when one holds a NUL byte or is not
 * valid UTF-8. */
bool rpc_strings_ok(const ProtobufCMessageDescriptor *d, const uint8_t *p, size_t len,
                    const char **bad);
/* The request message (wire bytes) of m and the call's metadata -> the HTTP
 * request of m's route in *b (zeroed by the caller; rpc_request_clear frees
 * it). False with a's status when the message does not parse or a path
 * field is missing. */
bool rpc_to_request(const struct method *m, const uint8_t *data, size_t len,
                    const grpc_metadata_array *md, struct built *b, struct answer *a);
void rpc_request_clear(struct built *b);
/* The router's answer resp -> a: the reply message (2xx) or the status,
 * message and details of its error; Idempotent-Replay and X-Room-Owner
 * carried over. */
void rpc_reply(const struct method *m, const struct http_response *resp, struct answer *a);

/* A WatchRoom call (watch.c) after its headers were authenticated and its
 * message received and built into b (the GET events route of m). */
struct watch_call {
    const struct http_deps *d;
    const struct method *m; /* WatchRoom's row of methods[] */
    grpc_call *call;
    grpc_completion_queue *cq; /* the worker's: only this call's events */
    struct built *b;
    int64_t poll_ms;             /* grpc.watch.poll_interval */
    int64_t send_timeout_ms;     /* one message's send (grpc.call_timeout) */
    gpr_timespec deadline;       /* the client's (monotonic; infinite when none) */
    const atomic_bool *stopping; /* rpc_server_close began */
    _Atomic uint64_t *events;    /* roomd_grpc_watch_events_total, +1 per event sent */
};
/* Serves the stream until the client goes, its deadline passes, the route
 * refuses a read (its status: 401/403/404 as the route, 410 events_purged
 * as OUT_OF_RANGE with the oldest seq) or the server stops (UNAVAILABLE);
 * sends the status itself. a: the status it ended with (CANCELLED when the
 * client went away). Returns true; false (nothing sent, a's status to send)
 * when the stream could not start. Thread: the worker's; blocks for the
 * stream's life. */
bool rpc_watch(const struct watch_call *w, struct answer *a);

/* now + ms on the monotonic clock (a call's or a wait's deadline). */
static inline gpr_timespec
rpc_after_ms(int64_t ms)
{
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(ms, GPR_TIMESPAN));
}

/* The earlier of a and b (both monotonic). */
static inline gpr_timespec
rpc_earlier(gpr_timespec a, gpr_timespec b)
{
    return gpr_time_cmp(a, b) <= 0 ? a : b;
}

#endif
