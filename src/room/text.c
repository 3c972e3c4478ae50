/*
 * text.c: the growing text buffer of text.h.
 */
#include "room/text.h"

#include "core/xmalloc.h"

#include <stdarg.h>
#include <stdbool.h>
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

/* Appends the n bytes at s. */
static void
put(struct text *t, const char *s, size_t n)
{
    reserve(t, n);
    memcpy(t->p + t->len, s, n);
    t->len += n;
    t->p[t->len] = '\0';
}

/* Appends u in decimal, with a '-' before it when neg. */
static void
put_decimal(struct text *t, unsigned long long u, bool neg)
{
    char buf[24]; /* 20 digits of 2^64 - 1, the sign */
    size_t n = sizeof(buf);

    do
        buf[--n] = (char)('0' + u % 10);
    while ((u /= 10) != 0);
    if (neg)
        buf[--n] = '-';
    put(t, buf + n, sizeof(buf) - n);
}

static void
put_signed(struct text *t, long long v)
{
    /* the magnitude in unsigned arithmetic: -LLONG_MIN overflows a long long */
    put_decimal(t, v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v, v < 0);
}

/* The formatter of the conversions the command path's JSON uses (%s %d %lld
 * %zu %%): vsnprintf's set-up per call was ~3% of roomd's CPU at 64 clients
 * (bench/README.md, seventh round). Anything else aborts: a bug, which the
 * format attribute's check at compile time does not catch. */
void
text_printf(struct text *t, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    while (*fmt != '\0') {
        const char *lit = fmt;

        while (*fmt != '\0' && *fmt != '%')
            fmt++;
        if (fmt > lit)
            put(t, lit, (size_t)(fmt - lit));
        if (*fmt == '\0')
            break;
        fmt++; /* the '%' */
        if (*fmt == 's') {
            text_puts(t, va_arg(ap, const char *));
        } else if (*fmt == 'd') {
            put_signed(t, va_arg(ap, int));
        } else if (strncmp(fmt, "lld", 3) == 0) {
            put_signed(t, va_arg(ap, long long));
            fmt += 2;
        } else if (strncmp(fmt, "zu", 2) == 0) {
            put_decimal(t, va_arg(ap, size_t), false);
            fmt++;
        } else if (*fmt == '%') {
            put(t, "%", 1);
        } else {
            abort();
        }
        fmt++;
    }
    va_end(ap);
}

void
text_puts(struct text *t, const char *s)
{
    put(t, s, strlen(s));
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
