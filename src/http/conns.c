/* SPDX-License-Identifier: Apache-2.0 */
/*
 * http/conns.c: the HTTP server's connections (server_internal.h): each
 * linked in its listener with its deadline, the per-address cap
 * (hs_on_accept), fair eviction past max_connections (evict_one), the
 * watchdog that shuts slow headers and bodies, and their /metrics. The
 * rules are in server.c's head comment.
 */
#include "http/server_internal.h"

#include "core/clock.h"
#include "core/log.h"
#include "core/xmalloc.h"
#include "metrics/metrics.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- connections and the watchdog ------------------------------------------------ */

void
hs_conn_set_deadline(struct listener *l, struct conn *cn, int64_t after_ms, const char *phase)
{
    if (cn == NULL)
        return;
    pthread_mutex_lock(&l->mu);
    cn->since_ms = clock_mono_us() / 1000;
    cn->deadline_ms = after_ms > 0 ? cn->since_ms + after_ms : 0;
    cn->phase = phase;
    pthread_mutex_unlock(&l->mu);
}

/* The client's address of sa as text into out ("" when unknown). */
void
hs_addr_text(const struct sockaddr *sa, char *out, size_t len)
{
    out[0] = '\0';
    if (sa != NULL && sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, out, (socklen_t)len);
    else if (sa != NULL && sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, out, (socklen_t)len);
}

/* One address and how many of l's connections it holds (evict_one). */
struct addr_count {
    const char *addr;
    int n;
};

/* The slot of addr in t, an open-addressing table of cap (a power of two)
 * entries: its own, or the free one it goes in (FNV-1a, linear probing). */
static size_t
addr_slot(const struct addr_count *t, size_t cap, const char *addr)
{
    uint32_t h = 2166136261u;

    for (const char *p = addr; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    size_t i = h & (cap - 1);
    while (t[i].addr != NULL && strcmp(t[i].addr, addr) != 0)
        i = (i + 1) & (cap - 1);
    return i;
}

/*
 * Past max_connections: shuts the idle connection (waiting for headers or
 * a body; a running handler is never cut) of the address that holds the
 * most connections, the one waiting longest, so that whoever hoards slots
 * loses them first and a client from another address gets in. Counted in
 * roomd_http_evicted_total. Called under l->mu.
 */
static void
evict_one(struct listener *l)
{
    size_t cap = 1;
    struct addr_count *t;
    struct conn *victim = NULL;
    int victim_n = 0;

    while (cap < (size_t)l->nconns * 2)
        cap <<= 1;
    t = xcalloc(cap, sizeof(*t));
    for (struct conn *cn = l->conns; cn != NULL; cn = cn->next) { /* per-address counts */
        size_t i = addr_slot(t, cap, cn->addr);
        t[i].addr = cn->addr;
        t[i].n++;
    }
    for (struct conn *cn = l->conns; cn != NULL; cn = cn->next) {
        if (cn->deadline_ms == 0 || cn->fd < 0)
            continue; /* a handler runs, or already shut */
        size_t i = addr_slot(t, cap, cn->addr);
        if (victim == NULL || t[i].n > victim_n ||
            (t[i].n == victim_n && cn->since_ms < victim->since_ms)) {
            victim = cn;
            victim_n = t[i].n;
        }
    }
    free(t);
    if (victim != NULL) {
        atomic_fetch_add(&l->evicted, 1);
        shutdown(victim->fd, SHUT_RDWR);
        victim->deadline_ms = 0;
    }
}

struct conn *
hs_conn_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

void
hs_on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                 enum MHD_ConnectionNotificationCode code)
{
    struct listener *l = cls;
    struct conn *cn = *socket_context;

    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *ai =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        cn = xcalloc(1, sizeof(*cn));
        cn->fd = ci ? ci->connect_fd : -1;
        cn->since_ms = clock_mono_us() / 1000;
        cn->deadline_ms = cn->since_ms + l->srv->header_ms;
        cn->phase = "header";
        hs_addr_text(ai != NULL ? ai->client_addr : NULL, cn->addr, sizeof(cn->addr));
        pthread_mutex_lock(&l->mu);
        cn->next = l->conns;
        if (l->conns)
            l->conns->prev = cn;
        l->conns = cn;
        if (++l->nconns > l->lc.max_connections)
            evict_one(l);
        pthread_mutex_unlock(&l->mu);
        *socket_context = cn;
        return;
    }
    if (cn == NULL)
        return;
    /* closed: unlink before MHD closes the fd, so the watchdog never
     * shuts a reused descriptor */
    pthread_mutex_lock(&l->mu);
    if (cn->prev)
        cn->prev->next = cn->next;
    else
        l->conns = cn->next;
    if (cn->next)
        cn->next->prev = cn->prev;
    l->nconns--;
    pthread_mutex_unlock(&l->mu);
    free(cn);
    *socket_context = NULL;
}

/*
 * A keep-alive connection between requests ("idle"): once the kernel saw a
 * byte of its next request (TCP_INFO's last data received is after the
 * answer), its headers get http.header_timeout from then, not from the last
 * answer: a slowloris trickling bytes is cut at the header timeout. Called
 * under the listener's mu, by the watchdog.
 */
static void
idle_first_byte(struct http_server *srv, struct conn *cn, int64_t now)
{
    struct tcp_info ti;
    socklen_t len = sizeof(ti);

    memset(&ti, 0, sizeof(ti));
    if (getsockopt(cn->fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0)
        return;
    if ((int64_t)ti.tcpi_last_data_recv >= now - cn->since_ms)
        return; /* nothing since the answer */
    cn->phase = "header";
    cn->since_ms = now - (int64_t)ti.tcpi_last_data_recv;
    if (cn->since_ms + srv->header_ms < cn->deadline_ms)
        cn->deadline_ms = cn->since_ms + srv->header_ms;
}

/* The ticker: shuts the socket of every connection past its deadline
 * (MHD then sees end of stream and closes it). */
void
hs_watchdog(void *arg)
{
    struct http_server *srv = arg;
    int64_t now = clock_mono_us() / 1000;

    for (int i = 0; i < 2; i++) {
        struct listener *l = &srv->lst[i];
        if (l->mhd == NULL)
            continue;
        pthread_mutex_lock(&l->mu);
        for (struct conn *cn = l->conns; cn != NULL; cn = cn->next) {
            if (cn->deadline_ms != 0 && cn->fd >= 0 && strcmp(cn->phase, "idle") == 0)
                idle_first_byte(srv, cn, now);
            if (cn->deadline_ms == 0 || now < cn->deadline_ms || cn->fd < 0)
                continue;
            /* counted first: a client that sees the cut may read /metrics at once */
            atomic_fetch_add(strcmp(cn->phase, "body") == 0 ? &l->cut_body : &l->cut_header, 1);
            shutdown(cn->fd, SHUT_RDWR);
            cn->deadline_ms = 0;
        }
        pthread_mutex_unlock(&l->mu);
    }
}

/* /metrics: slow clients cut and smuggling attempts refused, per listener. */
void
hs_collect_conns(void *arg, struct metrics_text *t)
{
    static const char *const cut = "roomd_http_cut_total";
    static const char *const framing = "roomd_http_framing_refused_total";
    static const char *const names[2] = {"public", "admin"};
    struct http_server *srv = arg;
    char labels[64];

    metrics_family(t, cut, "counter", "Connections shut for a slow header or body.");
    for (int i = 0; i < 2; i++) {
        snprintf(labels, sizeof(labels), "listener=\"%s\",phase=\"header\"", names[i]);
        metrics_count(t, cut, labels, (uint64_t)atomic_load(&srv->lst[i].cut_header));
        snprintf(labels, sizeof(labels), "listener=\"%s\",phase=\"body\"", names[i]);
        metrics_count(t, cut, labels, (uint64_t)atomic_load(&srv->lst[i].cut_body));
    }
    metrics_family(t, "roomd_http_evicted_total", "counter",
                   "Idle connections shut to admit one past max_connections (the address "
                   "holding the most loses its oldest).");
    for (int i = 0; i < 2; i++) {
        snprintf(labels, sizeof(labels), "listener=\"%s\"", names[i]);
        metrics_count(t, "roomd_http_evicted_total", labels,
                      (uint64_t)atomic_load(&srv->lst[i].evicted));
    }
    metrics_family(t, "roomd_http_refused_per_ip_total", "counter",
                   "Connections refused because their address held its per-address limit.");
    for (int i = 0; i < 2; i++) {
        snprintf(labels, sizeof(labels), "listener=\"%s\"", names[i]);
        metrics_count(t, "roomd_http_refused_per_ip_total", labels,
                      (uint64_t)atomic_load(&srv->lst[i].refused_per_ip));
    }
    metrics_family(t, framing, "counter",
                   "Requests refused 400 for repeated or conflicting Content-Length / "
                   "Transfer-Encoding.");
    for (int i = 0; i < 2; i++) {
        snprintf(labels, sizeof(labels), "listener=\"%s\"", names[i]);
        metrics_count(t, framing, labels, (uint64_t)atomic_load(&srv->lst[i].refused_smuggling));
    }
}

/* Whether the address text a is one of http.trusted_proxies. */
bool
hs_trusted(const struct http_server *srv, const char *a)
{
    for (int i = 0; i < srv->nproxies; i++)
        if (conf_cidr_match(&srv->proxies[i], a))
            return true;
    return false;
}

/* MHD_OPTION_NOTIFY_CONNECTION's companion, MHD_OPTION_ACCEPT_POLICY_CALLBACK:
 * refuses a connection from an address that already holds the listener's
 * per-address cap, except from http.trusted_proxies (a load balancer carries
 * many clients). Runs on the listening thread, like NOTIFY_STARTED. */
enum MHD_Result
hs_on_accept(void *cls, const struct sockaddr *sa, socklen_t salen)
{
    struct listener *l = cls;
    char addr[INET6_ADDRSTRLEN];
    int n = 0;

    (void)salen;
    if (l->lc.per_ip <= 0)
        return MHD_YES;
    hs_addr_text(sa, addr, sizeof(addr));
    if (hs_trusted(l->srv, addr))
        return MHD_YES;
    pthread_mutex_lock(&l->mu);
    for (struct conn *cn = l->conns; cn != NULL && n < l->lc.per_ip; cn = cn->next)
        n += strcmp(cn->addr, addr) == 0;
    pthread_mutex_unlock(&l->mu);
    if (n < l->lc.per_ip)
        return MHD_YES;
    /* counted, and a warning the log's per-kind limit bounds (core/log.h:
     * a flood of refusals writes at most LOG_KIND_LINES per interval) */
    atomic_fetch_add(&l->refused_per_ip, 1);
    log_warn("http", "connection refused: the address holds its max_connections_per_ip",
             "listener=%s limit=%d", l->which == HTTP_ADMIN ? "admin" : "public", l->lc.per_ip);
    return MHD_NO;
}
