/* SPDX-License-Identifier: Apache-2.0 */
/*
 * admin/dlq_backend.h: where the consumer groups' dead letters are, per
 * broker driver, behind one interface (admin-private). dlq.c and
 * dlq_bulk.c (list, show, replay, discard, purge, bulk, audit) are written
 * against it; each driver gives one:
 *   dlq_js.c   JetStream: the stream <ns>hyapp_dlq, one subject per group,
 *              id = the stream sequence; the kit's Roomd-* headers; removal
 *              deletes the message from the stream
 *   dlq_rmq.c  RocketMQ: the topics %DLQ%<group> of the configured groups
 *              (one queue each, as the broker creates them), id = group
 *              number x 10^12 + queue offset + 1; a message cannot be
 *              deleted from a RocketMQ topic, so one replayed or discarded
 *              is settled by its audit entry (dlq_* audit rows name its id)
 *              and no longer listed
 * A scan is one request's view (a stream's range, the settled ids);
 * opened, used and closed on the request's thread.
 */
#ifndef ROOMD_ADMIN_DLQ_BACKEND_H
#define ROOMD_ADMIN_DLQ_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct admin;
struct admin_reply;

/* One dead letter, as every backend gives it. */
struct dlq_letter {
    uint64_t seq;        /* the API's id */
    char group[128];     /* the consumer group that dead-lettered it */
    char key[200];       /* the group's dedupe key ("" when undecodable) */
    char subject[256];   /* where the group consumed it from */
    char reason[32];     /* the kit's reason (permanent, max_reconsume, ...) */
    char error[256];     /* the handler's error, "-" when unknown */
    uint64_t deliveries; /* deliveries / reconsumes before it was dead-lettered */
    int64_t stored_ms;   /* when the dead letter was stored (epoch ms) */
    const uint8_t *data; /* the original body (borrowed from own) */
    size_t len;
    void *own; /* the backend's (natsMsg, a pulled batch) */
};

struct dlq_scan;

struct dlq_backend {
    const char *name; /* "jetstream" | "rocketmq" */
    /* A scan for this request: 0, or a 503 in r. */
    int (*open)(struct admin *a, struct dlq_scan **out, struct admin_reply *r);
    void (*close)(struct dlq_scan *s);
    /* What the list shows as "stream" (the stream, or "%DLQ%<group>"s). */
    const char *(*where)(struct dlq_scan *s);
    /* The first dead letter of group (NULL/"": any) with id > after into
     * *out: 0, ROOMD_ENOTFOUND (none more), or ROOMD_EUNAVAIL. */
    int (*next)(struct dlq_scan *s, uint64_t after, const char *group, struct dlq_letter *out);
    /* Dead letter seq: 0, ROOMD_ENOTFOUND (none, or settled), ROOMD_EUNAVAIL
     * (err filled). */
    int (*get)(struct dlq_scan *s, uint64_t seq, struct dlq_letter *out, char *err, size_t errlen);
    /* Sends d's bytes back to its group under a new id: 0, or an error with
     * err (ROOMD_EUNAVAIL: the broker did not take it). */
    int (*republish)(struct dlq_scan *s, const struct dlq_letter *d, char *err, size_t errlen);
    /* Removes d from the dead letters (JetStream deletes it; RocketMQ: its
     * audit entry settles it, nothing to do here). True when gone. */
    bool (*remove)(struct dlq_scan *s, const struct dlq_letter *d);
    void (*letter_free)(struct dlq_letter *d);
};

extern const struct dlq_backend dlq_backend_jetstream;
extern const struct dlq_backend dlq_backend_rocketmq;

/* The backend of a's broker, NULL when the groups' broker is not set
 * (rocketmq.enabled false). Thread: any. */
const struct dlq_backend *admin_dlq_backend(struct admin *a);

#endif
