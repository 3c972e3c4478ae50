/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lease_redis.c: room ownership across nodes (lease.h) on one Redis.
 *   key   <prefix>lease:<app>:<room>        value "<token> <instance> <addr> <admin>", PX ttl
 *     (addr = http.advertise_addr, admin = admin.advertise_addr; a node
 *     before admin.advertise_addr wrote no admin part)
 *   key   <prefix>lease_token:<app>:<room>  INCR counter, the fencing token
 * Acquire is one EVAL (set-if-absent + INCR, atomic); a renewer thread extends
 * every held lease each renew_every with a compare-and-PEXPIRE; release is a
 * compare-and-delete. While a lease was confirmed less than ttl - ttl/10 ago,
 * acquire answers from memory without a round trip. Read lease.h first.
 *
 * Membership (lease_members, the console's and roomctl's nodes view): the
 * renewer also writes, each renew_every,
 *   key   <prefix>node:<node_id>   a JSON of the node (addresses, version), PX ttl
 *   hash  <prefix>nodes            node_id -> the same JSON (seen_ms), kept a day
 * so a node that stops renewing (killed, cut off) loses its heartbeat key within
 * the lease ttl and shows as not alive; a clean shutdown deletes its key.
 */
#include "lease/lease.h"

#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/thread.h"
#include "core/tree.h"
#include "core/version.h"
#include "core/xmalloc.h"
#include "redis/redis_conn.h"

#include <jansson.h>
#include <pthread.h>
#include <search.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int lease_redis_open(struct lease **out, const struct conf *conf, char *err, size_t errlen);

#define RENEW_BATCH 256
#define MEMBER_KEEP_MS (24LL * 3600 * 1000) /* a node not seen for a day leaves the hash */

/*
 * KEYS[1] lease key, KEYS[2] token counter; ARGV instance, addr, ttl_ms, seed.
 * Returns {token, ""} when this instance holds the lease now (taken or
 * already ours), {"0", owner_addr} when another holds it. The counter starts
 * at the wall clock in ms, so tokens keep growing even if Redis lost its data.
 */
static const char acquire_lua[] =
    "local v = redis.call('GET', KEYS[1])\n"
    "if v then\n"
    "  local t, inst, addr = string.match(v, '^(%d+) (%S+) (.*)$')\n"
    "  if inst == ARGV[1] then\n"
    "    redis.call('PEXPIRE', KEYS[1], ARGV[3])\n"
    "    return {t, ''}\n"
    "  end\n"
    "  return {'0', addr or v}\n"
    "end\n"
    "if redis.call('EXISTS', KEYS[2]) == 0 then redis.call('SET', KEYS[2], ARGV[4]) end\n"
    "local t = string.format('%d', redis.call('INCR', KEYS[2]))\n"
    "redis.call('SET', KEYS[1], t .. ' ' .. ARGV[1] .. ' ' .. ARGV[2], 'PX', ARGV[3])\n"
    "return {t, ''}\n";

/* KEYS lease keys; ARGV[1] ttl_ms, ARGV[i+1] the value we wrote. Returns 1/0 each. */
static const char renew_lua[] = "local out = {}\n"
                                "for i, k in ipairs(KEYS) do\n"
                                "  if redis.call('GET', k) == ARGV[i + 1] then\n"
                                "    redis.call('PEXPIRE', k, ARGV[1]); out[i] = 1\n"
                                "  else out[i] = 0 end\n"
                                "end\n"
                                "return out\n";

static const char release_lua[] = "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
                                  "  return redis.call('DEL', KEYS[1])\n"
                                  "end\n"
                                  "return 0\n";

/* A lease this node holds. */
struct held {
    char *name;  /* "<app>:<room>" (the map key; first: tree_name_cmp) */
    char *key;   /* full Redis key */
    char *value; /* what we wrote: "<token> <instance> <addr>" */
    int64_t token;
    int64_t confirmed_ms; /* monotonic time the last acquire/renew was SENT */
};
_Static_assert(offsetof(struct held, name) == 0, "tree_name_cmp reads the name first");

struct lease_redis {
    struct lease base;
    char *prefix;
    char *addr;     /* "<public> <admin>": our advertised addresses (owner shown to others) */
    char *instance; /* unique per handle: "<node_id>/<random>" */
    char *node_id;  /* app.node_id ("roomd" when empty): the membership's key */
    char *public_addr, *admin_addr; /* the two halves of addr */
    int64_t started_ms;             /* wall clock at open */
    int64_t ttl_ms, renew_ms, margin_ms;

    pthread_mutex_t map_mu; /* guards held, nheld */
    void *held;             /* tsearch tree of struct held, by name */
    size_t nheld;

    pthread_mutex_t conn_mu; /* guards conn (acquire, release) */
    struct redis_conn conn;
    bool conn_down;          /* last acquire found Redis down (log once) */
    struct redis_conn rconn; /* the renewer's own */

    struct bg_thread renewer; /* zeroed until started */
};

static void
held_free(void *p)
{
    struct held *h = p;

    free(h->name);
    free(h->key);
    free(h->value);
    free(h);
}

static struct held *
held_find(struct lease_redis *lr, const char *name)
{
    struct held probe = {.name = (char *)name};
    void *n = tfind(&probe, &lr->held, tree_name_cmp);

    return n ? *(struct held **)n : NULL;
}

static void
held_remove(struct lease_redis *lr, struct held *h)
{
    tdelete(h, &lr->held, tree_name_cmp);
    lr->nheld--;
    held_free(h);
}

/* Stores (name -> token, value) confirmed at sent_ms, replacing any older entry. */
static void
held_put(struct lease_redis *lr, const char *name, const char *key, int64_t token, int64_t sent_ms)
{
    struct held *h = held_find(lr, name);

    if (h == NULL) {
        h = xcalloc(1, sizeof(*h));
        h->name = xstrdup(name);
        h->key = xstrdup(key);
        tsearch(h, &lr->held, tree_name_cmp);
        lr->nheld++;
    }
    if (h->token != token || h->value == NULL) {
        free(h->value);
        h->value = xasprintf("%lld %s %s", (long long)token, lr->instance, lr->addr);
        h->token = token;
    }
    h->confirmed_ms = sent_ms;
}

static void
set_owner(char *owner, size_t ownerlen, const char *s)
{
    if (ownerlen > 0)
        strlcpy_(owner, s, ownerlen);
}

static int
redis_acquire(struct lease *l, const char *app, const char *room_id, int64_t *token, char *owner,
              size_t ownerlen)
{
    struct lease_redis *lr = (struct lease_redis *)l;
    char *name = xasprintf("%s:%s", app, room_id);
    char *key = NULL, *tkey = NULL, ttl[24], seed[24];
    redisReply *r = NULL;
    int rc = ROOMD_EUNAVAIL;

    set_owner(owner, ownerlen, "");
    pthread_mutex_lock(&lr->map_mu);
    struct held *h = held_find(lr, name);
    if (h != NULL && clock_mono_ms() < h->confirmed_ms + lr->ttl_ms - lr->margin_ms) {
        *token = h->token;
        pthread_mutex_unlock(&lr->map_mu);
        rc = 0;
        goto out;
    }
    pthread_mutex_unlock(&lr->map_mu);

    key = xasprintf("%slease:%s", lr->prefix, name);
    tkey = xasprintf("%slease_token:%s", lr->prefix, name);
    snprintf(ttl, sizeof(ttl), "%lld", (long long)lr->ttl_ms);
    snprintf(seed, sizeof(seed), "%lld", (long long)clock_wall_ms());
    const char *argv[] = {"EVAL", acquire_lua, "2", key, tkey, lr->instance, lr->addr, ttl, seed};

    pthread_mutex_lock(&lr->conn_mu);
    int64_t sent = clock_mono_ms();
    r = redis_conn_cmd(&lr->conn, 9, argv);
    if (r == NULL && !lr->conn_down)
        log_warn("lease", "redis unavailable, refusing to lease", "room=%s err=\"%s\"", name,
                 lr->conn.errstr);
    lr->conn_down = r == NULL;
    pthread_mutex_unlock(&lr->conn_mu);
    if (r == NULL)
        goto out;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_STRING) {
        log_warn("lease", "unexpected redis reply", "room=%s type=%d err=\"%s\"", name, r->type,
                 r->type == REDIS_REPLY_ERROR ? r->str : "");
        goto out;
    }
    int64_t t = strtoll(r->element[0]->str, NULL, 10);
    pthread_mutex_lock(&lr->map_mu);
    if (t > 0) {
        held_put(lr, name, key, t, sent);
        *token = t;
        rc = 0;
    } else {
        if ((h = held_find(lr, name)) != NULL)
            held_remove(lr, h); /* taken over while we were not looking */
        set_owner(owner, ownerlen, r->element[1]->str);
        rc = ROOMD_ENOTOWNER;
    }
    pthread_mutex_unlock(&lr->map_mu);
out:
    freeReplyObject(r);
    free(name);
    free(key);
    free(tkey);
    return rc;
}

/* Compare-and-delete on conn (caller holds conn_mu when conn is shared). */
static void
delete_if_ours(struct redis_conn *conn, const char *key, const char *value)
{
    const char *argv[] = {"EVAL", release_lua, "1", key, value};
    redisReply *r = redis_conn_cmd(conn, 5, argv);

    if (r == NULL)
        log_warn("lease", "release failed, the lease will expire", "key=%s err=\"%s\"", key,
                 conn->errstr);
    else
        freeReplyObject(r);
}

static void
redis_release(struct lease *l, const char *app, const char *room_id, int64_t token)
{
    struct lease_redis *lr = (struct lease_redis *)l;
    char *name = xasprintf("%s:%s", app, room_id);
    char *key = NULL, *value = NULL;

    pthread_mutex_lock(&lr->map_mu);
    struct held *h = held_find(lr, name);
    if (h != NULL && (token == 0 || h->token == token)) {
        key = xstrdup(h->key);
        value = xstrdup(h->value);
        held_remove(lr, h);
    }
    pthread_mutex_unlock(&lr->map_mu);
    if (key != NULL) {
        pthread_mutex_lock(&lr->conn_mu);
        delete_if_ours(&lr->conn, key, value);
        pthread_mutex_unlock(&lr->conn_mu);
    }
    free(name);
    free(key);
    free(value);
}

/* ==== Held leases and membership ==== */

struct held_walk {
    char **names;
    size_t n, max;
};

static void
held_name(const void *nodep, VISIT which, void *arg)
{
    struct held_walk *w = arg;
    const struct held *h = *(struct held *const *)nodep;

    if ((which == postorder || which == leaf) && w->n < w->max)
        w->names[w->n++] = xstrdup(h->name);
}

/* lease_ops.held: twalk visits the tree in name order, so the first max are
 * the smallest names. */
static size_t
redis_held(struct lease *l, size_t max, char ***names, size_t *n)
{
    struct lease_redis *lr = (struct lease_redis *)l;
    struct held_walk w = {.max = max};
    size_t total;

    pthread_mutex_lock(&lr->map_mu);
    total = lr->nheld;
    if (w.max > total)
        w.max = total;
    w.names = xcalloc(w.max + 1, sizeof(char *));
    twalk_r(lr->held, held_name, &w);
    pthread_mutex_unlock(&lr->map_mu);
    *names = w.names;
    *n = w.n;
    return total;
}

/* This node as the membership shows it (malloc'd JSON). */
static char *
member_json(const struct lease_redis *lr)
{
    json_t *o =
        json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:I, s:I}", "node_id", lr->node_id, "instance",
                  lr->instance, "public_addr", lr->public_addr, "admin_addr", lr->admin_addr,
                  "version", roomd_version, "commit", roomd_commit, "started_ms",
                  (json_int_t)lr->started_ms, "seen_ms", (json_int_t)clock_wall_ms());
    char *s = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);

    json_decref(o);
    return s;
}

/* Writes this node's heartbeat key and hash entry on conn (one pipeline-free
 * round trip each). Best effort: a failure shows as a missed heartbeat. */
static void
heartbeat(struct lease_redis *lr, struct redis_conn *conn)
{
    char *v = member_json(lr), *key = xasprintf("%snode:%s", lr->prefix, lr->node_id);
    char *hash = xasprintf("%snodes", lr->prefix), ttl[24];
    snprintf(ttl, sizeof(ttl), "%lld", (long long)lr->ttl_ms);
    const char *set[] = {"SET", key, v, "PX", ttl};
    const char *hset[] = {"HSET", hash, lr->node_id, v};
    redisReply *r = redis_conn_cmd(conn, 5, set);

    if (r != NULL) {
        freeReplyObject(r);
        freeReplyObject(redis_conn_cmd(conn, 4, hset));
    }
    free(v);
    free(key);
    free(hash);
}

/* lease_ops.members: the hash's entries, each "alive" when its heartbeat key
 * is there (the key's JSON wins: it is the newest). */
static int
redis_members(struct lease *l, char **json)
{
    struct lease_redis *lr = (struct lease_redis *)l;
    char *hash = xasprintf("%snodes", lr->prefix);
    const char *hgetall[] = {"HGETALL", hash};
    json_t *out = json_array();
    int rc = 0;

    pthread_mutex_lock(&lr->conn_mu);
    redisReply *r = redis_conn_cmd(&lr->conn, 2, hgetall);
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        rc = ROOMD_EUNAVAIL;
        goto out;
    }
    int64_t now = clock_wall_ms();
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        const char *id = r->element[i]->str, *v = r->element[i + 1]->str;
        if (id == NULL || v == NULL)
            continue;
        char *key = xasprintf("%snode:%s", lr->prefix, id);
        const char *get[] = {"GET", key};
        redisReply *g = redis_conn_cmd(&lr->conn, 2, get);
        free(key);
        if (g == NULL) {
            rc = ROOMD_EUNAVAIL;
            break;
        }
        bool alive = g->type == REDIS_REPLY_STRING;
        json_t *o = json_loads(alive ? g->str : v, 0, NULL);
        freeReplyObject(g);
        if (!json_is_object(o)) {
            json_decref(o);
            continue;
        }
        int64_t seen = json_integer_value(json_object_get(o, "seen_ms"));
        if (!alive && now - seen > MEMBER_KEEP_MS) { /* gone for a day: forgotten */
            const char *hdel[] = {"HDEL", hash, id};
            freeReplyObject(redis_conn_cmd(&lr->conn, 3, hdel));
            json_decref(o);
            continue;
        }
        json_object_set_new(o, "alive", json_boolean(alive));
        json_array_append_new(out, o);
    }
out:
    pthread_mutex_unlock(&lr->conn_mu);
    freeReplyObject(r);
    free(hash);
    if (rc == 0)
        *json = json_dumps(out, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(out);
    return rc;
}

/* ==== Renewer thread ==== */

struct snap {
    char **names, **keys, **values;
    size_t n, cap;
};

static void
snap_add(const void *nodep, VISIT which, void *arg)
{
    struct snap *s = arg;
    const struct held *h = *(struct held *const *)nodep;

    if (which != postorder && which != leaf)
        return;
    if (s->n == s->cap)
        return;
    s->names[s->n] = xstrdup(h->name);
    s->keys[s->n] = xstrdup(h->key);
    s->values[s->n] = xstrdup(h->value);
    s->n++;
}

static void
snap_free(struct snap *s)
{
    for (size_t i = 0; i < s->n; i++) {
        free(s->names[i]);
        free(s->keys[i]);
        free(s->values[i]);
    }
    free(s->names);
    free(s->keys);
    free(s->values);
}

/* Renews every held lease, in batches of one EVAL each. */
static void
renew_all(struct lease_redis *lr, bool *was_up)
{
    struct snap s = {0};
    char ttl[24];

    pthread_mutex_lock(&lr->map_mu);
    s.cap = lr->nheld;
    s.names = xcalloc(s.cap + 1, sizeof(char *));
    s.keys = xcalloc(s.cap + 1, sizeof(char *));
    s.values = xcalloc(s.cap + 1, sizeof(char *));
    twalk_r(lr->held, snap_add, &s);
    pthread_mutex_unlock(&lr->map_mu);

    snprintf(ttl, sizeof(ttl), "%lld", (long long)lr->ttl_ms);
    for (size_t at = 0; at < s.n; at += RENEW_BATCH) {
        size_t n = s.n - at < RENEW_BATCH ? s.n - at : RENEW_BATCH;
        int argc = 3 + 2 * (int)n + 1;
        const char **argv = xcalloc((size_t)argc, sizeof(char *));
        char nkeys[16];

        snprintf(nkeys, sizeof(nkeys), "%zu", n);
        argv[0] = "EVAL";
        argv[1] = renew_lua;
        argv[2] = nkeys;
        for (size_t i = 0; i < n; i++)
            argv[3 + i] = s.keys[at + i];
        argv[3 + n] = ttl;
        for (size_t i = 0; i < n; i++)
            argv[4 + n + i] = s.values[at + i];
        int64_t sent = clock_mono_ms();
        redisReply *r = redis_conn_cmd(&lr->rconn, argc, argv);
        free(argv);
        if (r == NULL) {
            if (*was_up)
                log_warn("lease", "redis unavailable, leases not renewed", "held=%zu err=\"%s\"",
                         s.n, lr->rconn.errstr);
            *was_up = false;
            break;
        }
        if (!*was_up)
            log_info("lease", "redis reachable again", "held=%zu", s.n);
        *was_up = true;
        if (r->type != REDIS_REPLY_ARRAY || r->elements != n) {
            log_warn("lease", "unexpected renew reply", "type=%d", r->type);
            freeReplyObject(r);
            break;
        }
        pthread_mutex_lock(&lr->map_mu);
        for (size_t i = 0; i < n; i++) {
            struct held *h = held_find(lr, s.names[at + i]);
            if (h == NULL || strcmp(h->value, s.values[at + i]) != 0)
                continue; /* released or re-acquired meanwhile */
            if (r->element[i]->integer == 1) {
                if (sent > h->confirmed_ms)
                    h->confirmed_ms = sent;
            } else {
                log_warn("lease", "lease lost", "room=%s token=%lld", h->name, (long long)h->token);
                held_remove(lr, h);
            }
        }
        pthread_mutex_unlock(&lr->map_mu);
        freeReplyObject(r);
    }
    snap_free(&s);
}

static void *
renew_main(void *arg)
{
    struct lease_redis *lr = arg;
    bool was_up = true;

    while (!bg_thread_sleep(&lr->renewer, lr->renew_ms)) {
        renew_all(lr, &was_up);
        heartbeat(lr, &lr->rconn);
    }
    return NULL;
}

/* ==== Open / close ==== */

static void
release_one(const void *nodep, VISIT which, void *arg)
{
    const struct held *h = *(struct held *const *)nodep;

    if (which == postorder || which == leaf)
        delete_if_ours(arg, h->key, h->value);
}

static void
redis_close(struct lease *l)
{
    struct lease_redis *lr = (struct lease_redis *)l;

    bg_thread_stop(&lr->renewer);
    /* Shutdown gives every lease up so another node takes over at once. */
    twalk_r(lr->held, release_one, &lr->conn);
    tdestroy(lr->held, held_free);
    /* ... and its heartbeat: the nodes view shows it gone at once (the hash keeps it) */
    if (lr->node_id != NULL) {
        char *key = xasprintf("%snode:%s", lr->prefix, lr->node_id);
        const char *del[] = {"DEL", key};
        freeReplyObject(redis_conn_cmd(&lr->conn, 2, del));
        free(key);
    }
    redis_conn_close(&lr->conn);
    redis_conn_close(&lr->rconn);
    pthread_mutex_destroy(&lr->map_mu);
    pthread_mutex_destroy(&lr->conn_mu);
    free(lr->prefix);
    free(lr->addr);
    free(lr->instance);
    free(lr->node_id);
    free(lr->public_addr);
    free(lr->admin_addr);
    free(lr);
}

/* Readiness: a PING on the acquire connection (Redis down: no room can be taken). */
static int
redis_ready(struct lease *l, char *why, size_t whylen)
{
    struct lease_redis *lr = (struct lease_redis *)l;
    const char *ping[] = {"PING"};
    int rc = 0;

    pthread_mutex_lock(&lr->conn_mu);
    redisReply *r = redis_conn_cmd(&lr->conn, 1, ping);
    if (r == NULL) {
        snprintf(why, whylen, "lease redis: %s", lr->conn.errstr);
        rc = ROOMD_EUNAVAIL;
    }
    pthread_mutex_unlock(&lr->conn_mu);
    freeReplyObject(r);
    return rc;
}

static const struct lease_ops redis_ops = {.acquire = redis_acquire,
                                           .release = redis_release,
                                           .close = redis_close,
                                           .ready = redis_ready,
                                           .held = redis_held,
                                           .members = redis_members};

int
lease_redis_open(struct lease **out, const struct conf *conf, char *err, size_t errlen)
{
    struct lease_redis *lr = xcalloc(1, sizeof(*lr));
    unsigned char rnd[8] = {0};
    FILE *f;

    *out = NULL;
    if (redis_conn_init(&lr->conn, &conf->redis, err, errlen) != 0 ||
        redis_conn_init(&lr->rconn, &conf->redis, err, errlen) != 0) {
        redis_conn_close(&lr->conn);
        free(lr);
        return ROOMD_EINVAL;
    }
    lr->base.ops = &redis_ops;
    lr->prefix = xstrdup(conf->redis.key_prefix ? conf->redis.key_prefix : "");
    lr->public_addr = xstrdup(conf->http.advertise_addr && conf->http.advertise_addr[0]
                                  ? conf->http.advertise_addr
                                  : conf->http.listen);
    lr->admin_addr = xstrdup(conf->admin.advertise_addr && conf->admin.advertise_addr[0]
                                 ? conf->admin.advertise_addr
                                 : conf->admin.listen);
    lr->addr = xasprintf("%s %s", lr->public_addr, lr->admin_addr);
    lr->node_id = xstrdup(conf->app.node_id && conf->app.node_id[0] ? conf->app.node_id : "roomd");
    lr->started_ms = clock_wall_ms();
    if ((f = fopen("/dev/urandom", "rb")) != NULL) {
        if (fread(rnd, 1, sizeof(rnd), f) != sizeof(rnd))
            memset(rnd, 0, sizeof(rnd));
        fclose(f);
    }
    uint64_t r64 = 0;
    for (size_t i = 0; i < sizeof(rnd); i++)
        r64 = r64 << 8 | rnd[i];
    r64 ^= (uint64_t)clock_mono_us() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)lr;
    /* The instance is one token (no spaces) as the value format needs. */
    lr->instance = xasprintf(
        "%s/%016llx", conf->app.node_id && conf->app.node_id[0] ? conf->app.node_id : "roomd",
        (unsigned long long)r64);
    for (char *p = lr->instance; *p; p++)
        if (*p == ' ')
            *p = '_';
    lr->ttl_ms = conf->lease.ttl_ms;
    lr->renew_ms = conf->lease.renew_every_ms > 0 ? conf->lease.renew_every_ms : lr->ttl_ms / 3;
    lr->margin_ms = lr->ttl_ms / 10;
    pthread_mutex_init(&lr->map_mu, NULL);
    pthread_mutex_init(&lr->conn_mu, NULL);

    /* Try once now so a wrong address shows in the log at start-up; a Redis
     * that is down is not fatal: writes wait for it, reads go on. */
    const char *ping[] = {"PING"};
    redisReply *r = redis_conn_cmd(&lr->conn, 1, ping);
    if (r == NULL)
        log_warn("lease", "redis not reachable yet", "addr=%s err=\"%s\"", conf->redis.addr,
                 lr->conn.errstr);
    else
        freeReplyObject(r);
    if (r != NULL)
        heartbeat(lr, &lr->conn); /* listed from the start, not after renew_every */

    if (bg_thread_start(&lr->renewer, renew_main, lr) != 0) {
        snprintf(err, errlen, "lease: cannot start the renewer thread");
        redis_close(&lr->base);
        return ROOMD_EINTERNAL;
    }
    *out = &lr->base;
    return 0;
}
