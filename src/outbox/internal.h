/* SPDX-License-Identifier: Apache-2.0 */
/*
 * outbox/internal.h: private to src/outbox (as libuv's src/unix/internal.h).
 * The state the worker loop (worker.c), the hand-off queue (handoff.c) and
 * the batch's per-room order (order.c) share: struct outbox, its workers,
 * a batch's slots, and the queue calls the loop makes. Everything under
 * pool.mu unless a field says otherwise.
 */
#ifndef ROOMD_OUTBOX_INTERNAL_H
#define ROOMD_OUTBOX_INTERNAL_H

#include "conf/conf.h"
#include "core/thread.h"
#include "outbox/outbox.h"
#include "publish/sink.h"
#include "store/store.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct worker {
    struct outbox *ob;
    char locked_by[STORE_ID_MAX];
    /* claims (guarded by ob->pool.mu): the next poll, and the store outage backoff */
    int64_t next_claim_ms; /* clock_mono_ms; 0 = at once */
    bool last_was_claim;   /* alternate claims and hand-off batches when both wait */
    bool down;             /* the last claim failed: wake-ups wait for next_claim_ms */
    bool deep;             /* the worker's own (claim): its last claim brought batch_size
                            * rows or more, the next may take claim_batches x batch_size */
    int down_count;
};

/* What one sink call came to (roomd_outbox_attempts_total{outcome}). */
enum sink_call {
    CALL_OK,
    CALL_RETRY,       /* ROOMD_ERETRY: answered "not now" */
    CALL_UNAVAILABLE, /* ROOMD_EUNAVAIL or another error: no answer */
    CALL_PERMANENT,   /* ROOMD_EPERM: refused for good */
    CALL_TIMEOUT,     /* publish_timeout passed before the call */
    CALL_THROTTLED,   /* ROOMD_ELIMIT: the peer's rate limit (sink.h), no attempt */
    CALL_COUNT_
};

/* Upper bounds of roomd_outbox_delivery_seconds, µs: 1 ms .. 10 min. */
#define OUTBOX_DELIVERY_BUCKETS 18

/* The per-sink metrics of one sinks_done bit (outbox/metrics.c); atomics,
 * written by any worker without a lock. */
struct sink_metrics {
    const char *name; /* NULL: no sink has this bit */
    atomic_uint_fast64_t lat[OUTBOX_DELIVERY_BUCKETS + 1];
    atomic_uint_fast64_t lat_sum_us;
    atomic_uint_fast64_t attempts[CALL_COUNT_];
    atomic_uint_fast64_t dead;
    atomic_int up; /* -1 never called, 0 down, 1 up */
};

/* A sink's circuit breaker (circuit.c), under outbox.circ_mu. */
struct sink_circuit {
    int fails;           /* ROOMD_EUNAVAIL in a row */
    bool open;           /* the sink is not called, but for a probe at probe_at_ms */
    int64_t probe_at_ms; /* clock_mono_ms */
    uint64_t opened;     /* times it opened */
    uint64_t skipped;    /* calls not made while open */
    int64_t answered_ms; /* clock_mono_ms of the last answered call (0: none) */
};

/* ordering per_room, room affinity (handoff.c; docs/outbox.md): a room
 * with rows of this process's hand-off in memory, from outbox_handoff_begin
 * until their completion was attempted. Its rows are taken by one worker
 * batch at a time (in_hands) and, once one of them was not delivered by a
 * sink, the rest are held back for that sink (blocked, sinks_done bits)
 * until none is left. Under pool.mu. */
struct hroom {
    char *name;       /* "<app_code>/<room_id>", the tsearch key (core/tree.h) */
    size_t rows;      /* reserved, queued or in a worker's batch */
    size_t in_hands;  /* of those, in a batch that has not landed */
    uint32_t blocked; /* the sinks one of them did not deliver (all: left to the claims) */
    uint64_t take;    /* the last handoff_take that took rows of the room */
};

struct outbox {
    struct conf_outbox cfg; /* copy; its strings are not used */
    struct store *store;
    struct sink **sinks;
    size_t nsinks;
    struct worker *workers;
    int nworkers;
    struct retention *retention;

    /* The worker threads (core/thread.h); pool.mu guards what follows. */
    struct bg_thread pool;
    /* Wake-ups: outbox_wake bumps wake_seq; an idle worker that sees
     * wake_seq != taken_seq takes it (taken_seq = wake_seq) and claims. A
     * wake that arrives while every worker is busy is thus never lost. */
    uint64_t wake_seq;
    uint64_t taken_seq;

    /* The hand-off queue (handoff.c): rows committed already claimed by
     * handoff_by, oldest first, in a ring q[qhead..qhead+qlen) of qalloc.
     * reserved + qlen <= handoff_cap. */
    char handoff_by[STORE_ID_MAX];
    size_t handoff_cap;
    size_t reserved;
    struct outbox_row *q;
    int64_t *qt;       /* clock_mono_us of each row's push, beside q */
    struct hroom **qr; /* each row's room (ordering per_room), beside q */
    size_t qhead, qlen, qalloc;
    void *hrooms;      /* tsearch tree of struct hroom (ordering per_room) */
    uint64_t take_seq; /* handoff_take's stamp */
    struct outbox_stats stats;
    bool metrics; /* outbox_collect_metrics is registered */
    /* per sinks_done bit (outbox/metrics.c), and dead letters no sink was called for */
    struct sink_metrics sm[OUTBOX_SINK_BITS];
    atomic_uint_fast64_t dead_none;

    atomic_bool store_down; /* logged once per state change */

    pthread_mutex_t circ_mu;
    struct sink_circuit *circ;           /* [nsinks] */
    struct bg_thread prober;             /* circuit.c: probes open circuits without traffic */
    atomic_uint_fast64_t outage_rows;    /* rows handed back by an outage, no attempt counted */
    atomic_uint_fast64_t throttled_rows; /* rows handed back by a rate limit (ROOMD_ELIMIT) */
    /* ordering per_room: rows of a batch held (not sent) because an earlier
     * row of their room was not delivered; dead letters after which the
     * room's later rows went on (poison policy); commits whose rows went
     * pending because their room had an undelivered row; commits whose rows
     * were queued behind their room's rows still in memory (room affinity) */
    atomic_uint_fast64_t order_held, order_failed, order_busy, order_affine;
};

/* The sinks' circuits (circuit.c). init/free: outbox_open/close; init
 * also starts the prober thread when a sink has a probe (sink.h), which
 * sends an open circuit's half-open probe when no event did by its time;
 * stop joins it (outbox_close, before the sinks close; free does it too).
 * admit: true when sink k may be called now (closed, or the half-open
 * probe). note: what the call gave: answered (any answer) or not
 * (ROOMD_EUNAVAIL). read: a copy of sink k's state (metrics). all_probed:
 * true when no sink's peer answers (its circuit, or that of a sink sharing
 * its peer, is open) and the prober, not an event, probes them: rows
 * claimed now could only be handed back. Thread: any (circ_mu);
 * init/stop/free: the outbox's opener. */
void circuit_init(struct outbox *ob);
void circuit_stop(struct outbox *ob);
void circuit_free(struct outbox *ob);
bool circuit_admit(struct outbox *ob, size_t k);
void circuit_note(struct outbox *ob, size_t k, bool answered);
void circuit_read(struct outbox *ob, size_t k, struct sink_circuit *out);
bool circuit_all_probed(struct outbox *ob);
/* The sinks_done bits of the sinks whose peer does not answer (as
 * circuit_all_probed) and that the prober probes (a probe, the prober
 * running): the ordered claim parks the rows that lack only those
 * (store_outbox_park; docs/outbox.md). 0 when none. Thread: any (circ_mu). */
uint32_t circuit_parked(struct outbox *ob);
/* True when sink k answered a call (any answer) after since_ms (clock_mono_ms). */
bool circuit_answered_since(struct outbox *ob, size_t k, int64_t since_ms);

/* Sets handoff_by ("<node>/h") and the queue's capacity from
 * cfg.handoff_queue (-1: max(1024, 4 * workers * batch_size)). Called by
 * outbox_open before the workers start. */
void handoff_init(struct outbox *ob, const char *node);

struct slot;

/* One batch of handed-off rows as handoff_take gives it; every array is
 * the caller's (rows: outbox_rows_free; the others: free). */
struct handoff_batch {
    struct outbox_row *rows;
    size_t n;
    int64_t *pushed_us;   /* clock_mono_us of each row's push */
    struct hroom **rooms; /* ordering per_room: each row's room, else NULL */
    uint32_t *blocked;    /* with rooms: the sinks its room was blocked for at the take */
};

/* Moves up to max of the oldest queued rows that may go now into b. With
 * ordering per_room, a room's rows go only while none of its rows is in
 * another batch that has not landed (they stay queued, in order; the take
 * after that batch lands gets them), and each row's room is counted in
 * hands (handoff_landed gives it back). all: every queued row, rooms
 * ignored (the close). Returns b->n. Holds ob->pool.mu, or runs after the
 * workers were joined. */
size_t handoff_take(struct outbox *ob, size_t max, bool all, struct handoff_batch *b);

/* Frees b's rows (outbox_rows_free) and arrays and zeroes it. Thread: the
 * batch's owner. */
void handoff_batch_free(struct handoff_batch *b);

/* True when handoff_take would give a row now. Holds ob->pool.mu. */
bool handoff_ready(struct outbox *ob);

/* A batch of handed-off rows landed (rooms[i] each row's room, NULL: none;
 * sl[i] its outcome, n rows): their
 * rooms are out of hands (their next rows may be taken), and a room with a
 * row not delivered is blocked: its later rows in memory are held back.
 * Wakes a worker when rows wait. Thread: the batch's worker; locks pool.mu. */
void handoff_landed(struct outbox *ob, struct hroom *const *rooms, const struct slot *sl, size_t n);

/* The completion of a batch (rooms as for handoff_landed) was written or
 * given up: its rows leave
 * their rooms' count. Thread: the batch's worker; locks pool.mu. */
void handoff_done(struct outbox *ob, struct hroom *const *rooms, size_t n);

/* The collector outbox_open adds (metrics.h): outbox_stats of arg (a struct
 * outbox) as roomd_outbox_* lines (outbox/metrics.c). */
struct metrics_text;
void outbox_collect_metrics(void *arg, struct metrics_text *t);

/* The per-sink metrics (outbox/metrics.c): roomd_outbox_delivery_seconds,
 * _attempts_total, _dead_letters_total, _sink_oldest_undelivered_seconds,
 * _sink_up, all {sink}. init names ob->sm from ob->sinks (before the workers
 * start); the rest are called by any worker, lock-free. */
void outbox_metrics_init(struct outbox *ob);
/* The outcome of a sink's return code. */
enum sink_call sink_call_of(int rc);
/* The sink with bit `bit` was called and came to outcome. */
void outbox_metrics_attempt(struct outbox *ob, uint32_t bit, enum sink_call outcome);
/* The sink with bit `bit` delivered a row lag_us after its commit. */
void outbox_metrics_delivered(struct outbox *ob, uint32_t bit, int64_t lag_us);
/* A row became a dead letter lacking the sinks `missing` (0: none was called). */
void outbox_metrics_dead_letter(struct outbox *ob, uint32_t missing);
/* 1 when the sink named name answered its last call (or was never called),
 * 0 when not, -1 when no sink has that name. */
int outbox_metrics_sink_up(struct outbox *ob, const char *name);

/* Frees the queue's memory (rows left are the caller's to hand back first). */
void handoff_free(struct outbox *ob);

/* A row's last_error as the worker builds it (sink: reason; ...). */
#define LAST_ERROR_MAX 512

/* One row of a batch while it is published (worker.c; its room's order in
 * the batch: order.c). Owned by the worker thread of the batch. */
struct slot {
    const struct outbox_row *row;
    struct outbox_event ev; /* built once; ev.envelope / ev.json are ours */
    bool released;          /* handed back unpublished (release_row) */
    bool finished;          /* no further sink is called: poison or a permanent refusal */
    int rc;                 /* 0 so far, ROOMD_ERETRY or ROOMD_EPERM */
    bool counted;           /* a sink answered "not now": the failure costs an attempt;
                             * false with rc ERETRY: only outages (no answer, circuit
                             * open, no time left), which cost none */
    bool throttled;         /* a sink throttled it (ROOMD_ELIMIT, sink.h): no attempt */
    uint32_t hold;          /* ordering per_room, per sink (sinks_done bits): the sinks
                             * an earlier row of the room did not deliver; they are not
                             * called for this row (held), no attempt counted */
    uint32_t missed;        /* sinks called (or due to be) that did not deliver now:
                             * failures, outages, timeouts (not the holds) */
    size_t room;            /* the row's room, numbered within the batch (number_rooms) */
    uint32_t done;          /* sinks_done so far */
    uint32_t tried;         /* sinks called in this attempt (bits) */
    uint32_t failed;        /* of those, the ones that did not deliver */
    uint8_t outcome[OUTBOX_SINK_BITS]; /* enum sink_call, by bit index */
    char err[LAST_ERROR_MAX];
};

/* order.c, ordering per_room within a batch of n slots, per sink (worker
 * thread). blocked, before: a sinks_done mask per room of the batch (the
 * sinks the room's later rows are held for). number_rooms numbers
 * sl[i].room (equal for one room's rows, < n); note_room adds to
 * blocked[sl->room] the sinks sl did not deliver so far (slot_blocks);
 * hold_if_blocked holds sl for the sinks of blocked[its room] it still
 * needs; hold_later holds, in commit order, every row of sl[lo..hi) for
 * the sinks an earlier row there did not deliver or that before marks (the
 * rows before lo, and the rows outside the batch: the claim's held_sinks,
 * the hand-off's blocked rooms; before and blocked: nrooms places, blocked
 * is set from before first). */
void number_rooms(struct slot *sl, size_t n);
void note_room(const struct slot *sl, uint32_t *blocked);
void hold_if_blocked(struct outbox *ob, struct slot *sl, const uint32_t *blocked);
void hold_later(struct outbox *ob, struct slot *sl, size_t lo, size_t hi, const uint32_t *before,
                uint32_t *blocked, size_t nrooms);
/* The sinks (sinks_done bits) the later rows of sl's room are held for:
 * every bit when sl was handed back, the sinks it still lacks when it was
 * given up for this attempt (lock too short), none when it will be a dead
 * letter (a permanent refusal, poison: its room's later rows go on), else
 * the sinks it missed or was held for so far. */
uint32_t slot_blocks(const struct slot *sl);
/* True when sink s still has to deliver sl now: not handed back or given
 * up, not in sl's sinks_done, not held for s, and s accepts the event. */
bool sink_needed(const struct slot *sl, struct sink *s);

/* ==== one batch in flight (dispatch.c publishes it, claim.c completes it) ==== */

/* One sink's reason in a row's last_error. */
#define SINK_ERR_LEN 256

/* One batch sink's call for a batch: the events of the slots that need it
 * (idx: their slots), and what it answered. */
struct batch_call {
    size_t ks; /* the sink */
    struct outbox_event *evs;
    size_t *idx;
    int *rcs;
    char *errs;
    size_t k;           /* events in the call */
    void *handle;       /* publish_start's, while the answers are outstanding */
    int64_t started_ms; /* clock_mono_ms of the call (peer_answers) */
};

/*
 * A batch from its publish to its completion: one claim (up to
 * claim_batches x batch_size rows, published batch_size at a time) or one
 * take of the hand-off queue. The worker keeps one in the air (the last
 * batch sink's answers outstanding) while it claims and publishes the next:
 * the window of outstanding acks across batches. rows (and pushed_us, for
 * handed-off rows) are the flight's.
 */
struct flight {
    struct outbox_row *rows;
    size_t n;
    int64_t *pushed_us;   /* clock_mono_us of each handed-off row's push, or NULL */
    struct hroom **rooms; /* ordering per_room: each handed-off row's room, or NULL */
    struct slot *sl;
    struct outbox_result *res;
    char **errs;
    struct batch_call air; /* air.handle: the answers still outstanding */
    int64_t t0, t1, t2;    /* built from, published from, answered at */
};

/*
 * Landed flights whose completions wait to be written together: one store
 * transaction for several batches (issue 13: on MariaDB each completion
 * transaction is a commit and its round trips). A waiting flight's rows
 * stay delivering (claimed by this worker's claimer or "<node>/h") and, in
 * memory, counted in their rooms (handoff_done comes with the completion),
 * so the store's room check and the hand-off's room affinity see them busy
 * exactly as while their acks were outstanding; a crash before the write
 * leaves them to the claims once their lock expires (at least once). The
 * worker writes them when it has nothing else to do at once, before a
 * claim, on stop, and as soon as outbox_worker.complete_gather passed
 * since the first one landed or GATHER_ROWS_PER_BATCH x batch_size rows
 * wait (complete_gather 0: each on its own, at once). complete_gather <
 * lock_timeout - publish_timeout (conf/validate.c), and before waiting for another
 * batch's answers the worker writes them when their earliest lock would
 * not outlast that wait (gather_before_land), so the write comes before
 * the rows' lock expires.
 */
#define GATHER_ROWS_PER_BATCH 4

struct gather {
    struct flight **f;
    size_t n, alloc, rows;
    int64_t since_ms;    /* clock_mono_ms when the first one was added */
    int64_t lock_min_ms; /* the earliest lock_until_ms of their rows (wall clock) */
};

/* dispatch.c (the worker thread owning the flight). flight_start: builds
 * b's rows' events and publishes them (see dispatch.c), returning the
 * flight, which owns b's arrays (b is zeroed); its last batch sink's
 * answers may still be outstanding (air.handle). flight_land: collects
 * them and fills f->res with each row's outcome and the metrics.
 * release_row: res says row goes back without an attempt (retryable at
 * now, nothing counted). Block on the sinks (flight_start, flight_land). */
struct flight *flight_start(struct outbox *ob, struct handoff_batch *b);
void flight_land(struct outbox *ob, struct flight *f);
void release_row(const struct outbox_row *row, struct outbox_result *res, int64_t now);

/* claim.c (the worker thread of w or of the flights; block on the store).
 * claim: one claim of w (done, a landed flight or NULL, is completed in the
 * same transaction when it can be, and freed either way); returns the rows
 * (*n; NULL when none or the claim failed), the caller's. claims_next: true
 * when w claims again at once. flight_complete: completes landed f alone
 * and frees it (NULL: nothing). flight_free: counts f's times and frees it.
 * gather_add / gather_flush / gather_before_land: the gathered completions
 * (see struct gather). */
struct worker;
struct outbox_row *claim(struct worker *w, struct flight *done, size_t *n);
bool claims_next(struct worker *w);
void flight_complete(struct outbox *ob, struct flight *f);
void flight_free(struct outbox *ob, struct flight *f, int64_t complete_us);
void gather_flush(struct outbox *ob, struct gather *g);
void gather_add(struct outbox *ob, struct gather *g, struct flight *f);
void gather_before_land(struct outbox *ob, struct gather *g);

#endif
