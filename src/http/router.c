/* SPDX-License-Identifier: Apache-2.0 */
/*
 * router.c: maps (method, path) to the handlers of ARCHITECTURE §6. The
 * table below is the whole API; read it first. X-App-Code and room_id path
 * segments are validated here, bodies by the handlers (room_cmd_parse).
 * An unknown path is 404 not_found, a known path with another method 405.
 * Query strings reach handlers through http_request_query().
 */
#include "http/router.h"

#include "core/log.h"

#include "admin/http.h"
#include "auth/throttle.h"
#include "conf/conf.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

/* What a route does once matched. */
enum route_kind {
    R_COMMAND, /* room write command: cmd */
    R_GET_ROOM,
    R_HEALTHZ,
    R_READYZ,
    R_METRICS,
    R_WALLET_TOPUP,
    R_WALLET_GET,
    R_LIST_ROOMS,
    R_PRESENCE,
    R_GIFTS_LIST,
    R_GIFT_PUT,
    R_ROOM_EVENTS,
    R_HEARTBEAT,
    R_TIM_CALLBACK,
};

/* Where a route is served: elsewhere it answers 404 as if unknown. */
#define ON_PUBLIC (1u << HTTP_PUBLIC)
#define ON_ADMIN (1u << HTTP_ADMIN)
#define ON_BOTH (ON_PUBLIC | ON_ADMIN)

/*
 * A pattern is a '/'-separated path where "{room_id}" and "{uid}" capture one
 * segment. Routes sharing a pattern but not a method answer 405.
 */
static const struct route {
    const char *method;
    const char *pattern;
    enum route_kind kind;
    enum room_cmd_type cmd;
    unsigned on;
} routes[] = {
    {"POST", "/v1/rooms", R_COMMAND, CMD_CREATE_ROOM, ON_PUBLIC},
    {"POST", "/v1/rooms/{room_id}/join", R_COMMAND, CMD_JOIN_ROOM, ON_PUBLIC},
    {"POST", "/v1/rooms/{room_id}/leave", R_COMMAND, CMD_LEAVE_ROOM, ON_PUBLIC},
    {"POST", "/v1/rooms/{room_id}/mic/up", R_COMMAND, CMD_MIC_UP, ON_PUBLIC},
    {"POST", "/v1/rooms/{room_id}/mic/down", R_COMMAND, CMD_MIC_DOWN, ON_PUBLIC},
    {"POST", "/v1/rooms/{room_id}/gifts", R_COMMAND, CMD_SEND_GIFT, ON_PUBLIC},
    {"POST", "/v1/rooms/{room_id}/kick", R_COMMAND, CMD_KICK_USER, ON_PUBLIC},
    {"POST", "/v1/rooms/{room_id}/close", R_COMMAND, CMD_CLOSE_ROOM, ON_PUBLIC},
    {"POST", "/internal/v1/rooms/{room_id}/rocket/launch", R_COMMAND, CMD_LAUNCH_ROCKET, ON_ADMIN},
    {"GET", "/v1/rooms", R_LIST_ROOMS, 0, ON_PUBLIC},
    {"GET", "/v1/rooms/{room_id}", R_GET_ROOM, 0, ON_PUBLIC},
    {"GET", "/v1/rooms/{room_id}/events", R_ROOM_EVENTS, 0, ON_PUBLIC},
    {"GET", "/v1/users/{uid}/presence", R_PRESENCE, 0, ON_PUBLIC},
    {"GET", "/healthz", R_HEALTHZ, 0, ON_BOTH},
    {"GET", "/readyz", R_READYZ, 0, ON_BOTH},
    {"GET", "/metrics", R_METRICS, 0, ON_ADMIN},
    {"POST", "/v1/wallet/topup", R_WALLET_TOPUP, 0, ON_ADMIN},
    {"GET", "/v1/wallet/{uid}", R_WALLET_GET, 0, ON_BOTH},
    {"GET", "/v1/gifts", R_GIFTS_LIST, 0, ON_BOTH},
    {"POST", "/v1/gifts", R_GIFT_PUT, 0, ON_ADMIN},
    {"POST", "/v1/rooms/{room_id}/heartbeat", R_HEARTBEAT, 0, ON_PUBLIC},
    {"POST", "/callbacks/tim", R_TIM_CALLBACK, 0, ON_PUBLIC},
};
#define NROUTES (sizeof(routes) / sizeof(routes[0]))

#define SEG_MAX 128

/* True when route r answers method: its own, and HEAD where it is GET. */
static bool
serves(const struct route *r, const char *method)
{
    return strcmp(r->method, method) == 0 ||
           (strcmp(method, "HEAD") == 0 && strcmp(r->method, "GET") == 0);
}

void
router_write_routes(FILE *out)
{
    for (size_t i = 0; i < NROUTES; i++) {
        const char *on = routes[i].on == ON_BOTH    ? "public,admin"
                         : routes[i].on == ON_ADMIN ? "admin"
                                                    : "public";
        fprintf(out, "%s %s %s\n", routes[i].method, routes[i].pattern, on);
        if (strcmp(routes[i].method, "GET") == 0)
            fprintf(out, "HEAD %s %s\n", routes[i].pattern, on);
    }
    admin_http_write_routes(out); /* the admin API and console, on the admin listener */
}

/* True when a Content-Type value is application/json (any case, any
 * parameters: "application/json; charset=utf-8"). */
static bool
is_json(const char *ct)
{
    static const char want[] = "application/json";
    size_t n = sizeof(want) - 1;

    if (ct == NULL)
        return false;
    while (*ct == ' ' || *ct == '\t')
        ct++;
    if (strncasecmp(ct, want, n) != 0)
        return false;
    ct += n;
    while (*ct == ' ' || *ct == '\t')
        ct++;
    return *ct == '\0' || *ct == ';';
}

bool
http_write_is_json(const struct http_request *req, struct http_response *resp)
{
    if (strcmp(req->method, "POST") != 0 || is_json(req->content_type))
        return true;
    http_response_error(resp, 415, "unsupported_media_type",
                        "Content-Type: a write needs application/json, got %.100s",
                        req->content_type ? req->content_type : "none");
    return false;
}

bool
http_valid_app_code(const char *s)
{
    size_t n = strlen(s);

    if (n < 1 || n > 32)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return false;
    }
    return true;
}

bool
http_valid_room_id(const char *s)
{
    size_t n = strlen(s);

    if (n < 1 || n >= STORE_ID_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.' || c == ':'))
            return false;
    }
    return strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

static int
hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* True when out (decoded) has a "." or ".." segment. */
static bool
has_dot_segment(const char *out)
{
    for (const char *seg = out; seg != NULL; seg = strchr(seg, '/')) {
        seg++;
        size_t n = strcspn(seg, "/");
        if ((n == 1 && seg[0] == '.') || (n == 2 && seg[0] == '.' && seg[1] == '.'))
            return true;
    }
    return false;
}

bool
http_decode_path(const char *raw, char *out, size_t outlen)
{
    size_t j = 0;

    if (raw == NULL || raw[0] != '/' || outlen == 0)
        return false;
    for (size_t i = 0; raw[i] != '\0' && raw[i] != '?'; i++) {
        unsigned char c = (unsigned char)raw[i];
        if (c == '%') {
            int hi = hex_value(raw[i + 1]), lo = hi < 0 ? -1 : hex_value(raw[i + 2]);
            if (lo < 0)
                return false;
            c = (unsigned char)(hi * 16 + lo);
            i += 2;
        }
        if (c < 0x20 || c == 0x7f || j + 1 >= outlen)
            return false;
        out[j++] = (char)c;
    }
    out[j] = '\0';
    return !has_dot_segment(out);
}

const char *
http_request_query(const struct http_request *req, const char *name)
{
    return req->query != NULL ? req->query(req->query_ctx, name) : NULL;
}

/*
 * Matches path against pattern. On a match returns true and copies the
 * captured segment (if any) into cap[SEG_MAX]; a segment too long to copy
 * still matches and is truncated to "" + flagged by *toolong.
 */
static bool
match(const char *pattern, const char *path, char *cap, bool *toolong)
{
    const char *p = pattern, *u = path;

    cap[0] = '\0';
    *toolong = false;
    while (*p != '\0' && *u != '\0') {
        if (*p == '{') {
            const char *pe = strchr(p, '}');
            const char *ue = strchr(u, '/');
            size_t n = ue ? (size_t)(ue - u) : strlen(u);
            if (n == 0)
                return false;
            if (n < SEG_MAX) {
                memcpy(cap, u, n);
                cap[n] = '\0';
            } else {
                *toolong = true;
            }
            p = pe + 1;
            u += n;
            continue;
        }
        if (*p != *u)
            return false;
        p++;
        u++;
    }
    return *p == '\0' && *u == '\0';
}

/* Resolves the app: X-App-Code when given (it must equal the token's app),
 * else the token's app, else app.default_app_code. False and a 400/403 in
 * resp when invalid or another app's. */
static bool
resolve_app(const struct http_deps *d, const struct http_request *req,
            const struct auth_principal *p, const char **app, struct http_response *resp)
{
    if (req->app_header == NULL || req->app_header[0] == '\0') {
        *app = p->anyone ? d->conf->app.default_app_code : p->app;
        return true;
    }
    if (!http_valid_app_code(req->app_header)) {
        http_response_field_error(resp, "invalid_argument", "X-App-Code",
                                  "X-App-Code: must match [a-z0-9_-]{1,32}");
        return false;
    }
    if (auth_may_act_as(p, req->app_header, 0) != AUTH_OK) {
        http_refuse(d, req, AUTH_OTHER_APP, resp);
        return false;
    }
    *app = req->app_header;
    return true;
}

static const char *
listener_name(const struct http_request *req)
{
    return req->listener == HTTP_ADMIN ? "admin" : "public";
}

void
http_refuse(const struct http_deps *d, const struct http_request *req, enum auth_reason r,
            struct http_response *resp)
{
    int status = auth_reason_status(r);

    auth_count(d->auth, listener_name(req), r);
    if (status == 401) {
        http_response_error(resp, 401, "unauthenticated", "Authorization: %s", auth_reason_name(r));
        http_response_header(resp, "WWW-Authenticate",
                             r == AUTH_MISSING ? "Bearer realm=\"roomd\""
                                               : "Bearer realm=\"roomd\", error=\"invalid_token\"");
    } else {
        http_response_error(resp, 403, "forbidden", "not allowed: %s", auth_reason_name(r));
    }
}

/* Who is calling: the admin token on the admin listener, a JWT (or anyone,
 * auth.mode none) on the public one. False and a 401 in resp when refused. */
static bool
authenticate(const struct http_deps *d, const struct http_request *req, struct auth_principal *p,
             struct http_response *resp)
{
    enum auth_reason r;

    memset(p, 0, sizeof(*p));
    if (d->auth == NULL) {
        p->anyone = true;
        snprintf(p->admin_name, sizeof(p->admin_name), "admin");
        return true;
    }
    if (req->listener == HTTP_ADMIN) {
        int64_t wait = auth_throttle_wait_ms(d->admin_throttle, req->peer);
        if (wait > 0) { /* failed before: this address waits, its token unchecked */
            char s[24];
            http_response_error(resp, 429, "rate_limited",
                                "too many failed admin authentications from this address: retry "
                                "in %lld ms",
                                (long long)wait);
            snprintf(s, sizeof(s), "%lld", (long long)(wait + 999) / 1000);
            http_response_header(resp, "Retry-After", s);
            return false;
        }
        r = auth_admin_check(d->auth, req->authorization, p);
        auth_throttle_result(d->admin_throttle, req->peer, r == AUTH_OK);
        /* admin.tokens role read: reads only (no replay, discard, purge, top-up) */
        if (r == AUTH_OK && p->admin_read_only && strcmp(req->method, "GET") != 0 &&
            strcmp(req->method, "HEAD") != 0)
            r = AUTH_READ_ONLY;
    } else {
        r = auth_verify_bearer(d->auth, req->authorization, p);
    }
    if (r != AUTH_OK)
        http_refuse(d, req, r, resp);
    return r == AUTH_OK;
}

bool
http_authenticate_admin(const struct http_deps *d, const struct http_request *req,
                        struct auth_principal *p, struct http_response *resp)
{
    return authenticate(d, req, p, resp);
}

static void
dispatch(const struct http_deps *d, const struct http_request *req, const struct route *r,
         const char *cap, bool toolong, struct http_response *resp)
{
    const char *app = NULL;
    bool has_room = strstr(r->pattern, "{room_id}") != NULL;
    struct auth_principal p;

    if (r->kind == R_HEALTHZ) {
        handle_healthz(d, resp);
        return;
    }
    if (r->kind == R_TIM_CALLBACK) { /* Tencent's signature, not a JWT (tim_callback.h) */
        handle_tim_callback(d, req, resp);
        return;
    }
    if (!http_write_is_json(req, resp))
        return;
    if (req->listener == HTTP_PUBLIC && r->on == ON_ADMIN && d->auth != NULL &&
        !auth_mode_none(d->auth)) { /* a forwarded wake-up under jwt: retried, never lost */
        http_response_error(resp, 503, "unavailable",
                            "a forwarded LaunchRocket is not served on http.listen under auth.mode "
                            "jwt");
        return;
    }
    if (r->kind == R_READYZ && req->listener == HTTP_PUBLIC) {
        handle_readyz(d, req, resp); /* one word, no details: no token needed */
        return;
    }
    if (!authenticate(d, req, &p, resp))
        return;
    switch (r->kind) {
    case R_READYZ:
        handle_readyz(d, req, resp);
        return;
    case R_METRICS:
        handle_metrics(d, resp);
        return;
    default:
        break;
    }
    if (!resolve_app(d, req, &p, &app, resp))
        return;
    if (has_room && (toolong || !http_valid_room_id(cap))) {
        http_response_field_error(resp, "invalid_argument", "room_id",
                                  "room_id: must match [A-Za-z0-9_.:-]{1,63}, not . or ..");
        return;
    }
    switch (r->kind) {
    case R_COMMAND:
        handle_command(d, req, &p, r->cmd, app, has_room ? cap : NULL, resp);
        break;
    case R_GET_ROOM:
        handle_get_room(d, req, app, cap, resp);
        break;
    case R_WALLET_TOPUP:
        if (!d->conf->wallet.allow_topup) {
            http_response_error(resp, 404, "not_found", "no route POST %s", req->path);
            break;
        }
        handle_wallet_topup(d, req, app, resp);
        break;
    case R_WALLET_GET:
        handle_wallet_get(d, req, &p, app, toolong ? "" : cap, resp);
        break;
    case R_LIST_ROOMS:
        handle_list_rooms(d, req, app, resp);
        break;
    case R_PRESENCE:
        handle_presence(d, req, &p, app, toolong ? "" : cap, resp);
        break;
    case R_GIFTS_LIST:
        handle_gifts_list(d, req, app, resp);
        break;
    case R_GIFT_PUT:
        handle_gift_put(d, req, app, resp);
        break;
    case R_ROOM_EVENTS:
        handle_room_events(d, req, app, cap, resp);
        break;
    case R_HEARTBEAT:
        handle_heartbeat(d, req, &p, app, cap, resp);
        break;
    default:
        break;
    }
    /* an admin write (top-up, a forwarded launch) names its caller in the log */
    if (req->listener == HTTP_ADMIN && strcmp(req->method, "GET") != 0)
        log_info("admin", "admin call", "caller=%s method=%s path=%s status=%d", p.admin_name,
                 req->method, req->path, resp->status);
}

/*
 * A LaunchRocket another node forwards to this one, the room's owner, on the
 * public listener: what a node that does not know the owner's
 * admin.advertise_addr sends (a lease written by an older node); a current
 * node sends it to the admin listener with the admin token. Served on the
 * public listener only under auth.mode none (every listener is loopback);
 * under jwt the hop header proves nothing: 503 (the consumer retries).
 */
static bool
forwarded_launch(const struct http_deps *d, const struct http_request *req, const struct route *r)
{
    (void)d;
    return req->listener == HTTP_PUBLIC && req->forwarded_by != NULL && r->kind == R_COMMAND &&
           r->cmd == CMD_LAUNCH_ROCKET;
}

void
router_handle(const struct http_deps *d, const struct http_request *req, struct http_response *resp)
{
    char cap[SEG_MAX];
    char allow[64] = "";
    char path[1024];
    bool toolong;
    unsigned here = 1u << req->listener;

    if (!http_decode_path(req->path, path, sizeof(path))) {
        http_response_field_error(resp, "invalid_argument", "path",
                                  "path: bad percent-encoding, a control byte, a . or .. "
                                  "segment, or longer than 1023 bytes");
        return;
    }
    if (req->listener == HTTP_ADMIN && handle_admin(d, req, path, resp))
        return;
    bool elsewhere = false; /* a path of the other listener: 404, never 405 */

    for (size_t i = 0; i < NROUTES; i++) {
        const struct route *r = &routes[i];
        if (!match(r->pattern, path, cap, &toolong))
            continue;
        if ((r->on & here) == 0 && !forwarded_launch(d, req, r)) {
            elsewhere = elsewhere || serves(r, req->method);
            continue;
        }
        if (serves(r, req->method)) {
            if (strcmp(req->method, "HEAD") == 0) {
                /* the GET itself; server.c's libmicrohttpd sends no body for a HEAD */
                struct http_request get = *req;
                get.method = "GET";
                dispatch(d, &get, r, cap, toolong, resp);
            } else {
                dispatch(d, req, r, cap, toolong, resp);
            }
            return;
        }
        const char *m = strcmp(r->method, "GET") == 0 ? "GET, HEAD" : r->method;
        if (strstr(allow, m) == NULL)
            snprintf(allow + strlen(allow), sizeof(allow) - strlen(allow), "%s%s",
                     allow[0] ? ", " : "", m);
    }
    if (allow[0] != '\0' && !elsewhere) {
        http_response_error(resp, 405, "method_not_allowed", "%s %s: allowed: %s", req->method,
                            path, allow);
        http_response_header(resp, "Allow", allow);
        return;
    }
    http_response_error(resp, 404, "not_found", "no route %s %s", req->method, path);
}
