/* SPDX-License-Identifier: Apache-2.0 */
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
struct conf_store;
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
 * (outbox/retention.h) with retention's retention_delivered_ms, purge_batch
 * and purge_interval_ms (the store section; borrowed, it must outlive the
 * outbox). cfg is copied. Returns 0 and *out, or an error. Thread: main.
 */
int outbox_open(struct outbox **out, const struct conf_outbox *cfg,
                const struct conf_store *retention, struct store *store, const char *node_id,
                struct sink **sinks, size_t nsinks);

/* Wakes an idle worker to claim now (a commit just wrote pending rows).
 * outbox_wake(NULL) is a no-op. Thread: any; never blocks. */
void outbox_wake(struct outbox *ob);

/* The in-process hand-off from the commit to the workers: outbox/handoff.h. */

#define OUTBOX_LAT_BUCKETS 500
#define OUTBOX_LAT_BUCKET_US 100

/* Counters since outbox_open (tests, bench, metrics). */
struct outbox_stats {
    uint64_t claims;        /* claim queries that ran */
    uint64_t claimed_rows;  /* rows they returned */
    uint64_t claim_max;     /* the most rows one claim returned (<= batch_size x claim_batches) */
    uint64_t claims_paused; /* claims not made: no sink's peer answered */
    uint64_t handoff_rows;  /* rows handed off (outbox_handoff_push) */
    uint64_t handoff_full;  /* reservations refused by a full queue (rows went pending) */
    uint64_t batches;       /* batches published and completed (claimed or handed off) */
    uint64_t batch_rows;    /* the rows of those batches (their completion attempted) */
    uint64_t completions;   /* store transactions of completions alone (several batches'
                             * gathered, or one's; not those carried by a claim) */
    /* time spent by all workers together, µs: claim queries; building the
     * events; publishing (every sink); completing in the store */
    int64_t claim_us, build_us, publish_us, complete_us;
    /* Handed-off rows delivered, by the time from their push (right after
     * the commit) to the return of the last sink, in 100 µs buckets; the
     * last bucket holds everything from 49.9 ms on. */
    uint32_t handoff_lat[OUTBOX_LAT_BUCKETS];
    int64_t handoff_lat_sum_us; /* their sum */
    /* ordering per_room (roomd_outbox_order_*_total): rows held behind an
     * earlier row of their room; dead letters after which their room's
     * later rows went on (poison policy); commits whose rows went pending
     * (their room had an undelivered row); commits handed off behind their
     * room's rows still in the hand-off (room affinity) */
    uint64_t order_held, order_failed, order_busy, order_affine;
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

/* Appends the room_outbox table's lines for counts c (store_outbox_counts) to
 * t: roomd_outbox_rows{status} and roomd_outbox_oldest_undelivered_seconds.
 * For the HTTP /metrics collector, which passes the counts of its readiness
 * cache (no query per scrape): the table exists whether or not this process
 * runs workers. Thread: any; never blocks. */
struct metrics_text;
struct outbox_counts;
void outbox_metrics_rows(const struct outbox_counts *c, struct metrics_text *t);

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

/* Readiness of the sinks (cluster/health.h; arg is the outbox): 0 when no
 * sink's circuit is open, else ROOMD_EUNAVAIL with why naming them
 * ("tim: circuit open"). Thread: any, does not block. */
int outbox_sinks_ready(void *ob, char *why, size_t whylen);

#endif
