/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_suite.c: the store conformance suite (see store_suite.h). Written
 * against store.h only, so every backend passes the same tests. Times are
 * synthetic milliseconds (T0 + offsets): the store never reads the clock for
 * outbox semantics, the caller passes now.
 */
#include "store_suite.h"

#include "helpers.h" /* cmocka and what it needs */

#include "conf/conf.h"
#include "core/err.h"
#include "core/sink_bits.h"
#include "core/xmalloc.h"
#include "store/group_commit.h"
#include "store/store.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define T0 1000000000LL

static struct conf *(*suite_make_conf)(void);
static int (*suite_reset)(struct store *s);
static atomic_int event_seq; /* tests call tmut_new from several threads */

struct fixture {
    struct conf *conf;
    struct store *st;
};

/* ---- building mutations ---- */

/* A mutation with its own storage for events and payloads (m first: freeing
 * the mutation frees it all). */
struct tmut {
    struct mutation m;
    struct outbox_new ev[8];
    uint8_t payload[8][4];
    struct wallet_debit debit; /* m.debit when set (gift_mut) */
};

static struct tmut *
tmut_new(const char *app, const char *room, const char *cmd, int64_t version, int nevents,
         int64_t t)
{
    struct tmut *x = xcalloc(1, sizeof(*x));
    struct mutation *m = &x->m;

    assert_true(nevents <= 8);
    strlcpy_(m->app_code, app, sizeof(m->app_code));
    strlcpy_(m->room_id, room, sizeof(m->room_id));
    strlcpy_(m->command_id, cmd, sizeof(m->command_id));
    m->command_type = version == 1 ? "CreateRoom" : "JoinRoom";
    m->request = "{\"req\":1}";
    m->response = "{\"ok\":true}";
    m->version = version;
    m->created_at_ms = t;
    m->create = version == 1;
    m->meta.owner_uid = 42;
    m->meta.title = "room title";
    m->meta.status = "open";
    m->meta.version = version;
    m->meta.rocket_status = "idle";
    m->meta.rocket_id = "";
    m->meta.created_at_ms = t;
    m->meta.updated_at_ms = t;
    m->snapshots_keep = 3;
    for (int i = 0; i < nevents; i++) {
        /* 36 chars, unique in the process: "00000000-0000-7000-8000-<seq>". */
        snprintf(x->ev[i].event_id, sizeof(x->ev[i].event_id), "%08x-0000-7000-8000-%012d",
                 (unsigned)getpid(), atomic_fetch_add(&event_seq, 1) + 1);
        x->ev[i].event_type = "RoomUserJoined";
        x->payload[i][0] = 0x0a;
        x->payload[i][1] = 0x00; /* an embedded NUL must survive */
        x->payload[i][2] = (uint8_t)i;
        x->payload[i][3] = 0xff;
        x->ev[i].payload = x->payload[i];
        x->ev[i].payload_len = 4;
    }
    m->events = x->ev;
    m->nevents = (size_t)nevents;
    return x;
}

/* Saves one mutation alone; returns store_save's rc (m.rc holds the mutation's). */
static int
save1(struct store *st, struct tmut *x)
{
    struct mutation *ms[1] = {&x->m};

    return store_save(st, ms, 1);
}

/* Creates room with version 1 and nevents events at t; asserts success. */
static void
create_room(struct store *st, const char *app, const char *room, int nevents, int64_t t)
{
    char cmd[64];
    struct tmut *x;

    snprintf(cmd, sizeof(cmd), "%s-create", room);
    x = tmut_new(app, room, cmd, 1, nevents, t);
    assert_int_equal(save1(st, x), 0);
    assert_int_equal(x->m.rc, 0);
    free(x);
}

static void
step_room(struct store *st, const char *app, const char *room, int64_t version, int nevents,
          int64_t t)
{
    char cmd[64];
    struct tmut *x;

    snprintf(cmd, sizeof(cmd), "%s-v%lld", room, (long long)version);
    x = tmut_new(app, room, cmd, version, nevents, t);
    assert_int_equal(save1(st, x), 0);
    assert_int_equal(x->m.rc, 0);
    free(x);
}

/* Number of outbox rows of room (any status). */
static size_t
room_rows(struct store *st, const char *room)
{
    struct outbox_row *rows;
    size_t n, k = 0;

    assert_int_equal(store_outbox_list(st, -1, 0, 100000, &rows, &n), 0);
    for (size_t i = 0; i < n; i++)
        k += strcmp(rows[i].room_id, room) == 0;
    outbox_rows_free(rows, n);
    return k;
}

/* ---- fixture ---- */

struct mutation *
store_suite_mutation(const char *app, const char *room, const char *cmd, int64_t version,
                     int nevents, int64_t t)
{
    return &tmut_new(app, room, cmd, version, nevents, t)->m;
}

void
store_suite_create_room(struct store *st, const char *app, const char *room, int nevents, int64_t t)
{
    create_room(st, app, room, nevents, t);
}

struct store *
store_suite_open(struct conf *conf)
{
    struct store *st = NULL;
    char err[256] = "";
    int rc = store_open(&st, &conf->store, err, sizeof(err));

    if (rc != 0)
        fail_msg("store_open: %s", err);
    return st;
}

static int
setup(void **state)
{
    struct fixture *f = xcalloc(1, sizeof(*f));

    f->conf = suite_make_conf();
    assert_non_null(f->conf);
    f->st = store_suite_open(f->conf);
    if (suite_reset != NULL)
        assert_int_equal(suite_reset(f->st), 0);
    *state = f;
    return 0;
}

static int
teardown(void **state)
{
    struct fixture *f = *state;

    store_close(f->st);
    conf_free(f->conf);
    free(f);
    return 0;
}

/* ---- command path ---- */

static void
t_save_load(void **state)
{
    struct fixture *f = *state;
    struct room_load l;
    struct tmut *x;

    create_room(f->st, "a1", "r1", 2, T0);
    step_room(f->st, "a1", "r1", 2, 1, T0 + 1);
    x = tmut_new("a1", "r1", "r1-v3", 3, 0, T0 + 2);
    x->m.snapshot = "{\"state\":3}";
    assert_int_equal(save1(f->st, x), 0);
    free(x);
    step_room(f->st, "a1", "r1", 4, 1, T0 + 3);
    step_room(f->st, "a1", "r1", 5, 0, T0 + 4);

    assert_int_equal(store_load_room(f->st, "a1", "r1", &l), 0);
    assert_int_equal(l.version, 5);
    assert_int_equal(l.snapshot_version, 3);
    assert_string_equal(l.snapshot, "{\"state\":3}");
    assert_int_equal(l.ntail, 2);
    assert_int_equal(l.tail[0].version, 4);
    assert_string_equal(l.tail[0].command_id, "r1-v4");
    assert_string_equal(l.tail[0].request, "{\"req\":1}");
    assert_string_equal(l.tail[0].response, "{\"ok\":true}");
    assert_string_equal(l.tail[0].command_type, "JoinRoom");
    assert_int_equal(l.tail[0].created_at_ms, T0 + 3);
    assert_int_equal(l.tail[1].version, 5);
    room_load_clear(&l);

    /* No snapshot: the whole log, in version order. */
    create_room(f->st, "a1", "r2", 0, T0);
    for (int v = 2; v <= 12; v++)
        step_room(f->st, "a1", "r2", v, 0, T0 + v);
    assert_int_equal(store_load_room(f->st, "a1", "r2", &l), 0);
    assert_null(l.snapshot);
    assert_int_equal(l.snapshot_version, 0);
    assert_int_equal(l.ntail, 12);
    for (size_t i = 0; i < l.ntail; i++)
        assert_int_equal(l.tail[i].version, (int64_t)i + 1);
    assert_string_equal(l.tail[0].command_type, "CreateRoom");
    room_load_clear(&l);

    /* Unknown room, and the same room id under another app. */
    assert_int_equal(store_load_room(f->st, "a1", "nope", &l), ROOMD_ENOTFOUND);
    assert_int_equal(store_load_room(f->st, "a2", "r1", &l), ROOMD_ENOTFOUND);
}

static void
t_find_command(void **state)
{
    struct fixture *f = *state;
    struct command_record r;

    create_room(f->st, "a1", "r1", 1, T0);
    step_room(f->st, "a1", "r1", 2, 1, T0 + 5);
    assert_int_equal(store_find_command(f->st, "a1", "r1-v2", &r), 0);
    assert_string_equal(r.room_id, "r1");
    assert_string_equal(r.command_id, "r1-v2");
    assert_string_equal(r.command_type, "JoinRoom");
    assert_string_equal(r.response, "{\"ok\":true}");
    assert_int_equal(r.version, 2);
    assert_int_equal(r.created_at_ms, T0 + 5);
    command_record_clear(&r);
    assert_int_equal(store_find_command(f->st, "a1", "missing", &r), ROOMD_ENOTFOUND);
    /* command ids are per app */
    assert_int_equal(store_find_command(f->st, "a2", "r1-v2", &r), ROOMD_ENOTFOUND);
}

static void
t_batch_reused(void **state)
{
    struct fixture *f = *state;
    struct tmut *a, *b, *c;
    struct room_load l;
    struct command_record r;

    create_room(f->st, "a1", "r0", 1, T0);
    a = tmut_new("a1", "rA", "cmd-A", 1, 2, T0 + 1);
    b = tmut_new("a1", "rB", "r0-create", 1, 2, T0 + 1); /* reuses r0's command_id */
    c = tmut_new("a1", "rC", "cmd-C", 1, 1, T0 + 1);
    struct mutation *ms[3] = {&a->m, &b->m, &c->m};
    assert_int_equal(store_save(f->st, ms, 3), 0);
    assert_int_equal(a->m.rc, 0);
    assert_int_equal(b->m.rc, ROOMD_EREUSED);
    assert_int_equal(c->m.rc, 0);

    assert_int_equal(store_load_room(f->st, "a1", "rA", &l), 0);
    room_load_clear(&l);
    assert_int_equal(store_load_room(f->st, "a1", "rC", &l), 0);
    room_load_clear(&l);
    assert_int_equal(store_load_room(f->st, "a1", "rB", &l), ROOMD_ENOTFOUND);
    assert_int_equal(room_rows(f->st, "rA"), 2);
    assert_int_equal(room_rows(f->st, "rB"), 0);
    assert_int_equal(room_rows(f->st, "rC"), 1);
    /* The original command is untouched. */
    assert_int_equal(store_find_command(f->st, "a1", "r0-create", &r), 0);
    assert_string_equal(r.room_id, "r0");
    command_record_clear(&r);
    free(a);
    free(b);
    free(c);
}

static void
t_fence(void **state)
{
    struct fixture *f = *state;
    struct room_load l;
    struct tmut *x;

    x = tmut_new("a1", "r1", "c1", 1, 0, T0);
    x->m.fence_token = 5;
    assert_int_equal(save1(f->st, x), 0);
    free(x);

    /* A version gap and a repeated version are both fenced. */
    x = tmut_new("a1", "r1", "c3", 3, 1, T0);
    x->m.fence_token = 5;
    assert_int_equal(save1(f->st, x), 0);
    assert_int_equal(x->m.rc, ROOMD_EFENCED);
    free(x);
    x = tmut_new("a1", "r1", "c1b", 1, 1, T0);
    x->m.create = false;
    x->m.fence_token = 5;
    assert_int_equal(save1(f->st, x), 0);
    assert_int_equal(x->m.rc, ROOMD_EFENCED);
    free(x);

    /* An older lease token is fenced; equal and newer pass. */
    x = tmut_new("a1", "r1", "c2old", 2, 1, T0);
    x->m.fence_token = 4;
    assert_int_equal(save1(f->st, x), 0);
    assert_int_equal(x->m.rc, ROOMD_EFENCED);
    free(x);
    x = tmut_new("a1", "r1", "c2", 2, 1, T0);
    x->m.fence_token = 5;
    assert_int_equal(save1(f->st, x), 0);
    assert_int_equal(x->m.rc, 0);
    free(x);
    x = tmut_new("a1", "r1", "c3new", 3, 0, T0);
    x->m.fence_token = 7;
    assert_int_equal(save1(f->st, x), 0);
    assert_int_equal(x->m.rc, 0);
    free(x);
    x = tmut_new("a1", "r1", "c4stale", 4, 0, T0);
    x->m.fence_token = 5; /* the old owner after the new one took over */
    assert_int_equal(save1(f->st, x), 0);
    assert_int_equal(x->m.rc, ROOMD_EFENCED);
    free(x);

    assert_int_equal(store_load_room(f->st, "a1", "r1", &l), 0);
    assert_int_equal(l.version, 3);
    assert_int_equal(l.fence_token, 7);
    assert_int_equal(l.ntail, 3);
    room_load_clear(&l);
    assert_int_equal(room_rows(f->st, "r1"), 1); /* only c2's event */

    /* In one batch, two owners' versions of the same room: the second is fenced. */
    struct tmut *p = tmut_new("a1", "r1", "p4", 4, 1, T0);
    struct tmut *q = tmut_new("a1", "r1", "q4", 4, 1, T0);
    p->m.fence_token = q->m.fence_token = 7;
    struct mutation *ms[2] = {&p->m, &q->m};
    assert_int_equal(store_save(f->st, ms, 2), 0);
    assert_int_equal(p->m.rc, 0);
    assert_int_equal(q->m.rc, ROOMD_EFENCED);
    free(p);
    free(q);
}

/*
 * One batch of several rooms' updates (MySQL: the rooms rows in one
 * statement) with a stale lease token, a stale version and a missing room
 * among them: exactly those three are refused, the others commit, and
 * nothing of the refused ones (rooms row, log, outbox) is written.
 */
static void
t_fence_batch(void **state)
{
    struct fixture *f = *state;
    struct tmut *x[6];
    struct mutation *ms[6];
    char room[8], cmd[16];

    for (int i = 0; i < 5; i++) {
        snprintf(room, sizeof(room), "b%d", i);
        x[0] = tmut_new("a1", room, room, 1, 0, T0);
        x[0]->m.fence_token = 5;
        assert_int_equal(save1(f->st, x[0]), 0);
        assert_int_equal(x[0]->m.rc, 0);
        free(x[0]);
    }
    for (int i = 0; i < 6; i++) { /* b0..b4 and b5, which does not exist */
        snprintf(room, sizeof(room), "b%d", i);
        snprintf(cmd, sizeof(cmd), "%s-v2", room);
        x[i] = tmut_new("a1", room, cmd, 2, 1, T0 + 1);
        x[i]->m.fence_token = 5;
        ms[i] = &x[i]->m;
    }
    x[1]->m.fence_token = 4; /* an older owner */
    x[3]->m.version = 3;     /* a version gap */
    assert_int_equal(store_save(f->st, ms, 6), 0);
    assert_int_equal(x[0]->m.rc, 0);
    assert_int_equal(x[1]->m.rc, ROOMD_EFENCED);
    assert_int_equal(x[2]->m.rc, 0);
    assert_int_equal(x[3]->m.rc, ROOMD_EFENCED);
    assert_int_equal(x[4]->m.rc, 0);
    assert_int_equal(x[5]->m.rc, ROOMD_ENOTFOUND);
    for (int i = 0; i < 6; i++) {
        bool ok = x[i]->m.rc == 0;
        struct room_load l;
        struct command_record r;

        snprintf(room, sizeof(room), "b%d", i);
        if (i == 5) {
            assert_int_equal(store_load_room(f->st, "a1", room, &l), ROOMD_ENOTFOUND);
        } else {
            assert_int_equal(store_load_room(f->st, "a1", room, &l), 0);
            assert_int_equal(l.version, ok ? 2 : 1);
            assert_int_equal(l.fence_token, 5);
            room_load_clear(&l);
        }
        assert_int_equal(store_find_command(f->st, "a1", x[i]->m.command_id, &r),
                         ok ? 0 : ROOMD_ENOTFOUND);
        command_record_clear(&r);
        assert_int_equal(room_rows(f->st, room), ok ? 1 : 0);
        free(x[i]);
    }
}

/* A new owner's fence claim: older tokens cannot commit even before it commits. */
static void
t_fence_room(void **state)
{
    struct fixture *f = *state;
    struct room_load l;
    struct tmut *x;

    /* a room that does not exist yet: nothing to claim, no error */
    assert_int_equal(store_fence_room(f->st, "a1", "nope", 9), 0);

    x = tmut_new("a1", "r1", "c1", 1, 0, T0);
    x->m.fence_token = 5;
    assert_int_equal(save1(f->st, x), 0);
    free(x);
    assert_int_equal(store_fence_room(f->st, "a1", "r1", 5), 0); /* same token: fine */
    assert_int_equal(store_fence_room(f->st, "a1", "r1", 8), 0); /* the new owner */
    assert_int_equal(store_fence_room(f->st, "a1", "r1", 6), ROOMD_EFENCED);
    assert_non_null(strstr(store_errmsg(), "fenced"));
    assert_int_equal(store_load_room(f->st, "a1", "r1", &l), 0);
    assert_int_equal(l.fence_token, 8);
    assert_int_equal(l.version, 1);
    room_load_clear(&l);

    /* the old owner (token 5) committing version 2 is fenced; the new one is not */
    x = tmut_new("a1", "r1", "c2old", 2, 1, T0);
    x->m.fence_token = 5;
    assert_int_equal(save1(f->st, x), 0);
    assert_int_equal(x->m.rc, ROOMD_EFENCED);
    free(x);
    x = tmut_new("a1", "r1", "c2", 2, 1, T0);
    x->m.fence_token = 8;
    assert_int_equal(save1(f->st, x), 0);
    assert_int_equal(x->m.rc, 0);
    free(x);
    assert_int_equal(room_rows(f->st, "r1"), 1);
    /* another app's room of the same id is untouched */
    create_room(f->st, "a2", "r1", 0, T0);
    assert_int_equal(store_fence_room(f->st, "a2", "r1", 1), 0);
    assert_int_equal(store_load_room(f->st, "a2", "r1", &l), 0);
    assert_int_equal(l.fence_token, 1);
    room_load_clear(&l);
}

/* Keyset pages over (app_code, room_id), open rooms only on request. */
static void
t_rooms_list(void **state)
{
    struct fixture *f = *state;
    struct room_row *rows = NULL;
    size_t n = 0;
    struct tmut *x;
    const char *want_all[] = {"a1/r1", "a1/r2", "a1/r3", "a2/r1", "b/x"};
    char got[8][STORE_ID_MAX * 2 + 2];
    size_t ngot = 0;

    assert_int_equal(store_rooms_list(f->st, "", "", false, 10, &rows, &n), 0);
    assert_int_equal(n, 0);
    room_rows_free(rows, n);

    create_room(f->st, "a1", "r2", 0, T0);
    create_room(f->st, "b", "x", 0, T0 + 1);
    create_room(f->st, "a1", "r1", 0, T0 + 2);
    create_room(f->st, "a2", "r1", 0, T0 + 3);
    create_room(f->st, "a1", "r3", 0, T0 + 4);
    step_room(f->st, "a1", "r3", 2, 0, T0 + 5);
    /* close a2/r1 */
    x = tmut_new("a2", "r1", "close", 2, 0, T0 + 6);
    x->m.meta.status = "closed";
    x->m.meta.title = "closed one";
    assert_int_equal(save1(f->st, x), 0);
    assert_int_equal(x->m.rc, 0);
    free(x);

    /* pages of 2 from the start */
    const char *aa = "", *ar = "";
    char last_app[STORE_ID_MAX] = "", last_room[STORE_ID_MAX] = "";
    for (int page = 0; page < 5; page++) {
        assert_int_equal(store_rooms_list(f->st, aa, ar, false, 2, &rows, &n), 0);
        assert_true(n <= 2);
        for (size_t i = 0; i < n; i++)
            snprintf(got[ngot++], sizeof(got[0]), "%s/%s", rows[i].app_code, rows[i].room_id);
        if (n > 0) {
            strlcpy_(last_app, rows[n - 1].app_code, sizeof(last_app));
            strlcpy_(last_room, rows[n - 1].room_id, sizeof(last_room));
        }
        room_rows_free(rows, n);
        aa = last_app;
        ar = last_room;
        if (n < 2)
            break;
    }
    assert_int_equal(ngot, 5);
    for (size_t i = 0; i < 5; i++)
        assert_string_equal(got[i], want_all[i]);

    /* the meta of one row */
    assert_int_equal(store_rooms_list(f->st, "a1", "r2", false, 1, &rows, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(rows[0].app_code, "a1");
    assert_string_equal(rows[0].room_id, "r3");
    assert_string_equal(rows[0].title, "room title");
    assert_string_equal(rows[0].status, "open");
    assert_int_equal(rows[0].owner_uid, 42);
    assert_int_equal(rows[0].version, 2);
    assert_int_equal(rows[0].updated_at_ms, T0 + 5);
    assert_int_equal(rows[0].created_at_ms, T0 + 4); /* from its create */
    room_rows_free(rows, n);

    /* (app, "") starts at that app's first room; open_only skips closed rooms */
    assert_int_equal(store_rooms_list(f->st, "a2", "", true, 10, &rows, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(rows[0].app_code, "b");
    room_rows_free(rows, n);
    assert_int_equal(store_rooms_list(f->st, "a2", "", false, 10, &rows, &n), 0);
    assert_int_equal(n, 2);
    assert_string_equal(rows[0].status, "closed");
    assert_string_equal(rows[0].title, "closed one");
    room_rows_free(rows, n);
    assert_int_equal(store_rooms_list(f->st, "b", "x", false, 10, &rows, &n), 0);
    assert_int_equal(n, 0);
    room_rows_free(rows, n);
    assert_int_equal(store_rooms_list(f->st, "", "", false, 0, &rows, &n), 0);
    assert_int_equal(n, 0);
}

static void
t_create_exists(void **state)
{
    struct fixture *f = *state;
    struct tmut *x;
    struct room_load l;

    create_room(f->st, "a1", "r1", 1, T0);
    x = tmut_new("a1", "r1", "another-create", 1, 1, T0 + 1);
    assert_int_equal(save1(f->st, x), 0);
    assert_int_equal(x->m.rc, ROOMD_EEXIST);
    free(x);
    assert_int_equal(room_rows(f->st, "r1"), 1);
    assert_int_equal(store_load_room(f->st, "a1", "r1", &l), 0);
    assert_int_equal(l.ntail, 1);
    room_load_clear(&l);
    /* The same room id in another app is another room. */
    create_room(f->st, "a2", "r1", 0, T0);
}

/* A create of room by owner with the open-rooms limit max (room.max_rooms_per_owner). */
static struct tmut *
owner_create(const char *app, const char *room, int64_t owner, int max)
{
    char cmd[64];
    struct tmut *x;

    snprintf(cmd, sizeof(cmd), "%s-create", room);
    x = tmut_new(app, room, cmd, 1, 1, T0);
    x->m.meta.owner_uid = owner;
    x->m.max_owner_rooms = max;
    return x;
}

/* Saves the create and returns its mutation's rc (store_save must succeed). */
static int
owner_save(struct store *st, const char *app, const char *room, int64_t owner, int max)
{
    struct tmut *x = owner_create(app, room, owner, max);
    int rc;

    assert_int_equal(save1(st, x), 0);
    rc = x->m.rc;
    free(x);
    return rc;
}

/* The refused create of room left nothing: no room, no log row, no outbox row. */
static void
assert_not_created(struct store *st, const char *app, const char *room)
{
    struct room_load l;
    struct command_record rec;
    char cmd[64];

    snprintf(cmd, sizeof(cmd), "%s-create", room);
    assert_int_equal(store_load_room(st, app, room, &l), ROOMD_ENOTFOUND);
    assert_int_equal(store_find_command(st, app, cmd, &rec), ROOMD_ENOTFOUND);
    assert_int_equal(room_rows(st, room), 0);
}

/* room.max_rooms_per_owner: a create past the owner's open rooms of the app
 * is ELIMIT and rolled back alone; closed rooms, other apps and other
 * owners do not count; in one batch the second create of an owner at the
 * limit is the refused one. */
static void
t_owner_limit(void **state)
{
    struct fixture *f = *state;
    struct tmut *x, *b[3];
    struct mutation *ms[3];

    assert_int_equal(owner_save(f->st, "a1", "ol1", 7, 2), 0);
    assert_int_equal(owner_save(f->st, "a1", "ol2", 7, 2), 0);
    assert_int_equal(owner_save(f->st, "a1", "ol3", 7, 2), ROOMD_ELIMIT);
    assert_not_created(f->st, "a1", "ol3");
    assert_int_equal(owner_save(f->st, "a1", "ol3", 7, 0), 0); /* 0: no limit */
    assert_int_equal(owner_save(f->st, "a2", "ol1", 7, 2), 0); /* another app */
    assert_int_equal(owner_save(f->st, "a1", "ol4", 8, 2), 0); /* another owner */
    /* closing one of owner 7's three rooms leaves two: still at a limit of 2 */
    x = tmut_new("a1", "ol1", "ol1-close", 2, 1, T0 + 1);
    x->m.meta.owner_uid = 7;
    x->m.meta.status = "closed";
    assert_int_equal(save1(f->st, x), 0);
    assert_int_equal(x->m.rc, 0);
    free(x);
    assert_int_equal(owner_save(f->st, "a1", "ol5", 7, 2), ROOMD_ELIMIT);
    assert_not_created(f->st, "a1", "ol5");
    assert_int_equal(owner_save(f->st, "a1", "ol5", 7, 3), 0);
    /* one batch: owner 9 may hold one room; the other mutations commit */
    b[0] = owner_create("a1", "ob1", 9, 1);
    b[1] = owner_create("a1", "ob2", 9, 1);
    b[2] = owner_create("a1", "ob3", 10, 1);
    for (int i = 0; i < 3; i++)
        ms[i] = &b[i]->m;
    assert_int_equal(store_save(f->st, ms, 3), 0);
    assert_int_equal(b[0]->m.rc, 0);
    assert_int_equal(b[1]->m.rc, ROOMD_ELIMIT);
    assert_int_equal(b[2]->m.rc, 0);
    assert_not_created(f->st, "a1", "ob2");
    assert_int_equal(room_rows(f->st, "ob1"), 1);
    assert_int_equal(room_rows(f->st, "ob3"), 1);
    for (int i = 0; i < 3; i++)
        free(b[i]);
}

#define OC_THREADS 4
#define OC_ROUNDS 6
#define OC_LIMIT 2

struct oc_worker {
    struct store *st;
    pthread_barrier_t *go;
    int idx, round;
    int save_rc, rc;
};

static void *
oc_main(void *arg)
{
    struct oc_worker *w = arg;
    char room[32];
    struct tmut *x;

    snprintf(room, sizeof(room), "oc-%d-%d", w->round, w->idx);
    x = owner_create("oc", room, 500 + w->round, OC_LIMIT);
    pthread_barrier_wait(w->go);
    w->save_rc = save1(w->st, x);
    w->rc = x->m.rc;
    free(x);
    return NULL;
}

/* Creates of one owner at once, each from its own thread (its own
 * connection on MySQL): never more than the limit commit. A create that
 * lost a deadlock past store.mysql.deadlock_retries fails as a whole
 * (store_save's rc, a 503 for the client), never commits. */
static void
t_owner_limit_concurrent(void **state)
{
    struct fixture *f = *state;
    struct oc_worker w[OC_THREADS];
    pthread_t th[OC_THREADS];
    pthread_barrier_t go;
    int total_ok = 0;

    for (int round = 0; round < OC_ROUNDS; round++) {
        int ok = 0, limited = 0, failed = 0;

        assert_int_equal(pthread_barrier_init(&go, NULL, OC_THREADS), 0);
        for (int i = 0; i < OC_THREADS; i++) {
            w[i] = (struct oc_worker){.st = f->st, .go = &go, .idx = i, .round = round};
            assert_int_equal(pthread_create(&th[i], NULL, oc_main, &w[i]), 0);
        }
        for (int i = 0; i < OC_THREADS; i++) {
            char room[32];
            struct room_load l;

            pthread_join(th[i], NULL);
            snprintf(room, sizeof(room), "oc-%d-%d", round, i);
            if (w[i].save_rc == 0 && w[i].rc == 0) {
                ok++;
                assert_int_equal(store_load_room(f->st, "oc", room, &l), 0);
                room_load_clear(&l);
            } else {
                if (w[i].save_rc == 0 && w[i].rc == ROOMD_ELIMIT)
                    limited++;
                else
                    failed++;
                assert_not_created(f->st, "oc", room);
            }
        }
        pthread_barrier_destroy(&go);
        assert_true(ok <= OC_LIMIT);
        if (failed == 0)
            assert_int_equal(ok, OC_LIMIT);
        assert_int_equal(ok + limited + failed, OC_THREADS);
        total_ok += ok;
    }
    assert_true(total_ok > 0);
}

static void
t_fail_hook(void **state)
{
#ifdef ROOMD_TESTING
    struct fixture *f = *state;
    struct outbox_counts oc;
    struct command_record r;
    struct room_load l;
    struct tmut *x, *y;

    create_room(f->st, "a1", "r1", 1, T0);
    store_fail_next_saves(1);
    x = tmut_new("a1", "r1", "boom", 2, 3, T0 + 1);
    x->m.snapshot = "{\"v\":2}";
    y = tmut_new("a1", "r9", "boom-create", 1, 1, T0 + 1);
    struct mutation *ms[2] = {&x->m, &y->m};
    assert_int_equal(store_save(f->st, ms, 2), ROOMD_EIO);
    assert_int_equal(x->m.rc, ROOMD_EIO);
    assert_int_equal(y->m.rc, ROOMD_EIO);
    assert_true(store_errmsg()[0] != '\0');

    assert_int_equal(store_find_command(f->st, "a1", "boom", &r), ROOMD_ENOTFOUND);
    assert_int_equal(store_find_command(f->st, "a1", "boom-create", &r), ROOMD_ENOTFOUND);
    assert_int_equal(store_load_room(f->st, "a1", "r1", &l), 0);
    assert_int_equal(l.version, 1);
    assert_null(l.snapshot);
    assert_int_equal(l.ntail, 1);
    room_load_clear(&l);
    assert_int_equal(store_load_room(f->st, "a1", "r9", &l), ROOMD_ENOTFOUND);
    assert_int_equal(store_outbox_counts(f->st, &oc), 0);
    assert_int_equal(oc.pending, 1);

    /* The hook is spent: the same mutations now commit. */
    assert_int_equal(store_save(f->st, ms, 2), 0);
    assert_int_equal(x->m.rc, 0);
    assert_int_equal(y->m.rc, 0);
    assert_int_equal(store_outbox_counts(f->st, &oc), 0);
    assert_int_equal(oc.pending, 5);
    free(x);
    free(y);
#else
    (void)state;
    skip();
#endif
}

/* Room a1/r1 at version 9: commands c2..c9 at T0 + v, a snapshot at every
 * even version, 2 kept (6 and 8). */
static void
create_snapshotted_room(struct store *st)
{
    create_room(st, "a1", "r1", 0, T0);
    for (int v = 2; v <= 9; v++) {
        char cmd[32], snap[32];
        struct tmut *x;

        snprintf(cmd, sizeof(cmd), "c%d", v);
        snprintf(snap, sizeof(snap), "{\"v\":%d}", v);
        x = tmut_new("a1", "r1", cmd, v, 0, T0 + v);
        x->m.snapshots_keep = 2;
        if (v % 2 == 0)
            x->m.snapshot = snap;
        assert_int_equal(save1(st, x), 0);
        assert_int_equal(x->m.rc, 0);
        free(x);
    }
}

static void
t_snapshots(void **state)
{
    struct fixture *f = *state;
    struct room_load l;

    create_snapshotted_room(f->st);
    assert_int_equal(store_load_room(f->st, "a1", "r1", &l), 0);
    assert_int_equal(l.version, 9);
    assert_int_equal(l.snapshot_version, 8);
    assert_string_equal(l.snapshot, "{\"v\":8}");
    assert_int_equal(l.ntail, 1);
    assert_int_equal(l.tail[0].version, 9);
    room_load_clear(&l);
}

/* The command log purge (store_command_log_purge): only rows older than the
 * cut-off at or below the room's oldest kept snapshot; a room without a
 * snapshot keeps its log; the room still loads the same; a purged
 * command_id is unknown again. */
static void
t_command_log_purge(void **state)
{
    struct fixture *f = *state;
    struct command_record r;
    struct room_load l;
    size_t n = 0;

    create_snapshotted_room(f->st);            /* snapshots 6 and 8 stay */
    create_room(f->st, "a1", "nosnap", 0, T0); /* no snapshot: its log is all it has */

    /* created before T0 + 5: versions 1..4 of r1 (not nosnap's) */
    assert_int_equal(store_command_log_purge(f->st, T0 + 5, 100, &n), 0);
    assert_int_equal(n, 4);
    /* everything old: the rest up to the oldest snapshot (6), in batches of 1 */
    assert_int_equal(store_command_log_purge(f->st, T0 + 100, 1, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(store_command_log_purge(f->st, T0 + 100, 100, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(store_command_log_purge(f->st, T0 + 100, 100, &n), 0);
    assert_int_equal(n, 0);

    assert_int_equal(store_find_command(f->st, "a1", "c6", &r), ROOMD_ENOTFOUND);
    assert_int_equal(store_find_command(f->st, "a1", "c7", &r), 0);
    command_record_clear(&r);
    assert_int_equal(store_find_command(f->st, "a1", "nosnap-create", &r), 0);
    command_record_clear(&r);
    assert_int_equal(store_load_room(f->st, "a1", "r1", &l), 0);
    assert_int_equal(l.version, 9);
    assert_int_equal(l.snapshot_version, 8);
    assert_int_equal(l.ntail, 1);
    assert_int_equal(l.tail[0].version, 9);
    room_load_clear(&l);
}

/* ---- outbox ---- */

static void
t_claim(void **state)
{
    struct fixture *f = *state;
    struct outbox_row *rows, got;
    size_t n;
    int64_t id1, id2, id3;

    create_room(f->st, "a1", "r1", 3, T0);
    /* Not due before its created_at_ms. */
    assert_int_equal(store_outbox_claim(f->st, T0 - 1, T0 + 1000, "A", 10, &rows, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(store_outbox_claim(f->st, T0, T0 + 1000, "A", 10, &rows, &n), 0);
    assert_int_equal(n, 3);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(rows[i].status, OUTBOX_DELIVERING);
        assert_string_equal(rows[i].locked_by, "A");
        assert_int_equal(rows[i].lock_until_ms, T0 + 1000);
        assert_string_equal(rows[i].app_code, "a1");
        assert_string_equal(rows[i].room_id, "r1");
        assert_string_equal(rows[i].command_id, "r1-create");
        assert_string_equal(rows[i].event_type, "RoomUserJoined");
        assert_int_equal(rows[i].room_version, 1);
        assert_int_equal(rows[i].created_at_ms, T0);
        assert_int_equal(rows[i].payload_len, 4);
        assert_int_equal(rows[i].payload[1], 0);
        assert_int_equal(rows[i].payload[2], i);
        assert_int_equal(rows[i].retry_count, 0);
        assert_true(strlen(rows[i].event_id) == 36);
        if (i > 0)
            assert_true(rows[i].id > rows[i - 1].id);
    }
    id1 = rows[0].id;
    id2 = rows[1].id;
    id3 = rows[2].id;
    outbox_rows_free(rows, n);

    /* Locked: nobody else gets them inside the lock window. */
    assert_int_equal(store_outbox_claim(f->st, T0 + 999, T0 + 2000, "B", 10, &rows, &n), 0);
    assert_int_equal(n, 0);

    struct outbox_result res[3] = {
        {.id = id1,
         .locked_by = "A",
         .status = OUTBOX_DELIVERED,
         .now_ms = T0 + 10,
         .sinks_done = 3},
        {.id = id2,
         .locked_by = "A",
         .status = OUTBOX_RETRYABLE,
         .retry_count = 1,
         .sinks_done = 2,
         .next_retry_at_ms = T0 + 2000,
         .last_error = "boom",
         .now_ms = T0 + 10},
        {.id = id3,
         .locked_by = "A",
         .status = OUTBOX_FAILED,
         .retry_count = 10,
         .last_error = "poison",
         .now_ms = T0 + 10},
    };
    assert_int_equal(store_outbox_complete(f->st, res, 3), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(res[i].rc, 0);

    /* Retryable only when due. */
    assert_int_equal(store_outbox_claim(f->st, T0 + 1999, T0 + 3000, "B", 10, &rows, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(store_outbox_claim(f->st, T0 + 2000, T0 + 3000, "B", 10, &rows, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(rows[0].id, id2);
    assert_int_equal(rows[0].retry_count, 1);
    assert_int_equal(rows[0].sinks_done, 2);
    assert_string_equal(rows[0].last_error, "boom");
    assert_string_equal(rows[0].locked_by, "B");
    outbox_rows_free(rows, n);

    /* B dies: its row is reclaimed only after its lock expired. */
    assert_int_equal(store_outbox_claim(f->st, T0 + 2999, T0 + 4000, "C", 10, &rows, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(store_outbox_claim(f->st, T0 + 3000, T0 + 4000, "C", 10, &rows, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(rows[0].id, id2);
    assert_string_equal(rows[0].locked_by, "C");
    outbox_rows_free(rows, n);

    /* Delivered and failed rows are never claimed, however late. */
    assert_int_equal(store_outbox_claim(f->st, T0 + 100000000, T0 + 100001000, "D", 10, &rows, &n),
                     0);
    assert_int_equal(n, 1);
    assert_int_equal(rows[0].id, id2);
    outbox_rows_free(rows, n);
    assert_int_equal(store_outbox_list(f->st, OUTBOX_DELIVERED, 0, 10, &rows, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(rows[0].id, id1);
    assert_int_equal(rows[0].sinks_done, 3);
    assert_int_equal(rows[0].delivered_at_ms, T0 + 10);
    assert_int_equal(store_outbox_get(f->st, rows[0].event_id, &got), 0);
    assert_int_equal(got.status, OUTBOX_DELIVERED);
    free(got.payload);
    free(got.last_error);
    outbox_rows_free(rows, n);
}

/* The outbox hand-off: a mutation with locked_by inserts its rows already
 * claimed (delivering, locked_by, lock_until_ms) and reports their ids;
 * nobody claims them inside the lock, their claimer completes them, and
 * anyone reclaims them once the lock expired. Pending rows beside them in
 * the same transaction stay pending. */
static void
t_claimed_insert(void **state)
{
    struct fixture *f = *state;
    struct outbox_row *rows;
    size_t n;
    struct tmut *h = tmut_new("a1", "r1", "r1-create", 1, 3, T0);
    struct tmut *p = tmut_new("a1", "r2", "r2-create", 1, 2, T0);
    struct mutation *ms[2] = {&h->m, &p->m};

    h->m.locked_by = "node/h";
    h->m.lock_until_ms = T0 + 1000;
    assert_int_equal(store_save(f->st, ms, 2), 0);
    assert_int_equal(h->m.rc, 0);
    assert_int_equal(p->m.rc, 0);
    for (int i = 0; i < 3; i++) {
        struct outbox_row r;

        assert_true(h->ev[i].id > 0);
        if (i > 0)
            assert_true(h->ev[i].id > h->ev[i - 1].id);
        assert_int_equal(store_outbox_get(f->st, h->ev[i].event_id, &r), 0);
        assert_int_equal(r.id, h->ev[i].id);
        assert_int_equal(r.status, OUTBOX_DELIVERING);
        assert_string_equal(r.locked_by, "node/h");
        assert_int_equal(r.lock_until_ms, T0 + 1000);
        assert_int_equal(r.created_at_ms, T0);
        assert_int_equal(r.retry_count, 0);
        free(r.payload);
        free(r.last_error);
    }
    for (int i = 0; i < 2; i++) {
        struct outbox_row r;

        assert_int_equal(store_outbox_get(f->st, p->ev[i].event_id, &r), 0);
        assert_int_equal(r.status, OUTBOX_PENDING);
        free(r.payload);
        free(r.last_error);
    }

    /* Inside the lock a claim gets only the pending rows. */
    assert_int_equal(store_outbox_claim(f->st, T0 + 999, T0 + 5000, "B", 10, &rows, &n), 0);
    assert_int_equal(n, 2);
    for (size_t i = 0; i < n; i++)
        assert_string_equal(rows[i].room_id, "r2");
    outbox_rows_free(rows, n);

    /* The hand-off claimer completes two of its rows; the fence holds. */
    struct outbox_result res[2] = {
        {.id = h->ev[0].id, .locked_by = "node/h", .status = OUTBOX_DELIVERED, .now_ms = T0 + 5},
        {.id = h->ev[1].id, .locked_by = "other/h", .status = OUTBOX_DELIVERED, .now_ms = T0 + 5},
    };
    assert_int_equal(store_outbox_complete(f->st, res, 2), 0);
    assert_int_equal(res[0].rc, 0);
    assert_int_equal(res[1].rc, ROOMD_ESTALE);

    /* The claimer died: its last two rows are reclaimed after the lock. */
    assert_int_equal(store_outbox_claim(f->st, T0 + 1000, T0 + 5000, "C", 10, &rows, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(rows[0].id, h->ev[1].id);
    assert_int_equal(rows[1].id, h->ev[2].id);
    assert_string_equal(rows[0].locked_by, "C");
    outbox_rows_free(rows, n);
    free(h);
    free(p);
}

static void
t_claim_order_limit(void **state)
{
    struct fixture *f = *state;
    struct outbox_row *rows, *all;
    size_t n, nall;

    create_room(f->st, "a1", "r2", 4, T0 + 50); /* created later, claimed later */
    create_room(f->st, "a1", "r1", 4, T0);
    assert_int_equal(store_outbox_list(f->st, -1, 0, 100, &all, &nall), 0);
    assert_int_equal(nall, 8);
    assert_int_equal(store_outbox_claim(f->st, T0 + 100, T0 + 1000, "A", 3, &rows, &n), 0);
    assert_int_equal(n, 3);
    for (size_t i = 0; i < n; i++)
        assert_string_equal(rows[i].room_id, "r1");
    outbox_rows_free(rows, n);
    assert_int_equal(store_outbox_claim(f->st, T0 + 100, T0 + 1000, "A", 3, &rows, &n), 0);
    assert_int_equal(n, 3);
    outbox_rows_free(rows, n);
    assert_int_equal(store_outbox_claim(f->st, T0 + 100, T0 + 1000, "A", 3, &rows, &n), 0);
    assert_int_equal(n, 2);
    for (size_t i = 0; i < n; i++)
        assert_string_equal(rows[i].room_id, "r2");
    outbox_rows_free(rows, n);
    outbox_rows_free(all, nall);
}

/* Claims ordered (per_room) at now with limit; returns the ids, in order. */
static size_t
claim_ordered_ids(struct store *st, int64_t now, int limit, int64_t *ids)
{
    struct outbox_row *rows;
    size_t n;

    assert_int_equal(store_outbox_claim_ordered(st, now, now + 1000, "O", limit, true, &rows, &n),
                     0);
    for (size_t i = 0; i < n; i++) {
        ids[i] = rows[i].id;
        if (i > 0)
            assert_true(rows[i].id > rows[i - 1].id);
    }
    outbox_rows_free(rows, n);
    return n;
}

/* room_outbox.id of event_id. */
static int64_t
row_id(struct store *st, const char *event_id)
{
    struct outbox_row r;
    int64_t id;

    assert_int_equal(store_outbox_get(st, event_id, &r), 0);
    id = r.id;
    free(r.payload);
    free(r.last_error);
    return id;
}

static void
complete_one(struct store *st, int64_t id, enum outbox_status status, int64_t retry_at, int64_t now)
{
    struct outbox_result r = {.id = id,
                              .locked_by = "O",
                              .status = status,
                              .next_retry_at_ms = retry_at,
                              .last_error = status == OUTBOX_DELIVERED ? NULL : "tim: 500",
                              .now_ms = now};

    assert_int_equal(store_outbox_complete(st, &r, 1), 0);
    assert_int_equal(r.rc, 0);
}

/* outbox_worker.ordering per_room: a room's rows are claimed in commit
 * order, a later one waits while an earlier one is retried, a failed one no
 * longer holds the room (poison policy); room_seq and rooms.event_seq are
 * stored; the hand-off goes pending while the room has an undelivered row. */
static void
t_ordered_claim(void **state)
{
    struct fixture *f = *state;
    struct tmut *c1 = tmut_new("a1", "r1", "r1-create", 1, 3, T0);
    struct tmut *c2 = tmut_new("a1", "r1", "r1-v2", 2, 2, T0 + 1);
    struct room_load l;
    struct outbox_row r;
    int64_t ids[16];
    size_t n;

    for (int i = 0; i < 3; i++)
        c1->ev[i].room_seq = 1 + i;
    c1->m.meta.event_seq = 3;
    for (int i = 0; i < 2; i++)
        c2->ev[i].room_seq = 4 + i;
    c2->m.meta.event_seq = 5;
    assert_int_equal(save1(f->st, c1), 0);
    assert_int_equal(save1(f->st, c2), 0);
    create_room(f->st, "a1", "r2", 2, T0 + 2);
    assert_int_equal(store_load_room(f->st, "a1", "r1", &l), 0);
    assert_int_equal(l.event_seq, 5);
    room_load_clear(&l);
    assert_int_equal(store_outbox_get(f->st, c2->ev[1].event_id, &r), 0);
    assert_int_equal(r.room_seq, 5);
    free(r.payload);
    free(r.last_error);

    /* A run of r1 in one claim; the limit cuts it after two rows. */
    assert_int_equal(claim_ordered_ids(f->st, T0 + 100, 2, ids), 2);
    assert_int_equal(ids[0], row_id(f->st, c1->ev[0].event_id));
    assert_int_equal(ids[1], row_id(f->st, c1->ev[1].event_id));
    /* r1's third row waits behind the two claimed: only r2 comes. */
    assert_int_equal(claim_ordered_ids(f->st, T0 + 100, 10, ids), 2);
    complete_one(f->st, ids[0], OUTBOX_DELIVERED, 0, T0 + 150);
    complete_one(f->st, ids[1], OUTBOX_DELIVERED, 0, T0 + 150);
    /* The first delivered, the second retryable later: r1 still waits. */
    complete_one(f->st, row_id(f->st, c1->ev[0].event_id), OUTBOX_DELIVERED, 0, T0 + 150);
    complete_one(f->st, row_id(f->st, c1->ev[1].event_id), OUTBOX_RETRYABLE, T0 + 5000, T0 + 150);
    assert_int_equal(claim_ordered_ids(f->st, T0 + 200, 10, ids), 0);
    /* Unordered, the third would go now. */
    struct outbox_row *rows;
    assert_int_equal(
        store_outbox_claim_ordered(f->st, T0 + 200, T0 + 300, "U", 10, false, &rows, &n), 0);
    assert_int_equal(n, 3);
    assert_int_equal(rows[0].id, row_id(f->st, c1->ev[2].event_id));
    outbox_rows_free(rows, n);
    /* (U's lock ran out at T0 + 300.) When the retry is due, r1 goes on in order. */
    assert_int_equal(claim_ordered_ids(f->st, T0 + 5000, 10, ids), 4);
    assert_int_equal(ids[0], row_id(f->st, c1->ev[1].event_id));
    assert_int_equal(ids[1], row_id(f->st, c1->ev[2].event_id));
    assert_int_equal(ids[3], row_id(f->st, c2->ev[1].event_id));
    /* The second fails for good: the later ones no longer wait for it. */
    complete_one(f->st, row_id(f->st, c1->ev[1].event_id), OUTBOX_FAILED, 0, T0 + 5100);
    complete_one(f->st, row_id(f->st, c1->ev[2].event_id), OUTBOX_RETRYABLE, T0 + 6000, T0 + 5100);
    complete_one(f->st, row_id(f->st, c2->ev[0].event_id), OUTBOX_RETRYABLE, T0 + 6000, T0 + 5100);
    complete_one(f->st, row_id(f->st, c2->ev[1].event_id), OUTBOX_RETRYABLE, T0 + 6000, T0 + 5100);
    assert_int_equal(claim_ordered_ids(f->st, T0 + 6000, 10, ids), 3);
    assert_int_equal(ids[0], row_id(f->st, c1->ev[2].event_id));

    /* The hand-off: r1 has undelivered rows, so its next rows go pending
     * (no id reported); a room with none hands off. */
    struct tmut *h1 = tmut_new("a1", "r1", "r1-v3", 3, 1, T0 + 6100);
    struct tmut *h3 = tmut_new("a1", "r3", "r3-create", 1, 1, T0 + 6100);
    struct mutation *ms[2] = {&h1->m, &h3->m};
    for (int i = 0; i < 2; i++) {
        ms[i]->locked_by = "node/h";
        ms[i]->lock_until_ms = T0 + 9000;
        ms[i]->handoff_if_room_idle = true;
    }
    assert_int_equal(store_save(f->st, ms, 2), 0);
    assert_true(h1->m.room_busy);
    assert_int_equal(h1->ev[0].id, 0);
    assert_false(h3->m.room_busy);
    assert_true(h3->ev[0].id > 0);
    assert_int_equal(store_outbox_get(f->st, h1->ev[0].event_id, &r), 0);
    assert_int_equal(r.status, OUTBOX_PENDING);
    free(r.payload);
    free(r.last_error);
    free(h1);
    free(h3);
    free(c1);
    free(c2);
}

/* Saves x handed off by by (lock until lock_until) under ordering per_room,
 * own: room affinity asked (handoff_own_rows). Returns room_busy. */
static bool
save_handoff(struct store *st, struct tmut *x, const char *by, int64_t lock_until, bool own)
{
    x->m.locked_by = by;
    x->m.lock_until_ms = lock_until;
    x->m.handoff_if_room_idle = true;
    x->m.handoff_own_rows = own;
    assert_int_equal(save1(st, x), 0);
    assert_int_equal(x->m.rc, 0);
    assert_int_equal(x->ev[0].id > 0, !x->m.room_busy); /* handed off: its id reported */
    if (!x->m.room_busy && x->m.nevents == 1) {         /* MySQL: the lone row's id, no query */
        struct outbox_row r;

        assert_int_equal(store_outbox_get(st, x->ev[0].event_id, &r), 0);
        assert_int_equal(r.id, x->ev[0].id);
        free(r.payload);
        free(r.last_error);
    }
    return x->m.room_busy;
}

/* Room affinity (the hand-off's room check with handoff_own_rows): a room
 * whose undelivered rows are all delivering by the same hand-off claimer
 * under a running lock is not busy, so its next rows are handed off too;
 * without handoff_own_rows, for another claimer, once such a lock ran out,
 * and once the room has a pending row, it is busy (rows pending). */
static void
t_handoff_own_rows(void **state)
{
    struct fixture *f = *state;
    struct tmut *x[8] = {
        tmut_new("a1", "ra", "ra-create", 1, 2, T0), tmut_new("a1", "ra", "ra-2", 2, 1, T0 + 10),
        tmut_new("a1", "ra", "ra-3", 3, 1, T0 + 20), tmut_new("a1", "ra", "ra-4", 4, 1, T0 + 30),
        tmut_new("a1", "rb", "rb-create", 1, 1, T0), tmut_new("a1", "rb", "rb-2", 2, 1, T0 + 200),
        tmut_new("a1", "rc", "rc-create", 1, 1, T0), tmut_new("a1", "rc", "rc-2", 2, 1, T0 + 10),
    };
    struct outbox_row r;

    assert_false(save_handoff(f->st, x[0], "node/h", T0 + 9000, false)); /* idle */
    assert_false(save_handoff(f->st, x[1], "node/h", T0 + 9000, true));  /* its own rows only */
    assert_true(save_handoff(f->st, x[2], "other/h", T0 + 9000, true));  /* another claimer's */
    assert_true(save_handoff(f->st, x[3], "node/h", T0 + 9000, true));   /* a pending row now */
    /* rb's row's lock ran out before the next command */
    assert_false(save_handoff(f->st, x[4], "node/h", T0 + 100, false));
    assert_true(save_handoff(f->st, x[5], "node/h", T0 + 9000, true));
    /* not asked: busy as before */
    assert_false(save_handoff(f->st, x[6], "node/h", T0 + 9000, false));
    assert_true(save_handoff(f->st, x[7], "node/h", T0 + 9000, false));
    assert_int_equal(store_outbox_get(f->st, x[1]->ev[0].event_id, &r), 0);
    assert_int_equal(r.status, OUTBOX_DELIVERING);
    assert_string_equal(r.locked_by, "node/h");
    free(r.payload);
    free(r.last_error);
    assert_int_equal(store_outbox_get(f->st, x[2]->ev[0].event_id, &r), 0);
    assert_int_equal(r.status, OUTBOX_PENDING);
    free(r.payload);
    free(r.last_error);
    for (int i = 0; i < 8; i++)
        free(x[i]);
}

/* A claimer died holding a room's head: its lock ran out, and the room's
 * later rows (due since their commit, before the head's expired lock) fill
 * the claim's first candidates. The room is claimed again from its head,
 * never from a later row, and not while the lock holds. */
static void
t_ordered_claim_after_expiry(void **state)
{
    struct fixture *f = *state;
    struct tmut *more = tmut_new("a1", "r1", "r1-v2", 2, 6, T0 + 10);
    int64_t ids[16], head;

    create_room(f->st, "a1", "r1", 1, T0);
    assert_int_equal(claim_ordered_ids(f->st, T0 + 1, 1, ids), 1); /* A: lock until T0 + 1001 */
    head = ids[0];
    assert_int_equal(save1(f->st, more), 0);
    create_room(f->st, "a1", "r2", 1, T0 + 20);
    /* The lock holds: r1 waits (all of it), r2 goes. */
    assert_int_equal(claim_ordered_ids(f->st, T0 + 500, 3, ids), 1);
    assert_int_not_equal(ids[0], head);
    assert_true(ids[0] > row_id(f->st, more->ev[5].event_id));
    /* Expired: r1 from its head, in order, the limit cutting the run. */
    assert_int_equal(claim_ordered_ids(f->st, T0 + 2000, 3, ids), 3);
    assert_int_equal(ids[0], head);
    assert_int_equal(ids[1], row_id(f->st, more->ev[0].event_id));
    assert_int_equal(ids[2], row_id(f->st, more->ev[1].event_id));
    /* The rest waits behind them; only r2 (its lock ran out) comes. */
    assert_int_equal(claim_ordered_ids(f->st, T0 + 2100, 10, ids), 1);
    assert_true(ids[0] > row_id(f->st, more->ev[5].event_id));
    /* Their lock expired too: the room from its head again, every row. */
    assert_int_equal(claim_ordered_ids(f->st, T0 + 4000, 10, ids), 8);
    assert_int_equal(ids[0], head);
    assert_int_equal(ids[6], row_id(f->st, more->ev[5].event_id));
    free(more);
}

static void
t_fenced_complete(void **state)
{
    struct fixture *f = *state;
    struct outbox_row *rows, got;
    size_t n;
    char event_id[37];
    int64_t id;

    create_room(f->st, "a1", "r1", 1, T0);
    assert_int_equal(store_outbox_claim(f->st, T0, T0 + 100, "A", 10, &rows, &n), 0);
    assert_int_equal(n, 1);
    id = rows[0].id;
    strlcpy_(event_id, rows[0].event_id, sizeof(event_id));
    outbox_rows_free(rows, n);
    /* A stalls past its lock; B reclaims. */
    assert_int_equal(store_outbox_claim(f->st, T0 + 200, T0 + 1200, "B", 10, &rows, &n), 0);
    assert_int_equal(n, 1);
    outbox_rows_free(rows, n);

    struct outbox_result late = {
        .id = id, .locked_by = "A", .status = OUTBOX_DELIVERED, .now_ms = T0 + 300};
    assert_int_equal(store_outbox_complete(f->st, &late, 1), 0);
    assert_int_equal(late.rc, ROOMD_ESTALE);
    assert_int_equal(store_outbox_get(f->st, event_id, &got), 0);
    assert_int_equal(got.status, OUTBOX_DELIVERING);
    assert_string_equal(got.locked_by, "B");
    free(got.payload);
    free(got.last_error);

    struct outbox_result mine = {.id = id,
                                 .locked_by = "B",
                                 .status = OUTBOX_RETRYABLE,
                                 .retry_count = 1,
                                 .sinks_done = 1,
                                 .next_retry_at_ms = T0 + 5000,
                                 .last_error = "im 503",
                                 .now_ms = T0 + 400};
    assert_int_equal(store_outbox_complete(f->st, &mine, 1), 0);
    assert_int_equal(mine.rc, 0);
    /* A again, and B again: the row is no longer delivering, both refused. */
    late.rc = 0;
    assert_int_equal(store_outbox_complete(f->st, &late, 1), 0);
    assert_int_equal(late.rc, ROOMD_ESTALE);
    assert_int_equal(store_outbox_complete(f->st, &mine, 1), 0);
    assert_int_equal(mine.rc, ROOMD_ESTALE);

    assert_int_equal(store_outbox_get(f->st, event_id, &got), 0);
    assert_int_equal(got.status, OUTBOX_RETRYABLE);
    assert_int_equal(got.retry_count, 1);
    assert_int_equal(got.sinks_done, 1);
    assert_int_equal(got.next_retry_at_ms, T0 + 5000);
    assert_string_equal(got.last_error, "im 503");
    assert_int_equal(got.id, id);
    free(got.payload);
    free(got.last_error);
    assert_int_equal(store_outbox_get(f->st, "no-such-event", &got), ROOMD_ENOTFOUND);
}

/* A worker's completion of batch k and claim of batch k+1 in one call (one
 * transaction on MySQL): the outcomes are written first, so a row handed
 * back due now is claimed again by the same call; a stale one is refused. */
static void
t_complete_claim(void **state)
{
    struct fixture *f = *state;
    struct outbox_row *rows, *next, got;
    size_t n, nn;
    bool completed;
    char first[37];

    create_room(f->st, "a1", "r1", 3, T0);
    assert_int_equal(store_outbox_claim(f->st, T0, T0 + 100, "A", 2, &rows, &n), 0);
    assert_int_equal(n, 2);
    strlcpy_(first, rows[0].event_id, sizeof(first));
    struct outbox_result res[2] = {
        {.id = rows[0].id, .locked_by = "A", .status = OUTBOX_DELIVERED, .now_ms = T0 + 10},
        {.id = rows[1].id,
         .locked_by = "A",
         .status = OUTBOX_RETRYABLE,
         .retry_count = 1,
         .next_retry_at_ms = T0 + 5,
         .last_error = "bus: no PubAck",
         .now_ms = T0 + 10},
    };
    assert_int_equal(store_outbox_complete_claim(f->st, res, 2, T0 + 10, T0 + 1000, "A", 10, false,
                                                 &next, &nn, &completed),
                     0);
    assert_true(completed);
    assert_int_equal(res[0].rc, 0);
    assert_int_equal(res[1].rc, 0);
    /* the retryable row (due at T0 + 5) and the third one, both locked by A again */
    assert_int_equal(nn, 2);
    assert_int_equal(next[0].id, rows[1].id);
    assert_int_equal(next[0].retry_count, 1);
    assert_int_equal(next[1].status, OUTBOX_DELIVERING);
    assert_string_equal(next[1].locked_by, "A");
    assert_int_equal(next[1].lock_until_ms, T0 + 1000);
    assert_int_equal(store_outbox_get(f->st, first, &got), 0);
    assert_int_equal(got.status, OUTBOX_DELIVERED);
    free(got.payload);
    free(got.last_error);
    outbox_rows_free(next, nn);
    /* the delivered row again: refused (ESTALE), nothing else claimable (locked) */
    res[0].rc = 0;
    assert_int_equal(store_outbox_complete_claim(f->st, res, 1, T0 + 20, T0 + 1000, "A", 10, false,
                                                 &next, &nn, &completed),
                     0);
    assert_true(completed);
    assert_int_equal(res[0].rc, ROOMD_ESTALE);
    assert_int_equal(nn, 0);
    outbox_rows_free(next, nn);
    outbox_rows_free(rows, n);
}

/* The same call under ordering per_room: the completion comes first in the
 * transaction, so the ordered claim finds the completed head's room free and
 * takes its next rows with the other rooms'; rows handed back (held, due
 * now) come again from their room's head, in order. */
static void
t_complete_claim_ordered(void **state)
{
    struct fixture *f = *state;
    struct outbox_row *rows, *next;
    size_t n, nn;
    bool completed;

    create_room(f->st, "a1", "r1", 3, T0);
    create_room(f->st, "a1", "r2", 1, T0 + 1);
    assert_int_equal(store_outbox_claim_ordered(f->st, T0 + 10, T0 + 1000, "A", 1, true, &rows, &n),
                     0);
    assert_int_equal(n, 1);
    assert_string_equal(rows[0].room_id, "r1");
    struct outbox_result head = {
        .id = rows[0].id, .locked_by = "A", .status = OUTBOX_DELIVERED, .now_ms = T0 + 20};
    assert_int_equal(store_outbox_complete_claim(f->st, &head, 1, T0 + 20, T0 + 1000, "A", 10, true,
                                                 &next, &nn, &completed),
                     0);
    assert_true(completed);
    assert_int_equal(head.rc, 0);
    assert_int_equal(nn, 3); /* r1's two later rows, in order, and r2's */
    assert_string_equal(next[0].room_id, "r1");
    assert_string_equal(next[1].room_id, "r1");
    assert_string_equal(next[2].room_id, "r2");
    assert_true(next[0].id > rows[0].id && next[1].id > next[0].id);
    int64_t r1_second = next[0].id, r1_third = next[1].id;
    struct outbox_result res[3];
    for (int i = 0; i < 3; i++)
        res[i] = (struct outbox_result){.id = next[i].id,
                                        .locked_by = "A",
                                        .status = i < 2 ? OUTBOX_RETRYABLE : OUTBOX_DELIVERED,
                                        .next_retry_at_ms = T0 + 30,
                                        .last_error = i == 1 ? "held" : NULL,
                                        .now_ms = T0 + 30};
    outbox_rows_free(next, nn);
    assert_int_equal(store_outbox_complete_claim(f->st, res, 3, T0 + 30, T0 + 1000, "B", 10, true,
                                                 &next, &nn, &completed),
                     0);
    assert_true(completed);
    assert_int_equal(nn, 2);
    assert_int_equal(next[0].id, r1_second);
    assert_int_equal(next[1].id, r1_third);
    assert_string_equal(next[0].locked_by, "B");
    outbox_rows_free(next, nn);
    outbox_rows_free(rows, n);
}

/* A completion whose rows all have the same outcome (one run of ids on
 * MySQL) but whose lock expired on two of them, which another claimer
 * took: those two are refused (ESTALE, still the other claimer's), the
 * other three land. */
static void
t_complete_run_fenced(void **state)
{
    struct fixture *f = *state;
    struct outbox_row *rows, *taken;
    struct outbox_result res[5];
    struct outbox_counts c;
    char room[16];
    size_t n, nt;

    for (int k = 0; k < 5; k++) {
        snprintf(room, sizeof(room), "f%d", k);
        create_room(f->st, "a1", room, 1, T0 + k);
    }
    assert_int_equal(store_outbox_claim(f->st, T0 + 100, T0 + 1000, "A", 10, &rows, &n), 0);
    assert_int_equal(n, 5);
    /* A's lock ran out: B takes the first two (due order, then id) */
    assert_int_equal(store_outbox_claim(f->st, T0 + 2000, T0 + 9000, "B", 2, &taken, &nt), 0);
    assert_int_equal(nt, 2);
    assert_int_equal(taken[0].id, rows[0].id);
    assert_int_equal(taken[1].id, rows[1].id);
    for (size_t i = 0; i < n; i++)
        res[i] = (struct outbox_result){.id = rows[i].id,
                                        .locked_by = "A",
                                        .status = OUTBOX_DELIVERED,
                                        .sinks_done = 1,
                                        .now_ms = T0 + 2100};
    assert_int_equal(store_outbox_complete(f->st, res, n), 0);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(res[i].rc, i < 2 ? ROOMD_ESTALE : 0);
    assert_int_equal(store_outbox_counts(f->st, &c), 0);
    assert_int_equal(c.delivered, 3);
    assert_int_equal(c.delivering, 2);
    for (size_t i = 0; i < n; i++) {
        struct outbox_row got;

        assert_int_equal(store_outbox_get(f->st, rows[i].event_id, &got), 0);
        assert_int_equal(got.status, i < 2 ? OUTBOX_DELIVERING : OUTBOX_DELIVERED);
        assert_string_equal(got.locked_by, i < 2 ? "B" : "");
        free(got.payload);
        free(got.last_error);
    }
    outbox_rows_free(taken, nt);
    outbox_rows_free(rows, n);
}

/* An ordered claim and its completion larger than one statement's id list
 * (MySQL: 16 fenced heads, 32 ids per UPDATE): 34 rooms' runs, 100 rows; the
 * outcomes in runs of equal ones broken by time and by an error to write,
 * then a batch with one row of another claimer (refused alone). */
static void
t_claim_complete_chunks(void **state)
{
    struct fixture *f = *state;
    struct outbox_row *rows;
    struct outbox_result res[100];
    struct outbox_counts c;
    char room[16];
    size_t n;

    for (int k = 0; k < 40; k++) {
        snprintf(room, sizeof(room), "r%02d", k);
        create_room(f->st, "a1", room, 3, T0 + k);
    }
    assert_int_equal(
        store_outbox_claim_ordered(f->st, T0 + 100, T0 + 1000, "A", 100, true, &rows, &n), 0);
    assert_int_equal(n, 100); /* r00..r32 whole, r33's head */
    for (size_t i = 0; i < n; i++) {
        snprintf(room, sizeof(room), "r%02zu", i / 3);
        assert_string_equal(rows[i].room_id, room);
        assert_int_equal(rows[i].status, OUTBOX_DELIVERING);
        assert_string_equal(rows[i].locked_by, "A");
        if (i > 0)
            assert_true(rows[i].id > rows[i - 1].id);
    }
    for (size_t i = 0; i < n; i++) {
        bool retry = i % 10 == 5;
        res[i] = (struct outbox_result){.id = rows[i].id,
                                        .locked_by = i == 70 ? "B" : "A",
                                        .status = retry ? OUTBOX_RETRYABLE : OUTBOX_DELIVERED,
                                        .retry_count = retry ? 1 : 0,
                                        .sinks_done = retry ? 0 : 1,
                                        .next_retry_at_ms = retry ? T0 + 150 : 0,
                                        .last_error = retry ? "bus: no PubAck" : NULL,
                                        .now_ms = T0 + 200 + (int64_t)i / 40};
    }
    assert_int_equal(store_outbox_complete(f->st, res, 70), 0);
    for (size_t i = 0; i < 70; i++)
        assert_int_equal(res[i].rc, 0);
    assert_int_equal(store_outbox_complete(f->st, &res[70], 30), 0);
    for (size_t i = 70; i < n; i++)
        assert_int_equal(res[i].rc, i == 70 ? ROOMD_ESTALE : 0);
    assert_int_equal(store_outbox_counts(f->st, &c), 0);
    assert_int_equal(c.delivered, 89);
    assert_int_equal(c.retryable, 10);
    assert_int_equal(c.delivering, 1); /* row 70, still A's */
    assert_int_equal(c.pending, 20);   /* r33's two later rows, r34..r39 */
    for (size_t i = 0; i < 20; i++) {
        struct outbox_row got;

        assert_int_equal(store_outbox_get(f->st, rows[i].event_id, &got), 0);
        if (i % 10 == 5) {
            assert_int_equal(got.status, OUTBOX_RETRYABLE);
            assert_int_equal(got.retry_count, 1);
            assert_int_equal(got.next_retry_at_ms, T0 + 150);
            assert_string_equal(got.last_error, "bus: no PubAck");
        } else {
            assert_int_equal(got.status, OUTBOX_DELIVERED);
            assert_int_equal(got.sinks_done, 1);
            assert_int_equal(got.delivered_at_ms, T0 + 200);
        }
        free(got.payload);
        free(got.last_error);
    }
    outbox_rows_free(rows, n);
}

static void
t_retry_fields(void **state)
{
    struct fixture *f = *state;
    struct outbox_row *rows, got;
    size_t n;
    char *big = xmalloc(3001);

    memset(big, 'x', 3000);
    big[3000] = '\0';
    create_room(f->st, "a1", "r1", 1, T0);
    assert_int_equal(store_outbox_claim(f->st, T0, T0 + 100, "A", 10, &rows, &n), 0);
    assert_int_equal(n, 1);
    struct outbox_result r = {.id = rows[0].id,
                              .locked_by = "A",
                              .status = OUTBOX_RETRYABLE,
                              .retry_count = 3,
                              .sinks_done = 0x5,
                              .next_retry_at_ms = T0 + 777,
                              .last_error = big,
                              .now_ms = T0 + 1};
    assert_int_equal(store_outbox_complete(f->st, &r, 1), 0);
    assert_int_equal(r.rc, 0);
    assert_int_equal(store_outbox_get(f->st, rows[0].event_id, &got), 0);
    assert_int_equal(got.status, OUTBOX_RETRYABLE);
    assert_int_equal(got.retry_count, 3);
    assert_int_equal(got.sinks_done, 0x5);
    assert_int_equal(got.next_retry_at_ms, T0 + 777);
    assert_non_null(got.last_error);
    assert_true(strlen(got.last_error) <= 1000 && strlen(got.last_error) >= 900);
    free(got.payload);
    free(got.last_error);

    /* Delivered: the row records when. */
    outbox_rows_free(rows, n);
    assert_int_equal(store_outbox_claim(f->st, T0 + 777, T0 + 900, "A", 10, &rows, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(rows[0].retry_count, 3);
    struct outbox_result d = {.id = rows[0].id,
                              .locked_by = "A",
                              .status = OUTBOX_DELIVERED,
                              .retry_count = 3,
                              .sinks_done = 0x7,
                              .now_ms = T0 + 800};
    assert_int_equal(store_outbox_complete(f->st, &d, 1), 0);
    assert_int_equal(d.rc, 0);
    assert_int_equal(store_outbox_get(f->st, rows[0].event_id, &got), 0);
    assert_int_equal(got.status, OUTBOX_DELIVERED);
    assert_int_equal(got.delivered_at_ms, T0 + 800);
    assert_int_equal(got.sinks_done, 0x7);
    assert_null(got.last_error);
    free(got.payload);
    free(got.last_error);
    outbox_rows_free(rows, n);
    free(big);
}

/* Claims all claimable rows at now and completes them with status. */
static void
claim_and_complete(struct store *st, int64_t now, enum outbox_status status, size_t expect)
{
    struct outbox_row *rows;
    size_t n;

    assert_int_equal(store_outbox_claim(st, now, now + 100, "Z", 1000, &rows, &n), 0);
    assert_int_equal(n, expect);
    struct outbox_result *res = xcalloc(n ? n : 1, sizeof(*res));
    for (size_t i = 0; i < n; i++) {
        res[i].id = rows[i].id;
        res[i].locked_by = "Z";
        res[i].status = status;
        res[i].retry_count = status == OUTBOX_FAILED ? 10 : 1;
        res[i].next_retry_at_ms = now + 1000;
        res[i].now_ms = now;
        res[i].last_error = status == OUTBOX_DELIVERED ? NULL : "err";
    }
    assert_int_equal(store_outbox_complete(st, res, n), 0);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(res[i].rc, 0);
    free(res);
    outbox_rows_free(rows, n);
}

static void
t_replay(void **state)
{
    struct fixture *f = *state;
    struct outbox_row *rows, got;
    size_t n;
    char ev[37];

    create_room(f->st, "a1", "r1", 1, T0);
    claim_and_complete(f->st, T0, OUTBOX_FAILED, 1);
    assert_int_equal(store_outbox_list(f->st, OUTBOX_FAILED, 0, 10, &rows, &n), 0);
    assert_int_equal(n, 1);
    strlcpy_(ev, rows[0].event_id, sizeof(ev));
    outbox_rows_free(rows, n);
    /* Failed rows are never claimed automatically. */
    assert_int_equal(store_outbox_claim(f->st, T0 + 1000000, T0 + 1000100, "A", 10, &rows, &n), 0);
    assert_int_equal(n, 0);

    assert_int_equal(store_outbox_replay(f->st, ev, T0 + 5000), 0);
    assert_int_equal(store_outbox_get(f->st, ev, &got), 0);
    assert_int_equal(got.status, OUTBOX_PENDING);
    assert_int_equal(got.retry_count, 0);
    assert_string_equal(got.event_id, ev);
    free(got.payload);
    free(got.last_error);
    /* Pending now: a second replay conflicts; it is claimable from now on. */
    assert_int_equal(store_outbox_replay(f->st, ev, T0 + 5000), ROOMD_ECONFLICT);
    assert_int_equal(store_outbox_replay(f->st, "no-such-event", T0), ROOMD_ENOTFOUND);
    assert_int_equal(store_outbox_claim(f->st, T0 + 4999, T0 + 6000, "A", 10, &rows, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(store_outbox_claim(f->st, T0 + 5000, T0 + 6000, "A", 10, &rows, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(rows[0].event_id, ev);
    assert_int_equal(rows[0].retry_count, 0);
    outbox_rows_free(rows, n);
}

static void
t_list(void **state)
{
    struct fixture *f = *state;
    struct outbox_row *rows;
    size_t n;
    int64_t after = 0;
    size_t total = 0;

    create_room(f->st, "a1", "r1", 5, T0);
    create_room(f->st, "a1", "r2", 2, T0 + 10);
    claim_and_complete(f->st, T0, OUTBOX_DELIVERED, 5);
    for (;;) { /* pages of 3 by id */
        assert_int_equal(store_outbox_list(f->st, -1, after, 3, &rows, &n), 0);
        if (n == 0)
            break;
        assert_true(n <= 3);
        for (size_t i = 0; i < n; i++)
            assert_true(rows[i].id > after && (i == 0 || rows[i].id > rows[i - 1].id));
        after = rows[n - 1].id;
        total += n;
        outbox_rows_free(rows, n);
    }
    assert_int_equal(total, 7);
    assert_int_equal(store_outbox_list(f->st, OUTBOX_DELIVERED, 0, 100, &rows, &n), 0);
    assert_int_equal(n, 5);
    assert_int_equal(rows[0].status, OUTBOX_DELIVERED);
    outbox_rows_free(rows, n);
    assert_int_equal(store_outbox_list(f->st, OUTBOX_PENDING, 0, 100, &rows, &n), 0);
    assert_int_equal(n, 2);
    assert_string_equal(rows[0].room_id, "r2");
    outbox_rows_free(rows, n);
    assert_int_equal(store_outbox_list(f->st, OUTBOX_FAILED, 0, 100, &rows, &n), 0);
    assert_int_equal(n, 0);
    outbox_rows_free(rows, n);
}

static void
t_purge(void **state)
{
    struct fixture *f = *state;
    struct outbox_counts oc;
    struct outbox_row *rows;
    size_t n, purged;

    create_room(f->st, "a1", "r1", 5, T0);
    create_room(f->st, "a1", "r2", 5, T0);
    create_room(f->st, "a1", "r3", 5, T0);
    create_room(f->st, "a1", "r4", 5, T0);
    create_room(f->st, "a1", "r5", 5, T0);
    /* 20 delivered at T0+100, 5 delivered later at T0+900 */
    assert_int_equal(store_outbox_claim(f->st, T0, T0 + 50, "Z", 20, &rows, &n), 0);
    assert_int_equal(n, 20);
    outbox_rows_free(rows, n);
    claim_and_complete(f->st, T0 + 100, OUTBOX_DELIVERED, 25); /* reclaims the 20 too */
    create_room(f->st, "a1", "r6", 3, T0 + 200);               /* pending, never purged */

    assert_int_equal(store_outbox_purge(f->st, T0 + 100, 7, &purged), 0);
    assert_int_equal(purged, 0); /* strictly before */
    assert_int_equal(store_outbox_purge(f->st, T0 + 101, 7, &purged), 0);
    assert_int_equal(purged, 7);
    assert_int_equal(store_outbox_purge(f->st, T0 + 101, 7, &purged), 0);
    assert_int_equal(purged, 7);
    assert_int_equal(store_outbox_purge(f->st, T0 + 101, 7, &purged), 0);
    assert_int_equal(purged, 7);
    assert_int_equal(store_outbox_purge(f->st, T0 + 101, 7, &purged), 0);
    assert_int_equal(purged, 4);
    assert_int_equal(store_outbox_purge(f->st, T0 + 1000000, 7, &purged), 0);
    assert_int_equal(purged, 0);
    assert_int_equal(store_outbox_counts(f->st, &oc), 0);
    assert_int_equal(oc.delivered, 0);
    assert_int_equal(oc.pending, 3);
}

static void
t_counts(void **state)
{
    struct fixture *f = *state;
    struct outbox_counts oc;
    struct outbox_row *rows;
    size_t n;

    assert_int_equal(store_outbox_counts(f->st, &oc), 0);
    assert_int_equal(oc.pending + oc.delivering + oc.delivered + oc.retryable + oc.failed, 0);
    assert_int_equal(oc.oldest_undelivered_ms, 0);

    create_room(f->st, "a1", "r1", 1, T0 + 1);
    claim_and_complete(f->st, T0 + 1, OUTBOX_DELIVERED, 1);
    create_room(f->st, "a1", "r2", 1, T0 + 2);
    claim_and_complete(f->st, T0 + 2, OUTBOX_FAILED, 1);
    create_room(f->st, "a1", "r3", 1, T0 + 3);
    /* retryable with sink bit 0 done: sink 0 no longer misses it, sink 1 does */
    assert_int_equal(store_outbox_claim(f->st, T0 + 3, T0 + 100, "Z", 10, &rows, &n), 0);
    assert_int_equal(n, 1);
    struct outbox_result res = {.id = rows[0].id,
                                .locked_by = "Z",
                                .status = OUTBOX_RETRYABLE,
                                .retry_count = 1,
                                .sinks_done = 1,
                                .next_retry_at_ms = T0 + 1000,
                                .now_ms = T0 + 3,
                                .last_error = "b: down"};
    assert_int_equal(store_outbox_complete(f->st, &res, 1), 0);
    assert_int_equal(res.rc, 0);
    outbox_rows_free(rows, n);
    create_room(f->st, "a1", "r4", 1, T0 + 4);
    assert_int_equal(store_outbox_claim(f->st, T0 + 4, T0 + 10000, "Y", 1, &rows, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(rows[0].room_id, "r4");
    outbox_rows_free(rows, n);
    create_room(f->st, "a1", "r5", 2, T0 + 5);

    assert_int_equal(store_outbox_counts(f->st, &oc), 0);
    assert_int_equal(oc.pending, 2);
    assert_int_equal(oc.delivering, 1);
    assert_int_equal(oc.delivered, 1);
    assert_int_equal(oc.retryable, 1);
    assert_int_equal(oc.failed, 1);
    assert_int_equal(oc.oldest_undelivered_ms, T0 + 3); /* retryable rows count */
    assert_int_equal(oc.oldest_missing_ms[0], T0 + 4);  /* r3 has bit 0: r4 (delivering) */
    assert_int_equal(oc.oldest_missing_ms[1], T0 + 3);
    assert_int_equal(oc.oldest_missing_ms[7], T0 + 3);
}

/* ---- wallet and rockets ---- */

/* A SendGift mutation of room at version whose debit charges amount to
 * (app, uid) under its command_id, a never-seen account holding 100. */
static struct tmut *
gift_mut(const char *app, const char *room, const char *cmd, int64_t version, int64_t uid,
         int64_t amount)
{
    struct tmut *x = tmut_new(app, room, cmd, version, 1, T0 + version);

    x->m.command_type = "SendGift";
    x->debit = (struct wallet_debit){.app = x->m.app_code,
                                     .ref_id = x->m.command_id,
                                     .uid = uid,
                                     .amount = amount,
                                     .initial_balance = 100,
                                     .rc = -12345,
                                     .balance_after = -1};
    x->m.debit = &x->debit;
    return x;
}

static int64_t
balance_of(struct store *st, const char *app, int64_t uid)
{
    int64_t b = -1;

    assert_int_equal(store_wallet_balance(st, app, uid, 100, &b), 0);
    return b;
}

/* The gift's debit is a statement of the gift's own transaction: it commits
 * exactly with its gift, a refused one rolls its gift back alone, and a
 * command_id reused for anything else never debits. */
static void
t_wallet(void **state)
{
    struct fixture *f = *state;
    struct store *st = f->st;
    struct command_record rec;
    struct tmut *x, *b[3];
    struct mutation *ms[3];
    int64_t bal;

    create_room(st, "a1", "r1", 0, T0);
    create_room(st, "a1", "r2", 0, T0);
    create_room(st, "a1", "r3", 0, T0);
    assert_int_equal(balance_of(st, "a1", 7), 100);
    x = gift_mut("a1", "r1", "g1", 2, 7, 30);
    assert_int_equal(save1(st, x), 0);
    assert_int_equal(x->m.rc, 0);
    assert_int_equal(x->debit.rc, 0);
    assert_int_equal(x->debit.balance_after, 70);
    free(x);
    assert_int_equal(balance_of(st, "a1", 7), 70);
    /* the same command_id again, here or in another room, with any amount: never debits */
    x = gift_mut("a1", "r1", "g1", 3, 7, 30);
    assert_int_equal(save1(st, x), 0);
    assert_int_equal(x->m.rc, ROOMD_EREUSED);
    free(x);
    x = gift_mut("a1", "r2", "g1", 2, 7, 1);
    assert_int_equal(save1(st, x), 0);
    assert_int_equal(x->m.rc, ROOMD_EREUSED);
    free(x);
    assert_int_equal(balance_of(st, "a1", 7), 70);
    /* short: 402 material; the gift's rows are rolled back with it */
    x = gift_mut("a1", "r1", "g2", 3, 7, 71);
    assert_int_equal(save1(st, x), 0);
    assert_int_equal(x->m.rc, ROOMD_EFUNDS);
    assert_int_equal(x->debit.rc, ROOMD_EFUNDS);
    assert_int_equal(x->debit.balance_after, 70);
    free(x);
    memset(&rec, 0, sizeof(rec));
    assert_int_equal(store_find_command(st, "a1", "g2", &rec), ROOMD_ENOTFOUND);
    assert_int_equal(balance_of(st, "a1", 7), 70);
    /* one batch (one transaction): a refused debit rolls back its own gift only */
    b[0] = gift_mut("a1", "r1", "g3", 3, 7, 50); /* 70 -> 20 */
    b[1] = gift_mut("a1", "r2", "g4", 2, 7, 21); /* 20 left: short */
    b[2] = gift_mut("a1", "r3", "g5", 2, 8, 10); /* a fresh account: 100 -> 90 */
    for (int i = 0; i < 3; i++)
        ms[i] = &b[i]->m;
    assert_int_equal(store_save(st, ms, 3), 0);
    assert_int_equal(b[0]->m.rc, 0);
    assert_int_equal(b[0]->debit.balance_after, 20);
    assert_int_equal(b[1]->m.rc, ROOMD_EFUNDS);
    assert_int_equal(b[2]->m.rc, 0);
    assert_int_equal(b[2]->debit.balance_after, 90);
    for (int i = 0; i < 3; i++)
        free(b[i]);
    assert_int_equal(store_find_command(st, "a1", "g4", &rec), ROOMD_ENOTFOUND);
    assert_int_equal(store_find_command(st, "a1", "g3", &rec), 0);
    command_record_clear(&rec);
    assert_int_equal(balance_of(st, "a1", 7), 20);
    assert_int_equal(balance_of(st, "a1", 8), 90);
    x = gift_mut("a1", "r2", "g6", 2, 7, 20); /* r2 is still at version 1 */
    assert_int_equal(save1(st, x), 0);
    assert_int_equal(x->m.rc, 0);
    assert_int_equal(x->debit.balance_after, 0);
    free(x);

    /* Top-up, idempotent by ref; a balance past INT64_MAX is refused. */
    assert_int_equal(store_wallet_topup(st, "a1", 7, 50, "t1", 100, &bal), 0);
    assert_int_equal(bal, 50);
    assert_int_equal(store_wallet_topup(st, "a1", 7, 50, "t1", 100, &bal), 0);
    assert_int_equal(bal, 50);
    assert_int_equal(store_wallet_topup(st, "a1", 7, INT64_MAX - 50, "t2", 100, &bal), 0);
    assert_true(bal == INT64_MAX);
    assert_int_equal(store_wallet_topup(st, "a1", 7, 1, "t3", 100, &bal), ROOMD_ERANGE);
    assert_true(balance_of(st, "a1", 7) == INT64_MAX);
    assert_int_equal(store_wallet_topup(st, "a1", 7, 1, "t3", 100, &bal), ROOMD_ERANGE);
    /* A never-seen account tops up from initial_balance. */
    assert_int_equal(store_wallet_topup(st, "a1", 9, 5, "t4", 100, &bal), 0);
    assert_int_equal(bal, 105);
    /* Accounts and refs are per app. */
    assert_int_equal(balance_of(st, "a2", 7), 100);
}

/* Threads committing batches of gifts whose accounts come in opposite orders
 * (a backend that locks accounts in batch order would deadlock or lose
 * updates): every balance is exact. */
#define WB_THREADS 4
#define WB_BATCHES 15
#define WB_ITEMS 6

struct wb_worker {
    struct store *st;
    int idx;
    int failures;
};

static void *
wb_main(void *arg)
{
    struct wb_worker *w = arg;
    struct tmut *x[WB_ITEMS];
    struct mutation *ms[WB_ITEMS];
    char room[32], cmd[48];

    for (int i = 0; i < WB_ITEMS; i++) {
        snprintf(room, sizeof(room), "wb-%d-%d", w->idx, i);
        create_room(w->st, "wb", room, 0, T0);
    }
    for (int b = 0; b < WB_BATCHES; b++) {
        for (int i = 0; i < WB_ITEMS; i++) {
            /* even threads: uids 1..6, odd threads: 6..1 */
            int64_t uid = w->idx % 2 == 0 ? i + 1 : WB_ITEMS - i;

            snprintf(room, sizeof(room), "wb-%d-%d", w->idx, i);
            snprintf(cmd, sizeof(cmd), "wb-%d-%d-%d", w->idx, b, i);
            x[i] = gift_mut("wb", room, cmd, b + 2, uid, uid);
            x[i]->debit.initial_balance = 100000;
            ms[i] = &x[i]->m;
        }
        if (store_save(w->st, ms, WB_ITEMS) != 0)
            w->failures++;
        for (int i = 0; i < WB_ITEMS; i++) {
            if (x[i]->m.rc != 0)
                w->failures++;
            free(x[i]);
        }
    }
    return NULL;
}

static void
t_wallet_gifts_concurrent(void **state)
{
    struct fixture *f = *state;
    struct wb_worker w[WB_THREADS];
    pthread_t th[WB_THREADS];
    int64_t b;

    for (int i = 0; i < WB_THREADS; i++) {
        w[i] = (struct wb_worker){.st = f->st, .idx = i};
        assert_int_equal(pthread_create(&th[i], NULL, wb_main, &w[i]), 0);
    }
    for (int i = 0; i < WB_THREADS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(w[i].failures, 0);
    }
    /* uid u paid u for every gift of every batch of every thread */
    for (int64_t uid = 1; uid <= WB_ITEMS; uid++) {
        assert_int_equal(store_wallet_balance(f->st, "wb", uid, 100000, &b), 0);
        assert_int_equal(b, 100000 - uid * WB_THREADS * WB_BATCHES);
    }
}

/* Commands through a group commit with three batches in flight (MySQL: on
 * three pooled connections at once), each thread's rooms its own (a cell's
 * order) and the senders shared by all: every gift commits once, a reused
 * command_id fails alone, and every balance is exact. */
#define GC_THREADS 12
#define GC_GIFTS 20
#define GC_SENDERS 4

struct gc_worker {
    struct group_commit *gc;
    int idx;
    int failures, reused_rc;
};

static void *
gc_main(void *arg)
{
    struct gc_worker *w = arg;
    char room[32], cmd[48];

    snprintf(room, sizeof(room), "gc-%d", w->idx);
    snprintf(cmd, sizeof(cmd), "gc-%d-create", w->idx);
    struct tmut *x = tmut_new("gc", room, cmd, 1, 1, T0);
    if (group_commit_submit(w->gc, &x->m) != 0)
        w->failures++;
    free(x);
    for (int i = 0; i < GC_GIFTS; i++) {
        int64_t uid = 1 + (w->idx + i) % GC_SENDERS;

        snprintf(cmd, sizeof(cmd), "gc-%d-%d", w->idx, i);
        x = gift_mut("gc", room, cmd, i + 2, uid, uid);
        x->debit.initial_balance = 100000;
        if (group_commit_submit(w->gc, &x->m) != 0 || x->debit.rc != 0)
            w->failures++;
        free(x);
    }
    /* a create under this thread's first gift's command_id, in a room of its own */
    snprintf(room, sizeof(room), "gc-%d-reused", w->idx);
    snprintf(cmd, sizeof(cmd), "gc-%d-0", w->idx);
    x = tmut_new("gc", room, cmd, 1, 1, T0);
    w->reused_rc = group_commit_submit(w->gc, &x->m);
    free(x);
    return NULL;
}

static void
t_group_commit_in_flight(void **state)
{
    struct fixture *f = *state;
    struct group_commit *gc = NULL;
    struct gc_worker w[GC_THREADS];
    pthread_t th[GC_THREADS];
    int64_t paid[GC_SENDERS + 1] = {0}, b;
    uint64_t batches, muts;
    struct room_load l;

    f->st->save_writers = 3;
    assert_int_equal(group_commit_open(&gc, f->st, 8), 0);
    for (int i = 0; i < GC_THREADS; i++) {
        w[i] = (struct gc_worker){.gc = gc, .idx = i};
        assert_int_equal(pthread_create(&th[i], NULL, gc_main, &w[i]), 0);
    }
    for (int i = 0; i < GC_THREADS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(w[i].failures, 0);
        assert_int_equal(w[i].reused_rc, ROOMD_EREUSED);
        for (int g = 0; g < GC_GIFTS; g++) {
            int64_t uid = 1 + (i + g) % GC_SENDERS;
            paid[uid] += uid;
        }
    }
    group_commit_stats(gc, &batches, &muts);
    group_commit_close(gc);
    assert_int_equal(muts, GC_THREADS * (GC_GIFTS + 2));
    for (int64_t uid = 1; uid <= GC_SENDERS; uid++) {
        assert_int_equal(store_wallet_balance(f->st, "gc", uid, 100000, &b), 0);
        assert_int_equal(b, 100000 - paid[uid]);
    }
    for (int i = 0; i < GC_THREADS; i++) {
        char room[32];

        snprintf(room, sizeof(room), "gc-%d", i);
        assert_int_equal(store_load_room(f->st, "gc", room, &l), 0);
        assert_int_equal(l.version, GC_GIFTS + 1);
        room_load_clear(&l);
        snprintf(room, sizeof(room), "gc-%d-reused", i);
        assert_int_equal(store_load_room(f->st, "gc", room, &l), ROOMD_ENOTFOUND);
        assert_int_equal(room_rows(f->st, room), 0);
    }
}

static void
t_rockets(void **state)
{
    struct fixture *f = *state;
    struct rocket_pending *rp;
    size_t n;
    struct tmut *x;

    assert_int_equal(store_rockets_pending(f->st, &rp, &n), 0);
    assert_int_equal(n, 0);
    free(rp);
    create_room(f->st, "a1", "r1", 0, T0);
    create_room(f->st, "a1", "r2", 0, T0);
    x = tmut_new("a1", "r1", "ignite", 2, 1, T0 + 1);
    x->m.meta.rocket_status = "ignited";
    x->m.meta.rocket_id = "rk-1";
    x->m.meta.rocket_level = 2;
    x->m.meta.rocket_launch_at_ms = T0 + 60000;
    assert_int_equal(save1(f->st, x), 0);
    assert_int_equal(x->m.rc, 0);
    free(x);
    assert_int_equal(store_rockets_pending(f->st, &rp, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(rp[0].app_code, "a1");
    assert_string_equal(rp[0].room_id, "r1");
    assert_string_equal(rp[0].rocket_id, "rk-1");
    assert_int_equal(rp[0].level, 2);
    assert_int_equal(rp[0].launch_at_ms, T0 + 60000);
    free(rp);
    x = tmut_new("a1", "r1", "launch", 3, 1, T0 + 60000);
    x->m.meta.rocket_status = "done";
    x->m.meta.rocket_id = "rk-1";
    x->m.meta.rocket_level = 2;
    assert_int_equal(save1(f->st, x), 0);
    free(x);
    assert_int_equal(store_rockets_pending(f->st, &rp, &n), 0);
    assert_int_equal(n, 0);
    free(rp);
}

/* ---- two stores (two processes) claiming at once ---- */

#define CC_ROOMS 40
#define CC_EVENTS 8
#define CC_THREADS 4

struct claimer {
    struct store *st;
    char name[16];
    int64_t *ids;
    size_t nids;
    int errors;
};

static void *
claimer_main(void *arg)
{
    struct claimer *c = arg;
    int empty = 0;

    c->ids = xcalloc(CC_ROOMS * CC_EVENTS, sizeof(*c->ids));
    while (empty < 3) {
        struct outbox_row *rows;
        size_t n;
        int rc = store_outbox_claim(c->st, T0 + 10, T0 + 100000000, c->name, 5, &rows, &n);

        if (rc != 0) { /* busy beyond the timeout counts as an error, not a pass */
            c->errors++;
            continue;
        }
        empty = n == 0 ? empty + 1 : 0;
        for (size_t i = 0; i < n; i++) {
            if (strcmp(rows[i].locked_by, c->name) != 0)
                c->errors++;
            if (c->nids < CC_ROOMS * CC_EVENTS)
                c->ids[c->nids++] = rows[i].id;
            else
                c->errors++;
        }
        outbox_rows_free(rows, n);
    }
    return NULL;
}

static int
cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return x < y ? -1 : x > y;
}

static void
t_concurrent_claim(void **state)
{
    struct fixture *f = *state;
    struct store *st2 = store_suite_open(f->conf);
    struct claimer cl[2 * CC_THREADS];
    pthread_t th[2 * CC_THREADS];
    int64_t *all = xcalloc(CC_ROOMS * CC_EVENTS, sizeof(*all));
    size_t nall = 0;

    for (int r = 0; r < CC_ROOMS; r++) {
        char room[16];

        snprintf(room, sizeof(room), "cc%d", r);
        create_room(r % 2 ? f->st : st2, "a1", room, CC_EVENTS, T0 + r % 7);
    }
    for (int i = 0; i < 2 * CC_THREADS; i++) {
        memset(&cl[i], 0, sizeof(cl[i]));
        cl[i].st = i % 2 ? f->st : st2;
        snprintf(cl[i].name, sizeof(cl[i].name), "node%d-w%d", i % 2, i / 2);
        assert_int_equal(pthread_create(&th[i], NULL, claimer_main, &cl[i]), 0);
    }
    for (int i = 0; i < 2 * CC_THREADS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(cl[i].errors, 0);
        for (size_t k = 0; k < cl[i].nids && nall < CC_ROOMS * CC_EVENTS; k++)
            all[nall++] = cl[i].ids[k];
        free(cl[i].ids);
    }
    assert_int_equal(nall, CC_ROOMS * CC_EVENTS);
    qsort(all, nall, sizeof(*all), cmp_i64);
    for (size_t k = 1; k < nall; k++)
        assert_true(all[k] != all[k - 1]); /* no row claimed twice */
    free(all);
    store_close(st2);
}

/* The gift catalog: create (version 1), change (version + 1), the
 * conditional put refused on a stale version with nothing written, values
 * out of range refused, per app, listed in (app, gift_id) order. */
static void
t_gift_catalog(void **state)
{
    struct fixture *f = *state;
    struct gift_item g, got, *rows;
    size_t n;

    assert_int_equal(store_gift_get(f->st, "a1", "rose", &got), ROOMD_ENOTFOUND);
    memset(&g, 0, sizeof(g));
    strcpy(g.app_code, "a1");
    strcpy(g.gift_id, "rose");
    g.unit_price = 1000;
    g.energy_per_unit = 500;
    g.enabled = 1;
    assert_int_equal(store_gift_put(f->st, &g, 0), 0);
    assert_int_equal(g.version, 1);
    assert_true(g.updated_at_ms > 0);
    assert_int_equal(store_gift_get(f->st, "a1", "rose", &got), 0);
    assert_int_equal(got.unit_price, 1000);
    assert_int_equal(got.energy_per_unit, 500);
    assert_int_equal(got.enabled, 1);
    assert_int_equal(got.version, 1);
    /* a change raises the version; a put on a stale version changes nothing */
    g.unit_price = 2000;
    g.enabled = 0;
    assert_int_equal(store_gift_put(f->st, &g, -1), 0);
    assert_int_equal(g.version, 2);
    g.unit_price = 1;
    assert_int_equal(store_gift_put(f->st, &g, 1), ROOMD_ECONFLICT);
    assert_int_equal(g.version, 2);
    assert_int_equal(store_gift_get(f->st, "a1", "rose", &got), 0);
    assert_int_equal(got.unit_price, 2000);
    assert_int_equal(got.enabled, 0);
    assert_int_equal(got.version, 2);
    g.unit_price = 0;
    assert_int_equal(store_gift_put(f->st, &g, -1), ROOMD_EINVAL);
    g.unit_price = 5;
    g.energy_per_unit = STORE_GIFT_VALUE_MAX + 1;
    assert_int_equal(store_gift_put(f->st, &g, -1), ROOMD_EINVAL);
    /* per app: another app's rose is its own */
    assert_int_equal(store_gift_get(f->st, "a2", "rose", &got), ROOMD_ENOTFOUND);
    strcpy(g.app_code, "a2");
    g.energy_per_unit = 0;
    g.enabled = 1;
    assert_int_equal(store_gift_put(f->st, &g, 0), 0);
    strcpy(g.app_code, "a1");
    strcpy(g.gift_id, "car");
    assert_int_equal(store_gift_put(f->st, &g, 0), 0);
    assert_int_equal(store_gift_list(f->st, "a1", &rows, &n), 0);
    assert_int_equal(n, 2);
    assert_string_equal(rows[0].gift_id, "car");
    assert_string_equal(rows[1].gift_id, "rose");
    assert_int_equal(rows[1].version, 2);
    free(rows);
    assert_int_equal(store_gift_list(f->st, "", &rows, &n), 0);
    assert_int_equal(n, 3);
    assert_string_equal(rows[2].app_code, "a2");
    assert_int_equal(rows[2].energy_per_unit, 0);
    free(rows);
}

/* Completes row id claimed by "O" as retryable at retry_at with sinks_done. */
static void
complete_sinks(struct store *st, int64_t id, uint32_t sinks_done, int64_t retry_at, int64_t now)
{
    struct outbox_result r = {.id = id,
                              .locked_by = "O",
                              .status = OUTBOX_RETRYABLE,
                              .sinks_done = sinks_done,
                              .next_retry_at_ms = retry_at,
                              .last_error = "bus: circuit open",
                              .now_ms = now};

    assert_int_equal(store_outbox_complete(st, &r, 1), 0);
    assert_int_equal(r.rc, 0);
}

/* outbox_worker.ordering per_room is per sink (issue 26): a room's row
 * that waits lacking only the bus (IM done) does not hold the rows after it
 * for IM: they are claimed with held_sinks naming the bus (and not IM); a
 * row lacking only what the waiting row lacks is not claimed; with the bus
 * parked (store_outbox_park: its circuit open) a due row lacking only the
 * bus is not claimed either and holds its room; unparked, the room's rows
 * come from its head, in order, with nothing held. */
static void
t_ordered_claim_per_sink(void **state)
{
    struct fixture *f = *state;
    struct outbox_row *rows;
    int64_t ids[4];
    size_t n;

    create_room(f->st, "a1", "r1", 4, T0);
    assert_int_equal(claim_ordered_ids(f->st, T0 + 100, 10, ids), 4);
    complete_sinks(f->st, ids[0], SINK_BIT_TIM, T0 + 5000, T0 + 150); /* waits for the bus */
    complete_sinks(f->st, ids[1], SINK_BIT_TIM, T0 + 150, T0 + 150);  /* held for the bus */
    complete_sinks(f->st, ids[2], 0, T0 + 150, T0 + 150);             /* nothing yet */
    complete_sinks(f->st, ids[3], 0, T0 + 150, T0 + 150);

    assert_int_equal(
        store_outbox_claim_ordered(f->st, T0 + 200, T0 + 1000, "O", 10, true, &rows, &n), 0);
    assert_int_equal(n, 2); /* not ids[1]: it lacks only the bus, which ids[0] lacks */
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(rows[i].id, ids[2 + i]);
        assert_true(rows[i].held_sinks & SINK_BIT_BUS);
        assert_false(rows[i].held_sinks & SINK_BIT_TIM);
    }
    outbox_rows_free(rows, n);
    complete_sinks(f->st, ids[2], SINK_BIT_TIM, T0 + 250, T0 + 250);
    complete_sinks(f->st, ids[3], SINK_BIT_TIM, T0 + 250, T0 + 250);
    assert_int_equal(claim_ordered_ids(f->st, T0 + 300, 10, ids + 2), 0); /* all wait for it */

    /* ids[0] due again, but the bus's circuit is open: all four parked */
    store_outbox_park(f->st, SINK_BIT_TIM); /* enabled: IM, bus */
    assert_int_equal(claim_ordered_ids(f->st, T0 + 6000, 10, ids + 2), 0);
    /* a new row of the room lacking IM still goes, held for the bus */
    struct tmut *c = tmut_new("a1", "r1", "r1-v2", 2, 1, T0 + 6000);
    assert_int_equal(save1(f->st, c), 0);
    assert_int_equal(
        store_outbox_claim_ordered(f->st, T0 + 6100, T0 + 7000, "O", 10, true, &rows, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(rows[0].id, row_id(f->st, c->ev[0].event_id));
    assert_true(rows[0].held_sinks & SINK_BIT_BUS);
    assert_false(rows[0].held_sinks & SINK_BIT_TIM);
    complete_sinks(f->st, rows[0].id, SINK_BIT_TIM, T0 + 6150, T0 + 6150);
    outbox_rows_free(rows, n);
    free(c);

    /* the circuit closed: the room from its head, in order, nothing held */
    store_outbox_park(f->st, 0);
    assert_int_equal(
        store_outbox_claim_ordered(f->st, T0 + 6200, T0 + 7000, "O", 10, true, &rows, &n), 0);
    assert_int_equal(n, 5);
    assert_int_equal(rows[0].id, ids[0]);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(rows[i].held_sinks, 0);
        assert_int_equal(rows[i].sinks_done, SINK_BIT_TIM);
        if (i > 0)
            assert_true(rows[i].id > rows[i - 1].id);
    }
    outbox_rows_free(rows, n);
}

int
store_suite_run(const char *backend_name, struct conf *(*make_conf)(void),
                int (*reset)(struct store *s))
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(t_save_load, setup, teardown),
        cmocka_unit_test_setup_teardown(t_find_command, setup, teardown),
        cmocka_unit_test_setup_teardown(t_batch_reused, setup, teardown),
        cmocka_unit_test_setup_teardown(t_fence, setup, teardown),
        cmocka_unit_test_setup_teardown(t_fence_batch, setup, teardown),
        cmocka_unit_test_setup_teardown(t_fence_room, setup, teardown),
        cmocka_unit_test_setup_teardown(t_rooms_list, setup, teardown),
        cmocka_unit_test_setup_teardown(t_create_exists, setup, teardown),
        cmocka_unit_test_setup_teardown(t_fail_hook, setup, teardown),
        cmocka_unit_test_setup_teardown(t_snapshots, setup, teardown),
        cmocka_unit_test_setup_teardown(t_command_log_purge, setup, teardown),
        cmocka_unit_test_setup_teardown(t_claim, setup, teardown),
        cmocka_unit_test_setup_teardown(t_claim_order_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(t_ordered_claim_after_expiry, setup, teardown),
        cmocka_unit_test_setup_teardown(t_ordered_claim, setup, teardown),
        cmocka_unit_test_setup_teardown(t_ordered_claim_per_sink, setup, teardown),
        cmocka_unit_test_setup_teardown(t_handoff_own_rows, setup, teardown),
        cmocka_unit_test_setup_teardown(t_claimed_insert, setup, teardown),
        cmocka_unit_test_setup_teardown(t_fenced_complete, setup, teardown),
        cmocka_unit_test_setup_teardown(t_complete_claim, setup, teardown),
        cmocka_unit_test_setup_teardown(t_complete_claim_ordered, setup, teardown),
        cmocka_unit_test_setup_teardown(t_claim_complete_chunks, setup, teardown),
        cmocka_unit_test_setup_teardown(t_complete_run_fenced, setup, teardown),
        cmocka_unit_test_setup_teardown(t_retry_fields, setup, teardown),
        cmocka_unit_test_setup_teardown(t_replay, setup, teardown),
        cmocka_unit_test_setup_teardown(t_list, setup, teardown),
        cmocka_unit_test_setup_teardown(t_purge, setup, teardown),
        cmocka_unit_test_setup_teardown(t_counts, setup, teardown),
        cmocka_unit_test_setup_teardown(t_wallet, setup, teardown),
        cmocka_unit_test_setup_teardown(t_wallet_gifts_concurrent, setup, teardown),
        cmocka_unit_test_setup_teardown(t_group_commit_in_flight, setup, teardown),
        cmocka_unit_test_setup_teardown(t_owner_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(t_owner_limit_concurrent, setup, teardown),
        cmocka_unit_test_setup_teardown(t_rockets, setup, teardown),
        cmocka_unit_test_setup_teardown(t_gift_catalog, setup, teardown),
        cmocka_unit_test_setup_teardown(t_concurrent_claim, setup, teardown),
    };

    suite_make_conf = make_conf;
    suite_reset = reset;
    return cmocka_run_group_tests_name(backend_name, tests, NULL, NULL);
}
