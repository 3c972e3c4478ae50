/* SPDX-License-Identifier: Apache-2.0 */
/*
 * outbox/handoff.h: the in-process hand-off (docs/outbox.md). A command's
 * outbox rows go from the commit straight to this process's workers,
 * without a claim query. The room service makes two calls around each
 * commit:
 *
 *     outbox_handoff_begin(ob, &m);      // before store_save
 *     rc = commit(&m);
 *     outbox_handoff_end(ob, &m, rc);    // after it, whatever rc
 *
 * begin takes m->nevents places in the bounded hand-off queue; when it gets
 * them the rows are inserted already claimed (m->locked_by, m->lock_until_ms,
 * store.h). end then pushes the committed rows to the workers or gives the
 * places back; rows that were not handed off (queue full, hand-off off,
 * stopping, no outbox) are inserted pending and end wakes a worker to claim
 * them. A worker publishes handed-off rows and completes them fenced by the
 * hand-off claimer, only while their lock outlasts publish_timeout. Rows
 * that never reach a worker (the process died) are claimed by anyone once
 * their lock expires.
 *
 * Thread: any; never blocks on I/O (end copies the rows, under a mutex).
 */
#ifndef ROOMD_OUTBOX_HANDOFF_H
#define ROOMD_OUTBOX_HANDOFF_H

#include <stdbool.h>
#include <stddef.h>

struct outbox;
struct mutation;

/* Reserves m->nevents places. Returns true and sets m->locked_by ("<node>/h",
 * static for the outbox's life), m->lock_until_ms and, with ordering
 * per_room, m->handoff_if_room_idle (store_save then inserts the rows
 * pending when the room has an undelivered row: they go to the ordered
 * claim, and end wakes a worker for them); false (and
 * m->locked_by NULL) when ob is NULL, m has no events, the queue is full or
 * off, or the outbox is stopping. */
bool outbox_handoff_begin(struct outbox *ob, struct mutation *m);

/* Finishes what begin started, once the commit of m returned rc: rc 0 and
 * handed off -> the rows (m->events[i].id set by store_save) are copied to
 * the queue; rc != 0 and handed off -> the places are given back; rc 0 and
 * not handed off -> outbox_wake. ob NULL is a no-op. */
void outbox_handoff_end(struct outbox *ob, const struct mutation *m, int rc);

/* Sets the queue's capacity in rows (reserved + queued); 0 turns the
 * hand-off off. outbox_open sets it from outbox_worker.handoff_queue (-1:
 * max(1024, 4 * workers * batch_size)). */
void outbox_handoff_set_capacity(struct outbox *ob, size_t rows);

#endif
