/* SPDX-License-Identifier: Apache-2.0 */
/*
 * audit.h: the money invariant, checked from the store (and the remote
 * wallet's unresolved holds): `roomctl wallet audit [--app A]`. Read audit.c.
 */
#ifndef ROOMD_WALLET_AUDIT_H
#define ROOMD_WALLET_AUDIT_H

#include <stddef.h>
#include <stdio.h>

struct conf_wallet;
struct store;
struct wallet;

/*
 * Checks app ("" or NULL = every app) and prints one line per offence to
 * out ("<app> <command_id> <what>"), then a summary line. Embedded ledger:
 * every committed SendGift has exactly one standing debit of exactly
 * count*unit_price by its sender; no debit stands without its gift; and per
 * app, sum of balances + standing debits = accounts x initial_balance +
 * top-ups. Remote wallet (w a grpc wallet): no hold is older than
 * cfg->reconcile_after (the reconciler settles every one before that).
 * Returns 0 and *offences, or ROOMD_EUNAVAIL (store or wallet unreachable,
 * with a line on out). Thread: any. Blocks.
 */
int wallet_audit(struct store *store, const struct conf_wallet *cfg, struct wallet *w,
                 const char *app, FILE *out, size_t *offences);

#endif
