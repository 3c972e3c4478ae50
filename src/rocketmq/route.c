/* SPDX-License-Identifier: Apache-2.0 */
/*
 * route.c: topic routes of the RocketMQ client (client.h): fetching
 * TopicRouteData from the name servers, the route cache, and the queue
 * pick of a send (SelectMessageQueueByHash).
 */
#include "rocketmq/internal.h"

#include "core/clock.h"
#include "core/err.h"
#include "core/xmalloc.h"

#include <ctype.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

void
rmq_route_free(struct route *r)
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
int
rmq_refresh_route(struct rmq_client *c, const char *wire_topic, int64_t deadline, char *err,
                  size_t errlen)
{
    struct route nr = {0};
    struct rmq_cmd *resp = NULL;
    int rc;

    for (int pass = 0; pass < 2; pass++) {
        struct rmq_cmd *req = rmq_cmd_new(RC_GET_ROUTEINFO_BY_TOPIC);
        rmq_cmd_set(req, "topic", pass == 0 ? wire_topic : DEFAULT_TOPIC);
        rc = rmq_call_ns(c, req, deadline, &resp, err, errlen);
        rmq_cmd_free(req);
        if (rc != 0) {
            rmq_note_answer(c, false, err);
            return ROOMD_EUNAVAIL;
        }
        rmq_note_answer(c, true, NULL);
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
        rmq_route_free(&nr);
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
        rmq_route_free(&c->routes[i]);
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
int
rmq_pick_queue(struct rmq_client *c, const char *wire_topic, const char *shard_key,
               int64_t deadline, struct queue_ref *q, char *addr, size_t addrlen, char *err,
               size_t errlen)
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
        int rc = rmq_refresh_route(c, wire_topic, deadline, err, errlen);
        if (rc != 0)
            return rc;
    }
    snprintf(err, errlen, "no master for topic %s", wire_topic);
    return ROOMD_ERETRY;
}

void
rmq_invalidate_route(struct rmq_client *c, const char *wire_topic)
{
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->nroutes; i++)
        if (strcmp(c->routes[i].topic, wire_topic) == 0)
            c->routes[i].fetched_ms = -ROUTE_TTL_MS * 2;
    pthread_mutex_unlock(&c->mu);
}
