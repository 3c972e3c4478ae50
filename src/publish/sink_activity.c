/*
 * sink_activity.c: the direct activity-service sink over gRPC core (see
 * DEPENDENCIES.md §5). One channel for the process. gRPC core moves I/O only
 * while a thread sits in a completion queue, so a watcher thread waits on the
 * channel's connectivity state in grpc_completion_queue_next: reconnection
 * after a server restart goes on between calls, and calls fail fast
 * (UNAVAILABLE -> retry) while the server is down instead of holding a worker
 * until the deadline. Each publish() is one unary call on its own CQ.
 */
#include "publish/sink_activity.h"

#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/thread.h"
#include "core/xmalloc.h"
#include "publish/sink.h"

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CONSUME_METHOD "/activity.v1.RoomEventService/Consume"
#define WATCH_MS 250 /* the watcher re-arms this often (bounds close()) */

struct sink_activity {
    struct sink base; /* first: the worker sees a struct sink * */
    char *target;
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

/* Arms one connectivity watch unless stopping. Returns false when stopping. */
static bool
arm_watch(struct sink_activity *a)
{
    bool armed = false;

    pthread_mutex_lock(&a->watcher.mu);
    if (!bg_thread_stopping(&a->watcher)) {
        /* try_to_connect=1: leave IDLE at once, so the first call finds it READY. */
        grpc_connectivity_state s = grpc_channel_check_connectivity_state(a->channel, 1);
        if ((int)s != a->last_state) {
            /* Info only into and out of READY: a down peer flaps CONNECTING <->
             * TRANSIENT_FAILURE at each backoff and must not flood the log. */
            bool ready = s == GRPC_CHANNEL_READY || a->last_state == GRPC_CHANNEL_READY;
            log_msg(ready ? LOG_INFO : LOG_DEBUG, "activity", "channel state", "target=%s state=%s",
                    a->target, state_name(s));
            a->last_state = (int)s;
        }
        grpc_channel_watch_connectivity_state(a->channel, s, in_ms(WATCH_MS), a->watch_cq, a);
        armed = true;
    }
    pthread_mutex_unlock(&a->watcher.mu);
    return armed;
}

/* The watcher: keeps one thread inside grpc_completion_queue_next so the
 * channel's connect/backoff timers and sockets progress between calls. */
static void *
watch_main(void *arg)
{
    struct sink_activity *a = arg;
    bool armed = arm_watch(a);

    for (;;) {
        grpc_event ev =
            grpc_completion_queue_next(a->watch_cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN)
            break;
        if (ev.type == GRPC_OP_COMPLETE && armed)
            armed = arm_watch(a);
    }
    return NULL;
}

/* Maps a gRPC status to the sink contract. */
static int
status_rc(grpc_status_code st)
{
    switch (st) {
    case GRPC_STATUS_OK:
    case GRPC_STATUS_ALREADY_EXISTS: /* the service had this event_id: delivered */
        return 0;
    case GRPC_STATUS_INVALID_ARGUMENT:
    case GRPC_STATUS_FAILED_PRECONDITION:
    case GRPC_STATUS_OUT_OF_RANGE:
        return ROOMD_EPERM; /* the event itself is refused: retrying cannot help */
    case GRPC_STATUS_UNAVAILABLE:
    case GRPC_STATUS_DEADLINE_EXCEEDED:
        return ROOMD_EUNAVAIL; /* no answer: an outage, the event costs no attempt */
    default:
        return ROOMD_ERETRY; /* RESOURCE_EXHAUSTED, INTERNAL, ... */
    }
}

static const char *
status_name(grpc_status_code st)
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
    if ((int)st >= 0 && (size_t)st < sizeof(names) / sizeof(names[0]))
        return names[st];
    return "?";
}

static int
activity_publish(struct sink *s, const struct outbox_event *ev, int64_t deadline, char *err,
                 size_t errlen)
{
    struct sink_activity *a = (struct sink_activity *)s;
    int64_t left = deadline - clock_mono_ms();
    grpc_completion_queue *cq;
    grpc_call *call;
    grpc_slice payload, details = grpc_empty_slice();
    grpc_byte_buffer *req, *resp = NULL;
    grpc_metadata_array md_initial, md_trailing;
    grpc_status_code st = GRPC_STATUS_UNKNOWN;
    grpc_op ops[6];
    grpc_call_error ce;
    grpc_event e;
    char *detail;
    int rc;

    if (left <= 0) {
        snprintf(err, errlen, "activity: publish deadline passed");
        return ROOMD_EUNAVAIL;
    }
    cq = grpc_completion_queue_create_for_next(NULL);
    call = grpc_channel_create_call(a->channel, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                                    grpc_slice_from_static_string(CONSUME_METHOD), NULL,
                                    in_ms(left), NULL);
    payload = grpc_slice_from_copied_buffer((const char *)ev->envelope, ev->envelope_len);
    req = grpc_raw_byte_buffer_create(&payload, 1);
    grpc_slice_unref(payload);
    grpc_metadata_array_init(&md_initial);
    grpc_metadata_array_init(&md_trailing);

    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = req;
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
        e = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        (void)e;
        detail = grpc_slice_to_c_string(details);
        rc = status_rc(st);
        if (st != GRPC_STATUS_OK)
            snprintf(err, errlen, "activity %s: %.200s", status_name(st), detail);
        gpr_free(detail);
    } else {
        snprintf(err, errlen, "activity: grpc_call_start_batch failed (%d)", (int)ce);
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
    grpc_byte_buffer_destroy(req);
    if (resp != NULL)
        grpc_byte_buffer_destroy(resp);
    return rc;
}

/* Shutdown order (DEPENDENCIES.md §5): CQ shutdown -> drain -> CQ destroy ->
 * channel destroy -> grpc_shutdown. */
static void
activity_close(struct sink *s)
{
    struct sink_activity *a = (struct sink_activity *)s;

    bg_thread_request_stop(&a->watcher); /* arms no more watches */
    pthread_mutex_lock(&a->watcher.mu);
    grpc_completion_queue_shutdown(a->watch_cq); /* the pending watch ends within WATCH_MS */
    pthread_mutex_unlock(&a->watcher.mu);
    bg_thread_stop(&a->watcher); /* joins */
    grpc_completion_queue_destroy(a->watch_cq);
    grpc_channel_destroy(a->channel);
    grpc_shutdown_blocking();
    free(a->target);
    free(a);
}

int
sink_activity_open(struct sink **out, const struct conf_activity *cfg, char *err, size_t errlen)
{
    struct sink_activity *a;
    grpc_channel_credentials *creds;
    grpc_arg args[3];
    grpc_channel_args chargs;

    *out = NULL;
    if (cfg->target == NULL || cfg->target[0] == '\0') {
        snprintf(err, errlen, "activity.target: empty");
        return ROOMD_EINVAL;
    }
    grpc_init();
    a = xcalloc(1, sizeof(*a));
    a->target = xstrdup(cfg->target);
    a->last_state = -1;
    bg_thread_init(&a->watcher);

    /* Reconnect quickly after an outage: retry the connection every <= 1 s. */
    memset(args, 0, sizeof(args));
    args[0].type = GRPC_ARG_INTEGER;
    args[0].key = (char *)GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS;
    args[0].value.integer = 100;
    args[1].type = GRPC_ARG_INTEGER;
    args[1].key = (char *)GRPC_ARG_MIN_RECONNECT_BACKOFF_MS;
    args[1].value.integer = 100;
    args[2].type = GRPC_ARG_INTEGER;
    args[2].key = (char *)GRPC_ARG_MAX_RECONNECT_BACKOFF_MS;
    args[2].value.integer = 1000;
    chargs.num_args = 3;
    chargs.args = args;

    creds = grpc_insecure_credentials_create();
    a->channel = grpc_channel_create(a->target, creds, &chargs);
    grpc_channel_credentials_release(creds);
    a->watch_cq = grpc_completion_queue_create_for_next(NULL);
    if (bg_thread_spawn(&a->watcher, watch_main, a) != 0) {
        snprintf(err, errlen, "activity: cannot start the channel watcher thread");
        activity_close(&a->base);
        return ROOMD_EINTERNAL;
    }
    a->base.name = "activity";
    a->base.bit = SINK_BIT_ACTIVITY;
    a->base.accepts = NULL; /* every room fact goes to the activity service */
    a->base.publish = activity_publish;
    a->base.close = activity_close;
    *out = &a->base;
    log_info("activity", "activity sink ready", "target=%s", a->target);
    return 0;
}
