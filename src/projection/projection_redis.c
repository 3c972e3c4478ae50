/* SPDX-License-Identifier: Apache-2.0 */
/*
 * projection_redis.c: the room list and presence in Redis, shared by every
 * node (projection.h). Keys, with P = <redis.key_prefix>proj:<app>:
 *   P room:<room_id>     hash: title, owner_uid, online, gift_total, gift_bucket,
 *                        gift_cur, gift_prev, version, updated_at_ms
 *   P rooms              zset: room_id by proj_score(online, recent gifts)
 *   P members:<room_id>  set of member uids (to see who left)
 *   P presence           hash: uid -> room_id (and P presence_since: uid -> ms)
 * One EVAL per update, ignoring versions older than the stored one. An update
 * that cannot reach Redis is parked (latest per room) and replayed by a
 * flusher thread once Redis answers again, so projections catch up.
 * Rebuilds (projection.h rebuild_begin/end) use two keys outside every app:
 *   <prefix>proj_meta:built       set once a rebuild completed; gone when Redis
 *                                 lost its data, which asks for a rebuild
 *   <prefix>proj_meta:rebuilding  the rebuild lock (one node rebuilds), PX
 */
#include "projection/projection.h"

#include "conf/conf.h"
#include "core/checked.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/thread.h"
#include "core/tree.h"
#include "core/xmalloc.h"
#include "projection/proj_room.h"
#include "redis/redis_conn.h"

#include <inttypes.h>
#include <pthread.h>
#include <search.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int projection_redis_open(struct projection **out, const struct conf *conf, char *err,
                          size_t errlen);

#define FLUSH_EVERY_MS 250
#define REBUILD_LOCK_MS 120000 /* a node that died while rebuilding holds it this long */

/* KEYS built marker, rebuild lock; ARGV lock value, lock ttl. 1: rebuild now. */
static const char rebuild_begin_lua[] =
    "if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end\n"
    "if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end\n"
    "return 0\n";

/* KEYS built marker, rebuild lock; ARGV lock value, ok (1/0), now ms. */
static const char rebuild_end_lua[] =
    "if ARGV[2] == '1' then redis.call('SET', KEYS[1], ARGV[3]) end\n"
    "if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[2]) end\n"
    "return 1\n";

/*
 * KEYS room hash, rooms zset, members set, presence hash, presence_since hash.
 * ARGV room_id, version, title, owner_uid, gift_total, updated_at_ms, closed,
 * hour bucket, n, then n pairs (uid, joined_at_ms). Returns 1 applied, 0 stale.
 */
static const char update_lua[] =
    "local ver = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')\n"
    "if tonumber(ARGV[2]) <= ver then return 0 end\n"
    "local fresh = ver == 0\n"
    "local h = redis.call('HMGET', KEYS[1], 'gift_total', 'gift_bucket', 'gift_cur', "
    "'gift_prev')\n"
    "local total = tonumber(ARGV[5])\n"
    "local delta = 0\n"
    "if not fresh then delta = total - tonumber(h[1] or '0') end\n"
    "if delta < 0 then delta = 0 end\n"
    "local b, cur, prev = tonumber(h[2] or '0'), tonumber(h[3] or '0'), tonumber(h[4] or '0')\n"
    "local hb = tonumber(ARGV[8])\n"
    "if hb <= b then cur = cur + delta\n"
    "elseif hb == b + 1 then prev = cur; cur = delta; b = hb\n"
    "else prev = 0; cur = delta; b = hb end\n"
    "local n = tonumber(ARGV[9])\n"
    "local now = {}\n"
    "for i = 1, n do now[ARGV[8 + 2 * i]] = ARGV[9 + 2 * i] end\n"
    "local before = {}\n"
    "for _, u in ipairs(redis.call('SMEMBERS', KEYS[3])) do\n"
    "  before[u] = true\n"
    "  if not now[u] and redis.call('HGET', KEYS[4], u) == ARGV[1] then\n"
    "    redis.call('HDEL', KEYS[4], u); redis.call('HDEL', KEYS[5], u)\n"
    "  end\n"
    "end\n"
    "redis.call('DEL', KEYS[3])\n"
    "for i = 1, n do\n"
    "  local u = ARGV[8 + 2 * i]\n"
    "  redis.call('SADD', KEYS[3], u)\n"
    "  if fresh or not before[u] then\n"
    "    redis.call('HSET', KEYS[4], u, ARGV[1]); redis.call('HSET', KEYS[5], u, ARGV[9 + 2 * i])\n"
    "  end\n"
    "end\n"
    "local f = function(x) return string.format('%d', x) end\n"
    "redis.call('HSET', KEYS[1], 'title', ARGV[3], 'owner_uid', ARGV[4], 'online', f(n),\n"
    "  'gift_total', ARGV[5], 'gift_bucket', f(b), 'gift_cur', f(cur), 'gift_prev', f(prev),\n"
    "  'version', ARGV[2], 'updated_at_ms', ARGV[6], 'closed', ARGV[7])\n"
    "if ARGV[7] == '1' then redis.call('ZREM', KEYS[2], ARGV[1])\n"
    "else\n"
    "  local recent = cur + prev\n"
    "  if recent > 999999999 then recent = 999999999 end\n"
    "  redis.call('ZADD', KEYS[2], string.format('%.0f', n * 1e9 + recent), ARGV[1])\n"
    "end\n"
    "return 1\n";

/*
 * KEYS rooms zset; ARGV room hash key prefix, start, stop. Returns
 * {total, {room_id, title, owner_uid, online, gift_cur, gift_prev, gift_total,
 * version, updated_at_ms}...}.
 */
static const char list_lua[] =
    "local ids = redis.call('ZREVRANGE', KEYS[1], ARGV[2], ARGV[3])\n"
    "local out = {redis.call('ZCARD', KEYS[1])}\n"
    "for _, id in ipairs(ids) do\n"
    "  local h = redis.call('HMGET', ARGV[1] .. id, 'title', 'owner_uid', 'online', "
    "'gift_cur', 'gift_prev', 'gift_total', 'version', 'updated_at_ms')\n"
    "  local e = {id}\n"
    "  for i = 1, 8 do e[i + 1] = h[i] or '' end\n"
    "  out[#out + 1] = e\n"
    "end\n"
    "return out\n";

/* A parked update, latest per room. */
struct parked {
    char *name; /* "<app>:<room_id>" (the map key; first: tree_name_cmp) */
    struct proj_room r;
};
_Static_assert(offsetof(struct parked, name) == 0, "tree_name_cmp reads the name first");

struct projection_redis {
    struct projection base;
    char *prefix;
    char *lock_value;        /* this handle's rebuild lock value: "<node_id>/<pid>-<random>" */
    pthread_mutex_t conn_mu; /* guards conn */
    struct redis_conn conn;
    bool down;

    pthread_mutex_t park_mu; /* guards parked, nparked */
    void *parked;
    size_t nparked;

    struct bg_thread flusher; /* zeroed until started */
};

static void
parked_free(void *p)
{
    struct parked *k = p;

    proj_room_clear(&k->r);
    free(k->name);
    free(k);
}

static char *
key(const struct projection_redis *pr, const char *app, const char *what, const char *id)
{
    return xasprintf("%sproj:%s:%s%s", pr->prefix, app, what, id ? id : "");
}

/* Sends one reduced state. Returns 0, or ROOMD_EUNAVAIL (Redis down) or
 * ROOMD_EIO (an error reply). Caller holds conn_mu. */
static int
push(struct projection_redis *pr, const struct proj_room *r)
{
    char *k_room = key(pr, r->app, "room:", r->room_id), *k_rooms = key(pr, r->app, "rooms", NULL);
    char *k_mem = key(pr, r->app, "members:", r->room_id);
    char *k_pres = key(pr, r->app, "presence", NULL);
    char *k_since = key(pr, r->app, "presence_since", NULL);
    char num[7][24];
    int argc = 3 + 5 + 9 + 2 * (int)r->nuids, rc = 0;
    const char **argv = xcalloc((size_t)argc, sizeof(char *));
    char(*uid_s)[24] = xcalloc(r->nuids + 1, sizeof(*uid_s));
    char(*join_s)[24] = xcalloc(r->nuids + 1, sizeof(*join_s));
    int a = 0;

    snprintf(num[0], 24, "%" PRId64, r->version);
    snprintf(num[1], 24, "%" PRId64, r->owner_uid);
    snprintf(num[2], 24, "%" PRId64, r->gift_total);
    snprintf(num[3], 24, "%" PRId64, r->updated_at_ms);
    snprintf(num[4], 24, "%d", r->closed ? 1 : 0);
    snprintf(num[5], 24, "%" PRId64, r->updated_at_ms / PROJ_HOUR_MS);
    snprintf(num[6], 24, "%zu", r->nuids);
    argv[a++] = "EVAL";
    argv[a++] = update_lua;
    argv[a++] = "5";
    argv[a++] = k_room;
    argv[a++] = k_rooms;
    argv[a++] = k_mem;
    argv[a++] = k_pres;
    argv[a++] = k_since;
    argv[a++] = r->room_id;
    argv[a++] = num[0];
    argv[a++] = r->title;
    argv[a++] = num[1];
    argv[a++] = num[2];
    argv[a++] = num[3];
    argv[a++] = num[4];
    argv[a++] = num[5];
    argv[a++] = num[6];
    for (size_t i = 0; i < r->nuids; i++) {
        snprintf(uid_s[i], 24, "%" PRId64, r->uids[i]);
        snprintf(join_s[i], 24, "%" PRId64, r->joined_ms[i]);
        argv[a++] = uid_s[i];
        argv[a++] = join_s[i];
    }
    redisReply *rep = redis_conn_cmd(&pr->conn, a, argv);
    if (rep == NULL) {
        rc = ROOMD_EUNAVAIL;
    } else {
        if (rep->type == REDIS_REPLY_ERROR) {
            log_warn("projection", "update refused by redis", "room=%s err=\"%s\"", r->room_id,
                     rep->str);
            rc = ROOMD_EIO;
        }
        freeReplyObject(rep);
    }
    free(argv);
    free(uid_s);
    free(join_s);
    free(k_room);
    free(k_rooms);
    free(k_mem);
    free(k_pres);
    free(k_since);
    return rc;
}

/* Keeps r (copied) to be replayed; a newer version replaces an older one. */
static void
park(struct projection_redis *pr, const struct proj_room *r)
{
    struct parked probe = {.name = xasprintf("%s:%s", r->app, r->room_id)};

    pthread_mutex_lock(&pr->park_mu);
    void *n = tfind(&probe, &pr->parked, tree_name_cmp);
    if (n == NULL) {
        struct parked *k = xcalloc(1, sizeof(*k));
        k->name = probe.name;
        probe.name = NULL;
        proj_room_copy(&k->r, r);
        tsearch(k, &pr->parked, tree_name_cmp);
        pr->nparked++;
    } else {
        struct parked *k = *(struct parked **)n;
        if (r->version > k->r.version) {
            proj_room_clear(&k->r);
            proj_room_copy(&k->r, r);
        }
    }
    pthread_mutex_unlock(&pr->park_mu);
    free(probe.name);
}

static void
note_state(struct projection_redis *pr, int rc)
{
    if (rc == ROOMD_EUNAVAIL && !pr->down)
        log_warn("projection", "redis unavailable, parking updates", "err=\"%s\"", pr->conn.errstr);
    else if (rc != ROOMD_EUNAVAIL && pr->down)
        log_info("projection", "redis reachable again", NULL);
    pr->down = rc == ROOMD_EUNAVAIL;
}

static int
rp_update(struct projection *p, const struct proj_room *r)
{
    struct projection_redis *pr = (struct projection_redis *)p;
    int rc;

    pthread_mutex_lock(&pr->conn_mu);
    rc = push(pr, r);
    note_state(pr, rc);
    pthread_mutex_unlock(&pr->conn_mu);
    if (rc == ROOMD_EUNAVAIL)
        park(pr, r);
    return rc;
}

/* ==== Flusher thread: replays parked updates once Redis answers ==== */

struct take {
    struct parked **v;
    size_t n;
};

static void
take_one(const void *nodep, VISIT which, void *arg)
{
    struct take *t = arg;

    if (which == postorder || which == leaf)
        t->v[t->n++] = *(struct parked *const *)nodep;
}

static void
flush_parked(struct projection_redis *pr)
{
    struct take t = {0};

    pthread_mutex_lock(&pr->park_mu);
    if (pr->nparked == 0) {
        pthread_mutex_unlock(&pr->park_mu);
        return;
    }
    t.v = xcalloc(pr->nparked, sizeof(*t.v));
    twalk_r(pr->parked, take_one, &t);
    for (size_t i = 0; i < t.n; i++)
        tdelete(t.v[i], &pr->parked, tree_name_cmp);
    pr->nparked = 0;
    pthread_mutex_unlock(&pr->park_mu);

    size_t i = 0;
    pthread_mutex_lock(&pr->conn_mu);
    for (; i < t.n; i++) {
        int rc = push(pr, &t.v[i]->r);
        note_state(pr, rc);
        if (rc == ROOMD_EUNAVAIL)
            break;
    }
    pthread_mutex_unlock(&pr->conn_mu);
    if (i == t.n && t.n > 0)
        log_info("projection", "parked updates replayed", "rooms=%zu", t.n);
    for (size_t j = 0; j < t.n; j++) {
        if (j >= i)
            park(pr, &t.v[j]->r); /* still down: keep (a newer one may be there) */
        parked_free(t.v[j]);
    }
    free(t.v);
}

static void *
flush_main(void *arg)
{
    struct projection_redis *pr = arg;

    while (!bg_thread_sleep(&pr->flusher, FLUSH_EVERY_MS))
        flush_parked(pr);
    return NULL;
}

/* ==== Reads ==== */

static const char *
str_el(const redisReply *r)
{
    return r->type == REDIS_REPLY_STRING ? r->str : "";
}

static int64_t
int_el(const redisReply *r)
{
    return r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : 0;
}

static int
rp_list_rooms(struct projection *p, const char *app, int64_t cursor, int limit, char **json)
{
    struct projection_redis *pr = (struct projection_redis *)p;
    char *k_rooms = key(pr, app, "rooms", NULL), *k_room = key(pr, app, "room:", NULL);
    char start[24], stop[24];
    int rc = 0;

    *json = NULL;
    proj_clamp_page(&cursor, &limit);
    snprintf(start, sizeof(start), "%" PRId64, cursor);
    snprintf(stop, sizeof(stop), "%" PRId64, cursor + limit - 1);
    const char *argv[] = {"EVAL", list_lua, "1", k_rooms, k_room, start, stop};
    pthread_mutex_lock(&pr->conn_mu);
    redisReply *r = redis_conn_cmd(&pr->conn, 7, argv);
    note_state(pr, r == NULL ? ROOMD_EUNAVAIL : 0);
    pthread_mutex_unlock(&pr->conn_mu);
    if (r == NULL) {
        rc = ROOMD_EUNAVAIL;
        goto out;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
        r->element[0]->type != REDIS_REPLY_INTEGER) {
        log_warn("projection", "unexpected list reply", "type=%d err=\"%s\"", r->type,
                 r->type == REDIS_REPLY_ERROR ? r->str : "");
        freeReplyObject(r);
        rc = ROOMD_EIO;
        goto out;
    }
    json_t *rooms = json_array();
    for (size_t i = 1; i < r->elements; i++) {
        redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements != 9)
            continue;
        json_array_append_new(
            rooms,
            proj_entry_json(str_el(e->element[0]), str_el(e->element[1]), int_el(e->element[2]),
                            int_el(e->element[3]),
                            i64_add_sat(int_el(e->element[4]), int_el(e->element[5])),
                            int_el(e->element[6]), int_el(e->element[7]), int_el(e->element[8])));
    }
    int64_t total = r->element[0]->integer;
    *json = proj_page_json(rooms, cursor + limit < total ? cursor + limit : -1);
    freeReplyObject(r);
out:
    free(k_rooms);
    free(k_room);
    return rc;
}

static int
rp_presence(struct projection *p, const char *app, int64_t uid, char **json)
{
    struct projection_redis *pr = (struct projection_redis *)p;
    char *k_pres = key(pr, app, "presence", NULL), *k_since = key(pr, app, "presence_since", NULL);
    char u[24];
    redisReply *a = NULL, *b = NULL;
    int rc = 0;

    *json = NULL;
    snprintf(u, sizeof(u), "%" PRId64, uid);
    const char *av[] = {"HGET", k_pres, u};
    const char *bv[] = {"HGET", k_since, u};
    pthread_mutex_lock(&pr->conn_mu);
    a = redis_conn_cmd(&pr->conn, 3, av);
    if (a != NULL)
        b = redis_conn_cmd(&pr->conn, 3, bv);
    note_state(pr, a == NULL || b == NULL ? ROOMD_EUNAVAIL : 0);
    pthread_mutex_unlock(&pr->conn_mu);
    if (a == NULL || b == NULL) {
        rc = ROOMD_EUNAVAIL;
        goto out;
    }
    *json = proj_presence_json(uid, a->type == REDIS_REPLY_STRING ? a->str : NULL, int_el(b));
out:
    freeReplyObject(a);
    freeReplyObject(b);
    free(k_pres);
    free(k_since);
    return rc;
}

/* ==== Clear, open, close ==== */

static int
rp_clear(struct projection *p, const char *app)
{
    struct projection_redis *pr = (struct projection_redis *)p;
    char *pattern = xasprintf("%sproj:%s:*", pr->prefix, app);
    char cursor[32] = "0";
    int rc = 0;

    pthread_mutex_lock(&pr->conn_mu);
    do {
        const char *sv[] = {"SCAN", cursor, "MATCH", pattern, "COUNT", "500"};
        redisReply *r = redis_conn_cmd(&pr->conn, 6, sv);
        if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
            rc = r == NULL ? ROOMD_EUNAVAIL : ROOMD_EIO;
            freeReplyObject(r);
            break;
        }
        strlcpy_(cursor, str_el(r->element[0]), sizeof(cursor));
        redisReply *ks = r->element[1];
        if (ks->elements > 0) {
            const char **dv = xcalloc(ks->elements + 1, sizeof(char *));
            dv[0] = "DEL";
            for (size_t i = 0; i < ks->elements; i++)
                dv[i + 1] = str_el(ks->element[i]);
            redisReply *d = redis_conn_cmd(&pr->conn, (int)ks->elements + 1, dv);
            free(dv);
            if (d == NULL)
                rc = ROOMD_EUNAVAIL;
            else
                freeReplyObject(d);
        }
        freeReplyObject(r);
    } while (rc == 0 && strcmp(cursor, "0") != 0);
    note_state(pr, rc);
    pthread_mutex_unlock(&pr->conn_mu);
    free(pattern);
    return rc;
}

/* Runs script (the rebuild protocol) on KEYS <prefix>proj_meta:built and
 * <prefix>proj_meta:rebuilding with ARGV this handle's lock value, a and b
 * (b may be NULL). Returns the reply (the caller frees it), or NULL when
 * Redis is down. Takes conn_mu. */
static redisReply *
rebuild_eval(struct projection_redis *pr, const char *script, const char *a, const char *b)
{
    char *k_built = xasprintf("%sproj_meta:built", pr->prefix);
    char *k_lock = xasprintf("%sproj_meta:rebuilding", pr->prefix);
    const char *argv[] = {"EVAL", script, "2", k_built, k_lock, pr->lock_value, a, b};

    pthread_mutex_lock(&pr->conn_mu);
    redisReply *r = redis_conn_cmd(&pr->conn, b != NULL ? 8 : 7, argv);
    note_state(pr, r == NULL ? ROOMD_EUNAVAIL : 0);
    pthread_mutex_unlock(&pr->conn_mu);
    free(k_built);
    free(k_lock);
    return r;
}

static int
rp_rebuild_begin(struct projection *p)
{
    struct projection_redis *pr = (struct projection_redis *)p;
    char ttl[24];
    int rc;

    snprintf(ttl, sizeof(ttl), "%d", REBUILD_LOCK_MS);
    redisReply *r = rebuild_eval(pr, rebuild_begin_lua, ttl, NULL);
    if (r == NULL)
        rc = ROOMD_EUNAVAIL;
    else if (r->type == REDIS_REPLY_INTEGER)
        rc = r->integer == 1 ? 1 : 0;
    else
        rc = ROOMD_EIO;
    freeReplyObject(r);
    return rc;
}

static void
rp_rebuild_end(struct projection *p, bool ok)
{
    struct projection_redis *pr = (struct projection_redis *)p;
    char now[24];

    snprintf(now, sizeof(now), "%" PRId64, clock_wall_ms());
    redisReply *r = rebuild_eval(pr, rebuild_end_lua, ok ? "1" : "0", now);
    if (r == NULL) /* the lock expires by itself; the marker stays unset: rebuilt again */
        log_warn("projection", "rebuild end not recorded", "err=\"%s\"", pr->conn.errstr);
    freeReplyObject(r);
}

static void
rp_close(struct projection *p)
{
    struct projection_redis *pr = (struct projection_redis *)p;

    bg_thread_stop(&pr->flusher);
    flush_parked(pr); /* last chance */
    if (pr->nparked > 0)
        log_warn("projection", "parked updates dropped at shutdown", "rooms=%zu", pr->nparked);
    tdestroy(pr->parked, parked_free);
    redis_conn_close(&pr->conn);
    pthread_mutex_destroy(&pr->conn_mu);
    pthread_mutex_destroy(&pr->park_mu);
    free(pr->prefix);
    free(pr->lock_value);
    free(pr);
}

#define RP_OP(op) .op = rp_##op,
static const struct projection_ops redis_ops = {PROJECTION_OPS(RP_OP)};
#undef RP_OP

int
projection_redis_open(struct projection **out, const struct conf *conf, char *err, size_t errlen)
{
    struct projection_redis *pr = xcalloc(1, sizeof(*pr));

    *out = NULL;
    if (redis_conn_init(&pr->conn, &conf->redis, err, errlen) != 0) {
        free(pr);
        return ROOMD_EINVAL;
    }
    pr->base.ops = &redis_ops;
    pr->prefix = xstrdup(conf->redis.key_prefix ? conf->redis.key_prefix : "");
    pr->lock_value = xasprintf("%s/%d-%016" PRIx64, conf->app.node_id ? conf->app.node_id : "",
                               (int)getpid(), (uint64_t)clock_mono_us() ^ (uint64_t)(uintptr_t)pr);
    pthread_mutex_init(&pr->conn_mu, NULL);
    pthread_mutex_init(&pr->park_mu, NULL);
    if (bg_thread_start(&pr->flusher, flush_main, pr) != 0) {
        snprintf(err, errlen, "projection: cannot start the flusher thread");
        rp_close(&pr->base);
        return ROOMD_EINTERNAL;
    }
    *out = &pr->base;
    return 0;
}
