/* SPDX-License-Identifier: Apache-2.0 */
/*
 * http/server_internal.h: private to the HTTP server (server.c: the
 * daemons, requests and bodies; conns.c: the connections, their limits, the
 * watchdog and eviction). Every shared function starts with hs_.
 */
#ifndef ROOMD_HTTP_SERVER_INTERNAL_H
#define ROOMD_HTTP_SERVER_INTERNAL_H

#include "conf/conf.h"
#include "http/server.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

struct metrics_text;

/* How long http_server_close waits for in-flight requests. */
#define DRAIN_MAX_MS 10000
/* How often the watchdog looks for slow clients, and readiness refreshes. */
#define WATCHDOG_EVERY_MS 100
#define READY_EVERY_MS 1000
#define TLS_FILE_MAX (64 * 1024)
/* Connections admitted past max_connections, each evicting an idle one. */
#define EVICT_HEADROOM 32

struct http_server;

/* One TCP connection (MHD's socket context), linked in its listener. */
struct conn {
    struct conn *prev, *next;
    int fd;
    int64_t deadline_ms;         /* monotonic; 0 = none (a handler is running) */
    const char *phase;           /* what the deadline waits for: "header" | "body" | "idle" */
    int64_t since_ms;            /* monotonic: when its current wait began */
    char addr[INET6_ADDRSTRLEN]; /* the client's address; "" unknown */
};

/* One listening daemon. */
/* What one listener is configured with. */
struct listener_conf {
    const char *listen, *cert_file, *key_file;
    int max_connections, per_ip;
};

/* The config keys of each listener's settings, as its errors name them. */
static const struct listener_keys {
    const char *listen, *cert_file, *key_file;
} listener_keys[] = {
    [HTTP_PUBLIC] = {"http.listen", "http.tls.cert_file", "http.tls.key_file"},
    [HTTP_ADMIN] = {"admin.listen", "admin.tls.cert_file", "admin.tls.key_file"},
};

struct listener {
    struct http_server *srv;
    enum http_listener which;
    struct listener_conf lc;
    int fd; /* bound by http_server_bind, MHD's once started; -1 = none */
    struct MHD_Daemon *mhd;
    pthread_mutex_t mu; /* conns, nconns */
    struct conn *conns;
    int nconns;
    atomic_uint_least64_t cut_header, cut_body, refused_smuggling, evicted, refused_per_ip;
    char *tls_cert, *tls_key; /* PEM text (MHD keeps pointers) */
};

struct http_server {
    struct listener lst[2]; /* [HTTP_PUBLIC], [HTTP_ADMIN] */
    struct http_deps deps;  /* copy; its pointers are borrowed, ready is ours */
    size_t max_body;
    int64_t header_ms, body_ms, idle_ms;
    struct conf_cidr proxies[CONF_MAX_LIST]; /* http.trusted_proxies */
    int nproxies;
    atomic_int inflight;  /* requests between their headers and completion */
    atomic_bool stopping; /* close began: new requests get 503 + close */
    struct ticker *watchdog;
    bool started; /* http_server_start succeeded */
};

/* Per-request state: made by the URI log callback (the raw target), freed
 * in on_completed. */
struct req_state {
    char *uri; /* as sent */
    bool started;
    char *body;
    size_t len, cap;
    bool too_big;
};

/* conns.c. Thread: MHD's (the connection's, or the listening thread for
 * hs_on_accept), the watchdog's ticker (hs_watchdog) or the scrape's
 * (hs_collect_conns); each takes the listener's mu; none blocks. */
/* Sets cn's deadline to after_ms from now (0: none, a handler runs) for
 * phase ("header" | "body" | "idle" | "handler"). NULL cn: nothing. */
void hs_conn_set_deadline(struct listener *l, struct conn *cn, int64_t after_ms, const char *phase);
/* c's struct conn (its socket context), or NULL. */
struct conn *hs_conn_of(struct MHD_Connection *c);
/* MHD_OPTION_NOTIFY_CONNECTION (cls: the listener): links a new connection
 * (evicting one past max_connections), unlinks and frees a closed one. */
void hs_on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                      enum MHD_ConnectionNotificationCode code);
/* The ticker's fn (arg: the server): shuts every connection past its deadline. */
void hs_watchdog(void *arg);
/* The /metrics collector of the cut, evicted and refused connections. */
void hs_collect_conns(void *arg, struct metrics_text *t);
/* MHD_OPTION_ACCEPT_POLICY_CALLBACK (cls: the listener): the per-address cap. */
enum MHD_Result hs_on_accept(void *cls, const struct sockaddr *sa, socklen_t salen);
/* The address of sa as text into out ("" when unknown). */
void hs_addr_text(const struct sockaddr *sa, char *out, size_t len);
/* True when address a is one of http.trusted_proxies. */
bool hs_trusted(const struct http_server *srv, const char *a);

#endif
