/* SPDX-License-Identifier: Apache-2.0 */
/*
 * text.c: the growing text buffer of text.h.
 */
#include "room/text.h"

#include "core/xmalloc.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Makes room for n more bytes and the NUL. */
static void
reserve(struct text *t, size_t n)
{
    if (t->len + n + 1 <= t->cap)
        return;
    t->cap = t->cap ? t->cap : 512;
    while (t->len + n + 1 > t->cap)
        t->cap *= 2;
    t->p = xrealloc(t->p, t->cap);
}

void
text_printf(struct text *t, const char *fmt, ...)
{
    va_list ap;
    int n;

    reserve(t, 128);
    va_start(ap, fmt);
    n = vsnprintf(t->p + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    if (n < 0)
        abort(); /* a bad format: a bug */
    if ((size_t)n >= t->cap - t->len) {
        reserve(t, (size_t)n);
        va_start(ap, fmt);
        vsnprintf(t->p + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
    }
    t->len += (size_t)n;
}

void
text_puts(struct text *t, const char *s)
{
    size_t n = strlen(s);

    reserve(t, n);
    memcpy(t->p + t->len, s, n + 1);
    t->len += n;
}

/* jansson's two-character escape of c, or NULL. */
static const char *
short_escape(unsigned char c)
{
    switch (c) {
    case '"':
        return "\\\"";
    case '\\':
        return "\\\\";
    case '\b':
        return "\\b";
    case '\f':
        return "\\f";
    case '\n':
        return "\\n";
    case '\r':
        return "\\r";
    case '\t':
        return "\\t";
    default:
        return NULL;
    }
}

void
text_json_string(struct text *t, const char *s)
{
    /* jansson's dump_string: \" \\ and the short escapes; any other byte
     * below 0x20 as \u00XX (upper-case hex); '/' and non-ASCII as they are */
    static const char hex[] = "0123456789ABCDEF";

    reserve(t, 6 * strlen(s) + 2);
    t->p[t->len++] = '"';
    for (const unsigned char *c = (const unsigned char *)s; *c != '\0'; c++) {
        char *o = t->p + t->len;
        const char *e = short_escape(*c);

        if (e != NULL) {
            memcpy(o, e, 2);
            t->len += 2;
        } else if (*c < 0x20) {
            memcpy(o, "\\u00", 4);
            o[4] = hex[*c >> 4];
            o[5] = hex[*c & 0xf];
            t->len += 6;
        } else {
            *o = (char)*c;
            t->len++;
        }
    }
    t->p[t->len++] = '"';
    t->p[t->len] = '\0';
}

char *
text_take(struct text *t)
{
    char *p = t->p ? t->p : xstrdup("");

    t->p = NULL;
    t->len = t->cap = 0;
    return p;
}
