/* SPDX-License-Identifier: Apache-2.0 */
/*
 * state.c: RoomState lifetime (new/clone/free), its JSON form (the snapshot
 * and the "room" object of responses) and small lookup helpers. The JSON is
 * canonical: sorted keys, compact, uids as integers, so that
 * from_json(to_json(s)) reproduces s and two equal states serialize equal.
 * Read command.h / apply.c next.
 */
#include "room/state.h"

#include "core/err.h"
#include "core/xmalloc.h"
#include "projection/projection.h"
#include "room/text.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct room_state *
room_state_new(const char *app, const char *room_id)
{
    struct room_state *s = xcalloc(1, sizeof(*s));

    strlcpy_(s->app_code, app, sizeof(s->app_code));
    strlcpy_(s->room_id, room_id, sizeof(s->room_id));
    s->status = ROOM_OPEN;
    s->rocket.status = ROCKET_IDLE;
    s->rocket.level = 1;
    return s;
}

struct room_state *
room_state_clone(const struct room_state *s)
{
    struct room_state *c = xmalloc(sizeof(*c));

    *c = *s;
    c->members = xmemdup(s->members, s->nmembers * sizeof(*c->members));
    c->cap_members = s->nmembers;
    c->bans = xmemdup(s->bans, s->nbans * sizeof(*c->bans));
    c->cap_bans = s->nbans;
    return c;
}

void
room_state_free(struct room_state *s)
{
    if (s == NULL)
        return;
    free(s->members);
    free(s->bans);
    free(s);
}

int
room_state_member_index(const struct room_state *s, int64_t uid)
{
    for (size_t i = 0; i < s->nmembers; i++)
        if (s->members[i].uid == uid)
            return (int)i;
    return -1;
}

int
room_state_seat_of(const struct room_state *s, int64_t uid)
{
    for (int i = 0; i < s->nseats; i++)
        if (s->seats[i] == uid)
            return i;
    return -1;
}

/* ---- JSON ---------------------------------------------------------------------- */

static const char *const room_status_names[] = {"open", "closed"};
static const char *const rocket_status_names[] = {"idle", "ignited", "done"};

/* Appends s as JSON text to t: the canonical form (keys sorted, compact)
 * that jansson's json_dumps with JSON_SORT_KEYS | JSON_COMPACT gives,
 * written directly since every command's response carries it (jansson's
 * pack + sorted dump was a fifth of the command path's instructions,
 * bench/README.md). full: the snapshot form, with the bans, members and
 * rules; else the summary of a command's answer, without them. The title is
 * the only free text (UTF-8: it came through jansson) and is escaped as
 * jansson does; app_code, room_id and rocket_id are identifiers
 * ([A-Za-z0-9_.:-]). */
static void
write_json(struct text *t, const struct room_state *s, bool full)
{
    const struct room_rocket *r = &s->rocket;

    text_printf(t, "{\"app_code\":\"%s\",", s->app_code);
    if (full) {
        text_puts(t, "\"bans\":[");
        for (size_t i = 0; i < s->nbans; i++)
            text_printf(t, "%s{\"uid\":%lld,\"until_ms\":%lld}", i ? "," : "",
                        (long long)s->bans[i].uid, (long long)s->bans[i].until_ms);
        text_puts(t, "],");
    }
    text_printf(t, "\"created_at_ms\":%lld,\"gift_total\":%lld,\"member_count\":%zu,",
                (long long)s->created_at_ms, (long long)s->gift_total, s->nmembers);
    if (full) {
        text_puts(t, "\"members\":[");
        for (size_t i = 0; i < s->nmembers; i++)
            text_printf(t, "%s{\"joined_at_ms\":%lld,\"uid\":%lld}", i ? "," : "",
                        (long long)s->members[i].joined_at_ms, (long long)s->members[i].uid);
        text_puts(t, "],");
    }
    text_printf(t, "\"owner_uid\":%lld,", (long long)s->owner_uid);
    text_printf(
        t,
        "\"rocket\":{\"energy\":%lld,\"ignited_at_ms\":%lld,\"launch_at_ms\":%lld,"
        "\"launched\":%d,\"level\":%d,\"rocket_id\":\"%s\",\"status\":\"%s\",\"utc_day\":%lld},",
        (long long)r->energy, (long long)r->ignited_at_ms, (long long)r->launch_at_ms, r->launched,
        r->level, r->rocket_id, rocket_status_names[r->status], (long long)r->utc_day);
    text_printf(t, "\"room_id\":\"%s\",", s->room_id);
    if (full && s->has_rules) {
        json_t *rules = room_rules_to_json(&s->rules);
        char *text = rules ? json_dumps(rules, JSON_SORT_KEYS | JSON_COMPACT) : NULL;

        if (text == NULL)
            abort(); /* only on out of memory */
        text_printf(t, "\"rules\":%s,", text);
        free(text);
        json_decref(rules);
    }
    text_puts(t, "\"seats\":[");
    for (int i = 0; i < s->nseats; i++)
        text_printf(t, "%s%lld", i ? "," : "", (long long)s->seats[i]);
    text_printf(t, "],\"status\":\"%s\",\"title\":", room_status_names[s->status]);
    text_json_string(t, s->title);
    text_printf(t, ",\"updated_at_ms\":%lld,\"version\":%lld}", (long long)s->updated_at_ms,
                (long long)s->version);
}

json_t *
room_rules_to_json(const struct conf_room *c)
{
    json_t *th = json_array();

    for (int i = 0; i < c->rocket.nthresholds; i++)
        json_array_append_new(th, json_integer(c->rocket.thresholds[i]));
    return json_pack("{s:I, s:I, s:i, s:i, s:o}", "countdown_ms",
                     (json_int_t)c->rocket.countdown_ms, "kick_ban_ms", (json_int_t)c->kick_ban_ms,
                     "max_members", c->max_members, "seat_count", c->seat_count, "thresholds", th);
}

int
room_rules_from_json(json_t *o, struct conf_room *out)
{
    json_error_t jerr;
    json_int_t countdown, kick_ban;
    json_t *th, *v;
    size_t i;

    memset(out, 0, sizeof(*out));
    if (o == NULL ||
        json_unpack_ex(o, &jerr, JSON_STRICT, "{s:I, s:I, s:i, s:i, s:o}", "countdown_ms",
                       &countdown, "kick_ban_ms", &kick_ban, "max_members", &out->max_members,
                       "seat_count", &out->seat_count, "thresholds", &th) != 0 ||
        !json_is_array(th) || json_array_size(th) > CONF_MAX_ROCKET_LEVELS)
        return ROOMD_EINVAL;
    json_array_foreach(th, i, v)
    {
        if (!json_is_integer(v))
            return ROOMD_EINVAL;
        out->rocket.thresholds[i] = json_integer_value(v);
    }
    out->rocket.nthresholds = (int)json_array_size(th);
    out->rocket.countdown_ms = countdown;
    out->kick_ban_ms = kick_ban;
    return 0;
}

bool
room_rules_equal(const struct conf_room *a, const struct conf_room *b)
{
    if (a->max_members != b->max_members || a->kick_ban_ms != b->kick_ban_ms ||
        a->rocket.countdown_ms != b->rocket.countdown_ms ||
        a->rocket.nthresholds != b->rocket.nthresholds)
        return false;
    for (int i = 0; i < a->rocket.nthresholds; i++)
        if (a->rocket.thresholds[i] != b->rocket.thresholds[i])
            return false;
    return true;
}

/* The state as JSON: the full form or the summary (write_json). */
static char *
to_json(const struct room_state *s, bool full)
{
    struct text t = {0};

    write_json(&t, s, full);
    return text_take(&t);
}

char *
room_state_to_json(const struct room_state *s)
{
    return to_json(s, true);
}

char *
room_state_to_json_summary(const struct room_state *s)
{
    return to_json(s, false);
}

static int
name_index(const char *name, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (strcmp(name, names[i]) == 0)
            return i;
    return -1;
}

static int
copy_str(char *dst, size_t len, const char *src)
{
    if (strlen(src) >= len)
        return -1;
    strlcpy_(dst, src, len);
    return 0;
}

/* Reads v, exactly {"uid": I, key: I} (a member or a ban), into *uid and
 * *x. Returns 0 or -1. */
static int
uid_pair(json_t *v, const char *key, int64_t *uid, int64_t *x)
{
    json_error_t jerr;
    json_int_t a, b;

    if (json_unpack_ex(v, &jerr, JSON_STRICT, "{s:I, s:I}", "uid", &a, key, &b) != 0)
        return -1;
    *uid = a;
    *x = b;
    return 0;
}

int
room_state_from_json(const char *json, struct room_state **out)
{
    json_error_t jerr;
    json_t *root = json_loads(json, 0, &jerr), *members, *seats, *bans, *v, *rules = NULL;
    const char *app, *room_id, *title, *status, *rstatus, *rocket_id;
    json_int_t owner, version, created, updated, gift_total, energy, utc_day, ignited_at, launch_at;
    int level, launched, member_count, si;
    struct room_state *s = NULL;
    size_t i;

    *out = NULL;
    if (root == NULL)
        return ROOMD_EINVAL;
    if (json_unpack_ex(root, &jerr, JSON_STRICT,
                       "{s:s, s:s, s:I, s:s, s:s, s:I, s:I, s:I, s:o, s:o, s:o, s:I, s:i, "
                       "s:{s:s, s:i, s:I, s:I, s:s, s:I, s:I, s:i}, s?o}",
                       "app_code", &app, "room_id", &room_id, "owner_uid", &owner, "title", &title,
                       "status", &status, "version", &version, "created_at_ms", &created,
                       "updated_at_ms", &updated, "members", &members, "seats", &seats, "bans",
                       &bans, "gift_total", &gift_total, "member_count", &member_count, "rocket",
                       "status", &rstatus, "level", &level, "energy", &energy, "utc_day", &utc_day,
                       "rocket_id", &rocket_id, "ignited_at_ms", &ignited_at, "launch_at_ms",
                       &launch_at, "launched", &launched, "rules", &rules) != 0)
        goto fail;
    if (!json_is_array(members) || !json_is_array(seats) || !json_is_array(bans) ||
        json_array_size(seats) > ROOM_MAX_SEATS)
        goto fail;
    s = room_state_new(app, room_id);
    if (strlen(app) >= sizeof(s->app_code) || strlen(room_id) >= sizeof(s->room_id) ||
        copy_str(s->title, sizeof(s->title), title) != 0 ||
        copy_str(s->rocket.rocket_id, sizeof(s->rocket.rocket_id), rocket_id) != 0)
        goto fail;
    if ((si = name_index(status, room_status_names, 2)) < 0)
        goto fail;
    s->status = (enum room_status)si;
    if ((si = name_index(rstatus, rocket_status_names, 3)) < 0)
        goto fail;
    s->rocket.status = (enum rocket_status)si;
    s->owner_uid = owner;
    s->version = version;
    s->created_at_ms = created;
    s->updated_at_ms = updated;
    s->gift_total = gift_total;
    s->rocket.level = level;
    s->rocket.energy = energy;
    s->rocket.utc_day = utc_day;
    s->rocket.ignited_at_ms = ignited_at;
    s->rocket.launch_at_ms = launch_at;
    s->rocket.launched = launched;
    if (rules != NULL) {
        if (room_rules_from_json(rules, &s->rules) != 0)
            goto fail;
        s->has_rules = true;
    }

    s->nmembers = s->cap_members = json_array_size(members);
    s->members = s->nmembers ? xcalloc(s->nmembers, sizeof(*s->members)) : NULL;
    json_array_foreach(members, i, v)
    {
        if (uid_pair(v, "joined_at_ms", &s->members[i].uid, &s->members[i].joined_at_ms) != 0)
            goto fail;
    }
    if ((size_t)member_count != s->nmembers)
        goto fail;
    s->nseats = (int)json_array_size(seats);
    json_array_foreach(seats, i, v)
    {
        if (!json_is_integer(v))
            goto fail;
        s->seats[i] = json_integer_value(v);
    }
    s->nbans = s->cap_bans = json_array_size(bans);
    s->bans = s->nbans ? xcalloc(s->nbans, sizeof(*s->bans)) : NULL;
    json_array_foreach(bans, i, v)
    {
        if (uid_pair(v, "until_ms", &s->bans[i].uid, &s->bans[i].until_ms) != 0)
            goto fail;
    }
    json_decref(root);
    *out = s;
    return 0;
fail:
    room_state_free(s);
    json_decref(root);
    return ROOMD_EINVAL;
}

_Static_assert(PROJ_ID_MAX == STORE_ID_MAX, "projection ids hold a room's ids");
_Static_assert(PROJ_TITLE_MAX >= ROOM_TITLE_MAX, "a projected title holds a room's title");

void
room_state_project(const struct room_state *st, struct proj_room *out)
{
    memset(out, 0, sizeof(*out));
    strlcpy_(out->app, st->app_code, sizeof(out->app));
    strlcpy_(out->room_id, st->room_id, sizeof(out->room_id));
    strlcpy_(out->title, st->title, sizeof(out->title));
    out->owner_uid = st->owner_uid;
    out->version = st->version;
    out->updated_at_ms = st->updated_at_ms;
    out->gift_total = st->gift_total;
    out->closed = st->status == ROOM_CLOSED;
    out->online = out->closed ? 0 : (int)st->nmembers;
    if (!out->closed && st->nmembers > 0) {
        out->uids = xcalloc(st->nmembers, sizeof(int64_t));
        out->joined_ms = xcalloc(st->nmembers, sizeof(int64_t));
        for (size_t i = 0; i < st->nmembers; i++) {
            out->uids[i] = st->members[i].uid;
            out->joined_ms[i] = st->members[i].joined_at_ms;
        }
        out->nuids = st->nmembers;
    }
}

int
room_state_update_projection(struct projection *p, const struct room_state *st)
{
    struct proj_room r;
    int rc;

    room_state_project(st, &r);
    rc = p->ops->update(p, &r);
    proj_room_clear(&r);
    return rc;
}
