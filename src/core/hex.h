/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hex.h: bytes as lowercase hexadecimal (digests, ids). Thread: any; never
 * blocks.
 */
#ifndef ROOMD_HEX_H
#define ROOMD_HEX_H

#include <stddef.h>
#include <stdint.h>

/* Writes the 2 * n lowercase hex digits of in[0..n) to out, then a NUL: out
 * holds 2 * n + 1 bytes. */
static inline void
hex_lower(const uint8_t *in, size_t n, char *out)
{
    static const char digit[] = "0123456789abcdef";

    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digit[in[i] >> 4];
        out[2 * i + 1] = digit[in[i] & 0x0f];
    }
    out[2 * n] = '\0';
}

#endif
