/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mysql/share.c: one client per database (internal.h, docs/store.md): the
 * process's registry of pools, which the admin store and the consumer
 * inboxes share with the open store of the same database
 * (mys_pool_share), and the text statements they run (mys_text).
 */
#include "store/mysql/internal.h"

#include "conf/conf.h"
#include "core/xmalloc.h"
#include "store/inbox.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void
text_arg(FILE *t, const struct consume_arg *a)
{
    if (a->type == 'i') {
        fprintf(t, "%" PRId64, a->i);
    } else if (a->s == NULL) {
        fputs("NULL", t);
    } else {
        size_t n = strlen(a->s);
        char *esc = xmalloc(2 * n + 1);
        unsigned long k = mysql_escape_string(esc, a->s, (unsigned long)n);

        fprintf(t, "'%.*s'", (int)k, esc);
        free(esc);
    }
}

char *
mys_text(const char *tmpl, const struct consume_arg *args, int nargs)
{
    char *p = NULL;
    size_t len = 0;
    FILE *t = open_memstream(&p, &len);
    int next = 0;

    if (t == NULL)
        abort(); /* out of memory, as xmalloc */
    for (const char *c = tmpl; *c; c++) {
        if (c[0] == '?' && c[1] >= '1' && c[1] <= '9' && c[1] - '1' < nargs) {
            text_arg(t, &args[c[1] - '1']);
            c++;
        } else if (c[0] == '?' && next < nargs) {
            text_arg(t, &args[next++]);
        } else {
            fputc(*c, t);
        }
    }
    fclose(t);
    return p;
}

/* The registry: the process's pools, the stores' first (mys_pool_share
 * picks the first that matches). */
static pthread_mutex_t pools_mu = PTHREAD_MUTEX_INITIALIZER;
static struct mstore *pools;

static bool
str_eq(const char *a, const char *b)
{
    return a == b || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

/* True when a and b reach the same database as the same user. */
static bool
same_db(const struct mstore *a, const struct mstore *b)
{
    if (a->nhosts != b->nhosts || !str_eq(a->socket, b->socket) || !str_eq(a->user, b->user) ||
        !str_eq(a->password, b->password) || !str_eq(a->database, b->database))
        return false;
    for (int i = 0; i < a->nhosts; i++)
        if (a->hosts[i].port != b->hosts[i].port || !str_eq(a->hosts[i].host, b->hosts[i].host))
            return false;
    return true;
}

/* Registers s: first (a store's) or last (a sharers' pool). Under pools_mu. */
static void
pools_add(struct mstore *s, bool first)
{
    struct mstore **p = &pools;

    while (!first && *p != NULL)
        p = &(*p)->next;
    s->next = *p;
    *p = s;
}

void
mys_pool_release(struct mstore *s, bool sharer)
{
    if (s == NULL)
        return;
    pthread_mutex_lock(&pools_mu);
    if (sharer) { /* its connection stays in the pool, idle, for the next sharer */
        pthread_mutex_lock(&s->mu);
        s->shares--;
        pthread_mutex_unlock(&s->mu);
    }
    if (--s->refs > 0) {
        pthread_mutex_unlock(&pools_mu);
        return;
    }
    for (struct mstore **p = &pools; *p != NULL; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            break;
        }
    pthread_mutex_unlock(&pools_mu);
    mys_pool_free(s);
}

int
mys_pool_share(const struct conf_store *cs, struct mstore **out, char *err, size_t errlen)
{
    struct mstore *mine, *s;
    int rc = mys_pool_new(&mine, &cs->mysql, 0, err, errlen);

    *out = NULL;
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&pools_mu);
    for (s = pools; s != NULL && !same_db(s, mine); s = s->next)
        ;
    if (s == NULL)
        pools_add(s = mine, false);
    else
        s->refs++;
    pthread_mutex_unlock(&pools_mu);
    if (s != mine)
        mys_pool_free(mine);
    /* the caller's connection: the pool grows by one while it shares */
    pthread_mutex_lock(&s->mu);
    s->shares++;
    if (s->nconns < s->cap && s->nconns < s->base + s->shares) {
        s->freelist[s->nfree++] = s->nconns++;
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    *out = s;
    return 0;
}

void
mys_pool_register(struct mstore *s)
{
    pthread_mutex_lock(&pools_mu);
    pools_add(s, true);
    pthread_mutex_unlock(&pools_mu);
}
