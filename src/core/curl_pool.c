/* SPDX-License-Identifier: Apache-2.0 */
/*
 * curl_pool.c: see curl_pool.h. curl_global_init/cleanup are reference
 * counted here so every pool user shares one global state.
 */
#include "core/curl_pool.h"

#include "core/xmalloc.h"

#include <stdlib.h>
#include <string.h>

static pthread_mutex_t global_mu = PTHREAD_MUTEX_INITIALIZER;
static int global_users;

void
curl_pool_init(struct curl_pool *p)
{
    p->idle = NULL;
    p->n = p->cap = 0;
    pthread_mutex_init(&p->mu, NULL);
    pthread_mutex_lock(&global_mu);
    if (global_users++ == 0)
        curl_global_init(CURL_GLOBAL_DEFAULT);
    pthread_mutex_unlock(&global_mu);
}

void
curl_pool_destroy(struct curl_pool *p)
{
    for (size_t i = 0; i < p->n; i++)
        curl_easy_cleanup(p->idle[i]);
    free(p->idle);
    p->idle = NULL;
    p->n = p->cap = 0;
    pthread_mutex_destroy(&p->mu);
    pthread_mutex_lock(&global_mu);
    if (--global_users == 0)
        curl_global_cleanup();
    pthread_mutex_unlock(&global_mu);
}

CURL *
curl_pool_take(struct curl_pool *p)
{
    CURL *h = NULL;

    pthread_mutex_lock(&p->mu);
    if (p->n > 0)
        h = p->idle[--p->n];
    pthread_mutex_unlock(&p->mu);
    return h != NULL ? h : curl_easy_init();
}

void
curl_pool_give(struct curl_pool *p, CURL *h)
{
    pthread_mutex_lock(&p->mu);
    p->idle = xgrow(p->idle, p->n, &p->cap, sizeof(*p->idle));
    p->idle[p->n++] = h;
    pthread_mutex_unlock(&p->mu);
}

size_t
curl_body_write(char *data, size_t size, size_t nmemb, void *arg)
{
    struct curl_body *b = arg;
    size_t add = size * nmemb;

    if (b->n + add > b->max)
        return 0; /* curl fails the call with a write error */
    b->p = xrealloc(b->p, b->n + add + 1);
    memcpy(b->p + b->n, data, add);
    b->n += add;
    b->p[b->n] = '\0';
    return add;
}
