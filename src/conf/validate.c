/* SPDX-License-Identifier: Apache-2.0 */
/*
 * validate.c: the rules of a loaded struct conf. check_row() checks each
 * row's single-key rule of the key table (keys.c), validate_cross() the rules
 * that span keys (auth and admin, rocketmq names, outbox, ...), and
 * conf_validate()/conf_validate_at() run both, recording the first failure as
 * "[FILE[:LINE:COL]: ]key.path: problem". Also here: the helpers the rules
 * share with other modules (conf_listen_is_loopback, conf_admin_token_parse,
 * conf_rocketmq_driver).
 */
#include "conf/conf.h"
#include "conf/internal.h"

#include "core/err.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct vctx {
    const char *file;              /* NULL: no location prefix */
    const struct conf_mark *marks; /* NULL: none */
    char *err;
    size_t errlen;
    int failed;
};

/* Records the first failure: "[FILE[:LINE:COL]: ]path: problem". */
static void bad(struct vctx *v, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bool topics_collide(const char *a, const char *b);

/* Topics and consumer groups that collide (issue 26): the rocket wake-ups'
 * topic beside the outbox's (its group would read, and dead-letter, every
 * room event), and one consumer group name for two roles (they would share
 * one position and each see only part of the events). */
static void
validate_mq_names(const struct conf_rocketmq *mq, struct vctx *v)
{
    const struct {
        const char *key, *name;
    } groups[] = {
        {"rocketmq.room_outbox.tencent_im_consumer_group",
         mq->room_outbox.tencent_im_consumer_group},
        {"rocketmq.room_outbox.activity_consumer_group", mq->room_outbox.activity_consumer_group},
        {"rocketmq.room_outbox.notice_consumer_group", mq->room_outbox.notice_consumer_group},
        {"rocketmq.rocket_launch.consumer_group", mq->rocket_launch.consumer_group},
    };

    if (mq->room_outbox.enabled && mq->rocket_launch.enabled && mq->room_outbox.topic != NULL &&
        mq->rocket_launch.topic != NULL &&
        topics_collide(mq->room_outbox.topic, mq->rocket_launch.topic))
        bad(v, "rocketmq.rocket_launch.topic",
            "\"%s\" collides with rocketmq.room_outbox.topic \"%s\": the wake-ups' group would "
            "read every room event; give them distinct topics",
            mq->rocket_launch.topic, mq->room_outbox.topic);
    for (size_t i = 0; i < sizeof(groups) / sizeof(groups[0]); i++)
        for (size_t j = i + 1; j < sizeof(groups) / sizeof(groups[0]); j++)
            if (groups[i].name != NULL && groups[j].name != NULL && *groups[i].name &&
                strcmp(groups[i].name, groups[j].name) == 0)
                bad(v, groups[j].key, "\"%s\" is also %s: each consumer role needs its own group",
                    groups[j].name, groups[i].key);
}

static void
bad(struct vctx *v, const char *path, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    int idx;

    if (v->failed)
        return;
    v->failed = 1;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    idx = conf_key_index(path);
    if (v->file != NULL && v->marks != NULL && idx >= 0 && v->marks[idx].set)
        snprintf(v->err, v->errlen, "%s:%zu:%zu: %s: %s", v->file, v->marks[idx].line + 1,
                 v->marks[idx].col + 1, path, msg);
    else if (v->file != NULL)
        snprintf(v->err, v->errlen, "%s: %s: %s", v->file, path, msg);
    else
        snprintf(v->err, v->errlen, "%s: %s", path, msg);
}

/* "host:port" with a non-empty host and a port in 1..65535 ("[::1]:80" too). */
static int
host_port_ok(const char *s)
{
    const char *colon;
    char *end;

    if (conf_empty(s) || (colon = strrchr(s, ':')) == NULL || colon == s)
        return 0;
    errno = 0;
    long port = strtol(colon + 1, &end, 10);
    return errno == 0 && end != colon + 1 && *end == '\0' && port >= 1 && port <= 65535;
}

/* The numeric value of row k in c (bool 0/1, choice index). */
static int64_t
num_value(const struct conf *c, const struct key *k)
{
    const void *p = (const char *)c + k->off;

    switch (k->type) {
    case K_INT:
    case K_CHOICE:
        return *(const int *)p;
    case K_INT64:
    case K_DUR:
        return *(const int64_t *)p;
    case K_BOOL:
    case K_SYNC:
        return *(const bool *)p;
    default:
        return 0;
    }
}

static const char *
str_value(const struct conf *c, const struct key *k)
{
    return k->type == K_STR ? *(char *const *)((const char *)c + k->off) : NULL;
}

/* Whether row k's rule applies: no .when, a true bool "key" or "key=value". */
static int
when_holds(const struct conf *c, const struct key *k)
{
    char name[128];
    const char *eq;
    int idx;

    if (k->when == NULL)
        return 1;
    eq = strchr(k->when, '=');
    snprintf(name, sizeof(name), "%.*s", eq ? (int)(eq - k->when) : (int)strlen(k->when), k->when);
    if ((idx = conf_key_index(name)) < 0)
        abort(); /* a bad .when in conf_keys[] */
    if (eq == NULL)
        return num_value(c, &conf_keys[idx]) != 0;
    const char *s = str_value(c, &conf_keys[idx]);
    return s != NULL && strcmp(s, eq + 1) == 0;
}

/* Checks row k's single-key rule; the message names the key and the bound. */
static void
check_row(const struct conf *c, const struct key *k, struct vctx *v)
{
    const char *sep = k->note ? " " : "", *note = k->note ? k->note : "";
    const char *s = str_value(c, k);
    int64_t n = num_value(c, k);
    char names[160];

    if (k->check == CK_NONE || !when_holds(c, k))
        return;
    switch (k->check) {
    case CK_GT:
        if (n <= k->lo)
            bad(v, k->path, "must be > %lld%s%s", (long long)k->lo, sep, note);
        break;
    case CK_GE:
        if (n < k->lo)
            bad(v, k->path, "must be >= %lld%s%s", (long long)k->lo, sep, note);
        break;
    case CK_RANGE:
        if (n < k->lo || n > k->hi)
            bad(v, k->path, "must be in %lld..%lld%s%s, got %lld", (long long)k->lo,
                (long long)k->hi, sep, note, (long long)n);
        break;
    case CK_NONEMPTY:
        if (conf_empty(s))
            bad(v, k->path, "must not be empty%s%s", sep, note);
        break;
    case CK_ONE_OF:
        conf_join_names(k->names, names, sizeof(names));
        if (k->type == K_CHOICE) {
            if (n < 0 || n >= conf_count_names(k->names))
                bad(v, k->path, "must be one of %s", names);
        } else if (conf_name_index(k->names, s) < 0) {
            bad(v, k->path, "must be one of %s, got \"%s\"", names, s ? s : "");
        }
        break;
    case CK_HOSTPORT:
    case CK_HOSTPORT_OPT:
        if (!(k->check == CK_HOSTPORT_OPT && conf_empty(s)) && !host_port_ok(s))
            bad(v, k->path, "must be host:port%s%s, got \"%s\"", sep, note, s ? s : "");
        break;
    case CK_NONE:
        break;
    }
}

bool
conf_listen_is_loopback(const char *listen)
{
    const char *colon = listen ? strrchr(listen, ':') : NULL;
    char host[64];
    struct in_addr a4;
    struct in6_addr a6;
    size_t n;

    if (colon == NULL || (n = (size_t)(colon - listen)) == 0 || n >= sizeof(host))
        return false;
    if (listen[0] == '[' && listen[n - 1] == ']') /* "[::1]:8080" */
        snprintf(host, sizeof(host), "%.*s", (int)(n - 2), listen + 1);
    else
        snprintf(host, sizeof(host), "%.*s", (int)n, listen);
    if (strcmp(host, "localhost") == 0)
        return true;
    /* the parsed address, not its text: "127.0.0.1" yes, "127.example.com" no */
    if (inet_pton(AF_INET, host, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, host, &a6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&a6) || (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
    return false;
}

bool
conf_cidr_parse(const char *s, struct conf_cidr *out)
{
    char host[64];
    const char *slash = s ? strchr(s, '/') : NULL;
    size_t n = s ? (slash ? (size_t)(slash - s) : strlen(s)) : 0;
    int max;

    memset(out, 0, sizeof(*out));
    if (n == 0 || n >= sizeof(host))
        return false;
    memcpy(host, s, n);
    host[n] = '\0';
    if (inet_pton(AF_INET, host, out->addr) == 1)
        out->family = AF_INET, max = 32;
    else if (inet_pton(AF_INET6, host, out->addr) == 1)
        out->family = AF_INET6, max = 128;
    else
        return false;
    out->bits = max;
    if (slash != NULL) {
        char *end;
        long b;
        if (slash[1] < '0' || slash[1] > '9')
            return false;
        errno = 0;
        b = strtol(slash + 1, &end, 10);
        if (*end != '\0' || errno != 0 || b < 0 || b > max)
            return false;
        out->bits = (int)b;
    }
    return true;
}

bool
conf_cidr_match(const struct conf_cidr *c, const char *a)
{
    unsigned char x[16];
    const unsigned char *p = x;
    int family;

    if (a == NULL)
        return false;
    if (inet_pton(AF_INET, a, x) == 1) {
        family = AF_INET;
    } else if (inet_pton(AF_INET6, a, x) == 1) {
        family = AF_INET6;
        if (IN6_IS_ADDR_V4MAPPED((const struct in6_addr *)x))
            family = AF_INET, p = x + 12;
    } else {
        return false;
    }
    if (family != c->family)
        return false;
    for (int i = 0, left = c->bits; left > 0; i++, left -= 8) {
        unsigned char mask = left >= 8 ? 0xff : (unsigned char)(0xff << (8 - left));
        if ((p[i] & mask) != (c->addr[i] & mask))
            return false;
    }
    return true;
}

/* At most one of two keys saying where a secret (or a TLS file) is. */
static void
not_both(struct vctx *v, const char *a_key, const char *a, const char *b_key, const char *b)
{
    if (!conf_empty(a) && !conf_empty(b))
        bad(v, b_key, "set either %s or %s, not both", a_key, b_key);
}

/* Both of a TLS pair, or neither. */
static void
pair(struct vctx *v, const char *a_key, const char *a, const char *b_key, const char *b)
{
    if (conf_empty(a) != conf_empty(b))
        bad(v, conf_empty(a) ? a_key : b_key, "set both %s and %s, or neither", a_key, b_key);
}

int
conf_admin_token_parse(const char *entry, struct conf_admin_token *out, char *err, size_t errlen)
{
    char buf[1024];
    char *save = NULL;

    memset(out, 0, sizeof(*out));
    snprintf(buf, sizeof(buf), "%s", entry);
    for (char *w = strtok_r(buf, " ", &save); w != NULL; w = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(w, '=');
        if (eq == NULL) {
            snprintf(err, errlen, "want {name, role, token_env | token_file}, got \"%.40s\"", w);
            return ROOMD_EINVAL;
        }
        *eq++ = '\0';
        if (strcmp(w, "name") == 0)
            snprintf(out->name, sizeof(out->name), "%s", eq);
        else if (strcmp(w, "role") == 0 && (strcmp(eq, "read") == 0 || strcmp(eq, "operate") == 0))
            out->read_only = strcmp(eq, "read") == 0;
        else if (strcmp(w, "role") == 0) {
            snprintf(err, errlen, "role: read or operate, not \"%.40s\"", eq);
            return ROOMD_EINVAL;
        } else if (strcmp(w, "token_env") == 0)
            snprintf(out->token_env, sizeof(out->token_env), "%s", eq);
        else if (strcmp(w, "token_file") == 0)
            snprintf(out->token_file, sizeof(out->token_file), "%s", eq);
        else {
            snprintf(err, errlen, "unknown key \"%.40s\" (name, role, token_env, token_file)", w);
            return ROOMD_EINVAL;
        }
    }
    if (out->name[0] == '\0' ||
        strspn(out->name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                          "0123456789_.-") != strlen(out->name)) {
        snprintf(err, errlen, "name: want [A-Za-z0-9_.-]{1,63}");
        return ROOMD_EINVAL;
    }
    if ((out->token_env[0] == '\0') == (out->token_file[0] == '\0')) {
        snprintf(err, errlen, "%s: set one of token_env, token_file", out->name);
        return ROOMD_EINVAL;
    }
    return 0;
}

/* auth.* and admin.* (docs/auth.md). */
static void
validate_auth_admin(const struct conf *c, struct vctx *v)
{
    const struct conf_auth *a = &c->auth;
    const struct conf_admin *ad = &c->admin;
    bool hs = !conf_empty(a->hs256_secret_env) || !conf_empty(a->hs256_secret_file);

    if (strcmp(a->mode, "none") == 0) {
        if (!conf_listen_is_loopback(c->http.listen))
            bad(v, "auth.mode", "none needs every listener on loopback; http.listen is \"%s\"",
                c->http.listen);
        else if (!conf_listen_is_loopback(ad->listen))
            bad(v, "auth.mode", "none needs every listener on loopback; admin.listen is \"%s\"",
                ad->listen);
        else if (!conf_empty(c->grpc.listen) && !conf_listen_is_loopback(c->grpc.listen))
            bad(v, "auth.mode", "none needs every listener on loopback; grpc.listen is \"%s\"",
                c->grpc.listen);
    }
    if (strcmp(c->room.gift_catalog, "off") == 0 && strcmp(a->mode, "none") != 0)
        bad(v, "room.gift_catalog",
            "off lets a caller choose the price of its gifts: only allowed with auth.mode none");
    not_both(v, "auth.jwt.hs256_secret_env", a->hs256_secret_env, "auth.jwt.hs256_secret_file",
             a->hs256_secret_file);
    if (strcmp(a->mode, "jwt") == 0 && !hs && conf_empty(a->public_key_file) &&
        conf_empty(a->jwks_file))
        bad(v, "auth.jwt.hs256_secret_env",
            "auth.mode jwt needs auth.jwt.hs256_secret_env, auth.jwt.hs256_secret_file, "
            "auth.jwt.public_key_file or auth.jwt.jwks_file");
    if (hs && !conf_empty(a->public_key_file))
        bad(v, "auth.jwt.public_key_file",
            "set either an HS256 secret or auth.jwt.public_key_file, not both");
    if (!conf_empty(a->jwks_file) && (hs || !conf_empty(a->public_key_file)))
        bad(v, "auth.jwt.jwks_file",
            "set one of an HS256 secret, auth.jwt.public_key_file, auth.jwt.jwks_file");
    if (strcmp(ad->listen, c->http.listen) == 0)
        bad(v, "admin.listen", "must differ from http.listen");
    not_both(v, "admin.token_env", ad->token_env, "admin.token_file", ad->token_file);
    for (int i = 0; i < ad->ntokens; i++) {
        struct conf_admin_token t, u;
        char e[256];
        if (conf_admin_token_parse(ad->tokens[i], &t, e, sizeof(e)) != 0) {
            bad(v, "admin.tokens", "entry %d: %s", i + 1, e);
            break;
        }
        for (int j = 0; j < i; j++)
            if (conf_admin_token_parse(ad->tokens[j], &u, e, sizeof(e)) == 0 &&
                strcmp(u.name, t.name) == 0)
                bad(v, "admin.tokens", "entry %d: name \"%s\" used twice", i + 1, t.name);
    }
    if (conf_empty(ad->token_env) && conf_empty(ad->token_file) && ad->ntokens == 0 &&
        !conf_listen_is_loopback(ad->listen))
        bad(v, "admin.token_env",
            "admin.listen \"%s\" is not loopback: set admin.token_env or admin.token_file",
            ad->listen);
    /* gRPC's RoomInternalService checks the admin token, as admin.listen does */
    if (conf_empty(ad->token_env) && conf_empty(ad->token_file) && ad->ntokens == 0 &&
        !conf_empty(c->grpc.listen) && !conf_listen_is_loopback(c->grpc.listen))
        bad(v, "admin.token_env",
            "grpc.listen \"%s\" is not loopback: set admin.token_env or admin.token_file "
            "(RoomInternalService checks it)",
            c->grpc.listen);
    if (!conf_empty(c->grpc.listen) &&
        (strcmp(c->grpc.listen, c->http.listen) == 0 || strcmp(c->grpc.listen, ad->listen) == 0))
        bad(v, "grpc.listen", "must differ from http.listen and admin.listen");
    pair(v, "http.tls.cert_file", c->http.tls_cert_file, "http.tls.key_file", c->http.tls_key_file);
    pair(v, "admin.tls.cert_file", ad->tls_cert_file, "admin.tls.key_file", ad->tls_key_file);
    pair(v, "grpc.tls.cert_file", c->grpc.tls_cert_file, "grpc.tls.key_file", c->grpc.tls_key_file);
}

int
conf_rocketmq_driver(const struct conf_rocketmq *mq)
{
    if (mq->driver == CONF_MQ_JETSTREAM || mq->driver == CONF_MQ_ROCKETMQ)
        return mq->driver;
    for (int i = 0; i < mq->nname_servers; i++) {
        const char *u = mq->name_servers[i] ? mq->name_servers[i] : "";
        if (strncmp(u, "nats://", 7) == 0 || strncmp(u, "tls://", 6) == 0)
            return CONF_MQ_JETSTREAM; /* a NATS list (its other entries checked as URLs) */
    }
    return mq->nname_servers > 0 || !conf_empty(mq->name_server_domain) ? CONF_MQ_ROCKETMQ
                                                                        : CONF_MQ_JETSTREAM;
}

/* "host:port" with a port 1..65535 (a leading http:// allowed, as the
 * RocketMQ clients strip it). */
static bool
rmq_host_port(const char *s)
{
    if (strncmp(s, "http://", 7) == 0)
        s += 7;
    const char *colon = strrchr(s, ':');
    if (colon == NULL || colon == s || strchr(s, '/') != NULL)
        return false;
    char *end;
    long port = strtol(colon + 1, &end, 10);
    return colon[1] != '\0' && *end == '\0' && port > 0 && port < 65536;
}

/* The rules that read more than one key (or every entry of a list). */
static void
validate_cross(const struct conf *c, struct vctx *v)
{
    const struct conf_outbox *ob = &c->outbox_worker;
    const struct conf_rocketmq *mq = &c->rocketmq;
    const struct conf_tencent_im *im = &c->tencent_im;
    const struct conf_rocket *rk = &c->room.rocket;

    if (rk->nthresholds < 1)
        bad(v, "room.rocket.thresholds", "needs at least one level");
    for (int i = 0; i < rk->nthresholds; i++) {
        if (rk->thresholds[i] <= 0)
            bad(v, "room.rocket.thresholds", "every threshold must be > 0");
        else if (i > 0 && rk->thresholds[i] <= rk->thresholds[i - 1])
            bad(v, "room.rocket.thresholds", "must be strictly increasing");
    }

    /* redis, lease, projection */
    if (strcmp(c->lease.driver, "redis") == 0 && !c->redis.enabled)
        bad(v, "lease.driver", "redis needs redis.enabled: true");
    if (c->lease.renew_every_ms <= 0 || c->lease.renew_every_ms >= c->lease.ttl_ms)
        bad(v, "lease.renew_every", "must be > 0 and < lease.ttl");
    /* a command gives up on its hold at half of reconcile_after (docs/wallet.md),
     * so a hold the reconciler sees is never about to commit */
    if (c->wallet.reconcile_after_ms < 4 * c->wallet.grpc_timeout_ms)
        bad(v, "wallet.reconcile_after", "must be >= 4 x wallet.grpc.timeout");
    if (strcmp(c->projection.driver, "redis") == 0 && !c->redis.enabled)
        bad(v, "projection.driver", "redis needs redis.enabled: true");
    if (c->rocketmq.consumer_inbox == 2 && strcmp(c->store.driver, "mysql") != 0)
        bad(v, "rocketmq.consumer_inbox", "mysql needs store.driver: mysql");

    for (int i = 0; i < c->redis.nsentinel_addrs; i++)
        if (!host_port_ok(c->redis.sentinel_addrs[i]))
            bad(v, "redis.sentinel.addrs", "entries must be host:port, got \"%s\"",
                c->redis.sentinel_addrs[i]);
    if (c->redis.nsentinel_addrs > 0 && conf_empty(c->redis.sentinel_master_name))
        bad(v, "redis.sentinel.master_name", "must be set with redis.sentinel.addrs");
    for (int i = 0; i < c->store.mysql.nhosts; i++)
        if (!host_port_ok(c->store.mysql.hosts[i]))
            bad(v, "store.mysql.hosts", "entries must be host:port, got \"%s\"",
                c->store.mysql.hosts[i]);

    /* rocketmq (NATS JetStream, or RocketMQ: docs/rocketmq.md) */
    bool rmq = conf_rocketmq_driver(mq) == CONF_MQ_ROCKETMQ;
    if (mq->enabled) {
        if (mq->nname_servers < 1 && !(rmq && !conf_empty(mq->name_server_domain)))
            bad(v, "rocketmq.name_servers",
                rmq ? "needs at least one name server host:port (or rocketmq.name_server_domain)"
                    : "needs at least one NATS URL when rocketmq.enabled");
        for (int i = 0; i < mq->nname_servers; i++)
            if (conf_empty(mq->name_servers[i]))
                bad(v, "rocketmq.name_servers", "entries must not be empty");
            else if (rmq && !rmq_host_port(mq->name_servers[i]))
                bad(v, "rocketmq.name_servers",
                    "driver rocketmq: every entry is a name server host:port (9876 by default)");
        for (int i = 0; i < mq->nconsumer_retry_delays; i++)
            if (mq->consumer_retry_delays_ms[i] <= 0)
                bad(v, "rocketmq.consumer_retry_delays_ms", "every delay must be > 0");
    }
    if ((mq->room_outbox.activity_consumer_enabled || mq->room_outbox.notice_consumer_enabled) &&
        !mq->enabled)
        bad(v,
            mq->room_outbox.activity_consumer_enabled
                ? "rocketmq.room_outbox.activity_consumer_enabled"
                : "rocketmq.room_outbox.notice_consumer_enabled",
            "needs rocketmq.enabled: true");
    if (mq->room_outbox.enabled && !mq->enabled)
        bad(v, "rocketmq.room_outbox.enabled", "needs rocketmq.enabled: true");
    if (mq->room_outbox.tencent_im_consumer_enabled && !mq->enabled)
        bad(v, "rocketmq.room_outbox.tencent_im_consumer_enabled", "needs rocketmq.enabled: true");
    if (mq->room_outbox.tencent_im_consumer_enabled && !im->enabled)
        bad(v, "rocketmq.room_outbox.tencent_im_consumer_enabled",
            "needs tencent_im.enabled: true");
    if (mq->room_outbox.tencent_im_consumer_enabled && im->enabled &&
        ob->publish_mode == PUBLISH_DUAL)
        bad(v, "rocketmq.room_outbox.tencent_im_consumer_enabled",
            "not with outbox_worker.publish_mode: dual (the direct IM sink already sends every "
            "IM call; use mq with the bridge, or dual without it)");
    if (mq->rocket_launch.enabled && !mq->enabled)
        bad(v, "rocketmq.rocket_launch.enabled", "needs rocketmq.enabled: true");
    if (mq->enabled)
        validate_mq_names(mq, v);

    /* outbox_worker (seed 配置规则) */
    if (ob->publish_mode == PUBLISH_MQ || ob->publish_mode == PUBLISH_DUAL) {
        const char *m = ob->publish_mode == PUBLISH_MQ ? "mq" : "dual";
        if (!mq->enabled)
            bad(v, "outbox_worker.publish_mode", "%s needs rocketmq.enabled: true", m);
        else if (!mq->room_outbox.enabled)
            bad(v, "outbox_worker.publish_mode", "%s needs rocketmq.room_outbox.enabled: true", m);
    }
    if (ob->max_backoff_ms < ob->initial_backoff_ms)
        bad(v, "outbox_worker.max_backoff", "must be >= outbox_worker.initial_backoff");
    if (ob->lock_timeout_ms <= ob->publish_timeout_ms)
        bad(v, "outbox_worker.lock_timeout", "must be > outbox_worker.publish_timeout");
    else if (ob->complete_gather_ms >= ob->lock_timeout_ms - ob->publish_timeout_ms)
        bad(v, "outbox_worker.complete_gather",
            "must be < outbox_worker.lock_timeout - outbox_worker.publish_timeout");

    /* tencent_im */
    if (im->enabled && conf_empty(im->secret_key_env) && conf_empty(im->secret_key_file))
        bad(v, "tencent_im.secret_key_env",
            "tencent_im.enabled needs secret_key_env or secret_key_file");
    if (im->callback_enabled && conf_empty(im->callback_token_env) &&
        conf_empty(im->callback_token_file))
        bad(v, "tencent_im.callback.token_env",
            "tencent_im.callback.enabled needs callback.token_env or callback.token_file");
    if (im->callback_max_skew_ms < 1000) /* RequestTime is in seconds */
        bad(v, "tencent_im.callback.max_skew", "must be at least 1s (RequestTime is in seconds)");

    for (int i = 0; i < c->http.ntrusted_proxies; i++) {
        struct conf_cidr cidr;
        if (!conf_cidr_parse(c->http.trusted_proxies[i], &cidr))
            bad(v, "http.trusted_proxies",
                "want an address or CIDR (10.0.0.0/8, fd00::/8), got \"%s\"",
                c->http.trusted_proxies[i]);
    }

    validate_auth_admin(c, v);
}

/* True when topics a and b would share messages: equal, or one a subject
 * prefix of the other ("t" and "t.x": the JetStream driver's subjects are
 * "<topic>.<...>"). */
static bool
topics_collide(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);

    if (la > lb)
        return topics_collide(b, a);
    return strncmp(a, b, la) == 0 && (b[la] == '\0' || b[la] == '.');
}

int
conf_validate_at(const struct conf *c, const char *file, const struct conf_mark *marks, char *err,
                 size_t errlen)
{
    struct vctx v = {.file = file, .marks = marks, .err = err, .errlen = errlen};

    for (size_t i = 0; i < conf_nkeys && !v.failed; i++)
        check_row(c, &conf_keys[i], &v);
    if (!v.failed)
        validate_cross(c, &v);
    return v.failed ? ROOMD_EINVAL : 0;
}

int
conf_validate(const struct conf *c, char *err, size_t errlen)
{
    return conf_validate_at(c, NULL, NULL, err, errlen);
}
