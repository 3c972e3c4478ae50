/* SPDX-License-Identifier: Apache-2.0 */
/*
 * reconcile.c: the reconciler of the remote wallet (reconcile.h): a pass
 * asks the wallet for its holds older than reconcile_after
 * (ListUnresolved) and settles each from the command log, the authority on
 * whether a gift happened. A thread runs a pass periodically.
 */
#include "wallet/reconcile.h"

#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/thread.h"
#include "core/xmalloc.h"
#include "store/store.h"
#include "wallet/wallet.h"
#include "wallet/wallet_grpc.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define PASS_LIMIT 500

struct wallet_reconciler {
    struct wallet *w;
    struct store *store;
    int64_t after_ms, period_ms;
    struct bg_thread thread; /* core/thread.c */
};

/* True when the log row is the gift this hold pays for. */
static bool
is_its_gift(const struct command_record *rec, const struct wallet_hold *h)
{
    char digest[65];

    if (rec->command_type == NULL || strcmp(rec->command_type, "SendGift") != 0 ||
        rec->request == NULL)
        return false;
    wallet_request_digest(rec->request, digest);
    return strcmp(digest, h->digest) == 0;
}

/* Settles one hold; counts it in *st. */
static void
resolve_one(struct wallet *w, struct store *store, const struct wallet_hold *h,
            struct reconcile_stats *st)
{
    struct command_record rec;
    bool commit;
    char err[320] = "";
    int rc;

    if (wallet_grpc_in_flight(w, h->app_code, h->command_id)) {
        st->skipped++;
        return;
    }
    memset(&rec, 0, sizeof(rec));
    rc = store_find_command(store, h->app_code, h->command_id, &rec);
    if (rc != 0 && rc != ROOMD_ENOTFOUND) {
        st->failed++;
        log_warn("wallet", "reconcile: command log unavailable", "app=%s command_id=%s rc=%s",
                 h->app_code, h->command_id, roomd_strerror(rc));
        return;
    }
    commit = rc == 0 && is_its_gift(&rec, h);
    command_record_clear(&rec);
    if (commit)
        rc = wallet_grpc_confirm(w, h->app_code, h->command_id, clock_mono_ms() + 5000, err,
                                 sizeof(err));
    else
        rc = wallet_grpc_cancel(w, h->app_code, h->command_id, err, sizeof(err));
    if (rc != 0) {
        st->failed++;
        log_warn("wallet", "reconcile: resolve failed", "app=%s command_id=%s action=%s err=\"%s\"",
                 h->app_code, h->command_id, commit ? "confirm" : "cancel", err);
        return;
    }
    if (commit)
        st->confirmed++;
    else
        st->cancelled++;
    log_info("wallet", "reconciled", "app=%s command_id=%s uid=%lld amount=%lld action=%s",
             h->app_code, h->command_id, (long long)h->uid, (long long)h->amount,
             commit ? "confirm" : "cancel");
}

int
wallet_reconcile_pass(struct wallet *w, struct store *store, int64_t after_ms,
                      struct reconcile_stats *st)
{
    struct wallet_hold *holds = NULL;
    size_t n = 0;
    char err[320];

    memset(st, 0, sizeof(*st));
    if (wallet_grpc_unresolved(w, "", clock_wall_ms() - after_ms, PASS_LIMIT, &holds, &n, err,
                               sizeof(err)) != 0) {
        log_warn("wallet", "reconcile: cannot list holds", "err=\"%s\"", err);
        return ROOMD_EUNAVAIL;
    }
    for (size_t i = 0; i < n; i++) {
        st->seen++;
        resolve_one(w, store, &holds[i], st);
    }
    free(holds);
    return 0;
}

static void *
reconcile_main(void *arg)
{
    struct wallet_reconciler *r = arg;
    struct reconcile_stats st;

    do
        wallet_reconcile_pass(r->w, r->store, r->after_ms, &st);
    while (!bg_thread_sleep(&r->thread, r->period_ms));
    return NULL;
}

int
wallet_reconcile_start(struct wallet_reconciler **out, struct wallet *w, struct store *store,
                       int64_t after_ms)
{
    struct wallet_reconciler *r = xcalloc(1, sizeof(*r));

    r->w = w;
    r->store = store;
    r->after_ms = after_ms;
    r->period_ms = after_ms / 2 < 200 ? 200 : after_ms / 2 > 30000 ? 30000 : after_ms / 2;
    *out = bg_thread_start_owner(&r->thread, reconcile_main, r);
    return *out != NULL ? 0 : ROOMD_EINTERNAL;
}

void
wallet_reconcile_stop(struct wallet_reconciler *r)
{
    if (r != NULL)
        bg_thread_stop_free(&r->thread, r);
}
