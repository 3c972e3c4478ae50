/*
 * outbox.h: the OUTBOX PATH. A pool of worker threads that claim
 * room_outbox rows (store_outbox_claim), build each event's envelope, publish
 * it to the sinks of the publish mode, and record delivered / retryable
 * (exponential backoff with jitter) / failed (dead letter at
 * max_retry_count), fenced by locked_by. Workers are woken right after each
 * commit (outbox_wake); poll_interval is only the idle fallback.
 *
 * Read worker.c top-down for the loop, event.c for envelope/JSON building.
 */
#ifndef ROOMD_OUTBOX_H
#define ROOMD_OUTBOX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct conf_outbox;
struct store;
struct sink;
struct outbox_row;
struct mutation;

struct outbox;

/*
 * Starts cfg->workers threads delivering to sinks[0..nsinks) (the worker
 * takes ownership of the sinks and closes them in outbox_close, also when
 * outbox_open fails). node_id prefixes locked_by ("<node_id>/w<n>"; "" =
 * "<hostname>-<pid>"). Also starts the retention purge of delivered rows
 * (outbox/retention.h) with the settings of the same conf's store section:
 * cfg must therefore be the outbox_worker member of a struct conf, which
 * must outlive the outbox. Returns 0 and *out, or an error. Thread: main.
 */
int outbox_open(struct outbox **out, const struct conf_outbox *cfg, struct store *store,
                const char *node_id, struct sink **sinks, size_t nsinks);

/* Wakes an idle worker to claim now (a commit just wrote pending rows).
 * outbox_wake(NULL) is a no-op. Thread: any; never blocks. */
void outbox_wake(struct outbox *ob);

/*
 * The in-process hand-off (docs/outbox.md): a command's outbox rows go from
 * the commit straight to this process's workers, without a claim query.
 *  1. Before the commit, outbox_handoff_reserve(ob, n, &lock_until) takes n
 *     places in the bounded hand-off queue. true: insert the rows already
 *     claimed, mutation.locked_by = outbox_handoff_claimer(ob) and
 *     mutation.lock_until_ms = lock_until (store.h). false (the queue is
 *     full, the hand-off is off, stopping, ob NULL or n 0): insert them
 *     pending as before and outbox_wake after the commit.
 *  2. After a successful reserve exactly one of: outbox_handoff_push(ob, m)
 *     once m committed (m->events[i].id set by store_save; everything is
 *     copied), or outbox_handoff_cancel(ob, n) when it did not commit.
 * A worker publishes handed-off rows and completes them fenced by the
 * hand-off claimer, only while their lock outlasts publish_timeout. Rows
 * that never reach a worker (the process died) are claimed by anyone once
 * their lock expires. Thread: any; never block (push copies the rows).
 */
bool outbox_handoff_reserve(struct outbox *ob, size_t n, int64_t *lock_until_ms);
/* "<node_id>/h": locked_by of handed-off rows. Static for the outbox's life. */
const char *outbox_handoff_claimer(const struct outbox *ob);
void outbox_handoff_push(struct outbox *ob, const struct mutation *m);
void outbox_handoff_cancel(struct outbox *ob, size_t n);
/* Sets the queue's capacity in rows (reserved + queued); 0 turns the
 * hand-off off. outbox_open sets it from outbox_worker.handoff_queue (-1:
 * max(1024, 4 * workers * batch_size)). Thread: any. */
void outbox_handoff_set_capacity(struct outbox *ob, size_t rows);

#define OUTBOX_LAT_BUCKETS 500
#define OUTBOX_LAT_BUCKET_US 100

/* Counters since outbox_open (tests, bench, metrics). */
struct outbox_stats {
    uint64_t claims;       /* claim queries that ran */
    uint64_t claimed_rows; /* rows they returned */
    uint64_t handoff_rows; /* rows handed off (outbox_handoff_push) */
    uint64_t handoff_full; /* reservations refused by a full queue (rows went pending) */
    uint64_t batches;      /* batches published and completed (claimed or handed off) */
    /* time spent by all workers together, µs: claim queries; building the
     * events; publishing (every sink); completing in the store */
    int64_t claim_us, build_us, publish_us, complete_us;
    /* Handed-off rows delivered, by the time from their push (right after
     * the commit) to the return of the last sink, in 100 µs buckets; the
     * last bucket holds everything from 49.9 ms on. */
    uint32_t handoff_lat[OUTBOX_LAT_BUCKETS];
    int64_t handoff_lat_sum_us; /* their sum */
};
/* Copies the counters. They are also on GET /metrics (roomd_outbox_*: a
 * collector outbox_open adds and outbox_close removes). Thread: any. */
void outbox_stats(struct outbox *ob, struct outbox_stats *out);
/* The p-th percentile (0 < p < 1) of handoff_lat in µs (a bucket's upper
 * edge), or 0 when there are no samples. */
int64_t outbox_stats_handoff_pct_us(const struct outbox_stats *s, double p);

/* Whether the sink named name ("tim", "activity", ...) answered its last
 * call: 1 (delivered or refused for good; also before any call), 0 (no
 * answer, or "not now"), -1 (no such sink). Thread: any; never blocks. */
int outbox_sink_up(struct outbox *ob, const char *name);

/* Stops the workers after their current batch and joins them. Rows they
 * had claimed but not completed are reclaimed after their lock expires.
 * outbox_close(NULL) is a no-op. Thread: main. */
void outbox_close(struct outbox *ob);

/* Builds the envelope and JSON of row. *envelope and *json are malloc'd
 * (caller frees); json NULL skips the JSON (the payload is still decoded).
 * Returns 0 or ROOMD_EINVAL when the payload does not decode as its
 * event_type (a poison event). Thread: any. */
int outbox_event_build(const struct outbox_row *row, uint8_t **envelope, size_t *envelope_len,
                       char **json);

#endif
