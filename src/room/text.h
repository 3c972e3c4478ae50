/* SPDX-License-Identifier: Apache-2.0 */
/*
 * text.h: private to src/room. A growing text buffer for the JSON the
 * command path writes directly (the room state, a command's response, its
 * canonical request) in jansson's canonical form. It replaces
 * open_memstream, whose glibc version zeroes an 8 KiB buffer per stream:
 * three streams per command were ~2% of roomd's CPU (bench/README.md).
 */
#ifndef ROOMD_ROOM_TEXT_H
#define ROOMD_ROOM_TEXT_H

#include <stddef.h>

/* Zero-initialise ({0}); text_take hands the text over. */
struct text {
    char *p; /* NUL-terminated once anything was written; malloc'd */
    size_t len, cap;
};

/* Appends the formatted text (vsnprintf). Aborts on out of memory. Thread:
 * any (t is the caller's). */
void text_printf(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s. */
void text_puts(struct text *t, const char *s);
/* Appends s (valid UTF-8) as a JSON string, quoted and escaped exactly as
 * jansson's json_dumps does with JSON_COMPACT (no JSON_ENSURE_ASCII). */
void text_json_string(struct text *t, const char *s);
/* Returns the text (malloc'd, the caller's; "" when nothing was written)
 * and leaves t empty. */
char *text_take(struct text *t);

#endif
