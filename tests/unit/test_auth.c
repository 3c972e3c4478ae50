/*
 * test_auth.c: src/auth (the verifier every entry point shares) and
 * core/secret.c's redaction, without a server: HS256 tokens minted with
 * libjwt itself, every 401 reason, the acting-uid and app rules, the admin
 * token compare, and secret_redact on URLs and parameters.
 */
#include "helpers.h"

#include "auth/auth.h"
#include "conf/conf.h"
#include "core/clock.h"
#include "core/secret.h"

#include <jwt.h>
#include <stdlib.h>
#include <string.h>

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
    setenv("TEST_AUTH_ADMIN", "the-admin-token", 1);
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

    assert_int_equal(auth_admin_ok(a, "Bearer the-admin-token"), AUTH_OK);
    assert_int_equal(auth_admin_ok(a, "Bearer the-admin-tokeN"), AUTH_BAD_ADMIN_TOKEN);
    assert_int_equal(auth_admin_ok(a, "Bearer the-admin-token2"), AUTH_BAD_ADMIN_TOKEN);
    assert_int_equal(auth_admin_ok(a, "the-admin-token"), AUTH_BAD_ADMIN_TOKEN);
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

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reasons),     cmocka_unit_test(test_may_act_as),
        cmocka_unit_test(test_admin_token), cmocka_unit_test(test_open_errors_name_the_key),
        cmocka_unit_test(test_redact),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
