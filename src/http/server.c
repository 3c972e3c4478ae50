/*
 * server.c: the libmicrohttpd side of the HTTP API (server.h). One thread per
 * connection (handlers block on their room cell and on group commit), keep-
 * alive, a connection limit and an idle timeout. This file accumulates the
 * body under http.max_body_bytes and hands complete requests to
 * router_handle() (router.c); read that next.
 *
 * Body limit: a Content-Length above the limit is answered 413 before any of
 * the body is read (MHD then closes the connection); a chunked body that
 * grows past the limit is drained and then answered 413.
 */
#include "http/server.h"

#include "conf/conf.h"
#include "core/err.h"
#include "core/log.h"
#include "core/xmalloc.h"
#include "http/router.h"

#include "cluster/forward.h"

#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* How long http_server_close waits for in-flight requests. */
#define DRAIN_MAX_MS 10000

struct http_server {
    struct MHD_Daemon *mhd;
    struct http_deps deps; /* copy; its pointers are borrowed */
    size_t max_body;
    atomic_int inflight;  /* requests between their headers and completion */
    atomic_bool stopping; /* close began: new requests get 503 + close */
};

/* Per-request state, freed in on_completed. */
struct req_state {
    char *body;
    size_t len, cap;
    bool too_big;
};

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

/* True when the request announces a Content-Length above the limit. */
static bool
announced_too_big(struct http_server *srv, struct MHD_Connection *c)
{
    const char *cl =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    char *end;
    unsigned long long v;

    if (cl == NULL)
        return false;
    errno = 0;
    v = strtoull(cl, &end, 10);
    if (errno != 0)
        return true; /* does not fit: certainly too big */
    return end != cl && v > srv->max_body;
}

/* http_query_fn over MHD: ctx is the connection. */
static const char *
query_arg(void *ctx, const char *name)
{
    return MHD_lookup_connection_value(ctx, MHD_GET_ARGUMENT_KIND, name);
}

/*
 * MHD calls this once when the headers are in (*con_cls == NULL), then once
 * per piece of body (*upload_data_size > 0), then once more with nothing
 * left: that last call answers.
 */
static enum MHD_Result
on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
           const char *version, const char *upload_data, size_t *upload_data_size, void **con_cls)
{
    struct http_server *srv = cls;
    struct req_state *rs = *con_cls;
    struct http_response resp = {0};
    enum MHD_Result ret;

    (void)version;
    if (rs == NULL) {
        rs = xcalloc(1, sizeof(*rs));
        *con_cls = rs;
        atomic_fetch_add(&srv->inflight, 1);
        if (atomic_load(&srv->stopping)) {
            http_response_error(&resp, 503, "unavailable", "server is shutting down");
            http_response_header(&resp, MHD_HTTP_HEADER_CONNECTION, "close");
            ret = send_response(c, &resp);
            http_response_clear(&resp);
            return ret;
        }
        if (announced_too_big(srv, c)) {
            rs->too_big = true;
            return send_too_big(srv, c);
        }
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        accumulate(srv, rs, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (rs->too_big)
        return send_too_big(srv, c);

    struct http_request req = {
        .method = method,
        .path = url,
        .app_header = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-App-Code"),
        .authorization =
            MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION),
        .forwarded_by = MHD_lookup_connection_value(c, MHD_HEADER_KIND, FORWARD_HOP_HEADER),
        .body = rs->body ? rs->body : "",
        .body_len = rs->len,
        .query = query_arg,
        .query_ctx = c,
    };
    router_handle(&srv->deps, &req, &resp);
    if (resp.status == 0)
        http_response_error(&resp, 500, "internal", "no response");
    ret = send_response(c, &resp);
    http_response_clear(&resp);
    return ret;
}

static void
on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
             enum MHD_RequestTerminationCode toe)
{
    struct http_server *srv = cls;
    struct req_state *rs = *con_cls;

    (void)c;
    (void)toe;
    if (rs != NULL) {
        free(rs->body);
        free(rs);
        *con_cls = NULL;
        atomic_fetch_sub(&srv->inflight, 1);
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

int
http_server_open(struct http_server **out, const struct http_deps *d, char *err, size_t errlen)
{
    const struct conf_http *hc = &d->conf->http;
    struct http_server *srv;
    unsigned int timeout_s = 0;
    int fd;

    *out = NULL;
    fd = listen_on(hc->listen, err, errlen);
    if (fd < 0)
        return ROOMD_EUNAVAIL;
    srv = xcalloc(1, sizeof(*srv));
    srv->deps = *d;
    srv->max_body = hc->max_body_bytes > 0 ? (size_t)hc->max_body_bytes : 1048576;
    if (hc->request_timeout_ms > 0)
        timeout_s = (unsigned int)((hc->request_timeout_ms + 999) / 1000);

    srv->mhd =
        MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                             MHD_USE_AUTO | MHD_USE_ITC | MHD_USE_ERROR_LOG,
                         0, NULL, NULL, on_request, srv, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log,
                         srv, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd, MHD_OPTION_CONNECTION_LIMIT,
                         (unsigned int)(hc->max_connections > 0 ? hc->max_connections : 1024),
                         MHD_OPTION_CONNECTION_TIMEOUT, timeout_s, MHD_OPTION_NOTIFY_COMPLETED,
                         on_completed, srv, MHD_OPTION_END);
    if (srv->mhd == NULL) {
        snprintf(err, errlen, "%s: libmicrohttpd did not start", hc->listen);
        close(fd);
        free(srv);
        return ROOMD_EUNAVAIL;
    }
    http_metrics_register(&srv->deps);
    *out = srv;
    return 0;
}

void
http_server_close(struct http_server *srv)
{
    MHD_socket lfd;
    struct timespec tick = {0, 5 * 1000 * 1000};

    if (srv == NULL)
        return;
    /* Stop accepting, let in-flight requests answer (MHD_stop_daemon would
     * shut their sockets down mid-request), then stop and join. */
    atomic_store(&srv->stopping, true);
    lfd = MHD_quiesce_daemon(srv->mhd);
    if (lfd != MHD_INVALID_SOCKET)
        close(lfd);
    for (int waited = 0; atomic_load(&srv->inflight) > 0 && waited < DRAIN_MAX_MS; waited += 5)
        nanosleep(&tick, NULL);
    if (atomic_load(&srv->inflight) > 0)
        log_warn("http", "closing with requests in flight", "n=%d", atomic_load(&srv->inflight));
    MHD_stop_daemon(srv->mhd);
    http_metrics_unregister(&srv->deps);
    free(srv);
}
