/* SPDX-License-Identifier: Apache-2.0 */
/*
 * grpc_peer.c: a gRPC core channel with a connectivity watcher, and unary
 * calls on it (grpc_peer.h). gRPC core moves I/O only while a thread sits in
 * a completion queue, so a watcher thread waits on the channel's
 * connectivity state in grpc_completion_queue_next: reconnection after a
 * peer restart goes on between calls, and calls fail fast (UNAVAILABLE)
 * while the peer is down instead of holding the caller until the deadline.
 * Each call is one batch on its own completion queue.
 */
#include "peer/grpc_peer.h"

#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/thread.h"
#include "core/xmalloc.h"

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WATCH_MS 250 /* the watcher re-arms this often (bounds close()) */

struct grpc_peer {
    char *target;
    char *who;
    grpc_channel *channel;
    grpc_completion_queue *watch_cq;
    struct bg_thread watcher; /* its mu: stopping + arming a watch vs. shutting the CQ down */
    int last_state;           /* last connectivity state seen (logging) */
};

static gpr_timespec
in_ms(int64_t ms)
{
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(ms, GPR_TIMESPAN));
}

static const char *
state_name(grpc_connectivity_state s)
{
    switch (s) {
    case GRPC_CHANNEL_IDLE:
        return "IDLE";
    case GRPC_CHANNEL_CONNECTING:
        return "CONNECTING";
    case GRPC_CHANNEL_READY:
        return "READY";
    case GRPC_CHANNEL_TRANSIENT_FAILURE:
        return "TRANSIENT_FAILURE";
    case GRPC_CHANNEL_SHUTDOWN:
        return "SHUTDOWN";
    }
    return "?";
}

const char *
grpc_peer_status_name(int st)
{
    static const char *const names[] = {"OK",
                                        "CANCELLED",
                                        "UNKNOWN",
                                        "INVALID_ARGUMENT",
                                        "DEADLINE_EXCEEDED",
                                        "NOT_FOUND",
                                        "ALREADY_EXISTS",
                                        "PERMISSION_DENIED",
                                        "RESOURCE_EXHAUSTED",
                                        "FAILED_PRECONDITION",
                                        "ABORTED",
                                        "OUT_OF_RANGE",
                                        "UNIMPLEMENTED",
                                        "INTERNAL",
                                        "UNAVAILABLE",
                                        "DATA_LOSS",
                                        "UNAUTHENTICATED"};
    if (st >= 0 && (size_t)st < sizeof(names) / sizeof(names[0]))
        return names[st];
    return "?";
}

/* Arms one connectivity watch unless stopping. Returns false when stopping. */
static bool
arm_watch(struct grpc_peer *p)
{
    bool armed = false;

    pthread_mutex_lock(&p->watcher.mu);
    if (!bg_thread_stopping(&p->watcher)) {
        /* try_to_connect=1: leave IDLE at once, so the first call finds it READY. */
        grpc_connectivity_state s = grpc_channel_check_connectivity_state(p->channel, 1);
        if ((int)s != p->last_state) {
            /* Info only into and out of READY: a down peer flaps CONNECTING <->
             * TRANSIENT_FAILURE at each backoff and must not flood the log. */
            bool ready = s == GRPC_CHANNEL_READY || p->last_state == GRPC_CHANNEL_READY;
            log_msg(ready ? LOG_INFO : LOG_DEBUG, p->who, "channel state", "target=%s state=%s",
                    p->target, state_name(s));
            p->last_state = (int)s;
        }
        grpc_channel_watch_connectivity_state(p->channel, s, in_ms(WATCH_MS), p->watch_cq, p);
        armed = true;
    }
    pthread_mutex_unlock(&p->watcher.mu);
    return armed;
}

/* The watcher: keeps one thread inside grpc_completion_queue_next so the
 * channel's connect/backoff timers and sockets progress between calls. */
static void *
watch_main(void *arg)
{
    struct grpc_peer *p = arg;
    bool armed = arm_watch(p);

    for (;;) {
        grpc_event ev =
            grpc_completion_queue_next(p->watch_cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN)
            break;
        if (ev.type == GRPC_OP_COMPLETE && armed)
            armed = arm_watch(p);
    }
    return NULL;
}

/* Copies a received message out of its byte buffer. */
static void
read_body(grpc_byte_buffer *bb, struct grpc_reply *r)
{
    grpc_byte_buffer_reader rd;
    grpc_slice s;

    if (bb == NULL || !grpc_byte_buffer_reader_init(&rd, bb))
        return;
    s = grpc_byte_buffer_reader_readall(&rd);
    grpc_byte_buffer_reader_destroy(&rd);
    r->len = GRPC_SLICE_LENGTH(s);
    r->body = xmalloc(r->len ? r->len : 1);
    memcpy(r->body, GRPC_SLICE_START_PTR(s), r->len);
    grpc_slice_unref(s);
}

int
grpc_peer_call(struct grpc_peer *p, const char *method, const uint8_t *req, size_t len,
               int64_t deadline_mono_ms, struct grpc_reply *r)
{
    int64_t left = deadline_mono_ms - clock_mono_ms();
    grpc_completion_queue *cq;
    grpc_call *call;
    grpc_slice payload, details = grpc_empty_slice();
    grpc_byte_buffer *bb, *resp = NULL;
    grpc_metadata_array md_initial, md_trailing;
    grpc_status_code st = GRPC_STATUS_UNKNOWN;
    grpc_op ops[6];
    grpc_call_error ce;
    char *detail;
    int rc = 0;

    memset(r, 0, sizeof(*r));
    r->status = -1;
    if (left <= 0) {
        snprintf(r->details, sizeof(r->details), "deadline passed before the call");
        return ROOMD_EUNAVAIL;
    }
    cq = grpc_completion_queue_create_for_next(NULL);
    call = grpc_channel_create_call(p->channel, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                                    grpc_slice_from_static_string(method), NULL, in_ms(left), NULL);
    payload = grpc_slice_from_copied_buffer((const char *)req, len);
    bb = grpc_raw_byte_buffer_create(&payload, 1);
    grpc_slice_unref(payload);
    grpc_metadata_array_init(&md_initial);
    grpc_metadata_array_init(&md_trailing);

    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = bb;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &md_initial;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &resp;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &md_trailing;
    ops[5].data.recv_status_on_client.status = &st;
    ops[5].data.recv_status_on_client.status_details = &details;

    ce = grpc_call_start_batch(call, ops, 6, ops, NULL);
    if (ce == GRPC_CALL_OK) {
        /* The call's deadline ends the batch; no other tag is on this CQ. */
        (void)grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        detail = grpc_slice_to_c_string(details);
        r->status = (int)st;
        strlcpy_(r->details, detail, sizeof(r->details));
        gpr_free(detail);
        if (st == GRPC_STATUS_OK)
            read_body(resp, r);
    } else {
        snprintf(r->details, sizeof(r->details), "grpc_call_start_batch failed (%d)", (int)ce);
        rc = ROOMD_ERETRY;
    }

    grpc_call_unref(call);
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
           GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(cq);
    grpc_slice_unref(details);
    grpc_metadata_array_destroy(&md_initial);
    grpc_metadata_array_destroy(&md_trailing);
    grpc_byte_buffer_destroy(bb);
    if (resp != NULL)
        grpc_byte_buffer_destroy(resp);
    return rc;
}

/* Shutdown order (DEPENDENCIES.md §5): CQ shutdown -> drain -> CQ destroy ->
 * channel destroy -> grpc_shutdown. */
void
grpc_peer_close(struct grpc_peer *p)
{
    if (p == NULL)
        return;
    bg_thread_request_stop(&p->watcher); /* arms no more watches */
    pthread_mutex_lock(&p->watcher.mu);
    grpc_completion_queue_shutdown(p->watch_cq); /* the pending watch ends within WATCH_MS */
    pthread_mutex_unlock(&p->watcher.mu);
    bg_thread_stop(&p->watcher); /* joins */
    grpc_completion_queue_destroy(p->watch_cq);
    grpc_channel_destroy(p->channel);
    grpc_shutdown_blocking();
    free(p->target);
    free(p->who);
    free(p);
}

int
grpc_peer_open(struct grpc_peer **out, const char *target, const char *who, char *err,
               size_t errlen)
{
    struct grpc_peer *p;
    grpc_channel_credentials *creds;
    grpc_arg args[3];
    grpc_channel_args chargs;

    *out = NULL;
    if (target == NULL || target[0] == '\0') {
        snprintf(err, errlen, "%s: empty target", who);
        return ROOMD_EINVAL;
    }
    grpc_init();
    p = xcalloc(1, sizeof(*p));
    p->target = xstrdup(target);
    p->who = xstrdup(who);
    p->last_state = -1;
    bg_thread_init(&p->watcher);

    /* Reconnect quickly after an outage: retry the connection every <= 1 s. */
    memset(args, 0, sizeof(args));
    args[0].type = GRPC_ARG_INTEGER;
    args[0].key = (char *)GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS;
    args[0].value.integer = 100;
    args[1].type = GRPC_ARG_INTEGER;
    args[1].key = (char *)GRPC_ARG_MIN_RECONNECT_BACKOFF_MS;
    /* gRPC core takes this as the least time a connection attempt gets
     * (MIN_CONNECT_TIMEOUT, doc/connection-backoff.md), not as a retry
     * delay: at 100 ms a loaded machine failed the first attempt (TCP +
     * HTTP/2 SETTINGS) and its calls with UNAVAILABLE. A refused connection
     * still fails at once and is retried per the two backoffs. */
    args[1].value.integer = 5000;
    args[2].type = GRPC_ARG_INTEGER;
    args[2].key = (char *)GRPC_ARG_MAX_RECONNECT_BACKOFF_MS;
    args[2].value.integer = 1000;
    chargs.num_args = 3;
    chargs.args = args;

    creds = grpc_insecure_credentials_create();
    p->channel = grpc_channel_create(p->target, creds, &chargs);
    grpc_channel_credentials_release(creds);
    p->watch_cq = grpc_completion_queue_create_for_next(NULL);
    if (bg_thread_spawn(&p->watcher, watch_main, p) != 0) {
        snprintf(err, errlen, "%s: cannot start the channel watcher thread", who);
        grpc_peer_close(p);
        return ROOMD_EINTERNAL;
    }
    *out = p;
    return 0;
}
