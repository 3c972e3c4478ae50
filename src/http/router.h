/* SPDX-License-Identifier: Apache-2.0 */
/*
 * router.h: the seam between server.c (libmicrohttpd: connections, bodies,
 * limits) and the handlers. server.c builds a struct http_request once the
 * body is complete; router_handle() picks the handler of ARCHITECTURE §6 by
 * method and path; handlers (handlers_room.c, handlers_ops.c) fill a struct
 * http_response, which server.c sends. Nothing here knows about MHD.
 * Thread: any (one connection thread per request); handlers block.
 */
#ifndef ROOMD_HTTP_ROUTER_H
#define ROOMD_HTTP_ROUTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "auth/auth.h"
#include "http/server.h"
#include "room/command.h"

#define HTTP_MAX_HEADERS 4
/* The longest X-Request-Id taken (http/server.c; docs/http.md). */
#define HTTP_REQUEST_ID_MAX 64

/* Looks up a query-string argument (URL-decoded) of the request behind ctx;
 * NULL when absent. server.c implements it with MHD_GET_ARGUMENT_KIND. */
typedef const char *(*http_query_fn)(void *ctx, const char *name);

/* One complete request; every pointer is borrowed for the call. */
struct http_request {
    enum http_listener listener; /* which listener it came in on */
    const char *method;          /* "GET", "POST", ... */
    const char *path;            /* as sent: still percent-encoded, may hold "?query" */
    const char *app_header;      /* X-App-Code, NULL when absent */
    const char *authorization;   /* Authorization, NULL when absent (passed on when forwarded;
                                  * never logged) */
    const char *forwarded_by;    /* the hop header (cluster/forward.h), NULL when absent */
    const char *content_type;    /* Content-Type, NULL when absent (a write needs JSON: 415) */
    const char *idempotency_key; /* Idempotency-Key: a command's command_id; NULL when absent */
    const char *peer;            /* the client's address ("127.0.0.1", "::1"); NULL unknown */
    const char *body;            /* NUL-terminated, may be "" */
    size_t body_len;
    http_query_fn query; /* NULL: the request has no query string */
    void *query_ctx;
};

/* The query argument name of req ("a" of "?a=1"), NULL when absent or when
 * req carries no query lookup. "?a=" gives "". */
const char *http_request_query(const struct http_request *req, const char *name);

/* The answer; http_response_clear frees it. */
struct http_response {
    int status;
    char *body;               /* malloc'd */
    const char *content_type; /* static; NULL = application/json */
    struct {
        const char *name; /* static */
        char value[160];
    } headers[HTTP_MAX_HEADERS];
    int nheaders;
};

/* Adds a response header (name static; value copied, truncated at 159). */
void http_response_header(struct http_response *r, const char *name, const char *value);
/* Sets status and a JSON body, taking ownership of body (malloc'd). */
void http_response_take(struct http_response *r, int status, char *body);
/* Sets status and {"error":{"code":code,"message":...}}; a 503 also gets Retry-After. */
void http_response_error(struct http_response *r, int status, const char *code, const char *fmt,
                         ...) __attribute__((format(printf, 4, 5)));
/* As http_response_error, plus "field": the request field at fault. */
void http_response_field_error(struct http_response *r, const char *code, const char *field,
                               const char *message);
void http_response_clear(struct http_response *r);

/*
 * Decodes the path part of raw (up to '?') once into out (outlen bytes).
 * Returns true, or false when it holds a bad escape, %00, a control byte, a
 * "." or ".." segment, or does not fit. Thread: any.
 */
bool http_decode_path(const char *raw, char *out, size_t outlen);

/* The readiness the public /readyz answers from, refreshed in the
 * background (ready.c: store_outbox_counts every every_ms on its own
 * thread), so no request scans a table. */
struct http_ready;
struct room_origin;
struct outbox_counts;
/* Starts the refresh of st's readiness and of health's checks (may be NULL;
 * borrowed). Returns 0 and *out or ROOMD_ENOMEM. Thread: main. */
struct node_health;
int http_ready_start(struct http_ready **out, struct store *st, const struct node_health *health,
                     int64_t every_ms);
/* Stops the refresh and frees. NULL is a no-op. Blocks for a check in progress. */
void http_ready_stop(struct http_ready *r);
/* The outbox counts of the last successful check into *oc; false when none
 * yet (or r is NULL). Thread: any; never blocks on the store. */
bool http_ready_counts(struct http_ready *r, struct outbox_counts *oc);
/* The store as the last check found it: true when that check answered and
 * the next one is not late (stale, see ready.c); *age_ms the time since the
 * last check answered (-1: none yet). The /metrics figures of the store
 * (roomd_dependency_up{dependency="store"}, the outbox rows and ages) come
 * from here, so a scrape never waits for a hung store. Thread: any; never
 * blocks on the store. */
bool http_ready_store_up(struct http_ready *r, int64_t *age_ms);
/* Fills resp with 200 {"status":"ready"} or 503 {"status":"unavailable",
 * "reason":word}; details adds the counts and the store error (admin). */
void http_ready_reply(struct http_ready *r, bool details, struct http_response *resp);

/* CreateRoom rate limit (ratelimit.c): 0 when owner of app may create one
 * more room now (counted), else the seconds until it may (Retry-After).
 * per_minute <= 0: no limit. Thread: any; never blocks but on a mutex. */
int http_create_allowed(int per_minute, const char *app, int64_t owner);

/* Fills resp for req. Never fails: every outcome is a response. */
void router_handle(const struct http_deps *d, const struct http_request *req,
                   struct http_response *resp);

/* Prints the route table, "METHOD /pattern LISTENERS" a line ("POST /v1/rooms/{room_id}/join
 * public", "GET /healthz public,admin"), then the admin API's and console's routes
 * (admin/http.h), for docs/openapi.yaml's test (roomd --print-routes).
 * Thread: any. */
void router_write_routes(FILE *out);

/* True when s is a valid app code ([a-z0-9_-]{1,32}). */
bool http_valid_app_code(const char *s);
/* True when s is a valid room_id path segment ([A-Za-z0-9_.:-]{1,63}, not
 * "." or ".."). */
bool http_valid_room_id(const char *s);

/* Handlers (resolved app code, validated room_id). */
/* Answers 401/403 for reason r: the error body, WWW-Authenticate on a 401,
 * and the refusal counted. */
void http_refuse(const struct http_deps *d, const struct http_request *req, enum auth_reason r,
                 struct http_response *resp);
/* The request as the room service forwards it to the room's owner (every
 * field points into req: valid while req is). */
struct room_origin http_room_origin(const struct http_request *req);
/* p: the verified caller; the command's acting uid must be one p may act as. */
void handle_command(const struct http_deps *d, const struct http_request *req,
                    const struct auth_principal *p, enum room_cmd_type type, const char *app,
                    const char *room_id, struct http_response *resp);
void handle_get_room(const struct http_deps *d, const struct http_request *req, const char *app,
                     const char *room_id, struct http_response *resp);
void handle_healthz(const struct http_deps *d, struct http_response *resp);
void handle_readyz(const struct http_deps *d, const struct http_request *req,
                   struct http_response *resp);
void handle_metrics(const struct http_deps *d, struct http_response *resp);
void handle_wallet_topup(const struct http_deps *d, const struct http_request *req, const char *app,
                         struct http_response *resp);
void handle_wallet_get(const struct http_deps *d, const struct http_request *req,
                       const struct auth_principal *p, const char *app, const char *uid,
                       struct http_response *resp);
/* The projections (handlers_projection.c): GET /v1/rooms?cursor=&limit= and
 * GET /v1/users/{uid}/presence. */
void handle_list_rooms(const struct http_deps *d, const struct http_request *req, const char *app,
                       struct http_response *resp);
void handle_presence(const struct http_deps *d, const struct http_request *req,
                     const struct auth_principal *p, const char *app, const char *uid,
                     struct http_response *resp);
/* GET /v1/rooms/{id}/events?after_seq=&limit= (handlers_events.c): the
 * room's events after a room_seq, from the store. Thread: any; blocks. */
void handle_room_events(const struct http_deps *d, const struct http_request *req, const char *app,
                        const char *room_id, struct http_response *resp);
/* The gift catalog (handlers_gifts.c): GET /v1/gifts, the app's catalog;
 * POST /v1/gifts (admin listener), create or change one gift. Thread: any;
 * block on the store. */
void handle_gifts_list(const struct http_deps *d, const struct http_request *req, const char *app,
                       struct http_response *resp);
void handle_gift_put(const struct http_deps *d, const struct http_request *req, const char *app,
                     struct http_response *resp);
/* POST /v1/rooms/{id}/heartbeat (handlers_heartbeat.c): p may act as the
 * body's uid; answered from the owner's memory (room_service_heartbeat).
 * Thread: any; blocks only when the room must be loaded or forwarded. */
void handle_heartbeat(const struct http_deps *d, const struct http_request *req,
                      const struct auth_principal *p, const char *app, const char *room_id,
                      struct http_response *resp);
/* POST /callbacks/tim (handlers_tim_callback.c): Tencent IM's
 * State.StateChange callback, authenticated by Tencent's signature, not a
 * JWT. Thread: any; blocks when it forwards to the room's owner. */
void handle_tim_callback(const struct http_deps *d, const struct http_request *req,
                         struct http_response *resp);
/* True when a POST req carries Content-Type application/json (any
 * parameters) or req is no POST; else false with the 415 in resp. Thread:
 * any; does not block. */
bool http_write_is_json(const struct http_request *req, struct http_response *resp);
/* True when req carries what the admin listener needs (the admin token or a
 * named one of admin.tokens; a read-only one for a GET/HEAD only), with the
 * caller in *p (p->admin_name); else false with the 401/403 in resp (counted). */
bool http_authenticate_admin(const struct http_deps *d, const struct http_request *req,
                             struct auth_principal *p, struct http_response *resp);

/* The admin API and console (handlers_admin.c, admin/http.h) on the admin
 * listener: true when path (decoded) is theirs and resp is filled. API
 * paths need the admin token (authenticated through auth_admin_ok by the
 * router first); console files are served to anyone. */
bool handle_admin(const struct http_deps *d, const struct http_request *req, const char *path,
                  struct http_response *resp);

/* Parses decimal digits only (no sign, no blanks; "007" is 7) into *out;
 * false (*out untouched) when s is not such a number or does not fit.
 * Thread: any. Never blocks. */
bool http_parse_digits(const char *s, int64_t *out);

/* Parses a positive decimal uid ("12"; not "0" nor "012"); false (*out
 * untouched) when s is not one. Thread: any. Never blocks. */
bool http_parse_uid(const char *s, int64_t *out);

/* The uid of a path ("/v1/wallet/{uid}", "/v1/users/{uid}/presence") that p
 * may act as in app: true with *uid, or false after answering resp (400
 * invalid_argument naming uid, or the refusal of http_refuse). Borrows
 * everything. Thread: an HTTP worker; never blocks. */
bool http_acting_uid(const struct http_deps *d, const struct http_request *req,
                     const struct auth_principal *p, const char *app, const char *uid_text,
                     int64_t *uid, struct http_response *resp);

/* Registers/removes the /metrics collector of the outbox counts (from the
 * readiness cache), group commit and cells (handlers_ops.c); called by
 * http_server_start/close. */
void http_metrics_register(const struct http_deps *d);
void http_metrics_unregister(const struct http_deps *d);

#endif
