/* SPDX-License-Identifier: Apache-2.0 */
/*
 * roomctl.c: the operator CLI (roomctl(8), docs/admin.md). One command from a
 * table, as OpenSMTPD's smtpctl does. The outbox and audit commands are the
 * admin module's operations (admin/admin.h): with --url they go to roomd's
 * admin API (the token from --token-file or $ROOMD_ADMIN_TOKEN), else to the
 * store the config names, opened read-only for inspection (nothing is ever
 * created or migrated by summary, list, show, audit or a dry run). The
 * wallet commands (balance, topup, audit) and migrate use the room store.
 *
 *   roomctl -c /etc/roomd/roomd.yaml outbox list --status failed --sink tim
 *   roomctl --url http://127.0.0.1:8081 outbox replay --status failed --dry-run
 *
 * Output is a table for people, or the API's JSON with --json. Exit status:
 * 0 done, 1 failed (config, store, server, not found, refused), 2 usage
 * error (also a 400 from the server).
 */
#include "admin/admin.h"
#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/version.h"
#include "core/xmalloc.h"
#include "publish/bus.h"
#include "rocketmq/client.h"
#include "store/store.h"
#include "wallet/audit.h"
#include "wallet/wallet.h"

#include <curl/curl.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef ROOMD_DEFAULT_CONFIG
#define ROOMD_DEFAULT_CONFIG "/etc/roomd/roomd.yaml"
#endif

#define EXIT_FAILED 1
#define EXIT_USAGE 2
#define MAX_KV 16

/* What a command opens before it runs. */
enum need {
    NEED_NOTHING,  /* only with --url, or nothing at all */
    NEED_ADMIN_RO, /* the admin store read-only (inspection, dry runs) */
    NEED_ADMIN_RW, /* the admin store read-write (replays) */
    NEED_STORE,    /* the room store (wallet, migrate: may create it) */
    NEED_BUS,      /* the admin store read-write and the broker (consumer dead letters) */
    NEED_GIFTS,    /* the admin API with --url (GET/POST /v1/gifts), else the room store */
};

/* Option groups a command accepts. */
#define OPT_FILTER (1u << 0) /* --status --sink --event-type ... */
#define OPT_PAGE (1u << 1)   /* --after --limit */
#define OPT_BEFORE (1u << 2) /* --before --limit */
#define OPT_REPLAY (1u << 3) /* --dry-run --repair --chunk --sample */
#define OPT_APP (1u << 4)    /* --app (wallet) */
#define OPT_GROUP (1u << 5)  /* --group (dlq) */
#define OPT_DLQ (1u << 6)    /* the dead-letter filter: --group --event-type --room --reason ... */

struct ctl {
    const char *config;
    struct conf *conf;
    const char *url; /* the admin API, or NULL: the store */
    char token[512];
    bool json;
    struct admin *adm;
    struct store *store;
    struct bus *bus;
    struct rmq_client *rmq; /* the rocketmq driver's dead letters */
    /* the command's options as query keys (filter, after, limit, before) */
    const char *k[MAX_KV], *v[MAX_KV];
    int nkv;
    bool has_filter, dry_run, repair;
    int chunk, sample;
    const char *app;
};

struct ctl_cmd {
    const char *words[3]; /* the command's words, NULL-terminated */
    int nargs_min, nargs_max;
    enum need need;
    unsigned opts;
    int (*run)(struct ctl *c, int argc, char **argv);
    const char *usage;
};

/* ==== the two back ends: the admin module, or the admin API ==== */

static const char *
kv_get(void *ctx, const char *key)
{
    struct ctl *c = ctx;
    for (int i = 0; i < c->nkv; i++)
        if (strcmp(c->k[i], key) == 0)
            return c->v[i];
    return NULL;
}

static size_t
on_body(char *p, size_t size, size_t n, void *arg)
{
    struct admin_reply *r = arg;
    size_t len = r->body ? strlen(r->body) : 0, add = size * n;

    r->body = xrealloc(r->body, len + add + 1);
    memcpy(r->body + len, p, add);
    r->body[len + add] = '\0';
    return add;
}

/* method path (with the options as its query string when query) on the admin
 * API; body (may be NULL) is sent as JSON. Fills r; a transport failure is
 * status 0 with the reason in r->body. */
static void
api(struct ctl *c, const char *method, const char *path, bool query, const char *body,
    struct admin_reply *r)
{
    CURL *h = curl_easy_init();
    struct curl_slist *hdr = NULL;
    char auth[600], errbuf[CURL_ERROR_SIZE] = "";
    size_t cap = strlen(c->url) + strlen(path) + 16;
    char *url = xmalloc(cap);
    long status = 0;

    snprintf(url, cap, "%s%s", c->url, path);
    for (int i = 0; query && i < c->nkv; i++) {
        char *ek = curl_easy_escape(h, c->k[i], 0), *ev = curl_easy_escape(h, c->v[i], 0);
        size_t need = strlen(url) + strlen(ek) + strlen(ev) + 3;
        url = xrealloc(url, need);
        snprintf(url + strlen(url), need - strlen(url), "%c%s=%s", i ? '&' : '?', ek, ev);
        curl_free(ek);
        curl_free(ev);
    }
    memset(r, 0, sizeof(*r));
    hdr = curl_slist_append(hdr, "Content-Type: application/json");
    if (c->token[0]) {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", c->token);
        hdr = curl_slist_append(hdr, auth);
    }
    if (c->app != NULL) { /* --app of the gifts commands */
        char app[96];
        snprintf(app, sizeof(app), "X-App-Code: %.64s", c->app);
        hdr = curl_slist_append(hdr, app);
    }
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    if (body != NULL)
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 30L * 60 * 1000); /* a big bulk replay */
    CURLcode cc = curl_easy_perform(h);
    if (cc == CURLE_OK) {
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        r->status = (int)status;
    } else {
        free(r->body);
        r->body = xasprintf("%s: %s", c->url, errbuf[0] ? errbuf : curl_easy_strerror(cc));
    }
    curl_slist_free_all(hdr);
    curl_easy_cleanup(h);
    free(url);
}

/* A progress bar on the terminal: rows, rows/s, ETA. */
struct bar {
    int64_t t0;
    bool on;
};

static void
progress(void *arg, int64_t done, int64_t total)
{
    struct bar *b = arg;
    double s = (double)(clock_mono_us() - b->t0) / 1e6;
    double rate = s > 0 ? (double)done / s : 0;
    int width = 30, fill = total > 0 ? (int)(width * done / total) : width;
    char eta[32] = "-";

    if (!b->on)
        return;
    if (rate > 0 && total > done)
        snprintf(eta, sizeof(eta), "%.0fs", (double)(total - done) / rate);
    printf("\r[%.*s%*s] %" PRId64 "/%" PRId64 " rows  %.0f rows/s  ETA %s   ", fill,
           "##############################", width - fill, "", done, total, rate, eta);
    fflush(stdout);
}

/* ==== replies ==== */

static void
fmt_time(int64_t ms, char *buf, size_t len)
{
    if (ms <= 0)
        snprintf(buf, len, "-");
    else
        clock_format_utc(ms, buf, len);
}

static const char *
jstr(json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "-";
}

static int64_t
jint(json_t *o, const char *k)
{
    return json_integer_value(json_object_get(o, k));
}

/* Ends a command on reply r: on 200 prints it (print, or the JSON with
 * --json) and returns 0; else says why on stderr and returns 1 (2 for a 400). */
static int
finish(struct ctl *c, struct admin_reply *r, void (*print)(struct ctl *c, json_t *j))
{
    json_t *j = r->body ? json_loads(r->body, 0, NULL) : NULL;
    int rc = 0;

    if (r->status == 200 && j != NULL) {
        if (c->json)
            printf("%s\n", r->body);
        else
            print(c, j);
    } else if (r->status == 0) {
        fprintf(stderr, "roomctl: %s\n", r->body ? r->body : "no answer");
        rc = EXIT_FAILED;
    } else {
        json_t *e = json_object_get(j, "error");
        if (c->json && r->body)
            printf("%s\n", r->body);
        fprintf(stderr, "roomctl: %d %s: %s\n", r->status, jstr(e, "code"),
                e ? jstr(e, "message") : (r->body ? r->body : ""));
        rc = r->status == 400 ? EXIT_USAGE : EXIT_FAILED;
    }
    json_decref(j);
    admin_reply_clear(r);
    return rc;
}

/* ==== outbox ==== */

static void
print_summary(struct ctl *c, json_t *j)
{
    json_t *st = json_object_get(j, "by_status"), *sinks = json_object_get(j, "sinks"), *v;
    const char *k;

    json_object_foreach(st, k, v) printf("%-11s %" PRId64 "\n", k, (int64_t)json_integer_value(v));
    printf("oldest_undelivered_s %.3f\n",
           json_real_value(json_object_get(j, "oldest_undelivered_s")));
    if (json_object_size(sinks) > 0)
        printf("%-10s %12s %8s %20s\n", "SINK", "UNDELIVERED", "FAILED", "OLDEST_UNDELIVERED_S");
    json_object_foreach(sinks, k, v)
        printf("%-10s %12" PRId64 " %8" PRId64 " %20.3f\n", k, jint(v, "undelivered"),
               jint(v, "failed"), json_real_value(json_object_get(v, "oldest_undelivered_s")));
}

static int
do_summary(struct ctl *c, int argc, char **argv)
{
    struct admin_reply r;

    if (c->url)
        api(c, "GET", "/admin/v1/outbox/summary", false, NULL, &r);
    else
        admin_summary(c->adm, &r);
    return finish(c, &r, print_summary);
}

static void
print_rows(struct ctl *c, json_t *j)
{
    json_t *rows = json_object_get(j, "rows"), *r;
    size_t i;

    printf("%-8s %-36s %-10s %-7s %-18s %-28s %-24s %s\n", "ID", "EVENT_ID", "STATUS", "RETRIES",
           "EVENT_TYPE", "ROOM@VERSION", "CREATED", "LAST_ERROR");
    json_array_foreach(rows, i, r)
    {
        char room[160], created[32];
        snprintf(room, sizeof(room), "%s/%s@%" PRId64, jstr(r, "app_code"), jstr(r, "room_id"),
                 jint(r, "room_version"));
        fmt_time(jint(r, "created_at_ms"), created, sizeof(created));
        printf("%-8" PRId64 " %-36s %-10s %-7" PRId64 " %-18s %-28s %-24s %s\n", jint(r, "id"),
               jstr(r, "event_id"), jstr(r, "status"), jint(r, "retry_count"),
               jstr(r, "event_type"), room, created, jstr(r, "last_error"));
    }
    if (json_is_integer(json_object_get(j, "next_after")))
        printf("# more: --after %" PRId64 "\n", jint(j, "next_after"));
}

static int
do_list(struct ctl *c, int argc, char **argv)
{
    struct admin_reply r;

    if (c->url)
        api(c, "GET", "/admin/v1/outbox", true, NULL, &r);
    else
        admin_list(c->adm, kv_get, c, &r);
    return finish(c, &r, print_rows);
}

static void
print_one(struct ctl *c, json_t *j)
{
    static const char *const times[] = {"created_at_ms", "next_retry_at_ms", "delivered_at_ms"};
    json_t *sinks = json_object_get(j, "sinks"), *v, *ev = json_object_get(j, "event");
    const char *k;
    char ts[32];

    printf("id             %" PRId64 "\nevent_id       %s\nevent_type     %s\n"
           "app_code       %s\nroom_id        %s\nroom_version   %" PRId64 "\n"
           "command_id     %s\nstatus         %s\nretry_count    %" PRId64 "\n",
           jint(j, "id"), jstr(j, "event_id"), jstr(j, "event_type"), jstr(j, "app_code"),
           jstr(j, "room_id"), jint(j, "room_version"), jstr(j, "command_id"), jstr(j, "status"),
           jint(j, "retry_count"));
    for (size_t i = 0; i < 3; i++) {
        fmt_time(jint(j, times[i]), ts, sizeof(ts));
        printf("%-14.*s %s\n", (int)(strlen(times[i]) - 3), times[i], ts);
    }
    printf("last_error     %s\n", jstr(j, "last_error"));
    json_object_foreach(sinks, k, v) printf("sink           %s %s\n", k, json_string_value(v));
    if (json_is_object(ev)) {
        char *pretty = json_dumps(ev, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        printf("event:\n%s\n", pretty);
        free(pretty);
    } else {
        printf("event          <poison: %s>\n", jstr(j, "event_error"));
    }
}

static int
do_show(struct ctl *c, int argc, char **argv)
{
    struct admin_reply r;
    char path[128];

    if (c->url) {
        snprintf(path, sizeof(path), "/admin/v1/outbox/%.40s", argv[0]);
        api(c, "GET", path, false, NULL, &r);
    } else {
        admin_show(c->adm, argv[0], &r);
    }
    return finish(c, &r, print_one);
}

static void
print_replay(struct ctl *c, json_t *j)
{
    json_t *sample = json_object_get(j, "sample"), *x;
    size_t i;

    if (json_is_true(json_object_get(j, "dry_run"))) {
        printf("dry run: %s would take %" PRId64 " failed rows\n",
               json_is_true(json_object_get(j, "repair")) ? "a repair" : "a replay",
               jint(j, "count"));
        json_array_foreach(sample, i, x)
            printf("  %s %-18s %s/%s %s\n", jstr(x, "event_id"), jstr(x, "event_type"),
                   jstr(x, "app_code"), jstr(x, "room_id"), jstr(x, "last_error"));
        return;
    }
    printf("%s %" PRId64 " rows: failed -> pending%s (audit #%" PRId64 ")\n",
           json_is_true(json_object_get(j, "repair")) ? "repaired" : "replayed",
           jint(j, "replayed"),
           json_is_true(json_object_get(j, "repair")) ? " as new events" : ", same event_ids",
           jint(j, "audit_id"));
}

/* The replay body of the command's options. */
static char *
replay_body(struct ctl *c)
{
    json_t *f = json_object();

    for (int i = 0; i < c->nkv; i++) {
        const char *k = c->k[i];
        bool is_time = strstr(k, "_after") != NULL || strstr(k, "_before") != NULL;
        json_object_set_new(
            f, k, is_time ? json_integer(strtoll(c->v[i], NULL, 10)) : json_string(c->v[i]));
    }
    json_t *o =
        json_pack("{s:o, s:b, s:b}", "filter", f, "dry_run", c->dry_run, "repair", c->repair);
    if (c->chunk > 0)
        json_object_set_new(o, "chunk", json_integer(c->chunk));
    if (c->sample >= 0)
        json_object_set_new(o, "sample", json_integer(c->sample));
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

/* Checks that event_id exists and is failed; prints why not and returns 1. */
static int
check_replayable(struct ctl *c, const char *event_id)
{
    struct admin_reply r;
    char path[128];
    int rc = 0;

    if (c->url) {
        snprintf(path, sizeof(path), "/admin/v1/outbox/%.40s", event_id);
        api(c, "GET", path, false, NULL, &r);
    } else {
        admin_show(c->adm, event_id, &r);
    }
    json_t *j = r.status == 200 ? json_loads(r.body, 0, NULL) : NULL;
    if (r.status == 404) {
        fprintf(stderr, "roomctl: outbox replay: no event %s\n", event_id);
        rc = EXIT_FAILED;
    } else if (j == NULL) {
        finish(c, &r, print_one); /* says why */
        return EXIT_FAILED;
    } else if (strcmp(jstr(j, "status"), "failed") != 0) {
        fprintf(stderr,
                "roomctl: outbox replay: event %s is %s, not failed; only failed events are "
                "replayed\n",
                event_id, jstr(j, "status"));
        rc = EXIT_FAILED;
    }
    json_decref(j);
    admin_reply_clear(&r);
    return rc;
}

static int
do_replay(struct ctl *c, int argc, char **argv)
{
    struct admin_reply r;
    struct bar bar = {.t0 = clock_mono_us(), .on = isatty(1) && !c->json && !c->dry_run};
    int rc;

    if (argc == 1) { /* one event: the filter is its event_id */
        if (c->has_filter) {
            fprintf(stderr, "roomctl: outbox replay: an EVENT_ID or filter options, not both\n");
            return EXIT_USAGE;
        }
        if ((rc = check_replayable(c, argv[0])) != 0)
            return rc;
        c->k[c->nkv] = "event_id";
        c->v[c->nkv++] = argv[0];
    } else if (!c->has_filter) {
        fprintf(stderr, "roomctl: outbox replay: give an EVENT_ID or a filter (e.g. --status "
                        "failed); every failed row is --status failed\n");
        return EXIT_USAGE;
    }
    char *body = replay_body(c);
    if (c->url)
        api(c, "POST", "/admin/v1/outbox/replay", false, body, &r);
    else
        admin_replay(c->adm, "roomctl", body, strlen(body), progress, &bar, &r);
    free(body);
    if (bar.on)
        printf("\n");
    return finish(c, &r, print_replay);
}

/* ==== audit ==== */

static void
print_audits(struct ctl *c, json_t *j)
{
    json_t *arr = json_object_get(j, "audits"), *a;
    size_t i;

    printf("%-6s %-16s %-7s %-8s %8s %-24s %s\n", "ID", "ACTOR", "ACTION", "STATE", "COUNT",
           "CREATED", "FILTER");
    json_array_foreach(arr, i, a)
    {
        char created[32];
        char *f = json_dumps(json_object_get(a, "filter"), JSON_COMPACT | JSON_SORT_KEYS);
        fmt_time(jint(a, "created_at_ms"), created, sizeof(created));
        printf("%-6" PRId64 " %-16s %-7s %-8s %8" PRId64 " %-24s %s\n", jint(a, "id"),
               jstr(a, "actor"), jstr(a, "action"), jstr(a, "state"), jint(a, "count"), created,
               f ? f : "{}");
        free(f);
    }
    if (json_is_integer(json_object_get(j, "next_before")))
        printf("# more: --before %" PRId64 "\n", jint(j, "next_before"));
}

static int
do_audits(struct ctl *c, int argc, char **argv)
{
    struct admin_reply r;

    if (c->url)
        api(c, "GET", "/admin/v1/audit", true, NULL, &r);
    else
        admin_audits(c->adm, kv_get, c, &r);
    return finish(c, &r, print_audits);
}

static void
print_audit(struct ctl *c, json_t *j)
{
    json_t *rows = json_object_get(j, "rows"), *x;
    char *f = json_dumps(json_object_get(j, "filter"), JSON_COMPACT | JSON_SORT_KEYS);
    char created[32], finished[32];
    size_t i;

    fmt_time(jint(j, "created_at_ms"), created, sizeof(created));
    fmt_time(jint(j, "finished_at_ms"), finished, sizeof(finished));
    printf("id        %" PRId64 "\nactor     %s\naction    %s\nstate     %s\ncount     %" PRId64
           "\nfilter    %s\ncreated   %s\nfinished  %s\n",
           jint(j, "id"), jstr(j, "actor"), jstr(j, "action"), jstr(j, "state"), jint(j, "count"),
           f ? f : "{}", created, finished);
    free(f);
    json_array_foreach(rows, i, x)
    {
        if (json_object_get(x, "new_event_id"))
            printf("  %-8" PRId64 " %s -> %s\n", jint(x, "id"), jstr(x, "event_id"),
                   jstr(x, "new_event_id"));
        else
            printf("  %-8" PRId64 " %s\n", jint(x, "id"), jstr(x, "event_id"));
    }
    if (json_is_integer(json_object_get(j, "next_after")))
        printf("# more: --after %" PRId64 "\n", jint(j, "next_after"));
}

static int
do_audit(struct ctl *c, int argc, char **argv)
{
    struct admin_reply r;
    char path[64], *end;
    long long id = strtoll(argv[0], &end, 10);

    if (*end != '\0' || id <= 0) {
        fprintf(stderr, "roomctl: audit show: ID: want a positive integer\n");
        return EXIT_USAGE;
    }
    if (c->url) {
        snprintf(path, sizeof(path), "/admin/v1/audit/%lld", id);
        api(c, "GET", path, true, NULL, &r);
    } else {
        admin_audit(c->adm, id, kv_get, c, &r);
    }
    return finish(c, &r, print_audit);
}

/* ==== consumer dead letters ==== */

static void
print_dlq(struct ctl *c, json_t *j)
{
    json_t *arr = json_object_get(j, "messages"), *m;
    size_t i;

    printf("%-8s %-28s %-36s %-18s %-10s %s\n", "SEQ", "GROUP", "EVENT_ID", "EVENT_TYPE",
           "DELIVERIES", "REASON");
    json_array_foreach(arr, i, m)
    {
        /* the kit's reason (max_reconsume, ...) before the handler's error when both are
         * known (RocketMQ's %DLQ% messages carry no error text: "-") */
        const char *why = jstr(m, "reason"), *kind = jstr(m, "dead_reason");
        char reason[512];
        bool has_kind = strcmp(kind, "-") != 0 && *kind;
        if (has_kind && *why && strcmp(why, "-") != 0)
            snprintf(reason, sizeof(reason), "%s: %s", kind, why);
        else
            snprintf(reason, sizeof(reason), "%s", has_kind ? kind : why);
        printf("%-8" PRId64 " %-28s %-36s %-18s %-10" PRId64 " %s\n", jint(m, "seq"),
               jstr(m, "group"), jstr(m, "event_id"), jstr(m, "event_type"), jint(m, "deliveries"),
               reason);
    }
    if (json_is_integer(json_object_get(j, "next_after")))
        printf("# more: --after %" PRId64 "\n", jint(j, "next_after"));
}

static void
print_json(struct ctl *c, json_t *j)
{
    char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    printf("%s\n", s);
    free(s);
}

/* Prints j (a new reference, NULL: nothing) as print_json does and drops it. */
static void
emit_json(json_t *j)
{
    if (j == NULL)
        return;
    print_json(NULL, j);
    json_decref(j);
}

static int
do_dlq_list(struct ctl *c, int argc, char **argv)
{
    struct admin_reply r;

    if (c->url)
        api(c, "GET", "/admin/v1/dlq", true, NULL, &r);
    else
        admin_dlq_list(c->adm, kv_get, c, &r);
    return finish(c, &r, print_dlq);
}

/* What dlq_one does with one dead letter. */
enum dlq_verb { DLQ_SHOW, DLQ_REPLAY, DLQ_DISCARD };

/* verb on dead letter arg (its stream sequence). */
static int
dlq_one(struct ctl *c, const char *arg, enum dlq_verb verb)
{
    static const char *const tail[] = {"", "/replay", "/discard"};
    struct admin_reply r;
    char path[96], *end;
    long long seq = strtoll(arg, &end, 10);

    if (*end != '\0' || seq <= 0) {
        fprintf(stderr, "roomctl: dlq: SEQ: want a positive integer\n");
        return EXIT_USAGE;
    }
    if (c->url) {
        snprintf(path, sizeof(path), "/admin/v1/dlq/%lld%s", seq, tail[verb]);
        api(c, verb == DLQ_SHOW ? "GET" : "POST", path, false, verb == DLQ_SHOW ? NULL : "{}", &r);
    } else if (verb == DLQ_REPLAY) {
        admin_dlq_replay(c->adm, "roomctl", (uint64_t)seq, &r);
    } else if (verb == DLQ_DISCARD) {
        admin_dlq_discard(c->adm, "roomctl", (uint64_t)seq, &r);
    } else {
        admin_dlq_show(c->adm, (uint64_t)seq, &r);
    }
    return finish(c, &r, print_json);
}

static int
do_dlq_show(struct ctl *c, int argc, char **argv)
{
    return dlq_one(c, argv[0], DLQ_SHOW);
}

static int parse_i64(const char *s, const char *what, int64_t *out);

/* Prints a bulk answer: what matched and what was done. */
static void
print_bulk(struct ctl *c, json_t *j)
{
    printf("%s%s: %" PRId64 " matched, %" PRId64 " done, %" PRId64 " failed", jstr(j, "action"),
           json_is_true(json_object_get(j, "dry_run")) ? " (dry run)" : "", jint(j, "matched"),
           jint(j, "done"), jint(j, "failed"));
    if (json_is_integer(json_object_get(j, "audit_id")))
        printf(", audit %" PRId64, jint(j, "audit_id"));
    printf("\n");
    json_t *sample = json_pack("{s:O}", "messages", json_object_get(j, "sample"));
    print_dlq(c, sample);
    json_decref(sample);
}

/* dlq replay | discard | purge by filter (the command's options), or with
 * argv[0] (replay) one dead letter. */
static int
dlq_bulk(struct ctl *c, const char *action, int argc, char **argv)
{
    struct admin_reply r;
    char path[64];

    if (argc == 1 && !c->has_filter && c->nkv == 0)
        return dlq_one(c, argv[0], strcmp(action, "replay") == 0 ? DLQ_REPLAY : DLQ_DISCARD);
    if (argc != 0) {
        fprintf(stderr, "roomctl: dlq %s: SEQ or a filter, not both\n", action);
        return EXIT_USAGE;
    }
    json_t *f = json_object();
    for (int i = 0; i < c->nkv; i++) {
        int64_t ms;
        bool is_time = strncmp(c->k[i], "created_", 8) == 0;
        if (is_time && parse_i64(c->v[i], c->k[i], &ms) != 0) {
            json_decref(f);
            return EXIT_USAGE;
        }
        json_object_set_new(f, c->k[i], is_time ? json_integer(ms) : json_string(c->v[i]));
    }
    json_t *b = json_pack("{s:o, s:b}", "filter", f, "dry_run", c->dry_run);
    if (c->chunk > 0)
        json_object_set_new(b, "chunk", json_integer(c->chunk));
    char *body = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    if (c->url) {
        snprintf(path, sizeof(path), "/admin/v1/dlq/%s", action);
        api(c, "POST", path, false, body, &r);
    } else {
        admin_dlq_bulk(c->adm, "roomctl", action, body, strlen(body), &r);
    }
    free(body);
    return finish(c, &r, print_bulk);
}

static int
do_dlq_replay(struct ctl *c, int argc, char **argv)
{
    return dlq_bulk(c, "replay", argc, argv);
}

static int
do_dlq_discard(struct ctl *c, int argc, char **argv)
{
    return dlq_bulk(c, "discard", argc, argv);
}

static int
do_dlq_purge(struct ctl *c, int argc, char **argv)
{
    const char *group = kv_get(c, "group");
    struct admin_reply r;

    if (group == NULL || *group == '\0') {
        fprintf(stderr, "roomctl: dlq purge: --group G is required\n");
        return EXIT_USAGE;
    }
    json_t *b = json_pack("{s:s}", "group", group);
    char *body = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    if (c->url)
        api(c, "POST", "/admin/v1/dlq/purge", false, body, &r);
    else
        admin_dlq_purge(c->adm, "roomctl", body, strlen(body), &r);
    free(body);
    return finish(c, &r, print_json);
}

/* ==== wallet and migrate (the room store) ==== */

static int
parse_i64(const char *s, const char *name, int64_t *out)
{
    char *end;

    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0') {
        fprintf(stderr, "roomctl: %s: not an integer: \"%s\"\n", name, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int
store_fail(const char *what, int rc)
{
    const char *detail = store_errmsg();

    fprintf(stderr, "roomctl: %s: %s%s%s\n", what, roomd_strerror(rc), *detail ? ": " : "", detail);
    return EXIT_FAILED;
}

static int
do_wallet_balance(struct ctl *c, int argc, char **argv)
{
    int64_t uid, bal;
    int rc;

    if (parse_i64(argv[0], "UID", &uid) != 0)
        return EXIT_USAGE;
    rc = store_wallet_balance(c->store, c->app ? c->app : c->conf->app.default_app_code, uid,
                              c->conf->wallet.initial_balance, &bal);
    if (rc != 0)
        return store_fail("wallet balance", rc);
    if (c->json)
        emit_json(json_pack("{s:s, s:I, s:I}", "app",
                            c->app ? c->app : c->conf->app.default_app_code, "uid", (json_int_t)uid,
                            "balance", (json_int_t)bal));
    else
        printf("%" PRId64 "\n", bal);
    return 0;
}

static int
do_wallet_topup(struct ctl *c, int argc, char **argv)
{
    int64_t uid, amount, bal;
    int rc;

    if (parse_i64(argv[0], "UID", &uid) != 0 || parse_i64(argv[1], "AMOUNT", &amount) != 0)
        return EXIT_USAGE;
    if (amount <= 0) {
        fprintf(stderr, "roomctl: AMOUNT: must be > 0\n");
        return EXIT_USAGE;
    }
    rc = store_wallet_topup(c->store, c->app ? c->app : c->conf->app.default_app_code, uid, amount,
                            argv[2], c->conf->wallet.initial_balance, &bal);
    if (rc != 0)
        return store_fail("wallet topup", rc);
    if (c->json)
        emit_json(json_pack("{s:s, s:I, s:I, s:s}", "app",
                            c->app ? c->app : c->conf->app.default_app_code, "uid", (json_int_t)uid,
                            "balance", (json_int_t)bal, "ref", argv[2]));
    else
        printf("%" PRId64 "\n", bal);
    return 0;
}

/* The money invariant (wallet/audit.h): prints the offending command_ids,
 * exits 1 when it does not hold, 0 when it does. --app limits it to one app
 * (default: every app). With wallet.driver grpc it asks the wallet service
 * for holds older than wallet.reconcile_after. */
static int
do_wallet_audit(struct ctl *c, int argc, char **argv)
{
    const char *app = c->app;
    struct wallet *w = NULL;
    size_t offences = 0;
    char err[512];
    int rc;

    if (strcmp(c->conf->wallet.driver, "grpc") == 0 &&
        wallet_open(&w, &c->conf->wallet, c->store, err, sizeof(err)) != 0) {
        fprintf(stderr, "roomctl: %s\n", err);
        return 2;
    }
    /* with --json the offending lines go into the answer instead */
    char *lines = NULL;
    size_t lines_len = 0;
    FILE *out = c->json ? open_memstream(&lines, &lines_len) : stdout;
    rc = wallet_audit(c->store, &c->conf->wallet, w, app != NULL ? app : "", out, &offences);
    wallet_close(w);
    if (c->json)
        fclose(out);
    if (rc != 0) {
        free(lines);
        store_fail("wallet audit", rc);
        return EXIT_USAGE; /* could not check: neither holds nor fails */
    }
    if (c->json) {
        json_t *arr = json_array();
        for (char *save = NULL, *l = strtok_r(lines, "\n", &save); l != NULL;
             l = strtok_r(NULL, "\n", &save))
            json_array_append_new(arr, json_string(l));
        emit_json(json_pack("{s:b, s:I, s:o}", "ok", offences == 0, "offences",
                            (json_int_t)offences, "lines", arr));
    } else {
        printf("%s: %zu offence%s\n", offences == 0 ? "ok" : "FAILED", offences,
               offences == 1 ? "" : "s");
    }
    free(lines);
    return offences == 0 ? 0 : 1;
}

static int
do_migrate(struct ctl *c, int argc, char **argv)
{
    if (c->json)
        emit_json(json_pack("{s:b, s:s}", "up_to_date", 1, "driver", c->conf->store.driver));
    else
        printf("schema up to date (%s)\n", c->conf->store.driver);
    return 0;
}

/* ==== gifts: the gift catalog SendGift charges (docs/room.md) ==== */

static json_t *
gift_object(const struct gift_item *g)
{
    return json_pack("{s:s, s:I, s:I, s:b, s:I, s:I}", "gift_id", g->gift_id, "unit_price",
                     (json_int_t)g->unit_price, "energy_per_unit", (json_int_t)g->energy_per_unit,
                     "enabled", g->enabled != 0, "version", (json_int_t)g->version, "updated_at_ms",
                     (json_int_t)g->updated_at_ms);
}

/* r as the admin API answers: 200 with o (taken), or the store's failure. */
static void
local_reply(struct admin_reply *r, int rc, json_t *o)
{
    memset(r, 0, sizeof(*r));
    r->status = rc == 0 ? 200 : rc == ROOMD_EINVAL ? 400 : rc == ROOMD_ECONFLICT ? 409 : 503;
    if (rc != 0) {
        json_decref(o);
        o = json_pack("{s:{s:s, s:s}}", "error", "code",
                      rc == ROOMD_EINVAL ? "invalid_argument" : roomd_err_code(rc), "message",
                      store_errmsg());
    }
    r->body = json_dumps(o, JSON_SORT_KEYS | JSON_COMPACT);
    json_decref(o);
}

static const char *
gifts_app(struct ctl *c)
{
    return c->app != NULL ? c->app : c->conf->app.default_app_code;
}

static void
gifts_list_reply(struct ctl *c, struct admin_reply *r)
{
    struct gift_item *rows = NULL;
    size_t n = 0;
    json_t *arr = json_array();
    int rc;

    if (c->url) {
        api(c, "GET", "/v1/gifts", false, NULL, r);
        json_decref(arr);
        return;
    }
    rc = store_gift_list(c->store, gifts_app(c), &rows, &n);
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, gift_object(&rows[i]));
    free(rows);
    local_reply(r, rc, json_pack("{s:s, s:o}", "app_code", gifts_app(c), "gifts", arr));
}

static void
print_gifts(struct ctl *c, json_t *j)
{
    json_t *gifts = json_object_get(j, "gifts"), *g;
    size_t i;

    (void)c;
    printf("%-24s %12s %15s %-8s %8s %s\n", "GIFT_ID", "UNIT_PRICE", "ENERGY_PER_UNIT", "ENABLED",
           "VERSION", "UPDATED");
    json_array_foreach(gifts, i, g)
    {
        char t[32];
        fmt_time(jint(g, "updated_at_ms"), t, sizeof(t));
        printf("%-24s %12" PRId64 " %15" PRId64 " %-8s %8" PRId64 " %s\n", jstr(g, "gift_id"),
               jint(g, "unit_price"), jint(g, "energy_per_unit"),
               json_is_true(json_object_get(g, "enabled")) ? "yes" : "no", jint(g, "version"), t);
    }
}

static void
print_gift(struct ctl *c, json_t *j)
{
    (void)c;
    printf("%s: unit_price %" PRId64 ", energy_per_unit %" PRId64 ", %s, version %" PRId64 "\n",
           jstr(j, "gift_id"), jint(j, "unit_price"), jint(j, "energy_per_unit"),
           json_is_true(json_object_get(j, "enabled")) ? "enabled" : "disabled",
           jint(j, "version"));
}

static int
do_gifts_list(struct ctl *c, int argc, char **argv)
{
    struct admin_reply r;

    gifts_list_reply(c, &r);
    return finish(c, &r, print_gifts);
}

/* Writes g (conditional on expect >= 0) through the API or the store. */
static int
gift_write(struct ctl *c, struct gift_item *g, int64_t expect)
{
    struct admin_reply r;
    json_t *o = json_pack("{s:s, s:I, s:I, s:b}", "gift_id", g->gift_id, "unit_price",
                          (json_int_t)g->unit_price, "energy_per_unit",
                          (json_int_t)g->energy_per_unit, "enabled", g->enabled != 0);

    if (expect >= 0)
        json_object_set_new(o, "version", json_integer(expect));
    if (c->url) {
        char *body = json_dumps(o, JSON_COMPACT);
        api(c, "POST", "/v1/gifts", false, body, &r);
        free(body);
        json_decref(o);
    } else {
        json_decref(o);
        strlcpy_(g->app_code, gifts_app(c), sizeof(g->app_code));
        int rc = store_gift_put(c->store, g, expect);
        local_reply(&r, rc, rc == 0 ? gift_object(g) : NULL);
    }
    return finish(c, &r, print_gift);
}

/* gifts set GIFT_ID UNIT_PRICE [ENERGY_PER_UNIT]: created or changed, enabled. */
static int
do_gifts_set(struct ctl *c, int argc, char **argv)
{
    struct gift_item g;

    memset(&g, 0, sizeof(g));
    strlcpy_(g.gift_id, argv[0], sizeof(g.gift_id));
    if (parse_i64(argv[1], "UNIT_PRICE", &g.unit_price) != 0)
        return EXIT_USAGE;
    g.energy_per_unit = g.unit_price;
    if (argc > 2 && parse_i64(argv[2], "ENERGY_PER_UNIT", &g.energy_per_unit) != 0)
        return EXIT_USAGE;
    g.enabled = 1;
    return gift_write(c, &g, -1);
}

/* gifts enable|disable GIFT_ID: the gift as listed, with enabled changed,
 * conditional on the version read (a concurrent change: 409, nothing written). */
static int
gifts_toggle(struct ctl *c, const char *id, bool enabled)
{
    struct admin_reply r;
    struct gift_item g;
    json_t *j, *x;
    size_t i;
    int64_t version = -1;

    memset(&g, 0, sizeof(g));
    gifts_list_reply(c, &r);
    if (r.status != 200)
        return finish(c, &r, print_gifts);
    j = json_loads(r.body, 0, NULL);
    admin_reply_clear(&r);
    json_array_foreach(json_object_get(j, "gifts"), i, x)
    {
        if (strcmp(jstr(x, "gift_id"), id) != 0)
            continue;
        strlcpy_(g.gift_id, id, sizeof(g.gift_id));
        g.unit_price = jint(x, "unit_price");
        g.energy_per_unit = jint(x, "energy_per_unit");
        version = jint(x, "version");
    }
    json_decref(j);
    if (version < 0) {
        fprintf(stderr, "roomctl: gifts: no gift %s in the catalog\n", id);
        return EXIT_FAILED;
    }
    g.enabled = enabled;
    return gift_write(c, &g, version);
}

static int
do_gifts_enable(struct ctl *c, int argc, char **argv)
{
    return gifts_toggle(c, argv[0], true);
}

static int
do_gifts_disable(struct ctl *c, int argc, char **argv)
{
    return gifts_toggle(c, argv[0], false);
}

/* ==== nodes: the cluster's nodes (GET /admin/v1/nodes, docs/admin.md) ==== */

static void
print_nodes(struct ctl *c, json_t *j)
{
    json_t *nodes = json_object_get(j, "nodes"), *n, *x;
    size_t i, k;

    (void)c;
    printf("%-20s %-12s %8s %-22s %-22s %s\n", "NODE", "STATE", "LEASES", "VERSION", "ADMIN_ADDR",
           "REASONS");
    json_array_foreach(nodes, i, n)
    {
        json_t *leases = json_object_get(n, "leases");
        char count[24] = "-", id[80];
        if (json_is_object(leases))
            snprintf(count, sizeof(count), "%" PRId64, jint(leases, "count"));
        snprintf(id, sizeof(id), "%s%s", jstr(n, "node_id"),
                 json_is_true(json_object_get(n, "self")) ? "*" : "");
        printf("%-20s %-12s %8s %-22s %-22s", id, jstr(n, "state"), count, jstr(n, "version"),
               jstr(n, "admin_addr"));
        json_array_foreach(json_object_get(n, "reasons"), k, x)
            printf("%s%s", k ? "; " : " ", json_string_value(x) ? json_string_value(x) : "");
        printf("\n");
    }
    printf("# * this node; membership %s, lease.ttl %" PRId64 "ms\n", jstr(j, "membership"),
           jint(j, "lease_ttl_ms"));
}

/* nodes: the admin API only (the view is live); without --url the config's
 * admin listener (admin.advertise_addr, else admin.listen). */
static int
do_nodes(struct ctl *c, int argc, char **argv)
{
    struct admin_reply r;
    char *url = NULL;

    (void)argc;
    (void)argv;
    if (c->url == NULL) {
        const char *a = c->conf->admin.advertise_addr && c->conf->admin.advertise_addr[0]
                            ? c->conf->admin.advertise_addr
                            : c->conf->admin.listen;
        url = xasprintf(
            "%s://%s",
            c->conf->admin.tls_cert_file && c->conf->admin.tls_cert_file[0] ? "https" : "http", a);
        c->url = url;
        curl_global_init(CURL_GLOBAL_DEFAULT);
    }
    api(c, "GET", "/admin/v1/nodes", true, NULL, &r);
    if (url != NULL) {
        curl_global_cleanup();
        c->url = NULL;
        free(url);
    }
    return finish(c, &r, print_nodes);
}

/* ==== the command table ==== */

#define DLQ_FILTER_USAGE                                                                           \
    "[--group G] [--event-type T] [--room R] [--reason R] [--error TEXT] [--created-after MS]"     \
    " [--created-before MS]"
#define FILTER_USAGE                                                                               \
    "[--status S] [--sink K] [--event-id ID] [--event-type T] [--room R] [--app A]"                \
    " [--error TEXT] [--created-after MS] [--created-before MS] [--failed-after MS]"               \
    " [--failed-before MS]"

static const struct ctl_cmd commands[] = {
    {{"outbox", "summary"},
     0,
     0,
     NEED_ADMIN_RO,
     0,
     do_summary,
     "outbox summary                      rows by status and by sink, oldest undelivered"},
    {{"outbox", "counts"}, 0, 0, NEED_ADMIN_RO, 0, do_summary, "outbox counts (= summary)"},
    {{"outbox", "list"},
     0,
     0,
     NEED_ADMIN_RO,
     OPT_FILTER | OPT_PAGE,
     do_list,
     "outbox list " FILTER_USAGE " [--after ID] [--limit N]"},
    {{"outbox", "show"}, 1, 1, NEED_ADMIN_RO, 0, do_show, "outbox show EVENT_ID"},
    {{"outbox", "replay"},
     0,
     1,
     NEED_ADMIN_RW,
     OPT_FILTER | OPT_REPLAY,
     do_replay,
     "outbox replay EVENT_ID | " FILTER_USAGE " [--dry-run] [--repair] [--chunk N] [--sample N]"},
    {{"audit", "list"},
     0,
     0,
     NEED_ADMIN_RO,
     OPT_BEFORE,
     do_audits,
     "audit list [--before ID] [--limit N]"},
    {{"audit", "show"},
     1,
     1,
     NEED_ADMIN_RO,
     OPT_PAGE,
     do_audit,
     "audit show ID [--after ID] [--limit N]"},
    {{"dlq", "list"},
     0,
     0,
     NEED_BUS,
     OPT_GROUP | OPT_PAGE,
     do_dlq_list,
     "dlq list [--group G] [--after SEQ] [--limit N]   consumer groups' dead letters"},
    {{"dlq", "show"}, 1, 1, NEED_BUS, 0, do_dlq_show, "dlq show SEQ"},
    {{"dlq", "replay"},
     0,
     1,
     NEED_BUS,
     OPT_DLQ | OPT_REPLAY,
     do_dlq_replay,
     "dlq replay SEQ | " DLQ_FILTER_USAGE " [--dry-run] [--chunk N]   into their group"},
    {{"dlq", "discard"},
     0,
     1,
     NEED_BUS,
     OPT_DLQ | OPT_REPLAY,
     do_dlq_discard,
     "dlq discard SEQ | " DLQ_FILTER_USAGE " [--dry-run] [--chunk N]   keys stay settled"},
    {{"dlq", "purge"},
     0,
     0,
     NEED_BUS,
     OPT_GROUP,
     do_dlq_purge,
     "dlq purge --group G   discard every dead letter of group G"},
    {{"wallet", "balance"},
     1,
     1,
     NEED_STORE,
     OPT_APP,
     do_wallet_balance,
     "wallet balance UID [--app APP]"},
    {{"wallet", "topup"},
     3,
     3,
     NEED_STORE,
     OPT_APP,
     do_wallet_topup,
     "wallet topup UID AMOUNT REF [--app APP]"},
    {{"wallet", "audit"},
     0,
     0,
     NEED_STORE,
     OPT_APP,
     do_wallet_audit,
     "wallet audit [--app APP]   the money invariant: exit 0 holds, 1 fails"},
    {{"gifts", "list"}, 0, 0, NEED_GIFTS, OPT_APP, do_gifts_list, "gifts list [--app APP]"},
    {{"gifts", "set"},
     2,
     3,
     NEED_GIFTS,
     OPT_APP,
     do_gifts_set,
     "gifts set GIFT_ID UNIT_PRICE [ENERGY_PER_UNIT] [--app APP]   create or change, enabled"},
    {{"gifts", "enable"}, 1, 1, NEED_GIFTS, OPT_APP, do_gifts_enable, "gifts enable GIFT_ID"},
    {{"gifts", "disable"}, 1, 1, NEED_GIFTS, OPT_APP, do_gifts_disable, "gifts disable GIFT_ID"},
    {{"migrate"}, 0, 0, NEED_STORE, 0, do_migrate, "migrate    create or upgrade the schema"},
    {{"nodes"},
     0,
     0,
     NEED_NOTHING,
     0,
     do_nodes,
     "nodes      the cluster's nodes: state, leases, version (the admin API)"},
};
#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *out, int status) __attribute__((noreturn));

/* Prints the usage to out and exits with status (0 for --help, 2 for a usage error). */
static void
usage(FILE *out, int status)
{
    fprintf(out,
            "usage: roomctl [-c CONFIG] [--url URL [--token-file FILE]] [--json] COMMAND\n"
            "       roomctl --version | --help\n"
            "  -c CONFIG   the roomd config naming the store (default %s)\n"
            "  --url URL   use roomd's admin API instead (token: --token-file or "
            "$ROOMD_ADMIN_TOKEN)\n"
            "  --json      print JSON (the API's for the admin commands)\n"
            "  --verbose   the store's and broker's log lines on stderr (else none)\n"
            "  COMMAND --help   the command's usage\ncommands:\n",
            ROOMD_DEFAULT_CONFIG);
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(out, "  %s\n", commands[i].usage);
    fprintf(out, "exit status: 0 done, 1 failed (config, store, server, not found, refused;\n"
                 "             wallet audit: the invariant fails), 2 usage error (also a 400\n"
                 "             from the server; wallet audit: could not check)\n");
    exit(status);
}

/* Returns the command whose words start argv, setting *nwords, or NULL. */
static const struct ctl_cmd *
match(int argc, char **argv, int *nwords)
{
    for (size_t i = 0; i < NCOMMANDS; i++) {
        int k = 0;
        while (k < 3 && commands[i].words[k] != NULL && k < argc &&
               strcmp(commands[i].words[k], argv[k]) == 0)
            k++;
        if (k < 3 && commands[i].words[k] == NULL) {
            *nwords = k;
            return &commands[i];
        }
    }
    return NULL;
}

/* Parses the command's options (getopt_long) into c; returns the count of
 * positionals left at argv[0..), or -1 after a usage message. */
static int
command_options(struct ctl *c, const struct ctl_cmd *cmd, int argc, char **argv)
{
    enum {
        O_FILTER = 1000,
        O_PAGE = 1100,
        O_BEFORE = 1200,
        O_DRY,
        O_REPAIR,
        O_CHUNK,
        O_SAMPLE,
        O_GROUP,
        O_HELP,
        O_JSON
    };
    static const char *const filter_keys[] = {
        "status", "sink",          "event_id",       "event_type",   "room_id",       "app",
        "error",  "created_after", "created_before", "failed_after", "failed_before", "reason"};
    static const struct option opts[] = {
        {"status", required_argument, NULL, O_FILTER + 0},
        {"sink", required_argument, NULL, O_FILTER + 1},
        {"event-id", required_argument, NULL, O_FILTER + 2},
        {"event-type", required_argument, NULL, O_FILTER + 3},
        {"room", required_argument, NULL, O_FILTER + 4},
        {"app", required_argument, NULL, O_FILTER + 5},
        {"error", required_argument, NULL, O_FILTER + 6},
        {"created-after", required_argument, NULL, O_FILTER + 7},
        {"created-before", required_argument, NULL, O_FILTER + 8},
        {"failed-after", required_argument, NULL, O_FILTER + 9},
        {"failed-before", required_argument, NULL, O_FILTER + 10},
        {"reason", required_argument, NULL, O_FILTER + 11},
        {"after", required_argument, NULL, O_PAGE},
        {"limit", required_argument, NULL, O_PAGE + 1},
        {"before", required_argument, NULL, O_BEFORE},
        {"dry-run", no_argument, NULL, O_DRY},
        {"repair", no_argument, NULL, O_REPAIR},
        {"chunk", required_argument, NULL, O_CHUNK},
        {"sample", required_argument, NULL, O_SAMPLE},
        {"group", required_argument, NULL, O_GROUP},
        {"help", no_argument, NULL, O_HELP},
        {"json", no_argument, NULL, O_JSON},
        {NULL, 0, NULL, 0},
    };
    int ch;
    int64_t n;

    optind = 0; /* glibc: a full reset (the global options were parsed with "+") */
    opterr = 0;
    c->chunk = 0;
    c->sample = -1;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (ch == O_HELP || ch == 'h') { /* every command: its usage on stdout, exit 0 */
            printf("usage: roomctl [global options] %s\n"
                   "global options: -c CONFIG, --url URL, --token-file FILE, --json, --verbose\n"
                   "exit status: 0 done, 1 failed, 2 usage error (roomctl --help)\n",
                   cmd->usage);
            exit(0);
        }
        if (ch == O_JSON) { /* --json after the command too */
            c->json = true;
            continue;
        }
        /* the dead-letter filter's keys (dlq replay/discard/purge) */
        bool dlq_key = ch == O_GROUP || ch == O_FILTER + 3 || ch == O_FILTER + 4 ||
                       ch == O_FILTER + 6 || ch == O_FILTER + 7 || ch == O_FILTER + 8 ||
                       ch == O_FILTER + 11;
        unsigned want = dlq_key && (cmd->opts & OPT_DLQ)              ? OPT_DLQ
                        : ch == O_FILTER + 5 && (cmd->opts & OPT_APP) ? OPT_APP
                        : ch >= O_FILTER && ch < O_PAGE               ? OPT_FILTER
                        : ch == O_PAGE                                ? OPT_PAGE
                        : ch == O_PAGE + 1                            ? (OPT_PAGE | OPT_BEFORE)
                        : ch == O_BEFORE                              ? OPT_BEFORE
                        : ch >= O_DRY && ch <= O_SAMPLE               ? OPT_REPLAY
                        : ch == O_GROUP                               ? OPT_GROUP
                                                                      : 0;
        if (ch == '?' || ch == ':' || (cmd->opts & want) == 0 || c->nkv >= MAX_KV - 1) {
            fprintf(stderr, "roomctl: %s: bad option %s\nusage: roomctl %s\n", cmd->words[0],
                    argv[optind - 1], cmd->usage);
            return -1;
        }
        if (want == OPT_DLQ) {
            c->k[c->nkv] = ch == O_GROUP ? "group" : filter_keys[ch - O_FILTER];
            c->v[c->nkv++] = optarg;
        } else if (want == OPT_APP) {
            c->app = optarg;
        } else if (ch >= O_FILTER && ch < O_PAGE) {
            c->k[c->nkv] = filter_keys[ch - O_FILTER];
            c->v[c->nkv++] = optarg;
            c->has_filter = true;
        } else if (ch == O_PAGE || ch == O_PAGE + 1 || ch == O_BEFORE || ch == O_GROUP) {
            c->k[c->nkv] = ch == O_PAGE     ? "after"
                           : ch == O_BEFORE ? "before"
                           : ch == O_GROUP  ? "group"
                                            : "limit";
            c->v[c->nkv++] = optarg;
        } else if (ch == O_DRY) {
            c->dry_run = true;
        } else if (ch == O_REPAIR) {
            c->repair = true;
        } else {
            if (parse_i64(optarg, ch == O_CHUNK ? "--chunk" : "--sample", &n) != 0)
                return -1;
            *(ch == O_CHUNK ? &c->chunk : &c->sample) = (int)n;
        }
    }
    int npos = argc - optind;
    if (npos < cmd->nargs_min || npos > cmd->nargs_max) {
        fprintf(stderr, "usage: roomctl %s\n", cmd->usage);
        return -1;
    }
    return npos;
}

/* Reads the admin token: --token-file, else $ROOMD_ADMIN_TOKEN, else none. */
static int
read_token(struct ctl *c, const char *file)
{
    const char *env = getenv("ROOMD_ADMIN_TOKEN");

    if (file != NULL) {
        FILE *f = fopen(file, "r");
        if (f == NULL || fgets(c->token, sizeof(c->token), f) == NULL) {
            fprintf(stderr, "roomctl: --token-file: cannot read %s\n", file);
            if (f)
                fclose(f);
            return -1;
        }
        fclose(f);
        c->token[strcspn(c->token, "\r\n")] = '\0';
    } else if (env != NULL) {
        snprintf(c->token, sizeof(c->token), "%s", env);
    }
    return 0;
}

/* Opens what cmd needs; returns 0 or prints why and returns EXIT_FAILED. */
static int
open_backend(struct ctl *c, const struct ctl_cmd *cmd)
{
    char err[1024];
    int rc;

    if (c->url != NULL && cmd->need != NEED_STORE)
        return 0; /* NEED_GIFTS too: the admin API */
    if (conf_load(c->config, &c->conf, err, sizeof(err)) != 0) {
        fprintf(stderr, "roomctl: config: %s\n", err);
        return EXIT_FAILED;
    }
    if (cmd->need == NEED_NOTHING) /* nodes: the config names the admin listener */
        return 0;
    if (cmd->need == NEED_STORE || cmd->need == NEED_GIFTS) {
        bool reads = cmd->run == do_wallet_balance || cmd->run == do_gifts_list;
        if (reads && strcmp(c->conf->store.driver, "sqlite") == 0 &&
            access(c->conf->store.sqlite.path, F_OK) != 0) {
            fprintf(stderr, "roomctl: store.sqlite.path: %s does not exist\n",
                    c->conf->store.sqlite.path);
            return EXIT_FAILED;
        }
        if ((rc = store_open(&c->store, &c->conf->store, err, sizeof(err))) != 0) {
            fprintf(stderr, "roomctl: store: %s\n", err);
            return EXIT_FAILED;
        }
        return 0;
    }
    bool ro = cmd->need == NEED_ADMIN_RO || c->dry_run;
    if ((rc = admin_open(&c->adm, c->conf, NULL, ro, err, sizeof(err))) != 0) {
        fprintf(stderr, "roomctl: store: %s\n", err);
        return EXIT_FAILED;
    }
    if (cmd->need == NEED_BUS && c->conf->rocketmq.enabled &&
        conf_rocketmq_driver(&c->conf->rocketmq) == CONF_MQ_ROCKETMQ) {
        /* the %DLQ%<group> topics of the rocketmq driver (admin/dlq_rmq.c) */
        if (rmq_client_open(&c->rmq, &c->conf->rocketmq, "roomctl", NULL, err, sizeof(err)) != 0) {
            fprintf(stderr, "roomctl: rocketmq: %s\n", err);
            return EXIT_FAILED;
        }
        admin_set_rmq(c->adm, c->rmq);
    } else if (cmd->need == NEED_BUS && c->conf->rocketmq.enabled) {
        if (bus_open(&c->bus, &c->conf->rocketmq, "roomctl", err, sizeof(err)) != 0 ||
            bus_ensure(c->bus, err, sizeof(err)) != 0) {
            fprintf(stderr, "roomctl: rocketmq: %s\n", err);
            return EXIT_FAILED;
        }
        admin_set_bus(c->adm, c->bus);
    }
    return 0;
}

int
main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"config", required_argument, NULL, 'c'},     {"url", required_argument, NULL, 'u'},
        {"token-file", required_argument, NULL, 't'}, {"json", no_argument, NULL, 'j'},
        {"verbose", no_argument, NULL, 'v'},          {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},          {NULL, 0, NULL, 0},
    };
    struct ctl c = {.config = ROOMD_DEFAULT_CONFIG};
    const char *token_file = NULL;
    int ch, nwords = 0, rc;
    bool verbose = false;

    while ((ch = getopt_long(argc, argv, "+c:hvV", longopts, NULL)) != -1) {
        switch (ch) {
        case 'c':
            c.config = optarg;
            break;
        case 'u':
            c.url = optarg;
            break;
        case 't':
            token_file = optarg;
            break;
        case 'j':
            c.json = true;
            break;
        case 'v':
            verbose = true;
            break;
        case 'h':
            usage(stdout, 0);
        case 'V':
            printf("roomctl %s (commit %s)\n", roomd_version, roomd_commit);
            return 0;
        default:
            usage(stderr, EXIT_USAGE);
        }
    }
    argc -= optind;
    argv += optind;
    /* the store's, broker's and admin module's log lines: stderr with
     * --verbose, else nowhere (roomctl prints its own errors) */
    if (log_open(verbose ? NULL : "/dev/null", verbose ? LOG_DEBUG : LOG_ERROR) != 0)
        return EXIT_FAILED;
    if (argc == 0)
        usage(stderr, EXIT_USAGE);
    const struct ctl_cmd *cmd = match(argc, argv, &nwords);
    if (cmd == NULL) {
        fprintf(stderr, "roomctl: unknown command \"%s\"\n", argv[0]);
        usage(stderr, EXIT_USAGE);
    }
    /* the command's own options: argv[nwords - 1] plays argv[0] for getopt */
    argc -= nwords - 1;
    argv += nwords - 1;
    int npos = command_options(&c, cmd, argc, argv);
    if (npos < 0)
        return EXIT_USAGE;
    if (c.url != NULL && cmd->need == NEED_STORE) {
        fprintf(stderr, "roomctl: %s: not an admin API command; drop --url\n", cmd->words[0]);
        return EXIT_USAGE;
    }
    if (read_token(&c, token_file) != 0)
        return EXIT_FAILED;
    if (c.url != NULL)
        curl_global_init(CURL_GLOBAL_DEFAULT);
    rc = open_backend(&c, cmd);
    if (rc == 0)
        rc = cmd->run(&c, npos, argv + optind);
    admin_close(c.adm);
    bus_unref(c.bus);
    rmq_client_close(c.rmq);
    store_close(c.store);
    conf_free(c.conf);
    if (c.url != NULL)
        curl_global_cleanup();
    if (c.bus != NULL)
        bus_library_shutdown();
    memset(c.token, 0, sizeof(c.token));
    return rc;
}
