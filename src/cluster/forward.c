/* SPDX-License-Identifier: Apache-2.0 */
/*
 * forward.c: sending a request to the room's owner (forward.h). One pool of
 * libcurl handles serves every owner: a handle keeps the connections it
 * opened, so consecutive requests to an owner reuse a keep-alive connection.
 * What is sent: the method, path, body, X-App-Code, the caller's
 * Authorization (so the owner authenticates the caller itself) and the hop
 * header. An internal command (/internal/v1/..., a rocket launch) goes to the
 * owner's admin listener instead, with this node's admin token (admin.*: the
 * same token on every node). What comes back is the owner's answer, unchanged.
 *
 * TLS: every node runs the same listener config, so a listener of ours with
 * TLS on (http.tls.cert_file, admin.tls.cert_file) means the owner's listener
 * has it on too: the request goes as https://, and the owner's certificate is
 * verified (chain against cluster.tls_ca_file or the system store, and the
 * advertised host, an IP address needing an IP SAN). Verification cannot be
 * switched off; a failed handshake is "the owner cannot be reached".
 */
#include "cluster/forward.h"

#include "conf/conf.h"
#include "core/curl_pool.h"
#include "core/err.h"
#include "core/log.h"
#include "core/secret.h"
#include "core/xmalloc.h"
#include "metrics/metrics.h"
#include "room/service.h"

#include <openssl/err.h>
#include <openssl/x509_vfy.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define FORWARD_MAX_RESPONSE (4 << 20)
#define FORWARD_CONNECT_TIMEOUT_MS 500
#define FORWARD_TOKEN_MAX 4096 /* the admin token, as auth.c reads it */

struct cluster_forward {
    struct curl_pool pool;
    int64_t timeout_ms;
    char hop[192];    /* "X-Roomd-Forwarded-By: <node_id>" */
    char *admin_auth; /* "Authorization: Bearer <admin token>", NULL = none */
    bool public_tls;  /* http.tls.cert_file set: public requests go as https */
    bool admin_tls;   /* admin.tls.cert_file set: internal requests go as https */
    char *ca_file;    /* cluster.tls_ca_file, NULL = the system store */
    atomic_uint_fast64_t forwarded, failed;
};

/* The answer headers the owner's reply is rebuilt from. */
struct answer_headers {
    bool replay;
    char owner[128];
    int retry_after;
};

static void
collect(void *arg, struct metrics_text *t)
{
    struct cluster_forward *f = arg;

    metrics_family(t, "roomd_forward_total", "counter",
                   "Requests sent to the room's owner, by result.");
    metrics_count(t, "roomd_forward_total", "result=\"ok\"", atomic_load(&f->forwarded));
    metrics_count(t, "roomd_forward_total", "result=\"failed\"", atomic_load(&f->failed));
}

static bool
nonempty(const char *s)
{
    return s != NULL && s[0] != '\0';
}

/* Checks that cluster.tls_ca_file holds at least one PEM certificate (the
 * OpenSSL libcurl verifies with reads it the same way). Returns 0, or
 * ROOMD_EINVAL with err naming the key. */
static int
check_ca_file(const char *file, char *err, size_t errlen)
{
    X509_STORE *store;
    int ok;

    if (access(file, R_OK) != 0) {
        snprintf(err, errlen, "cluster.tls_ca_file: cannot read %s", file);
        return ROOMD_EINVAL;
    }
    store = X509_STORE_new();
    ok = store != NULL && X509_STORE_load_file(store, file) == 1;
    X509_STORE_free(store);
    ERR_clear_error(); /* this thread's OpenSSL error queue, for libcurl */
    if (!ok) {
        snprintf(err, errlen, "cluster.tls_ca_file: %s holds no PEM certificate", file);
        return ROOMD_EINVAL;
    }
    return 0;
}

int
cluster_forward_open(struct cluster_forward **out, const struct conf *c, const char *node_id,
                     char *err, size_t errlen)
{
    struct cluster_forward *f;
    char token[FORWARD_TOKEN_MAX];
    bool has_token = nonempty(c->admin.token_env) || nonempty(c->admin.token_file);

    *out = NULL;
    if (nonempty(c->cluster.tls_ca_file) && check_ca_file(c->cluster.tls_ca_file, err, errlen) != 0)
        return ROOMD_EINVAL;
    if (has_token && secret_load("admin.token_env", c->admin.token_env, "admin.token_file",
                                 c->admin.token_file, token, sizeof(token), err, errlen) != 0)
        return ROOMD_EINVAL;
    f = xcalloc(1, sizeof(*f));
    if (has_token) {
        f->admin_auth = xasprintf("Authorization: Bearer %s", token);
        secret_wipe(token, sizeof(token));
    }
    f->public_tls = nonempty(c->http.tls_cert_file);
    f->admin_tls = nonempty(c->admin.tls_cert_file);
    f->ca_file = nonempty(c->cluster.tls_ca_file) ? xstrdup(c->cluster.tls_ca_file) : NULL;
    curl_pool_init(&f->pool);
    f->timeout_ms = c->cluster.forward_timeout_ms > 0 ? c->cluster.forward_timeout_ms : 5000;
    snprintf(f->hop, sizeof(f->hop), "%s: %s", FORWARD_HOP_HEADER,
             node_id && *node_id ? node_id : "roomd");
    metrics_add_collector(collect, f);
    *out = f;
    return 0;
}

void
cluster_forward_close(struct cluster_forward *f)
{
    if (f == NULL)
        return;
    metrics_remove_collector(collect, f);
    curl_pool_destroy(&f->pool);
    secret_free(f->admin_auth);
    free(f->ca_file);
    free(f);
}

void
cluster_forward_counts(const struct cluster_forward *f, uint64_t *forwarded, uint64_t *failed)
{
    *forwarded = atomic_load(&f->forwarded);
    *failed = atomic_load(&f->failed);
}

/* CURLOPT_HEADERFUNCTION: picks Idempotent-Replay, X-Room-Owner and
 * Retry-After. */
static size_t
on_header(char *line, size_t size, size_t nmemb, void *arg)
{
    struct answer_headers *h = arg;
    size_t n = size * nmemb;
    char buf[256];
    char *v;

    if (n >= sizeof(buf))
        return n;
    memcpy(buf, line, n);
    buf[n] = '\0';
    while (n > 0 && (buf[n - 1] == '\r' || buf[n - 1] == '\n' || buf[n - 1] == ' '))
        buf[--n] = '\0';
    if ((v = strchr(buf, ':')) == NULL)
        return size * nmemb;
    *v++ = '\0';
    while (*v == ' ')
        v++;
    if (strcasecmp(buf, "Idempotent-Replay") == 0)
        h->replay = strcasecmp(v, "true") == 0;
    else if (strcasecmp(buf, "X-Room-Owner") == 0)
        strlcpy_(h->owner, v, sizeof(h->owner));
    else if (strcasecmp(buf, "Retry-After") == 0)
        h->retry_after = atoi(v);
    return size * nmemb;
}

/* Adds the Authorization header: the admin token for an internal command,
 * else the caller's own. Returns the list. */
static struct curl_slist *
add_authorization(const struct cluster_forward *f, bool internal, const struct room_origin *o,
                  struct curl_slist *hdrs)
{
    char *line;

    if (internal)
        return f->admin_auth != NULL ? curl_slist_append(hdrs, f->admin_auth) : hdrs;
    if (o->authorization == NULL)
        return hdrs;
    line = xasprintf("Authorization: %s", o->authorization);
    hdrs = curl_slist_append(hdrs, line);
    free(line);
    return hdrs;
}

/* Adds the calling thread's request ids (X-Request-Id, traceparent) so the
 * peer logs and stores the same ones. Returns the list. */
static struct curl_slist *
add_request_ids(struct curl_slist *hdrs)
{
    char ids[160]; /* curl_slist_append copies it */

    if (*log_request_id() != '\0') {
        snprintf(ids, sizeof(ids), "X-Request-Id: %s", log_request_id());
        hdrs = curl_slist_append(hdrs, ids);
    }
    if (*log_traceparent() != '\0') {
        snprintf(ids, sizeof(ids), "traceparent: %s", log_traceparent());
        hdrs = curl_slist_append(hdrs, ids);
    }
    return hdrs;
}

/* Sends the request h is set up for (URL, method) with hdrs (freed here),
 * the answer's body into body and libcurl's reason into err
 * (CURL_ERROR_SIZE), and gives h back to the pool. Returns libcurl's code;
 * *status the HTTP status when CURLE_OK. Blocks up to timeout_ms. */
static CURLcode
perform(struct cluster_forward *f, CURL *h, bool tls, struct curl_slist *hdrs, int64_t timeout_ms,
        const char *agent, struct curl_body *body, char *err, long *status)
{
    CURLcode cc;

    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)FORWARD_CONNECT_TIMEOUT_MS);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, curl_body_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, body);
    curl_easy_setopt(h, CURLOPT_USERAGENT, agent);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, err);
    if (tls) { /* libcurl's defaults, stated: verification is never off */
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
        if (f->ca_file != NULL)
            curl_easy_setopt(h, CURLOPT_CAINFO, f->ca_file);
    }
    cc = curl_easy_perform(h);
    if (cc == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL); /* err is on the caller's stack */
    curl_slist_free_all(hdrs);
    curl_pool_give(&f->pool, h);
    return cc;
}

int
cluster_forward_call(void *arg, const char *public_addr, const char *admin_addr, const char *app,
                     const struct room_origin *o, struct room_reply *reply)
{
    /* an owner that does not advertise its admin listener (an older node)
     * serves a forwarded launch on its public listener under auth.mode none */
    bool internal =
        strncmp(o->path, "/internal/", 10) == 0 && admin_addr != NULL && admin_addr[0] != '\0';
    const char *owner_addr = internal ? admin_addr : public_addr;
    struct cluster_forward *f = arg;
    bool tls = internal ? f->admin_tls : f->public_tls;
    char why[CURL_ERROR_SIZE] = "";
    struct curl_body body = {.max = FORWARD_MAX_RESPONSE};
    struct answer_headers ah;
    struct curl_slist *hdrs = NULL;
    char *url, *line;
    long status = 0;
    CURLcode cc;
    CURL *h;

    memset(&ah, 0, sizeof(ah));
    if ((h = curl_pool_take(&f->pool)) == NULL) {
        atomic_fetch_add(&f->failed, 1);
        return ROOMD_EUNAVAIL;
    }
    url = xasprintf("%s://%s%s", tls ? "https" : "http", owner_addr, o->path);
    hdrs = curl_slist_append(hdrs, f->hop);
    hdrs = add_request_ids(hdrs); /* the owner logs and stores the same ones */
    line = xasprintf("X-App-Code: %s", app);
    hdrs = curl_slist_append(hdrs, line);
    free(line);
    hdrs = add_authorization(f, internal, o, hdrs);
    hdrs = curl_slist_append(hdrs, "Expect:");

    curl_easy_reset(h); /* keeps the connection cache: keep-alive survives */
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    if (strcmp(o->method, "GET") != 0) {
        hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, o->method);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, o->body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)o->body_len);
    }
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &ah);
    cc = perform(f, h, tls, hdrs, f->timeout_ms, "roomd-forward/1", &body, why, &status);
    if (cc != CURLE_OK || status < 100) {
        /* the reason from libcurl (a certificate problem names it); never a header */
        log_warn("cluster", "forwarding to the room's owner failed",
                 "owner=%s path=%s scheme=%s error=\"%s\"", owner_addr, o->path,
                 tls ? "https" : "http",
                 cc != CURLE_OK ? (why[0] ? why : curl_easy_strerror(cc)) : "no status");
        atomic_fetch_add(&f->failed, 1);
        free(url);
        free(body.p);
        return ROOMD_EUNAVAIL;
    }
    free(url);
    reply->status = (int)status;
    reply->body = body.p != NULL ? body.p : xstrdup("");
    reply->replay = ah.replay;
    reply->retry_after = reply->status == 503 ? 0 : ah.retry_after; /* a 503 gets its own */
    strlcpy_(reply->owner, ah.owner, sizeof(reply->owner));
    atomic_fetch_add(&f->forwarded, 1);
    return 0;
}

int
cluster_forward_admin_get(struct cluster_forward *f, const char *admin_addr, const char *path,
                          int64_t timeout_ms, int *status, char **body, char *why, size_t whylen)
{
    char err[CURL_ERROR_SIZE] = "";
    struct curl_body b = {.max = FORWARD_MAX_RESPONSE};
    struct curl_slist *hdrs = NULL;
    long st = 0;
    CURLcode cc;
    CURL *h;

    *status = 0;
    *body = NULL;
    if ((h = curl_pool_take(&f->pool)) == NULL) {
        snprintf(why, whylen, "no connection handle");
        return ROOMD_EUNAVAIL;
    }
    char *url = xasprintf("%s://%s%s", f->admin_tls ? "https" : "http", admin_addr, path);
    hdrs = curl_slist_append(hdrs, f->hop);
    if (f->admin_auth != NULL)
        hdrs = curl_slist_append(hdrs, f->admin_auth);
    hdrs = add_request_ids(hdrs); /* as for a forwarded command */
    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    cc = perform(f, h, f->admin_tls, hdrs, timeout_ms > 0 ? timeout_ms : f->timeout_ms,
                 "roomd-nodes/1", &b, err, &st);
    free(url);
    if (cc != CURLE_OK || st < 100) {
        snprintf(why, whylen, "%s",
                 cc != CURLE_OK ? (err[0] ? err : curl_easy_strerror(cc)) : "no status");
        free(b.p);
        return ROOMD_EUNAVAIL;
    }
    *status = (int)st;
    *body = b.p != NULL ? b.p : xstrdup("");
    return 0;
}
