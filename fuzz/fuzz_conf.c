/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_conf.c: the YAML loader and every validation rule, through conf_load_buffer. */
#include "conf/conf.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct conf *c = NULL;
    char err[512];

    if (conf_load_buffer("fuzz.yaml", (const char *)data, size, &c, err, sizeof(err)) == 0)
        conf_free(c);
    return 0;
}
