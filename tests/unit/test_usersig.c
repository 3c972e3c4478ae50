/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_usersig.c: UserSig v2 (publish/tim_usersig.c) against the vector of
 * shared/design/tencent-im-rest.md §2 (decode the doc's full usersig, check
 * its fields, recompute and compare the HMAC), generate + verify round trips,
 * expiry, the renewing cache, and the IM client's pure helpers.
 */
#include "helpers.h"

#include "core/err.h"
#include "publish/tim_client.h"
#include "publish/tim_usersig.h"

#include <stdlib.h>
#include <string.h>

/* The doc's vector. */
#define V_KEY "5bd2850fff3ecb11d7c805251c51ee463a25727bddc2385f3fa8bfee1bb93b5e"
#define V_APPID 1400000000LL
#define V_ID "xiaojun"
#define V_TIME 1700000000LL
#define V_EXPIRE 15552000LL
#define V_SIG "LvA7d/Iw7gSsnskvVzBDPOCCDbuNCw4GHwTC0bip+B4="
#define V_USERSIG                                                                                  \
    "eNqrVgrxCdYrSy1SslIy0jNQ0gHzM1NS80oy0zLBwhWZiflZpXlQqeKU7MSCgswUJStDEwMogMikVhRkFqUCxU1N"     \
    "TY3goiWZuSAxc1S1xZnpQJN9yhzNU-Q9y83Tg4vzirPLwqqcXAL8nZ1dkkr9nMtN3D3KQ5wNkjILtJ1MbJVqAa3H"     \
    "MfI_"

static void
test_vector_hmac(void **state)
{
    char sig[64];

    (void)state;
    assert_int_equal(tim_usersig_hmac(V_KEY, V_ID, V_APPID, V_TIME, V_EXPIRE, sig, sizeof(sig)), 0);
    assert_string_equal(sig, V_SIG);
}

static void
test_vector_decode_and_verify(void **state)
{
    struct tim_usersig_doc doc;
    char err[256], sig[64];

    (void)state;
    assert_int_equal(tim_usersig_decode(V_USERSIG, &doc, err, sizeof(err)), 0);
    assert_string_equal(doc.ver, "2.0");
    assert_string_equal(doc.identifier, V_ID);
    assert_int_equal(doc.sdkappid, V_APPID);
    assert_int_equal(doc.time, V_TIME);
    assert_int_equal(doc.expire, V_EXPIRE);
    assert_string_equal(doc.sig, V_SIG);
    /* Recompute the HMAC from the decoded fields. */
    assert_int_equal(tim_usersig_hmac(V_KEY, doc.identifier, doc.sdkappid, doc.time, doc.expire,
                                      sig, sizeof(sig)),
                     0);
    assert_string_equal(sig, doc.sig);
    /* Full verification at a time inside its validity, and just past it. */
    assert_int_equal(
        tim_usersig_verify(V_USERSIG, V_KEY, V_APPID, V_ID, V_TIME + 10, err, sizeof(err)), 0);
    assert_int_equal(tim_usersig_verify(V_USERSIG, V_KEY, V_APPID, V_ID, V_TIME + V_EXPIRE + 1, err,
                                        sizeof(err)),
                     ROOMD_ETIMEDOUT);
    assert_int_equal(
        tim_usersig_verify(V_USERSIG, "wrong-key", V_APPID, V_ID, V_TIME + 10, err, sizeof(err)),
        ROOMD_EINVAL);
    assert_non_null(strstr(err, "signature mismatch"));
    assert_int_equal(
        tim_usersig_verify(V_USERSIG, V_KEY, V_APPID + 1, V_ID, V_TIME + 10, err, sizeof(err)),
        ROOMD_EINVAL);
    assert_int_equal(
        tim_usersig_verify(V_USERSIG, V_KEY, V_APPID, "admin", V_TIME + 10, err, sizeof(err)),
        ROOMD_EINVAL);
}

static void
test_roundtrip(void **state)
{
    char *sig = NULL, err[256];
    struct tim_usersig_doc doc;

    (void)state;
    assert_int_equal(tim_usersig_gen(V_KEY, V_APPID, V_ID, V_TIME, V_EXPIRE, &sig), 0);
    /* Only the URL-safe alphabet: no + / = survive. */
    assert_null(strpbrk(sig, "+/="));
    assert_int_equal(tim_usersig_decode(sig, &doc, err, sizeof(err)), 0);
    /* Same inputs, same TLS.sig as the doc's usersig (the bytes may differ). */
    assert_string_equal(doc.sig, V_SIG);
    assert_int_equal(tim_usersig_verify(sig, V_KEY, V_APPID, V_ID, V_TIME, err, sizeof(err)), 0);
    free(sig);

    /* A short-lived sig expires. */
    assert_int_equal(tim_usersig_gen("k", 7, "administrator", 1000, 60, &sig), 0);
    assert_int_equal(tim_usersig_verify(sig, "k", 7, "administrator", 1060, err, sizeof(err)), 0);
    assert_int_equal(tim_usersig_verify(sig, "k", 7, "administrator", 1061, err, sizeof(err)),
                     ROOMD_ETIMEDOUT);
    free(sig);

    /* Garbage is refused, not crashed on. */
    assert_int_equal(tim_usersig_decode("not*a*sig", &doc, err, sizeof(err)), ROOMD_EINVAL);
    assert_int_equal(tim_usersig_decode("", &doc, err, sizeof(err)), ROOMD_EINVAL);
    assert_int_equal(tim_usersig_gen("", 7, "a", 1, 1, &sig), ROOMD_EINVAL);
    assert_null(sig);
}

static void
test_cache_renews(void **state)
{
    struct tim_usersig_cache c;
    char a[512], b[512], err[256];
    unsigned g1, g2, g3;
    int64_t now = 1700000000;

    (void)state;
    assert_int_equal(tim_usersig_cache_init(&c, V_KEY, V_APPID, "administrator", 86400), 0);
    assert_int_equal(tim_usersig_cache_get(&c, now, a, sizeof(a), &g1), 0);
    assert_int_equal(tim_usersig_cache_get(&c, now + 3600, b, sizeof(b), &g2), 0);
    assert_string_equal(a, b); /* cached */
    assert_int_equal(g1, g2);
    /* Renewed before expiry: within the last tenth of its validity, at most 1 h. */
    assert_int_equal(tim_usersig_cache_get(&c, now + 86400 - 3000, b, sizeof(b), &g3), 0);
    assert_int_not_equal(g3, g1);
    assert_string_not_equal(a, b);
    assert_int_equal(
        tim_usersig_verify(b, V_KEY, V_APPID, "administrator", now + 86400 + 100, err, sizeof(err)),
        0);
    /* Invalidation of a stale generation keeps the newer sig; of the current one drops it. */
    tim_usersig_cache_invalidate(&c, g1);
    assert_int_equal(tim_usersig_cache_get(&c, now + 86400 - 2999, a, sizeof(a), &g2), 0);
    assert_int_equal(g2, g3);
    tim_usersig_cache_invalidate(&c, g3);
    assert_int_equal(tim_usersig_cache_get(&c, now + 86400 - 2998, a, sizeof(a), &g2), 0);
    assert_int_not_equal(g2, g3);
    /* Key rotation. */
    tim_usersig_cache_set_key(&c, "other");
    assert_int_equal(tim_usersig_cache_get(&c, now, a, sizeof(a), NULL), 0);
    assert_int_equal(
        tim_usersig_verify(a, "other", V_APPID, "administrator", now, err, sizeof(err)), 0);
    assert_int_equal(tim_usersig_cache_get(&c, now, a, 10, NULL), ROOMD_ETOOBIG);
    tim_usersig_cache_destroy(&c);
}

static void
test_client_helpers(void **state)
{
    char g[TIM_GROUP_ID_MAX];
    char longroom[80];

    (void)state;
    assert_int_equal(tim_classify(0), TIM_CLASS_OK);
    assert_int_equal(tim_classify(10023), TIM_CLASS_RETRY);
    assert_int_equal(tim_classify(70052), TIM_CLASS_RESIG);
    assert_int_equal(tim_classify(10010), TIM_CLASS_PERM);
    assert_int_equal(tim_classify(80001), TIM_CLASS_PERM);
    assert_int_equal(tim_classify(90005), TIM_CLASS_PERM);
    assert_int_equal(tim_classify(12345), TIM_CLASS_UNKNOWN);

    tim_group_id("hyapp", "r1", g, sizeof(g));
    assert_string_equal(g, "hyapp_r1");
    memset(longroom, 'x', sizeof(longroom) - 1);
    longroom[sizeof(longroom) - 1] = '\0';
    tim_group_id("hyapp", longroom, g, sizeof(g));
    assert_int_equal(strlen(g), 48);
    /* "r_" + the first 46 hex digits of SHA-256("hyapp_" + 79 x): the IM group of a long
     * room id must not change between versions */
    assert_string_equal(g, "r_a629b4ee1a669b2839583fea23f06622c48dfa6c011338");

    /* Stable across calls; the C2C seq differs from the random. */
    assert_int_equal(tim_derive_u32("0190b4c2-0000-7000-8000-000000000001", 0),
                     tim_derive_u32("0190b4c2-0000-7000-8000-000000000001", 0));
    assert_int_not_equal(tim_derive_u32("e1", 0), tim_derive_u32("e2", 0));
    assert_int_not_equal(tim_derive_u32("e1", 0), tim_derive_u32("e1", 1));
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vector_hmac),    cmocka_unit_test(test_vector_decode_and_verify),
        cmocka_unit_test(test_roundtrip),      cmocka_unit_test(test_cache_renews),
        cmocka_unit_test(test_client_helpers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
