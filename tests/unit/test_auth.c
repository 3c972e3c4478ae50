/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_auth.c: src/auth (the verifier every entry point shares) and
 * core/secret.c's redaction, without a server: HS256 tokens minted with
 * libjwt itself, every 401 reason, the acting-uid and app rules, the admin
 * token compare, and secret_redact on URLs and parameters. The verified-token
 * cache with ES256 keys made here: an expired token refused while cached, a
 * rotated-out key refused after auth_reload_keys, a token one byte off never
 * a hit, refusals never kept, the TTL, and threads sharing a small table.
 */
#include "helpers.h"

#include "auth/auth.h"
#include "conf/conf.h"
#include "core/clock.h"
#include "core/secret.h"

#include <jwt.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SECRET "0123456789abcdef0123456789abcdef-test"

/* A default conf with auth.mode jwt, the HS256 secret from variable env. */
static struct conf *
jwt_conf(const char *env)
{
    struct conf *c = calloc(1, sizeof(*c));

    conf_defaults(c);
    free(c->auth.mode);
    c->auth.mode = strdup("jwt");
    free(c->auth.hs256_secret_env);
    c->auth.hs256_secret_env = strdup(env);
    return c;
}

static struct auth *
open_jwt(const char *issuer)
{
    struct conf *c = jwt_conf("TEST_AUTH_SECRET");
    struct auth *a = NULL;
    char err[256];

    free(c->auth.issuer);
    c->auth.issuer = strdup(issuer);
    free(c->admin.token_env);
    c->admin.token_env = strdup("TEST_AUTH_ADMIN");
    setenv("TEST_AUTH_SECRET", SECRET, 1);
    setenv("TEST_AUTH_ADMIN", "the-admin-token-of-32-bytes-at-least", 1);
    assert_int_equal(auth_open(&a, c, err, sizeof(err)), 0);
    conf_free(c);
    return a;
}

/* "Bearer <HS256 JWT>" with sub, app, exp = now + ttl, optional scope/iss. */
static char *
bearer(const char *key, const char *sub, const char *app, long ttl, const char *scope,
       const char *iss)
{
    jwt_t *j = NULL;
    char *t, *out;

    jwt_new(&j);
    if (sub)
        jwt_add_grant(j, "sub", sub);
    if (app)
        jwt_add_grant(j, "app", app);
    jwt_add_grant_int(j, "exp", clock_wall_ms() / 1000 + ttl);
    if (scope)
        jwt_add_grant(j, "scope", scope);
    if (iss)
        jwt_add_grant(j, "iss", iss);
    jwt_set_alg(j, JWT_ALG_HS256, (const unsigned char *)key, (int)strlen(key));
    t = jwt_encode_str(j);
    jwt_free(j);
    out = malloc(strlen(t) + 8);
    strcpy(out, "Bearer ");
    strcat(out, t);
    free(t);
    return out;
}

static enum auth_reason
verify(struct auth *a, char *hdr, struct auth_principal *p)
{
    enum auth_reason r = auth_verify_bearer(a, hdr, p);
    free(hdr);
    return r;
}

static void
test_reasons(void **state)
{
    struct auth *a = open_jwt("");
    struct auth_principal p;

    assert_int_equal(verify(a, bearer(SECRET, "42", "hyapp", 60, NULL, NULL), &p), AUTH_OK);
    assert_int_equal(p.uid, 42);
    assert_string_equal(p.app, "hyapp");
    assert_false(p.service);
    assert_int_equal(auth_verify_bearer(a, NULL, &p), AUTH_MISSING);
    assert_int_equal(auth_verify_bearer(a, "Bearer x.y", &p), AUTH_MALFORMED);
    assert_int_equal(auth_verify_bearer(a, "Basic abc", &p), AUTH_MALFORMED);
    assert_int_equal(auth_verify_bearer(a, "Bearer a.b.c", &p), AUTH_MALFORMED);
    assert_int_equal(
        verify(a, bearer("another-key-another-key-another-key", "42", "hyapp", 60, NULL, NULL), &p),
        AUTH_BAD_SIGNATURE);
    assert_int_equal(verify(a, bearer(SECRET, "42", "hyapp", -3600, NULL, NULL), &p), AUTH_EXPIRED);
    /* within the leeway (30 s default) an expired token still passes */
    assert_int_equal(verify(a, bearer(SECRET, "42", "hyapp", -5, NULL, NULL), &p), AUTH_OK);
    assert_int_equal(verify(a, bearer(SECRET, "0x2a", "hyapp", 60, NULL, NULL), &p),
                     AUTH_BAD_CLAIMS);
    assert_int_equal(verify(a, bearer(SECRET, "42", NULL, 60, NULL, NULL), &p), AUTH_BAD_CLAIMS);
    assert_int_equal(verify(a, bearer(SECRET, "42", "Bad App", 60, NULL, NULL), &p),
                     AUTH_BAD_CLAIMS);
    assert_int_equal(verify(a, bearer(SECRET, "7", "hyapp", 60, "a room:service b", NULL), &p),
                     AUTH_OK);
    assert_true(p.service);
    assert_int_equal(verify(a, bearer(SECRET, "7", "hyapp", 60, "room:servicex", NULL), &p),
                     AUTH_OK);
    assert_false(p.service);
    auth_close(a);
    a = open_jwt("gw");
    assert_int_equal(verify(a, bearer(SECRET, "42", "hyapp", 60, NULL, "evil"), &p),
                     AUTH_BAD_ISSUER);
    assert_int_equal(verify(a, bearer(SECRET, "42", "hyapp", 60, NULL, "gw"), &p), AUTH_OK);
    auth_close(a);
}

static void
test_may_act_as(void **state)
{
    struct auth_principal user = {.app = "hyapp", .uid = 5};
    struct auth_principal svc = {.app = "hyapp", .uid = 1, .service = true};
    struct auth_principal any = {.anyone = true};

    assert_int_equal(auth_may_act_as(&user, "hyapp", 5), AUTH_OK);
    assert_int_equal(auth_may_act_as(&user, "hyapp", 6), AUTH_OTHER_UID);
    assert_int_equal(auth_may_act_as(&user, "hyapp", 0), AUTH_OK);
    assert_int_equal(auth_may_act_as(&user, "other", 5), AUTH_OTHER_APP);
    assert_int_equal(auth_may_act_as(&svc, "hyapp", 99), AUTH_OK);
    assert_int_equal(auth_may_act_as(&svc, "other", 99), AUTH_OTHER_APP);
    assert_int_equal(auth_may_act_as(&any, "other", 99), AUTH_OK);
    assert_int_equal(auth_reason_status(AUTH_EXPIRED), 401);
    assert_int_equal(auth_reason_status(AUTH_OTHER_UID), 403);
    assert_string_equal(auth_reason_name(AUTH_BAD_SIGNATURE), "bad_signature");
}

static void
test_admin_token(void **state)
{
    struct auth *a = open_jwt("");

    assert_int_equal(auth_admin_ok(a, "Bearer the-admin-token-of-32-bytes-at-least"), AUTH_OK);
    assert_int_equal(auth_admin_ok(a, "Bearer the-admin-tokeN"), AUTH_BAD_ADMIN_TOKEN);
    assert_int_equal(auth_admin_ok(a, "Bearer the-admin-token-of-32-bytes-at-least2"),
                     AUTH_BAD_ADMIN_TOKEN);
    assert_int_equal(auth_admin_ok(a, "the-admin-token-of-32-bytes-at-least"),
                     AUTH_BAD_ADMIN_TOKEN);
    assert_int_equal(auth_admin_ok(a, NULL), AUTH_MISSING);
    auth_close(a);
}

static void
test_open_errors_name_the_key(void **state)
{
    struct conf *c = jwt_conf("TEST_AUTH_SHORT");
    struct auth *a = NULL;
    char err[256];

    setenv("TEST_AUTH_SHORT", "short-secret", 1);
    assert_int_not_equal(auth_open(&a, c, err, sizeof(err)), 0);
    assert_non_null(strstr(err, "auth.jwt.hs256_secret_env"));
    assert_null(strstr(err, "short-secret"));
    unsetenv("TEST_AUTH_SHORT");
    assert_int_not_equal(auth_open(&a, c, err, sizeof(err)), 0);
    assert_non_null(strstr(err, "auth.jwt.hs256_secret_env"));
    conf_free(c);
}

/* ---- the verified-token cache (ES256) ---- */

/* A P-256 key pair: the private key as PEM (for libjwt to sign; free it) and
 * the public key written as PEM to path. */
static char *
es256_keypair(const char *path)
{
    EVP_PKEY *k = EVP_EC_gen("P-256");
    FILE *f = fopen(path, "w");
    BIO *b = BIO_new(BIO_s_mem());
    char *data, *pem;
    long n;

    assert_non_null(k);
    assert_non_null(f);
    assert_int_equal(PEM_write_PUBKEY(f, k), 1);
    fclose(f);
    assert_int_equal(PEM_write_bio_PrivateKey(b, k, NULL, NULL, 0, NULL, NULL), 1);
    n = BIO_get_mem_data(b, &data);
    pem = strndup(data, (size_t)n);
    BIO_free(b);
    EVP_PKEY_free(k);
    return pem;
}

/* "Bearer <ES256 JWT>" for sub of app hyapp, exp = now + ttl. */
static char *
es256_bearer(const char *priv_pem, const char *sub, long ttl)
{
    jwt_t *j = NULL;
    char *t, *out;

    jwt_new(&j);
    jwt_add_grant(j, "sub", sub);
    jwt_add_grant(j, "app", "hyapp");
    jwt_add_grant_int(j, "exp", clock_wall_ms() / 1000 + ttl);
    jwt_set_alg(j, JWT_ALG_ES256, (const unsigned char *)priv_pem, (int)strlen(priv_pem));
    t = jwt_encode_str(j);
    assert_non_null(t);
    jwt_free(j);
    out = malloc(strlen(t) + 8);
    strcpy(out, "Bearer ");
    strcat(out, t);
    free(t);
    return out;
}

/* buf = "<a new temp dir>/es256.pem". */
static void
pub_path(char *buf, size_t len)
{
    char *dir = th_tmpdir();

    snprintf(buf, len, "%s/es256.pem", dir);
    free(dir);
}

/* auth.mode jwt with the public key file pub, the cache of entries / ttl_ms. */
static struct conf *
es256_conf(const char *pub, int entries, int64_t ttl_ms, int64_t leeway_ms)
{
    struct conf *c = calloc(1, sizeof(*c));

    conf_defaults(c);
    free(c->auth.mode);
    c->auth.mode = strdup("jwt");
    free(c->auth.public_key_file);
    c->auth.public_key_file = strdup(pub);
    c->auth.cache_entries = entries;
    c->auth.cache_ttl_ms = ttl_ms;
    c->auth.leeway_ms = leeway_ms;
    return c;
}

static struct auth *
es256_open(struct conf *c)
{
    struct auth *a = NULL;
    char err[256];

    assert_int_equal(auth_open(&a, c, err, sizeof(err)), 0);
    return a;
}

/* A fresh key pair (public key in a temp file) and a verifier using it. */
struct es_fix {
    char pub[512];
    char *priv; /* PEM private key */
    struct conf *c;
    struct auth *a;
};

static void
es_setup(struct es_fix *f, int entries, int64_t ttl_ms, int64_t leeway_ms)
{
    pub_path(f->pub, sizeof(f->pub));
    f->priv = es256_keypair(f->pub);
    f->c = es256_conf(f->pub, entries, ttl_ms, leeway_ms);
    f->a = es256_open(f->c);
}

static void
es_teardown(struct es_fix *f)
{
    auth_close(f->a);
    conf_free(f->c);
    free(f->priv);
}

static uint64_t
hits(struct auth *a)
{
    uint64_t h, m;

    auth_cache_counts(a, &h, &m);
    return h;
}

static void
test_cache_expired_refused_while_cached(void **state)
{
    struct es_fix f;
    struct auth_principal p;
    char *tok;

    es_setup(&f, 64, 3600 * 1000, 0);
    tok = es256_bearer(f.priv, "42", 2);
    assert_int_equal(auth_verify_bearer(f.a, tok, &p), AUTH_OK);
    assert_int_equal(auth_verify_bearer(f.a, tok, &p), AUTH_OK);
    assert_int_equal(hits(f.a), 1); /* the second was the cache's */
    assert_int_equal(p.uid, 42);
    assert_string_equal(p.app, "hyapp");
    clock_set_offset_ms(3000); /* past exp; the entry's TTL (1 h) is not */
    assert_int_equal(auth_verify_bearer(f.a, tok, &p), AUTH_EXPIRED);
    assert_int_equal(hits(f.a), 1);
    assert_int_equal(p.uid, 0);
    clock_set_offset_ms(0);
    free(tok);
    /* a token already expired (within the leeway) passes but is not kept */
    auth_close(f.a);
    f.c->auth.leeway_ms = 30000;
    f.a = es256_open(f.c);
    tok = es256_bearer(f.priv, "43", -5);
    assert_int_equal(auth_verify_bearer(f.a, tok, &p), AUTH_OK);
    assert_int_equal(auth_verify_bearer(f.a, tok, &p), AUTH_OK);
    assert_int_equal(hits(f.a), 0);
    free(tok);
    es_teardown(&f);
}

static void
test_cache_dropped_on_key_rotation(void **state)
{
    struct es_fix f;
    struct auth_principal p;
    char err[256];
    char *new_priv, *old_tok, *new_tok;

    es_setup(&f, 64, 60000, 30000);
    old_tok = es256_bearer(f.priv, "7", 3600);
    assert_int_equal(auth_verify_bearer(f.a, old_tok, &p), AUTH_OK);
    assert_int_equal(auth_verify_bearer(f.a, old_tok, &p), AUTH_OK);
    assert_int_equal(hits(f.a), 1);
    new_priv = es256_keypair(f.pub); /* the rotation: a new key in the same file */
    new_tok = es256_bearer(new_priv, "8", 3600);
    assert_int_equal(auth_verify_bearer(f.a, new_tok, &p), AUTH_BAD_SIGNATURE); /* not yet */
    assert_int_equal(auth_reload_keys(f.a, f.c, err, sizeof(err)), 0);
    assert_int_equal(auth_verify_bearer(f.a, old_tok, &p), AUTH_BAD_SIGNATURE);
    assert_int_equal(auth_verify_bearer(f.a, old_tok, &p), AUTH_BAD_SIGNATURE);
    assert_int_equal(auth_verify_bearer(f.a, new_tok, &p), AUTH_OK);
    assert_int_equal(p.uid, 8);
    assert_int_equal(hits(f.a), 1);
    /* a rotation that fails keeps the key in use, and says which key */
    free(f.c->auth.public_key_file);
    f.c->auth.public_key_file = strdup("/nonexistent/es256.pem");
    assert_int_not_equal(auth_reload_keys(f.a, f.c, err, sizeof(err)), 0);
    assert_non_null(strstr(err, "auth.jwt.public_key_file"));
    assert_int_equal(auth_verify_bearer(f.a, new_tok, &p), AUTH_OK);
    free(old_tok);
    free(new_tok);
    free(new_priv);
    es_teardown(&f);
}

static void
test_cache_one_byte_off_is_no_hit(void **state)
{
    struct es_fix f;
    struct auth_principal p;
    char *tok;

    es_setup(&f, 64, 60000, 30000);
    tok = es256_bearer(f.priv, "42", 3600);
    assert_int_equal(auth_verify_bearer(f.a, tok, &p), AUTH_OK);
    /* one byte of the signature (middle), of the payload, of the header */
    size_t at[] = {strlen(tok) - 40, (size_t)(strchr(tok, '.') - tok) + 5, 12};
    for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
        char *bad = strdup(tok);
        bad[at[i]] = bad[at[i]] == 'A' ? 'B' : 'A';
        enum auth_reason r = auth_verify_bearer(f.a, bad, &p);
        assert_int_not_equal(r, AUTH_OK);
        assert_int_equal(auth_verify_bearer(f.a, bad, &p), r); /* a refusal is not kept */
        assert_int_equal(p.uid, 0);
        free(bad);
    }
    assert_int_equal(hits(f.a), 0);
    assert_int_equal(auth_verify_bearer(f.a, tok, &p), AUTH_OK);
    assert_int_equal(hits(f.a), 1);
    free(tok);
    es_teardown(&f);
}

static void
test_cache_ttl_and_off(void **state)
{
    struct es_fix f;
    struct auth_principal p;
    char *tok;

    es_setup(&f, 64, 1000, 30000);
    tok = es256_bearer(f.priv, "42", 3600);
    assert_int_equal(auth_verify_bearer(f.a, tok, &p), AUTH_OK);
    assert_int_equal(auth_verify_bearer(f.a, tok, &p), AUTH_OK);
    assert_int_equal(hits(f.a), 1);
    clock_set_offset_ms(1500); /* past the entry's TTL: verified again, kept again */
    assert_int_equal(auth_verify_bearer(f.a, tok, &p), AUTH_OK);
    assert_int_equal(hits(f.a), 1);
    assert_int_equal(auth_verify_bearer(f.a, tok, &p), AUTH_OK);
    assert_int_equal(hits(f.a), 2);
    clock_set_offset_ms(0);
    auth_close(f.a);
    f.c->auth.cache_entries = 0; /* no cache */
    f.a = es256_open(f.c);
    assert_int_equal(auth_verify_bearer(f.a, tok, &p), AUTH_OK);
    assert_int_equal(auth_verify_bearer(f.a, tok, &p), AUTH_OK);
    assert_int_equal(hits(f.a), 0);
    free(tok);
    es_teardown(&f);
}

/* auth_reload_keys applies cache_entries (off, on again, another size) and
 * cache_ttl without a restart; every reload empties the table. */
static void
test_cache_size_and_ttl_reloaded(void **state)
{
    struct es_fix f;
    struct auth_principal p;
    char err[256];
    char *tok;

    es_setup(&f, 64, 60000, 30000);
    tok = es256_bearer(f.priv, "42", 3600);
    assert_int_equal(auth_verify_bearer(f.a, tok, &p), AUTH_OK);
    assert_int_equal(auth_verify_bearer(f.a, tok, &p), AUTH_OK);
    assert_int_equal(hits(f.a), 1);
    f.c->auth.cache_entries = 0; /* off */
    assert_int_equal(auth_reload_keys(f.a, f.c, err, sizeof(err)), 0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(auth_verify_bearer(f.a, tok, &p), AUTH_OK);
        assert_int_equal(p.uid, 42);
    }
    assert_int_equal(hits(f.a), 1);
    f.c->auth.cache_entries = 8; /* on again, a smaller table, a 1 s TTL */
    f.c->auth.cache_ttl_ms = 1000;
    assert_int_equal(auth_reload_keys(f.a, f.c, err, sizeof(err)), 0);
    assert_int_equal(auth_verify_bearer(f.a, tok, &p), AUTH_OK); /* a miss: stored */
    assert_int_equal(auth_verify_bearer(f.a, tok, &p), AUTH_OK);
    assert_int_equal(hits(f.a), 2);
    clock_set_offset_ms(1500); /* past the reloaded TTL (the first was 60 s) */
    assert_int_equal(auth_verify_bearer(f.a, tok, &p), AUTH_OK);
    assert_int_equal(hits(f.a), 2);
    clock_set_offset_ms(0);
    /* the same size again: the table stays, emptied all the same */
    assert_int_equal(auth_reload_keys(f.a, f.c, err, sizeof(err)), 0);
    assert_int_equal(auth_verify_bearer(f.a, tok, &p), AUTH_OK);
    assert_int_equal(hits(f.a), 2);
    assert_int_equal(auth_verify_bearer(f.a, tok, &p), AUTH_OK);
    assert_int_equal(hits(f.a), 3);
    free(tok);
    es_teardown(&f);
}

/* Threads verifying ntok tokens (uids base..base+ntok-1) through a small
 * table: each gets the principal of the token it sent. A thread runs iters
 * rounds, or until stop when iters is 0. */
struct race {
    struct auth *a;
    char *tok[12];
    int ntok, base, iters;
    atomic_int stop;
    int wrong;
};

static void *
race_thread(void *arg)
{
    struct race *r = arg;
    struct auth_principal p;

    for (int i = 0; r->iters ? i < r->iters : !atomic_load(&r->stop); i++) {
        int k = i % r->ntok;
        if (auth_verify_bearer(r->a, r->tok[k], &p) != AUTH_OK || p.uid != r->base + k)
            __atomic_add_fetch(&r->wrong, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

/* Signs r's tokens with f's key. */
static void
race_tokens(struct es_fix *f, struct race *r)
{
    char sub[16];

    r->a = f->a;
    for (int k = 0; k < r->ntok; k++) {
        snprintf(sub, sizeof(sub), "%d", r->base + k);
        r->tok[k] = es256_bearer(f->priv, sub, 3600);
    }
}

/* The threads' answers were all right and some were cache hits; frees the tokens. */
static void
race_check(struct es_fix *f, struct race *r)
{
    assert_int_equal(r->wrong, 0);
    assert_true(hits(f->a) > 0);
    for (int k = 0; k < r->ntok; k++)
        free(r->tok[k]);
}

/* Reloads that resize the table while threads verify through it. */
static void
test_cache_resized_under_load(void **state)
{
    struct es_fix f;
    struct race r = {.ntok = 6, .base = 200};
    pthread_t th[3];
    char err[256];

    es_setup(&f, 4, 60000, 30000);
    race_tokens(&f, &r);
    for (int i = 0; i < 3; i++)
        pthread_create(&th[i], NULL, race_thread, &r);
    for (int n = 0; n < 40; n++) {
        f.c->auth.cache_entries = (int[]){0, 2, 16, 4}[n % 4];
        assert_int_equal(auth_reload_keys(f.a, f.c, err, sizeof(err)), 0);
        usleep(2000);
    }
    atomic_store(&r.stop, 1);
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    race_check(&f, &r);
    es_teardown(&f);
}

/* 12 tokens through a 4-slot table: slots taken over all the time. */
static void
test_cache_threads(void **state)
{
    struct es_fix f;
    struct race r = {.ntok = 12, .base = 100, .iters = 600};
    pthread_t th[4];

    es_setup(&f, 4, 60000, 30000);
    race_tokens(&f, &r);
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, race_thread, &r);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    race_check(&f, &r);
    es_teardown(&f);
}

static void
test_redact(void **state)
{
    static const char *const cases[][2] = {
        {"url=nats://user:hunter2@10.0.0.1:4222 x", "url=nats://user:***@10.0.0.1:4222 x"},
        {"nats://tok3n@h:1", "nats://***@h:1"},
        {"mysql://root:p%40ss@db/roomd", "mysql://root:***@db/roomd"},
        {"https://console.tim.qq.com/v4/x?sdkappid=1&usersig=eJwtzE&random=9",
         "https://console.tim.qq.com/v4/x?sdkappid=1&usersig=***&random=9"},
        {"password=abc token=def mypassword=keep", "password=*** token=*** mypassword=keep"},
        {"http://host:8080/path", "http://host:8080/path"},
        {"no secrets here", "no secrets here"},
    };
    char out[256];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        secret_redact(cases[i][0], out, sizeof(out));
        assert_string_equal(out, cases[i][1]);
    }
    secret_redact("nats://u:secret@h", out, 8); /* truncated, still terminated */
    assert_int_equal(strlen(out), 7);
}

/* "Bearer <HS256 JWT>" of uid 7 in app a1 whose header names kid (NULL: none). */
static char *
bearer_kid(const char *key, const char *kid)
{
    jwt_t *j = NULL;
    char *t, *out;

    jwt_new(&j);
    jwt_add_grant(j, "sub", "7");
    jwt_add_grant(j, "app", "a1");
    jwt_add_grant_int(j, "exp", clock_wall_ms() / 1000 + 60);
    if (kid)
        jwt_add_header(j, "kid", kid);
    jwt_set_alg(j, JWT_ALG_HS256, (const unsigned char *)key, (int)strlen(key));
    t = jwt_encode_str(j);
    jwt_free(j);
    out = malloc(strlen(t) + 8);
    strcpy(out, "Bearer ");
    strcat(out, t);
    free(t);
    return out;
}

static void
write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* auth.jwt.jwks_file: two oct keys picked by kid; an unknown or missing kid
 * refused unknown_key; a kid whose key did not sign it bad_signature; a reload
 * that drops a key refuses its tokens; jwks_parse's rules. */
static void
test_jwks(void **state)
{
    /* "key-a-0123456789abcdef0123456789ab" and "key-b-0123456789abcdef0123456789ab" */
    static const char both[] =
        "{\"keys\":[{\"kty\":\"oct\",\"kid\":\"a\",\"alg\":\"HS256\","
        "\"k\":\"a2V5LWEtMDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYg\"},"
        "{\"kty\":\"oct\",\"kid\":\"b\",\"use\":\"sig\","
        "\"k\":\"a2V5LWItMDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYg==\"},"
        "{\"kty\":\"RSA\",\"kid\":\"enc\",\"use\":\"enc\",\"n\":\"AQAB\",\"e\":\"AQAB\"}]}";
    static const char only_b[] = "{\"keys\":[{\"kty\":\"oct\",\"kid\":\"b\","
                                 "\"k\":\"a2V5LWItMDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYg\"}]}";
    const char *ka = "key-a-0123456789abcdef0123456789ab",
               *kb = "key-b-0123456789abcdef0123456789ab";
    char path[] = "/tmp/test_auth_jwks_XXXXXX", err[512];
    struct auth_principal p;
    struct auth *a = NULL;
    struct conf *c = jwt_conf("");
    int fd = mkstemp(path), n = 0;

    (void)state;
    assert_true(fd >= 0);
    close(fd);
    write_file(path, both);
    assert_int_equal(auth_jwks_parse_check(both, strlen(both), &n, err, sizeof(err)), 0);
    assert_int_equal(n, 2); /* the encryption key skipped */
    free(c->auth.jwks_file);
    c->auth.jwks_file = strdup(path);
    c->auth.jwks_poll_ms = 0;
    assert_int_equal(auth_open(&a, c, err, sizeof(err)), 0);
    assert_int_equal(verify(a, bearer_kid(ka, "a"), &p), AUTH_OK);
    assert_int_equal(p.uid, 7);
    assert_int_equal(verify(a, bearer_kid(kb, "b"), &p), AUTH_OK);
    assert_int_equal(verify(a, bearer_kid(ka, "c"), &p), AUTH_UNKNOWN_KEY);
    assert_int_equal(verify(a, bearer_kid(ka, NULL), &p), AUTH_UNKNOWN_KEY);
    assert_int_equal(verify(a, bearer_kid(ka, "b"), &p), AUTH_BAD_SIGNATURE);
    assert_string_equal(auth_reason_name(AUTH_UNKNOWN_KEY), "unknown_key");
    assert_int_equal(auth_reason_status(AUTH_UNKNOWN_KEY), 401);
    write_file(path, only_b);
    assert_int_equal(auth_reload_keys(a, c, err, sizeof(err)), 0);
    assert_int_equal(verify(a, bearer_kid(ka, "a"), &p), AUTH_UNKNOWN_KEY);
    assert_int_equal(verify(a, bearer_kid(kb, "b"), &p), AUTH_OK);
    /* a bad set on reload: refused naming the key, the set in use kept */
    write_file(path, "{\"keys\":[{\"kty\":\"oct\",\"kid\":\"short\",\"k\":\"YWJj\"}]}");
    assert_int_not_equal(auth_reload_keys(a, c, err, sizeof(err)), 0);
    assert_non_null(strstr(err, "kid \"short\""));
    assert_int_equal(verify(a, bearer_kid(kb, "b"), &p), AUTH_OK);
    auth_close(a);
    conf_free(c);
    unlink(path);
    static const char *const bad[] = {
        "{\"keys\":[{\"kty\":\"oct\",\"kid\":\"x\",\"k\":"
        "\"a2V5LWItMDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3*\"}]}",
        "{\"keys\":[{\"kty\":\"oct\",\"k\":\"a2V5LWItMDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYg\"}]}",
        "{\"keys\":[{\"kty\":\"oct\",\"kid\":\"x\",\"alg\":\"ES256\","
        "\"k\":\"a2V5LWItMDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYg\"}]}",
        "{\"keys\":[{\"kty\":\"RSA\",\"kid\":\"small\",\"n\":\"AQAB\",\"e\":\"AQAB\"}]}",
        "{\"keys\":[{\"kty\":\"EC\",\"kid\":\"p384\",\"crv\":\"P-384\",\"x\":\"AA\",\"y\":\"AA\"}]"
        "}",
        "{\"keys\":{}}",
        "[]",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_not_equal(auth_jwks_parse_check(bad[i], strlen(bad[i]), &n, err, sizeof(err)),
                             0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reasons),
        cmocka_unit_test(test_may_act_as),
        cmocka_unit_test(test_admin_token),
        cmocka_unit_test(test_open_errors_name_the_key),
        cmocka_unit_test(test_redact),
        cmocka_unit_test(test_cache_expired_refused_while_cached),
        cmocka_unit_test(test_cache_dropped_on_key_rotation),
        cmocka_unit_test(test_cache_one_byte_off_is_no_hit),
        cmocka_unit_test(test_cache_ttl_and_off),
        cmocka_unit_test(test_cache_threads),
        cmocka_unit_test(test_cache_size_and_ttl_reloaded),
        cmocka_unit_test(test_cache_resized_under_load),
        cmocka_unit_test(test_jwks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
