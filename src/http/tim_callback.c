/* SPDX-License-Identifier: Apache-2.0 */
/* tim_callback.c: the State.StateChange callback's signature and body (see tim_callback.h). */
#include "http/tim_callback.h"
#include "core/hex.h"

#include <jansson.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The value of s, 1..18 decimal digits without a sign, into *out. */
static bool
digits(const char *s, int64_t *out)
{
    size_t n = s != NULL ? strlen(s) : 0;
    int64_t v = 0;

    if (n < 1 || n > 18)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
}

int
tim_callback_verify(const char *token, const char *request_time, const char *sign, int64_t now_s,
                    int64_t max_skew_s, char *why, size_t whylen)
{
    unsigned char md[SHA256_DIGEST_LENGTH];
    char want[2 * SHA256_DIGEST_LENGTH + 1], got[2 * SHA256_DIGEST_LENGTH + 1];
    int64_t t;
    size_t tl, rl;
    char *buf;

    if (token == NULL || token[0] == '\0') {
        snprintf(why, whylen, "no callback token is configured");
        return -1;
    }
    if (!digits(request_time, &t)) {
        snprintf(why, whylen, "RequestTime: missing or not unix seconds");
        return -1;
    }
    if (t > now_s + max_skew_s || t < now_s - max_skew_s) {
        snprintf(why, whylen, "RequestTime: further than tencent_im.callback.max_skew from now");
        return -1;
    }
    if (sign == NULL || strlen(sign) != 2 * SHA256_DIGEST_LENGTH) {
        snprintf(why, whylen, "Sign: missing or not 64 hex digits");
        return -1;
    }
    for (size_t i = 0; i < 2 * SHA256_DIGEST_LENGTH; i++) {
        char ch = sign[i];
        if (ch >= 'A' && ch <= 'F')
            ch = (char)(ch - 'A' + 'a');
        if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'))) {
            snprintf(why, whylen, "Sign: missing or not 64 hex digits");
            return -1;
        }
        got[i] = ch;
    }
    got[2 * SHA256_DIGEST_LENGTH] = '\0';
    tl = strlen(token);
    rl = strlen(request_time);
    buf = malloc(tl + rl + 1);
    if (buf == NULL)
        abort();
    memcpy(buf, token, tl);
    memcpy(buf + tl, request_time, rl + 1);
    SHA256((const unsigned char *)buf, tl + rl, md);
    OPENSSL_cleanse(buf, tl + rl);
    free(buf);
    hex_lower(md, sizeof(md), want);
    OPENSSL_cleanse(md, sizeof(md));
    if (CRYPTO_memcmp(want, got, 2 * SHA256_DIGEST_LENGTH) != 0) {
        snprintf(why, whylen, "Sign: does not match");
        return -1;
    }
    return 0;
}

int
tim_callback_parse_state(const char *body, size_t len, enum tim_state_action *action, int64_t *uid,
                         char *err, size_t errlen)
{
    json_error_t je;
    json_t *j = json_loadb(body != NULL ? body : "", len, JSON_REJECT_DUPLICATES, &je);
    json_t *info, *v;
    const char *cmd, *act, *acct;
    int rc = -1;

    *action = TIM_STATE_OTHER;
    *uid = 0;
    if (!json_is_object(j)) {
        snprintf(err, errlen, "body: not a JSON object");
        goto out;
    }
    cmd = json_string_value(json_object_get(j, "CallbackCommand"));
    if (cmd == NULL) {
        snprintf(err, errlen, "CallbackCommand: missing");
        goto out;
    }
    if (strcmp(cmd, "State.StateChange") != 0) {
        rc = 1;
        goto out;
    }
    info = json_object_get(j, "Info");
    act = json_string_value(json_object_get(info, "Action"));
    v = json_object_get(info, "To_Account");
    acct = json_string_value(v);
    if (!json_is_object(info) || act == NULL) {
        snprintf(err, errlen, "Info.Action: missing");
        goto out;
    }
    if (acct == NULL || !digits(acct, uid) || *uid <= 0 || acct[0] == '0') {
        snprintf(err, errlen, "Info.To_Account: must be a uid (a positive decimal integer)");
        *uid = 0;
        goto out;
    }
    *action = strcmp(act, "Login") == 0        ? TIM_STATE_LOGIN
              : strcmp(act, "Logout") == 0     ? TIM_STATE_LOGOUT
              : strcmp(act, "Disconnect") == 0 ? TIM_STATE_DISCONNECT
                                               : TIM_STATE_OTHER;
    rc = 0;
out:
    json_decref(j);
    return rc;
}
