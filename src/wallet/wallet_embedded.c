/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wallet_embedded.c: the wallet kept in the store's wallet_accounts and
 * wallet_ledger tables. A gift's debit is not a call of its own: attach()
 * puts it into the gift's mutation, and store_save writes it as a statement
 * of the gift's own transaction, in its savepoint, right after the command
 * log row claimed the command_id (store.h: mutation.debit). So the debit
 * commits exactly when its gift does: no separate debit transaction, no
 * refund. A never-seen account starts at wallet.initial_balance. Top-up and
 * balance call the store.
 */
#include "wallet/wallet_embedded.h"

#include "conf/conf.h"
#include "core/xmalloc.h"
#include "store/store.h"
#include "wallet/wallet.h"

#include <stddef.h>
#include <string.h>

struct embedded {
    struct wallet super;
    struct store *store; /* borrowed */
    int64_t initial_balance;
};
_Static_assert(offsetof(struct embedded, super) == 0, "wallet_close frees the handle");

static void
emb_attach(struct wallet *w, const struct wallet_gift *g, struct wallet_debit *d)
{
    struct embedded *e = (struct embedded *)w;

    memset(d, 0, sizeof(*d));
    d->app = g->app;
    d->ref_id = g->command_id;
    d->uid = g->uid;
    d->amount = g->amount;
    d->initial_balance = e->initial_balance;
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

static const struct wallet_ops embedded_ops = {
    .attach = emb_attach,
    .topup = emb_topup,
    .balance = emb_balance,
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
