/* SPDX-License-Identifier: Apache-2.0 */
/*
 * order.c: outbox_worker.ordering per_room inside one batch (docs/outbox.md,
 * "Per-room order"), per sink: the batch's rooms numbered once, and a row
 * held for a sink (that sink not called for it, retried after, no attempt
 * counted) while an earlier row of its room did not deliver that sink, in
 * the batch (also across the sink calls a deep claim is split into) or
 * outside it (the claim's held_sinks, the hand-off's blocked rooms). Its
 * other sinks go on. The claims keep the order between batches
 * (store/<backend>/outbox.c). Called by the worker
 * thread that owns the batch (worker.c); never blocks.
 */
#include "outbox/internal.h"

#include "core/err.h"
#include "core/sink_bits.h"
#include "core/xmalloc.h"

#include <stdlib.h>
#include <string.h>

uint32_t
slot_blocks(const struct slot *sl)
{
    if (sl->released)
        return SINK_BITS_ALL;
    if (sl->rc == ROOMD_EPERM)
        return 0; /* a dead letter: as across batches (the poison policy), the room goes on */
    if (sl->finished && sl->rc != 0)
        return SINK_BITS_ALL & ~sl->done; /* given up for this attempt */
    return sl->missed | sl->hold;
}

/* ordering per_room, per sink: holds sl for every sink of blocked[its room]
 * (filled by note_room) it still needs: an earlier row of its room did not
 * deliver that sink. A held row keeps the sinks it reaches, the held ones
 * are not called for it, and it is retried for them after that row. */
void
hold_if_blocked(struct outbox *ob, struct slot *sl, const uint32_t *blocked)
{
    uint32_t b, newly = 0;

    if (ob->cfg.ordering != ORDERING_PER_ROOM || sl->released || sl->finished)
        return;
    if ((b = blocked[sl->room] & ~sl->hold & ~sl->done) == 0)
        return;
    for (size_t k = 0; k < ob->nsinks; k++)
        if ((b & ob->sinks[k]->bit) && sink_needed(sl, ob->sinks[k]))
            newly |= ob->sinks[k]->bit;
    if (newly == 0)
        return;
    if (sl->hold == 0)
        atomic_fetch_add(&ob->order_held, 1);
    sl->hold |= newly;
    if (sl->rc == 0)
        sl->rc = ROOMD_ERETRY;
}

/* Adds to blocked[sl's room] the sinks sl did not deliver so far. */
void
note_room(const struct slot *sl, uint32_t *blocked)
{
    blocked[sl->room] |= slot_blocks(sl);
}

/* ordering per_room: holds every row of sl[lo..hi) (in commit order) for
 * the sinks an earlier row of its room did not deliver, before the next
 * sink is called: one of sl[lo..) before it, or the rows before lo and
 * outside the batch, which before marks (nrooms places, the batch's rooms).
 * One pass; blocked (nrooms places) ends as before plus what the rows of
 * sl[lo..hi) did not deliver. */
void
hold_later(struct outbox *ob, struct slot *sl, size_t lo, size_t hi, const uint32_t *before,
           uint32_t *blocked, size_t nrooms)
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
