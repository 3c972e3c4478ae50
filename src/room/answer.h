/* SPDX-License-Identifier: Apache-2.0 */
/*
 * answer.h: private to src/room. How the command path (service.c) answers:
 * an error reply whose code is the timing line's result, the answers taken
 * from the command log (idempotency: a retry, a reused or expired
 * command_id, how a gift that did not commit ended), and the
 * room_command_timing line (ARCHITECTURE §9) every command ends with.
 */
#ifndef ROOMD_ROOM_ANSWER_H
#define ROOMD_ROOM_ANSWER_H

#include "room/service.h"
#include "wallet/wallet.h"

#include <stdbool.h>
#include <stdint.h>

struct conf;
struct store;
struct command_record;

/* Stage durations of one command (µs) for the timing line. */
struct timing {
    int64_t t0;
    int64_t idempotency_us, lease_us, wallet_us, save_us, snapshot_us, projection_us, im_us;
    int64_t forward_us; /* sending the request to the room's owner */
    /* the command wrote outbox rows that the activity / the IM sink of the
     * publish mode delivers (seed 阶段耗时日志: *_async_outbox) */
    bool activity_async, im_async;
    bool forwarded;  /* this node sent the command to its owner, which logs its own line */
    char result[64]; /* "ok", "replay", or the error code */
};

/* An error reply whose result (timing log) is its code. */
void answer_fail(struct room_reply *r, struct timing *tm, int status, const char *code,
                 const char *message);
/* The reply for a store failure rc (503 unless it is a bug); what names the step. */
void answer_store_fail(struct room_reply *r, struct timing *tm, int rc, const char *what);

/* True when the stored request is the same command as cmd (the "rules" a
 * row recorded aside; a generated room_id put in). */
bool answer_same_request(const struct room_cmd *cmd, const char *stored);
/* Answers a command whose command_id is already in the log (rec): the
 * stored response (a replay) or 409 idempotency_key_reused. */
void answer_logged(struct room_reply *r, struct timing *tm, const struct room_cmd *cmd,
                   const struct command_record *rec);
/* 410 command_id_expired: a gift paid before whose log row was purged. */
void answer_expired(struct room_reply *r, struct timing *tm, const struct room_cmd *cmd);
/* Before a refusal or an effect outside the store: true with *r answered
 * from the log when cmd's command_id is in it (a failed lookup counts as
 * not found). Adds the lookup's time to tm->idempotency_us. */
bool answer_logged_meanwhile(struct store *store, const struct room_cmd *cmd, struct room_reply *r,
                             struct timing *tm);
/* After the commit's unique key refused the command_id (EREUSED): answers
 * from the log. */
void answer_reused(struct store *store, const struct room_cmd *cmd, struct room_reply *r,
                   struct timing *tm);
/* How a gift whose commit did not succeed ended, from the log. */
enum wallet_outcome answer_gift_outcome(struct store *store, const struct room_cmd *cmd);

/* Sets tm's *_async_outbox flags of a command that wrote outbox rows (any). */
void answer_async_sinks(const struct conf *conf, bool any, struct timing *tm);
/* Writes the room_command_timing line (at LOG_INFO). */
void answer_log_timing(const struct room_cmd *cmd, const struct room_reply *r,
                       const struct timing *tm);

#endif
