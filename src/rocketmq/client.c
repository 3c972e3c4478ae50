/* SPDX-License-Identifier: Apache-2.0 */
/*
 * client.c: the RocketMQ client (client.h), its common part. Read
 * top-down: names, signing, connections, name servers, heartbeats,
 * metrics, open/close, registrations. Routes are in route.c, sending in
 * send.c, the consumer-side calls in pull.c; internal.h is what they share.
 */
#include "rocketmq/internal.h"

#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/xmalloc.h"
#include "metrics/metrics.h"

#include <ctype.h>
#include <curl/curl.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
bool
rmq_acl_refused(const struct rmq_cmd *resp)
{
    const char *r = resp->remark ? resp->remark : "";

    if (resp->code != RS_SYSTEM_ERROR && resp->code != RS_NO_PERMISSION)
        return false;
    return strcasestr(r, "signature") != NULL || strcasestr(r, "accessKey") != NULL ||
           strcasestr(r, "acl config") != NULL;
}

void
rmq_acl_error(char *err, size_t errlen)
{
    snprintf(err, errlen,
             "rocketmq.secret_key: the broker refused the request signature "
             "(check rocketmq.access_key and rocketmq.secret_key)");
}

/* ==== connections ==== */

void
rmq_note_answer(struct rmq_client *c, bool answered, const char *err)
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
int
rmq_call(struct rmq_client *c, const char *addr, struct rmq_cmd *req, int64_t deadline,
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
int
rmq_call_ns(struct rmq_client *c, struct rmq_cmd *req, int64_t deadline, struct rmq_cmd **resp,
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
            rc = rmq_call(c, addrs[i], req, clock_mono_ms() + per, resp, err, errlen);
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
    rc = rmq_call(c, addr, req, deadline, &resp, err, errlen);
    rmq_cmd_free(req);
    rmq_note_answer(c, rc == 0, err);
    if (rc != 0)
        return ROOMD_EUNAVAIL;
    pthread_mutex_lock(&c->mu);
    c->broker_version = resp->version;
    pthread_mutex_unlock(&c->mu);
    if (rmq_acl_refused(resp)) {
        rmq_acl_error(err, errlen);
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
        rmq_refresh_route(c, topics[i], clock_mono_ms() + c->send_timeout_ms, err, sizeof(err));
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
        int rc = rmq_pick_queue(c, wire, NULL, dl, &q, addr, sizeof(addr), e, sizeof(e));
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
        rmq_route_free(&c->routes[i]);
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
int
rmq_probe(struct rmq_client *c, const char *topic, int64_t deadline_mono_ms, char *err,
          size_t errlen)
{
    char *wire = rmq_wrap(c, topic);
    struct queue_ref q;
    char addr[256];
    int rc = rmq_pick_queue(c, wire, NULL, deadline_mono_ms, &q, addr, sizeof(addr), err, errlen);

    free(wire);
    if (rc == 0)
        rc = heartbeat_one(c, addr, deadline_mono_ms, err, errlen);
    /* a refused signature (heartbeat_one: ROOMD_EINVAL) is the broker
     * refusing every call, not one event's fault: unavailable, so the
     * outbox burns no attempt on it (outbox/dispatch.c peer_answers) */
    return rc == ROOMD_EUNAVAIL || rc == ROOMD_EINVAL ? ROOMD_EUNAVAIL : 0;
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

/* ==== consumer registration (rocketmq/consumer.c) ==== */

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

const char *
rmq_client_id(const struct rmq_client *c)
{
    return c->client_id;
}
