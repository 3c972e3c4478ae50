/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_tim_callback.c: Tencent IM's State.StateChange callback (POST /callbacks/tim): the
 * signature check (the input split at its first two newlines into RequestTime, Sign and the
 * rest) and the body (the whole input). */
#include "http/tim_callback.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1), *rt, *sign, *nl;
    enum tim_state_action action;
    int64_t uid;
    char why[160];

    memcpy(text, data, size);
    text[size] = '\0';
    tim_callback_parse_state((const char *)data, size, &action, &uid, why, sizeof(why));
    rt = text;
    sign = (nl = strchr(rt, '\n')) != NULL ? (*nl = '\0', nl + 1) : "";
    if ((nl = strchr(sign, '\n')) != NULL)
        *nl = '\0';
    tim_callback_verify("token", rt, sign, 1700000000, 60, why, sizeof(why));
    tim_callback_verify("", rt, sign, 1700000000, 60, why, sizeof(why));
    free(text);
    return 0;
}
