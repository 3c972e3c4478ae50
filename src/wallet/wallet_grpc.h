/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wallet_grpc.h: the remote wallet (wallet.driver: grpc), a client of
 * /wallet.v1.WalletService (proto/wallet.proto, docs/wallet.md). Opened
 * through wallet_open (wallet.h); this header adds what only it has: the
 * Confirm the outbox sends (publish/sink_wallet.c), the unresolved holds
 * and the in-flight check the reconciler (reconcile.c) and
 * `roomctl wallet audit` use.
 */
#ifndef ROOMD_WALLET_GRPC_H
#define ROOMD_WALLET_GRPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

struct conf_wallet;
struct wallet;

/* An unresolved hold (ListUnresolved). */
struct wallet_hold {
    char app_code[STORE_ID_MAX];
    char command_id[STORE_ID_MAX];
    char room_id[STORE_ID_MAX];
    int64_t uid, amount;
    char digest[65];
    int64_t created_at_ms;
};

/* Opens the channel to cfg->grpc_target. Returns 0 and *out, or
 * ROOMD_EINVAL/EINTERNAL with err. Thread: main. Use wallet_open. */
int wallet_grpc_open(struct wallet **out, const struct conf_wallet *cfg, char *err, size_t errlen);

/* True when w is a grpc wallet. */
bool wallet_is_grpc(const struct wallet *w);

/*
 * Confirm of (app, command_id) (the gift committed). Returns 0 (confirmed,
 * also again), ROOMD_EUNAVAIL (the wallet does not answer), ROOMD_ERETRY
 * (it answered "not now"), both retried by the outbox, or
 * ROOMD_EPERM (the wallet refuses: the hold was cancelled or never taken;
 * the money invariant is broken for this gift and `roomctl wallet audit`
 * reports it), with err (no secrets). Blocks until deadline_mono_ms at most.
 * w must be a grpc wallet. Thread: any.
 */
int wallet_grpc_confirm(struct wallet *w, const char *app, const char *command_id,
                        int64_t deadline_mono_ms, char *err, size_t errlen);
/* Cancel of (app, command_id): 0 (cancelled, also again), ROOMD_EUNAVAIL,
 * ROOMD_ERETRY, ROOMD_EPERM (it was confirmed). Same threads and blocking. */
int wallet_grpc_cancel(struct wallet *w, const char *app, const char *command_id, char *err,
                       size_t errlen);

/* Lists up to limit holds of app ("" = all) taken before older_than_ms (wall
 * time), oldest first. *out is malloc'd (free it), *n its count. 0 or
 * ROOMD_EUNAVAIL with err. Thread: any. Blocks. */
int wallet_grpc_unresolved(struct wallet *w, const char *app, int64_t older_than_ms, int limit,
                           struct wallet_hold **out, size_t *n, char *err, size_t errlen);

/* True while this process has a command between its hold and its settle
 * for (app, command_id): the reconciler leaves that hold alone. */
bool wallet_grpc_in_flight(struct wallet *w, const char *app, const char *command_id);

#endif
