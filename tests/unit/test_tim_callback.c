/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_tim_callback.c: Tencent IM's State.StateChange callback (src/http/tim_callback.c):
 * the signature (Sign = hex sha256(token + RequestTime), RequestTime within the skew,
 * constant-time compare, any hex case) and the body (Action, To_Account as a uid).
 */
#include "helpers.h"

#include "http/tim_callback.h"

#include <string.h>

/* sha256("token1700000000"), computed independently (Python hashlib) */
#define SIGN "37eae3074c8d2bad93ac66b5257e151e605386c2bcc1472988fcb687e7ffa4c6"
#define T0 1700000000

static void
test_verify(void **state)
{
    char why[160], upper[65];

    (void)state;
    assert_int_equal(tim_callback_verify("token", "1700000000", SIGN, T0, 60, why, sizeof(why)), 0);
    assert_int_equal(
        tim_callback_verify("token", "1700000000", SIGN, T0 + 60, 60, why, sizeof(why)), 0);
    for (size_t i = 0; i < 64; i++)
        upper[i] = (char)(SIGN[i] >= 'a' ? SIGN[i] - 'a' + 'A' : SIGN[i]);
    upper[64] = '\0';
    assert_int_equal(tim_callback_verify("token", "1700000000", upper, T0, 60, why, sizeof(why)),
                     0);
    /* a skew beyond max_skew either way: refused (a replayed or a forged-future request) */
    assert_int_equal(
        tim_callback_verify("token", "1700000000", SIGN, T0 + 61, 60, why, sizeof(why)), -1);
    assert_non_null(strstr(why, "RequestTime"));
    assert_int_equal(
        tim_callback_verify("token", "1700000000", SIGN, T0 - 61, 60, why, sizeof(why)), -1);
    /* another token, another time under the same Sign, a changed digit */
    assert_int_equal(tim_callback_verify("tokem", "1700000000", SIGN, T0, 60, why, sizeof(why)),
                     -1);
    assert_non_null(strstr(why, "does not match"));
    assert_null(strstr(why, "tokem"));
    assert_int_equal(tim_callback_verify("token", "1700000001", SIGN, T0, 60, why, sizeof(why)),
                     -1);
    char bad[65];
    memcpy(bad, SIGN, 65);
    bad[10] = bad[10] == '0' ? '1' : '0';
    assert_int_equal(tim_callback_verify("token", "1700000000", bad, T0, 60, why, sizeof(why)), -1);
    /* malformed: missing, short, not hex, signed time, no token */
    assert_int_equal(tim_callback_verify("token", NULL, SIGN, T0, 60, why, sizeof(why)), -1);
    assert_int_equal(tim_callback_verify("token", "1700000000", NULL, T0, 60, why, sizeof(why)),
                     -1);
    assert_int_equal(tim_callback_verify("token", "1700000000", "abc", T0, 60, why, sizeof(why)),
                     -1);
    memcpy(bad, SIGN, 65);
    bad[3] = 'g';
    assert_int_equal(tim_callback_verify("token", "1700000000", bad, T0, 60, why, sizeof(why)), -1);
    assert_int_equal(tim_callback_verify("token", "+1700000000", SIGN, T0, 60, why, sizeof(why)),
                     -1);
    assert_int_equal(tim_callback_verify("", "1700000000", SIGN, T0, 60, why, sizeof(why)), -1);
    assert_int_equal(tim_callback_verify(NULL, "1700000000", SIGN, T0, 60, why, sizeof(why)), -1);
}

static int
parse(const char *body, enum tim_state_action *a, int64_t *uid)
{
    char err[160];

    return tim_callback_parse_state(body, strlen(body), a, uid, err, sizeof(err));
}

static void
test_parse(void **state)
{
    enum tim_state_action a;
    int64_t uid;

    (void)state;
    assert_int_equal(parse("{\"CallbackCommand\":\"State.StateChange\",\"EventTime\":1,"
                           "\"Info\":{\"Action\":\"Login\",\"To_Account\":\"42\","
                           "\"Reason\":\"Register\"}}",
                           &a, &uid),
                     0);
    assert_int_equal(a, TIM_STATE_LOGIN);
    assert_int_equal(uid, 42);
    assert_int_equal(parse("{\"CallbackCommand\":\"State.StateChange\",\"Info\":{\"Action\":"
                           "\"Logout\",\"To_Account\":\"7\"}}",
                           &a, &uid),
                     0);
    assert_int_equal(a, TIM_STATE_LOGOUT);
    assert_int_equal(parse("{\"CallbackCommand\":\"State.StateChange\",\"Info\":{\"Action\":"
                           "\"Disconnect\",\"To_Account\":\"7\"}}",
                           &a, &uid),
                     0);
    assert_int_equal(a, TIM_STATE_DISCONNECT);
    assert_int_equal(parse("{\"CallbackCommand\":\"State.StateChange\",\"Info\":{\"Action\":"
                           "\"TimeOut\",\"To_Account\":\"7\"}}",
                           &a, &uid),
                     0);
    assert_int_equal(a, TIM_STATE_OTHER);
    /* another command: acknowledged, ignored */
    assert_int_equal(parse("{\"CallbackCommand\":\"Group.CallbackAfterNewMemberJoin\"}", &a, &uid),
                     1);
    /* an account that is no uid, a missing part, no JSON object */
    static const char *const bad[] = {
        "{\"CallbackCommand\":\"State.StateChange\",\"Info\":{\"Action\":\"Login\","
        "\"To_Account\":\"alice\"}}",
        "{\"CallbackCommand\":\"State.StateChange\",\"Info\":{\"Action\":\"Login\","
        "\"To_Account\":\"0\"}}",
        "{\"CallbackCommand\":\"State.StateChange\",\"Info\":{\"Action\":\"Login\","
        "\"To_Account\":\"007\"}}",
        "{\"CallbackCommand\":\"State.StateChange\",\"Info\":{\"Action\":\"Login\","
        "\"To_Account\":\"-5\"}}",
        "{\"CallbackCommand\":\"State.StateChange\",\"Info\":{\"Action\":\"Login\","
        "\"To_Account\":42}}",
        "{\"CallbackCommand\":\"State.StateChange\",\"Info\":{\"To_Account\":\"42\"}}",
        "{\"CallbackCommand\":\"State.StateChange\"}",
        "{\"Info\":{}}",
        "[]",
        "not json",
        "",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(parse(bad[i], &a, &uid), -1);
        assert_int_equal(uid, 0);
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_verify),
        cmocka_unit_test(test_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
