/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sink_wallet.c: Confirm of a committed gift's hold (wallet.driver: grpc).
 * The RoomGiftSent row is written in the gift's own transaction, so a
 * Confirm goes out exactly when the gift committed; the outbox retries it
 * until the wallet answers (at least once; Confirm is idempotent by
 * (app_code, command_id)). A wallet that refuses (the hold was cancelled)
 * fails the row at once: `roomctl wallet audit` reports that gift.
 */
#include "publish/sink_wallet.h"

#include "core/xmalloc.h"
#include "publish/sink.h"
#include "store/store.h"
#include "wallet/wallet_grpc.h"

#include <string.h>

struct sink_wallet {
    struct sink base; /* first: the worker sees a struct sink * */
    struct wallet *w; /* borrowed */
};

static int
wallet_publish(struct sink *s, const struct outbox_event *ev, int64_t deadline, char *err,
               size_t errlen)
{
    struct sink_wallet *sw = (struct sink_wallet *)s;

    return wallet_grpc_confirm(sw->w, ev->row->app_code, ev->row->command_id, deadline, err,
                               errlen);
}

int
sink_wallet_open(struct sink **out, struct wallet *w)
{
    struct sink_wallet *sw = xcalloc(1, sizeof(*sw));

    sw->w = w;
    /* no_json: reads the row only */
    *out = sink_init(&sw->base, "wallet", SINK_BIT_WALLET, sink_accepts_carried, wallet_publish,
                     sink_free, true);
    return 0;
}
