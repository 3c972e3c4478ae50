/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_usersig.c: UserSig decode (base64 with * - _, inflate, JSON) and verify. */
#include "publish/tim_usersig.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    struct tim_usersig_doc doc;
    char err[256];

    memcpy(text, data, size);
    text[size] = '\0';
    tim_usersig_decode(text, &doc, err, sizeof(err));
    tim_usersig_verify(text, "key", 1400000000, "administrator", 1700000000, err, sizeof(err));
    free(text);
    return 0;
}
