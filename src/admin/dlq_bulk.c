/* SPDX-License-Identifier: Apache-2.0 */
/*
 * admin/dlq_bulk.c: the consumer groups' dead letters in bulk (docs/admin.md
 * "Consumer dead letters"): replay or discard every dead letter a filter
 * selects, dry run first (dlq.c's purge takes a whole group). The dead letters are read from the
 * driver's dead-letter backend (dlq_backend.h: JetStream's <ns>hyapp_dlq, RocketMQ's
 * %DLQ%<group> topics) in id order, chunk by chunk
 * (`chunk` messages fetched, matched and acted on, then the next), each
 * replayed or discarded as the single operations of dlq.c do it (through
 * the group's inbox). Each run is one audit entry (action dlq_replay_all /
 * dlq_discard_all, the filter, one row per dead letter acted on: its
 * stream seq and event_id).
 *
 * Filter: group (exact), event_type, room_id (the envelope's), reason (the
 * kit's Roomd-Reason: permanent, max_reconsume, undecodable, no_verdict),
 * error (a substring of Roomd-Error), created_after / created_before (ms,
 * when the dead letter was stored).
 */
#include "admin/internal.h"

#include "admin/dlq_backend.h"

#include "core/clock.h"
#include "core/err.h"
#include "core/xmalloc.h"
#include "room_events.pb-c.h"
#include "store/admin.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BULK_CHUNK_DEFAULT 100
#define BULK_CHUNK_MAX 1000
#define BULK_SAMPLE 20

struct dlq_filter {
    const char *group, *event_type, *room_id, *reason, *error;
    int64_t created_after, created_before; /* 0: none */
};

/* The filter object of the body; false and a 400 in r when it is not one. */
static bool
filter_of(json_t *fj, struct dlq_filter *f, struct admin_reply *r)
{
    static const char *const strs[] = {"group", "event_type", "room_id", "reason", "error"};
    static const char *const times[] = {"created_after", "created_before"};
    const char **sf[] = {&f->group, &f->event_type, &f->room_id, &f->reason, &f->error};
    int64_t *tf[] = {&f->created_after, &f->created_before};
    const char *k;
    json_t *v;

    memset(f, 0, sizeof(*f));
    if (fj == NULL)
        return true;
    if (!json_is_object(fj)) {
        admin_reply_error(r, 400, "invalid_argument", "filter", "filter: want an object");
        return false;
    }
    json_object_foreach(fj, k, v)
    {
        bool known = false;
        for (size_t i = 0; i < 5; i++)
            if (strcmp(k, strs[i]) == 0) {
                if (!json_is_string(v)) {
                    admin_reply_error(r, 400, "invalid_argument", k, "filter.%s: want a string", k);
                    return false;
                }
                *sf[i] = json_string_value(v);
                known = true;
            }
        for (size_t i = 0; i < 2; i++)
            if (strcmp(k, times[i]) == 0) {
                if (!json_is_integer(v) || json_integer_value(v) < 0) {
                    admin_reply_error(r, 400, "invalid_argument", k,
                                      "filter.%s: want milliseconds since the epoch", k);
                    return false;
                }
                *tf[i] = json_integer_value(v);
                known = true;
            }
        if (!known) {
            admin_reply_error(r, 400, "invalid_argument", k,
                              "filter.%s: unknown (group, event_type, room_id, reason, error, "
                              "created_after, created_before)",
                              k);
            return false;
        }
    }
    return true;
}

static bool
eq_or_unset(const char *want, const char *got)
{
    return want == NULL || *want == '\0' || strcmp(want, got ? got : "") == 0;
}

/* True when dead letter d matches f (event_id into event_id when it does). */
static bool
matches(const struct dlq_letter *d, const struct dlq_filter *f, char *event_id, size_t idlen)
{
    Roomd__V1__RoomOutboxEvent *ev = NULL;
    bool ok;

    event_id[0] = '\0';
    if (!eq_or_unset(f->group, d->group) || !eq_or_unset(f->reason, d->reason) ||
        (f->error && *f->error && strstr(d->error, f->error) == NULL) ||
        (f->created_after > 0 && d->stored_ms < f->created_after) ||
        (f->created_before > 0 && d->stored_ms >= f->created_before))
        return false;
    ev = roomd__v1__room_outbox_event__unpack(NULL, d->len, d->data);
    ok = eq_or_unset(f->event_type, ev ? ev->event_type : "") &&
         eq_or_unset(f->room_id, ev ? ev->room_id : "");
    if (ok && ev != NULL)
        snprintf(event_id, idlen, "%s", ev->event_id);
    if (ev != NULL)
        roomd__v1__room_outbox_event__free_unpacked(ev, NULL);
    return ok;
}

void
admin_dlq_bulk(struct admin *a, const char *actor, const char *action, const char *body, size_t len,
               struct admin_reply *r)
{
    json_error_t je;
    json_t *in = json_loadb(body != NULL ? body : "", len, 0, &je);
    struct dlq_filter f;
    bool replay = strcmp(action, "replay") == 0;
    const struct dlq_backend *b = admin_dlq_backend(a);
    struct dlq_scan *scan = NULL;
    struct admin_audit_row *rows = NULL;
    size_t nrows = 0, cap = 0;
    int64_t matched = 0, failed = 0;
    json_t *sample = json_array(), *errors = json_array();

    if (b == NULL) {
        admin_reply_error(r, 404, "not_found", NULL,
                          "no consumer dead letters here: rocketmq.enabled is false");
        goto out;
    }
    if (!json_is_object(in)) {
        admin_reply_error(r, 400, "invalid_argument", NULL, "body: want a JSON object");
        goto out;
    }
    json_t *dry = json_object_get(in, "dry_run"), *chunkj = json_object_get(in, "chunk");
    if ((dry != NULL && !json_is_boolean(dry)) ||
        (chunkj != NULL && (!json_is_integer(chunkj) || json_integer_value(chunkj) < 1 ||
                            json_integer_value(chunkj) > BULK_CHUNK_MAX))) {
        admin_reply_error(r, 400, "invalid_argument",
                          dry && !json_is_boolean(dry) ? "dry_run" : "chunk",
                          "dry_run: true|false; chunk: 1..%d", BULK_CHUNK_MAX);
        goto out;
    }
    bool dry_run = json_is_true(dry);
    int64_t chunk = chunkj ? json_integer_value(chunkj) : BULK_CHUNK_DEFAULT;
    if (!filter_of(json_object_get(in, "filter"), &f, r))
        goto out;
    if (!dry_run && a->readonly) {
        admin_reply_error(r, 405, "read_only", NULL, "this handle is read-only");
        goto out;
    }
    if (b->open(a, &scan, r) != 0)
        goto out;
    /* chunk by chunk in id order: read, match, act (a replayed or discarded
     * dead letter is gone from the backend, so the walk goes on after it) */
    uint64_t after = 0;
    int nrc = 0;
    for (bool more = true; more;) {
        for (int64_t k = 0; k < chunk; k++) {
            struct dlq_letter d;
            char event_id[40], why[512];
            if ((nrc = b->next(scan, after, NULL, &d)) != 0) {
                more = false;
                break;
            }
            after = d.seq;
            if (!matches(&d, &f, event_id, sizeof(event_id))) {
                b->letter_free(&d);
                continue;
            }
            matched++;
            if (json_array_size(sample) < BULK_SAMPLE)
                json_array_append_new(sample, admin_dlq_message_json(&d, false));
            uint64_t q = d.seq;
            b->letter_free(&d);
            int rc = 0;
            if (!dry_run)
                rc = admin_dlq_act(a, b, scan, actor, q, replay, why, sizeof(why));
            if (rc != 0) {
                failed++;
                if (json_array_size(errors) < BULK_SAMPLE)
                    json_array_append_new(
                        errors, json_pack("{s:I, s:s}", "seq", (json_int_t)q, "error", why));
            } else if (!dry_run) {
                rows = xgrow(rows, nrows, &cap, sizeof(*rows));
                memset(&rows[nrows], 0, sizeof(rows[0]));
                rows[nrows].outbox_id = (int64_t)q;
                snprintf(rows[nrows].event_id, sizeof(rows[0].event_id), "%s", event_id);
                nrows++;
            }
        }
    }
    if (nrc == ROOMD_EUNAVAIL && matched == 0) {
        admin_reply_error(r, 503, "unavailable", NULL, "broker: the dead letters cannot be read");
        goto out;
    }
    json_t *o = json_pack("{s:s, s:b, s:I, s:I, s:o, s:o}", "action", action, "dry_run", dry_run,
                          "matched", (json_int_t)matched, "failed", (json_int_t)failed, "sample",
                          sample, "errors", errors);
    sample = errors = NULL;
    json_object_set_new(o, "done", json_integer(dry_run ? 0 : (json_int_t)nrows));
    if (!dry_run) {
        const char *name = replay ? "dlq_replay_all" : "dlq_discard_all";
        json_t *fj = json_object_get(in, "filter");
        char *filter = fj ? json_dumps(fj, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
        int64_t audit = 0;
        int rc = admin_store_audit_record(a->store, actor, name, filter ? filter : "{}", rows,
                                          nrows, clock_wall_ms(), &audit);
        free(filter);
        if (rc != 0) {
            json_decref(o);
            admin_reply_store(a, r, rc);
            goto out;
        }
        json_object_set_new(o, "audit_id", json_integer(audit));
    }
    admin_reply_ok(r, o);
out:
    if (scan != NULL)
        b->close(scan);
    json_decref(sample);
    json_decref(errors);
    json_decref(in);
    free(rows);
}
