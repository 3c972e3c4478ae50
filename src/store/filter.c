/* SPDX-License-Identifier: Apache-2.0 */
/* store/filter.c: the operator's row filter (see filter.h). */
#include "store/filter.h"

#include "core/sink_bits.h"
#include "store/store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The keys, in the order they are read and written. */
enum key {
    K_STATUS,
    K_SINK,
    K_EVENT,
    K_TYPE,
    K_ROOM,
    K_APP,
    K_ERROR,
    K_CA,
    K_CB,
    K_FA,
    K_FB,
    K_COUNT_
};
static const char *const key_names[K_COUNT_] = {
    "status", "sink",          "event_id",       "event_type",   "room_id",      "app",
    "error",  "created_after", "created_before", "failed_after", "failed_before"};

void
admin_filter_init(struct admin_filter *f)
{
    memset(f, 0, sizeof(*f));
    f->status = -1;
}

static int
copy_text(char *dst, size_t cap, const char *v, const char *key, char *why, size_t len)
{
    size_t n = strlen(v);

    if (n == 0 || n >= cap) {
        snprintf(why, len, "%s: want 1..%zu bytes", key, cap - 1);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)v[i] < 0x20) {
            snprintf(why, len, "%s: control characters are not allowed", key);
            return -1;
        }
    memcpy(dst, v, n + 1);
    return 0;
}

static int
parse_ms(const char *v, int64_t *out, const char *key, char *why, size_t len)
{
    char *end;

    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || x <= 0) {
        snprintf(why, len, "%s: want unix milliseconds (a positive integer)", key);
        return -1;
    }
    *out = x;
    return 0;
}

/* Sets key k of f from the text v. */
static int
set_key(struct admin_filter *f, enum key k, const char *v, char *why, size_t len)
{
    switch (k) {
    case K_STATUS:
        f->status = outbox_status_parse(v);
        if (f->status < 0 || strcmp(v, "published") == 0) {
            snprintf(why, len, "status: one of pending, delivering, delivered, retryable, failed");
            return -1;
        }
        return 0;
    case K_SINK:
        if ((f->sink = sink_bit_parse(v)) == 0) {
            snprintf(why, len, "sink: one of %s", sink_bit_names());
            return -1;
        }
        return 0;
    case K_EVENT:
        return copy_text(f->event_id, sizeof(f->event_id), v, "event_id", why, len);
    case K_TYPE:
        return copy_text(f->event_type, sizeof(f->event_type), v, "event_type", why, len);
    case K_ROOM:
        return copy_text(f->room_id, sizeof(f->room_id), v, "room_id", why, len);
    case K_APP:
        return copy_text(f->app, sizeof(f->app), v, "app", why, len);
    case K_ERROR:
        return copy_text(f->error, sizeof(f->error), v, "error", why, len);
    case K_CA:
        return parse_ms(v, &f->created_after, "created_after", why, len);
    case K_CB:
        return parse_ms(v, &f->created_before, "created_before", why, len);
    case K_FA:
        return parse_ms(v, &f->failed_after, "failed_after", why, len);
    case K_FB:
        return parse_ms(v, &f->failed_before, "failed_before", why, len);
    case K_COUNT_:
        break;
    }
    return -1;
}

int
admin_filter_from_lookup(struct admin_filter *f, admin_lookup_fn lookup, void *ctx,
                         const char **field, char *why, size_t len)
{
    admin_filter_init(f);
    for (int k = 0; k < K_COUNT_; k++) {
        const char *v = lookup(ctx, key_names[k]);
        if (v == NULL || *v == '\0')
            continue;
        if (set_key(f, (enum key)k, v, why, len) != 0) {
            *field = key_names[k];
            return -1;
        }
    }
    return 0;
}

int
admin_filter_from_json(struct admin_filter *f, const json_t *o, const char **field, char *why,
                       size_t len)
{
    const char *name;
    json_t *v;
    char num[32];

    admin_filter_init(f);
    if (o == NULL)
        return 0;
    if (!json_is_object(o)) {
        *field = "filter";
        snprintf(why, len, "filter: want an object");
        return -1;
    }
    json_object_foreach((json_t *)o, name, v)
    {
        int k = 0;
        while (k < K_COUNT_ && strcmp(key_names[k], name) != 0)
            k++;
        *field = k < K_COUNT_ ? key_names[k] : "filter";
        if (k == K_COUNT_) {
            snprintf(why, len, "filter.%.64s: unknown key", name);
            return -1;
        }
        const char *text = json_string_value(v);
        if (k >= K_CA && json_is_integer(v)) {
            snprintf(num, sizeof(num), "%lld", (long long)json_integer_value(v));
            text = num;
        }
        if (text == NULL) {
            snprintf(why, len, "%s: want %s", key_names[k], k >= K_CA ? "an integer" : "a string");
            return -1;
        }
        if (set_key(f, (enum key)k, text, why, len) != 0)
            return -1;
    }
    return 0;
}

json_t *
admin_filter_to_json(const struct admin_filter *f)
{
    json_t *o = json_object();

    if (f->status >= 0)
        json_object_set_new(o, "status", json_string(outbox_status_name(f->status)));
    if (f->sink)
        json_object_set_new(o, "sink", json_string(sink_bit_name(f->sink)));
    const char *texts[] = {f->event_id, f->event_type, f->room_id, f->app, f->error};
    for (int i = 0; i < 5; i++)
        if (texts[i][0] != '\0')
            json_object_set_new(o, key_names[K_EVENT + i], json_string(texts[i]));
    const int64_t times[] = {f->created_after, f->created_before, f->failed_after,
                             f->failed_before};
    for (int i = 0; i < 4; i++)
        if (times[i] > 0)
            json_object_set_new(o, key_names[K_CA + i], json_integer(times[i]));
    return o;
}

/* Appends one condition; false when sql is full. */
static bool
cond(char *sql, size_t len, const char *text)
{
    size_t used = strlen(sql), n = strlen(text);

    if (used + n + 1 > len)
        return false;
    memcpy(sql + used, text, n + 1);
    return true;
}

int
admin_filter_where(const struct admin_filter *f, char *sql, size_t len, struct admin_param *p,
                   int *np)
{
    bool ok = true;
    char st[64];
#define TEXT(c, v)                                                                                 \
    do {                                                                                           \
        ok = ok && cond(sql, len, c);                                                              \
        p[(*np)++] = (struct admin_param){.is_text = true, .s = (v)};                              \
    } while (0)
#define INT(c, v)                                                                                  \
    do {                                                                                           \
        ok = ok && cond(sql, len, c);                                                              \
        p[(*np)++] = (struct admin_param){.i = (v)};                                               \
    } while (0)

    if (*np + 12 > ADMIN_MAX_PARAMS)
        return -1;
    if (f->status >= 0) {
        /* a literal: status names are ours, and the status index serves it */
        snprintf(st, sizeof(st),
                 f->status == OUTBOX_DELIVERED ? " AND status IN ('delivered', 'published')"
                                               : " AND status = '%s'",
                 outbox_status_name(f->status));
        ok = ok && cond(sql, len, st);
    }
    if (f->sink)
        INT(" AND (sinks_done & ?) = 0", (int64_t)f->sink);
    if (sink_bit_event_type(f->sink) != NULL) /* only the rows that carry the sink */
        TEXT(" AND event_type = ?", sink_bit_event_type(f->sink));
    if (f->event_id[0])
        TEXT(" AND event_id = ?", f->event_id);
    if (f->event_type[0])
        TEXT(" AND event_type = ?", f->event_type);
    if (f->room_id[0])
        TEXT(" AND room_id = ?", f->room_id);
    if (f->app[0])
        TEXT(" AND app_code = ?", f->app);
    if (f->error[0])
        TEXT(" AND INSTR(last_error, ?) > 0", f->error);
    if (f->created_after)
        INT(" AND created_at_ms >= ?", f->created_after);
    if (f->created_before)
        INT(" AND created_at_ms <= ?", f->created_before);
    if (f->failed_after)
        INT(" AND status = 'failed' AND updated_at_ms >= ?", f->failed_after);
    if (f->failed_before)
        INT(" AND status = 'failed' AND updated_at_ms <= ?", f->failed_before);
    if (f->replayable)
        ok = ok && cond(sql, len, " AND status = 'failed'");
    if (f->not_repaired)
        ok = ok && cond(sql, len,
                        " AND id NOT IN (SELECT outbox_id FROM admin_audit_rows"
                        " WHERE new_event_id <> '')");
#undef TEXT
#undef INT
    return ok ? 0 : -1;
}
