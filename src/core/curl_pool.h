/* SPDX-License-Identifier: Apache-2.0 */
/*
 * curl_pool.h: idle libcurl easy handles kept for reuse. Each handle keeps
 * its own connection cache, so a handle taken again reuses a keep-alive
 * connection to a host it talked to before. Used by the Tencent IM client
 * (publish/tim_client.c) and the forwarder (cluster/forward.c).
 */
#ifndef ROOMD_CORE_CURL_POOL_H
#define ROOMD_CORE_CURL_POOL_H

#include <curl/curl.h>
#include <pthread.h>
#include <stddef.h>

struct curl_pool {
    pthread_mutex_t mu;
    CURL **idle;
    size_t n, cap;
};

/* Initializes an empty pool and takes a reference on curl_global_init.
 * Thread: any (before the pool is shared). */
void curl_pool_init(struct curl_pool *p);
/* Cleans every idle handle and drops the global reference. No handle may be
 * taken. Thread: any (after the pool's users stopped). */
void curl_pool_destroy(struct curl_pool *p);
/* Returns an idle handle (or a new one; NULL when curl cannot make one). The
 * caller owns it until curl_pool_give. Thread: any, does not block. */
CURL *curl_pool_take(struct curl_pool *p);
/* Gives h back (ownership passes to the pool). Thread: any. */
void curl_pool_give(struct curl_pool *p, CURL *h);

/* A response body collected by curl_body_write (CURLOPT_WRITEDATA = the
 * struct): p is malloc'd and NUL-terminated (the caller frees it); a body
 * above max bytes fails the transfer with a write error. */
struct curl_body {
    char *p;
    size_t n;
    size_t max;
};
/* CURLOPT_WRITEFUNCTION for a struct curl_body. Thread: curl's caller. */
size_t curl_body_write(char *data, size_t size, size_t nmemb, void *arg);

#endif
