/* uuid.c: UUIDv7 generation (see uuid.h). */
#include "core/uuid.h"

#include <stdio.h>
#include <sys/random.h>

void
uuid_v7(int64_t now_ms, char out[UUID_STR_LEN])
{
    uint8_t b[16];
    uint64_t ms = (uint64_t)now_ms;

    if (getrandom(b + 6, 10, 0) != 10) {
        /* getrandom on Linux >= 3.17 does not fail for <= 256 bytes once seeded. */
        for (int i = 6; i < 16; i++)
            b[i] = (uint8_t)(ms >> (i % 8));
    }
    for (int i = 0; i < 6; i++)
        b[i] = (uint8_t)(ms >> (40 - 8 * i));
    b[6] = (uint8_t)(0x70 | (b[6] & 0x0f));
    b[8] = (uint8_t)(0x80 | (b[8] & 0x3f));
    snprintf(out, UUID_STR_LEN,
             "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
             b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
             b[15]);
}
