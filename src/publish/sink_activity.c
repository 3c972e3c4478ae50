/*
 * sink_activity.c: the direct activity-service sink over gRPC core (see
 * DEPENDENCIES.md §5). One channel for the process. gRPC core moves I/O only
 * while a thread sits in a completion queue, so a watcher thread waits on the
 * channel's connectivity state in grpc_completion_queue_next: reconnection
 * after a server restart goes on between calls, and calls fail fast
 * (UNAVAILABLE -> retry) while the server is down instead of holding a worker
 * until the deadline. Each publish() is one unary call (rpc/client.h).
 */
#include "publish/sink_activity.h"

#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/thread.h"
#include "core/xmalloc.h"
#include "publish/sink.h"
#include "rpc/client.h"

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
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

static int
activity_publish(struct sink *s, const struct outbox_event *ev, int64_t deadline, char *err,
                 size_t errlen)
{
    struct sink_activity *a = (struct sink_activity *)s;
    int64_t left = deadline - clock_mono_ms();
    grpc_status_code st;
    char detail[256];

    if (left <= 0) {
        snprintf(err, errlen, "activity: publish deadline passed");
        return ROOMD_EUNAVAIL;
    }
    st = rpc_unary(a->channel, CONSUME_METHOD, ev->envelope, ev->envelope_len, NULL, 0, left, NULL,
                   NULL, detail, sizeof(detail));
    if (st != GRPC_STATUS_OK)
        snprintf(err, errlen, "activity %s: %.200s", rpc_status_name(st), detail);
    return status_rc(st);
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
