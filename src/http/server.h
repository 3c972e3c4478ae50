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
struct node_health;

/* Borrowed; must outlive the server. projection and gc may be NULL (gc only
 * feeds the group commit counters of /metrics). */
struct http_deps {
    const struct conf *conf;
    struct room_service *rooms;
    struct wallet *wallet;
    struct projection *projection;
    struct store *store;
    struct group_commit *gc;
    const struct node_health *health; /* /readyz checks besides the store; NULL = none */
};

/* Binds conf->http.listen and starts serving. Returns 0 and *out, or
 * ROOMD_EUNAVAIL with err ("bind 127.0.0.1:8080: Address in use"). Thread: main. */
int http_server_open(struct http_server **out, const struct http_deps *d, char *err, size_t errlen);
/* Stops accepting, waits for in-flight requests, frees. NULL is a no-op. */
void http_server_close(struct http_server *srv);

#endif
