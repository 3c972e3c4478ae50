/*
 * wallet_embedded.c: the wallet kept in the store's wallet_accounts and
 * wallet_ledger tables (store_wallet_* in store.h; SQL in each backend).
 * A never-seen account starts at wallet.initial_balance. Debits go through
 * one committer thread, as commits do in store/group_commit.c: callers queue
 * and block; it applies everything queued in ONE store transaction
 * (store_wallet_debit_many), so N debits cost one fsync. Refund, topup and
 * balance call the store directly.
 */
#include "wallet/wallet_embedded.h"

#include "conf/conf.h"
#include "core/err.h"
#include "core/log.h"
#include "core/xmalloc.h"
#include "store/store.h"
#include "wallet/wallet.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#define MAX_BATCH 256

/* A caller of emb_hold, queued until its debit's transaction ended. */
struct waiter {
    struct wallet_debit d;
    bool done;
    char err[256]; /* the batch's failure text, for the caller's thread */
    pthread_cond_t cond;
    struct waiter *next;
};

struct embedded {
    struct wallet super;
    struct store *store; /* borrowed */
    int64_t initial_balance;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t work;        /* signalled when the queue gets a waiter or on close */
    struct waiter *head, *tail; /* FIFO of queued debits */
    bool closing;
    uint64_t batches, debits;
};

/* The committer: takes up to MAX_BATCH queued debits, applies them in one
 * transaction, wakes each caller; meanwhile new callers form the next batch. */
static void *
committer(void *arg)
{
    struct embedded *e = arg;
    struct wallet_debit *items = xcalloc(MAX_BATCH, sizeof(*items));
    struct waiter **ws = xcalloc(MAX_BATCH, sizeof(*ws));

    pthread_mutex_lock(&e->lock);
    for (;;) {
        size_t n = 0;

        while (e->head == NULL && !e->closing)
            pthread_cond_wait(&e->work, &e->lock);
        if (e->head == NULL) /* closing and drained */
            break;
        while (e->head != NULL && n < MAX_BATCH) {
            struct waiter *w = e->head;

            e->head = w->next;
            if (e->head == NULL)
                e->tail = NULL;
            ws[n] = w;
            items[n++] = w->d;
        }
        pthread_mutex_unlock(&e->lock);

        int rc = store_wallet_debit_many(e->store, items, n, e->initial_balance);
        if (rc != 0)
            log_warn("wallet", "debit batch failed", "debits=%zu rc=%s err=\"%s\"", n,
                     roomd_strerror(rc), store_errmsg());

        pthread_mutex_lock(&e->lock);
        e->batches++;
        e->debits += n;
        for (size_t i = 0; i < n; i++) {
            ws[i]->d.rc = items[i].rc;
            ws[i]->d.balance_after = items[i].balance_after;
            if (rc != 0)
                strlcpy_(ws[i]->err, store_errmsg(), sizeof(ws[i]->err));
            ws[i]->done = true;
            pthread_cond_signal(&ws[i]->cond);
        }
    }
    pthread_mutex_unlock(&e->lock);
    free(items);
    free(ws);
    return NULL;
}

/* The hold is the debit: queued, blocking until the transaction holding it ended. */
static int
emb_hold(struct wallet *wl, const struct wallet_gift *g, int64_t *balance_after)
{
    struct embedded *e = (struct embedded *)wl;
    struct waiter w = {
        .d = {.app = g->app, .ref_id = g->command_id, .uid = g->uid, .amount = g->amount}};
    int64_t amount = g->amount;

    *balance_after = 0;
    pthread_cond_init(&w.cond, NULL);
    pthread_mutex_lock(&e->lock);
    if (e->closing) {
        pthread_mutex_unlock(&e->lock);
        pthread_cond_destroy(&w.cond);
        store_set_errmsg("wallet is closing");
        return ROOMD_EUNAVAIL;
    }
    if (e->tail != NULL)
        e->tail->next = &w;
    else
        e->head = &w;
    e->tail = &w;
    pthread_cond_signal(&e->work);
    while (!w.done)
        pthread_cond_wait(&w.cond, &e->lock);
    pthread_mutex_unlock(&e->lock);
    pthread_cond_destroy(&w.cond);

    *balance_after = w.d.balance_after;
    if (w.d.rc == ROOMD_EFUNDS)
        store_set_errmsg("wallet: balance %lld < %lld", (long long)w.d.balance_after,
                         (long long)amount);
    else if (w.d.rc == ROOMD_EINVAL)
        store_set_errmsg("wallet debit: negative amount");
    else if (w.d.rc != 0)
        store_set_errmsg("%s", w.err);
    return w.d.rc;
}

/* A refused gift's debit is refunded. */
static void
emb_settle(struct wallet *w, const struct wallet_gift *g, enum wallet_outcome o)
{
    struct embedded *e = (struct embedded *)w;
    int rc;

    if (o != WALLET_REFUSED)
        return;
    if ((rc = store_wallet_refund(e->store, g->app, g->command_id)) != 0)
        log_error("wallet", "refund failed", "app=%s command_id=%s rc=%s", g->app, g->command_id,
                  roomd_strerror(rc));
}

static int
emb_topup(struct wallet *w, const char *app, int64_t uid, int64_t amount, const char *ref_id,
          int64_t *balance_after)
{
    struct embedded *e = (struct embedded *)w;

    return store_wallet_topup(e->store, app, uid, amount, ref_id, e->initial_balance,
                              balance_after);
}

static int
emb_balance(struct wallet *w, const char *app, int64_t uid, int64_t *balance)
{
    struct embedded *e = (struct embedded *)w;

    return store_wallet_balance(e->store, app, uid, e->initial_balance, balance);
}

/* Drains the queue (every queued debit is applied), stops and joins the committer. */
static void
emb_close(struct wallet *w)
{
    struct embedded *e = (struct embedded *)w;

    pthread_mutex_lock(&e->lock);
    e->closing = true;
    pthread_cond_signal(&e->work);
    pthread_mutex_unlock(&e->lock);
    pthread_join(e->thread, NULL);
    pthread_cond_destroy(&e->work);
    pthread_mutex_destroy(&e->lock);
    free(e);
}

static const struct wallet_ops embedded_ops = {
    .hold = emb_hold,
    .settle = emb_settle,
    .topup = emb_topup,
    .balance = emb_balance,
    .close = emb_close,
};

int
wallet_embedded_open(struct wallet **out, const struct conf_wallet *cfg, struct store *store)
{
    struct embedded *e = xcalloc(1, sizeof(*e));

    *out = NULL;
    e->super.ops = &embedded_ops;
    e->store = store;
    e->initial_balance = cfg->initial_balance;
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->work, NULL);
    if (pthread_create(&e->thread, NULL, committer, e) != 0) {
        pthread_cond_destroy(&e->work);
        pthread_mutex_destroy(&e->lock);
        free(e);
        return ROOMD_EINTERNAL;
    }
    *out = &e->super;
    return 0;
}

void
wallet_embedded_stats(struct wallet *w, uint64_t *batches, uint64_t *debits)
{
    struct embedded *e = (struct embedded *)w;

    pthread_mutex_lock(&e->lock);
    *batches = e->batches;
    *debits = e->debits;
    pthread_mutex_unlock(&e->lock);
}
