/* SPDX-License-Identifier: Apache-2.0 */
/*
 * watch.c: the WatchRoom server stream (internal.h rpc_watch; docs/grpc.md,
 * WatchRoom). A poll of the one catch-up read: the call's GET
 * /v1/rooms/{id}/events?after_seq=LAST&limit=N goes through the router (its
 * authorization, app, 404 and 410 are the HTTP route's, checked again on
 * every read, so an expired token ends the stream), each listed event is
 * sent as a roomd.v1.RoomEvent, and LAST becomes the page's next_after_seq.
 * A page that says more is followed at once; else the stream waits
 * grpc.watch.poll_interval (or until the client goes away) and reads again.
 *
 * Why it is exact: the read is of the store, not of this node's memory, so
 * any node serves it and an owner change (a kill -9 of the owner, a
 * takeover) changes nothing for it: room_seq is gap-free and assigned in the
 * commit transaction, the read lists a contiguous run after LAST (the store
 * reads the room's head before its rows, so a row committed meanwhile only
 * makes the next page longer), and LAST only grows. So each event is sent
 * once, in order, backlog and live alike, and a client that reconnects (to
 * any node) with after_seq = the last room_seq it got goes on exactly.
 *
 * The waits: a RECV_CLOSE_ON_SERVER batch is started first; its completion
 * (the client cancelled, its deadline passed, the server cancels all calls)
 * ends the stream. Each message's send is bounded by grpc.call_timeout (a
 * client that stops reading is cancelled then).
 */
#include "rpc/internal.h"

#include "core/xmalloc.h"
#include "room_service.pb-c.h"

#include <grpc/byte_buffer.h>
#include <grpc/support/time.h>
#include <jansson.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WATCH_PAGE 500 /* events per store read (the route allows 1..1000) */

/* The stream's state. */
struct stream {
    grpc_call *call;
    grpc_completion_queue *cq;
    int tag_close, tag_send, tag_status; /* their addresses are the batches' tags */
    int cancelled;                       /* RECV_CLOSE_ON_SERVER's */
    bool closed;                         /* that batch completed */
    bool sent_initial;
};

/* Waits on the call's queue until the batch of tag completes (true when it
 * succeeded) or until deadline (tag NULL: only waits, for the close);
 * notes the close batch's completion on the way. Past deadline with tag
 * set, the call is cancelled and the batch's end awaited. */
static bool
wait_for(struct stream *st, void *tag, gpr_timespec deadline)
{
    for (;;) {
        grpc_event e = grpc_completion_queue_next(st->cq, deadline, NULL);
        if (e.type == GRPC_QUEUE_TIMEOUT) {
            if (tag == NULL)
                return false;
            grpc_call_cancel_with_status(st->call, GRPC_STATUS_DEADLINE_EXCEEDED,
                                         "roomd: the client did not read the stream in time", NULL);
            deadline = gpr_inf_future(GPR_CLOCK_MONOTONIC);
            continue;
        }
        if (e.type != GRPC_OP_COMPLETE)
            return false; /* the queue shuts down: not while a worker serves */
        if (e.tag == &st->tag_close) {
            st->closed = true;
            if (tag == NULL || tag == &st->tag_close)
                return true;
            continue;
        }
        if (e.tag == tag)
            return e.success != 0;
    }
}

/* Sends one message (with the initial metadata before the first);
 * false when the client is gone. */
static bool
send_message(struct stream *st, const uint8_t *p, size_t n, int64_t timeout_ms)
{
    grpc_slice s = grpc_slice_from_copied_buffer((const char *)p, n);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_op ops[2];
    size_t nops = 0;
    bool ok;

    grpc_slice_unref(s);
    memset(ops, 0, sizeof(ops));
    if (!st->sent_initial) {
        ops[nops].op = GRPC_OP_SEND_INITIAL_METADATA;
        ops[nops++].data.send_initial_metadata.count = 0;
        st->sent_initial = true;
    }
    ops[nops].op = GRPC_OP_SEND_MESSAGE;
    ops[nops++].data.send_message.send_message = bb;
    ok = grpc_call_start_batch(st->call, ops, nops, &st->tag_send, NULL) == GRPC_CALL_OK &&
         wait_for(st, &st->tag_send, rpc_after_ms(timeout_ms));
    grpc_byte_buffer_destroy(bb);
    return ok && !st->closed;
}

/* Ends the stream with a's status (and its details trailer), then awaits
 * the close. oldest >= 0 adds the oldest-available-seq trailer. */
static void
send_status(struct stream *st, const struct answer *a, int64_t oldest, int64_t timeout_ms)
{
    grpc_metadata trailing[2];
    size_t ntrailing = 0;
    grpc_slice details = grpc_slice_from_copied_string(a->message);
    char num[32];
    grpc_op ops[2];
    size_t nops = 0;

    memset(trailing, 0, sizeof(trailing));
    memset(ops, 0, sizeof(ops));
    if (a->details != NULL) {
        trailing[ntrailing].key = grpc_slice_from_static_string("grpc-status-details-bin");
        trailing[ntrailing++].value =
            grpc_slice_from_copied_buffer((const char *)a->details, a->details_len);
    }
    if (oldest >= 0) {
        snprintf(num, sizeof(num), "%lld", (long long)oldest);
        trailing[ntrailing].key = grpc_slice_from_static_string("oldest-available-seq");
        trailing[ntrailing++].value = grpc_slice_from_copied_string(num);
    }
    if (!st->sent_initial) {
        ops[nops].op = GRPC_OP_SEND_INITIAL_METADATA;
        ops[nops++].data.send_initial_metadata.count = 0;
        st->sent_initial = true;
    }
    ops[nops].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[nops].data.send_status_from_server.status = a->status;
    ops[nops].data.send_status_from_server.status_details = &details;
    ops[nops].data.send_status_from_server.trailing_metadata_count = ntrailing;
    ops[nops++].data.send_status_from_server.trailing_metadata = trailing;
    if (grpc_call_start_batch(st->call, ops, nops, &st->tag_status, NULL) == GRPC_CALL_OK)
        wait_for(st, &st->tag_status, rpc_after_ms(timeout_ms));
    for (size_t i = 0; i < ntrailing; i++)
        grpc_slice_unref(trailing[i].value);
    grpc_slice_unref(details);
}

/* Sends the events of one 200 page (the route's JSON body); *last and
 * *more from it. False when the client went away or the body is not the
 * route's (a's status then INTERNAL). */
static bool
send_page(struct stream *st, const char *body, int64_t *last, bool *more, int64_t timeout_ms,
          struct answer *a, _Atomic uint64_t *sent)
{
    json_t *o = json_loads(body, 0, NULL), *evs = json_object_get(o, "events"), *ev;
    json_t *next = json_object_get(o, "next_after_seq");
    size_t i;
    bool ok = true;

    if (!json_is_array(evs) || !json_is_integer(next)) {
        rpc_set_error(a, GRPC_STATUS_INTERNAL, 500, "internal", NULL, "events: no page");
        json_decref(o);
        return false;
    }
    json_array_foreach(evs, i, ev)
    {
        Roomd__V1__RoomEvent m = ROOMD__V1__ROOM_EVENT__INIT;
        char *js = json_dumps(ev, JSON_COMPACT | JSON_SORT_KEYS);
        json_int_t seq = json_integer_value(json_object_get(ev, "room_seq"));

        if (js == NULL)
            abort();
        if (seq <= *last) { /* never: the route lists after LAST only */
            free(js);
            continue;
        }
        m.room_seq = seq;
        const char *id = json_string_value(json_object_get(ev, "event_id"));
        const char *type = json_string_value(json_object_get(ev, "event_type"));
        m.event_id = (char *)(id ? id : "");
        m.event_type = (char *)(type ? type : "");
        m.json = js;
        size_t n = protobuf_c_message_get_packed_size(&m.base);
        uint8_t *buf = xmalloc(n + 1);
        protobuf_c_message_pack(&m.base, buf);
        ok = send_message(st, buf, n, timeout_ms);
        free(buf);
        free(js);
        if (!ok)
            break;
        *last = seq;
        atomic_fetch_add(sent, 1);
    }
    if (ok && json_integer_value(next) > *last)
        *last = json_integer_value(next);
    *more = json_is_true(json_object_get(o, "more"));
    json_decref(o);
    return ok;
}

/* The router's refusal resp -> a; a 410 events_purged is OUT_OF_RANGE
 * with the oldest seq (*oldest) in its message and trailer. */
static void
refusal(const struct method *m, const struct http_response *resp, struct answer *a, int64_t *oldest)
{
    rpc_reply(m, resp, a);
    if (resp->status == 410) {
        json_t *o = resp->body ? json_loads(resp->body, 0, NULL) : NULL;
        json_t *e = json_object_get(o, "error");
        char msg[256];
        *oldest = json_integer_value(json_object_get(e, "oldest_available_seq"));
        snprintf(msg, sizeof(msg),
                 "events_purged: the events after after_seq were purged by retention; "
                 "oldest_available_seq=%lld: read the room (GetRoom) and watch from "
                 "oldest_available_seq - 1",
                 (long long)*oldest);
        free(a->details);
        a->details = NULL;
        rpc_set_error(a, GRPC_STATUS_OUT_OF_RANGE, 410, "events_purged", NULL, msg);
        json_decref(o);
    }
}

bool
rpc_watch(const struct watch_call *w, struct answer *a)
{
    struct stream st = {.call = w->call, .cq = w->cq};
    struct built *b = w->b;
    grpc_op op;
    int64_t last = 0, oldest = -1;
    int qi = -1;
    bool more = false;

    /* the query arguments: after_seq (rpc_to_request put it there when set) and limit */
    for (int i = 0; i < b->q.n; i++)
        if (strcmp(b->q.name[i], "after_seq") == 0)
            qi = i;
    if (qi < 0 && b->q.n < 3) {
        qi = b->q.n++;
        b->q.name[qi] = "after_seq";
        snprintf(b->q.value[qi], sizeof(b->q.value[qi]), "0");
    }
    if (qi < 0) { /* not reached: WatchRoomRequest has one integer field */
        rpc_set_error(a, GRPC_STATUS_INTERNAL, 500, "internal", NULL, "after_seq: no place");
        return false;
    }
    last = strtoll(b->q.value[qi], NULL, 10);
    b->q.name[b->q.n] = "limit";
    snprintf(b->q.value[b->q.n++], sizeof(b->q.value[0]), "%d", WATCH_PAGE);
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &st.cancelled;
    if (grpc_call_start_batch(st.call, &op, 1, &st.tag_close, NULL) != GRPC_CALL_OK) {
        rpc_set_error(a, GRPC_STATUS_INTERNAL, 500, "internal", NULL, "cannot start the stream");
        return false;
    }
    for (;;) {
        struct http_response resp;

        if (st.closed)
            break;
        if (atomic_load(w->stopping)) {
            rpc_set_error(a, GRPC_STATUS_UNAVAILABLE, 503, "unavailable", NULL,
                          "the server is stopping: watch again from the last room_seq");
            break;
        }
        snprintf(b->q.value[qi], sizeof(b->q.value[qi]), "%lld", (long long)last);
        memset(&resp, 0, sizeof(resp));
        router_handle(w->d, &b->req, &resp);
        bool ok = resp.status == 200 && resp.body != NULL;
        if (!ok)
            refusal(w->m, &resp, a, &oldest);
        else
            ok = send_page(&st, resp.body, &last, &more, w->send_timeout_ms, a, w->events);
        http_response_clear(&resp);
        if (!ok)
            break;
        if (!more) /* caught up: wait for the next poll, or the client's going */
            wait_for(&st, NULL, rpc_earlier(rpc_after_ms(w->poll_ms), w->deadline));
    }
    if (!st.closed) {
        if (a->status == GRPC_STATUS_OK && a->message[0] == '\0')
            snprintf(a->message, sizeof(a->message), "stream ended");
        send_status(&st, a, oldest, w->send_timeout_ms);
        if (!st.closed)
            wait_for(&st, &st.tag_close, rpc_after_ms(w->send_timeout_ms));
    } else if (a->status == GRPC_STATUS_OK) {
        a->status = GRPC_STATUS_CANCELLED; /* the client went away (or its deadline passed) */
    }
    return true;
}
