/*
 * wallet.h: the wallet SendGift debits before its commit. One interface,
 * one file per implementation: wallet_embedded.c keeps balances in the
 * store's wallet tables (development and single-service deployments); a
 * remote wallet service would be another file behind the same ops.
 *
 * Every call is idempotent by ref_id (the command_id): repeating a debit
 * never charges twice. Threads: any, concurrently. Every call blocks.
 */
#ifndef ROOMD_WALLET_H
#define ROOMD_WALLET_H

#include <stdint.h>

struct conf_wallet;
struct store;

struct wallet;

struct wallet_ops {
    /* Debits amount from uid. 0 (and *balance_after), ROOMD_EFUNDS (nothing
     * charged), ROOMD_EUNAVAIL. */
    int (*debit)(struct wallet *w, const char *app, int64_t uid, int64_t amount, const char *ref_id,
                 int64_t *balance_after);
    /* Reverses debit ref_id (the commit after it failed). 0 or ENOTFOUND. */
    int (*refund)(struct wallet *w, const char *app, const char *ref_id);
    int (*topup)(struct wallet *w, const char *app, int64_t uid, int64_t amount, const char *ref_id,
                 int64_t *balance_after);
    int (*balance)(struct wallet *w, const char *app, int64_t uid, int64_t *balance);
    void (*close)(struct wallet *w);
};

struct wallet {
    const struct wallet_ops *ops;
};

/* Opens the wallet named by cfg->driver ("embedded"). Borrows store, which
 * must outlive the wallet. Returns 0 and *out, or ROOMD_EINVAL. */
int wallet_open(struct wallet **out, const struct conf_wallet *cfg, struct store *store);
void wallet_close(struct wallet *w);

#endif
