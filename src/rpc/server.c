/* SPDX-License-Identifier: Apache-2.0 */
/*
 * server.c: the gRPC API (server.h). Read top-down:
 *   methods[]      the RPCs and the HTTP route each one is
 *   worker_main    one thread: request a call, serve it, repeat
 *   serve          one call: authenticate (before the message), receive (by
 *                  grpc.receive_timeout), rpc_strings_ok, rpc_to_request,
 *                  router_handle, rpc_reply; every wait bounded (grpc.call_timeout)
 *   rpc_server_*   bind, start, close; the calls metric
 * translate.c turns a call into the HTTP request of its route and the
 * router's response into the reply or a status with details (internal.h);
 * its status_of() is the status mapping (docs/grpc.md).
 */
#include "rpc/server.h"

#include "rpc/internal.h"

#include "auth/throttle.h"
#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/file.h"
#include "core/log.h"
#include "core/xmalloc.h"
#include "http/router.h"
#include "metrics/metrics.h"
#include "peer/grpc_peer.h"
#include "room/command.h"
#include "room_service.pb-c.h"

#include <dlfcn.h>
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SHUTDOWN_GRACE_MS 5000
/* How long enter() waits for a place of the connection (or address) being
 * given back by a call whose answer is on its way. */
#define ENTER_WAIT_MS 100

/* ==== The RPCs: each is the HTTP route of the same name ==== */

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
    /* a server stream (watch.c): the events read, polled */
    {SVC "WatchRoom", &roomd__v1__watch_room_request__descriptor,
     &roomd__v1__room_event__descriptor, "GET", "/v1/rooms/{room_id}/events", HTTP_PUBLIC},
    {SVC "Heartbeat", &roomd__v1__heartbeat_request__descriptor,
     &roomd__v1__heartbeat_reply__descriptor, "POST", "/v1/rooms/{room_id}/heartbeat", HTTP_PUBLIC},
};
#define NMETHODS (sizeof(methods) / sizeof(methods[0]))

#define NCODES 17 /* gRPC status codes 0..16 */

struct rpc_server {
    const struct http_deps *d; /* NULL until rpc_server_start */
    const char *listen;        /* conf->grpc.listen, borrowed */
    int64_t receive_timeout_ms, call_timeout_ms;
    int max_streams; /* grpc.max_concurrent_streams: calls of one connection in workers */
    bool tls;
    pthread_mutex_t mu;  /* guards workers[].peer, addr, answering */
    pthread_cond_t left; /* a worker's call gave its place back (leave) */
    grpc_server *server;
    int nworkers;
    struct worker *workers;
    /* roomd_grpc_calls_total{method,code}; row NMETHODS counts unknown methods */
    _Atomic uint64_t calls[NMETHODS + 1][NCODES];
    bool collecting;
    /* WatchRoom (watch.c) and the per-address cap */
    int64_t watch_poll_ms;
    int watch_max;        /* grpc.watch.max_streams, at most workers - 1 */
    atomic_int watching;  /* WatchRoom streams open */
    atomic_bool stopping; /* rpc_server_close began: streams end */
    int max_per_address;  /* grpc.max_calls_per_address; 0 = none */
    _Atomic uint64_t watch_events, refused_per_address;
};

struct worker {
    struct rpc_server *s;
    grpc_completion_queue *cq;
    pthread_t thread;
    bool started;
    char peer[128]; /* the connection of the call it serves ("ipv4:1.2.3.4:5678"), "" idle */
    char addr[64];  /* its client's address ("1.2.3.4"), "" idle or unknown */
    bool answering; /* its call's answer is being sent: the place is given back soon */
};

/* ==== Serving one call ==== */

/* Runs one batch of ops on call and waits for it on cq (the worker's own:
 * only this call's events arrive there) until deadline. Past it, the call is
 * cancelled (DEADLINE_EXCEEDED to the client) and the batch's end awaited,
 * which the cancel makes prompt; *late is set then. True when the batch
 * succeeded in time. */
static bool
run_batch(grpc_call *call, grpc_completion_queue *cq, grpc_op *ops, size_t n, gpr_timespec deadline,
          bool *late)
{
    grpc_event e;

    if (grpc_call_start_batch(call, ops, n, ops, NULL) != GRPC_CALL_OK)
        return false;
    e = grpc_completion_queue_next(cq, deadline, NULL);
    if (e.type == GRPC_QUEUE_TIMEOUT) {
        grpc_call_cancel_with_status(call, GRPC_STATUS_DEADLINE_EXCEEDED,
                                     "roomd: the call took longer than its deadline", NULL);
        grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        *late = true;
        return false;
    }
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

/* Reads the one request message of call into a malloc'd buffer by
 * deadline; NULL when the client sent none, went away or was too slow
 * (*late: the call is cancelled then). */
static uint8_t *
receive(grpc_call *call, grpc_completion_queue *cq, size_t *len, gpr_timespec deadline, bool *late)
{
    grpc_byte_buffer *bb = NULL;
    grpc_byte_buffer_reader rd;
    grpc_op op;
    uint8_t *out;

    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &bb;
    if (!run_batch(call, cq, &op, 1, deadline, late) || bb == NULL) {
        if (bb != NULL)
            grpc_byte_buffer_destroy(bb);
        return NULL;
    }
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
 * trailers, and waits for the client's close, until deadline (then the call
 * is cancelled). */
static void
send_answer(grpc_call *call, grpc_completion_queue *cq, const struct answer *a,
            gpr_timespec deadline)
{
    bool late = false;
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
    run_batch(call, cq, ops, nops, deadline, &late);
    for (size_t i = 0; i < ntrailing; i++)
        grpc_slice_unref(trailing[i].value);
    grpc_slice_unref(details);
    if (bb != NULL)
        grpc_byte_buffer_destroy(bb);
}

/* The address of call's client into out ("127.0.0.1", "::1"), from gRPC's
 * peer text "ipv4:127.0.0.1:5555" / "ipv6:[::1]:5555"; "" when unknown. */
static void
peer_address(grpc_call *call, char *out, size_t len)
{
    char *peer = grpc_call_get_peer(call);
    const char *p = strchr(peer, ':'), *end;

    out[0] = '\0';
    if (p != NULL && strncmp(peer, "ip", 2) == 0) {
        p++;
        end = *p == '[' ? strchr(++p, ']') : strrchr(p, ':');
        if (end != NULL && (size_t)(end - p) < len)
            snprintf(out, len, "%.*s", (int)(end - p), p);
    }
    gpr_free(peer);
}

/* Who may call m, from the authorization metadata alone, before a worker
 * waits for the message: a valid JWT on RoomService (unless auth.mode none),
 * the admin token on RoomInternalService. False with a's UNAUTHENTICATED
 * (counted as the HTTP listener of the same role counts it); an address
 * that failed the admin token waits (auth/throttle.h: RESOURCE_EXHAUSTED).
 * The router checks again with the request (the app and uid a token may act
 * as). */
static bool
authenticated(struct rpc_server *s, const struct method *m, const grpc_metadata_array *md,
              const char *peer, struct answer *a)
{
    struct auth *au = s->d->auth;
    struct auth_principal p;
    enum auth_reason r;
    char *token;

    if (au == NULL || (m->on == HTTP_PUBLIC && auth_mode_none(au)))
        return true;
    if (m->on == HTTP_ADMIN && auth_throttle_wait_ms(s->d->admin_throttle, peer) > 0) {
        rpc_set_error(a, GRPC_STATUS_RESOURCE_EXHAUSTED, 429, "rate_limited", NULL,
                      "too many failed admin authentications from this address: retry later");
        return false;
    }
    token = rpc_md_dup(md, "authorization");
    r = m->on == HTTP_ADMIN ? auth_admin_ok(au, token) : auth_verify_bearer(au, token, &p);
    if (m->on == HTTP_ADMIN)
        auth_throttle_result(s->d->admin_throttle, peer, r == AUTH_OK);
    if (token != NULL) {
        explicit_bzero(token, strlen(token));
        free(token);
    }
    if (r == AUTH_OK)
        return true;
    auth_count(au, m->on == HTTP_ADMIN ? "admin" : "public", r);
    rpc_set_error(a, GRPC_STATUS_UNAUTHENTICATED, 401, "unauthenticated", NULL,
                  r == AUTH_MISSING ? "authorization: no token"
                                    : "authorization: not a valid token");
    return false;
}

/* Takes a place for call among the calls of its connection (its peer
 * address and port) that workers hold: false when that connection already
 * has grpc.max_concurrent_streams of them. A client that opens its streams
 * before it acknowledges the SETTINGS frame carrying that limit is held to
 * it here. With grpc.max_calls_per_address, also false (*per_address set)
 * when the calls of addr (the client's address, over all its connections)
 * already hold that many workers. leave() gives the place back. When the
 * limit is reached only by calls whose answers are being sent, it waits for
 * one of them to leave, up to ENTER_WAIT_MS: the client saw that answer and
 * opened its next call before the worker noted the end. */
static bool
enter(struct worker *w, grpc_call *call, const char *addr, bool *per_address)
{
    struct rpc_server *s = w->s;
    char *peer = grpc_call_get_peer(call);
    struct timespec until;
    bool ok;

    clock_mono_deadline(&until, ENTER_WAIT_MS);
    pthread_mutex_lock(&s->mu);
    for (;;) {
        int n = 0, na = 0, soon = 0, soon_a = 0;
        for (int i = 0; i < s->nworkers; i++) {
            bool same = s->workers[i].peer[0] != '\0' && strcmp(s->workers[i].peer, peer) == 0;
            bool from = addr[0] != '\0' && strcmp(s->workers[i].addr, addr) == 0;
            n += same;
            na += from;
            soon += same && s->workers[i].answering;
            soon_a += from && s->workers[i].answering;
        }
        *per_address = s->max_per_address > 0 && na >= s->max_per_address;
        ok = n < s->max_streams && !*per_address;
        /* A client that got its answer may open its next call before the worker that
         * sent it has given the place back (its send batch completes just after the
         * client sees the status): a client at its limit is not refused for that. A
         * call still waiting for its message or running is not waited for. */
        bool may = (n < s->max_streams || soon > 0) && (!*per_address || soon_a > 0);
        if (ok || !may || pthread_cond_timedwait(&s->left, &s->mu, &until) != 0)
            break;
    }
    if (ok) {
        strlcpy_(w->peer, peer, sizeof(w->peer));
        strlcpy_(w->addr, addr, sizeof(w->addr));
    }
    pthread_mutex_unlock(&s->mu);
    gpr_free(peer);
    return ok;
}

/* Marks w's call as answering: its answer is being sent (enter() may wait
 * for its place then). */
static void
answering(struct worker *w)
{
    pthread_mutex_lock(&w->s->mu);
    w->answering = true;
    pthread_mutex_unlock(&w->s->mu);
}

static void
leave(struct worker *w)
{
    pthread_mutex_lock(&w->s->mu);
    bool held = w->peer[0] != '\0';
    w->peer[0] = '\0';
    w->addr[0] = '\0';
    w->answering = false;
    if (held)
        pthread_cond_broadcast(&w->s->left);
    pthread_mutex_unlock(&w->s->mu);
}

static bool
is_watch(const struct method *m)
{
    return m != NULL && strcmp(m->path, SVC "WatchRoom") == 0;
}

/* Takes one of the grpc.watch.max_streams places (*held then; the caller
 * gives it back): false when all are taken. */
static bool
watch_admit(struct rpc_server *s, bool *held)
{
    if (atomic_fetch_add(&s->watching, 1) >= s->watch_max) {
        atomic_fetch_sub(&s->watching, 1);
        return false;
    }
    *held = true;
    return true;
}

/*
 * Serves one call; every wait is bounded. The call's deadline is the
 * client's, cut to grpc.call_timeout. The token is checked from the headers
 * before the message is awaited; the message must arrive within
 * grpc.receive_timeout (else the call is cancelled, DEADLINE_EXCEEDED). A
 * deadline that passed before the command starts answers DEADLINE_EXCEEDED
 * and runs nothing; one that passes while it runs does not stop it: the
 * command commits or not as a whole, the client sees DEADLINE_EXCEEDED, and
 * a retry with the same command_id tells which.
 */
static void
serve(struct worker *w, grpc_call *call, const grpc_call_details *cd, const grpc_metadata_array *md)
{
    struct rpc_server *s = w->s;
    grpc_completion_queue *cq = w->cq;
    const struct method *m = find_method(cd->method);
    gpr_timespec dl = rpc_earlier(gpr_convert_clock_type(cd->deadline, GPR_CLOCK_MONOTONIC),
                                  rpc_after_ms(s->call_timeout_ms));
    struct answer a;
    struct built b;
    struct http_response resp;
    uint8_t *data = NULL;
    size_t len = 0;
    const char *bad = NULL;
    bool late = false, per_address = false, watch = is_watch(m), watching = false;
    char peer[64];

    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    memset(&resp, 0, sizeof(resp));
    peer_address(call, peer, sizeof(peer));
    if (m == NULL) {
        char *name = grpc_slice_to_c_string(cd->method);
        snprintf(a.message, sizeof(a.message), "no method %.200s", name);
        gpr_free(name);
        rpc_set_error(&a, GRPC_STATUS_UNIMPLEMENTED, 404, "not_found", NULL, a.message);
    } else if (!authenticated(s, m, md, peer, &a)) {
        /* refused from the headers: no worker waits for a message */
    } else if (!enter(w, call, peer, &per_address)) {
        if (per_address)
            atomic_fetch_add(&s->refused_per_address, 1);
        rpc_set_error(&a, GRPC_STATUS_RESOURCE_EXHAUSTED, 429, "rate_limited", NULL,
                      per_address
                          ? "too many calls open from this address (grpc.max_calls_per_address)"
                          : "too many calls open on this connection (grpc.max_concurrent_streams)");
    } else if (watch && !watch_admit(s, &watching)) {
        rpc_set_error(&a, GRPC_STATUS_RESOURCE_EXHAUSTED, 429, "rate_limited", NULL,
                      "too many WatchRoom streams open on this node (grpc.watch.max_streams)");
    } else if ((data = receive(call, cq, &len, rpc_earlier(dl, rpc_after_ms(s->receive_timeout_ms)),
                               &late)) == NULL) {
        if (late)
            rpc_set_error(&a, GRPC_STATUS_DEADLINE_EXCEEDED, 504, "deadline_exceeded", NULL,
                          "no request message within grpc.receive_timeout");
        else
            rpc_set_error(&a, GRPC_STATUS_INVALID_ARGUMENT, 400, "invalid_argument", "body",
                          "body: no request message");
    } else if (deadline_passed(dl)) {
        rpc_set_error(&a, GRPC_STATUS_DEADLINE_EXCEEDED, 504, "deadline_exceeded", NULL,
                      "the deadline passed before the command started: nothing was done");
    } else if (!rpc_strings_ok(m->in, data, len, &bad)) {
        char text[160];
        snprintf(text, sizeof(text), "%s: must be valid UTF-8 without NUL bytes", bad);
        rpc_set_error(&a, GRPC_STATUS_INVALID_ARGUMENT, 400, "invalid_argument", bad, text);
    } else if (rpc_to_request(m, data, len, md, &b, &a)) {
        b.req.peer = peer;
        if (watch) { /* the stream answers itself; its deadline is the client's alone */
            struct watch_call wc = {
                .d = s->d,
                .m = m,
                .call = call,
                .cq = cq,
                .b = &b,
                .poll_ms = s->watch_poll_ms,
                .send_timeout_ms = s->call_timeout_ms,
                .deadline = gpr_convert_clock_type(cd->deadline, GPR_CLOCK_MONOTONIC),
                .stopping = &s->stopping,
                .events = &s->watch_events,
            };
            late = rpc_watch(&wc, &a); /* true: it sent its status itself */
        } else {
            router_handle(s->d, &b.req, &resp);
            rpc_reply(m, &resp, &a);
        }
    }
    if (watching)
        atomic_fetch_sub(&s->watching, 1);
    /* the answer may wait past a deadline the command ran over, but not for long */
    if (!late) {
        answering(w);
        send_answer(call, cq, &a,
                    gpr_time_cmp(dl, rpc_after_ms(s->receive_timeout_ms)) > 0
                        ? dl
                        : rpc_after_ms(s->receive_timeout_ms));
    }
    leave(w);
    if ((unsigned)a.status < NCODES)
        atomic_fetch_add(&s->calls[m != NULL ? (size_t)(m - methods) : NMETHODS][a.status], 1);
    http_response_clear(&resp);
    rpc_request_clear(&b);
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
            serve(w, call, &cd, &md);
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
    metrics_family(t, "roomd_grpc_watch_streams", "gauge", "WatchRoom streams open");
    metrics_count(t, "roomd_grpc_watch_streams", "", (uint64_t)atomic_load(&s->watching));
    metrics_family(t, "roomd_grpc_watch_events_total", "counter",
                   "events sent on WatchRoom streams");
    metrics_count(t, "roomd_grpc_watch_events_total", "", atomic_load(&s->watch_events));
    metrics_family(t, "roomd_grpc_refused_per_address_total", "counter",
                   "calls refused by grpc.max_calls_per_address");
    metrics_count(t, "roomd_grpc_refused_per_address_total", "",
                  atomic_load(&s->refused_per_address));
}

/* The listener's credentials: TLS with grpc.tls.cert_file/key_file (read
 * here), else plaintext. 0, or ROOMD_EINVAL with err naming the key. */
static int
server_credentials(const struct conf *conf, grpc_server_credentials **creds, char *err,
                   size_t errlen)
{
    grpc_ssl_pem_key_cert_pair pair;
    char *cert, *key;
    size_t len;

    *creds = NULL;
    if (conf->grpc.tls_cert_file == NULL || conf->grpc.tls_cert_file[0] == '\0') {
        *creds = grpc_insecure_server_credentials_create();
        return 0;
    }
    if ((cert = file_read_text("grpc.tls.cert_file", conf->grpc.tls_cert_file, 1 << 20, &len, err,
                               errlen)) == NULL)
        return ROOMD_EINVAL;
    if ((key = file_read_text("grpc.tls.key_file", conf->grpc.tls_key_file, 1 << 20, &len, err,
                              errlen)) == NULL) {
        free(cert);
        return ROOMD_EINVAL;
    }
    pair.private_key = key;
    pair.cert_chain = cert;
    *creds = grpc_ssl_server_credentials_create_ex(NULL, &pair, 1,
                                                   GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE, NULL);
    explicit_bzero(key, strlen(key));
    free(key);
    free(cert);
    if (*creds == NULL) {
        snprintf(err, errlen, "grpc.tls.cert_file: not a usable PEM certificate and key");
        return ROOMD_EINVAL;
    }
    return 0;
}

/* Debian's Abseil is built without NDEBUG, so every absl::Mutex lock of gRPC
 * core records the lock order for its deadlock detector (GraphCycles: 2-3%
 * of roomd's CPU per gRPC call, 7% of a gRPC client's). NDEBUG builds of
 * Abseil have it off; so does this, through the C++ setter found at run time
 * (absl::SetMutexDeadlockDetectionMode(kIgnore); kIgnore is 0), when it is
 * there. */
void
rpc_absl_deadlock_detection_off(void)
{
    static const char *const names[] = {
        "_ZN4absl7debian329SetMutexDeadlockDetectionModeENS0_15OnDeadlockCycleE",
        "_ZN4absl29SetMutexDeadlockDetectionModeENS_15OnDeadlockCycleE",
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        void *f = dlsym(RTLD_DEFAULT, names[i]);
        if (f != NULL) {
            void (*set)(int);
            memcpy(&set, &f, sizeof(set));
            set(0);
            return;
        }
    }
}

int
rpc_server_bind(struct rpc_server **out, const struct conf *conf, char *err, size_t errlen)
{
    struct rpc_server *s;
    grpc_server_credentials *creds;
    grpc_arg args[2];
    grpc_channel_args chargs;
    int port;

    *out = NULL;
    if (conf->grpc.listen == NULL || conf->grpc.listen[0] == '\0')
        return 0;
    rpc_absl_deadlock_detection_off();
    grpc_init();
    s = xcalloc(1, sizeof(*s));
    s->listen = conf->grpc.listen;
    s->nworkers = conf->grpc.workers;
    s->receive_timeout_ms = conf->grpc.receive_timeout_ms;
    s->call_timeout_ms = conf->grpc.call_timeout_ms;
    s->max_streams = conf->grpc.max_concurrent_streams;
    s->watch_poll_ms = conf->grpc.watch_poll_ms;
    s->watch_max =
        conf->grpc.watch_max_streams < s->nworkers ? conf->grpc.watch_max_streams : s->nworkers - 1;
    s->max_per_address = conf->grpc.max_calls_per_address;
    pthread_mutex_init(&s->mu, NULL);
    clock_cond_init(&s->left);
    s->workers = xcalloc((size_t)s->nworkers, sizeof(*s->workers));
    memset(args, 0, sizeof(args));
    args[0].type = GRPC_ARG_INTEGER;
    args[0].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[0].value.integer = (int)conf->http.max_body_bytes; /* above: RESOURCE_EXHAUSTED */
    args[1].type = GRPC_ARG_INTEGER;
    args[1].key = (char *)GRPC_ARG_MAX_CONCURRENT_STREAMS; /* one connection: so many workers */
    args[1].value.integer = conf->grpc.max_concurrent_streams;
    chargs.num_args = 2;
    chargs.args = args;
    s->server = grpc_server_create(&chargs, NULL);
    for (int i = 0; i < s->nworkers; i++) {
        s->workers[i].s = s;
        s->workers[i].cq = grpc_completion_queue_create_for_next(NULL);
        grpc_server_register_completion_queue(s->server, s->workers[i].cq, NULL);
    }
    if (server_credentials(conf, &creds, err, errlen) != 0) {
        rpc_server_close(s);
        return ROOMD_EINVAL;
    }
    s->tls = conf->grpc.tls_cert_file != NULL && conf->grpc.tls_cert_file[0] != '\0';
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
    log_info("rpc", "gRPC API serving", "listen=%s workers=%d tls=%s", s->listen, s->nworkers,
             s->tls ? "on" : "off");
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
    atomic_store(&s->stopping, true); /* WatchRoom streams end at their next poll */
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
    pthread_cond_destroy(&s->left);
    pthread_mutex_destroy(&s->mu);
    free(s->workers);
    free(s);
    grpc_shutdown_blocking();
}
