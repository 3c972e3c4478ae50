/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sink_tim.c: the direct Tencent IM sink. publish() is
 * tim_client_deliver_event() (tim_events.c), whose 0 / ROOMD_ERETRY /
 * ROOMD_EPERM and "tim <code>: ..." reason go straight to the worker, so a
 * permanent IM error fails the row on its first attempt. IM's rate limit
 * (ROOMD_ELIMIT from the client) goes to the worker as it is: the sink
 * interface's "throttled" (sink.h: retried after a delay, no attempt
 * counted, the circuit not fed), and the sink's probe says "no answer"
 * while IM rate-limits roomd (docs/direct.md, "Rate limits").
 *
 * With tencent_im.coalesce_after > 0 the sink also takes the worker's
 * batches (publish_batch): per IM group, when the batch's messages plus the
 * ones already waiting for the group's slot would not all go out within
 * coalesce_after at tencent_im.group_rate_limit_per_s, each run of
 * consecutive state events of the group (a join, a leave, a mic change: the
 * member count, member list and seat map they carry are superseded by the
 * next) is sent as one RoomStateCoalesced message with the run's latest
 * state and the room_seq range it covers. Every other event (gifts, kicks,
 * rockets, create/close) keeps its own message, in order. A covered row is
 * delivered only when its own membership calls and the covering message
 * were answered OK (at least once: else all of the run is retried).
 */
#include "publish/sink_tim.h"

#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/xmalloc.h"
#include "metrics/metrics.h"
#include "publish/sink.h"
#include "publish/tim_client.h"
#include "publish/tim_limit.h"
#include "room_events.pb-c.h"
#include "store/store.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How far back a rate-limit answer makes the probe report an outage. */
#define RATE_LIMITED_MS 1000
/* At most this many events in one coalesced message (its Data stays well
 * below IM's 8000 bytes: about 25 bytes per member or seat). */
#define RUN_MAX 200

/* The state events that may be coalesced (their kinds). */
enum kind { K_NONE = -1, K_JOINED, K_LEFT, K_MIC, K_COUNT };
static const char *const kind_names[K_COUNT] = {"RoomUserJoined", "RoomUserLeft", "RoomMicChanged"};

struct sink_tim {
    struct sink base; /* first: the worker sees a struct sink * */
    struct tim_client *client;
    int64_t coalesce_after_ms;
    atomic_uint_fast64_t coalesced[K_COUNT]; /* rows covered by a coalesced message */
    atomic_uint_fast64_t messages;           /* coalesced messages sent */
    bool metrics;
};

/* ROOMD_ELIMIT (IM's rate limit until the deadline) is "throttled" to the
 * worker (sink.h); the reason says so. Returns rc. */
static int
outage_of_limit(int rc, char *err, size_t errlen)
{
    if (rc != ROOMD_ELIMIT)
        return rc;
    size_t n = strlen(err);
    if (n + 1 < errlen)
        snprintf(err + n, errlen - n, "%s", " (IM rate limit: throttled, no attempt)");
    return ROOMD_ELIMIT;
}

/* A call begun at started_ms (clock_mono_ms) that ended without an answer
 * (rc ROOMD_EUNAVAIL) at its deadline while IM rate-limited roomd during
 * it: the time went waiting the limit out (the last pause left no time for
 * the send), so it is throttled too: ROOMD_ELIMIT, err noting it; else
 * rc. Thread: the caller's; never blocks. */
static int
limit_of_wait(struct sink_tim *t, int rc, int64_t started_ms, int64_t deadline, char *err,
              size_t errlen)
{
    int64_t now = clock_mono_ms();

    if (rc != ROOMD_EUNAVAIL || now < deadline ||
        !tim_client_rate_limited(t->client, now - started_ms + 1))
        return rc;
    size_t n = strlen(err);
    if (n + 1 < errlen)
        snprintf(err + n, errlen - n, "%s", " after IM's rate limit");
    return ROOMD_ELIMIT;
}

static int
tim_publish(struct sink *s, const struct outbox_event *ev, int64_t deadline, char *err,
            size_t errlen)
{
    struct sink_tim *t = (struct sink_tim *)s;
    int64_t started = clock_mono_ms();
    int rc = tim_client_deliver_event(t->client, ev, deadline, err, errlen);

    return outage_of_limit(limit_of_wait(t, rc, started, deadline, err, errlen), err, errlen);
}

/* ==== coalescing (publish_batch) ==== */

/* One row of the batch as the coalescer sees it. */
struct item {
    char group[TIM_GROUP_ID_MAX];
    size_t leader; /* the first index of the batch with this group */
    enum kind kind;
    Roomd__V1__RoomOutboxEvent *env; /* NULL: not decoded (the row goes alone) */
    ProtobufCMessage *payload;       /* of a coalescible kind */
    size_t run_end;                  /* in a run: the index of its last row; else SIZE_MAX */
    size_t run_start;
    int member_rc; /* its membership calls' outcome (in a run) */
};

static enum kind
kind_of(const char *type)
{
    for (int k = 0; k < K_COUNT; k++)
        if (strcmp(type, kind_names[k]) == 0)
            return (enum kind)k;
    return K_NONE;
}

static const ProtobufCMessageDescriptor *
desc_of(enum kind k)
{
    switch (k) {
    case K_JOINED:
        return &roomd__v1__room_user_joined__descriptor;
    case K_LEFT:
        return &roomd__v1__room_user_left__descriptor;
    case K_MIC:
        return &roomd__v1__room_mic_changed__descriptor;
    default:
        return NULL;
    }
}

/* Decodes ev into it: the envelope and, for a state event, its payload. A
 * leave for a kick or a close is not coalescible (a client must see it). */
static void
item_fill(struct item *it, const struct outbox_event *ev)
{
    const struct outbox_row *row = ev->row;

    it->kind = K_NONE;
    it->run_end = it->run_start = SIZE_MAX;
    tim_group_id(row->app_code, row->room_id, it->group, sizeof(it->group));
    it->env = roomd__v1__room_outbox_event__unpack(NULL, ev->envelope_len, ev->envelope);
    if (it->env == NULL)
        return;
    enum kind k = kind_of(it->env->event_type);
    if (k == K_NONE)
        return;
    it->payload =
        protobuf_c_message_unpack(desc_of(k), NULL, it->env->payload.len, it->env->payload.data);
    if (it->payload == NULL)
        return;
    if (k == K_LEFT) {
        const char *why = ((Roomd__V1__RoomUserLeft *)it->payload)->reason;
        if (why != NULL && (strcmp(why, "kicked") == 0 || strcmp(why, "closed") == 0))
            return;
    }
    it->kind = k;
}

static void
item_free(struct item *it)
{
    if (it->payload != NULL)
        protobuf_c_message_free_unpacked(it->payload, NULL);
    if (it->env != NULL)
        roomd__v1__room_outbox_event__free_unpacked(it->env, NULL);
}

/* Marks the rows of group g in it[start..last] as one coalesced run. */
static void
mark_run(struct item *it, size_t g, size_t start, size_t last)
{
    for (size_t j = start; j <= last; j++)
        if (it[j].leader == g) {
            it[j].run_start = start;
            it[j].run_end = last;
        }
}

/* The IM calls row it makes alone: its message, and a membership call in
 * a group that has them (joins, leaves, kicks), as tim_events.c. */
static int64_t
calls_alone(const struct item *it, bool members)
{
    const char *type = it->env ? it->env->event_type : "";
    bool member = strcmp(type, "RoomUserJoined") == 0 || strcmp(type, "RoomUserLeft") == 0 ||
                  strcmp(type, "RoomUserKicked") == 0;

    return 1 + (members && member ? 1 : 0);
}

/*
 * Marks the runs to coalesce: for each group that is behind, its maximal
 * runs of consecutive coalescible rows (at most RUN_MAX, at least 2). A
 * group is behind when its messages of the batch, after the ones already
 * waiting for its slot, would take longer than coalesce_after at its rate;
 * every group is, when the batch sent message by message would not fit in
 * half the time left before the deadline (at IM's recent pace per call, or
 * one group's rate): what does not fit would be retried.
 */
static void
plan(struct sink_tim *t, struct item *it, size_t n, int64_t deadline)
{
    size_t *count = xcalloc(n > 0 ? n : 1, sizeof(*count));
    int64_t gap = tim_limit_group_gap_us(tim_client_limit(t->client));
    int64_t lat_us = tim_client_latency_ms(t->client) * 1000;
    int64_t budget_us = (deadline - clock_mono_ms()) * 1000 / 2, batch_us = 0;
    bool members = strcmp(tim_client_group_type(t->client), "AVChatRoom") != 0;

    for (size_t i = 0; i < n; i++) {
        it[i].leader = i;
        for (size_t j = 0; j < i; j++)
            if (it[j].leader == j && strcmp(it[j].group, it[i].group) == 0) {
                it[i].leader = j;
                break;
            }
        count[it[i].leader]++;
        batch_us += calls_alone(&it[i], members) * lat_us;
    }
    int64_t *queue = xcalloc(n > 0 ? n : 1, sizeof(*queue));
    bool force = batch_us > budget_us;
    for (size_t g = 0; g < n; g++) {
        if (it[g].leader != g)
            continue;
        queue[g] = tim_limit_group_backlog_us(tim_client_limit(t->client), it[g].group) +
                   (int64_t)count[g] * gap;
        force = force || queue[g] > budget_us;
    }
    for (size_t g = 0; g < n; g++) {
        if (it[g].leader != g || (!force && queue[g] <= t->coalesce_after_ms * 1000))
            continue; /* the group keeps up: every message of its own */
        size_t start = SIZE_MAX, last = SIZE_MAX, len = 0;
        for (size_t i = g; i <= n; i++) {
            if (i < n && it[i].leader != g)
                continue;
            bool state = i < n && it[i].kind != K_NONE;
            if (state && len > 0 && len < RUN_MAX) {
                last = i; /* the run goes on */
                len++;
                continue;
            }
            if (len >= 2) /* the run ends: coalesce it */
                mark_run(it, g, start, last);
            start = last = state ? i : SIZE_MAX;
            len = state ? 1 : 0;
        }
    }
    free(queue);
    free(count);
}

/* Sets uid's latest membership in state (uid -> joined). */
static void
note_member(json_t *state, int64_t uid, bool joined)
{
    char key[24];

    snprintf(key, sizeof(key), "%" PRId64, uid);
    json_object_set_new(state, key, json_boolean(joined));
}

/* The Data of the coalesced message of the run it[start..end] (rows of one
 * group): the envelope fields of its last event, event_type
 * RoomStateCoalesced, the room_seq range and counts it covers, and the
 * latest state: member count, who joined and who left (each member's last
 * event), each seat's last change. malloc'd, or NULL. */
static char *
coalesced_json(const struct item *it, size_t start, size_t end, const char **priority)
{
    const Roomd__V1__RoomOutboxEvent *first = it[start].env, *last = it[end].env;
    json_t *members = json_object(), *seats = json_object(), *types = json_object();
    json_t *payload = json_object(), *joined = json_array(), *left = json_array();
    json_t *seat_list = json_array();
    int64_t member_count = -1;
    size_t covered = 0;
    const char *key;
    json_t *v;
    char *s = NULL;

    *priority = "Low";
    for (size_t i = start; i <= end; i++) {
        if (it[i].leader != it[start].leader)
            continue;
        covered++;
        const char *type = kind_names[it[i].kind];
        json_t *c = json_object_get(types, type);
        json_object_set_new(types, type, json_integer(c ? json_integer_value(c) + 1 : 1));
        if (it[i].kind == K_JOINED) {
            const Roomd__V1__RoomUserJoined *p = (const void *)it[i].payload;
            note_member(members, p->uid, true);
            member_count = p->member_count;
        } else if (it[i].kind == K_LEFT) {
            const Roomd__V1__RoomUserLeft *p = (const void *)it[i].payload;
            note_member(members, p->uid, false);
            member_count = p->member_count;
        } else {
            const Roomd__V1__RoomMicChanged *p = (const void *)it[i].payload;
            char sk[16];
            snprintf(sk, sizeof(sk), "%d", p->seat);
            json_object_set_new(seats, sk,
                                json_pack("{s:i, s:I, s:b}", "seat", p->seat, "uid",
                                          (json_int_t)p->uid, "on_mic", p->on_mic));
            *priority = "High"; /* as a mic change alone */
        }
    }
    json_object_foreach(members, key, v)
    {
        json_array_append_new(json_is_true(v) ? joined : left,
                              json_integer((json_int_t)strtoll(key, NULL, 10)));
    }
    json_object_foreach(seats, key, v)
    {
        json_array_append(seat_list, v);
    }
    if (member_count >= 0)
        json_object_set_new(payload, "member_count", json_integer(member_count));
    json_object_set_new(payload, "joined", joined);
    json_object_set_new(payload, "left", left);
    json_object_set_new(payload, "seats", seat_list);
    json_t *o =
        json_pack("{s:s, s:s, s:s, s:I, s:I, s:s, s:I, s:s, s:{s:I, s:I, s:I, s:O}, s:O}",
                  "event_id", last->event_id, "app_code", last->app_code, "room_id", last->room_id,
                  "room_version", (json_int_t)last->room_version, "room_seq",
                  (json_int_t)last->room_seq, "event_type", "RoomStateCoalesced", "occurred_at_ms",
                  (json_int_t)last->occurred_at_ms, "command_id", last->command_id, "coalesced",
                  "from_seq", (json_int_t)first->room_seq, "to_seq", (json_int_t)last->room_seq,
                  "count", (json_int_t)covered, "event_types", types, "payload", payload);
    if (o != NULL) {
        s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
        json_decref(o);
    }
    json_decref(payload);
    json_decref(members);
    json_decref(seats);
    json_decref(types);
    return s;
}

/* The uid of a join or leave (0 for a mic change). */
static int64_t
member_uid(const struct item *it)
{
    if (it->kind == K_JOINED)
        return ((const Roomd__V1__RoomUserJoined *)(const void *)it->payload)->uid;
    if (it->kind == K_LEFT)
        return ((const Roomd__V1__RoomUserLeft *)(const void *)it->payload)->uid;
    return 0;
}

#define MEMBERS_PER_CALL 100

/* One add (or delete) call for rows idx[0..k) of a run of group, their
 * members once each: each row's member_rc gets its member's outcome. A
 * missing group is created and the call made again (as tim_events.c). */
static void
member_call(struct sink_tim *t, struct item *it, const size_t *idx, size_t k, bool add,
            int64_t deadline, char *errs, size_t errlen)
{
    char accts[MEMBERS_PER_CALL][24], err[512] = "";
    const char *list[MEMBERS_PER_CALL];
    int results[MEMBERS_PER_CALL], code = -1, rc = 0;
    size_t at[MEMBERS_PER_CALL], m = 0;
    const char *group = it[idx[0]].group;

    for (size_t j = 0; j < k; j++) {
        char a[24];
        snprintf(a, sizeof(a), "%" PRId64, member_uid(&it[idx[j]]));
        for (at[j] = 0; at[j] < m && strcmp(accts[at[j]], a) != 0; at[j]++)
            ;
        if (at[j] == m) {
            memcpy(accts[m], a, sizeof(a));
            list[m] = accts[m];
            results[m++] = 0;
        }
    }
    for (int pass = 0; pass < 2; pass++) {
        code = -1;
        rc = add ? tim_add_members(t->client, group, list, m, results, deadline, &code, err,
                                   sizeof(err))
                 : tim_delete_members(t->client, group, list, m, "leave", deadline, &code, err,
                                      sizeof(err));
        if (rc == 0 || pass > 0 || (code != 10010 && code != 10015))
            break;
        log_info("tim", "group missing; creating it", "group=%s", group);
        if ((rc = tim_ensure_group(t->client, group, it[idx[0]].env->room_id, deadline, err,
                                   sizeof(err))) != 0)
            break;
    }
    for (size_t j = 0; j < k; j++) {
        int r = rc != 0 ? rc : results[at[j]];
        if (r != 0) {
            it[idx[j]].member_rc = r;
            snprintf(errs + idx[j] * errlen, errlen, "%s", err);
        }
    }
}

/* The membership calls of the run ending at end (none in an AVChatRoom):
 * the run's latest state of each member it touches, as one add call for the
 * members whose last event is a join and one delete call for the others
 * (per 100). Calls on different members commute, and each member's own
 * events end in the state its call sets, so the order within the run does
 * not matter. Each join or leave row gets the outcome of its member's call. */
static void
run_members(struct sink_tim *t, struct item *it, size_t end, int64_t deadline, char *errs,
            size_t errlen)
{
    size_t start = it[end].run_start, g = it[end].leader;

    if (strcmp(tim_client_group_type(t->client), "AVChatRoom") == 0)
        return;
    for (int pass = 0; pass < 2; pass++) {
        enum kind want = pass == 0 ? K_JOINED : K_LEFT;
        size_t idx[MEMBERS_PER_CALL], k = 0;

        for (size_t j = start; j <= end; j++) {
            if (it[j].leader != g || (it[j].kind != K_JOINED && it[j].kind != K_LEFT))
                continue;
            /* the member's last event in the run decides its call */
            int64_t uid = member_uid(&it[j]);
            enum kind last = it[j].kind;
            for (size_t l = j + 1; l <= end; l++)
                if (it[l].leader == g && (it[l].kind == K_JOINED || it[l].kind == K_LEFT) &&
                    member_uid(&it[l]) == uid)
                    last = it[l].kind;
            if (last != want)
                continue;
            idx[k++] = j;
            if (k == MEMBERS_PER_CALL) {
                member_call(t, it, idx, k, want == K_JOINED, deadline, errs, errlen);
                k = 0;
            }
        }
        if (k > 0)
            member_call(t, it, idx, k, want == K_JOINED, deadline, errs, errlen);
    }
}

/* Makes the run's membership calls, then sends its coalesced message
 * (unless its group is limited: then the run is held) and settles the
 * run's rows: each gets its membership outcome when that failed, else the
 * message's. Counts the covered rows when it was sent. Returns the
 * client's rc for the message. */
static int
send_run(struct sink_tim *t, struct item *it, size_t end, bool limited, int64_t deadline, int *rcs,
         char *errs, size_t errlen)
{
    size_t start = it[end].run_start;
    const char *priority = "Low";
    char dedupe[2 * 37 + 16], err[512] = "";
    char *data = NULL;
    int raw, rc;

    if (!limited)
        run_members(t, it, end, deadline, errs, errlen);
    snprintf(dedupe, sizeof(dedupe), "coalesced:%s:%s", it[start].env->event_id,
             it[end].env->event_id);
    if (limited) {
        snprintf(err, sizeof(err), "held: IM rate-limits group %s (throttled, no attempt)",
                 it[end].group);
        raw = rc = ROOMD_ELIMIT;
    } else if ((data = coalesced_json(it, start, end, &priority)) == NULL) {
        snprintf(err, sizeof(err), "tim: cannot build the coalesced message");
        raw = rc = ROOMD_ERETRY;
    } else {
        int64_t started = clock_mono_ms();
        raw = tim_send_group_custom(t->client, it[end].group, data, "RoomStateCoalesced", dedupe,
                                    priority, deadline, NULL, err, sizeof(err));
        raw = limit_of_wait(t, raw, started, deadline, err, sizeof(err));
        rc = outage_of_limit(raw, err, sizeof(err));
    }
    free(data);
    size_t covered = 0;
    for (size_t j = start; j <= end; j++) {
        if (it[j].leader != it[end].leader)
            continue;
        if (it[j].member_rc != 0) {
            rcs[j] = outage_of_limit(it[j].member_rc, errs + j * errlen, errlen);
            continue;
        }
        rcs[j] = rc;
        if (rc != 0)
            snprintf(errs + j * errlen, errlen, "%s (coalesced seq %" PRId64 "..%" PRId64 ")", err,
                     it[start].env->room_seq, it[end].env->room_seq);
        else
            atomic_fetch_add(&t->coalesced[it[j].kind], 1);
        covered++;
    }
    if (rc == 0) {
        atomic_fetch_add(&t->messages, 1);
        log_debug("tim", "state messages coalesced",
                  "group=%s from_seq=%" PRId64 " to_seq=%" PRId64 " events=%zu", it[end].group,
                  it[start].env->room_seq, it[end].env->room_seq, covered);
    }
    return raw;
}

/*
 * The batch (sink.h publish_batch): rows in order, each group's coalesced
 * runs as planned (a run's rows all at its last row). A row of a group IM
 * rate-limited until the deadline holds the group's later rows of the
 * batch (not sent, throttled like it), and once the batch's deadline has
 * passed (a rate limit waited out, or an earlier row that hung) the rows
 * not sent yet are throttled too: not a deadline outage the worker's poison
 * check could count against an innocent row. Any other failure leaves the
 * later rows to go on (as the bus sink).
 */
static void
tim_publish_batch(struct sink *s, const struct outbox_event *evs, size_t n, int64_t deadline,
                  int *rcs, char *errs, size_t errlen)
{
    struct sink_tim *t = (struct sink_tim *)s;
    struct item *it = xcalloc(n > 0 ? n : 1, sizeof(*it));
    bool *limited = xcalloc(n > 0 ? n : 1, sizeof(*limited));
    bool throttled = false; /* IM rate-limited a call of this batch */

    for (size_t i = 0; i < n; i++) {
        item_fill(&it[i], &evs[i]);
        errs[i * errlen] = '\0';
        rcs[i] = ROOMD_ERETRY;
    }
    plan(t, it, n, deadline);
    for (size_t i = 0; i < n; i++) {
        char *err = errs + i * errlen;

        if (it[i].run_end != SIZE_MAX) {
            /* held too once the batch's time is spent (earlier rows, a rate limit) */
            bool held = limited[it[i].leader] || clock_mono_ms() >= deadline;
            if (it[i].run_end == i &&
                send_run(t, it, i, held, deadline, rcs, errs, errlen) == ROOMD_ELIMIT)
                limited[it[i].leader] = throttled = true;
            continue; /* settled with its run's last row */
        }
        if (limited[it[i].leader]) {
            snprintf(err, errlen,
                     "held: IM rate-limits group %s (throttled, no attempt; retried after it)",
                     it[i].group);
            rcs[i] = ROOMD_ELIMIT;
            continue;
        }
        if (clock_mono_ms() >= deadline) {
            /* not sent: the batch's time went on earlier rows (one that hung,
             * or waiting out IM's rate limit), not this event's fault, so no
             * attempt whatever else IM answered (the poison check would count
             * a deadline outage of a sink that answers) */
            snprintf(err, errlen, "held: %s (not sent, no attempt)",
                     throttled ? "the batch's time went waiting out IM's rate limit"
                               : "the batch's time went on earlier rows");
            rcs[i] = ROOMD_ELIMIT;
            continue;
        }
        int64_t started = clock_mono_ms();
        int rc = tim_client_deliver_event(t->client, &evs[i], deadline, err, errlen);
        rc = limit_of_wait(t, rc, started, deadline, err, errlen);
        if (rc == ROOMD_ELIMIT)
            limited[it[i].leader] = throttled = true;
        rcs[i] = outage_of_limit(rc, err, errlen);
    }
    for (size_t i = 0; i < n; i++)
        item_free(&it[i]);
    free(limited);
    free(it);
}

/* ==== probe, metrics, open/close ==== */

/* The circuit's probe (sink.h): one account check (a read, no state
 * changed). Any IM answer, an error code too, is an answer, but for IM's
 * rate limit: while IM rate-limits roomd (an answer within the last
 * second, or this check's), the probe reports an outage, so the worker
 * counts no attempt for the rows it refused. */
static int
tim_probe(struct sink *s, int64_t deadline, char *err, size_t errlen)
{
    struct sink_tim *t = (struct sink_tim *)s;

    if (tim_client_rate_limited(t->client, RATE_LIMITED_MS)) {
        snprintf(err, errlen, "tim: IM rate-limits roomd (an outage: no attempt counted)");
        return ROOMD_EUNAVAIL;
    }
    json_t *req = json_pack("{s:[{s:s}]}", "CheckItem", "UserID", "roomd_probe");
    int rc = tim_client_call(t->client, "im_open_login_svc/account_check", req, deadline, NULL,
                             NULL, err, errlen);

    json_decref(req);
    return rc == ROOMD_EUNAVAIL || rc == ROOMD_ELIMIT ? ROOMD_EUNAVAIL : 0;
}

static void
collect(void *arg, struct metrics_text *mt)
{
    struct sink_tim *t = arg;

    metrics_family(mt, "roomd_im_coalesced_total", "counter",
                   "State events delivered by a coalesced IM message (tencent_im.coalesce_after) "
                   "instead of their own, by event type.");
    for (int k = 0; k < K_COUNT; k++) {
        char labels[64];
        snprintf(labels, sizeof(labels), "event_type=\"%s\"", kind_names[k]);
        metrics_count(mt, "roomd_im_coalesced_total", labels, atomic_load(&t->coalesced[k]));
    }
    metrics_counter(mt, "roomd_im_coalesced_messages_total",
                    "Coalesced IM state messages sent (RoomStateCoalesced).",
                    atomic_load(&t->messages));
}

static void
tim_close(struct sink *s)
{
    struct sink_tim *t = (struct sink_tim *)s;

    if (t->metrics)
        metrics_remove_collector(collect, t);
    tim_client_close(t->client);
    free(t);
}

int
sink_tim_open(struct sink **out, const struct conf_tencent_im *cfg, char *err, size_t errlen)
{
    struct sink_tim *t;
    struct tim_client *c = NULL;
    int rc;

    *out = NULL;
    if ((rc = tim_client_open(&c, cfg, err, errlen)) != 0)
        return rc;
    t = xcalloc(1, sizeof(*t));
    /* accepts NULL: every room event has an IM action */
    sink_init(&t->base, "tim", SINK_BIT_TIM, NULL, tim_publish, tim_close, false);
    t->client = c;
    t->base.probe = tim_probe;
    t->coalesce_after_ms = cfg->coalesce_after_ms;
    if (t->coalesce_after_ms > 0)
        t->base.publish_batch = tim_publish_batch;
    t->metrics = metrics_add_collector(collect, t) == 0;
    *out = &t->base;
    log_info("tim", "IM sink ready",
             "base_url=%s group_type=%s timeout_ms=%lld coalesce_after_ms=%lld", cfg->base_url,
             tim_client_group_type(c), (long long)cfg->timeout_ms,
             (long long)cfg->coalesce_after_ms);
    return 0;
}
