/* SPDX-License-Identifier: Apache-2.0 */
/*
 * client.c: the RocketMQ client (client.h). Read top-down: names, signing,
 * connections, name servers and routes, heartbeats, sending.
 */
#include "rocketmq/client.h"

#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/xmalloc.h"
#include "metrics/metrics.h"
#include "rocketmq/remoting.h"

#include <ctype.h>
#include <curl/curl.h>
#include <inttypes.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* request codes (RequestCode.java) */
#define RC_HEART_BEAT 34
#define RC_GET_ROUTEINFO_BY_TOPIC 105
#define RC_SEND_MESSAGE_V2 310
/* response codes */
#define RS_SYSTEM_ERROR 1
#define RS_SERVICE_NOT_AVAILABLE 14
#define RS_MESSAGE_ILLEGAL 13
#define RS_NO_PERMISSION 16
#define RS_TOPIC_NOT_EXIST 17
#define RS_GO_AWAY 1500

#define MAX_NS 16
#define ROUTE_TTL_MS 30000
#define HEARTBEAT_MS 30000
#define CONNECT_TIMEOUT_MS 1000
#define V5_0_0 413 /* MQVersion ordinal: brokers from here have timer messages */
#define DEFAULT_TOPIC "TBW102"

/* The default messageDelayLevel, in ms (a 4.x broker's levels 1..18). */
static const int64_t delay_levels_ms[] = {1000,   5000,   10000,   30000,   60000,   120000,
                                          180000, 240000, 300000,  360000,  420000,  480000,
                                          540000, 600000, 1200000, 1800000, 3600000, 7200000};
#define NLEVELS ((int)(sizeof(delay_levels_ms) / sizeof(delay_levels_ms[0])))

struct pooled {
    char *addr;
    struct rmq_conn *conn; /* one reference held by the pool */
};

struct queue_ref {
    char broker[128];
    int qid;
};

struct route {
    char *topic; /* wire name */
    struct queue_ref *wq;
    int nwq;
    struct queue_ref *rq; /* readable queues (consumers), same order */
    int nrq;
    char (*bnames)[128];
    char **masters; /* per bnames entry, the brokerId 0 address or NULL */
    int nbrokers;
    int64_t fetched_ms;
};

struct rmq_client {
    char *ns;
    char *access_key;
    char *secret_key;
    char *domain;
    int64_t send_timeout_ms;
    int retry;
    char *client_id;

    pthread_mutex_t mu; /* everything below */
    char *name_servers[MAX_NS];
    int nns;
    int ns_good; /* the one that answered last */
    int64_t domain_fetched_ms;
    struct pooled *pool;
    size_t npool, cappool;
    struct route *routes;
    size_t nroutes, caproutes;
    char **producers;
    size_t nproducers, capproducers;
    struct consumer_reg {
        char *group;     /* wire name */
        char *topics[2]; /* wire names: the topic and %RETRY%<group> */
    } * consumers;
    size_t nconsumers, capconsumers;
    int broker_version;  /* the last broker answer's version (0: none yet) */
    bool timers_refused; /* the broker answered WHEEL_TIMER_NOT_ENABLE: delay levels */
    char last_error[256];
    bool answered; /* the last call got an answer */

    atomic_uint_fast32_t uniq_counter;
    struct rmq_stats stats;

    pthread_t hb;
    bool hb_started;
    pthread_mutex_t hb_mu;
    pthread_cond_t hb_cv;
    bool stopping;
};

/* ==== names (NamespaceUtil) ==== */

static const char *const system_topics[] = {"TBW102",
                                            "SCHEDULE_TOPIC_XXXX",
                                            "BenchmarkTest",
                                            "RMQ_SYS_TRANS_HALF_TOPIC",
                                            "RMQ_SYS_TRACE_TOPIC",
                                            "RMQ_SYS_TRANS_OP_HALF_TOPIC",
                                            "TRANS_CHECK_MAX_TIME_TOPIC",
                                            "SELF_TEST_TOPIC",
                                            "OFFSET_MOVED_EVENT",
                                            "CHECKPOINT_TOPIC"};

static bool
is_system(const char *r)
{
    for (size_t i = 0; i < sizeof(system_topics) / sizeof(system_topics[0]); i++)
        if (strcmp(r, system_topics[i]) == 0)
            return true;
    return strncmp(r, "rmq_sys_", 8) == 0 || strncmp(r, "CID_RMQ_SYS_", 12) == 0;
}

char *
rmq_wrap(const struct rmq_client *c, const char *name)
{
    const char *prefix = "";
    const char *rest = name;

    if (c->ns == NULL || *c->ns == '\0' || name == NULL || *name == '\0' || is_system(name))
        return xstrdup(name ? name : "");
    if (strncmp(name, "%RETRY%", 7) == 0) {
        prefix = "%RETRY%";
        rest = name + 7;
    } else if (strncmp(name, "%DLQ%", 5) == 0) {
        prefix = "%DLQ%";
        rest = name + 5;
    }
    size_t nl = strlen(c->ns);
    if (strncmp(rest, c->ns, nl) == 0 && rest[nl] == '%')
        return xstrdup(name); /* already with the namespace */
    return xasprintf("%s%s%%%s", prefix, c->ns, rest);
}

/* ==== ACL 1.0 signing (AclClientRPCHook / AclUtils) ==== */

static int
cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Adds AccessKey and Signature to req: base64(HmacSHA1(secret, the values
 * of every ext field but Signature in ascending key order + body)). */
static void
sign(const struct rmq_client *c, struct rmq_cmd *req)
{
    if (c->access_key == NULL || *c->access_key == '\0')
        return;
    rmq_cmd_set(req, "AccessKey", c->access_key);
    json_object_del(req->ext, "Signature");
    size_t n = json_object_size(req->ext), i = 0;
    const char **keys = xcalloc(n ? n : 1, sizeof(*keys));
    const char *k;
    json_t *v;
    json_object_foreach(req->ext, k, v) keys[i++] = k;
    qsort(keys, n, sizeof(*keys), cmp_str);

    size_t cl = req->body_len, o = 0;
    for (i = 0; i < n; i++)
        cl += strlen(json_string_value(json_object_get(req->ext, keys[i])) ?: "");
    unsigned char *content = xmalloc(cl + 1);
    for (i = 0; i < n; i++) {
        const char *val = json_string_value(json_object_get(req->ext, keys[i])) ?: "";
        memcpy(content + o, val, strlen(val));
        o += strlen(val);
    }
    if (req->body_len)
        memcpy(content + o, req->body, req->body_len);
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int maclen = 0;
    const char *sk = c->secret_key ? c->secret_key : "";
    HMAC(EVP_sha1(), sk, (int)strlen(sk), content, cl, mac, &maclen);
    free(content);
    free(keys);
    char b64[64];
    EVP_EncodeBlock((unsigned char *)b64, mac, (int)maclen);
    rmq_cmd_set(req, "Signature", b64);
}

/* A refusal of the signature or the access key (ACL 1.0: 1 "Check
 * signature failed for accessKey=..."; ACL 2.0: 16 "check signature
 * failed."; an unknown key: "No acl config for ..."). */
static bool
acl_refused(const struct rmq_cmd *resp)
{
    const char *r = resp->remark ? resp->remark : "";

    if (resp->code != RS_SYSTEM_ERROR && resp->code != RS_NO_PERMISSION)
        return false;
    return strcasestr(r, "signature") != NULL || strcasestr(r, "accessKey") != NULL ||
           strcasestr(r, "acl config") != NULL;
}

static void
acl_error(char *err, size_t errlen)
{
    snprintf(err, errlen,
             "rocketmq.secret_key: the broker refused the request signature "
             "(check rocketmq.access_key and rocketmq.secret_key)");
}

/* ==== connections ==== */

static void
note_answer(struct rmq_client *c, bool answered, const char *err)
{
    pthread_mutex_lock(&c->mu);
    c->answered = answered;
    if (!answered && err)
        snprintf(c->last_error, sizeof(c->last_error), "%s", err);
    pthread_mutex_unlock(&c->mu);
}

/* A live connection to addr (one reference for the caller), opened if
 * needed. Returns 0, or ROOMD_EUNAVAIL/EINVAL with err. */
static int
get_conn(struct rmq_client *c, const char *addr, struct rmq_conn **out, char *err, size_t errlen)
{
    struct pooled *p = NULL;

    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->npool; i++)
        if (strcmp(c->pool[i].addr, addr) == 0)
            p = &c->pool[i];
    if (p && p->conn && rmq_conn_alive(p->conn)) {
        rmq_conn_ref(p->conn);
        *out = p->conn;
        pthread_mutex_unlock(&c->mu);
        return 0;
    }
    pthread_mutex_unlock(&c->mu);

    struct rmq_conn *nc = NULL;
    int64_t ct = c->send_timeout_ms < CONNECT_TIMEOUT_MS ? c->send_timeout_ms : CONNECT_TIMEOUT_MS;
    int rc = rmq_conn_open(&nc, addr, ct, NULL, NULL, err, errlen);
    if (rc != 0)
        return rc;
    struct rmq_conn *old = NULL;
    pthread_mutex_lock(&c->mu);
    p = NULL;
    for (size_t i = 0; i < c->npool; i++)
        if (strcmp(c->pool[i].addr, addr) == 0)
            p = &c->pool[i];
    if (p == NULL) {
        c->pool = xgrow(c->pool, c->npool + 1, &c->cappool, sizeof(*c->pool));
        p = &c->pool[c->npool++];
        p->addr = xstrdup(addr);
        p->conn = NULL;
    } else if (p->conn) {
        c->stats.reconnects++;
    }
    old = p->conn;
    p->conn = nc;
    rmq_conn_ref(nc);
    pthread_mutex_unlock(&c->mu);
    rmq_conn_unref(old);
    *out = nc;
    return 0;
}

/* Signs req and invokes it on addr. Returns what rmq_conn_invoke does. */
static int
call(struct rmq_client *c, const char *addr, struct rmq_cmd *req, int64_t deadline,
     struct rmq_cmd **resp, char *err, size_t errlen)
{
    struct rmq_conn *conn = NULL;
    int64_t left = deadline - clock_mono_ms();

    if (left <= 0) {
        snprintf(err, errlen, "%s: deadline passed", addr);
        return ROOMD_EUNAVAIL;
    }
    int rc = get_conn(c, addr, &conn, err, errlen);
    if (rc != 0)
        return rc == ROOMD_EINVAL ? ROOMD_EINVAL : ROOMD_EUNAVAIL;
    sign(c, req);
    rc = rmq_conn_invoke(conn, req, deadline, false, resp, err, errlen);
    rmq_conn_unref(conn);
    return rc;
}

/* ==== name servers ==== */

struct membuf {
    char *p;
    size_t n;
};

static size_t
on_body(char *data, size_t sz, size_t nm, void *arg)
{
    struct membuf *b = arg;
    size_t n = sz * nm;

    if (b->n + n > 65536)
        return 0;
    b->p = xrealloc(b->p, b->n + n + 1);
    memcpy(b->p + b->n, data, n);
    b->n += n;
    b->p[b->n] = '\0';
    return n;
}

/* The name server list from rocketmq.name_server_domain's address service
 * (GET http://<domain>[:8080]/rocketmq/nsaddr -> "host:port;host:port"),
 * as the Java client's TopAddressing. Caller holds no lock. */
static void
fetch_domain(struct rmq_client *c)
{
    if (c->domain == NULL || *c->domain == '\0')
        return;
    const char *d = c->domain;
    if (strncmp(d, "http://", 7) == 0)
        d += 7;
    char *url = strchr(d, '/')   ? xasprintf("http://%s", d)
                : strchr(d, ':') ? xasprintf("http://%s/rocketmq/nsaddr", d)
                                 : xasprintf("http://%s:8080/rocketmq/nsaddr", d);
    struct membuf b = {0};
    long status = 0;
    CURL *h = curl_easy_init();
    if (h) {
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)c->send_timeout_ms);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
        if (curl_easy_perform(h) == CURLE_OK)
            curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_cleanup(h);
    }
    if (status == 200 && b.p) {
        b.p[strcspn(b.p, "\r\n")] = '\0';
        pthread_mutex_lock(&c->mu);
        for (int i = 0; i < c->nns; i++)
            free(c->name_servers[i]);
        c->nns = 0;
        for (char *save = NULL, *t = strtok_r(b.p, ";", &save); t && c->nns < MAX_NS;
             t = strtok_r(NULL, ";", &save)) {
            while (isspace((unsigned char)*t))
                t++;
            if (*t)
                c->name_servers[c->nns++] = xstrdup(t);
        }
        c->ns_good = 0;
        pthread_mutex_unlock(&c->mu);
        log_info("rocketmq", "name servers from the address service", "count=%d", c->nns);
    } else {
        log_warn("rocketmq", "name server address service did not answer", "url=%s status=%ld", url,
                 status);
    }
    c->domain_fetched_ms = clock_mono_ms();
    free(b.p);
    free(url);
}

/* Invokes req on the name servers, starting with the one that answered
 * last, each in turn until one answers. */
static int
call_ns(struct rmq_client *c, struct rmq_cmd *req, int64_t deadline, struct rmq_cmd **resp,
        char *err, size_t errlen)
{
    int rc = ROOMD_EUNAVAIL;

    if (c->domain && *c->domain && (c->nns == 0 || clock_mono_ms() - c->domain_fetched_ms > 120000))
        fetch_domain(c);
    pthread_mutex_lock(&c->mu);
    int n = c->nns, start = c->ns_good;
    char *addrs[MAX_NS];
    for (int i = 0; i < n; i++)
        addrs[i] = xstrdup(c->name_servers[(start + i) % n]);
    pthread_mutex_unlock(&c->mu);
    if (n == 0)
        snprintf(err, errlen, "no name server (rocketmq.name_servers / name_server_domain)");
    for (int i = 0; i < n; i++) {
        if (rc != 0) {
            int64_t per = deadline - clock_mono_ms();
            if (i + 1 < n && per > c->send_timeout_ms)
                per = c->send_timeout_ms;
            rc = call(c, addrs[i], req, clock_mono_ms() + per, resp, err, errlen);
            if (rc == 0) {
                pthread_mutex_lock(&c->mu);
                c->ns_good = (start + i) % n;
                pthread_mutex_unlock(&c->mu);
            }
        }
        free(addrs[i]);
    }
    return rc;
}

/* ==== routes ==== */

/* fastjson's default output has bare integer object keys ({0:"ip:port"});
 * quotes them so jansson parses it (the standard JSON passes unchanged). */
static char *
quote_bare_keys(const char *s, size_t n)
{
    char *out = xmalloc(2 * n + 1);
    size_t o = 0;
    bool in_str = false;

    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (in_str) {
            out[o++] = ch;
            if (ch == '\\' && i + 1 < n)
                out[o++] = s[++i];
            else if (ch == '"')
                in_str = false;
            continue;
        }
        if (ch == '"') {
            in_str = true;
            out[o++] = ch;
            continue;
        }
        out[o++] = ch;
        if (ch == '{' || ch == ',') {
            size_t j = i + 1;
            while (j < n && isspace((unsigned char)s[j]))
                j++;
            size_t k = j;
            if (k < n && s[k] == '-')
                k++;
            while (k < n && isdigit((unsigned char)s[k]))
                k++;
            size_t e = k;
            while (e < n && isspace((unsigned char)s[e]))
                e++;
            if (k > j && e < n && s[e] == ':') {
                out[o++] = '"';
                memcpy(out + o, s + j, k - j);
                o += k - j;
                out[o++] = '"';
                i = k - 1;
            }
        }
    }
    out[o] = '\0';
    return out;
}

static int
cmp_queue(const void *a, const void *b)
{
    const struct queue_ref *x = a, *y = b;
    int r = strcmp(x->broker, y->broker);
    return r ? r : x->qid - y->qid;
}

static void
route_free(struct route *r)
{
    free(r->topic);
    free(r->wq);
    free(r->rq);
    for (int i = 0; i < r->nbrokers; i++)
        free(r->masters[i]);
    free(r->masters);
    free(r->bnames);
    memset(r, 0, sizeof(*r));
}

/* Parses TopicRouteData into r (producer view: writable queues of brokers
 * with a master, sorted by broker name then queue id). */
static int
parse_route(const uint8_t *body, size_t len, struct route *r, char *err, size_t errlen)
{
    char *txt = quote_bare_keys((const char *)body, len);
    json_error_t je;
    json_t *j = json_loads(txt, 0, &je);
    free(txt);
    json_t *bds = json_object_get(j, "brokerDatas"), *qds = json_object_get(j, "queueDatas");
    if (!json_is_array(bds) || !json_is_array(qds)) {
        snprintf(err, errlen, "route data does not parse: %s", je.text);
        json_decref(j);
        return ROOMD_ERETRY;
    }
    size_t i;
    json_t *bd, *qd;
    r->nbrokers = (int)json_array_size(bds);
    r->bnames = xcalloc((size_t)r->nbrokers + 1, sizeof(*r->bnames));
    r->masters = xcalloc((size_t)r->nbrokers + 1, sizeof(*r->masters));
    json_array_foreach(bds, i, bd)
    {
        snprintf(r->bnames[i], sizeof(r->bnames[i]), "%s",
                 json_string_value(json_object_get(bd, "brokerName")) ?: "");
        const char *m = json_string_value(json_object_get(json_object_get(bd, "brokerAddrs"), "0"));
        r->masters[i] = m ? xstrdup(m) : NULL;
    }
    size_t cap = 0, rcap = 0;
    json_array_foreach(qds, i, qd)
    {
        const char *bn = json_string_value(json_object_get(qd, "brokerName"));
        int perm = (int)json_integer_value(json_object_get(qd, "perm"));
        int nw = (int)json_integer_value(json_object_get(qd, "writeQueueNums"));
        bool has_master = false;
        for (int b = 0; bn && b < r->nbrokers; b++)
            has_master = has_master || (strcmp(r->bnames[b], bn) == 0 && r->masters[b]);
        int nr = (int)json_integer_value(json_object_get(qd, "readQueueNums"));
        for (int q = 0; bn && (perm & 4) && q < nr && q < 1024; q++) {
            r->rq = xgrow(r->rq, (size_t)r->nrq + 1, &rcap, sizeof(*r->rq));
            snprintf(r->rq[r->nrq].broker, sizeof(r->rq[r->nrq].broker), "%s", bn);
            r->rq[r->nrq++].qid = q;
        }
        if (!bn || !(perm & 2) || !has_master)
            continue;
        for (int q = 0; q < nw && q < 1024; q++) {
            r->wq = xgrow(r->wq, (size_t)r->nwq + 1, &cap, sizeof(*r->wq));
            snprintf(r->wq[r->nwq].broker, sizeof(r->wq[r->nwq].broker), "%s", bn);
            r->wq[r->nwq++].qid = q;
        }
    }
    json_decref(j);
    qsort(r->wq, (size_t)r->nwq, sizeof(*r->wq), cmp_queue);
    qsort(r->rq, (size_t)r->nrq, sizeof(*r->rq), cmp_queue);
    return 0;
}

/* Fetches topic's route from the name servers (TBW102's when the topic is
 * unknown: the broker creates it on the first send, autoCreateTopicEnable)
 * and caches it. */
static int
refresh_route(struct rmq_client *c, const char *wire_topic, int64_t deadline, char *err,
              size_t errlen)
{
    struct route nr = {0};
    struct rmq_cmd *resp = NULL;
    int rc;

    for (int pass = 0; pass < 2; pass++) {
        struct rmq_cmd *req = rmq_cmd_new(RC_GET_ROUTEINFO_BY_TOPIC);
        rmq_cmd_set(req, "topic", pass == 0 ? wire_topic : DEFAULT_TOPIC);
        rc = call_ns(c, req, deadline, &resp, err, errlen);
        rmq_cmd_free(req);
        if (rc != 0) {
            note_answer(c, false, err);
            return ROOMD_EUNAVAIL;
        }
        note_answer(c, true, NULL);
        if (resp->code == RMQ_SUCCESS)
            break;
        if (resp->code != RS_TOPIC_NOT_EXIST || pass == 1) {
            snprintf(err, errlen, "route of %s: code %d: %s", wire_topic, resp->code,
                     resp->remark ? resp->remark : "");
            rmq_cmd_free(resp);
            return ROOMD_ERETRY;
        }
        rmq_cmd_free(resp);
        resp = NULL;
    }
    rc = parse_route(resp->body, resp->body_len, &nr, err, errlen);
    rmq_cmd_free(resp);
    if (rc != 0)
        return rc;
    if (nr.nwq == 0) {
        snprintf(err, errlen, "topic %s has no writable queue with a master", wire_topic);
        route_free(&nr);
        return ROOMD_ERETRY;
    }
    nr.topic = xstrdup(wire_topic);
    nr.fetched_ms = clock_mono_ms();
    pthread_mutex_lock(&c->mu);
    c->stats.route_refreshes++;
    size_t i;
    for (i = 0; i < c->nroutes; i++)
        if (strcmp(c->routes[i].topic, wire_topic) == 0)
            break;
    if (i == c->nroutes) {
        c->routes = xgrow(c->routes, c->nroutes + 1, &c->caproutes, sizeof(*c->routes));
        c->nroutes++;
    } else {
        route_free(&c->routes[i]);
    }
    c->routes[i] = nr;
    pthread_mutex_unlock(&c->mu);
    return 0;
}

/* Java String.hashCode of a UTF-8 string (UTF-16 code units, int32 wrap). */
static int32_t
java_hash(const char *s)
{
    uint32_t h = 0;
    const unsigned char *p = (const unsigned char *)s;

    while (*p) {
        uint32_t cp;
        int n;
        if (*p < 0x80) {
            cp = *p;
            n = 1;
        } else if ((*p & 0xE0) == 0xC0) {
            cp = *p & 0x1F;
            n = 2;
        } else if ((*p & 0xF0) == 0xE0) {
            cp = *p & 0x0F;
            n = 3;
        } else {
            cp = *p & 0x07;
            n = 4;
        }
        for (int i = 1; i < n; i++)
            cp = p[i] ? (cp << 6) | (p[i] & 0x3F) : cp;
        for (int i = 0; i < n && *p; i++)
            p++;
        if (cp >= 0x10000) {
            cp -= 0x10000;
            h = 31 * h + (0xD800 + (cp >> 10));
            h = 31 * h + (0xDC00 + (cp & 0x3FF));
        } else {
            h = 31 * h + cp;
        }
    }
    return (int32_t)h;
}

/* The queue for shard_key on topic (SelectMessageQueueByHash) and its
 * master's address. Returns 0, or what refresh_route does. */
static int
pick_queue(struct rmq_client *c, const char *wire_topic, const char *shard_key, int64_t deadline,
           struct queue_ref *q, char *addr, size_t addrlen, char *err, size_t errlen)
{
    for (int pass = 0; pass < 2; pass++) {
        bool found = false;
        pthread_mutex_lock(&c->mu);
        for (size_t i = 0; i < c->nroutes; i++) {
            struct route *r = &c->routes[i];
            if (strcmp(r->topic, wire_topic) != 0 || clock_mono_ms() - r->fetched_ms > ROUTE_TTL_MS)
                continue;
            int32_t h = shard_key ? java_hash(shard_key) : 0;
            int idx = (int)(h % r->nwq);
            if (idx < 0)
                idx = -idx;
            *q = r->wq[idx];
            for (int b = 0; b < r->nbrokers; b++)
                if (strcmp(r->bnames[b], q->broker) == 0 && r->masters[b])
                    snprintf(addr, addrlen, "%s", r->masters[b]), found = true;
        }
        pthread_mutex_unlock(&c->mu);
        if (found)
            return 0;
        int rc = refresh_route(c, wire_topic, deadline, err, errlen);
        if (rc != 0)
            return rc;
    }
    snprintf(err, errlen, "no master for topic %s", wire_topic);
    return ROOMD_ERETRY;
}

static void
invalidate_route(struct rmq_client *c, const char *wire_topic)
{
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->nroutes; i++)
        if (strcmp(c->routes[i].topic, wire_topic) == 0)
            c->routes[i].fetched_ms = -ROUTE_TTL_MS * 2;
    pthread_mutex_unlock(&c->mu);
}

/* ==== heartbeats ==== */

static char *
heartbeat_body(struct rmq_client *c)
{
    json_t *hb = json_object(), *ps = json_array();

    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->nproducers; i++)
        json_array_append_new(ps, json_pack("{s:s}", "groupName", c->producers[i]));
    pthread_mutex_unlock(&c->mu);
    json_object_set_new(hb, "clientID", json_string(c->client_id));
    json_object_set_new(hb, "producerDataSet", ps);
    json_t *cs = json_array();
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->nconsumers; i++) {
        json_t *subs = json_array();
        for (int k = 0; k < 2; k++)
            json_array_append_new(
                subs,
                json_pack("{s:b, s:s, s:s, s:[], s:[], s:I, s:s}", "classFilterMode", 0, "topic",
                          c->consumers[i].topics[k], "subString", "*", "tagsSet", "codeSet",
                          "subVersion", (json_int_t)clock_wall_ms(), "expressionType", "TAG"));
        json_array_append_new(cs, json_pack("{s:s, s:s, s:s, s:s, s:b, s:o}", "groupName",
                                            c->consumers[i].group, "consumeType",
                                            "CONSUME_PASSIVELY", "messageModel", "CLUSTERING",
                                            "consumeFromWhere", "CONSUME_FROM_FIRST_OFFSET",
                                            "unitMode", 0, "subscriptionDataSet", subs));
    }
    pthread_mutex_unlock(&c->mu);
    json_object_set_new(hb, "consumerDataSet", cs);
    char *s = json_dumps(hb, JSON_COMPACT);
    json_decref(hb);
    return s;
}

/* One HEART_BEAT to addr. Returns 0, ROOMD_EUNAVAIL, ROOMD_EINVAL (the
 * signature refused: err names the key) or ROOMD_ERETRY. */
static int
heartbeat_one(struct rmq_client *c, const char *addr, int64_t deadline, char *err, size_t errlen)
{
    struct rmq_cmd *req = rmq_cmd_new(RC_HEART_BEAT), *resp = NULL;
    char *body = heartbeat_body(c);
    int rc;

    rmq_cmd_set_body(req, body, strlen(body));
    free(body);
    rc = call(c, addr, req, deadline, &resp, err, errlen);
    rmq_cmd_free(req);
    note_answer(c, rc == 0, err);
    if (rc != 0)
        return ROOMD_EUNAVAIL;
    pthread_mutex_lock(&c->mu);
    c->broker_version = resp->version;
    pthread_mutex_unlock(&c->mu);
    if (acl_refused(resp)) {
        acl_error(err, errlen);
        rc = ROOMD_EINVAL;
    } else if (resp->code != RMQ_SUCCESS) {
        snprintf(err, errlen, "heartbeat to %s: code %d: %s", addr, resp->code,
                 resp->remark ? resp->remark : "");
        rc = ROOMD_ERETRY;
    }
    rmq_cmd_free(resp);
    return rc;
}

/* Every known master gets a heartbeat; routes older than their TTL are
 * fetched again. */
static void
heartbeat_all(struct rmq_client *c)
{
    char err[256];
    char **addrs = NULL, **topics = NULL;
    size_t na = 0, nt = 0, capa = 0, capt = 0;

    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->nroutes; i++) {
        topics = xgrow(topics, nt + 1, &capt, sizeof(*topics));
        topics[nt++] = xstrdup(c->routes[i].topic);
        for (int b = 0; b < c->routes[i].nbrokers; b++) {
            const char *m = c->routes[i].masters[b];
            bool seen = m == NULL;
            for (size_t k = 0; !seen && k < na; k++)
                seen = strcmp(addrs[k], m) == 0;
            if (!seen) {
                addrs = xgrow(addrs, na + 1, &capa, sizeof(*addrs));
                addrs[na++] = xstrdup(m);
            }
        }
    }
    pthread_mutex_unlock(&c->mu);
    for (size_t i = 0; i < nt; i++) {
        refresh_route(c, topics[i], clock_mono_ms() + c->send_timeout_ms, err, sizeof(err));
        free(topics[i]);
    }
    for (size_t i = 0; i < na; i++) {
        if (heartbeat_one(c, addrs[i], clock_mono_ms() + c->send_timeout_ms, err, sizeof(err)) != 0)
            log_debug("rocketmq", "heartbeat failed", "addr=%s error=\"%s\"", addrs[i], err);
        free(addrs[i]);
    }
    free(addrs);
    free(topics);
}

static void *
heartbeat_main(void *arg)
{
    struct rmq_client *c = arg;

    pthread_mutex_lock(&c->hb_mu);
    while (!c->stopping) {
        struct timespec ts;
        clock_mono_deadline(&ts, HEARTBEAT_MS);
        pthread_cond_timedwait(&c->hb_cv, &c->hb_mu, &ts);
        if (c->stopping)
            break;
        pthread_mutex_unlock(&c->hb_mu);
        heartbeat_all(c);
        pthread_mutex_lock(&c->hb_mu);
    }
    pthread_mutex_unlock(&c->hb_mu);
    return NULL;
}

/* ==== metrics ==== */

/* roomd_broker_* with driver="rocketmq" (docs/rocketmq.md), computed when
 * /metrics is scraped. */
static void
collect(void *arg, struct metrics_text *t)
{
    struct rmq_client *c = arg;
    struct rmq_stats st;
    char why[8];

    rmq_stats_get(c, &st);
    metrics_family(t, "roomd_broker_up", "gauge",
                   "1 when the broker's last call was answered (label driver).");
    metrics_count(t, "roomd_broker_up", "driver=\"rocketmq\"",
                  rmq_ready(c, why, sizeof(why)) == 0 ? 1 : 0);
    metrics_family(t, "roomd_broker_sends_total", "counter",
                   "sends to the broker by result: ok (SEND_OK), failed (an error answer), "
                   "unavailable (no answer, or the signature refused)");
    metrics_count(t, "roomd_broker_sends_total", "driver=\"rocketmq\",result=\"ok\"", st.sends_ok);
    metrics_count(t, "roomd_broker_sends_total", "driver=\"rocketmq\",result=\"failed\"",
                  st.sends_failed);
    metrics_count(t, "roomd_broker_sends_total", "driver=\"rocketmq\",result=\"unavailable\"",
                  st.sends_unavailable);
    metrics_family(t, "roomd_broker_reconnects_total", "counter",
                   "connections to a name server or broker opened again after a break");
    metrics_count(t, "roomd_broker_reconnects_total", "driver=\"rocketmq\"", st.reconnects);
    metrics_family(t, "roomd_broker_route_refreshes_total", "counter",
                   "topic routes fetched from the name servers");
    metrics_count(t, "roomd_broker_route_refreshes_total", "driver=\"rocketmq\"",
                  st.route_refreshes);
}

/* ==== open / close ==== */

int
rmq_client_open(struct rmq_client **out, const struct conf_rocketmq *cfg, const char *instance,
                const char *check_topic, char *err, size_t errlen)
{
    struct rmq_client *c = xcalloc(1, sizeof(*c));

    *out = NULL;
    c->ns = xstrdup(cfg->namespace_ ? cfg->namespace_ : "");
    c->access_key = cfg->access_key && *cfg->access_key ? xstrdup(cfg->access_key) : NULL;
    c->secret_key = xstrdup(cfg->secret_key ? cfg->secret_key : "");
    c->domain = cfg->name_server_domain ? xstrdup(cfg->name_server_domain) : NULL;
    c->send_timeout_ms = cfg->send_timeout_ms > 0 ? cfg->send_timeout_ms : 3000;
    c->retry = cfg->retry > 0 ? cfg->retry : 0;
    c->client_id = xasprintf("%s@%d", instance && *instance ? instance : "roomd", (int)getpid());
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->hb_mu, NULL);
    clock_cond_init(&c->hb_cv);
    atomic_init(&c->uniq_counter, 0);
    for (int i = 0; i < cfg->nname_servers && c->nns < MAX_NS; i++) {
        const char *a = cfg->name_servers[i];
        if (strncmp(a, "http://", 7) == 0)
            a += 7; /* as the Java and Go clients strip it */
        c->name_servers[c->nns++] = xstrdup(a);
    }
    if (check_topic) {
        char e[256] = "";
        char *wire = rmq_wrap(c, check_topic);
        int64_t dl = clock_mono_ms() + c->send_timeout_ms;
        struct queue_ref q;
        char addr[256];
        int rc = pick_queue(c, wire, NULL, dl, &q, addr, sizeof(addr), e, sizeof(e));
        if (rc == 0)
            rc = heartbeat_one(c, addr, clock_mono_ms() + c->send_timeout_ms, e, sizeof(e));
        free(wire);
        if (rc == ROOMD_EINVAL) {
            snprintf(err, errlen, "%s", e);
            rmq_client_close(c);
            return ROOMD_EINVAL;
        }
        if (rc != 0)
            log_warn("rocketmq", "broker not checked at start-up (checked on first use)",
                     "error=\"%s\"", e);
        else
            log_info("rocketmq", "broker answered", "addr=%s version=%d", addr, c->broker_version);
    }
    if (pthread_create(&c->hb, NULL, heartbeat_main, c) == 0)
        c->hb_started = true;
    metrics_add_collector(collect, c);
    *out = c;
    return 0;
}

void
rmq_client_close(struct rmq_client *c)
{
    if (c == NULL)
        return;
    metrics_remove_collector(collect, c); /* a no-op when it was never added */
    pthread_mutex_lock(&c->hb_mu);
    c->stopping = true;
    pthread_cond_broadcast(&c->hb_cv);
    pthread_mutex_unlock(&c->hb_mu);
    if (c->hb_started)
        pthread_join(c->hb, NULL);
    for (size_t i = 0; i < c->npool; i++) {
        rmq_conn_unref(c->pool[i].conn);
        free(c->pool[i].addr);
    }
    free(c->pool);
    for (size_t i = 0; i < c->nroutes; i++)
        route_free(&c->routes[i]);
    free(c->routes);
    for (size_t i = 0; i < c->nproducers; i++)
        free(c->producers[i]);
    free(c->producers);
    for (size_t i = 0; i < c->nconsumers; i++) {
        free(c->consumers[i].group);
        free(c->consumers[i].topics[0]);
        free(c->consumers[i].topics[1]);
    }
    free(c->consumers);
    for (int i = 0; i < c->nns; i++)
        free(c->name_servers[i]);
    free(c->ns);
    free(c->access_key);
    free(c->secret_key);
    free(c->domain);
    free(c->client_id);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->hb_mu);
    pthread_cond_destroy(&c->hb_cv);
    free(c);
}

void
rmq_add_producer(struct rmq_client *c, const char *group)
{
    char *w = rmq_wrap(c, group);

    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->nproducers; i++)
        if (strcmp(c->producers[i], w) == 0) {
            pthread_mutex_unlock(&c->mu);
            free(w);
            return;
        }
    c->producers = xgrow(c->producers, c->nproducers + 1, &c->capproducers, sizeof(char *));
    c->producers[c->nproducers++] = w;
    pthread_mutex_unlock(&c->mu);
}

/* ==== sending ==== */

static void
props_add(char **buf, size_t *len, size_t *cap, const char *k, const char *v)
{
    if (v == NULL || *v == '\0')
        return;
    size_t kl = strlen(k), vl = strlen(v);
    if (*len + kl + vl + 3 > *cap) {
        *cap = 2 * (*len + kl + vl + 3);
        *buf = xrealloc(*buf, *cap);
    }
    memcpy(*buf + *len, k, kl);
    (*buf)[*len + kl] = 1;
    memcpy(*buf + *len + kl + 1, v, vl);
    (*buf)[*len + kl + 1 + vl] = 2;
    *len += kl + vl + 2;
    (*buf)[*len] = '\0';
}

/* UNIQ_KEY as MessageClientIDSetter: 16 bytes in upper-case hex (ip, pid,
 * a per-process value, ms since start, counter). */
static void
uniq_key(struct rmq_client *c, char out[33])
{
    uint32_t n = (uint32_t)atomic_fetch_add(&c->uniq_counter, 1);
    uint64_t t = (uint64_t)clock_wall_ms();

    snprintf(out, 33, "7F000001%04X%08X%08X%04X", (unsigned)getpid() & 0xFFFF,
             (unsigned)((uintptr_t)c & 0xFFFFFFFF), (unsigned)(t & 0xFFFFFFFF), n & 0xFFFF);
}

/* The 4.x delay level for deliver_at: the longest one not later than it. */
static int
delay_level_for(int64_t wait_ms)
{
    int level = 0;

    for (int i = 0; i < NLEVELS; i++)
        if (delay_levels_ms[i] <= wait_ms)
            level = i + 1;
    return level;
}

static bool
sent_ok(int code)
{
    return code == 0 || code == 10 || code == 11 || code == 12;
}

int
rmq_send(struct rmq_client *c, const char *producer_group, const struct rmq_msg *m,
         int64_t deadline_mono_ms, struct rmq_send_result *res, char *err, size_t errlen)
{
    char *topic = rmq_wrap(c, m->topic), *group = rmq_wrap(c, producer_group);
    int attempts = 1 + c->retry;
    int rc = ROOMD_EUNAVAIL;
    char uk[33];

    memset(res, 0, sizeof(*res));
    uniq_key(c, uk);
    snprintf(err, errlen, "send deadline passed");
    for (int i = 0; i < attempts; i++) {
        int64_t left = deadline_mono_ms - clock_mono_ms();
        if (left <= 0)
            break;
        int64_t dl = clock_mono_ms() + (left < c->send_timeout_ms ? left : c->send_timeout_ms);
        struct queue_ref q;
        char addr[256];
        rc = pick_queue(c, topic, m->shard_key, dl, &q, addr, sizeof(addr), err, errlen);
        if (rc != 0) {
            if (rc == ROOMD_EUNAVAIL)
                continue;
            break;
        }
        /* properties: KEYS, TAGS, WAIT, UNIQ_KEY, then the delay */
        char *props = NULL;
        size_t plen = 0, pcap = 0;
        props_add(&props, &plen, &pcap, "KEYS", m->keys);
        props_add(&props, &plen, &pcap, "TAGS", m->tags);
        props_add(&props, &plen, &pcap, "WAIT", "true");
        props_add(&props, &plen, &pcap, "UNIQ_KEY", uk);
        pthread_mutex_lock(&c->mu);
        bool timers = c->broker_version >= V5_0_0 && !c->timers_refused;
        pthread_mutex_unlock(&c->mu);
        int64_t wait = m->deliver_at_ms - clock_wall_ms();
        char num[32];
        res->delay_level = 0;
        if (m->deliver_at_ms > 0 && wait > 0) {
            if (timers) {
                snprintf(num, sizeof(num), "%" PRId64, m->deliver_at_ms);
                props_add(&props, &plen, &pcap, "TIMER_DELIVER_MS", num);
            } else if ((res->delay_level = delay_level_for(wait)) > 0) {
                snprintf(num, sizeof(num), "%d", res->delay_level);
                props_add(&props, &plen, &pcap, "DELAY", num);
            }
        }
        struct rmq_cmd *req = rmq_cmd_new(RC_SEND_MESSAGE_V2), *resp = NULL;
        rmq_cmd_set(req, "a", group);
        rmq_cmd_set(req, "b", topic);
        rmq_cmd_set(req, "c", DEFAULT_TOPIC);
        rmq_cmd_set_int(req, "d", 4);
        rmq_cmd_set_int(req, "e", q.qid);
        rmq_cmd_set_int(req, "f", 0);
        rmq_cmd_set_int(req, "g", clock_wall_ms());
        rmq_cmd_set_int(req, "h", 0);
        rmq_cmd_set(req, "i", props ? props : "");
        rmq_cmd_set_int(req, "j", 0);
        rmq_cmd_set(req, "k", "false");
        rmq_cmd_set(req, "m", "false");
        rmq_cmd_set(req, "n", q.broker);
        rmq_cmd_set_body(req, m->body, m->len);
        free(props);
        rc = call(c, addr, req, dl, &resp, err, errlen);
        rmq_cmd_free(req);
        note_answer(c, rc == 0, err);
        if (rc != 0) {
            rc = ROOMD_EUNAVAIL; /* no answer: the route may have moved too */
            invalidate_route(c, topic);
            continue;
        }
        pthread_mutex_lock(&c->mu);
        c->broker_version = resp->version;
        pthread_mutex_unlock(&c->mu);
        res->code = resp->code;
        if (sent_ok(resp->code)) {
            snprintf(res->msg_id, sizeof(res->msg_id), "%s", rmq_cmd_get(resp, "msgId") ?: "");
            res->queue_id = (int)rmq_cmd_int(resp, "queueId", q.qid);
            res->queue_offset = rmq_cmd_int(resp, "queueOffset", -1);
            rmq_cmd_free(resp);
            rc = 0;
            break;
        }
        const char *remark = resp->remark ? resp->remark : "";
        if (acl_refused(resp)) {
            acl_error(err, errlen);
            note_answer(c, false, err); /* readiness names the key too */
            rc = ROOMD_EUNAVAIL;
            rmq_cmd_free(resp);
            break; /* a configuration fault: no other try does better */
        }
        if (timers && resp->code == RS_SYSTEM_ERROR && strstr(remark, "WHEEL_TIMER_NOT_ENABLE")) {
            pthread_mutex_lock(&c->mu);
            c->timers_refused = true; /* timerWheelEnable=false: delay levels from now on */
            pthread_mutex_unlock(&c->mu);
            log_warn("rocketmq", "broker refuses timer messages; using delay levels", "addr=%s",
                     addr);
            attempts++;
        }
        snprintf(err, errlen, "send to %s queue %s/%d: code %d: %.120s", topic, q.broker, q.qid,
                 resp->code, remark);
        int code = resp->code;
        rmq_cmd_free(resp);
        if (code == RS_MESSAGE_ILLEGAL) {
            rc = ROOMD_EPERM;
            break;
        }
        rc = code == RS_SERVICE_NOT_AVAILABLE || code == RS_GO_AWAY ? ROOMD_EUNAVAIL : ROOMD_ERETRY;
        if (code == RS_TOPIC_NOT_EXIST || code == RS_NO_PERMISSION)
            invalidate_route(c, topic);
    }
    pthread_mutex_lock(&c->mu);
    if (rc == 0)
        c->stats.sends_ok++;
    else if (rc == ROOMD_EUNAVAIL)
        c->stats.sends_unavailable++;
    else
        c->stats.sends_failed++;
    pthread_mutex_unlock(&c->mu);
    free(topic);
    free(group);
    return rc;
}

int
rmq_probe(struct rmq_client *c, const char *topic, int64_t deadline_mono_ms, char *err,
          size_t errlen)
{
    char *wire = rmq_wrap(c, topic);
    struct queue_ref q;
    char addr[256];
    int rc = pick_queue(c, wire, NULL, deadline_mono_ms, &q, addr, sizeof(addr), err, errlen);

    free(wire);
    if (rc == 0)
        rc = heartbeat_one(c, addr, deadline_mono_ms, err, errlen);
    return rc == ROOMD_EUNAVAIL ? ROOMD_EUNAVAIL : 0;
}

int
rmq_ready(void *arg, char *why, size_t whylen)
{
    struct rmq_client *c = arg;
    int rc = 0;

    pthread_mutex_lock(&c->mu);
    if (!c->answered) {
        snprintf(why, whylen, "rocketmq not answering: %s",
                 c->last_error[0] ? c->last_error : "no call answered yet");
        rc = ROOMD_EUNAVAIL;
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

void
rmq_stats_get(struct rmq_client *c, struct rmq_stats *out)
{
    pthread_mutex_lock(&c->mu);
    *out = c->stats;
    pthread_mutex_unlock(&c->mu);
}

/* ==== consumers (rocketmq/consumer.c) ==== */

void
rmq_add_consumer(struct rmq_client *c, const char *group, const char *topic)
{
    char *retry = xasprintf("%%RETRY%%%s", group);

    pthread_mutex_lock(&c->mu);
    c->consumers = xgrow(c->consumers, c->nconsumers + 1, &c->capconsumers, sizeof(*c->consumers));
    struct consumer_reg *r = &c->consumers[c->nconsumers++];
    r->group = rmq_wrap(c, group);
    r->topics[0] = rmq_wrap(c, topic);
    r->topics[1] = rmq_wrap(c, retry);
    pthread_mutex_unlock(&c->mu);
    free(retry);
}

void
rmq_heartbeat_now(struct rmq_client *c)
{
    heartbeat_all(c);
}

int
rmq_read_queues(struct rmq_client *c, const char *topic, int64_t deadline_mono_ms,
                struct rmq_mq **out, int *n, char *err, size_t errlen)
{
    char *wire = rmq_wrap(c, topic);
    int rc = refresh_route(c, wire, deadline_mono_ms, err, errlen);

    *out = NULL;
    *n = 0;
    if (rc == 0) {
        pthread_mutex_lock(&c->mu);
        for (size_t i = 0; i < c->nroutes; i++) {
            struct route *r = &c->routes[i];
            if (strcmp(r->topic, wire) != 0)
                continue;
            *out = xcalloc((size_t)r->nrq + 1, sizeof(**out));
            for (int q = 0; q < r->nrq; q++) {
                struct rmq_mq *m = &(*out)[q];
                snprintf(m->topic, sizeof(m->topic), "%s", wire);
                snprintf(m->broker, sizeof(m->broker), "%s", r->rq[q].broker);
                m->qid = r->rq[q].qid;
                for (int b = 0; b < r->nbrokers; b++)
                    if (strcmp(r->bnames[b], m->broker) == 0 && r->masters[b])
                        snprintf(m->addr, sizeof(m->addr), "%s", r->masters[b]);
            }
            *n = r->nrq;
        }
        pthread_mutex_unlock(&c->mu);
    }
    free(wire);
    return rc;
}

/* One request to a broker: 0 and *resp (any code), or ROOMD_EUNAVAIL /
 * ROOMD_EINVAL (the signature refused) with err. */
static int
broker_call(struct rmq_client *c, const char *addr, struct rmq_cmd *req, int64_t deadline,
            struct rmq_cmd **resp, char *err, size_t errlen)
{
    int rc = call(c, addr, req, deadline, resp, err, errlen);

    note_answer(c, rc == 0, err);
    if (rc != 0)
        return ROOMD_EUNAVAIL;
    if (acl_refused(*resp)) {
        acl_error(err, errlen);
        rmq_cmd_free(*resp);
        *resp = NULL;
        return ROOMD_EINVAL;
    }
    return 0;
}

int
rmq_consumer_ids(struct rmq_client *c, const char *addr, const char *group,
                 int64_t deadline_mono_ms, char ***ids, int *n, char *err, size_t errlen)
{
    char *wg = rmq_wrap(c, group);
    struct rmq_cmd *req = rmq_cmd_new(38), *resp = NULL;
    int rc;

    *ids = NULL;
    *n = 0;
    rmq_cmd_set(req, "consumerGroup", wg);
    rc = broker_call(c, addr, req, deadline_mono_ms, &resp, err, errlen);
    rmq_cmd_free(req);
    free(wg);
    if (rc != 0)
        return rc;
    if (resp->code != 0) {
        snprintf(err, errlen, "consumer list: code %d: %s", resp->code,
                 resp->remark ? resp->remark : "");
        rmq_cmd_free(resp);
        return ROOMD_ERETRY;
    }
    json_t *j = json_loadb((const char *)resp->body, resp->body_len, 0, NULL);
    json_t *list = json_object_get(j, "consumerIdList");
    size_t i;
    json_t *v;
    *ids = xcalloc(json_array_size(list) + 1, sizeof(char *));
    json_array_foreach(list, i, v)
    {
        if (json_is_string(v))
            (*ids)[(*n)++] = xstrdup(json_string_value(v));
    }
    json_decref(j);
    rmq_cmd_free(resp);
    return 0;
}

const char *
rmq_client_id(const struct rmq_client *c)
{
    return c->client_id;
}

int
rmq_query_offset(struct rmq_client *c, const struct rmq_mq *mq, const char *group,
                 int64_t deadline_mono_ms, int64_t *offset, char *err, size_t errlen)
{
    char *wg = rmq_wrap(c, group);
    struct rmq_cmd *req = rmq_cmd_new(14), *resp = NULL;
    int rc;

    rmq_cmd_set(req, "consumerGroup", wg);
    rmq_cmd_set(req, "topic", mq->topic);
    rmq_cmd_set_int(req, "queueId", mq->qid);
    rc = broker_call(c, mq->addr, req, deadline_mono_ms, &resp, err, errlen);
    rmq_cmd_free(req);
    free(wg);
    if (rc != 0)
        return rc;
    if (resp->code == RMQ_SUCCESS)
        *offset = rmq_cmd_int(resp, "offset", 0);
    else if (resp->code == RMQ_QUERY_NOT_FOUND)
        *offset = -1;
    else {
        snprintf(err, errlen, "query offset: code %d: %s", resp->code,
                 resp->remark ? resp->remark : "");
        rc = ROOMD_ERETRY;
    }
    rmq_cmd_free(resp);
    return rc;
}

int
rmq_update_offset(struct rmq_client *c, const struct rmq_mq *mq, const char *group, int64_t offset,
                  int64_t deadline_mono_ms, char *err, size_t errlen)
{
    char *wg = rmq_wrap(c, group);
    struct rmq_cmd *req = rmq_cmd_new(15), *resp = NULL;
    int rc;

    rmq_cmd_set(req, "consumerGroup", wg);
    rmq_cmd_set(req, "topic", mq->topic);
    rmq_cmd_set_int(req, "queueId", mq->qid);
    rmq_cmd_set_int(req, "commitOffset", offset);
    rc = broker_call(c, mq->addr, req, deadline_mono_ms, &resp, err, errlen);
    rmq_cmd_free(req);
    free(wg);
    if (rc == 0 && resp->code != 0) {
        snprintf(err, errlen, "update offset: code %d", resp->code);
        rc = ROOMD_ERETRY;
    }
    rmq_cmd_free(resp);
    return rc;
}

static uint32_t
rd32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int64_t
rd64(const uint8_t *p)
{
    return (int64_t)((uint64_t)rd32(p) << 32 | rd32(p + 4));
}

const char *
rmq_prop(const struct rmq_message_ext *m, const char *name, char *buf, size_t len)
{
    size_t nl = strlen(name);
    const char *p = m->props, *end = m->props + m->props_len;

    while (p < end) {
        const char *sep = memchr(p, 2, (size_t)(end - p));
        const char *e = sep ? sep : end;
        const char *eq = memchr(p, 1, (size_t)(e - p));
        if (eq && (size_t)(eq - p) == nl && memcmp(p, name, nl) == 0) {
            size_t vl = (size_t)(e - eq - 1);
            if (vl >= len)
                vl = len - 1;
            memcpy(buf, eq + 1, vl);
            buf[vl] = '\0';
            return buf;
        }
        p = e + 1;
    }
    return NULL;
}

/* MessageDecoder.decode of the records in body (V1/V2 magic, IPv4/IPv6). */
static int
decode_records(const uint8_t *b, size_t len, struct rmq_pulled *out)
{
    size_t pos = 0, cap = 0;

    while (len - pos >= 8) {
        const uint8_t *r = b + pos;
        uint32_t size = rd32(r), magic = rd32(r + 4);
        if (size < 8 || size > len - pos)
            return -1;
        bool v2 = magic == 0xDAA320ABu;
        size_t o = 12;
        struct rmq_message_ext m = {0};
        if (size < 4 * 5 + 8 * 2 + 4 + 8)
            return -1;
        m.queue_id = (int)rd32(r + o);
        o += 4;
        o += 4; /* flag */
        m.queue_offset = rd64(r + o);
        o += 8;
        m.commit_offset = rd64(r + o);
        o += 8;
        uint32_t sys = rd32(r + o);
        o += 4;
        o += 8;                         /* born timestamp */
        o += (sys & 0x10 ? 16 : 4) + 4; /* born host */
        o += 8;                         /* store timestamp */
        o += (sys & 0x20 ? 16 : 4) + 4; /* store host */
        if (o + 16 > size)
            return -1;
        m.reconsume = (int)rd32(r + o);
        o += 4 + 8;
        uint32_t bl = rd32(r + o);
        o += 4;
        if (o + bl > size)
            return -1;
        m.body = r + o;
        m.len = bl;
        o += bl;
        size_t tl;
        if (v2) {
            tl = (size_t)(r[o] << 8 | r[o + 1]);
            o += 2;
        } else {
            tl = r[o];
            o += 1;
        }
        if (o + tl + 2 > size)
            return -1;
        m.topic = xstrndup((const char *)r + o, tl);
        o += tl;
        size_t pl = (size_t)(r[o] << 8 | r[o + 1]);
        o += 2;
        if (o + pl > size) {
            free(m.topic);
            return -1;
        }
        m.props = (const char *)r + o;
        m.props_len = pl;
        m.sys_flag = (int)sys;
        out->msgs = xgrow(out->msgs, (size_t)out->n + 1, &cap, sizeof(*out->msgs));
        out->msgs[out->n++] = m;
        pos += size;
    }
    return 0;
}

int
rmq_pull(struct rmq_client *c, const struct rmq_mq *mq, const char *group, int64_t offset, int max,
         int64_t deadline_mono_ms, struct rmq_pulled *out, char *err, size_t errlen)
{
    char *wg = rmq_wrap(c, group);
    struct rmq_cmd *req = rmq_cmd_new(11), *resp = NULL;
    int rc;

    memset(out, 0, sizeof(*out));
    rmq_cmd_set(req, "consumerGroup", wg);
    rmq_cmd_set(req, "topic", mq->topic);
    rmq_cmd_set_int(req, "queueId", mq->qid);
    rmq_cmd_set_int(req, "queueOffset", offset);
    rmq_cmd_set_int(req, "maxMsgNums", max);
    rmq_cmd_set_int(req, "sysFlag", 4); /* SUBSCRIPTION: this request's "*" */
    rmq_cmd_set_int(req, "commitOffset", 0);
    rmq_cmd_set_int(req, "suspendTimeoutMillis", 0);
    rmq_cmd_set(req, "subscription", "*");
    rmq_cmd_set_int(req, "subVersion", clock_wall_ms());
    rmq_cmd_set(req, "expressionType", "TAG");
    rc = broker_call(c, mq->addr, req, deadline_mono_ms, &resp, err, errlen);
    rmq_cmd_free(req);
    free(wg);
    if (rc != 0)
        return rc;
    out->code = resp->code;
    out->next_begin = rmq_cmd_int(resp, "nextBeginOffset", offset);
    if (resp->code == RMQ_SUCCESS) {
        out->raw = resp->body;
        resp->body = NULL;
        if (decode_records(out->raw, resp->body_len, out) != 0) {
            snprintf(err, errlen, "pull %s/%d: undecodable records", mq->topic, mq->qid);
            rmq_pulled_free(out);
            rc = ROOMD_ERETRY;
        }
    } else if (resp->code != RMQ_PULL_NOT_FOUND && resp->code != RMQ_PULL_RETRY_IMMEDIATELY &&
               resp->code != RMQ_PULL_OFFSET_MOVED) {
        snprintf(err, errlen, "pull %s/%d: code %d: %s", mq->topic, mq->qid, resp->code,
                 resp->remark ? resp->remark : "");
        rc = ROOMD_ERETRY;
    }
    rmq_cmd_free(resp);
    return rc;
}

void
rmq_pulled_free(struct rmq_pulled *p)
{
    for (int i = 0; i < p->n; i++)
        free(p->msgs[i].topic);
    free(p->msgs);
    free(p->raw);
    memset(p, 0, sizeof(*p));
}

int
rmq_send_back(struct rmq_client *c, const struct rmq_mq *mq, const char *group,
              const struct rmq_message_ext *m, int delay_level, int max_reconsume,
              int64_t deadline_mono_ms, char *err, size_t errlen)
{
    char *wg = rmq_wrap(c, group);
    struct rmq_cmd *req = rmq_cmd_new(36), *resp = NULL;
    char origin[128];
    int rc;

    rmq_cmd_set_int(req, "offset", m->commit_offset);
    rmq_cmd_set(req, "group", wg);
    rmq_cmd_set_int(req, "delayLevel", delay_level);
    rmq_cmd_set(req, "originMsgId", rmq_prop(m, "ORIGIN_MESSAGE_ID", origin, sizeof(origin)) ?: "");
    rmq_cmd_set(req, "originTopic", m->topic);
    rmq_cmd_set(req, "unitMode", "false");
    rmq_cmd_set_int(req, "maxReconsumeTimes", max_reconsume);
    rc = broker_call(c, mq->addr, req, deadline_mono_ms, &resp, err, errlen);
    rmq_cmd_free(req);
    free(wg);
    if (rc == 0 && resp->code != 0) {
        snprintf(err, errlen, "send back: code %d: %s", resp->code,
                 resp->remark ? resp->remark : "");
        rc = ROOMD_ERETRY;
    }
    rmq_cmd_free(resp);
    return rc;
}

int
rmq_delay_level_at_least(int64_t delay_ms)
{
    for (int i = 0; i < NLEVELS; i++)
        if (delay_levels_ms[i] >= delay_ms)
            return i + 1;
    return NLEVELS;
}

int
rmq_delay_level_not_later(int64_t delay_ms)
{
    int level = delay_level_for(delay_ms);

    return level > 0 ? level : 1;
}
