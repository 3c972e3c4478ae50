/* SPDX-License-Identifier: Apache-2.0 */
/*
 * answer.c: the answers of the command path (answer.h), split out of
 * service.c: the replies (room_reply_* of service.h, answer_fail), the
 * answers from the command log that make a command idempotent, and the
 * room_command_timing line. service.c's stages call these; none takes a
 * room's turn or changes its state.
 */
#include "room/answer.h"

#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/xmalloc.h"
#include "store/store.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- replies ------------------------------------------------------------------------ */

void
room_reply_clear(struct room_reply *r)
{
    free(r->body);
    memset(r, 0, sizeof(*r));
}

void
room_reply_error(struct room_reply *r, int status, const char *code, const char *message)
{
    json_t *o = json_pack("{s:{s:s, s:s}}", "error", "code", code, "message", message);

    if (r->owner[0] != '\0') /* not_owner: where the room lives */
        json_object_set_new(json_object_get(o, "error"), "owner", json_string(r->owner));
    free(r->body);
    r->status = status;
    r->body = json_dumps(o, JSON_SORT_KEYS | JSON_COMPACT);
    json_decref(o);
    if (r->body == NULL)
        abort();
}

/* An error reply whose result (timing log) is its code. */
void
answer_fail(struct room_reply *r, struct timing *tm, int status, const char *code,
            const char *message)
{
    room_reply_error(r, status, code, message);
    strlcpy_(tm->result, code, sizeof(tm->result));
}

/* The reply for a store failure rc (503 unless it is a bug). */
void
answer_store_fail(struct room_reply *r, struct timing *tm, int rc, const char *what)
{
    char msg[256];

    snprintf(msg, sizeof(msg), "%s: %s", what, roomd_strerror(rc));
    answer_fail(r, tm, rc == ROOMD_EINTERNAL ? 500 : 503,
                rc == ROOMD_EINTERNAL                          ? "internal"
                : rc == ROOMD_EFENCED || rc == ROOMD_ENOTOWNER ? roomd_err_code(rc)
                                                               : "unavailable",
                msg);
}

/* ---- idempotency --------------------------------------------------------------------- */

/* True when the stored request is the same command as cmd. The "rules" a
 * row recorded (room_logged_request) are not part of the request. A create
 * whose room_id was generated compares with the stored room_id put in,
 * since a retry cannot repeat an id it never chose. */
bool
answer_same_request(const struct room_cmd *cmd, const char *stored)
{
    json_t *o;
    char *text;
    bool same;

    if (stored == NULL)
        return false;
    if (strcmp(cmd->request, stored) == 0)
        return true;
    if ((o = json_loads(stored, 0, NULL)) == NULL)
        return false;
    json_object_del(o, "rules");
    json_object_del(o, "catalog");
    if (cmd->room_id_generated)
        json_object_set_new(o, "room_id", json_string(cmd->room_id));
    text = json_dumps(o, JSON_SORT_KEYS | JSON_COMPACT);
    json_decref(o);
    same = text != NULL && strcmp(text, cmd->request) == 0;
    free(text);
    return same;
}

/* Answers a command whose command_id is already in the log. */
void
answer_logged(struct room_reply *r, struct timing *tm, const struct room_cmd *cmd,
              const struct command_record *rec)
{
    char msg[256];

    if (answer_same_request(cmd, rec->request) && rec->response != NULL) {
        free(r->body);
        r->status = 200;
        r->body = xstrdup(rec->response);
        r->replay = true;
        strlcpy_(tm->result, "replay", sizeof(tm->result));
        return;
    }
    snprintf(msg, sizeof(msg), "command_id %s was already used for a different request",
             cmd->command_id);
    answer_fail(r, tm, 409, "idempotency_key_reused", msg);
}

/* A gift whose command_id committed and was paid before, and whose command
 * log row was purged since (store.retention.command_log_max_age): its
 * answer is gone, and the wallet's record of it refuses a second gift. */
void
answer_expired(struct room_reply *r, struct timing *tm, const struct room_cmd *cmd)
{
    char msg[320];

    snprintf(msg, sizeof(msg),
             "command_id %s was committed and paid before and is past the idempotency window "
             "(store.retention.command_log_max_age): send a new gift with a new command_id",
             cmd->command_id);
    answer_fail(r, tm, 410, "command_id_expired", msg);
}

/* Before refusing a command, or making an effect outside the store (the
 * remote wallet's Try): if its command_id is in the log (a retry of a
 * committed command, or a concurrent twin that committed while it waited for
 * the room), answer from the log instead. Returns true when *r was filled
 * that way; a failed lookup counts as not found (the commit's unique key
 * still refuses a reused id). Adds the lookup's time to tm->idempotency_us. */
bool
answer_logged_meanwhile(struct store *store, const struct room_cmd *cmd, struct room_reply *r,
                        struct timing *tm)
{
    struct command_record rec;
    int64_t t = clock_mono_us();
    bool found;

    memset(&rec, 0, sizeof(rec));
    found = store_find_command(store, cmd->app_code, cmd->command_id, &rec) == 0;
    tm->idempotency_us += clock_mono_us() - t;
    if (found)
        answer_logged(r, tm, cmd, &rec);
    command_record_clear(&rec);
    return found;
}

/* Idempotency after the commit's unique key refused the command_id (a retry
 * of a committed command, a concurrent twin, or another request under the
 * same id): answers from the log. Nothing of this attempt stands. */
void
answer_reused(struct store *store, const struct room_cmd *cmd, struct room_reply *r,
              struct timing *tm)
{
    struct command_record rec;
    char msg[256];
    int64_t t = clock_mono_us();
    int lr;

    memset(&rec, 0, sizeof(rec));
    lr = store_find_command(store, cmd->app_code, cmd->command_id, &rec);
    tm->idempotency_us += clock_mono_us() - t;
    if (lr == ROOMD_ENOTFOUND) { /* the ledger holds another debit under this id */
        snprintf(msg, sizeof(msg), "command_id %s was already used for a different request",
                 cmd->command_id);
        answer_fail(r, tm, 409, "idempotency_key_reused", msg);
    } else if (lr != 0) {
        answer_store_fail(r, tm, lr, "idempotency check");
    } else {
        answer_logged(r, tm, cmd, &rec); /* ours only when it is this very gift */
    }
    command_record_clear(&rec);
}

/* How a gift whose commit did not succeed ended, from the log (the
 * authority): its own row -> committed; no row or another request's ->
 * refused; the store cannot tell -> unknown (the reconciler decides). */
enum wallet_outcome
answer_gift_outcome(struct store *store, const struct room_cmd *cmd)
{
    struct command_record rec;
    enum wallet_outcome o;
    int rc;

    memset(&rec, 0, sizeof(rec));
    rc = store_find_command(store, cmd->app_code, cmd->command_id, &rec);
    if (rc == ROOMD_ENOTFOUND)
        o = WALLET_REFUSED;
    else if (rc != 0)
        o = WALLET_UNKNOWN;
    else
        o = rec.command_type != NULL && strcmp(rec.command_type, "SendGift") == 0 &&
                    answer_same_request(cmd, rec.request)
                ? WALLET_COMMITTED
                : WALLET_REFUSED;
    command_record_clear(&rec);
    return o;
}

/* ---- the timing line -------------------------------------------------------------- */

/* The *_async_outbox flags of a command that wrote outbox rows (any): true
 * for a sink that delivers them in this publish mode: the direct sink when
 * enabled (direct, dual), the broker's consumer group (mq, dual: the
 * activity group always consumes the topic; IM only with the IM bridge). */
void
answer_async_sinks(const struct conf *conf, bool any, struct timing *tm)
{
    enum publish_mode mode = conf->outbox_worker.publish_mode;
    bool direct = conf->outbox_worker.enabled && mode != PUBLISH_MQ;
    bool mq = conf->outbox_worker.enabled && mode != PUBLISH_DIRECT;

    tm->activity_async = any && ((direct && conf->activity.enabled) || mq);
    tm->im_async = any && ((direct && conf->tencent_im.enabled) ||
                           (mq && conf->rocketmq.room_outbox.tencent_im_consumer_enabled));
}

static double
ms(int64_t us)
{
    return (double)us / 1000.0;
}

/* Writes the room_command_timing line (ARCHITECTURE §9) with snprintf, not
 * through a JSON library: it is written for every command, and jansson's
 * pack + dump of it was ~9% of roomd's CPU (bench/README.md). Every string
 * in it is a constant, an error code or an identifier room_cmd_parse checked
 * ([A-Za-z0-9_.:-]), so none needs escaping. */
void
answer_log_timing(const struct room_cmd *cmd, const struct room_reply *r, const struct timing *tm)
{
    if (!log_enabled(LOG_INFO))
        return;
    json_t *o = json_pack(
        "{s:s, s:s, s:s, s:s, s:s, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:b, "
        "s:b, s:b}",
        "command", room_cmd_name(cmd->type), "app_code", cmd->app_code, "room_id", cmd->room_id,
        "command_id", cmd->command_id, "result", tm->result, "status", r->status, "total_ms",
        ms(clock_mono_us() - tm->t0), "idempotency_ms", ms(tm->idempotency_us), "lease_ms",
        ms(tm->lease_us), "wallet_debit_ms", ms(tm->wallet_us), "save_mutation_ms", ms(tm->save_us),
        "snapshot_ms", ms(tm->snapshot_us), "projection_ms", ms(tm->projection_us), "forward_ms",
        ms(tm->forward_us), "activity_ms", 0.0, "tencent_im_ms", ms(tm->im_us),
        "activity_async_outbox", tm->activity_async, "tencent_im_async_outbox", tm->im_async,
        "forwarded", tm->forwarded);
    if (o != NULL)
        log_fields(LOG_INFO, "room", "room_command_timing", o);
}
