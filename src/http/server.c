/* SPDX-License-Identifier: Apache-2.0 */
/*
 * server.c: the libmicrohttpd side of the HTTP API (server.h): two daemons,
 * the public listener (http.*) and the admin listener (admin.*), each with
 * its own connection limit, so a flood of one cannot lock the other out.
 * One thread per connection (handlers block on their room cell and on group
 * commit), SCHED_BATCH (listener_start), keep-alive, an idle timeout. This file accumulates the
 * body under http.max_body_bytes and hands complete requests to router_handle() (router.c); read
 * that next.
 *
 * Hardening done here, before any handler runs:
 *  - repeated or conflicting Content-Length, a Content-Length that is not
 *    digits, and Content-Length with Transfer-Encoding answer 400 and close
 *    (request smuggling behind a proxy);
 *  - a watchdog (ticker.h) shuts the socket of a connection whose headers
 *    are not in within http.header_timeout (for a keep-alive connection:
 *    after header_timeout from the first byte of its next request, seen by
 *    TCP_INFO, and at most request_timeout + header_timeout since its last
 *    answer) or whose body is not in within http.body_timeout from the end
 *    of its headers; bytes trickling in never extend either;
 *  - http.max_connections_per_ip on the public listener,
 *    admin.max_connections_per_ip on the admin one (on_accept), except for
 *    http.trusted_proxies, whose X-Forwarded-For names the client of each
 *    request (client_text) for the rate limits and logs;
 *  - fair eviction: libmicrohttpd admits EVICT_HEADROOM connections past
 *    max_connections, and a connection past it evicts (shuts) the idle one
 *    (waiting for its headers or body) of the address holding the most
 *    connections, the oldest of them: idle sockets cannot starve a client
 *    from another address (evict_one);
 *  - the raw request target (MHD_OPTION_URI_LOG_CALLBACK) goes to the router,
 *    which percent-decodes it once; libmicrohttpd's own decoded path is not used.
 *
 * Body limit: a Content-Length above the limit is answered 413 before any of
 * the body is read (MHD then closes the connection); a chunked body that
 * grows past the limit is drained and then answered 413.
 */
#include "http/server.h"
#include "http/server_internal.h"

#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/file.h"
#include "core/log.h"
#include "core/uuid.h"
#include "core/xmalloc.h"
#include "http/router.h"
#include "http/ticker.h"
#include "metrics/metrics.h"

#include "cluster/forward.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---- responses ------------------------------------------------------------------ */
static enum MHD_Result
send_response(struct MHD_Connection *c, struct http_response *resp)
{
    struct MHD_Response *r;
    enum MHD_Result ret;
    char *body = resp->body;
    size_t len = body ? strlen(body) : 0;

    resp->body = NULL; /* MHD frees it with free() */
    r = MHD_create_response_from_buffer(len, body ? body : "",
                                        body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (r == NULL) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            resp->content_type ? resp->content_type : "application/json");
    for (int i = 0; i < resp->nheaders; i++)
        MHD_add_response_header(r, resp->headers[i].name, resp->headers[i].value);
    /* the request's ids (log_set_request): echoed, for joining logs */
    if (*log_request_id() != '\0')
        MHD_add_response_header(r, "X-Request-Id", log_request_id());
    if (*log_traceparent() != '\0')
        MHD_add_response_header(r, "traceparent", log_traceparent());
    ret = MHD_queue_response(c, (unsigned int)resp->status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result
send_too_big(struct http_server *srv, struct MHD_Connection *c)
{
    struct http_response resp = {0};
    enum MHD_Result ret;

    http_response_error(&resp, 413, "payload_too_large", "body: larger than %zu bytes",
                        srv->max_body);
    ret = send_response(c, &resp);
    http_response_clear(&resp);
    return ret;
}

/* Appends one piece of the body, or flags the request as too big (drain). */
static void
accumulate(struct http_server *srv, struct req_state *rs, const char *data, size_t n)
{
    if (rs->too_big)
        return;
    if (rs->len + n > srv->max_body) {
        rs->too_big = true;
        free(rs->body);
        rs->body = NULL;
        rs->len = rs->cap = 0;
        return;
    }
    if (rs->len + n + 1 > rs->cap) {
        rs->cap = (rs->len + n + 1) * 2;
        if (rs->cap > srv->max_body + 1)
            rs->cap = srv->max_body + 1;
        rs->body = xrealloc(rs->body, rs->cap);
    }
    memcpy(rs->body + rs->len, data, n);
    rs->len += n;
    rs->body[rs->len] = '\0';
}

/* What the framing headers say: how many Content-Length and
 * Transfer-Encoding headers, whether a Content-Length is not digits, and
 * whether a Transfer-Encoding is anything but "chunked" alone (which
 * libmicrohttpd would not decode: "identity, chunked" waited for the body
 * timeout). */
struct framing {
    int content_length, transfer_encoding;
    bool bad_length, bad_coding;
    unsigned long long length;
};

static enum MHD_Result
scan_framing(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    struct framing *f = cls;

    (void)kind;
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0) {
        char *end;
        f->content_length++;
        errno = 0;
        f->length = strtoull(value, &end, 10);
        if (value[0] < '0' || value[0] > '9' || *end != '\0' || errno != 0)
            f->bad_length = true;
    } else if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0) {
        f->transfer_encoding++;
        f->bad_coding = f->bad_coding || strcasecmp(value, "chunked") != 0;
    }
    return MHD_YES;
}

/* Answers 400 + close to an ambiguous framing; MHD_YES when the framing is
 * fine (and *too_big when the announced length is above the limit). */
static bool
framing_ok(struct listener *l, struct MHD_Connection *c, bool *too_big, enum MHD_Result *ret)
{
    struct framing f = {0};
    struct http_response resp = {0};

    MHD_get_connection_values(c, MHD_HEADER_KIND, scan_framing, &f);
    *too_big = f.content_length == 1 && !f.bad_length && f.length > l->srv->max_body;
    if (f.content_length <= 1 && !f.bad_length && !(f.content_length && f.transfer_encoding) &&
        f.transfer_encoding <= 1 && !f.bad_coding)
        return true;
    atomic_fetch_add(&l->refused_smuggling, 1);
    http_response_error(&resp, 400, "bad_request",
                        "Content-Length: repeated, not a number, or with Transfer-Encoding; "
                        "or a Transfer-Encoding other than chunked");
    http_response_header(&resp, MHD_HTTP_HEADER_CONNECTION, "close");
    *ret = send_response(c, &resp);
    http_response_clear(&resp);
    return false;
}

/* The client's address of c as text into out ("127.0.0.1", "::1"; ""
 * when unknown). */
static void
peer_text(struct MHD_Connection *c, char *out, size_t len)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);

    hs_addr_text(ci != NULL ? ci->client_addr : NULL, out, len);
}

/* X-Forwarded-For headers, joined with "," in the order sent (xff_join). */
struct xff {
    char buf[1024];
    size_t len;
};

static enum MHD_Result
xff_join(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    struct xff *x = cls;
    int n;

    (void)kind;
    if (strcasecmp(key, "X-Forwarded-For") != 0 || value == NULL)
        return MHD_YES;
    n = snprintf(x->buf + x->len, sizeof(x->buf) - x->len, "%s%s", x->len ? "," : "", value);
    if (n < 0 || (size_t)n >= sizeof(x->buf) - x->len)
        return MHD_NO; /* too long: what fitted is kept (its right end is lost) */
    x->len += (size_t)n;
    return MHD_YES;
}

/*
 * The client of request c into out: the socket's peer, or, when that peer
 * is one of http.trusted_proxies, the right-most address of X-Forwarded-For
 * that is not a trusted proxy (a hop that is not an address ends the walk:
 * the last trusted hop is the client then). Any other peer's header is
 * ignored.
 */
static void
client_text(struct http_server *srv, struct MHD_Connection *c, char *out, size_t len)
{
    struct xff x = {.len = 0};

    peer_text(c, out, len);
    if (srv->nproxies == 0 || !hs_trusted(srv, out))
        return;
    x.buf[0] = '\0';
    MHD_get_connection_values(c, MHD_HEADER_KIND, xff_join, &x);
    while (x.len > 0) {
        char *hop = strrchr(x.buf, ',');
        char *start = hop ? hop + 1 : x.buf, *end;
        unsigned char a[16];
        while (*start == ' ' || *start == '\t')
            start++;
        end = start + strlen(start);
        while (end > start && (end[-1] == ' ' || end[-1] == '\t'))
            *--end = '\0';
        if ((inet_pton(AF_INET, start, a) != 1 && inet_pton(AF_INET6, start, a) != 1) ||
            (size_t)(end - start) >= len)
            return; /* not an address: out stays the last trusted hop */
        snprintf(out, len, "%s", start);
        if (!hs_trusted(srv, out))
            return;
        if (hop == NULL)
            return;
        *hop = '\0';
        x.len = (size_t)(hop - x.buf);
    }
}

/* http_query_fn over MHD: ctx is the connection. */
static const char *
query_arg(void *ctx, const char *name)
{
    return MHD_lookup_connection_value(ctx, MHD_GET_ARGUMENT_KIND, name);
}

/* MHD_OPTION_URI_LOG_CALLBACK: keeps the request target as sent; the
 * result becomes the request's *con_cls. */
static void *
on_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
    struct req_state *rs = xcalloc(1, sizeof(*rs));

    (void)cls;
    (void)c;
    rs->uri = xstrdup(uri ? uri : "");
    return rs;
}

/* The first call of a request (headers in): limits and framing. Returns
 * MHD_YES to read the body, or the result of an answer already queued. */
static enum MHD_Result
on_headers(struct listener *l, struct MHD_Connection *c, struct req_state *rs)
{
    struct http_server *srv = l->srv;
    struct http_response resp = {0};
    enum MHD_Result ret = MHD_YES;
    bool too_big = false;

    rs->started = true;
    atomic_fetch_add(&srv->inflight, 1);
    hs_conn_set_deadline(l, hs_conn_of(c), srv->body_ms, "body");
    if (atomic_load(&srv->stopping)) {
        http_response_error(&resp, 503, "unavailable", "server is shutting down");
        http_response_header(&resp, MHD_HTTP_HEADER_CONNECTION, "close");
        ret = send_response(c, &resp);
        http_response_clear(&resp);
        return ret;
    }
    if (!framing_ok(l, c, &too_big, &ret))
        return ret;
    if (too_big) {
        rs->too_big = true;
        return send_too_big(srv, c);
    }
    return MHD_YES;
}

/* X-Request-Id: [A-Za-z0-9._:-]{1,64}. */
static bool
request_id_ok(const char *s)
{
    size_t n = strlen(s);

    return n >= 1 && n <= HTTP_REQUEST_ID_MAX &&
           strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:-") == n;
}

/* A W3C traceparent of version 00: "00-<32 hex>-<16 hex>-<2 hex>", lower
 * case, trace-id and parent-id not all zeros. */
static bool
traceparent_ok(const char *s)
{
    static const char hex[] = "0123456789abcdef";

    if (strlen(s) != 55 || strncmp(s, "00-", 3) != 0 || s[35] != '-' || s[52] != '-')
        return false;
    if (strspn(s + 3, hex) != 32 || strspn(s + 36, hex) != 16 || strspn(s + 53, hex) != 2)
        return false;
    return strncmp(s + 3, "00000000000000000000000000000000", 32) != 0 &&
           strncmp(s + 36, "0000000000000000", 16) != 0;
}

/* The request's ids into this thread's log context (log_set_request): a
 * given X-Request-Id (false: it is malformed, a 400 for the caller) or a
 * new UUIDv7; a well-formed traceparent is kept, another one dropped (W3C:
 * a receiver restarts the trace rather than refuse the request). */
static bool
request_ids(struct MHD_Connection *c)
{
    const char *rid = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Request-Id");
    const char *tp = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "traceparent");
    char gen[UUID_STR_LEN];

    if (tp != NULL && !traceparent_ok(tp))
        tp = NULL;
    if (rid != NULL && !request_id_ok(rid)) {
        uuid_v7(clock_wall_ms(), gen);
        log_set_request(gen, tp);
        return false;
    }
    if (rid == NULL || *rid == '\0') {
        uuid_v7(clock_wall_ms(), gen);
        rid = gen;
    }
    log_set_request(rid, tp);
    return true;
}

/*
 * MHD calls this once when the headers are in (rs->started false), then once
 * per piece of body (*upload_data_size > 0), then once more with nothing
 * left: that last call answers.
 */
static enum MHD_Result
on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
           const char *version, const char *upload_data, size_t *upload_data_size, void **con_cls)
{
    struct listener *l = cls;
    struct http_server *srv = l->srv;
    struct req_state *rs = *con_cls;
    struct http_response resp = {0};
    enum MHD_Result ret;

    (void)version;
    if (rs == NULL) /* no URI callback ran: cannot happen with MHD >= 0.9.40 */
        *con_cls = rs = on_uri(NULL, url, c);
    if (!rs->started)
        return on_headers(l, c, rs);
    if (*upload_data_size > 0) {
        accumulate(srv, rs, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return MHD_YES;
    }
    hs_conn_set_deadline(l, hs_conn_of(c), 0, "handler");
    if (rs->too_big)
        return send_too_big(srv, c);

    char peer[INET6_ADDRSTRLEN];
    client_text(srv, c, peer, sizeof(peer));
    struct http_request req = {
        .listener = l->which,
        .method = method,
        .path = rs->uri,
        .app_header = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-App-Code"),
        .authorization =
            MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION),
        .forwarded_by = MHD_lookup_connection_value(c, MHD_HEADER_KIND, FORWARD_HOP_HEADER),
        .content_type =
            MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE),
        .idempotency_key = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Idempotency-Key"),
        .peer = peer,
        .body = rs->body ? rs->body : "",
        .body_len = rs->len,
        .query = query_arg,
        .query_ctx = c,
    };
    if (request_ids(c))
        router_handle(&srv->deps, &req, &resp);
    else
        http_response_field_error(&resp, "invalid_argument", "X-Request-Id",
                                  "X-Request-Id: want [A-Za-z0-9._:-]{1,64}");
    if (resp.status == 0)
        http_response_error(&resp, 500, "internal", "no response");
    ret = send_response(c, &resp);
    http_response_clear(&resp);
    log_set_request(NULL, NULL);
    return ret;
}

static void
on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
             enum MHD_RequestTerminationCode toe)
{
    struct listener *l = cls;
    struct req_state *rs = *con_cls;

    (void)toe;
    /* keep-alive: the next request's headers get the idle time plus their own */
    hs_conn_set_deadline(l, hs_conn_of(c), l->srv->idle_ms + l->srv->header_ms, "idle");
    if (rs != NULL) {
        if (rs->started)
            atomic_fetch_sub(&l->srv->inflight, 1);
        free(rs->uri);
        free(rs->body);
        free(rs);
        *con_cls = NULL;
    }
}

static void
on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    char buf[512];
    size_t n;

    (void)cls;
    vsnprintf(buf, sizeof(buf), fmt, ap);
    n = strlen(buf);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        buf[--n] = '\0';
    for (char *p = buf; *p; p++)
        if (*p == '"')
            *p = '\'';
    log_warn("http", "libmicrohttpd", "detail=\"%s\"", buf);
}

/* Splits "host:port" / "[v6]:port" and binds a listening socket. Returns
 * the fd, or -1 with err filled. */
static int
listen_on(const char *listen_addr, char *err, size_t errlen)
{
    char host[256];
    const char *colon = strrchr(listen_addr, ':');
    const char *h = listen_addr;
    size_t hlen;
    struct addrinfo hints, *res = NULL, *ai;
    int fd = -1, gai, one = 1, saved = 0;

    if (colon == NULL || colon[1] == '\0') {
        snprintf(err, errlen, "%s: want host:port", listen_addr);
        return -1;
    }
    hlen = (size_t)(colon - listen_addr);
    if (hlen >= 2 && h[0] == '[' && h[hlen - 1] == ']') {
        h++;
        hlen -= 2;
    }
    if (hlen >= sizeof(host)) {
        snprintf(err, errlen, "%s: host too long", listen_addr);
        return -1;
    }
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    gai = getaddrinfo(hlen ? host : NULL, colon + 1, &hints, &res);
    if (gai != 0) {
        snprintf(err, errlen, "%s: %s", listen_addr, gai_strerror(gai));
        return -1;
    }
    for (ai = res; ai != NULL; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
        if (fd < 0) {
            saved = errno;
            continue;
        }
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 1024) == 0)
            break;
        saved = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        snprintf(err, errlen, "bind %s: %s", listen_addr, strerror(saved));
    return fd;
}

/* Reads a PEM file (cert or key) for MHD's TLS. NULL with err when it cannot. */
static char *
read_pem(const char *key, const char *file, char *err, size_t errlen)
{
    size_t n;
    char *buf = file_read_text(key, file, TLS_FILE_MAX, &n, err, errlen);

    if (buf != NULL && (n == 0 || strstr(buf, "-----BEGIN") == NULL)) {
        snprintf(err, errlen, "%s: %s is not PEM", key, file);
        free(buf);
        return NULL;
    }
    return buf;
}

/* Binds one listener's socket and reads its TLS files; starts nothing.
 * Returns 0, or ROOMD_EUNAVAIL / EINVAL with err naming the key. */
static int
listener_bind(struct http_server *srv, enum http_listener which, const struct listener_conf *lc,
              char *err, size_t errlen)
{
    struct listener *l = &srv->lst[which];
    const struct listener_keys *keys = &listener_keys[which];
    char why[200];

    l->srv = srv;
    l->which = which;
    l->lc = *lc;
    pthread_mutex_init(&l->mu, NULL);
    if (lc->cert_file[0] != '\0') {
        if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
            snprintf(err, errlen, "%s: this libmicrohttpd has no TLS", keys->cert_file);
            return ROOMD_EINVAL;
        }
        if ((l->tls_cert = read_pem(keys->cert_file, lc->cert_file, err, errlen)) == NULL ||
            (l->tls_key = read_pem(keys->key_file, lc->key_file, err, errlen)) == NULL)
            return ROOMD_EINVAL;
    }
    l->fd = listen_on(lc->listen, why, sizeof(why));
    if (l->fd < 0) {
        snprintf(err, errlen, "%s: %s", keys->listen, why);
        return ROOMD_EUNAVAIL;
    }
    return 0;
}

/* Starts one bound listener's daemon on its socket. Returns 0, or
 * ROOMD_EUNAVAIL with err. Its threads run SCHED_BATCH (when this thread is
 * SCHED_OTHER): a thread they wake (a group commit's follower by its leader,
 * a connection by its client's next request) no longer preempts the one
 * running, it waits for the tick or for a core to free; fewer involuntary
 * context switches per command under load, the same 1-client latency
 * (bench/README.md, issue 32). Threads a handler starts (the admin's peer
 * queries) inherit it too. */
static int
listener_start(struct http_server *srv, enum http_listener which, unsigned int idle_s, char *err,
               size_t errlen)
{
    struct listener *l = &srv->lst[which];
    const struct listener_conf *lc = &l->lc;
    struct MHD_OptionItem opts[16];
    unsigned int flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                         MHD_USE_AUTO | MHD_USE_ITC | MHD_USE_ERROR_LOG;
    int n = 0;

    if (l->tls_cert != NULL) {
        flags |= MHD_USE_TLS;
        opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, l->tls_cert};
        opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, l->tls_key};
    }
    opts[n++] = (struct MHD_OptionItem){MHD_OPTION_LISTEN_SOCKET, l->fd, NULL};
    opts[n++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_LIMIT,
                                        (intptr_t)lc->max_connections + EVICT_HEADROOM, NULL};
    opts[n++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_TIMEOUT, (intptr_t)idle_s, NULL};
    opts[n++] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    /* the daemon's threads (its listener, a thread per connection) inherit the starting
     * thread's policy: SCHED_BATCH for them, this thread's own policy back afterwards */
    int policy;
    struct sched_param sp_saved, sp_batch = {0};
    bool batch = pthread_getschedparam(pthread_self(), &policy, &sp_saved) == 0 &&
                 policy == SCHED_OTHER &&
                 pthread_setschedparam(pthread_self(), SCHED_BATCH, &sp_batch) == 0;
    l->mhd = MHD_start_daemon(flags, 0, hs_on_accept, l, on_request, l, MHD_OPTION_EXTERNAL_LOGGER,
                              on_mhd_log, l, MHD_OPTION_NOTIFY_COMPLETED, on_completed, l,
                              MHD_OPTION_NOTIFY_CONNECTION, hs_on_connection, l,
                              MHD_OPTION_URI_LOG_CALLBACK, on_uri, l, MHD_OPTION_ARRAY, opts,
                              MHD_OPTION_END);
    if (batch)
        pthread_setschedparam(pthread_self(), policy, &sp_saved);
    if (l->mhd == NULL) {
        snprintf(err, errlen, "%s: %s: libmicrohttpd did not start", listener_keys[l->which].listen,
                 lc->listen);
        return ROOMD_EUNAVAIL;
    }
    l->fd = -1; /* MHD's now: it closes it */
    return 0;
}

/* Stops accepting on both listeners, lets in-flight requests answer, stops. */
static void
listeners_stop(struct http_server *srv)
{
    struct timespec tick = {0, 5 * 1000 * 1000};

    /* MHD_stop_daemon alone would shut in-flight sockets down mid-request */
    atomic_store(&srv->stopping, true);
    for (int i = 0; i < 2; i++) {
        if (srv->lst[i].mhd == NULL)
            continue;
        MHD_socket lfd = MHD_quiesce_daemon(srv->lst[i].mhd);
        if (lfd != MHD_INVALID_SOCKET)
            close(lfd);
    }
    for (int waited = 0; atomic_load(&srv->inflight) > 0 && waited < DRAIN_MAX_MS; waited += 5)
        nanosleep(&tick, NULL);
    if (atomic_load(&srv->inflight) > 0)
        log_warn("http", "closing with requests in flight", "n=%d", atomic_load(&srv->inflight));
    for (int i = 0; i < 2; i++) {
        struct listener *l = &srv->lst[i];
        if (l->mhd != NULL)
            MHD_stop_daemon(l->mhd);
        if (l->fd >= 0) /* bound, never started */
            close(l->fd);
        if (l->srv != NULL)
            pthread_mutex_destroy(&l->mu);
        free(l->tls_cert);
        free(l->tls_key);
    }
}

int
http_server_bind(struct http_server **out, const struct conf *conf, char *err, size_t errlen)
{
    const struct conf_http *hc = &conf->http;
    const struct conf_admin *ac = &conf->admin;
    struct http_server *srv;
    int rc;

    *out = NULL;
    srv = xcalloc(1, sizeof(*srv));
    srv->lst[HTTP_PUBLIC].fd = srv->lst[HTTP_ADMIN].fd = -1;
    srv->max_body = hc->max_body_bytes > 0 ? (size_t)hc->max_body_bytes : 1048576;
    srv->header_ms = hc->header_timeout_ms > 0 ? hc->header_timeout_ms : 10000;
    srv->body_ms = hc->body_timeout_ms > 0 ? hc->body_timeout_ms : 30000;
    srv->idle_ms = hc->request_timeout_ms > 0 ? hc->request_timeout_ms : 30000;
    for (int i = 0; i < hc->ntrusted_proxies && i < CONF_MAX_LIST; i++) {
        if (!conf_cidr_parse(hc->trusted_proxies[i], &srv->proxies[srv->nproxies++])) {
            snprintf(err, errlen, "http.trusted_proxies: want an address or CIDR, got \"%s\"",
                     hc->trusted_proxies[i]);
            free(srv);
            return ROOMD_EINVAL;
        }
    }

    const struct listener_conf pub = {
        hc->listen,
        hc->tls_cert_file ? hc->tls_cert_file : "",
        hc->tls_key_file ? hc->tls_key_file : "",
        hc->max_connections > 0 ? hc->max_connections : 1024,
        hc->max_connections_per_ip,
    };
    const struct listener_conf adm = {
        ac->listen ? ac->listen : "127.0.0.1:8081",
        ac->tls_cert_file ? ac->tls_cert_file : "",
        ac->tls_key_file ? ac->tls_key_file : "",
        ac->max_connections > 0 ? ac->max_connections : 64,
        ac->max_connections_per_ip,
    };
    if ((rc = listener_bind(srv, HTTP_PUBLIC, &pub, err, errlen)) != 0 ||
        (rc = listener_bind(srv, HTTP_ADMIN, &adm, err, errlen)) != 0) {
        http_server_close(srv);
        return rc;
    }
    *out = srv;
    return 0;
}

struct http_ready *
http_server_ready(struct http_server *srv)
{
    return srv->deps.ready;
}

int
http_server_start(struct http_server *srv, const struct http_deps *d, char *err, size_t errlen)
{
    unsigned int idle_s = (unsigned int)((srv->idle_ms + 999) / 1000);
    int rc;

    srv->deps = *d;
    if ((rc = http_ready_start(&srv->deps.ready, d->store, d->health, READY_EVERY_MS)) != 0) {
        snprintf(err, errlen, "http.listen: cannot start the readiness refresh");
        return rc;
    }
    if ((rc = listener_start(srv, HTTP_PUBLIC, idle_s, err, errlen)) != 0 ||
        (rc = listener_start(srv, HTTP_ADMIN, idle_s, err, errlen)) != 0)
        return rc;
    if ((rc = ticker_start(&srv->watchdog, WATCHDOG_EVERY_MS, hs_watchdog, srv)) != 0) {
        snprintf(err, errlen, "http.listen: cannot start the watchdog");
        return rc;
    }
    http_metrics_register(&srv->deps);
    metrics_add_collector(hs_collect_conns, srv);
    srv->started = true;
    return 0;
}

void
http_server_close(struct http_server *srv)
{
    if (srv == NULL)
        return;
    ticker_stop(srv->watchdog); /* before the listeners' locks go */
    listeners_stop(srv);
    if (srv->started) {
        metrics_remove_collector(hs_collect_conns, srv);
        http_metrics_unregister(&srv->deps);
    }
    http_ready_stop(srv->deps.ready);
    free(srv);
}
