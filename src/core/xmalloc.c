/* SPDX-License-Identifier: Apache-2.0 */
/* xmalloc.c: abort-on-OOM allocation helpers (see xmalloc.h). */
#include "core/xmalloc.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void
oom(size_t n)
{
    fprintf(stderr, "roomd: out of memory allocating %zu bytes\n", n);
    abort();
}

void *
xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);

    if (p == NULL)
        oom(n);
    return p;
}

void *
xcalloc(size_t nmemb, size_t size)
{
    void *p = calloc(nmemb ? nmemb : 1, size ? size : 1);

    if (p == NULL)
        oom(nmemb * size);
    return p;
}

void *
xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);

    if (q == NULL)
        oom(n);
    return q;
}

void *
xgrow(void *arr, size_t n, size_t *cap, size_t size)
{
    if (n < *cap)
        return arr;
    *cap = *cap ? *cap * 2 : 16;
    return xrealloc(arr, *cap * size);
}

char *
xstrdup(const char *s)
{
    return s ? xstrndup(s, strlen(s)) : NULL;
}

char *
xstrndup(const char *s, size_t n)
{
    char *p = xmalloc(n + 1);

    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

void *
xmemdup(const void *p, size_t n)
{
    return n > 0 ? memcpy(xmalloc(n), p, n) : NULL;
}

char *
xasprintf(const char *fmt, ...)
{
    va_list ap;
    char *p;
    int n;

    va_start(ap, fmt);
    n = vasprintf(&p, fmt, ap);
    va_end(ap);
    if (n < 0)
        oom(0);
    return p;
}

size_t
strlcpy_(char *dst, const char *src, size_t len)
{
    size_t n = strlen(src);

    if (len > 0) {
        size_t c = n < len - 1 ? n : len - 1;
        memcpy(dst, src, c);
        dst[c] = '\0';
    }
    return n;
}
