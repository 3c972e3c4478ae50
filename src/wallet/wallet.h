/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wallet.h: the wallet a SendGift is paid from. One interface, one file per
 * implementation: wallet_embedded.c keeps balances in the store's wallet
 * tables and debits inside the gift's own commit (attach(): development and
 * single-service deployments); wallet_grpc.c holds
 * the amount in a remote wallet service (proto/wallet.proto, docs/wallet.md)
 * with try-confirm-cancel: hold() before the commit, Confirm as an outbox
 * side effect of the committed gift (publish/sink_wallet.c), Cancel from
 * settle() when the gift did not commit, and a reconciler (reconcile.c) for
 * the holds a crash left behind.
 *
 * Every call is idempotent by (app, command_id) and bound to the request
 * (wallet_gift.digest): the same key with another request never charges.
 * Threads: any, concurrently. Every call blocks.
 */
#ifndef ROOMD_WALLET_H
#define ROOMD_WALLET_H

#include <stddef.h>
#include <stdint.h>

struct conf_wallet;
struct store;

struct wallet;

/* One gift's payment, keyed by (app, command_id). */
struct wallet_gift {
    const char *app, *room_id, *command_id; /* borrowed */
    int64_t uid, amount;                    /* the sender pays amount > 0 */
    char digest[65]; /* hex SHA-256 of the canonical request (wallet_request_digest) */
};

/* How a gift ended, for settle(). */
enum wallet_outcome {
    WALLET_COMMITTED, /* the gift is in the command log */
    WALLET_REFUSED,   /* it was refused or its commit failed: nothing committed */
    WALLET_UNKNOWN,   /* the store could not tell: the reconciler decides from the log later */
};

struct wallet_debit;

struct wallet_ops {
    /* Embedded only (NULL otherwise): fills *d, the gift's debit that
     * store_save writes inside the gift's transaction (mutation.debit). */
    void (*attach)(struct wallet *w, const struct wallet_gift *g, struct wallet_debit *d);
    /* Remote only (NULL otherwise): takes g->amount from g->uid for this gift, before its commit.
     * Returns 0 (and *balance_after; also for a repeated identical request),
     * ROOMD_EFUNDS (nothing taken), ROOMD_EREUSED (the key belongs to
     * another request, or was cancelled), ROOMD_EEXPIRED (this very request
     * was confirmed before: its gift committed; nothing held now),
     * ROOMD_EUNAVAIL (outcome unknown: the caller settles WALLET_REFUSED). */
    int (*hold)(struct wallet *w, const struct wallet_gift *g, int64_t *balance_after);
    /* Remote only, after hold() returned anything but EFUNDS/EREUSED: ends
     * the hold. REFUSED cancels it (left to the reconciler when the wallet
     * is down); COMMITTED and UNKNOWN change nothing here (Confirm is the
     * outbox's, UNKNOWN the reconciler's). */
    void (*settle)(struct wallet *w, const struct wallet_gift *g, enum wallet_outcome o);
    /* Development ledger (embedded only; grpc answers ROOMD_ENOTFOUND). */
    int (*topup)(struct wallet *w, const char *app, int64_t uid, int64_t amount, const char *ref_id,
                 int64_t *balance_after);
    int (*balance)(struct wallet *w, const char *app, int64_t uid, int64_t *balance);
    /* Releases what the backend holds (NULL: nothing); wallet_close then
     * frees the handle, the first member of the backend's malloc'd struct. */
    void (*close)(struct wallet *w);
};

struct wallet {
    const struct wallet_ops *ops;
};

/* The remote backend's operations (wallet_grpc.c names them grpc_<op>; the
 * embedded one has attach, topup and balance alone). */
#define WALLET_REMOTE_OPS(X)                                                                       \
    X(hold)                                                                                        \
    X(settle)                                                                                      \
    X(topup)                                                                                       \
    X(balance)                                                                                     \
    X(close)

/* Opens the wallet named by cfg->driver ("embedded" | "grpc"). Borrows store,
 * which must outlive the wallet. Returns 0 and *out, or ROOMD_EINVAL (unknown
 * driver) / ROOMD_EINTERNAL with err. Thread: main. */
int wallet_open(struct wallet **out, const struct conf_wallet *cfg, struct store *store, char *err,
                size_t errlen);
/* ops->close, then frees w. NULL is a no-op. Thread: main. */
void wallet_close(struct wallet *w);

/* Writes the hex SHA-256 of request (a canonical request JSON; a "rules"
 * member recorded by the command log is left out) to out. Thread: any. */
void wallet_request_digest(const char *request, char out[65]);

/* Fills g for a SendGift (strings borrowed; digest of request). */
void wallet_gift_init(struct wallet_gift *g, const char *app, const char *room_id,
                      const char *command_id, int64_t uid, int64_t amount, const char *request);

#endif
