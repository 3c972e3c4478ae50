/* SPDX-License-Identifier: Apache-2.0 */
/*
 * auth.c: the verifier of auth.h. auth_open loads the keys once;
 * auth_verify_bearer checks the header's shape, lets libjwt verify the
 * signature with the configured key, then checks alg, exp/nbf (+ leeway),
 * iss, aud and reads sub/app/scope into a principal. Nothing here logs.
 *
 * The verified-token cache: a fixed table of auth.jwt.cache_entries slots
 * (direct-mapped by the SHA-256 of the whole token text; a newer token takes
 * its slot over), each guarded by one of CACHE_LOCKS mutexes. A slot holds the
 * principal of a token that verified, the key generation it verified under
 * and until_ms = min(exp, verified + auth.jwt.cache_ttl). A refusal is never
 * stored. A hit needs the same digest, the current key generation and
 * now < until_ms; anything else is verified in full (leeway included).
 * auth_reload_keys swaps the key, and the table when cache_entries changed,
 * and sets cache_ttl, under key_lock (a verification holds it shared from its
 * cache lookup to its cache store), bumps the generation and empties the
 * table.
 */
#include "auth/auth.h"

#include "auth/jwks.h"
#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/file.h"
#include "core/log.h"
#include "core/secret.h"
#include "core/thread.h"
#include "core/xmalloc.h"
#include "metrics/metrics.h"

#include <errno.h>
#include <jansson.h>
#include <jwt.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#define PEM_MAX 16384  /* public key file */
#define TOKEN_MAX 8192 /* a longer Authorization value is malformed */
#define SERVICE_SCOPE "room:service"
#define CACHE_LOCKS 64 /* mutexes striped over the cache slots */

enum { LISTENER_PUBLIC, LISTENER_ADMIN, LISTENER_COUNT_ };

/* One verified token (see the file comment). gen 0 = empty. */
struct cache_slot {
    unsigned char digest[SHA256_DIGEST_LENGTH];
    uint64_t gen;
    int64_t until_ms;
    struct auth_principal p;
};

struct token_cache {
    struct cache_slot *slots; /* NULL = no cache; slots, mask, ttl_ms: under key_lock */
    size_t mask;              /* slot count - 1 (a power of two) */
    int64_t ttl_ms;
    int entries; /* auth.jwt.cache_entries the table was sized for */
    pthread_mutex_t locks[CACHE_LOCKS];
    atomic_uint_least64_t hits, misses;
};

struct auth {
    bool none; /* auth.mode none */
    /* key_lock guards keys, by_kid: verifiers shared, a reload exclusive */
    pthread_rwlock_t key_lock;     /* and the cache's table (struct token_cache) */
    atomic_uint_least64_t key_gen; /* 1, +1 per reload */
    struct jwks keys;              /* the single key (kid "") or auth.jwt.jwks_file's set */
    bool by_kid;                   /* a JWKS: the token's kid header picks the key */
    /* the JWKS file watcher: watch.mu guards jwks_path, poll_ms and the
     * file's identity last read (seen_*) */
    struct bg_thread watch;
    char jwks_path[1024]; /* "" = not a JWKS */
    int64_t poll_ms;
    struct stat seen;
    bool seen_ok;
    int64_t leeway_s;
    char *issuer;   /* "" = not checked */
    char *audience; /* "" = not checked */
    bool has_admin_token;
    unsigned char admin_digest[SHA256_DIGEST_LENGTH]; /* SHA-256 of the admin token */
    /* admin.tokens: named credentials (digests only) */
    struct {
        char name[64];
        bool read_only;
        unsigned char digest[SHA256_DIGEST_LENGTH];
    } named[CONF_MAX_LIST];
    int nnamed;
    struct token_cache cache;
    atomic_uint_least64_t refused[LISTENER_COUNT_][AUTH_REASON_COUNT_];
};

static const char *const reason_names[AUTH_REASON_COUNT_] = {
    "ok",         "missing",      "malformed",  "bad_signature", "expired",         "not_yet_valid",
    "bad_issuer", "bad_audience", "bad_claims", "unknown_key",   "bad_admin_token", "other_app",
    "other_uid",  "read_only",
};
static const char *const listener_names[LISTENER_COUNT_] = {"public", "admin"};

const char *
auth_reason_name(enum auth_reason r)
{
    return (unsigned)r < AUTH_REASON_COUNT_ ? reason_names[r] : "unknown";
}

int
auth_reason_status(enum auth_reason r)
{
    if (r == AUTH_OK)
        return 200;
    return r >= AUTH_OTHER_APP ? 403 : 401;
}

bool
auth_mode_none(const struct auth *a)
{
    return a->none;
}

/* ---- open / close ------------------------------------------------------------------ */

static bool
str_set(const char *s)
{
    return s != NULL && s[0] != '\0';
}

/* forward: the JWKS watcher (below auth_reload_keys) */
static void watch_set(struct auth *a, const struct conf_auth *c, const struct stat *st);
static void *watch_main(void *arg);

/* Reads the PEM public key file and picks the alg from its type: RSA ->
 * RS256, EC P-256 -> ES256. */
static int
load_public_key(struct auth *a, const char *file, char *err, size_t errlen)
{
    static const char *const key = "auth.jwt.public_key_file";
    EVP_PKEY *pk;
    size_t n;
    char *pem = file_read_text(key, file, PEM_MAX, &n, err, errlen);
    int type, rc = 0;

    if (pem == NULL)
        return ROOMD_EINVAL;
    BIO *bio = BIO_new_mem_buf(pem, (int)n);
    pk = bio ? PEM_read_bio_PUBKEY(bio, NULL, NULL, NULL) : NULL;
    BIO_free(bio);
    type = pk ? EVP_PKEY_base_id(pk) : 0;
    a->keys.keys = xcalloc(1, sizeof(*a->keys.keys));
    if (type == EVP_PKEY_RSA) {
        a->keys.keys[0].alg = JWT_ALG_RS256;
    } else if (type == EVP_PKEY_EC && EVP_PKEY_bits(pk) == 256) {
        a->keys.keys[0].alg = JWT_ALG_ES256;
    } else {
        snprintf(err, errlen, "%s: %s is not a PEM RSA or EC P-256 public key", key, file);
        rc = ROOMD_EINVAL;
    }
    EVP_PKEY_free(pk);
    if (rc != 0) {
        free(pem);
        jwks_free(&a->keys);
        return rc;
    }
    a->keys.keys[0].key = (unsigned char *)pem;
    a->keys.keys[0].key_len = (int)n;
    a->keys.n = 1;
    return 0;
}

static int
load_jwt_key(struct auth *a, const struct conf_auth *c, char *err, size_t errlen)
{
    char buf[SECRET_MAX];
    int rc;

    a->by_kid = false;
    if (c->jwks_file != NULL && c->jwks_file[0] != '\0') {
        a->by_kid = true;
        return jwks_load(c->jwks_file, &a->keys, err, errlen);
    }
    if (c->public_key_file != NULL && c->public_key_file[0] != '\0')
        return load_public_key(a, c->public_key_file, err, errlen);
    rc = secret_load("auth.jwt.hs256_secret_env", c->hs256_secret_env, "auth.jwt.hs256_secret_file",
                     c->hs256_secret_file, buf, sizeof(buf), err, errlen);
    if (rc != 0)
        return rc;
    if (strlen(buf) < SECRET_MIN_BYTES) {
        secret_wipe(buf, sizeof(buf));
        snprintf(err, errlen, "%s: the HS256 secret must be at least 32 bytes",
                 c->hs256_secret_env && c->hs256_secret_env[0] ? "auth.jwt.hs256_secret_env"
                                                               : "auth.jwt.hs256_secret_file");
        return ROOMD_EINVAL;
    }
    a->keys.keys = xcalloc(1, sizeof(*a->keys.keys));
    a->keys.keys[0].alg = JWT_ALG_HS256;
    a->keys.keys[0].key_len = (int)strlen(buf);
    a->keys.keys[0].key = (unsigned char *)xstrdup(buf);
    a->keys.n = 1;
    secret_wipe(buf, sizeof(buf));
    return 0;
}

static int
load_admin_token(struct auth *a, const struct conf_admin *c, char *err, size_t errlen)
{
    char buf[SECRET_MAX];
    int rc;

    for (int i = 0; i < c->ntokens && i < CONF_MAX_LIST; i++) {
        struct conf_admin_token t;
        char key[96];
        if (conf_admin_token_parse(c->tokens[i], &t, err, errlen) != 0)
            return ROOMD_EINVAL;
        snprintf(key, sizeof(key), "admin.tokens[%s].token_env", t.name);
        rc = secret_load(key, t.token_env, "admin.tokens token_file", t.token_file, buf,
                         sizeof(buf), err, errlen);
        if (rc != 0)
            return rc;
        snprintf(a->named[a->nnamed].name, sizeof(a->named[0].name), "%s", t.name);
        a->named[a->nnamed].read_only = t.read_only;
        SHA256((const unsigned char *)buf, strlen(buf), a->named[a->nnamed].digest);
        a->nnamed++;
        secret_wipe(buf, sizeof(buf));
    }
    if ((c->token_env == NULL || c->token_env[0] == '\0') &&
        (c->token_file == NULL || c->token_file[0] == '\0'))
        return 0; /* conf/validate.c allowed it: a loopback admin.listen, or named tokens only */
    rc = secret_load("admin.token_env", c->token_env, "admin.token_file", c->token_file, buf,
                     sizeof(buf), err, errlen);
    if (rc != 0)
        return rc;
    if (strlen(buf) < SECRET_MIN_BYTES) {
        secret_wipe(buf, sizeof(buf));
        snprintf(err, errlen, "%s: the admin token must be at least %d bytes",
                 c->token_env && c->token_env[0] ? "admin.token_env" : "admin.token_file",
                 SECRET_MIN_BYTES);
        return ROOMD_EINVAL;
    }
    SHA256((const unsigned char *)buf, strlen(buf), a->admin_digest);
    a->has_admin_token = true;
    secret_wipe(buf, sizeof(buf));
    return 0;
}

/* The /metrics collector: arg is the struct auth. */
static void
collect(void *arg, struct metrics_text *t)
{
    static const char *const name = "roomd_auth_refused_total";
    struct auth *a = arg;
    char labels[128];

    metrics_family(t, name, "counter", "Requests refused 401/403 by reason.");
    for (int l = 0; l < LISTENER_COUNT_; l++)
        for (int r = 1; r < AUTH_REASON_COUNT_; r++) {
            /* the admin listener checks its tokens only; the public one never does */
            bool admin_only = r == AUTH_BAD_ADMIN_TOKEN || r == AUTH_READ_ONLY;
            if ((l == LISTENER_ADMIN) != (r == AUTH_MISSING || admin_only) && r != AUTH_MISSING)
                continue;
            snprintf(labels, sizeof(labels), "listener=\"%s\",status=\"%d\",reason=\"%s\"",
                     listener_names[l], auth_reason_status((enum auth_reason)r), reason_names[r]);
            metrics_count(t, name, labels, (uint64_t)atomic_load(&a->refused[l][r]));
        }
    pthread_rwlock_rdlock(&a->key_lock);
    bool cached = a->cache.slots != NULL;
    pthread_rwlock_unlock(&a->key_lock);
    if (!cached)
        return;
    metrics_family(t, "roomd_auth_token_cache_total", "counter",
                   "Bearer tokens looked up in the verified-token cache, by result.");
    metrics_count(t, "roomd_auth_token_cache_total", "result=\"hit\"",
                  (uint64_t)atomic_load(&a->cache.hits));
    metrics_count(t, "roomd_auth_token_cache_total", "result=\"miss\"",
                  (uint64_t)atomic_load(&a->cache.misses));
}

/* ---- the verified-token cache ------------------------------------------------------- */

/* Sizes the table to the power of two >= entries (0 = no cache): c's
 * slots, mask, ttl_ms and entries; the locks are left alone. */
static void
cache_init(struct token_cache *c, int entries, int64_t ttl_ms)
{
    size_t n = 1;

    c->slots = NULL;
    c->mask = 0;
    c->ttl_ms = ttl_ms;
    c->entries = entries > 0 ? entries : 0;
    if (entries <= 0)
        return;
    while (n < (size_t)entries)
        n <<= 1;
    c->slots = xcalloc(n, sizeof(*c->slots));
    c->mask = n - 1;
}

/* Wipes and frees the table slots[0..mask] (NULL: none). */
static void
slots_free(struct cache_slot *slots, size_t mask)
{
    if (slots == NULL)
        return;
    secret_wipe(slots, (mask + 1) * sizeof(*slots));
    free(slots);
}

static size_t
cache_index(const struct token_cache *c, const unsigned char *digest)
{
    uint64_t h;

    memcpy(&h, digest, sizeof(h));
    return (size_t)h & c->mask;
}

/* True (and *p) when digest's slot holds a live entry of key generation gen. */
static bool
cache_get(struct token_cache *c, const unsigned char *digest, uint64_t gen,
          struct auth_principal *p)
{
    size_t i = cache_index(c, digest);
    struct cache_slot *s = &c->slots[i];
    bool hit;

    pthread_mutex_lock(&c->locks[i % CACHE_LOCKS]);
    hit = s->gen == gen && clock_wall_ms() < s->until_ms &&
          CRYPTO_memcmp(s->digest, digest, sizeof(s->digest)) == 0;
    if (hit)
        *p = s->p;
    pthread_mutex_unlock(&c->locks[i % CACHE_LOCKS]);
    atomic_fetch_add(hit ? &c->hits : &c->misses, 1);
    return hit;
}

/* Stores the principal of a token that verified under key generation gen and
 * expires at exp_s; a token already past exp is not stored. */
static void
cache_put(struct token_cache *c, const unsigned char *digest, uint64_t gen, int64_t exp_s,
          const struct auth_principal *p)
{
    int64_t now = clock_wall_ms();
    int64_t until = now + c->ttl_ms;
    size_t i = cache_index(c, digest);
    struct cache_slot *s = &c->slots[i];

    if (exp_s <= INT64_MAX / 1000 && exp_s * 1000 < until)
        until = exp_s * 1000;
    if (until <= now)
        return;
    pthread_mutex_lock(&c->locks[i % CACHE_LOCKS]);
    memcpy(s->digest, digest, sizeof(s->digest));
    s->gen = gen;
    s->until_ms = until;
    s->p = *p;
    pthread_mutex_unlock(&c->locks[i % CACHE_LOCKS]);
}

/* Empties every slot (after a key rotation). */
static void
cache_clear(struct token_cache *c)
{
    if (c->slots == NULL)
        return;
    for (size_t i = 0; i <= c->mask; i++) {
        pthread_mutex_lock(&c->locks[i % CACHE_LOCKS]);
        secret_wipe(&c->slots[i], sizeof(c->slots[i]));
        pthread_mutex_unlock(&c->locks[i % CACHE_LOCKS]);
    }
}

void
auth_cache_counts(const struct auth *a, uint64_t *hits, uint64_t *misses)
{
    *hits = (uint64_t)atomic_load(&a->cache.hits);
    *misses = (uint64_t)atomic_load(&a->cache.misses);
}

int
auth_open(struct auth **out, const struct conf *conf, char *err, size_t errlen)
{
    struct auth *a = xcalloc(1, sizeof(*a));
    int rc = 0;

    *out = NULL;
    a->none = strcmp(conf->auth.mode, "jwt") != 0;
    a->leeway_s = conf->auth.leeway_ms / 1000;
    a->issuer = xstrdup(conf->auth.issuer ? conf->auth.issuer : "");
    a->audience = xstrdup(conf->auth.audience ? conf->auth.audience : "");
    /* writers first: a reload must not wait behind a stream of verifications
     * that always overlap (glibc prefers readers by default) */
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&a->key_lock, &attr);
    pthread_rwlockattr_destroy(&attr);
    atomic_init(&a->key_gen, 1);
    for (int i = 0; i < CACHE_LOCKS; i++)
        pthread_mutex_init(&a->cache.locks[i], NULL);
    if (!a->none) {
        struct stat st;
        bool have_st = str_set(conf->auth.jwks_file) && stat(conf->auth.jwks_file, &st) == 0;
        rc = load_jwt_key(a, &conf->auth, err, errlen);
        cache_init(&a->cache, conf->auth.cache_entries, conf->auth.cache_ttl_ms);
        /* the JWKS watcher (it idles while no jwks_file is set: a SIGHUP may set one) */
        bg_thread_init(&a->watch);
        watch_set(a, &conf->auth, have_st ? &st : NULL);
        if (rc == 0 && bg_thread_spawn(&a->watch, watch_main, a) != 0) {
            snprintf(err, errlen, "auth: cannot start the JWKS watcher thread");
            rc = ROOMD_EINTERNAL;
        }
    }
    if (rc == 0)
        rc = load_admin_token(a, &conf->admin, err, errlen);
    if (rc != 0) {
        auth_close(a);
        return rc;
    }
    metrics_add_collector(collect, a);
    *out = a;
    return 0;
}

void
auth_close(struct auth *a)
{
    if (a == NULL)
        return;
    metrics_remove_collector(collect, a);
    bg_thread_stop(&a->watch);
    jwks_free(&a->keys);
    slots_free(a->cache.slots, a->cache.mask);
    for (int i = 0; i < CACHE_LOCKS; i++)
        pthread_mutex_destroy(&a->cache.locks[i]);
    pthread_rwlock_destroy(&a->key_lock);
    free(a->issuer);
    free(a->audience);
    secret_wipe(a, sizeof(*a));
    free(a);
}

/* ---- verification ------------------------------------------------------------------ */

/* The token after "Bearer " when authorization has that shape and only
 * base64url characters and two dots; else NULL. */
static const char *
bearer_token(const char *authorization)
{
    const char *t;
    size_t n, dots = 0;

    if (strncasecmp(authorization, "Bearer ", 7) != 0)
        return NULL;
    t = authorization + 7;
    while (*t == ' ')
        t++;
    n = strlen(t);
    if (n == 0 || n > TOKEN_MAX)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        char c = t[i];
        if (c == '.')
            dots++;
        else if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                   c == '-' || c == '_'))
            return NULL;
    }
    return dots == 2 ? t : NULL;
}

/* A numeric claim (exp, nbf): 0 and *v, 1 when absent, -1 when not an integer. */
static int
int_claim(jwt_t *j, const char *name, long *v)
{
    char *js = jwt_get_grants_json(j, name);
    json_t *o;
    int rc;

    if (js == NULL)
        return 1;
    o = json_loads(js, JSON_DECODE_ANY, NULL);
    free(js);
    rc = json_is_integer(o) ? 0 : -1;
    if (rc == 0)
        *v = (long)json_integer_value(o);
    json_decref(o);
    return rc;
}

/* True when aud (a string or an array of strings) holds want. */
static bool
audience_ok(jwt_t *j, const char *want)
{
    char *js = jwt_get_grants_json(j, "aud");
    json_t *o, *v;
    size_t i;
    bool ok = false;

    if (js == NULL)
        return false;
    o = json_loads(js, JSON_DECODE_ANY, NULL);
    free(js);
    if (json_is_string(o))
        ok = strcmp(json_string_value(o), want) == 0;
    json_array_foreach(o, i, v) ok =
        ok || (json_is_string(v) && strcmp(json_string_value(v), want) == 0);
    json_decref(o);
    return ok;
}

/* True when the space-separated scope holds SERVICE_SCOPE. */
static bool
scope_has_service(const char *scope)
{
    size_t n = strlen(SERVICE_SCOPE);

    for (const char *p = scope; p != NULL && *p != '\0';) {
        while (*p == ' ')
            p++;
        const char *e = strchr(p, ' ');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, SERVICE_SCOPE, n) == 0)
            return true;
        p = e;
    }
    return false;
}

/* True when s is 1..63 characters of [A-Za-z0-9_.:-] (a service's name). */
static bool
service_name_ok(const char *s)
{
    size_t n = strlen(s);

    return n >= 1 && n < 64 &&
           strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:-") == n;
}

/* sub = a positive decimal uid (a service token: or its service's name,
 * [A-Za-z0-9_.:-]{1,63}, uid 0), app = an app code. */
static enum auth_reason
read_identity(jwt_t *j, struct auth_principal *p)
{
    const char *sub = jwt_get_grant(j, "sub");
    const char *app = jwt_get_grant(j, "app");
    char *end = NULL;
    long long uid = 0;

    if (sub == NULL || app == NULL || app[0] == '\0' || strlen(app) >= sizeof(p->app))
        return AUTH_BAD_CLAIMS;
    p->service = scope_has_service(jwt_get_grant(j, "scope"));
    errno = 0;
    if (sub[0] >= '1' && sub[0] <= '9')
        uid = strtoll(sub, &end, 10);
    if (uid <= 0 || errno != 0 || *end != '\0') {
        if (!p->service || !service_name_ok(sub))
            return AUTH_BAD_CLAIMS; /* a user token's sub is its uid */
        uid = 0;
    }
    for (const char *c = app; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_' || *c == '-'))
            return AUTH_BAD_CLAIMS;
    p->uid = uid;
    strlcpy_(p->sub, sub, sizeof(p->sub));
    strlcpy_(p->app, app, sizeof(p->app));
    return AUTH_OK;
}

/* The claims of a token whose signature verified; *exp_s = its exp. */
static enum auth_reason
check_claims(const struct auth *a, jwt_alg_t alg, jwt_t *j, struct auth_principal *p,
             int64_t *exp_s)
{
    int64_t now = clock_wall_ms() / 1000;
    long exp = 0, nbf = 0;
    int rc;

    if (jwt_get_alg(j) != alg)
        return AUTH_BAD_SIGNATURE;
    if (int_claim(j, "exp", &exp) != 0)
        return AUTH_BAD_CLAIMS;
    *exp_s = (int64_t)exp;
    if (now > (int64_t)exp + a->leeway_s)
        return AUTH_EXPIRED;
    rc = int_claim(j, "nbf", &nbf);
    if (rc < 0)
        return AUTH_BAD_CLAIMS;
    if (rc == 0 && now + a->leeway_s < (int64_t)nbf)
        return AUTH_NOT_YET_VALID;
    if (a->issuer[0] != '\0') {
        const char *iss = jwt_get_grant(j, "iss");
        if (iss == NULL || strcmp(iss, a->issuer) != 0)
            return AUTH_BAD_ISSUER;
    }
    if (a->audience[0] != '\0' && !audience_ok(j, a->audience))
        return AUTH_BAD_AUDIENCE;
    return read_identity(j, p);
}

/* The JWKS key that verifies token (the caller holds key_lock shared): the
 * one its kid header names, with the alg of that key.
 * NULL and *r when the token does not parse (AUTH_MALFORMED), names no kid
 * of the set (AUTH_UNKNOWN_KEY) or another alg (AUTH_BAD_SIGNATURE). Decoding
 * without a key only parses (libjwt 1.x), so the header is read before any
 * signature is checked, and an RSA/EC key is never used as an HMAC secret. */
static const struct jwk *
pick_key(const struct auth *a, const char *token, enum auth_reason *r)
{
    jwt_t *u = NULL;
    const struct jwk *k = NULL;

    if (jwt_decode(&u, token, NULL, 0) != 0) {
        *r = AUTH_MALFORMED;
        return NULL;
    }
    const char *kid = jwt_get_header(u, "kid");
    const char *alg = jwt_get_header(u, "alg");
    if (kid != NULL)
        k = jwks_find(&a->keys, kid);
    *r = AUTH_UNKNOWN_KEY;
    if (k != NULL && (alg == NULL || jwt_str_alg(alg) != k->alg)) {
        *r = AUTH_BAD_SIGNATURE;
        k = NULL;
    }
    jwt_free(u);
    return k;
}

/* Verifies token with the current keys (the caller holds key_lock shared):
 * AUTH_OK, *p, *exp_s and *gen (the key generation it verified under), or
 * the reason. */
static enum auth_reason
verify_token(struct auth *a, const char *token, struct auth_principal *p, int64_t *exp_s,
             uint64_t *gen)
{
    jwt_t *j = NULL;
    enum auth_reason r;
    const struct jwk *k;

    *gen = atomic_load(&a->key_gen);
    if (!a->by_kid) { /* one key: one decode (check_claims refuses another alg) */
        k = &a->keys.keys[0];
        if (jwt_decode(&j, token, k->key, k->key_len) != 0) {
            /* signed with another key, or not a JWT at all? Decoding without a
             * key only parses: success means the signature was at fault. */
            jwt_t *unverified = NULL;
            r = jwt_decode(&unverified, token, NULL, 0) == 0 ? AUTH_BAD_SIGNATURE : AUTH_MALFORMED;
            jwt_free(unverified);
            return r;
        }
    } else if ((k = pick_key(a, token, &r)) == NULL) {
        return r;
    } else if (jwt_decode(&j, token, k->key, k->key_len) != 0) {
        return AUTH_BAD_SIGNATURE; /* it parsed (pick_key): the signature is at fault */
    }
    r = check_claims(a, k->alg, j, p, exp_s);
    jwt_free(j);
    return r;
}

enum auth_reason
auth_verify_bearer(struct auth *a, const char *authorization, struct auth_principal *p)
{
    unsigned char digest[SHA256_DIGEST_LENGTH];
    const char *token;
    enum auth_reason r;
    int64_t exp_s = 0;
    uint64_t gen;

    memset(p, 0, sizeof(*p));
    if (a->none) {
        p->anyone = true;
        return AUTH_OK;
    }
    if (authorization == NULL || authorization[0] == '\0')
        return AUTH_MISSING;
    if ((token = bearer_token(authorization)) == NULL)
        return AUTH_MALFORMED;
    pthread_rwlock_rdlock(&a->key_lock);
    bool cached = a->cache.slots != NULL;
    if (cached) {
        SHA256((const unsigned char *)token, strlen(token), digest);
        if (cache_get(&a->cache, digest, atomic_load(&a->key_gen), p)) {
            pthread_rwlock_unlock(&a->key_lock);
            return AUTH_OK;
        }
    }
    r = verify_token(a, token, p, &exp_s, &gen);
    if (r == AUTH_OK && cached)
        cache_put(&a->cache, digest, gen, exp_s, p);
    pthread_rwlock_unlock(&a->key_lock);
    if (r != AUTH_OK)
        memset(p, 0, sizeof(*p));
    return r;
}

/* Swaps fresh's keys in (a takes them over; fresh is left empty), bumps the
 * key generation and empties the token cache. With table (a new cache
 * table: SIGHUP with another cache_entries) swaps it in too, and with
 * ttl_ms >= 0 sets the entries' TTL. Thread: any; blocks until the
 * verifications in progress finish. */
static void
swap_keys(struct auth *a, struct auth *fresh, struct token_cache *table, int64_t ttl_ms)
{
    struct cache_slot *old_slots = NULL;
    size_t old_mask = 0;
    struct jwks old;

    pthread_rwlock_wrlock(&a->key_lock);
    old = a->keys;
    a->keys = fresh->keys;
    a->by_kid = fresh->by_kid;
    fresh->keys.keys = NULL;
    fresh->keys.n = 0;
    if (table != NULL) {
        old_slots = a->cache.slots;
        old_mask = a->cache.mask;
        a->cache.slots = table->slots;
        a->cache.mask = table->mask;
        a->cache.entries = table->entries;
    }
    if (ttl_ms >= 0)
        a->cache.ttl_ms = ttl_ms;
    atomic_fetch_add(&a->key_gen, 1);
    pthread_rwlock_unlock(&a->key_lock);
    jwks_free(&old);
    slots_free(old_slots, old_mask); /* no verification holds it: they hold key_lock */
    cache_clear(&a->cache);
}

/* The file's identity: mtime (ns), size, inode. */
static bool
same_file(const struct stat *x, const struct stat *y)
{
    return x->st_mtim.tv_sec == y->st_mtim.tv_sec && x->st_mtim.tv_nsec == y->st_mtim.tv_nsec &&
           x->st_size == y->st_size && x->st_ino == y->st_ino && x->st_dev == y->st_dev;
}

/* The watcher's one look (watch.mu not held): a JWKS file whose identity
 * changed since it was last read is read again; a set that loads is swapped
 * in (logged with its key count), one that does not keeps the set in use
 * and is logged once per change of the file, naming the key. */
static void
watch_once(struct auth *a)
{
    char path[sizeof(a->jwks_path)], err[1024];
    struct auth fresh = {0};
    struct stat st;
    bool changed;

    pthread_mutex_lock(&a->watch.mu);
    strlcpy_(path, a->jwks_path, sizeof(path));
    pthread_mutex_unlock(&a->watch.mu);
    if (path[0] == '\0' || stat(path, &st) != 0)
        return; /* not a JWKS, or the file is being replaced: next tick */
    pthread_mutex_lock(&a->watch.mu);
    changed = strcmp(path, a->jwks_path) == 0 && (!a->seen_ok || !same_file(&st, &a->seen));
    if (changed) {
        a->seen = st;
        a->seen_ok = true;
    }
    pthread_mutex_unlock(&a->watch.mu);
    if (!changed)
        return;
    fresh.by_kid = true;
    if (jwks_load(path, &fresh.keys, err, sizeof(err)) != 0) {
        log_error("auth", "JWKS not reloaded; the key set in use stays", "err=\"%s\"", err);
        return;
    }
    int n = fresh.keys.n;
    swap_keys(a, &fresh, NULL, -1);
    log_info("auth", "JWKS reloaded (file changed)", "file=%s keys=%d", path, n);
}

/* The JWKS file watcher thread (arg: the struct auth): watch_once every
 * poll_ms until auth_close. */
static void *
watch_main(void *arg)
{
    struct auth *a = arg;

    for (;;) {
        pthread_mutex_lock(&a->watch.mu);
        int64_t ms = a->poll_ms;
        pthread_mutex_unlock(&a->watch.mu);
        if (bg_thread_sleep(&a->watch, ms > 0 ? ms : 1000))
            return NULL;
        if (ms > 0)
            watch_once(a);
    }
}

/* Points the watcher at conf's jwks_file ("" = none) and poll interval;
 * st: the file's identity read just before the set in use was loaded
 * (NULL: unknown, read on the next tick). */
static void
watch_set(struct auth *a, const struct conf_auth *c, const struct stat *st)
{
    pthread_mutex_lock(&a->watch.mu);
    strlcpy_(a->jwks_path, c->jwks_file ? c->jwks_file : "", sizeof(a->jwks_path));
    a->poll_ms = c->jwks_poll_ms;
    a->seen_ok = st != NULL;
    if (st != NULL)
        a->seen = *st;
    pthread_mutex_unlock(&a->watch.mu);
}

int
auth_reload_keys(struct auth *a, const struct conf *conf, char *err, size_t errlen)
{
    struct auth fresh = {0};
    struct token_cache table = {0};
    struct stat st;
    bool have_st;
    int rc;

    if (a->none != (strcmp(conf->auth.mode, "jwt") != 0)) {
        snprintf(err, errlen, "auth.mode: a change of mode needs a restart");
        return ROOMD_EINVAL;
    }
    if (a->none)
        return 0;
    have_st = str_set(conf->auth.jwks_file) && stat(conf->auth.jwks_file, &st) == 0;
    if ((rc = load_jwt_key(&fresh, &conf->auth, err, errlen)) != 0)
        return rc;
    bool resize = conf->auth.cache_entries != a->cache.entries; /* only this thread writes it */
    if (resize)
        cache_init(&table, conf->auth.cache_entries, conf->auth.cache_ttl_ms);
    swap_keys(a, &fresh, resize ? &table : NULL, conf->auth.cache_ttl_ms);
    watch_set(a, &conf->auth, have_st ? &st : NULL);
    return 0;
}

int
auth_jwks_check(const char *file, int *nkeys, char *err, size_t errlen)
{
    struct jwks s;
    int rc = jwks_load(file, &s, err, errlen);

    if (rc == 0 && nkeys != NULL)
        *nkeys = s.n;
    jwks_free(&s);
    return rc;
}

int
auth_jwks_parse_check(const char *text, size_t len, int *nkeys, char *err, size_t errlen)
{
    struct jwks s;
    int rc = jwks_parse(text, len, "jwks", &s, err, errlen);

    if (rc == 0 && nkeys != NULL)
        *nkeys = s.n;
    jwks_free(&s);
    return rc;
}

enum auth_reason
auth_may_act_as(const struct auth_principal *p, const char *app, int64_t uid)
{
    if (p->anyone)
        return AUTH_OK;
    if (app == NULL || strcmp(p->app, app) != 0)
        return AUTH_OTHER_APP;
    if (uid != 0 && !p->service && p->uid != uid)
        return AUTH_OTHER_UID;
    return AUTH_OK;
}

enum auth_reason
auth_admin_check(const struct auth *a, const char *authorization, struct auth_principal *p)
{
    unsigned char got[SHA256_DIGEST_LENGTH];
    const char *t;
    int who = -2; /* -1: the single token; >= 0: a named one */

    memset(p, 0, sizeof(*p));
    p->anyone = true;
    snprintf(p->admin_name, sizeof(p->admin_name), "admin");
    if (!a->has_admin_token && a->nnamed == 0)
        return AUTH_OK;
    if (authorization == NULL || authorization[0] == '\0')
        return AUTH_MISSING;
    if (strncasecmp(authorization, "Bearer ", 7) != 0)
        return AUTH_BAD_ADMIN_TOKEN;
    t = authorization + 7;
    /* digests of equal length, every one compared: the time says nothing
     * about the token or which one matched */
    SHA256((const unsigned char *)t, strlen(t), got);
    if (a->has_admin_token && CRYPTO_memcmp(got, a->admin_digest, sizeof(got)) == 0)
        who = -1;
    for (int i = 0; i < a->nnamed; i++)
        if (CRYPTO_memcmp(got, a->named[i].digest, sizeof(got)) == 0 && who == -2)
            who = i;
    if (who == -2) {
        p->anyone = false;
        return AUTH_BAD_ADMIN_TOKEN;
    }
    if (who >= 0) {
        snprintf(p->admin_name, sizeof(p->admin_name), "%s", a->named[who].name);
        p->admin_read_only = a->named[who].read_only;
    }
    return AUTH_OK;
}

enum auth_reason
auth_admin_ok(const struct auth *a, const char *authorization)
{
    struct auth_principal p;

    return auth_admin_check(a, authorization, &p);
}

void
auth_count(struct auth *a, const char *listener, enum auth_reason r)
{
    int l = strcmp(listener, "admin") == 0 ? LISTENER_ADMIN : LISTENER_PUBLIC;

    if (a != NULL && r > AUTH_OK && r < AUTH_REASON_COUNT_)
        atomic_fetch_add(&a->refused[l][r], 1);
}
