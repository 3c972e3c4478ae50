/* SPDX-License-Identifier: Apache-2.0 */
/*
 * presence.c: presence expiry (see presence.h). The table of a cell is a
 * sorted array of presence_entry, guarded by the map mutex (cell.c), so a
 * heartbeat costs a hash lookup and a binary search, no store write and no
 * turn on the room. The sweeper thread collects, under the map mutex, the
 * members silent past the timeout (marking each "leaving", so one leave at
 * a time per membership), then outside the mutex sends each its LeaveRoom
 * through room_service_execute; the service re-checks in the room's turn
 * (presence_still_idle) so a heartbeat that came meanwhile wins.
 */
#include "room/presence.h"

#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/thread.h"
#include "core/xmalloc.h"
#include "room/service.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ---- the table ---------------------------------------------------------------------- */

/* Index of uid in c->pres, or where it would go (*found false). */
static size_t
search(const struct cell *c, int64_t uid, bool *found)
{
    size_t lo = 0, hi = c->npres;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c->pres[mid].uid < uid)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = lo < c->npres && c->pres[lo].uid == uid;
    return lo;
}

struct presence_entry *
presence_find_locked(struct cell *c, int64_t uid)
{
    bool found;
    size_t i = search(c, uid, &found);

    return found ? &c->pres[i] : NULL;
}

static void
add_locked(struct cell *c, int64_t uid, int64_t joined_at_ms, int64_t now)
{
    bool found;
    size_t i = search(c, uid, &found);

    if (!found) {
        c->pres = xgrow(c->pres, c->npres, &c->cap_pres, sizeof(*c->pres));
        memmove(&c->pres[i + 1], &c->pres[i], (c->npres - i) * sizeof(*c->pres));
        c->npres++;
    }
    c->pres[i].uid = uid;
    c->pres[i].joined_at_ms = joined_at_ms;
    c->pres[i].seen_ms = now;
    c->pres[i].leaving = false;
}

static void
remove_locked(struct cell *c, int64_t uid)
{
    bool found;
    size_t i = search(c, uid, &found);

    if (!found)
        return;
    memmove(&c->pres[i], &c->pres[i + 1], (c->npres - i - 1) * sizeof(*c->pres));
    c->npres--;
}

static int
by_uid(const void *a, const void *b)
{
    const struct presence_entry *x = a, *y = b;

    return x->uid < y->uid ? -1 : x->uid > y->uid;
}

void
presence_reset_locked(struct cell *c, const struct room_state *s, int64_t now)
{
    size_t n = s != NULL ? s->nmembers : 0;

    c->npres = 0;
    if (n > c->cap_pres) {
        c->pres = xrealloc(c->pres, n * sizeof(*c->pres));
        c->cap_pres = n;
    }
    for (size_t i = 0; i < n; i++) {
        c->pres[i].uid = s->members[i].uid;
        c->pres[i].joined_at_ms = s->members[i].joined_at_ms;
        c->pres[i].seen_ms = now;
        c->pres[i].leaving = false;
    }
    c->npres = n;
    if (n > 1)
        qsort(c->pres, n, sizeof(*c->pres), by_uid);
    c->pres_synced = true;
}

void
presence_clear_locked(struct cell *c)
{
    c->npres = 0;
    c->pres_synced = false;
    c->pres_fresh_until_ms = 0;
}

/* ---- the command path ---------------------------------------------------------------- */

/* The uid whose command it is (the one shown alive by sending it), 0 = none. */
static int64_t
actor_of(const struct room_cmd *cmd)
{
    switch (cmd->type) {
    case CMD_JOIN_ROOM:
    case CMD_MIC_UP:
    case CMD_MIC_DOWN:
    case CMD_SEND_GIFT:
        return cmd->uid;
    case CMD_KICK_USER:
    case CMD_CLOSE_ROOM:
        return cmd->operator_uid;
    default:
        return 0; /* create (no member yet), leave (gone), launch (roomd) */
    }
}

void
presence_after_command(struct cell_map *m, struct cell *c, const struct room_cmd *cmd,
                       bool committed)
{
    int64_t now = clock_mono_ms(), actor = actor_of(cmd);
    struct presence_entry *e;
    int i;

    cell_map_lock(m);
    if (!c->pres_synced) {
        cell_map_unlock(m);
        return;
    }
    if (committed) {
        switch (cmd->type) {
        case CMD_JOIN_ROOM:
            i = c->state != NULL ? room_state_member_index(c->state, cmd->uid) : -1;
            if (i >= 0)
                add_locked(c, cmd->uid, c->state->members[i].joined_at_ms, now);
            break;
        case CMD_LEAVE_ROOM:
        case CMD_KICK_USER:
            remove_locked(c, cmd->uid);
            break;
        case CMD_CLOSE_ROOM:
            presence_reset_locked(c, NULL, now);
            break;
        default:
            break;
        }
    }
    if (actor != 0 && (e = presence_find_locked(c, actor)) != NULL)
        e->seen_ms = now; /* a leave on its way re-checks this in its turn */
    cell_map_unlock(m);
}

bool
presence_still_idle(struct cell_map *m, struct cell *c, const struct room_cmd *cmd,
                    int64_t timeout_ms)
{
    struct presence_entry *e;
    bool idle;

    cell_map_lock(m);
    e = c->pres_synced ? presence_find_locked(c, cmd->uid) : NULL;
    idle = e != NULL && e->joined_at_ms == cmd->idle_joined_at_ms &&
           clock_mono_ms() - e->seen_ms >= timeout_ms;
    cell_map_unlock(m);
    return idle;
}

bool
presence_touch(struct cell_map *m, struct cell *c, int64_t uid, int64_t expire_ms)
{
    struct presence_entry *e;

    cell_map_lock(m);
    e = c->pres_synced ? presence_find_locked(c, uid) : NULL;
    if (e != NULL)
        e->seen_ms = clock_mono_ms() - expire_ms;
    cell_map_unlock(m);
    return e != NULL;
}

int
presence_heartbeat_fast(struct cell_map *m, const char *app, const char *room_id, int64_t uid,
                        int64_t expire_ms)
{
    int64_t now = clock_mono_ms();
    struct presence_entry *e;
    struct cell *c;
    int r = -1;

    cell_map_lock(m);
    c = cell_lookup_locked(m, app, room_id);
    if (c != NULL && c->pres_synced && c->npres > 0 && now < c->pres_fresh_until_ms) {
        /* synced: the table is exactly the members; an empty one (no room,
         * a closed room, nobody in it) is left to the turn, which tells
         * 404 from 409 */
        e = presence_find_locked(c, uid);
        if (e != NULL) {
            e->seen_ms = now - expire_ms;
            c->last_used_ms = now;
        }
        r = e != NULL ? 1 : 0;
    }
    cell_map_unlock(m);
    return r;
}

/* ---- the sweeper --------------------------------------------------------------------- */

struct due {
    char app[STORE_ID_MAX];
    char room_id[STORE_ID_MAX];
    int64_t uid, joined_at_ms; /* uid 0: a lease renewal of the room */
};

struct presence_sweeper {
    struct room_service *svc;
    struct cell_map *m;
    int64_t timeout_ms, renew_every_ms, every_ms;
    struct bg_thread th;
    _Atomic uint64_t sent, left;
    /* the pass being collected (sweeper thread only) */
    struct due *due;
    size_t ndue, capdue;
    int64_t now;
};

static void
push_due(struct presence_sweeper *p, const struct cell *c, int64_t uid, int64_t joined_at_ms)
{
    struct due *d;

    p->due = xgrow(p->due, p->ndue, &p->capdue, sizeof(*p->due));
    d = &p->due[p->ndue++];
    strlcpy_(d->app, c->app, sizeof(d->app));
    strlcpy_(d->room_id, c->room_id, sizeof(d->room_id));
    d->uid = uid;
    d->joined_at_ms = joined_at_ms;
}

/* Under the map mutex: the silent members of c, and c itself when its lease
 * is due for renewal while members' clocks run (no command may come to
 * renew it: everyone may be silent). */
static void
collect(struct cell *c, void *arg)
{
    struct presence_sweeper *p = arg;

    if (!c->pres_synced || c->npres == 0)
        return;
    for (size_t i = 0; i < c->npres; i++) {
        struct presence_entry *e = &c->pres[i];
        if (!e->leaving && p->now - e->seen_ms >= p->timeout_ms) {
            e->leaving = true;
            push_due(p, c, e->uid, e->joined_at_ms);
        }
    }
    if (c->pres_fresh_until_ms != INT64_MAX && c->pres_fresh_until_ms <= p->now + p->every_ms)
        push_due(p, c, 0, 0);
}

/* Sends the idle leave of d; afterwards the membership may be tried again
 * in a later pass unless it left (then its entry is gone). */
static void
leave(struct presence_sweeper *p, const struct due *d)
{
    struct room_reply reply = {0};
    struct room_cmd cmd;
    struct presence_entry *e;
    struct cell *c;

    if (room_cmd_idle_leave(d->app, d->room_id, d->uid, d->joined_at_ms, &cmd) != 0)
        return;
    atomic_fetch_add(&p->sent, 1);
    room_service_execute(p->svc, &cmd, &reply);
    if (reply.status == 200 && reply.body != NULL && strstr(reply.body, "\"left\":false") == NULL)
        atomic_fetch_add(&p->left, 1);
    log_info("room", "idle leave", "app=%s room=%s uid=%lld command_id=%s status=%d", d->app,
             d->room_id, (long long)d->uid, cmd.command_id, reply.status);
    cell_map_lock(p->m);
    c = cell_lookup_locked(p->m, d->app, d->room_id);
    e = c != NULL ? presence_find_locked(c, d->uid) : NULL;
    if (e != NULL && e->joined_at_ms == d->joined_at_ms)
        e->leaving = false;
    cell_map_unlock(p->m);
    room_reply_clear(&reply);
    room_cmd_clear(&cmd);
}

/* A turn on the room with nothing to do: cell_acquire renews the lease
 * (or finds it lost and forgets the table). */
static void
renew(struct presence_sweeper *p, const struct due *d)
{
    char owner[256];
    struct cell *c;
    int64_t us;

    if (cell_acquire(p->m, d->app, d->room_id, &c, owner, sizeof(owner), &us) == 0)
        cell_release(p->m, c, false);
}

static void *
sweep_main(void *arg)
{
    struct presence_sweeper *p = arg;

    while (!bg_thread_sleep(&p->th, p->every_ms)) {
        p->ndue = 0;
        p->now = clock_mono_ms();
        cell_map_lock(p->m);
        cell_map_each_locked(p->m, collect, p);
        cell_map_unlock(p->m);
        for (size_t i = 0; i < p->ndue && !bg_thread_stopping(&p->th); i++) {
            if (p->due[i].uid != 0)
                leave(p, &p->due[i]);
            else
                renew(p, &p->due[i]);
        }
    }
    return NULL;
}

int
presence_sweeper_open(struct presence_sweeper **out, struct room_service *svc, struct cell_map *m,
                      int64_t timeout_ms, int64_t renew_every_ms)
{
    struct presence_sweeper *p;

    *out = NULL;
    if (timeout_ms <= 0)
        return 0;
    p = xcalloc(1, sizeof(*p));
    p->svc = svc;
    p->m = m;
    p->timeout_ms = timeout_ms;
    p->renew_every_ms = renew_every_ms;
    p->every_ms = timeout_ms / 4 < 20 ? 20 : timeout_ms / 4 > 1000 ? 1000 : timeout_ms / 4;
    *out = bg_thread_start_owner(&p->th, sweep_main, p);
    return *out != NULL ? 0 : ROOMD_EINTERNAL;
}

void
presence_sweeper_close(struct presence_sweeper *p)
{
    if (p == NULL)
        return;
    bg_thread_stop(&p->th);
    free(p->due);
    free(p);
}

void
presence_sweeper_counts(struct presence_sweeper *p, uint64_t *sent, uint64_t *left)
{
    *sent = p != NULL ? atomic_load(&p->sent) : 0;
    *left = p != NULL ? atomic_load(&p->left) : 0;
}
