/* SPDX-License-Identifier: Apache-2.0 */
/*
 * service.c: the COMMAND PATH (ARCHITECTURE §2). room_service_execute_from()
 * runs one command through named stages, each a function below with a
 * one-line contract, in this order:
 *   parse + authorize   in the caller (room_cmd_parse*, auth_may_act_as;
 *                       http/handlers_room.c, rpc/server.c)
 *   stage_turn          route/forward + cell turn: lease + cell (cell.c), or
 *                       the request sent to the room's owner
 *   stage_price         SendGift: unit price + energy from the gift catalog
 *   stage_apply         clone + room_apply (apply.c, cmd_*.c own the rules)
 *   stage_wallet_hold   SendGift: the remote wallet's Try
 *   stage_mutation      log row, outbox rows (room_seq), meta, snapshot, debit
 *   stage_commit        SaveMutation through the group committer; the outbox
 *                       hand-off (outbox/handoff.h)
 *   stage_swap          committed: the clone swapped in, projection, rocket timer
 *   stage_answer        hold settled, turn released, create hook, timing line
 * Idempotency is no stage of its own: the command log's unique (app,
 * command_id) key claims the id atomically in the commit, and a commit
 * refused by it (EREUSED) is answered from the log (answer_reused), the
 * applied clone thrown away as for any failed commit; a refusal before the
 * commit looks the log up first (answer_logged_meanwhile). A stage returning false
 * has filled the reply; stage_answer always runs. answer.c holds the
 * replies, the answers from the log and the timing line; rocket_timer.c
 * owns the in-process wake-ups.
 */
#include "room/service.h"

#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/uuid.h"
#include "core/xmalloc.h"
#include "lease/lease.h"
#include "metrics/metrics.h"
#include "outbox/handoff.h"
#include "projection/projection.h"
#include "room/answer.h"
#include "room/cell.h"
#include "room/presence.h"
#include "room/rebuild.h"
#include "room/rocket_timer.h"
#include "room/text.h"
#include "store/group_commit.h"
#include "store/store.h"
#include "wallet/wallet.h"

#include <jansson.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Retry-After of 429 too_many_rooms: a slot frees only when one of the
 * owner's rooms closes, so no time is right; a minute keeps clients from
 * hammering. */
#define ROOM_TOO_MANY_RETRY_S 60

struct room_service {
    struct room_deps d;
    struct cell_map *cells;
    struct rocket_timer *timer;
    struct room_rebuild *rebuild;      /* the projection rebuild thread, or NULL */
    struct presence_sweeper *presence; /* idle leaves (presence.c), NULL while off */
    _Atomic uint64_t heartbeats, heartbeats_slow;
    bool collecting;            /* the presence metrics collector is registered */
    int64_t precommit_delay_ms; /* ROOMD_TESTING: ROOMD_TEST_PRECOMMIT_DELAY_MS */
};

/* ---- the mutation --------------------------------------------------------------------- */

static const char *const room_status_str[] = {"open", "closed"};
static const char *const rocket_status_str[] = {"idle", "ignited", "done"};

/* {"events":[{"event_id","event_type"}],"room":{..},"room_id":..,"version":..},
 * written directly (keys in jansson's sorted order): event ids are UUIDs,
 * event types constants and the room id an identifier, none needs escaping. */
static char *
build_response(const struct room_cmd *cmd, const struct room_state *s, const struct outbox_new *evs,
               size_t n, const char *state_json)
{
    struct text t = {0};

    text_puts(&t, "{\"events\":[");
    for (size_t i = 0; i < n; i++)
        text_printf(&t, "%s{\"event_id\":\"%s\",\"event_type\":\"%s\"}", i ? "," : "",
                    evs[i].event_id, evs[i].event_type);
    text_printf(&t, "],%s\"room\":%s,\"room_id\":\"%s\",\"version\":%lld}",
                cmd->type == CMD_LAUNCH_ROCKET ? "\"launched\":true," : "", state_json, s->room_id,
                (long long)s->version);
    return text_take(&t);
}

/* Fills *m with what a command commits besides its events and snapshot:
 * the log row (cmd, its response) and the room's meta row after it (s, the
 * applied clone). Everything stays borrowed. */
static void
make_mutation(struct mutation *m, const struct room_cmd *cmd, const struct room_state *s,
              int64_t now, int64_t fence_token, const char *response)
{
    memset(m, 0, sizeof(*m));
    strlcpy_(m->app_code, cmd->app_code, sizeof(m->app_code));
    strlcpy_(m->room_id, cmd->room_id, sizeof(m->room_id));
    strlcpy_(m->command_id, cmd->command_id, sizeof(m->command_id));
    m->command_type = room_cmd_name(cmd->type);
    m->request = cmd->request;
    m->response = response;
    m->version = s->version;
    m->created_at_ms = now;
    m->fence_token = fence_token;
    /* the request this thread serves (http/server.c's log context) */
    strlcpy_(m->request_id, log_request_id(), sizeof(m->request_id));
    strlcpy_(m->traceparent, log_traceparent(), sizeof(m->traceparent));
    m->create = cmd->type == CMD_CREATE_ROOM;
    m->meta.owner_uid = s->owner_uid;
    m->meta.title = s->title;
    m->meta.status = room_status_str[s->status];
    m->meta.version = s->version;
    m->meta.rocket_status = rocket_status_str[s->rocket.status];
    m->meta.rocket_id = s->rocket.rocket_id;
    m->meta.rocket_level = s->rocket.level;
    m->meta.rocket_launch_at_ms = s->rocket.launch_at_ms;
    m->meta.created_at_ms = s->created_at_ms;
    m->meta.updated_at_ms = s->updated_at_ms;
}

/* Commits m through the group committer (or the store directly). */
static int
commit(struct room_service *svc, struct mutation *m)
{
    struct mutation *one[1] = {m};
    int rc;

    if (svc->d.gc != NULL)
        return group_commit_submit(svc->d.gc, m);
    rc = store_save(svc->d.store, one, 1);
    return rc != 0 ? rc : m->rc;
}

/* ---- execute ------------------------------------------------------------------------- */

#ifdef ROOMD_TESTING
/* Fault injection (ROOMD_TEST_WALLET_CRASH=point): the process dies with
 * SIGKILL at that point of the gift path, as kill -9 would. Points:
 * before_try, after_try, before_commit, after_commit. */
static void
crash_point(const char *point)
{
    const char *want = getenv("ROOMD_TEST_WALLET_CRASH");

    if (want != NULL && strcmp(want, point) == 0) {
        log_warn("room", "test hook: killed", "point=%s", point);
        raise(SIGKILL);
    }
}
#else
#define crash_point(p) ((void)0)
#endif

/* The lease names the owner as "<public> <admin>" (lease.h): splits it into
 * reply->owner and reply->owner_admin. */
static void
split_owner(struct room_reply *reply)
{
    char *sp = strchr(reply->owner, ' ');

    reply->owner_admin[0] = '\0';
    if (sp == NULL)
        return;
    *sp = '\0';
    strlcpy_(reply->owner_admin, sp + 1, sizeof(reply->owner_admin));
}

/* After ENOTOWNER: sends the request to the owner named in reply->owner (and
 * reply->owner_admin) when forwarding applies. Returns true when *reply now
 * holds the owner's answer. */
static bool
forward_to_owner(struct room_service *svc, const char *app, const struct room_origin *origin,
                 struct room_reply *reply, int64_t *forward_us)
{
    struct room_reply fr;
    int64_t t = clock_mono_us();
    int rc;

    split_owner(reply);
    if (svc->d.forward == NULL || origin == NULL || origin->forwarded || reply->owner[0] == '\0')
        return false;
    memset(&fr, 0, sizeof(fr));
    rc = svc->d.forward(svc->d.forward_arg, reply->owner, reply->owner_admin, app, origin, &fr);
    *forward_us = clock_mono_us() - t;
    if (rc != 0) {
        room_reply_clear(&fr);
        return false;
    }
    room_reply_clear(reply);
    *reply = fr;
    return true;
}

/* A read's or a heartbeat's turn on room_id's cell (cell_acquire): returns
 * the cell, or NULL with *reply answered (the owner's answer when
 * forwarded, else the load's error). The caller releases the cell. */
static struct cell *
acquire_or_answer(struct room_service *svc, const char *app, const char *room_id,
                  const struct room_origin *origin, struct room_reply *reply)
{
    struct cell *c = NULL;
    int64_t lease_us;
    char msg[160];
    int rc =
        cell_acquire(svc->cells, app, room_id, &c, reply->owner, sizeof(reply->owner), &lease_us);

    if (rc == 0)
        return c;
    if (rc == ROOMD_ENOTOWNER && forward_to_owner(svc, app, origin, reply, &lease_us))
        return NULL;
    snprintf(msg, sizeof(msg), "room load: %s", roomd_strerror(rc));
    room_reply_error(reply, rc == ROOMD_EINTERNAL ? 500 : 503,
                     rc == ROOMD_EINTERNAL ? "internal" : roomd_err_code(rc), msg);
    return NULL;
}

/* ---- the stages ---------------------------------------------------------------------- */

/* One command on its way through the stages: what each stage leaves the
 * next. Owned by room_service_execute_from's frame; stage_answer frees it. */
struct exec {
    struct room_service *svc;
    const struct conf *conf;
    const struct room_cmd *cmd;
    const struct room_origin *origin;
    struct room_reply *reply;
    struct room_cmd priced; /* SendGift priced by the catalog (cmd points here then) */
    struct timing tm;
    struct cell *c;           /* our turn on the room; NULL = none taken */
    struct room_state *clone; /* the applied clone; NULL once swapped in */
    struct room_events ev;    /* the events room_apply produced */
    int64_t now;              /* the command's time (never before the room's last) */
    struct wallet_gift gift;  /* SendGift with a wallet: the amount and its key */
    struct wallet_debit debit;
    bool held;          /* a wallet hold is open: stage_answer settles it */
    int64_t held_at_ms; /* when the hold was taken (mono) */
    struct mutation m;
    struct outbox_new *obx;
    char *state_json, *snapshot_json, *response, *logged_request;
    bool drop;      /* release the cell dropping its state (reload next time) */
    bool created;   /* a CreateRoom committed: run the create hook */
    bool committed; /* swapped in: presence follows the membership change */
};

/* Route + cell turn: takes the room's turn (lease + cell, state loaded), or
 * forwards the request to the room's owner. False: *reply is the answer. */
static bool
stage_turn(struct exec *x)
{
    struct room_reply *r = x->reply;
    int rc = cell_acquire(x->svc->cells, x->cmd->app_code, x->cmd->room_id, &x->c, r->owner,
                          sizeof(r->owner), &x->tm.lease_us);

    if (rc == 0 && x->cmd->idle_leave &&
        !presence_still_idle(x->svc->cells, x->c, x->cmd, x->conf->room.member_idle_timeout_ms)) {
        /* the member spoke since the sweeper saw it silent (or the room was
         * reloaded, restarting its clock): nothing to do */
        r->status = 200;
        r->body = xasprintf("{\"left\":false,\"reason\":\"member is active\"}");
        strlcpy_(x->tm.result, "presence_active", sizeof(x->tm.result));
        return false;
    }
    if (rc == 0)
        return true;
    x->c = NULL;
    if (rc == ROOMD_ENOTOWNER &&
        forward_to_owner(x->svc, x->cmd->app_code, x->origin, r, &x->tm.forward_us)) {
        strlcpy_(x->tm.result, "forwarded", sizeof(x->tm.result));
        x->tm.forwarded = true;
        return false;
    }
    answer_store_fail(r, &x->tm, rc, "room load");
    return false;
}

/* Adds key: v (taken) to the "error" object of r's error body. */
static void
error_add(struct room_reply *r, const char *key, json_t *v)
{
    json_t *o = json_loads(r->body, 0, NULL);

    json_object_set_new(json_object_get(o, "error"), key, v);
    free(r->body);
    r->body = json_dumps(o, JSON_SORT_KEYS | JSON_COMPACT);
    json_decref(o);
    if (r->body == NULL)
        abort();
}

/* The 409 price_changed answer: the catalog's price and version beside the code. */
static void
price_changed_reply(struct exec *x, const struct gift_item *g)
{
    char msg[320];

    snprintf(msg, sizeof(msg),
             "gift %s costs %lld now (catalog version %lld), the request named %lld: nothing "
             "was charged; show the new price and send again",
             g->gift_id, (long long)g->unit_price, (long long)g->version,
             (long long)x->cmd->unit_price);
    answer_fail(x->reply, &x->tm, 409, "price_changed", msg);
    error_add(x->reply, "unit_price", json_integer(g->unit_price));
    error_add(x->reply, "catalog_version", json_integer(g->version));
}

/* Price (SendGift): unit price and rocket energy from the gift catalog
 * (room.gift_catalog required), refusing an unknown or disabled gift and a
 * request naming another unit_price (409 price_changed); with the catalog
 * off the request's unit_price, which it must name. A refusal looks the log
 * up first (a retry after a price change answers what it committed).
 * False: *reply is the answer. */
static bool
stage_price(struct exec *x)
{
    const struct room_cmd *cmd = x->cmd;
    struct gift_item g;
    char msg[320];
    int rc;

    if (cmd->type != CMD_SEND_GIFT)
        return true;
    if (strcmp(x->conf->room.gift_catalog, "off") == 0) {
        if (cmd->price_named || answer_logged_meanwhile(x->svc->d.store, cmd, x->reply, &x->tm))
            return cmd->price_named;
        answer_fail(x->reply, &x->tm, 400, "invalid_argument",
                    "unit_price: is required while room.gift_catalog is off");
        error_add(x->reply, "field", json_string("unit_price"));
        return false;
    }
    rc = store_gift_get(x->svc->d.store, cmd->app_code, cmd->gift_id, &g);
    if (rc != 0 && rc != ROOMD_ENOTFOUND) {
        answer_store_fail(x->reply, &x->tm, rc, "gift catalog");
        return false;
    }
    if (rc == 0 && g.enabled && (!cmd->price_named || cmd->unit_price == g.unit_price)) {
        x->priced = *cmd; /* shallow: request stays the caller's */
        room_cmd_price(&x->priced, &g);
        x->cmd = &x->priced;
        return true;
    }
    if (answer_logged_meanwhile(x->svc->d.store, cmd, x->reply, &x->tm))
        return false;
    if (rc == ROOMD_ENOTFOUND || !g.enabled) {
        snprintf(msg, sizeof(msg), "gift_id %s is %s in app %s's gift catalog", cmd->gift_id,
                 rc == 0 ? "disabled" : "not", cmd->app_code);
        answer_fail(x->reply, &x->tm, rc == 0 ? 409 : 404,
                    rc == 0 ? "gift_disabled" : "gift_not_found", msg);
    } else {
        price_changed_reply(x, &g);
    }
    return false;
}

/* Apply: the command on a clone of the room (room_apply), refused when the
 * room's existence or the rules say no. False: *reply is the answer. */
static bool
stage_apply(struct exec *x)
{
    const struct room_cmd *cmd = x->cmd;
    const struct room_state *s = x->c->state;
    struct apply_error ae;
    char msg[160];
    int rc;

    if ((cmd->type == CMD_CREATE_ROOM) != (s == NULL)) {
        if (answer_logged_meanwhile(x->svc->d.store, cmd, x->reply, &x->tm))
            return false;
        snprintf(msg, sizeof(msg), "room %s %s", cmd->room_id,
                 s != NULL ? "already exists" : "does not exist");
        answer_fail(x->reply, &x->tm, s != NULL ? 409 : 404,
                    s != NULL ? "room_exists" : "not_found", msg);
        return false;
    }
    x->clone = s == NULL ? room_state_new(cmd->app_code, cmd->room_id) : room_state_clone(s);
    /* the room's clock never runs backwards, even when the wall clock does */
    x->now = clock_wall_ms();
    if (s != NULL && x->now < s->updated_at_ms)
        x->now = s->updated_at_ms;
    rc = room_apply(x->clone, cmd, x->now, &x->conf->room, &x->ev, &ae);
    if (rc == 0)
        return true;
    if (answer_logged_meanwhile(x->svc->d.store, cmd, x->reply, &x->tm))
        return false;
    if (cmd->type == CMD_LAUNCH_ROCKET && strcmp(ae.code, "rocket_stale") == 0) {
        json_t *o = json_pack("{s:b, s:s}", "launched", 0, "reason", ae.message);
        x->reply->status = 200;
        x->reply->body = json_dumps(o, JSON_SORT_KEYS | JSON_COMPACT);
        json_decref(o);
        strlcpy_(x->tm.result, "rocket_stale", sizeof(x->tm.result));
    } else {
        answer_fail(x->reply, &x->tm, roomd_err_http_status(rc), ae.code, ae.message);
    }
    return false;
}

/* Wallet hold: SendGift's amount, keyed by (app, command_id) and bound to
 * this request; a remote wallet's Try happens here (the embedded ledger's
 * debit is a statement of the commit). False: *reply is the answer. */
static bool
stage_wallet_hold(struct exec *x)
{
    struct room_service *svc = x->svc;
    const struct room_cmd *cmd = x->cmd;
    int64_t t, balance;
    char msg[320];
    int rc;

    if (cmd->type != CMD_SEND_GIFT || svc->d.wallet == NULL)
        return true;
    wallet_gift_init(&x->gift, cmd->app_code, cmd->room_id, cmd->command_id, cmd->uid,
                     cmd->count * cmd->unit_price, cmd->request);
    if (svc->d.wallet->ops->hold == NULL)
        return true;
    /* the Try is an effect outside the store: a retry of a committed gift
     * is answered from the log before it, not after */
    if (answer_logged_meanwhile(svc->d.store, cmd, x->reply, &x->tm))
        return false;
    crash_point("before_try");
    t = clock_mono_us();
    x->held_at_ms = clock_mono_ms();
    rc = svc->d.wallet->ops->hold(svc->d.wallet, &x->gift, &balance);
    x->tm.wallet_us = clock_mono_us() - t;
    if (rc == ROOMD_EFUNDS) {
        snprintf(msg, sizeof(msg), "uid %lld cannot pay %lld", (long long)cmd->uid,
                 (long long)x->gift.amount);
        answer_fail(x->reply, &x->tm, 402, "insufficient_balance", msg);
        return false;
    }
    if (rc == ROOMD_EEXPIRED) { /* the wallet confirmed this very gift long ago */
        if (!answer_logged_meanwhile(svc->d.store, cmd, x->reply, &x->tm))
            answer_expired(x->reply, &x->tm, cmd);
        return false;
    }
    if (rc == ROOMD_EREUSED) {
        if (answer_logged_meanwhile(svc->d.store, cmd, x->reply, &x->tm))
            return false;
        snprintf(msg, sizeof(msg),
                 "command_id %s is held by the wallet for a different request, or was "
                 "cancelled after a failed attempt: send the gift with a new command_id",
                 cmd->command_id);
        answer_fail(x->reply, &x->tm, 409, "idempotency_key_reused", msg);
        return false;
    }
    x->held = true; /* from here on, every way out settles the hold */
    if (rc != 0) {
        snprintf(msg, sizeof(msg), "wallet: %s", roomd_strerror(rc));
        answer_fail(x->reply, &x->tm, 503, "unavailable", msg);
        return false; /* settled REFUSED: Cancel, whatever the Try did */
    }
    crash_point("after_try");
    return true;
}

/* Builds what the commit writes into x->m: the log row and its response,
 * the outbox rows (gap-free room_seq), the room's meta row, the snapshot
 * when due, the embedded ledger's debit. Cannot fail. */
static void
stage_mutation(struct exec *x)
{
    const struct conf *conf = x->conf;
    const struct room_cmd *cmd = x->cmd;
    struct cell *c = x->c;
    struct mutation *m = &x->m;
    int64_t t;

    x->obx = xcalloc(x->ev.n ? x->ev.n : 1, sizeof(*x->obx));
    for (size_t i = 0; i < x->ev.n; i++) {
        uuid_v7(x->now, x->obx[i].event_id);
        x->obx[i].event_type = x->ev.v[i].type;
        x->obx[i].payload = x->ev.v[i].payload;
        x->obx[i].payload_len = x->ev.v[i].payload_len;
        x->obx[i].room_seq = c->event_seq + 1 + (int64_t)i; /* gap-free: fenced with the version */
    }
    /* the snapshot, when due, is written inside the commit (its row's time is
     * in save_mutation_ms); the response carries the room's summary (no
     * member or ban list), since every response is stored in the log and is
     * what an idempotent replay answers */
    if (conf->room.snapshot_every_n > 0 && x->clone->version % conf->room.snapshot_every_n == 0) {
        t = clock_mono_us();
        x->snapshot_json = room_state_to_json(x->clone);
        x->tm.snapshot_us = clock_mono_us() - t;
    }
    x->state_json = room_state_to_json_summary(x->clone);
    x->response = build_response(cmd, x->clone, x->obx, x->ev.n, x->state_json);
    x->logged_request = room_logged_request(cmd, c->state, x->clone);
    make_mutation(m, cmd, x->clone, x->now, c->lease_token, x->response);
    if (m->create)
        m->max_owner_rooms = conf->room.max_rooms_per_owner;
    m->request = x->logged_request; /* with "rules" when the room took the configured rules */
    m->events = x->obx;
    m->nevents = x->ev.n;
    m->meta.event_seq = c->event_seq + (int64_t)x->ev.n;
    m->snapshot = x->snapshot_json;
    m->snapshots_keep = conf->room.snapshots_keep;
    /* the embedded ledger: the debit is a statement of this very commit */
    if (cmd->type == CMD_SEND_GIFT && x->svc->d.wallet != NULL &&
        x->svc->d.wallet->ops->attach != NULL) {
        x->svc->d.wallet->ops->attach(x->svc->d.wallet, &x->gift, &x->debit);
        m->debit = &x->debit;
    }
}

/* The answer to a commit that returned rc != 0: the refusal it stands for
 * (reused id, funds, the owner's room limit, a room created meanwhile, the
 * fence, the store). Marks the cell for reload when its state may be stale. */
static void
commit_refused(struct exec *x, int rc)
{
    const struct room_cmd *cmd = x->cmd;
    char msg[320];

    if (rc == ROOMD_EREUSED) {
        answer_reused(x->svc->d.store, x->cmd, x->reply, &x->tm);
    } else if (rc == ROOMD_EEXPIRED) { /* the ledger's debit: paid before, its log row purged */
        answer_expired(x->reply, &x->tm, cmd);
    } else if (rc == ROOMD_EFUNDS) { /* the debit was refused: rolled back alone */
        snprintf(msg, sizeof(msg), "uid %lld cannot pay %lld (balance %lld)", (long long)cmd->uid,
                 (long long)x->debit.amount, (long long)x->debit.balance_after);
        answer_fail(x->reply, &x->tm, 402, "insufficient_balance", msg);
    } else if (rc == ROOMD_ELIMIT) { /* the owner's open rooms, counted in the commit */
        snprintf(msg, sizeof(msg),
                 "owner_uid %lld already holds room.max_rooms_per_owner (%d) open rooms: close "
                 "one first",
                 (long long)cmd->owner_uid, x->conf->room.max_rooms_per_owner);
        answer_fail(x->reply, &x->tm, 429, "too_many_rooms", msg);
        x->reply->retry_after = ROOM_TOO_MANY_RETRY_S;
    } else if (rc == ROOMD_EEXIST) {
        snprintf(msg, sizeof(msg), "room %s already exists", cmd->room_id);
        answer_fail(x->reply, &x->tm, 409, "room_exists", msg);
        x->drop = true; /* someone else created it: reload */
    } else {
        x->drop = rc == ROOMD_EFENCED; /* another owner committed: reload next time */
        log_warn("room", "commit failed", "app=%s room=%s command_id=%s rc=%s err=\"%s\"",
                 cmd->app_code, cmd->room_id, cmd->command_id, roomd_strerror(rc), store_errmsg());
        answer_store_fail(x->reply, &x->tm, rc, "commit");
    }
}

/* Commit (SaveMutation): log row + outbox rows + room meta (+ snapshot, +
 * debit) in one transaction through the group committer; the command_id's
 * unique key is the idempotency check. False: *reply is the answer. */
static bool
stage_commit(struct exec *x)
{
    struct room_service *svc = x->svc;
    int64_t t;
    int rc;

#ifdef ROOMD_TESTING
    /* fault injection: hold the command between its lease check and its
     * commit, so a test can pause this node past its lease right there */
    if (svc->precommit_delay_ms > 0) {
        struct timespec ts = {svc->precommit_delay_ms / 1000,
                              (svc->precommit_delay_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
#endif
    /* a hold older than half of wallet.reconcile_after may meet the
     * reconciler's Cancel: give it up rather than commit an unpaid gift */
    if (x->held && clock_mono_ms() - x->held_at_ms > x->conf->wallet.reconcile_after_ms / 2) {
        answer_fail(x->reply, &x->tm, 503, "unavailable", "wallet: the hold is too old to commit");
        return false;
    }
    /* the outbox hand-off: when this process's outbox queue has room, the
     * rows are inserted already claimed by it and go to its workers right
     * after the commit, with no claim query; else a worker is woken to claim
     * them now, not at its next poll (outbox/handoff.h, docs/outbox.md) */
    outbox_handoff_begin(svc->d.outbox, &x->m);
    crash_point("before_commit");
    t = clock_mono_us();
    rc = commit(svc, &x->m);
    x->tm.save_us = clock_mono_us() - t;
    x->tm.idempotency_us += x->m.log_us; /* the check is the log row's unique key, in the commit */
    x->tm.snapshot_us += x->m.snapshot_us; /* built before, persisted in the commit */
    if (x->m.debit != NULL)
        x->tm.wallet_us = x->m.debit_us; /* inside save_mutation_ms */
    if (rc == 0)
        crash_point("after_commit");
    outbox_handoff_end(svc->d.outbox, &x->m, rc);
    if (rc != 0)
        commit_refused(x, rc); /* the clone is dropped by stage_answer */
    return rc == 0;
}

/* Committed: settles the hold, swaps the clone in, updates the projection
 * (best effort), schedules the rocket wake-up, and answers 200. */
static void
stage_swap(struct exec *x)
{
    struct room_service *svc = x->svc;
    const struct room_cmd *cmd = x->cmd;
    struct cell *c = x->c;
    int64_t t;
    int rc;

    if (x->held) {
        svc->d.wallet->ops->settle(svc->d.wallet, &x->gift, WALLET_COMMITTED);
        x->held = false;
    }
    room_state_free(c->state);
    c->state = x->clone;
    x->clone = NULL;
    c->event_seq = x->m.meta.event_seq;
    x->committed = true;
    answer_async_sinks(x->conf, x->ev.n > 0, &x->tm);
    x->created = cmd->type == CMD_CREATE_ROOM;
    if (svc->d.projection != NULL) {
        t = clock_mono_us();
        rc = room_state_update_projection(svc->d.projection, c->state);
        x->tm.projection_us = clock_mono_us() - t;
        if (rc != 0)
            log_warn("room", "projection update failed", "app=%s room=%s rc=%s", cmd->app_code,
                     cmd->room_id, roomd_strerror(rc));
    }
    /* no broker: wake ourselves at launch_at_ms */
    if (svc->timer != NULL)
        for (size_t i = 0; i < x->ev.n; i++)
            if (strcmp(x->ev.v[i].type, "RoomRocketIgnited") == 0)
                rocket_timer_schedule(svc->timer, cmd->app_code, cmd->room_id,
                                      c->state->rocket.rocket_id, c->state->rocket.level,
                                      c->state->rocket.launch_at_ms);
    x->reply->status = 200;
    x->reply->body = x->response;
    x->response = NULL;
}

/* Answer: settles a hold left open (from the log), gives the room's turn
 * back, runs CreateRoom's IM hook outside the turn, logs the timing line,
 * frees the command's working state. *reply is final afterwards. */
static void
stage_answer(struct exec *x)
{
    struct room_service *svc = x->svc;
    const struct room_cmd *cmd = x->cmd;
    int64_t t;
    int rc;

    /* a hold whose gift did not commit (here or, for a concurrent twin,
     * under the same key) is given back; the log tells which */
    if (x->held)
        svc->d.wallet->ops->settle(svc->d.wallet, &x->gift, answer_gift_outcome(svc->d.store, cmd));
    if (x->c != NULL) {
        presence_after_command(svc->cells, x->c, cmd, x->committed);
        cell_release(svc->cells, x->c, x->drop);
    }
    /* CreateRoom: the synchronous IM group, outside the room's turn; never fails the command */
    if (x->created && svc->d.create_hook != NULL) {
        t = clock_mono_us();
        rc = svc->d.create_hook(svc->d.create_hook_arg, cmd->app_code, cmd->room_id, cmd->title,
                                cmd->owner_uid);
        x->tm.im_us = clock_mono_us() - t;
        if (rc != 0)
            log_warn("room", "create hook failed", "app=%s room=%s rc=%s", cmd->app_code,
                     cmd->room_id, roomd_strerror(rc));
    }
    answer_log_timing(cmd, x->reply, &x->tm);
    room_state_free(x->clone);
    room_events_clear(&x->ev);
    free(x->obx);
    free(x->state_json);
    free(x->snapshot_json);
    free(x->response);
    free(x->logged_request);
}

void
room_service_execute(struct room_service *svc, const struct room_cmd *cmd, struct room_reply *reply)
{
    room_service_execute_from(svc, cmd, NULL, reply);
}

/* The command path, top-down: parse and authorize happened in the caller
 * (room_cmd_parse*, auth_may_act_as); idempotency has no stage of its own
 * (the commit's unique key, answer_logged_meanwhile before a refusal). */
void
room_service_execute_from(struct room_service *svc, const struct room_cmd *cmd,
                          const struct room_origin *origin, struct room_reply *reply)
{
    struct exec x;

    memset(&x, 0, sizeof(x));
    memset(reply, 0, sizeof(*reply));
    x.svc = svc;
    x.conf = svc->d.conf;
    x.cmd = cmd;
    x.origin = origin;
    x.reply = reply;
    x.tm.t0 = clock_mono_us();
    strlcpy_(x.tm.result, "ok", sizeof(x.tm.result));
    if (stage_turn(&x) && stage_price(&x) && stage_apply(&x) && stage_wallet_hold(&x)) {
        stage_mutation(&x);
        if (stage_commit(&x))
            stage_swap(&x);
    }
    stage_answer(&x);
}

/* ---- reads, lifetime ----------------------------------------------------------------- */

void
room_service_get(struct room_service *svc, const char *app, const char *room_id,
                 const struct room_origin *origin, struct room_reply *reply)
{
    struct cell *c;
    char msg[160];

    memset(reply, 0, sizeof(*reply));
    if ((c = acquire_or_answer(svc, app, room_id, origin, reply)) == NULL)
        return;
    if (c->state == NULL) {
        snprintf(msg, sizeof(msg), "room %s does not exist", room_id);
        room_reply_error(reply, 404, "not_found", msg);
    } else {
        reply->status = 200;
        reply->body = room_state_to_json(c->state);
    }
    cell_release(svc->cells, c, false);
}

/* A heartbeat (expire_ms 0) or an expiry (expire_ms = the timeout) of uid. */
static void
presence_op(struct room_service *svc, const char *app, const char *room_id, int64_t uid,
            int64_t expire_ms, const struct room_origin *origin, struct room_reply *reply)
{
    struct cell *c;
    char msg[160];
    int rc;

    memset(reply, 0, sizeof(*reply));
    atomic_fetch_add(&svc->heartbeats, 1);
    rc = presence_heartbeat_fast(svc->cells, app, room_id, uid, expire_ms);
    if (rc < 0) { /* not known here: the room's turn (lease, load, or the owner) */
        atomic_fetch_add(&svc->heartbeats_slow, 1);
        if ((c = acquire_or_answer(svc, app, room_id, origin, reply)) == NULL)
            return;
        rc = c->state == NULL ? -1 : presence_touch(svc->cells, c, uid, expire_ms) ? 1 : 0;
        cell_release(svc->cells, c, false);
    }
    if (rc < 0) {
        snprintf(msg, sizeof(msg), "room %s does not exist", room_id);
        room_reply_error(reply, 404, "not_found", msg);
    } else if (rc == 0) {
        snprintf(msg, sizeof(msg), "uid %lld is not a member", (long long)uid);
        room_reply_error(reply, 409, "not_member", msg);
    } else {
        reply->status = 200;
        reply->body =
            xasprintf("{\"idle_timeout_ms\":%lld,\"room_id\":\"%s\",\"uid\":%lld}",
                      (long long)svc->d.conf->room.member_idle_timeout_ms, room_id, (long long)uid);
    }
}

void
room_service_heartbeat(struct room_service *svc, const char *app, const char *room_id, int64_t uid,
                       const struct room_origin *origin, struct room_reply *reply)
{
    presence_op(svc, app, room_id, uid, 0, origin, reply);
}

void
room_service_presence_expire(struct room_service *svc, const char *app, const char *room_id,
                             int64_t uid, const struct room_origin *origin,
                             struct room_reply *reply)
{
    int64_t t = svc->d.conf->room.member_idle_timeout_ms;

    presence_op(svc, app, room_id, uid, t > 0 ? t : 0, origin, reply);
}

void
room_service_presence_counts(struct room_service *svc, uint64_t *heartbeats, uint64_t *slow,
                             uint64_t *idle_sent, uint64_t *idle_left)
{
    *heartbeats = atomic_load(&svc->heartbeats);
    *slow = atomic_load(&svc->heartbeats_slow);
    presence_sweeper_counts(svc->presence, idle_sent, idle_left);
}

/* The /metrics lines of presence (docs/metrics.md). */
static void
presence_collect(void *arg, struct metrics_text *t)
{
    struct room_service *svc = arg;
    uint64_t hb, slow, sent, left;

    room_service_presence_counts(svc, &hb, &slow, &sent, &left);
    metrics_counter(t, "roomd_heartbeats_total",
                    "heartbeats answered (POST /v1/rooms/{id}/heartbeat)", hb);
    metrics_counter(t, "roomd_heartbeats_slow_total",
                    "heartbeats that took the room's turn (load, lease renewal, forward)", slow);
    metrics_family(t, "roomd_idle_leaves_total", "counter",
                   "LeaveRooms of silent members: sent, and left (committed or replayed)");
    metrics_count(t, "roomd_idle_leaves_total", "result=\"sent\"", sent);
    metrics_count(t, "roomd_idle_leaves_total", "result=\"left\"", left);
}

size_t
room_service_cells(struct room_service *svc)
{
    return cell_map_count(svc->cells);
}

int
room_service_open(struct room_service **out, const struct room_deps *deps)
{
    struct room_service *svc = xcalloc(1, sizeof(*svc));
    struct rocket_pending *rp = NULL;
    size_t n = 0;
    int rc;

    *out = NULL;
    svc->d = *deps;
    metrics_command_names(room_cmd_names(), CMD_COUNT_);
    if ((rc = cell_map_open(&svc->cells, deps->conf, deps->store, deps->lease)) != 0)
        goto fail;
    if ((rc = presence_sweeper_open(&svc->presence, svc, svc->cells,
                                    deps->conf->room.member_idle_timeout_ms,
                                    deps->conf->lease.renew_every_ms)) != 0)
        goto fail;
    svc->collecting = metrics_add_collector(presence_collect, svc) == 0;
    if (deps->rocket_timer) {
        if ((rc = rocket_timer_open(&svc->timer, svc)) != 0)
            goto fail;
        rc = store_rockets_pending(deps->store, &rp, &n);
        if (rc != 0) {
            log_warn("room", "rocket timer rebuild failed", "rc=%s err=\"%s\"", roomd_strerror(rc),
                     store_errmsg());
        } else {
            for (size_t i = 0; i < n; i++)
                rocket_timer_schedule(svc->timer, rp[i].app_code, rp[i].room_id, rp[i].rocket_id,
                                      rp[i].level, rp[i].launch_at_ms);
            if (n > 0)
                log_info("room", "rocket timer rebuilt", "pending=%zu", n);
        }
        free(rp);
    }
    if (deps->projection_rebuild && deps->projection != NULL &&
        (rc = room_rebuild_start(&svc->rebuild, deps->conf, deps->store, deps->projection)) != 0)
        goto fail;
#ifdef ROOMD_TESTING
    const char *delay = getenv("ROOMD_TEST_PRECOMMIT_DELAY_MS");
    if (delay != NULL && atoll(delay) > 0) {
        svc->precommit_delay_ms = atoll(delay);
        log_warn("room", "test hook: commits delayed", "ms=%lld",
                 (long long)svc->precommit_delay_ms);
    }
#endif
    *out = svc;
    return 0;
fail:
    room_service_close(svc);
    return rc;
}

void
room_service_close(struct room_service *svc)
{
    if (svc == NULL)
        return;
    if (svc->collecting)
        metrics_remove_collector(presence_collect, svc);
    presence_sweeper_close(svc->presence);
    room_rebuild_stop(svc->rebuild);
    rocket_timer_close(svc->timer);
    cell_map_close(svc->cells);
    free(svc);
}

size_t
room_service_rockets_pending(struct room_service *svc)
{
    return svc->timer != NULL ? rocket_timer_pending(svc->timer) : 0;
}
