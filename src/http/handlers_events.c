/* SPDX-License-Identifier: Apache-2.0 */
/*
 * handlers_events.c: exact catch-up, GET /v1/rooms/{id}/events?after_seq=N&limit=M
 * (docs/room.md, Catch-up): the room's events with room_seq > N in room_seq
 * order, read from the store on any node (no owner, no forward), each as
 * the JSON a consumer gets (outbox_event_build). 410 events_purged with the
 * oldest seq still stored once retention purged the ones asked for.
 * Authorization as for GET /v1/rooms/{id}: any valid token of the app.
 */
#include "http/router.h"

#include "core/err.h"
#include "outbox/outbox.h"
#include "store/store.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EVENTS_LIMIT_DEFAULT 100
#define EVENTS_LIMIT_MAX 1000

/* Reads query key name as an integer lo..hi into *out (absent or "":
 * *out kept). False and a 400 naming it otherwise. */
static bool
query_int(const struct http_request *req, const char *name, int64_t lo, int64_t hi, int64_t *out,
          struct http_response *resp)
{
    const char *v = http_request_query(req, name);
    char msg[128];

    if (v == NULL || v[0] == '\0')
        return true;
    if (http_parse_digits(v, out) && *out >= lo && *out <= hi)
        return true;
    snprintf(msg, sizeof(msg), "%s: must be an integer %lld..%lld", name, (long long)lo,
             (long long)hi);
    http_response_field_error(resp, "invalid_argument", name, msg);
    return false;
}

void
handle_room_events(const struct http_deps *d, const struct http_request *req, const char *app,
                   const char *room_id, struct http_response *resp)
{
    int64_t after = 0, limit = EVENTS_LIMIT_DEFAULT, oldest = 0, latest = -1, last;
    struct outbox_row *rows = NULL;
    size_t n = 0;
    json_t *arr, *o;
    char *body;
    int rc;

    if (!query_int(req, "after_seq", 0, INT64_MAX, &after, resp) ||
        !query_int(req, "limit", 1, EVENTS_LIMIT_MAX, &limit, resp))
        return;
    rc = store_room_events(d->store, app, room_id, after, (int)limit, &rows, &n, &oldest, &latest);
    if (rc != 0) {
        http_response_error(resp, 503, "unavailable", "events: %s", roomd_strerror(rc));
        return;
    }
    if (latest < 0) {
        http_response_error(resp, 404, "not_found", "room %s does not exist", room_id);
        return;
    }
    /* the next one asked for is gone (retention purges delivered rows; an
     * undelivered older one may stay): the client reloads the room, then
     * reads on from the room's version of events */
    (void)oldest;
    if (after < latest && (n == 0 || rows[0].room_seq > after + 1)) {
        int64_t avail = n == 0 ? latest + 1 : rows[0].room_seq;
        outbox_rows_free(rows, n);
        o = json_pack("{s:{s:s, s:s, s:I, s:I}}", "error", "code", "events_purged", "message",
                      "the events after after_seq were purged by retention: read the room "
                      "(GET /v1/rooms/{id}) and go on from oldest_available_seq - 1",
                      "oldest_available_seq", (json_int_t)avail, "latest_seq", (json_int_t)latest);
        body = json_dumps(o, JSON_SORT_KEYS | JSON_COMPACT);
        json_decref(o);
        http_response_take(resp, 410, body);
        return;
    }
    arr = json_array();
    last = after;
    for (size_t i = 0; i < n; i++) {
        uint8_t *env = NULL;
        size_t envlen = 0;
        char *js = NULL;
        json_t *ev;

        if (rows[i].room_seq <= last) /* a repair's copy of an event already listed */
            continue;
        if (rows[i].room_seq > last + 1)
            break; /* a purged stretch: the next page answers 410 from here */
        if (outbox_event_build(&rows[i], &env, &envlen, &js) == 0 &&
            (ev = json_loads(js, 0, NULL)) != NULL) {
            json_array_append_new(arr, ev);
        } else { /* a poison row: listed by its seq and id, no payload */
            json_array_append_new(arr, json_pack("{s:I, s:s, s:s, s:b}", "room_seq",
                                                 (json_int_t)rows[i].room_seq, "event_id",
                                                 rows[i].event_id, "event_type", rows[i].event_type,
                                                 "undecodable", 1));
        }
        free(env);
        free(js);
        last = rows[i].room_seq;
    }
    outbox_rows_free(rows, n);
    if (latest < last)
        latest = last; /* committed while we read */
    o = json_pack("{s:s, s:I, s:o, s:I, s:I, s:b}", "room_id", room_id, "after_seq",
                  (json_int_t)after, "events", arr, "next_after_seq", (json_int_t)last,
                  "latest_seq", (json_int_t)latest, "more", last < latest);
    body = json_dumps(o, JSON_SORT_KEYS | JSON_COMPACT);
    json_decref(o);
    http_response_take(resp, 200, body);
}
