/*
 * wallet_embedded.h: the embedded wallet (wallet_embedded.c), the ledger in
 * the store's wallet tables. Opened through wallet_open (wallet.h); this
 * header adds what only it has: its debit batching figures.
 */
#ifndef ROOMD_WALLET_EMBEDDED_H
#define ROOMD_WALLET_EMBEDDED_H

#include <stdint.h>

struct conf_wallet;
struct store;
struct wallet;

/* Starts the debit committer thread. Borrows store. Returns 0 and *out, or
 * ROOMD_EINTERNAL (no thread). Thread: main. Use wallet_open. */
int wallet_embedded_open(struct wallet **out, const struct conf_wallet *cfg, struct store *store);

/* Debit transactions committed and debits in them so far (tests, bench).
 * w must be an embedded wallet. Thread: any. */
void wallet_embedded_stats(struct wallet *w, uint64_t *batches, uint64_t *debits);

#endif
