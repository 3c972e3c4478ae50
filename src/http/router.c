/*
 * router.c: maps (method, path) to the handlers of ARCHITECTURE §6. The
 * table below is the whole API; read it first. X-App-Code and room_id path
 * segments are validated here, bodies by the handlers (room_cmd_parse).
 * An unknown path is 404 not_found, a known path with another method 405.
 * Query strings reach handlers through http_request_query().
 */
#include "http/router.h"

#include "conf/conf.h"

#include <stdio.h>
#include <string.h>

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
};

/*
 * A pattern is a '/'-separated path where "{room_id}" and "{uid}" capture one
 * segment. Routes sharing a pattern but not a method answer 405.
 */
static const struct route {
    const char *method;
    const char *pattern;
    enum route_kind kind;
    enum room_cmd_type cmd;
} routes[] = {
    {"POST", "/v1/rooms", R_COMMAND, CMD_CREATE_ROOM},
    {"POST", "/v1/rooms/{room_id}/join", R_COMMAND, CMD_JOIN_ROOM},
    {"POST", "/v1/rooms/{room_id}/leave", R_COMMAND, CMD_LEAVE_ROOM},
    {"POST", "/v1/rooms/{room_id}/mic/up", R_COMMAND, CMD_MIC_UP},
    {"POST", "/v1/rooms/{room_id}/mic/down", R_COMMAND, CMD_MIC_DOWN},
    {"POST", "/v1/rooms/{room_id}/gifts", R_COMMAND, CMD_SEND_GIFT},
    {"POST", "/v1/rooms/{room_id}/kick", R_COMMAND, CMD_KICK_USER},
    {"POST", "/v1/rooms/{room_id}/close", R_COMMAND, CMD_CLOSE_ROOM},
    {"POST", "/internal/v1/rooms/{room_id}/rocket/launch", R_COMMAND, CMD_LAUNCH_ROCKET},
    {"GET", "/v1/rooms", R_LIST_ROOMS, 0},
    {"GET", "/v1/rooms/{room_id}", R_GET_ROOM, 0},
    {"GET", "/v1/users/{uid}/presence", R_PRESENCE, 0},
    {"GET", "/healthz", R_HEALTHZ, 0},
    {"GET", "/readyz", R_READYZ, 0},
    {"GET", "/metrics", R_METRICS, 0},
    {"POST", "/v1/wallet/topup", R_WALLET_TOPUP, 0},
    {"GET", "/v1/wallet/{uid}", R_WALLET_GET, 0},
};
#define NROUTES (sizeof(routes) / sizeof(routes[0]))

#define SEG_MAX 128

void
router_write_routes(FILE *out)
{
    for (size_t i = 0; i < NROUTES; i++)
        fprintf(out, "%s %s\n", routes[i].method, routes[i].pattern);
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
    return true;
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

/* Resolves X-App-Code (or the default). False and a 400 in resp when invalid. */
static bool
resolve_app(const struct http_deps *d, const struct http_request *req, const char **app,
            struct http_response *resp)
{
    if (req->app_header == NULL || req->app_header[0] == '\0') {
        *app = d->conf->app.default_app_code;
        return true;
    }
    if (!http_valid_app_code(req->app_header)) {
        http_response_field_error(resp, "invalid_argument", "X-App-Code",
                                  "X-App-Code: must match [a-z0-9_-]{1,32}");
        return false;
    }
    *app = req->app_header;
    return true;
}

static void
dispatch(const struct http_deps *d, const struct http_request *req, const struct route *r,
         const char *cap, bool toolong, struct http_response *resp)
{
    const char *app = NULL;
    bool has_room = strstr(r->pattern, "{room_id}") != NULL;

    switch (r->kind) {
    case R_HEALTHZ:
        handle_healthz(d, resp);
        return;
    case R_READYZ:
        handle_readyz(d, resp);
        return;
    case R_METRICS:
        handle_metrics(d, resp);
        return;
    default:
        break;
    }
    if (!resolve_app(d, req, &app, resp))
        return;
    if (has_room && (toolong || !http_valid_room_id(cap))) {
        http_response_field_error(resp, "invalid_argument", "room_id",
                                  "room_id: must match [A-Za-z0-9_.:-]{1,63}");
        return;
    }
    switch (r->kind) {
    case R_COMMAND:
        handle_command(d, req, r->cmd, app, has_room ? cap : NULL, resp);
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
        handle_wallet_get(d, app, toolong ? "" : cap, resp);
        break;
    case R_LIST_ROOMS:
        handle_list_rooms(d, req, app, resp);
        break;
    case R_PRESENCE:
        handle_presence(d, app, toolong ? "" : cap, resp);
        break;
    default:
        break;
    }
}

void
router_handle(const struct http_deps *d, const struct http_request *req, struct http_response *resp)
{
    char cap[SEG_MAX];
    char allow[64] = "";
    bool toolong;

    for (size_t i = 0; i < NROUTES; i++) {
        const struct route *r = &routes[i];
        if (!match(r->pattern, req->path, cap, &toolong))
            continue;
        if (strcmp(r->method, req->method) == 0) {
            dispatch(d, req, r, cap, toolong, resp);
            return;
        }
        if (strstr(allow, r->method) == NULL)
            snprintf(allow + strlen(allow), sizeof(allow) - strlen(allow), "%s%s",
                     allow[0] ? ", " : "", r->method);
    }
    if (allow[0] != '\0') {
        http_response_error(resp, 405, "method_not_allowed", "%s %s: allowed: %s", req->method,
                            req->path, allow);
        http_response_header(resp, "Allow", allow);
        return;
    }
    http_response_error(resp, 404, "not_found", "no route %s %s", req->method, req->path);
}
