/* SPDX-License-Identifier: Apache-2.0 */
/*
 * xmalloc.h: allocation that aborts on out-of-memory (as Redis' zmalloc and
 * h2o_mem_alloc do), so callers never handle NULL from these.
 * Thread: any.
 */
#ifndef ROOMD_XMALLOC_H
#define ROOMD_XMALLOC_H

#include <stddef.h>

void *xmalloc(size_t n);
void *xcalloc(size_t nmemb, size_t size);
void *xrealloc(void *p, size_t n);
/* Returns a malloc'd copy of s; xstrdup(NULL) returns NULL. */
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
/* Returns a malloc'd copy of the n bytes at p, or NULL when n is 0 (p may
 * then be NULL): an array's copy, NULL when empty. */
void *xmemdup(const void *p, size_t n);
/* Returns a malloc'd formatted string. */
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Returns arr (*cap elements of size bytes) with room for element n: when
 * n == *cap it is reallocated with *cap doubled (16 the first time). Growing
 * arrays: a = xgrow(a, n, &cap, sizeof(*a)); a[n++] = v; */
void *xgrow(void *arr, size_t n, size_t *cap, size_t size);
/* Copies src into dst[len] always NUL-terminating; returns strlen(src). */
size_t strlcpy_(char *dst, const char *src, size_t len);

#endif
