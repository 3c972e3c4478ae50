/* SPDX-License-Identifier: Apache-2.0 */
/*
 * reconcile.h: the remote wallet's reconciler (wallet.driver: grpc). A hold
 * older than wallet.reconcile_after is resolved against the command log:
 * its gift committed (a SendGift under the key with the same request
 * digest) -> Confirm; nothing committed under the key, or another request,
 * and no command of this process in flight on it -> Cancel. A command gives
 * up on its hold at half of reconcile_after (room/service.c), so no hold
 * the reconciler sees is still about to commit. Read reconcile.c.
 */
#ifndef ROOMD_WALLET_RECONCILE_H
#define ROOMD_WALLET_RECONCILE_H

#include <stddef.h>
#include <stdint.h>

struct store;
struct wallet;
struct wallet_reconciler;

struct reconcile_stats {
    size_t seen, confirmed, cancelled, skipped, failed;
};

/* One pass: lists the holds of every app older than now - after_ms and
 * resolves each. Returns 0 (see *st) or ROOMD_EUNAVAIL (the wallet could
 * not list). w must be a grpc wallet; store borrowed. Thread: any. Blocks. */
int wallet_reconcile_pass(struct wallet *w, struct store *store, int64_t after_ms,
                          struct reconcile_stats *st);

/* Starts a thread running a pass every after_ms / 2 (200 ms .. 30 s).
 * Borrows w and store until stop. Returns 0 and *out, or ROOMD_EINTERNAL.
 * Thread: main. */
int wallet_reconcile_start(struct wallet_reconciler **out, struct wallet *w, struct store *store,
                           int64_t after_ms);
/* Stops and joins the thread; NULL is a no-op. Thread: main. */
void wallet_reconcile_stop(struct wallet_reconciler *r);

#endif
