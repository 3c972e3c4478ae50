/* SPDX-License-Identifier: Apache-2.0 */
/*
 * admin/internal.h: what the files of src/admin share (not for other
 * modules): the handle and the reply helpers of admin.c, used by dlq.c.
 */
#ifndef ROOMD_ADMIN_INTERNAL_H
#define ROOMD_ADMIN_INTERNAL_H

#include "admin/admin.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

struct conf;
struct admin_store;
struct outbox;
struct outbox_row;
struct bus;
struct admin_nodes;
struct rmq_client;
struct dlq_backend;
struct dlq_scan;
struct dlq_letter;

struct admin {
    const struct conf *conf;
    struct admin_store *store;
    struct outbox *outbox;
    bool readonly;
    uint32_t sinks;            /* SINK_BIT_* of the publish mode's sinks */
    struct bus *bus;           /* the consumer groups' dead letters; NULL: rocketmq off */
    struct rmq_client *rmq;    /* or those on RocketMQ (dlq_rmq.c); wins over bus */
    struct admin_nodes *nodes; /* the nodes view (admin/nodes.h); NULL: none */
};

/* 200 with o (reference taken). */
void admin_reply_ok(struct admin_reply *r, json_t *o);
/* status with {"error":{"code","message"[,"field"]}}; field may be NULL. */
void admin_reply_error(struct admin_reply *r, int status, const char *code, const char *field,
                       const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* A store failure (rc): 404, 503 when it may pass, else 500; the store's text. */
void admin_reply_store(struct admin *a, struct admin_reply *r, int rc);
/* Reads an integer query key in [lo, hi] (dflt when absent); false and a
 * 400 naming the key in r when it is not one. */
bool admin_query_int(admin_lookup_fn q, void *ctx, const char *key, int64_t lo, int64_t hi,
                     int64_t dflt, int64_t *out, struct admin_reply *r);
/* A row as the API shows it (new reference). */
json_t *admin_row_json(const struct outbox_row *r);

/* dlq.c, for dlq_bulk.c. The dead letter as the API shows it (new
 * reference; full: the event decoded); replays (replay) or discards dead
 * letter seq of scan s (dlq_backend.h) as the single operations do,
 * without their audit entry. Returns 0, or an error with why (the single
 * operation's message). Thread: any; blocks on the broker and the group's
 * inbox. */
json_t *admin_dlq_message_json(const struct dlq_letter *d, bool full);
int admin_dlq_act(struct admin *a, const struct dlq_backend *b, struct dlq_scan *s,
                  const char *actor, uint64_t seq, bool replay, char *why, size_t whylen);

#endif
