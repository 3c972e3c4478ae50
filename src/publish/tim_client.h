/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tim_client.h: a Tencent Cloud IM REST client (shared/design/tencent-im-rest.md)
 * over libcurl, and the IM actions of one room event. Used by the direct IM
 * sink (sink_tim.c), CreateRoom's synchronous group creation (tim_create_hook)
 * and the broker's IM bridge and notice consumers.
 *
 * Read tim_client.c (transport, UserSig, error classes), then tim_events.c
 * (event -> IM calls; the table is in docs/direct.md).
 *
 * Every call returns 0, ROOMD_ERETRY (transient: retry later), ROOMD_EPERM
 * (permanent: retrying cannot help), ROOMD_EUNAVAIL (no answer) or
 * ROOMD_ELIMIT (IM's rate limit, or no slot of roomd's own token buckets,
 * until the deadline: an outage, never the event's fault) and writes a
 * one-line reason into err
 * ("tim 10010: group not found (send_group_msg)"); never the secret key.
 * Thread: any, all at once (one curl handle per concurrent caller from a pool).
 * Blocks: each HTTP request at most min(tencent_im.timeout, deadline - now).
 */
#ifndef ROOMD_TIM_CLIENT_H
#define ROOMD_TIM_CLIENT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct conf_tencent_im;
struct outbox_event;
struct tim_client;

/* IM group IDs are at most 48 bytes (doc §3). */
#define TIM_GROUP_ID_MAX 49

/* The error classes of doc §4. */
enum tim_class {
    TIM_CLASS_OK = 0,
    TIM_CLASS_RETRY,   /* rate limits, timeouts, internal errors */
    TIM_CLASS_RESIG,   /* regenerate the UserSig, retry once */
    TIM_CLASS_PERM,    /* malformed, permission, missing group/account, quotas, content */
    TIM_CLASS_UNKNOWN, /* a code the doc does not list; treated as RETRY */
};

/* Returns the class of an IM ErrorCode (0 = OK). Thread: any. */
enum tim_class tim_classify(int error_code);

/*
 * Opens a client for cfg (copied). Reads the secret key from the environment
 * variable cfg->secret_key_env, else from the file cfg->secret_key_file.
 * Returns 0 and *out, or ROOMD_EINVAL with err naming the key at fault.
 * Calls curl_global_init the first time (do it before starting threads).
 * Thread: main. Never does network I/O.
 */
int tim_client_open(struct tim_client **out, const struct conf_tencent_im *cfg, char *err,
                    size_t errlen);
/* Frees c. No call may be in flight. tim_client_close(NULL) is a no-op. */
void tim_client_close(struct tim_client *c);

/*
 * The HTTP exchange under the client: one POST of a JSON body, the status and
 * body of the answer back. libcurl is the default (tim_client_open); the
 * fuzzer (fuzz/fuzz_tim.c) puts its own answers here. post sends body
 * (borrowed) to url (borrowed; it holds the UserSig: never log it) and waits
 * at most timeout_ms. Returns 0 with *status and *resp (malloc'd and
 * NUL-terminated, the caller frees it; NULL for no body), or ROOMD_EUNAVAIL
 * when there was no answer (connection, timeout, too big) with a one-line
 * reason in why (no url in it). Thread: any, all at once; blocks.
 */
struct tim_exchange {
    int (*post)(void *arg, const char *url, const char *body, int64_t timeout_ms, long *status,
                char **resp, char *why, size_t whylen);
    void *arg; /* borrowed; must outlive the client */
};
/* Replaces c's exchange with *x (copied). Thread: the opener, before any
 * call on c. */
void tim_client_set_exchange(struct tim_client *c, const struct tim_exchange *x);

/* The configured group type, normalized: "AVChatRoom", "Public", "ChatRoom",
 * "Private" or "Community". Static string. */
const char *tim_client_group_type(const struct tim_client *c);
/* tencent_im.timeout in ms (per HTTP request). */
int64_t tim_client_timeout_ms(const struct tim_client *c);

/*
 * One REST call: POST {base_url}/v4/{api}?sdkappid..&usersig.. with body req
 * (borrowed). api is "group_open_http_svc/create_group" and the like.
 * On an HTTP 200 with a JSON body, *resp (may be NULL) gets the body (caller
 * json_decref's it) also when ErrorCode != 0. *im_code (may be NULL) gets
 * ErrorCode, or -1 when there was no IM answer (network, timeout, non-200).
 * A UserSig error (class RESIG) regenerates the sig (re-reading the key) and
 * retries once. Each call first waits for its slot in the process' token
 * buckets (tim_limit.h); IM's rate-limit answers (its frequency-control
 * codes, HTTP 429) are waited out and sent again within the deadline.
 * Returns 0 when ErrorCode == 0, ROOMD_EUNAVAIL when IM did not answer
 * (transport, deadline), ROOMD_ELIMIT when IM still rate-limited the call at
 * the deadline or no bucket slot came in time, else ROOMD_ERETRY or
 * ROOMD_EPERM by tim_classify (UNKNOWN -> ERETRY).
 */
int tim_client_call(struct tim_client *c, const char *api, json_t *req, int64_t deadline_mono_ms,
                    json_t **resp, int *im_code, char *err, size_t errlen);

/* True when IM answered a call of this process (any client) with its rate
 * limit within the last within_ms: the probes then report an outage. Thread:
 * any; never blocks. */
bool tim_client_rate_limited(const struct tim_client *c, int64_t within_ms);
/* The moving average of c's HTTP exchanges that were answered, in ms (0
 * before the first). Thread: any; never blocks. */
int64_t tim_client_latency_ms(struct tim_client *c);
/* The process' IM token buckets c uses (tim_limit.h; borrowed: valid while c
 * is open). Thread: any; never blocks. */
struct tim_limit *tim_client_limit(const struct tim_client *c);

/* The IM GroupId of a room: "{app}_{room_id}", or "r_" + 46 hex digits of its
 * SHA-256 when that would exceed 48 bytes. Writes into out (TIM_GROUP_ID_MAX). */
void tim_group_id(const char *app, const char *room_id, char *out, size_t outlen);

/* The u32 a group message's Random (or a C2C MsgRandom, which == 0) is derived
 * from: the first 4 bytes (which == 1: the next 4) of SHA-256(id), big endian. */
uint32_t tim_derive_u32(const char *id, int which);

/* ---- group and message calls (deadline is clock_mono_ms) -------------------- */

/* EnsureGroup: create_group with the configured type; 10021/10025 ("exists")
 * are confirmed with get_group_info (its Type must match: else ROOMD_EPERM).
 * name is cut to 30 bytes (UTF-8 safe); empty -> room_id. */
int tim_ensure_group(struct tim_client *c, const char *group_id, const char *name, int64_t deadline,
                     char *err, size_t errlen);
/* get_group_info of one group: *type (buffer >= 16) gets its Type. Returns 0,
 * ROOMD_ENOTFOUND (10010/10015 for the item), ROOMD_ERETRY or ROOMD_EPERM. */
int tim_group_type(struct tim_client *c, const char *group_id, char *type, size_t typelen,
                   int64_t deadline, char *err, size_t errlen);
/* destroy_group; 10010/10015 (already gone) count as success. */
int tim_destroy_group(struct tim_client *c, const char *group_id, int64_t deadline, char *err,
                      size_t errlen);
/* send_group_msg with one TIMCustomElem {Data: data, Desc: desc}, Random =
 * tim_derive_u32(dedupe_id, 0) so a retry is discarded by IM as a duplicate,
 * MsgPriority priority ("High", "Normal", "Low"). data must be < 8000 bytes
 * (else ROOMD_EPERM). *im_code as in tim_client_call. */
int tim_send_group_custom(struct tim_client *c, const char *group_id, const char *data,
                          const char *desc, const char *dedupe_id, const char *priority,
                          int64_t deadline, int *im_code, char *err, size_t errlen);
/* add_group_member (Silence 1); 10013 (already a member) and Result 2 count
 * as success. Not for AVChatRoom (IM answers 10007). */
int tim_add_member(struct tim_client *c, const char *group_id, const char *account,
                   int64_t deadline, int *im_code, char *err, size_t errlen);
/* add_group_member of accounts[0..n) in one call (Silence 1): results[i]
 * gets 0, or ROOMD_ERETRY when IM's MemberList says Result 0 for it (err
 * names the last such). Returns the call's rc (10013 counts as success).
 * Tencent takes up to 300 accounts a call; the sink sends at most 100.
 * accounts stay the caller's. Thread: any; blocks on the call, at most until
 * deadline. */
int tim_add_members(struct tim_client *c, const char *group_id, const char *const *accounts,
                    size_t n, int *results, int64_t deadline, int *im_code, char *err,
                    size_t errlen);
/* delete_group_member of accounts[0..n) (at most 100) in one call (Silence
 * 1, Reason reason); non-members count as success. Returns as
 * tim_client_call. Thread: any; blocks at most until deadline. */
int tim_delete_members(struct tim_client *c, const char *group_id, const char *const *accounts,
                       size_t n, const char *reason, int64_t deadline, int *im_code, char *err,
                       size_t errlen);
/* delete_group_member (Silence 1, Reason). Not for AVChatRoom (10004). */
int tim_delete_member(struct tim_client *c, const char *group_id, const char *account,
                      const char *reason, int64_t deadline, int *im_code, char *err, size_t errlen);
/* forbid_send_msg: mutes account for seconds (0 unmutes). */
int tim_mute_member(struct tim_client *c, const char *group_id, const char *account,
                    int64_t seconds, int64_t deadline, char *err, size_t errlen);
/* ban_group_member (AVChatRoom): account cannot receive nor rejoin for seconds. */
int tim_ban_member(struct tim_client *c, const char *group_id, const char *account, int64_t seconds,
                   const char *description, int64_t deadline, int *im_code, char *err,
                   size_t errlen);
/* openim/sendmsg (C2C) from the admin to to_account: one TIMCustomElem with
 * data; MsgRandom and MsgSeq derived from notice_id (IM drops a resend within
 * 120 s as a duplicate); SyncOtherMachine 2; MsgLifeTime lifetime_s (0 =
 * online only, <= 604800). */
int tim_send_c2c(struct tim_client *c, const char *to_account, const char *data, const char *desc,
                 const char *notice_id, int64_t lifetime_s, int64_t deadline, char *err,
                 size_t errlen);

/* ---- room events (tim_events.c) ------------------------------------------------ */

/*
 * Performs the IM actions of one room event (table in docs/direct.md):
 * envelope is a packed roomd.v1.RoomOutboxEvent; json is the event as JSON
 * (the message Data; NULL = built here from the envelope). Returns 0,
 * ROOMD_ERETRY, ROOMD_EUNAVAIL, ROOMD_ELIMIT or ROOMD_EPERM (with err) as
 * tim_client_call. Idempotent: a
 * retry of a partly done event redoes only harmless steps.
 */
int tim_client_deliver(struct tim_client *c, const uint8_t *envelope, size_t envelope_len,
                       const char *json, int64_t deadline_mono_ms, char *err, size_t errlen);
/* tim_client_deliver with flags: TIM_DELIVER_NO_MESSAGE makes only the
 * event's membership calls (add/delete member of a non-AVChatRoom group;
 * none for an AVChatRoom), not its group message: the direct IM sink's
 * coalesced state message covers it (sink_tim.c). Same returns, threads
 * and blocking. */
#define TIM_DELIVER_NO_MESSAGE 1u
int tim_client_deliver_flags(struct tim_client *c, const uint8_t *envelope, size_t envelope_len,
                             const char *json, unsigned flags, int64_t deadline_mono_ms, char *err,
                             size_t errlen);
/* The same for an outbox event as the sinks see it. */
int tim_client_deliver_event(struct tim_client *c, const struct outbox_event *ev,
                             int64_t deadline_mono_ms, char *err, size_t errlen);

/*
 * CreateRoom's synchronous side call (room_create_hook in room/service.h;
 * arg = the struct tim_client): EnsureGroup bounded by tencent_im.timeout.
 * Returns 0 or an error (logged); the command succeeds either way.
 */
int tim_create_hook(void *arg, const char *app, const char *room_id, const char *title,
                    int64_t owner_uid);

#endif
