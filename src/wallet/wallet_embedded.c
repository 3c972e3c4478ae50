/*
 * wallet_embedded.c: the wallet kept in the store's wallet_accounts and
 * wallet_ledger tables (store_wallet_* in store.h; SQL in each backend).
 * A never-seen account starts at wallet.initial_balance.
 */
#include "wallet/wallet.h"

#include "conf/conf.h"
#include "core/xmalloc.h"
#include "store/store.h"

#include <stdlib.h>

int wallet_embedded_open(struct wallet **out, const struct conf_wallet *cfg, struct store *store);

struct embedded {
    struct wallet super;
    struct store *store; /* borrowed */
    int64_t initial_balance;
};

static int
emb_debit(struct wallet *w, const char *app, int64_t uid, int64_t amount, const char *ref_id,
          int64_t *balance_after)
{
    struct embedded *e = (struct embedded *)w;

    return store_wallet_debit(e->store, app, uid, amount, ref_id, e->initial_balance,
                              balance_after);
}

static int
emb_refund(struct wallet *w, const char *app, const char *ref_id)
{
    struct embedded *e = (struct embedded *)w;

    return store_wallet_refund(e->store, app, ref_id);
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

static void
emb_close(struct wallet *w)
{
    free(w);
}

static const struct wallet_ops embedded_ops = {
    .debit = emb_debit,
    .refund = emb_refund,
    .topup = emb_topup,
    .balance = emb_balance,
    .close = emb_close,
};

int
wallet_embedded_open(struct wallet **out, const struct conf_wallet *cfg, struct store *store)
{
    struct embedded *e = xcalloc(1, sizeof(*e));

    e->super.ops = &embedded_ops;
    e->store = store;
    e->initial_balance = cfg->initial_balance;
    *out = &e->super;
    return 0;
}
