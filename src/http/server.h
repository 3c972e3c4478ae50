/* SPDX-License-Identifier: Apache-2.0 */
/*
 * server.h: the inbound HTTP API (ARCHITECTURE §6) on libmicrohttpd, one
 * thread per connection (commands block on their cell and on group commit;
 * a connection limit bounds the threads). router.c maps paths to handlers;
 * handlers parse the body with room_cmd_parse and call room_service_execute.
 */
#ifndef ROOMD_HTTP_SERVER_H
#define ROOMD_HTTP_SERVER_H

#include <stddef.h>

struct conf;
struct room_service;
struct wallet;
struct projection;
struct store;
struct group_commit;
struct http_server;
struct admin;
struct auth;
struct http_ready;

/* The two listeners: the public API (http.listen) and the operator's
 * (admin.listen: /internal/v1/..., /metrics, readiness details, top-up). */
enum http_listener { HTTP_PUBLIC = 0, HTTP_ADMIN = 1 };
struct node_health;

/* Borrowed; must outlive the server. projection and gc may be NULL (gc only
 * feeds the group commit counters of /metrics); auth NULL = auth.mode none.
 * ready is the server's own (http_server_start sets it in its copy). */
struct http_deps {
    const struct conf *conf;
    struct room_service *rooms;
    struct wallet *wallet;
    struct projection *projection;
    struct store *store;
    struct group_commit *gc;
    struct auth *auth;
    const struct node_health *health; /* /readyz checks besides the store; NULL = none */
    struct http_ready *ready;
    struct admin *admin; /* the admin API and console on admin.listen; NULL = none */
};

/* Binds conf->http.listen and conf->admin.listen (listening sockets:
 * connections wait in the backlog) and reads their TLS files; starts no
 * thread and serves nothing yet, so main binds before it opens anything
 * else. conf is borrowed and must outlive the server. Returns 0 and *out
 * (the caller's: http_server_close), or ROOMD_EUNAVAIL / ROOMD_EINVAL with
 * err naming the key ("admin.listen: bind 127.0.0.1:8081: Address in
 * use"). Thread: main; does not block. */
int http_server_bind(struct http_server **out, const struct conf *conf, char *err, size_t errlen);
/* Starts serving both bound listeners (each its own connection limits), the
 * readiness refresh and the watchdog cutting slow clients
 * (http.header_timeout, http.body_timeout). d is copied, its pointers
 * borrowed. Returns 0, or an error code with err; on error the caller still
 * closes srv. Thread: main; does not block. */
int http_server_start(struct http_server *srv, const struct http_deps *d, char *err, size_t errlen);
/* The readiness cache srv's refresh fills (NULL before http_server_start),
 * borrowed until http_server_close. Thread: any. */
struct http_ready *http_server_ready(struct http_server *srv);
/* Stops accepting, waits for in-flight requests, frees (a server bound but
 * never started: closes its sockets). NULL is a no-op. */
void http_server_close(struct http_server *srv);

#endif
