/* SPDX-License-Identifier: Apache-2.0 */
/*
 * order.c: outbox_worker.ordering per_room inside one batch (docs/outbox.md,
 * "Per-room order"): the batch's rooms numbered once, and a row held (no
 * further sink called, retried after it, no attempt counted) while an
 * earlier row of its room in the batch is undelivered, also across the
 * sink calls a deep claim is split into. The claims keep the order between
 * batches (store/<backend>/outbox.c). Called by the worker
 * thread that owns the batch (worker.c); never blocks.
 */
#include "outbox/internal.h"

#include "core/err.h"
#include "core/xmalloc.h"

#include <stdlib.h>
#include <string.h>

/* True when sl was handed back or is not delivered so far: the rows of its
 * room after it in the batch are held (ordering per_room). A row a sink
 * refused for good will be a dead letter: as across batches (the poison
 * policy), its room's later rows go on. */
bool
slot_undelivered(const struct slot *sl)
{
    return (sl->rc != 0 && sl->rc != ROOMD_EPERM) || sl->released || sl->held;
}

/* ordering per_room: holds sl[i] when an earlier row of its room in the
 * batch is undelivered (blocked[its room], filled by note_room) and no sink
 * has refused it yet. A held row keeps the sinks it already reached, no
 * further sink is called for it, and it is retried after that row. */
void
hold_if_blocked(struct outbox *ob, struct slot *sl, const bool *blocked)
{
    if (ob->cfg.ordering != ORDERING_PER_ROOM || !blocked[sl->room] || sl->held || sl->released ||
        sl->finished || sl->rc != 0)
        return;
    sl->held = true;
    sl->finished = true;
    sl->rc = ROOMD_ERETRY;
    atomic_fetch_add(&ob->order_held, 1);
}

/* Marks sl's room blocked for the rows after sl when sl is undelivered. */
void
note_room(const struct slot *sl, bool *blocked)
{
    if (slot_undelivered(sl))
        blocked[sl->room] = true;
}

/* ordering per_room: holds every row of sl[lo..hi) (in commit order) whose
 * room has an earlier undelivered row, before the next sink is called: one
 * of sl[lo..) before it, or one of the rows before lo, whose rooms before
 * marks (nrooms places, the batch's rooms). One pass; blocked (nrooms
 * places) ends as before plus the rooms of sl[lo..hi)'s undelivered rows. */
void
hold_later(struct outbox *ob, struct slot *sl, size_t lo, size_t hi, const bool *before,
           bool *blocked, size_t nrooms)
{
    memcpy(blocked, before, nrooms * sizeof(*blocked));
    for (size_t i = lo; i < hi; i++) {
        hold_if_blocked(ob, &sl[i], blocked);
        note_room(&sl[i], blocked);
    }
}

static int
cmp_slot_room(const void *a, const void *b)
{
    const struct slot *x = *(struct slot *const *)a, *y = *(struct slot *const *)b;
    int c = strcmp(x->row->app_code, y->row->app_code);

    if (c == 0)
        c = strcmp(x->row->room_id, y->row->room_id);
    return c != 0 ? c : (x > y) - (x < y);
}

/* Numbers the rooms of sl[0..n) (sl[i].room: 0.. < n, equal for the rows of
 * one room), so that hold_later needs no string compare per pair of rows. */
void
number_rooms(struct slot *sl, size_t n)
{
    struct slot **by_room = xcalloc(n > 0 ? n : 1, sizeof(*by_room));
    size_t room = 0;

    for (size_t i = 0; i < n; i++)
        by_room[i] = &sl[i];
    qsort(by_room, n, sizeof(*by_room), cmp_slot_room);
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && (strcmp(by_room[i]->row->app_code, by_room[i - 1]->row->app_code) != 0 ||
                      strcmp(by_room[i]->row->room_id, by_room[i - 1]->row->room_id) != 0))
            room++;
        by_room[i]->room = room;
    }
    free(by_room);
}
