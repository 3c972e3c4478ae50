/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sink_wallet.h: the remote wallet's Confirm as an outbox side effect
 * (SINK_BIT_WALLET): each committed RoomGiftSent row is confirmed once it
 * committed, delivered at least once (Confirm is idempotent). Read
 * sink_wallet.c and docs/wallet.md.
 */
#ifndef ROOMD_SINK_WALLET_H
#define ROOMD_SINK_WALLET_H

struct sink;
struct wallet;

/* Opens the sink on w (a grpc wallet, borrowed: it must outlive the outbox
 * worker). Returns 0 and *out (the outbox worker owns it). Thread: main. */
int sink_wallet_open(struct sink **out, struct wallet *w);

#endif
