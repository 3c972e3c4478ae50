/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_snapshot.c: the snapshot parser (room_state_from_json: a stored snapshot read back). */
#include "room/state.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    struct room_state *s = NULL;

    memcpy(text, data, size);
    text[size] = '\0';
    if (room_state_from_json(text, &s) == 0)
        room_state_free(s);
    free(text);
    return 0;
}
