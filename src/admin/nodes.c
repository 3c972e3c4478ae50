/* SPDX-License-Identifier: Apache-2.0 */
/*
 * admin/nodes.c: the cluster's nodes view (admin/nodes.h). The membership is
 * the lease store's (lease_members: heartbeat keys with the lease ttl); this
 * node answers from memory, each live peer is asked for its own
 * GET /admin/v1/node, on its own thread so one slow peer does not delay the
 * others' answers beyond the timeout.
 */
#include "admin/nodes.h"

#include "admin/internal.h"
#include "cluster/forward.h"
#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/version.h"
#include "core/xmalloc.h"
#include "lease/lease.h"
#include "room/service.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROOMS_DEFAULT 100
#define ROOMS_MAX 1000
#define PEER_TIMEOUT_MS 2000
#define MAX_PEERS 64

struct admin_nodes {
    const struct conf *conf;
    struct lease *lease;
    struct cluster_forward *fwd;
    struct room_service *rooms;
    admin_ready_fn ready;
    void *ready_arg;
    const char *node_id; /* app.node_id or "roomd" (borrowed from conf) */
    bool redis;          /* lease.driver redis: a membership to read */
};

static bool
nonempty(const char *s)
{
    return s != NULL && s[0] != '\0';
}

struct admin_nodes *
admin_nodes_open(const struct conf *conf, struct lease *lease, struct cluster_forward *fwd,
                 struct room_service *rooms, admin_ready_fn ready, void *arg)
{
    struct admin_nodes *n = xcalloc(1, sizeof(*n));

    n->conf = conf;
    n->lease = lease;
    n->fwd = fwd;
    n->rooms = rooms;
    n->ready = ready;
    n->ready_arg = arg;
    n->node_id = nonempty(conf->app.node_id) ? conf->app.node_id : "roomd";
    n->redis = strcmp(conf->lease.driver, "redis") == 0;
    return n;
}

void
admin_nodes_close(struct admin_nodes *n)
{
    free(n);
}

void
admin_set_nodes(struct admin *a, struct admin_nodes *n)
{
    if (a != NULL)
        a->nodes = n;
}

/* state and reasons from a readiness answer ({"status", "reason", "checks": {name: "ok" |
 * "down: why"}}). */
static void
set_state(json_t *node, json_t *ready)
{
    const char *st = json_string_value(json_object_get(ready, "status"));
    json_t *reasons = json_array(), *v;
    const char *k;

    json_object_set_new(node, "state",
                        json_string(st == NULL                    ? "unknown"
                                    : strcmp(st, "ready") == 0    ? "ready"
                                    : strcmp(st, "degraded") == 0 ? "degraded"
                                                                  : "not_ready"));
    json_object_foreach(json_object_get(ready, "checks"), k, v)
    {
        const char *s = json_string_value(v);
        if (s != NULL && strcmp(s, "ok") != 0) /* a check: "ok" | "down: why" */
            json_array_append_new(reasons, json_sprintf("%s: %s", k, s));
    }
    /* no check down but not ready: the readiness's own word ("starting", "stale") */
    if (json_array_size(reasons) == 0 && json_is_string(json_object_get(ready, "reason")))
        json_array_append_new(
            reasons, json_sprintf("%s", json_string_value(json_object_get(ready, "reason"))));
    json_object_set_new(node, "reasons", reasons);
}

/* This node as GET /admin/v1/node shows it (new reference). */
static json_t *
self_json(struct admin_nodes *n, int64_t nrooms)
{
    const struct conf *c = n->conf;
    json_t *o = json_pack(
        "{s:s, s:b, s:s, s:s, s:s, s:s, s:s}", "node_id", n->node_id, "self", 1, "version",
        roomd_version, "commit", roomd_commit, "public_addr",
        nonempty(c->http.advertise_addr) ? c->http.advertise_addr : c->http.listen, "admin_addr",
        nonempty(c->admin.advertise_addr) ? c->admin.advertise_addr : c->admin.listen,
        "lease_driver", c->lease.driver);
    char *rj = NULL;
    json_t *ready = NULL;

    if (n->ready != NULL) {
        n->ready(n->ready_arg, &rj);
        ready = rj != NULL ? json_loads(rj, 0, NULL) : NULL;
        free(rj);
    }
    if (ready == NULL)
        ready = json_pack("{s:s, s:s}", "status", "unavailable", "reason", "no readiness");
    set_state(o, ready);
    json_object_set_new(o, "readiness", ready);
    if (n->redis) {
        char **names;
        size_t k;
        size_t total = lease_held(n->lease, (size_t)nrooms, &names, &k);
        json_t *arr = json_array();
        for (size_t i = 0; i < k; i++)
            json_array_append_new(arr, json_string(names[i]));
        lease_names_free(names, k);
        json_object_set_new(o, "leases",
                            json_pack("{s:I, s:o, s:b}", "count", (json_int_t)total, "rooms", arr,
                                      "truncated", total > k));
    } else {
        json_object_set_new(o, "leases", json_null()); /* the local lease: every room is ours */
    }
    if (n->rooms != NULL)
        json_object_set_new(o, "cells", json_integer((json_int_t)room_service_cells(n->rooms)));
    return o;
}

void
admin_nodes_self(struct admin_nodes *n, admin_lookup_fn q, void *ctx, struct admin_reply *r)
{
    int64_t nrooms;

    if (n == NULL) {
        admin_reply_error(r, 404, "not_found", NULL, "no nodes view on this process");
        return;
    }
    if (!admin_query_int(q, ctx, "rooms", 0, ROOMS_MAX, ROOMS_DEFAULT, &nrooms, r))
        return;
    admin_reply_ok(r, self_json(n, nrooms));
}

/* One peer asked on its own thread. */
struct peer {
    struct admin_nodes *n;
    json_t *member; /* the membership's entry (borrowed from the array) */
    char path[64];
    char rid[128], tp[128]; /* the asking request's ids, passed on to the peer */
    json_t *out;            /* the node's entry (new reference) */
    pthread_t th;
    bool started;
};

static void
copy_member(json_t *dst, json_t *m)
{
    static const char *const keys[] = {"node_id", "public_addr", "admin_addr",
                                       "version", "commit",      "started_ms",
                                       "seen_ms", "alive",       "instance"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        json_t *v = json_object_get(m, keys[i]);
        if (v != NULL && json_object_get(dst, keys[i]) == NULL)
            json_object_set(dst, keys[i], v);
    }
}

static void *
ask_peer(void *arg)
{
    struct peer *p = arg;
    const char *addr = json_string_value(json_object_get(p->member, "admin_addr"));
    int64_t t = p->n->conf->cluster.forward_timeout_ms;
    char why[256] = "";
    char *body = NULL;
    int status = 0;
    json_t *o = NULL;

    if (t <= 0 || t > PEER_TIMEOUT_MS)
        t = PEER_TIMEOUT_MS;
    log_set_request(p->rid, p->tp); /* this thread's log lines and the hop carry them */
    if (cluster_forward_admin_get(p->n->fwd, addr ? addr : "", p->path, t, &status, &body, why,
                                  sizeof(why)) == 0) {
        if (status == 200)
            o = json_loads(body, 0, NULL);
        if (!json_is_object(o)) {
            json_decref(o);
            o = NULL;
            snprintf(why, sizeof(why), "its admin API answered HTTP %d", status);
        }
    }
    free(body);
    if (o == NULL) {
        o = json_pack("{s:s, s:[s], s:n}", "state", "unreachable", "reasons", why, "leases");
    } else {
        json_object_del(o, "self");
    }
    json_object_set_new(o, "self", json_false());
    copy_member(o, p->member);
    p->out = o;
    log_set_request(NULL, NULL);
    return NULL;
}

/* A member whose heartbeat expired (new reference). */
static json_t *
missing_json(struct admin_nodes *n, json_t *m)
{
    int64_t seen = json_integer_value(json_object_get(m, "seen_ms"));
    char why[160];

    snprintf(why, sizeof(why), "no heartbeat for %llds (lease.ttl %lldms)",
             (long long)((clock_wall_ms() - seen) / 1000), (long long)n->conf->lease.ttl_ms);
    json_t *o = json_pack("{s:s, s:b, s:[s], s:n}", "state", "missing", "self", 0, "reasons", why,
                          "leases");
    copy_member(o, m);
    return o;
}

static int
by_node_id(const void *a, const void *b)
{
    const char *x = json_string_value(json_object_get(*(json_t *const *)a, "node_id"));
    const char *y = json_string_value(json_object_get(*(json_t *const *)b, "node_id"));
    return strcmp(x ? x : "", y ? y : "");
}

void
admin_nodes_list(struct admin_nodes *n, admin_lookup_fn q, void *ctx, struct admin_reply *r)
{
    int64_t nrooms;
    char *mj = NULL;
    json_t *members = NULL, *m, *nodes = json_array();
    struct peer peers[MAX_PEERS];
    size_t np = 0, i;
    const char *membership = "local";
    bool self_seen = false;

    if (n == NULL) {
        admin_reply_error(r, 404, "not_found", NULL, "no nodes view on this process");
        json_decref(nodes);
        return;
    }
    if (!admin_query_int(q, ctx, "rooms", 0, ROOMS_MAX, ROOMS_DEFAULT, &nrooms, r)) {
        json_decref(nodes);
        return;
    }
    if (n->redis) {
        membership = "redis";
        if (lease_members(n->lease, &mj) != 0 || (members = json_loads(mj, 0, NULL)) == NULL)
            membership = "unavailable"; /* Redis down: this node alone */
        free(mj);
    }
    memset(peers, 0, sizeof(peers));
    json_array_foreach(members, i, m)
    {
        const char *id = json_string_value(json_object_get(m, "node_id"));
        if (id == NULL)
            continue;
        if (strcmp(id, n->node_id) == 0) {
            json_t *o = self_json(n, nrooms);
            copy_member(o, m);
            json_array_append_new(nodes, o);
            self_seen = true;
        } else if (!json_is_true(json_object_get(m, "alive"))) {
            json_array_append_new(nodes, missing_json(n, m));
        } else if (n->fwd == NULL) {
            json_t *o =
                json_pack("{s:s, s:b, s:[s], s:n}", "state", "unknown", "self", 0, "reasons",
                          "cluster.forward is off: peers are not asked", "leases");
            copy_member(o, m);
            json_array_append_new(nodes, o);
        } else if (np == MAX_PEERS) {
            json_t *o = json_pack("{s:s, s:b, s:[s], s:n}", "state", "unknown", "self", 0,
                                  "reasons", "not asked: more than 64 peers", "leases");
            copy_member(o, m);
            json_array_append_new(nodes, o);
        } else {
            struct peer *p = &peers[np++];
            p->n = n;
            p->member = m;
            snprintf(p->path, sizeof(p->path), "/admin/v1/node?rooms=%lld", (long long)nrooms);
            snprintf(p->rid, sizeof(p->rid), "%s", log_request_id());
            snprintf(p->tp, sizeof(p->tp), "%s", log_traceparent());
            p->started = pthread_create(&p->th, NULL, ask_peer, p) == 0;
            if (!p->started)
                ask_peer(p);
        }
    }
    if (!self_seen)
        json_array_append_new(nodes, self_json(n, nrooms));
    for (i = 0; i < np; i++) {
        if (peers[i].started)
            pthread_join(peers[i].th, NULL);
        json_array_append_new(nodes, peers[i].out);
    }
    json_decref(members);
    /* sorted by node_id: the same order from every node */
    size_t cnt = json_array_size(nodes);
    json_t **v = xcalloc(cnt + 1, sizeof(json_t *));
    for (i = 0; i < cnt; i++)
        v[i] = json_incref(json_array_get(nodes, i));
    qsort(v, cnt, sizeof(json_t *), by_node_id);
    json_array_clear(nodes);
    for (i = 0; i < cnt; i++)
        json_array_append_new(nodes, v[i]);
    free(v);
    admin_reply_ok(r, json_pack("{s:s, s:s, s:s, s:I, s:o}", "self", n->node_id, "membership",
                                membership, "lease_driver", n->conf->lease.driver, "lease_ttl_ms",
                                (json_int_t)n->conf->lease.ttl_ms, "nodes", nodes));
}
