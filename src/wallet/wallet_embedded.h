/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wallet_embedded.h: the embedded wallet (wallet_embedded.c), the ledger in
 * the store's wallet tables. Opened through wallet_open (wallet.h).
 */
#ifndef ROOMD_WALLET_EMBEDDED_H
#define ROOMD_WALLET_EMBEDDED_H

struct conf_wallet;
struct store;
struct wallet;

/* Borrows store. Returns 0 and *out. Thread: main. Use wallet_open. */
int wallet_embedded_open(struct wallet **out, const struct conf_wallet *cfg, struct store *store);

#endif
