/* admin/http.c: the admin routes and the console files (see admin/http.h). */
#include "admin/http.h"

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

static bool
method_is(struct admin_http_reply *out, const char *method, const char *want)
{
    if (strcmp(method, want) == 0)
        return true;
    out->allow = want;
    reply(out, 405, "{\"error\":{\"code\":\"method_not_allowed\",\"message\":\"see Allow\"}}");
    return false;
}

bool
admin_http_is_console(const char *path)
{
    return strcmp(path, "/console") == 0 || strncmp(path, "/console/", 9) == 0;
}

static bool
console(const char *method, const char *path, struct admin_http_reply *out)
{
    const char *name = strcmp(path, "/console") == 0 || strcmp(path, "/console/") == 0
                           ? "index.html"
                           : path + strlen("/console/");

    if (!method_is(out, method, "GET"))
        return true;
    for (const struct admin_console_file *f = admin_console_files; f->name != NULL; f++)
        if (strcmp(f->name, name) == 0) {
            out->r.status = 200;
            out->r.body = xmalloc(f->len + 1);
            memcpy(out->r.body, f->data, f->len);
            out->r.body[f->len] = '\0';
            out->content_type = f->type;
            return true;
        }
    reply(out, 404, "{\"error\":{\"code\":\"not_found\",\"message\":\"no such console file\"}}");
    return true;
}

/* A positive decimal id, or 0. */
static long long
parse_id(const char *s)
{
    char *end;
    long long v = strtoll(s, &end, 10);
    return *s != '\0' && *end == '\0' && v > 0 ? v : 0;
}

/* GET dlq/{seq} and POST dlq/{seq}/replay. */
static void
dlq(struct admin *a, const char *method, const char *tail, const char *actor,
    struct admin_http_reply *out)
{
    char seqs[32];
    size_t n = strcspn(tail, "/");
    const char *after = tail + n;
    long long seq;

    snprintf(seqs, sizeof(seqs), "%.*s", (int)(n < 31 ? n : 31), tail);
    if ((seq = parse_id(seqs)) == 0) {
        reply(out, 400,
              "{\"error\":{\"code\":\"invalid_argument\",\"field\":\"seq\","
              "\"message\":\"seq: want a positive integer\"}}");
    } else if (*after == '\0') {
        if (method_is(out, method, "GET"))
            admin_dlq_show(a, (uint64_t)seq, &out->r);
    } else if (strcmp(after, "/replay") == 0) {
        if (method_is(out, method, "POST"))
            admin_dlq_replay(a, actor, (uint64_t)seq, &out->r);
    } else {
        reply(out, 404, "{\"error\":{\"code\":\"not_found\",\"message\":\"no such route\"}}");
    }
}

bool
admin_http_route(struct admin *a, const char *method, const char *path, admin_lookup_fn q,
                 void *ctx, const char *body, size_t len, const char *actor,
                 struct admin_http_reply *out)
{
    memset(out, 0, sizeof(*out));
    if (admin_http_is_console(path))
        return console(method, path, out);
    if (strncmp(path, API, strlen(API)) != 0)
        return false;
    const char *rest = path + strlen(API);
    if (a == NULL) {
        reply(out, 503, "{\"error\":{\"code\":\"unavailable\",\"message\":\"no admin store\"}}");
        return true;
    }
    if (strcmp(rest, "outbox/summary") == 0) {
        if (method_is(out, method, "GET"))
            admin_summary(a, &out->r);
    } else if (strcmp(rest, "outbox") == 0) {
        if (method_is(out, method, "GET"))
            admin_list(a, q, ctx, &out->r);
    } else if (strcmp(rest, "outbox/replay") == 0) {
        if (method_is(out, method, "POST"))
            admin_replay(a, actor, body, len, NULL, NULL, &out->r);
    } else if (strncmp(rest, "outbox/", 7) == 0 && strchr(rest + 7, '/') == NULL) {
        if (method_is(out, method, "GET"))
            admin_show(a, rest + 7, &out->r);
    } else if (strcmp(rest, "audit") == 0) {
        if (method_is(out, method, "GET"))
            admin_audits(a, q, ctx, &out->r);
    } else if (strncmp(rest, "audit/", 6) == 0) {
        long long id = parse_id(rest + 6);
        if (id == 0)
            reply(out, 400,
                  "{\"error\":{\"code\":\"invalid_argument\",\"field\":\"id\","
                  "\"message\":\"id: want a positive integer\"}}");
        else if (method_is(out, method, "GET"))
            admin_audit(a, id, q, ctx, &out->r);
    } else if (strcmp(rest, "dlq") == 0) {
        if (method_is(out, method, "GET"))
            admin_dlq_list(a, q, ctx, &out->r);
    } else if (strncmp(rest, "dlq/", 4) == 0) {
        dlq(a, method, rest + 4, actor, out);
    } else {
        return false;
    }
    return true;
}
