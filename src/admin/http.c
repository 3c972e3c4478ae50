/* SPDX-License-Identifier: Apache-2.0 */
/* admin/http.c: the admin routes and the console files (see admin/http.h). */
#include "admin/http.h"

#include "admin/internal.h"
#include "admin/nodes.h"

#include "core/xmalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define API "/admin/v1/"

static void
reply(struct admin_http_reply *out, int status, const char *body)
{
    out->r.status = status;
    out->r.body = xstrdup(body);
}

bool
admin_http_is_console(const char *path)
{
    return strcmp(path, "/console") == 0 || strncmp(path, "/console/", 9) == 0;
}

/* A console file by name ("" = index.html). */
static void
console(const char *name, struct admin_http_reply *out)
{
    if (*name == '\0')
        name = "index.html";
    for (const struct admin_console_file *f = admin_console_files; f->name != NULL; f++)
        if (strcmp(f->name, name) == 0) {
            out->r.status = 200;
            out->r.body = xmalloc(f->len + 1);
            memcpy(out->r.body, f->data, f->len);
            out->r.body[f->len] = '\0';
            out->content_type = f->type;
            return;
        }
    reply(out, 404, "{\"error\":{\"code\":\"not_found\",\"message\":\"no such console file\"}}");
}

/* A positive decimal id, or 0. */
static long long
parse_id(const char *s)
{
    char *end;
    long long v = strtoll(s, &end, 10);
    return *s != '\0' && *end == '\0' && v > 0 ? v : 0;
}

/* What a route does once matched. */
enum admin_kind {
    A_CONSOLE,
    A_SUMMARY,
    A_LIST,
    A_REPLAY,
    A_SHOW,
    A_AUDITS,
    A_AUDIT,
    A_DLQ_LIST,
    A_DLQ_SHOW,
    A_DLQ_REPLAY,
    A_DLQ_DISCARD,
    A_DLQ_PURGE,
    A_DLQ_BULK_REPLAY,
    A_DLQ_BULK_DISCARD,
    A_NODE,
    A_NODES,
};

/*
 * The admin listener's own routes: the whole admin API and the console. A
 * "{name}" segment captures one non-empty segment; a literal path wins over
 * a pattern (outbox/summary is not outbox/{event_id}). A GET also answers
 * HEAD. Known path, other method: 405 with Allow. id names the captured
 * segment when it must be a positive integer (a 400 naming it otherwise).
 */
static const struct admin_route {
    const char *method;
    const char *pattern;
    enum admin_kind kind;
    const char *id;
} routes[] = {
    {"GET", "/console", A_CONSOLE, NULL},
    {"GET", "/console/", A_CONSOLE, NULL},
    {"GET", "/console/{file}", A_CONSOLE, NULL},
    {"GET", API "outbox/summary", A_SUMMARY, NULL},
    {"GET", API "outbox", A_LIST, NULL},
    {"POST", API "outbox/replay", A_REPLAY, NULL},
    {"GET", API "outbox/{event_id}", A_SHOW, NULL},
    {"GET", API "audit", A_AUDITS, NULL},
    {"GET", API "audit/{id}", A_AUDIT, "id"},
    {"GET", API "dlq", A_DLQ_LIST, NULL},
    {"GET", API "dlq/{seq}", A_DLQ_SHOW, "seq"},
    {"POST", API "dlq/{seq}/replay", A_DLQ_REPLAY, "seq"},
    {"POST", API "dlq/{seq}/discard", A_DLQ_DISCARD, "seq"},
    {"POST", API "dlq/replay", A_DLQ_BULK_REPLAY, NULL},
    {"POST", API "dlq/discard", A_DLQ_BULK_DISCARD, NULL},
    {"POST", API "dlq/purge", A_DLQ_PURGE, NULL},
    {"GET", API "node", A_NODE, NULL},
    {"GET", API "nodes", A_NODES, NULL},
};
#define NROUTES (sizeof(routes) / sizeof(routes[0]))

/* True when path matches pattern; cap gets the captured segment ("" if none). */
static bool
match(const char *pattern, const char *path, char *cap, size_t capsz)
{
    cap[0] = '\0';
    while (*pattern != '\0' && *path != '\0') {
        if (*pattern == '{') {
            size_t n = strcspn(path, "/");
            if (n == 0)
                return false;
            snprintf(cap, capsz, "%.*s", (int)n, path);
            pattern += strcspn(pattern, "/");
            path += n;
        } else if (*pattern++ != *path++) {
            return false;
        }
    }
    return *pattern == '\0' && *path == '\0';
}

/* True when route r answers method: its own, and HEAD where it is GET. */
static bool
serves(const struct admin_route *r, const char *method)
{
    return strcmp(r->method, method) == 0 ||
           (strcmp(method, "HEAD") == 0 && strcmp(r->method, "GET") == 0);
}

/* A captured id segment that must be a positive integer: false and a 400
 * naming field when it is not. */
static bool
id_of(const char *cap, const char *field, long long *id, struct admin_http_reply *out)
{
    char body[160];

    if ((*id = parse_id(cap)) != 0)
        return true;
    snprintf(body, sizeof(body),
             "{\"error\":{\"code\":\"invalid_argument\",\"field\":\"%s\","
             "\"message\":\"%s: want a positive integer\"}}",
             field, field);
    reply(out, 400, body);
    return false;
}

static void
dispatch(struct admin *a, const struct admin_route *r, const char *cap, admin_lookup_fn q,
         void *ctx, const char *body, size_t len, const char *actor, struct admin_http_reply *out)
{
    long long id = 0;

    if (r->kind == A_CONSOLE) {
        console(cap, out);
        return;
    }
    if (a == NULL) {
        reply(out, 503, "{\"error\":{\"code\":\"unavailable\",\"message\":\"no admin store\"}}");
        return;
    }
    if (r->id != NULL && !id_of(cap, r->id, &id, out))
        return;
    switch (r->kind) {
    case A_SUMMARY:
        admin_summary(a, &out->r);
        break;
    case A_LIST:
        admin_list(a, q, ctx, &out->r);
        break;
    case A_REPLAY:
        admin_replay(a, actor, body, len, NULL, NULL, &out->r);
        break;
    case A_SHOW:
        admin_show(a, cap, &out->r);
        break;
    case A_AUDITS:
        admin_audits(a, q, ctx, &out->r);
        break;
    case A_AUDIT:
        admin_audit(a, id, q, ctx, &out->r);
        break;
    case A_DLQ_LIST:
        admin_dlq_list(a, q, ctx, &out->r);
        break;
    case A_DLQ_SHOW:
        admin_dlq_show(a, (uint64_t)id, &out->r);
        break;
    case A_DLQ_REPLAY:
        admin_dlq_replay(a, actor, (uint64_t)id, &out->r);
        break;
    case A_DLQ_DISCARD:
        admin_dlq_discard(a, actor, (uint64_t)id, &out->r);
        break;
    case A_DLQ_PURGE:
        admin_dlq_purge(a, actor, body, len, &out->r);
        break;
    case A_DLQ_BULK_REPLAY:
    case A_DLQ_BULK_DISCARD:
        admin_dlq_bulk(a, actor, r->kind == A_DLQ_BULK_REPLAY ? "replay" : "discard", body, len,
                       &out->r);
        break;
    case A_NODE:
        admin_nodes_self(a->nodes, q, ctx, &out->r);
        break;
    case A_NODES:
        admin_nodes_list(a->nodes, q, ctx, &out->r);
        break;
    case A_CONSOLE:
        break;
    }
}

bool
admin_http_route(struct admin *a, const char *method, const char *path, admin_lookup_fn q,
                 void *ctx, const char *body, size_t len, const char *actor,
                 struct admin_http_reply *out)
{
    char cap[128];

    memset(out, 0, sizeof(*out));
    /* literal paths first, then patterns: outbox/summary is not outbox/{event_id} */
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < NROUTES; i++) {
            const struct admin_route *r = &routes[i];
            if ((strchr(r->pattern, '{') == NULL) != (pass == 0) ||
                !match(r->pattern, path, cap, sizeof(cap)))
                continue;
            if (serves(r, method)) {
                out->allow = NULL;
                dispatch(a, r, cap, q, ctx, body, len, actor, out);
                return true;
            }
            out->allow = strcmp(r->method, "GET") == 0 ? "GET, HEAD" : r->method;
        }
        if (out->allow != NULL) {
            reply(out, 405,
                  "{\"error\":{\"code\":\"method_not_allowed\",\"message\":\"see Allow\"}}");
            return true;
        }
    }
    return false;
}

void
admin_http_write_routes(FILE *out)
{
    for (size_t i = 0; i < NROUTES; i++) {
        fprintf(out, "%s %s admin\n", routes[i].method, routes[i].pattern);
        if (strcmp(routes[i].method, "GET") == 0)
            fprintf(out, "HEAD %s admin\n", routes[i].pattern);
    }
}
