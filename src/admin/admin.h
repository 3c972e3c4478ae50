/* SPDX-License-Identifier: Apache-2.0 */
/*
 * admin/admin.h: the operator's operations on the outbox (docs/admin.md),
 * the same for every front end: the admin HTTP API and console of roomd
 * (admin/http.c), and roomctl without --url. Each takes its input as a
 * query lookup or a JSON body and answers a status and a JSON body:
 *
 *   admin_summary      counts by status and by sink, oldest undelivered per sink
 *   admin_list         rows matching a filter (store/filter.h), keyset pages
 *   admin_show         one row in full: decoded event, per-sink state
 *   admin_replay       bulk replay (or repair) by filter: dry_run gives the
 *                      count and a sample; a replay is audited and chunked,
 *                      and resumes after a crash (admin_resume)
 *   admin_audits       the audit log; admin_audit one entry with its rows
 *   admin_dlq_*        the consumer groups' dead letters (JetStream
 *                      <ns>hyapp_dlq, or RocketMQ's %DLQ%<group> topics:
 *                      admin/dlq_backend.h): list, show, replay into their
 *                      group, discard one, purge a group's
 *
 * Bad input answers 400 {"error":{"code":"invalid_argument","field":..}} and
 * changes nothing. Thread: any; calls block on the store.
 */
#ifndef ROOMD_ADMIN_H
#define ROOMD_ADMIN_H

#include "store/filter.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct conf;
struct outbox;
struct admin;

/* An answer: HTTP status and a malloc'd JSON body (admin_reply_clear). */
struct admin_reply {
    int status;
    char *body;
};
void admin_reply_clear(struct admin_reply *r);

/*
 * Opens the admin store over conf's store (store/admin.h; readonly: nothing
 * is created or written, replays are refused 405). outbox (may be NULL) is
 * woken after replays so the rows go out at once. Returns 0 and *out, or an
 * error with err naming the key. Thread: main.
 */
int admin_open(struct admin **out, const struct conf *conf, struct outbox *outbox, bool readonly,
               char *err, size_t errlen);
void admin_close(struct admin *a);

/* Finishes the bulk replays a crash left running (their audit rows say
 * where they were); returns how many it finished. Thread: any; blocks. */
int admin_resume(struct admin *a);

void admin_summary(struct admin *a, struct admin_reply *r);
/* Query keys: the filter's, after (an id), limit (1..500, default 50). */
void admin_list(struct admin *a, admin_lookup_fn q, void *ctx, struct admin_reply *r);
void admin_show(struct admin *a, const char *event_id, struct admin_reply *r);

/* Called after each chunk of a replay with the rows done so far and the
 * total the replay covers. */
typedef void (*admin_progress_fn)(void *arg, int64_t done, int64_t total);

/*
 * body: {"filter": {...}, "dry_run": bool, "repair": bool, "sample": n (dry
 * run, 0..100, default 10), "chunk": n (rows per transaction, 1..5000,
 * default 500)}. Only failed rows are replayed (the filter's status, if
 * given, must be failed). actor names the caller in the audit (the token's
 * name). progress may be NULL.
 */
void admin_replay(struct admin *a, const char *actor, const char *body, size_t len,
                  admin_progress_fn progress, void *arg, struct admin_reply *r);
/* Query keys: before (an audit id), limit. */
void admin_audits(struct admin *a, admin_lookup_fn q, void *ctx, struct admin_reply *r);
/* Query keys: after (an outbox id), limit: the rows of audit id. */
void admin_audit(struct admin *a, int64_t id, admin_lookup_fn q, void *ctx, struct admin_reply *r);

/* The broker connection for the consumer groups' dead letters (borrowed; it
 * must outlive a). Without one the admin_dlq_* calls answer 404. */
struct bus;
void admin_set_bus(struct admin *a, struct bus *bus);
/* The same on the rocketmq driver: the RocketMQ client whose %DLQ%<group>
 * topics hold the dead letters (admin/dlq_rmq.c; borrowed, it must outlive
 * a). Set, it is used instead of a bus. Thread: main, before serving. */
struct rmq_client;
void admin_set_rmq(struct admin *a, struct rmq_client *c);
/* Query keys: group, after (a stream sequence), limit. */
void admin_dlq_list(struct admin *a, admin_lookup_fn q, void *ctx, struct admin_reply *r);
void admin_dlq_show(struct admin *a, uint64_t seq, struct admin_reply *r);
/* Replays dead letter seq into its group (see admin/dlq.c), audited as actor. */
void admin_dlq_replay(struct admin *a, const char *actor, uint64_t seq, struct admin_reply *r);
/* Discards dead letter seq: its key stays settled in the group's inbox, the
 * dead letter is deleted (see admin/dlq.c), audited as actor. */
void admin_dlq_discard(struct admin *a, const char *actor, uint64_t seq, struct admin_reply *r);
/* body {"group": G}: discards every dead letter of group G (keys in flight
 * again are skipped and counted), audited as one entry. */
void admin_dlq_purge(struct admin *a, const char *actor, const char *body, size_t len,
                     struct admin_reply *r);
/* Bulk replay | discard (action) of the dead letters body's filter
 * selects ({"filter":{group, event_type, room_id, reason, error,
 * created_after, created_before}, "dry_run", "chunk"}; admin/dlq_bulk.c),
 * audited as actor. Thread: any; blocks on the broker and the store. */
void admin_dlq_bulk(struct admin *a, const char *actor, const char *action, const char *body,
                    size_t len, struct admin_reply *r);

#endif
