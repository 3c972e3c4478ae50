/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sink_activity.c: the direct activity-service sink: each publish() is one
 * unary call /activity.v1.RoomEventService/Consume with the packed
 * envelope, on one channel for the process (peer/grpc_peer.c keeps it
 * connected and makes calls fail fast while the service is down).
 */
#include "publish/sink_activity.h"

#include "conf/conf.h"
#include "core/err.h"
#include "core/log.h"
#include "core/xmalloc.h"
#include "peer/grpc_peer.h"
#include "publish/sink.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CONSUME_METHOD "/activity.v1.RoomEventService/Consume"

struct sink_activity {
    struct sink base; /* first: the worker sees a struct sink * */
    struct grpc_peer *peer;
};

/* Maps a gRPC status to the sink contract. */
static int
status_rc(int st)
{
    switch (st) {
    case GRPC_PEER_OK:
    case GRPC_PEER_ALREADY_EXISTS: /* the service had this event_id: delivered */
        return 0;
    case GRPC_PEER_INVALID_ARGUMENT:
    case GRPC_PEER_FAILED_PRECONDITION:
    case GRPC_PEER_OUT_OF_RANGE:
        return ROOMD_EPERM; /* the event itself is refused: retrying cannot help */
    case GRPC_PEER_UNAVAILABLE:
    case GRPC_PEER_DEADLINE_EXCEEDED:
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
    struct grpc_reply r;
    int rc;

    if ((rc = grpc_peer_call(a->peer, CONSUME_METHOD, ev->envelope, ev->envelope_len, deadline,
                             &r)) != 0) {
        snprintf(err, errlen, "activity: %s", r.details);
        return rc;
    }
    rc = status_rc(r.status);
    if (r.status != GRPC_PEER_OK)
        snprintf(err, errlen, "activity %s: %.200s", grpc_peer_status_name(r.status), r.details);
    free(r.body);
    return rc;
}

/* The circuit's probe (sink.h): a gRPC health check on the channel. Any
 * status the service gives (UNIMPLEMENTED too) is an answer. */
static int
activity_probe(struct sink *s, int64_t deadline, char *err, size_t errlen)
{
    struct sink_activity *a = (struct sink_activity *)s;
    static const uint8_t empty[1]; /* HealthCheckRequest{service: ""}: no bytes */
    struct grpc_reply r;

    if (grpc_peer_call(a->peer, "/grpc.health.v1.Health/Check", empty, 0, deadline, &r) != 0) {
        snprintf(err, errlen, "activity: %s", r.details);
        return ROOMD_EUNAVAIL;
    }
    free(r.body);
    if (status_rc(r.status) != ROOMD_EUNAVAIL)
        return 0;
    snprintf(err, errlen, "activity %s: %.200s", grpc_peer_status_name(r.status), r.details);
    return ROOMD_EUNAVAIL;
}

static void
activity_close(struct sink *s)
{
    struct sink_activity *a = (struct sink_activity *)s;

    grpc_peer_close(a->peer);
    free(a);
}

int
sink_activity_open(struct sink **out, const struct conf_activity *cfg, char *err, size_t errlen)
{
    struct sink_activity *a;
    int rc;

    *out = NULL;
    if (cfg->target == NULL || cfg->target[0] == '\0') {
        snprintf(err, errlen, "activity.target: empty");
        return ROOMD_EINVAL;
    }
    a = xcalloc(1, sizeof(*a));
    if ((rc = grpc_peer_open(&a->peer, cfg->target, "activity", err, errlen)) != 0) {
        free(a);
        return rc;
    }
    /* accepts NULL: every room fact goes to the activity service */
    *out = sink_init(&a->base, "activity", SINK_BIT_ACTIVITY, NULL, activity_publish,
                     activity_close, false);
    a->base.probe = activity_probe;
    log_info("activity", "activity sink ready", "target=%s", cfg->target);
    return 0;
}
