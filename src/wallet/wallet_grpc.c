/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wallet_grpc.c: the remote wallet over gRPC (wallet_grpc.h). hold() is
 * Try, settle(REFUSED) is Cancel; Confirm is sent by the outbox
 * (sink_wallet.c) once the gift committed. Each key (app, command_id) this
 * process holds and has not settled is in the in-flight set, which the
 * reconciler skips. One channel (peer/grpc_peer.c) for the process.
 */
#include "wallet/wallet_grpc.h"

#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/xmalloc.h"
#include "peer/grpc_peer.h"
#include "wallet.pb-c.h"
#include "wallet/wallet.h"

#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define M_TRY "/wallet.v1.WalletService/Try"
#define M_CONFIRM "/wallet.v1.WalletService/Confirm"
#define M_CANCEL "/wallet.v1.WalletService/Cancel"
#define M_LIST "/wallet.v1.WalletService/ListUnresolved"
#define LIST_TIMEOUT_MS 5000 /* ListUnresolved's deadline at least */
#define NBUCKETS 1024

/* One key in flight: held by a command of this process, not yet settled. */
struct flight {
    char key[2 * STORE_ID_MAX];
    struct flight *next;
};

struct wallet_grpc {
    struct wallet super;
    struct grpc_peer *peer;
    int64_t timeout_ms;
    pthread_mutex_t mu; /* the in-flight set */
    struct flight *buckets[NBUCKETS];
};
_Static_assert(offsetof(struct wallet_grpc, super) == 0, "wallet_close frees the handle");

static const struct wallet_ops grpc_ops;

/* ---- the in-flight set ------------------------------------------------------------- */

static struct flight **
flight_slot(struct wallet_grpc *g, const char *app, const char *command_id, char *key)
{
    uint32_t h = 2166136261u;
    struct flight **pp;

    snprintf(key, 2 * STORE_ID_MAX, "%s/%s", app, command_id);
    for (const char *p = key; *p; p++)
        h = (h ^ (uint8_t)*p) * 16777619u;
    pp = &g->buckets[h % NBUCKETS];
    while (*pp != NULL && strcmp((*pp)->key, key) != 0)
        pp = &(*pp)->next;
    return pp;
}

static void
flight_add(struct wallet_grpc *g, const char *app, const char *command_id)
{
    char key[2 * STORE_ID_MAX];
    struct flight **pp;

    pthread_mutex_lock(&g->mu);
    pp = flight_slot(g, app, command_id, key);
    if (*pp == NULL) {
        *pp = xcalloc(1, sizeof(**pp));
        strlcpy_((*pp)->key, key, sizeof((*pp)->key));
    }
    pthread_mutex_unlock(&g->mu);
}

static void
flight_remove(struct wallet_grpc *g, const char *app, const char *command_id)
{
    char key[2 * STORE_ID_MAX];
    struct flight **pp, *f;

    pthread_mutex_lock(&g->mu);
    pp = flight_slot(g, app, command_id, key);
    if ((f = *pp) != NULL) {
        *pp = f->next;
        free(f);
    }
    pthread_mutex_unlock(&g->mu);
}

bool
wallet_grpc_in_flight(struct wallet *w, const char *app, const char *command_id)
{
    struct wallet_grpc *g = (struct wallet_grpc *)w;
    char key[2 * STORE_ID_MAX];
    bool found;

    pthread_mutex_lock(&g->mu);
    found = *flight_slot(g, app, command_id, key) != NULL;
    pthread_mutex_unlock(&g->mu);
    return found;
}

/* ---- calls --------------------------------------------------------------------------- */

/* Packs m, calls method, leaves the reply in *r. Returns 0 when the call
 * ended with a status (r->status), else grpc_peer_call's code. */
static int
call(struct wallet_grpc *g, const char *method, const ProtobufCMessage *m, int64_t deadline,
     struct grpc_reply *r)
{
    size_t len = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = xmalloc(len ? len : 1);
    int rc;

    protobuf_c_message_pack(m, buf);
    rc = grpc_peer_call(g->peer, method, buf, len, deadline, r);
    free(buf);
    return rc;
}

static int64_t
deadline_of(const struct wallet_grpc *g)
{
    return clock_mono_ms() + g->timeout_ms;
}

static void
reply_err(const char *what, const struct grpc_reply *r, char *err, size_t errlen)
{
    snprintf(err, errlen, "wallet %s: %s %.180s", what,
             r->status < 0 ? "not sent" : grpc_peer_status_name(r->status), r->details);
}

static int
grpc_hold(struct wallet *w, const struct wallet_gift *gift, int64_t *balance_after)
{
    struct wallet_grpc *g = (struct wallet_grpc *)w;
    Wallet__V1__TryRequest m = WALLET__V1__TRY_REQUEST__INIT;
    Wallet__V1__TryReply *rep;
    struct grpc_reply r;
    char err[320];
    int rc;

    *balance_after = 0;
    m.app_code = (char *)gift->app;
    m.command_id = (char *)gift->command_id;
    m.uid = gift->uid;
    m.amount = gift->amount;
    m.request_digest = (char *)gift->digest;
    m.room_id = (char *)gift->room_id;
    /* in flight from before the Try: a reconcile pass racing the Try's
     * answer must not cancel the hold this command is about to commit */
    flight_add(g, gift->app, gift->command_id);
    if (call(g, M_TRY, &m.base, deadline_of(g), &r) != 0) {
        reply_err("Try", &r, err, sizeof(err));
        log_warn("wallet", "try failed", "app=%s command_id=%s err=\"%s\"", gift->app,
                 gift->command_id, err);
        return ROOMD_EUNAVAIL;
    }
    switch (r.status) {
    case GRPC_PEER_OK:
        rep = wallet__v1__try_reply__unpack(NULL, r.len, r.body);
        rc = 0;
        if (rep != NULL) {
            *balance_after = rep->balance_after;
            /* this very request was confirmed before: its gift committed,
             * and the command log (checked before the Try) no longer has it */
            if (rep->replay && rep->state != NULL && strcmp(rep->state, "confirmed") == 0)
                rc = ROOMD_EEXPIRED;
            wallet__v1__try_reply__free_unpacked(rep, NULL);
        }
        break;
    case GRPC_PEER_FAILED_PRECONDITION:
        /* "insufficient_balance", or "cancelled": this key ended before */
        rc = strstr(r.details, "insufficient") != NULL ? ROOMD_EFUNDS : ROOMD_EREUSED;
        break;
    case GRPC_PEER_ABORTED:
        rc = ROOMD_EREUSED;
        break;
    default:
        reply_err("Try", &r, err, sizeof(err));
        log_warn("wallet", "try failed", "app=%s command_id=%s err=\"%s\"", gift->app,
                 gift->command_id, err);
        rc = ROOMD_EUNAVAIL;
    }
    free(r.body);
    if (rc == ROOMD_EFUNDS || rc == ROOMD_EREUSED || rc == ROOMD_EEXPIRED)
        flight_remove(g, gift->app, gift->command_id); /* nothing held by us */
    return rc;
}

/* Confirm or Cancel of one key. */
static int
resolve(struct wallet_grpc *g, const char *method, const char *what, const char *app,
        const char *command_id, int64_t deadline, char *err, size_t errlen)
{
    Wallet__V1__ResolveRequest m = WALLET__V1__RESOLVE_REQUEST__INIT;
    struct grpc_reply r;
    int rc;

    m.app_code = (char *)app;
    m.command_id = (char *)command_id;
    m.request_digest = (char *)"";
    if ((rc = call(g, method, &m.base, deadline, &r)) != 0) {
        reply_err(what, &r, err, errlen);
        return rc;
    }
    switch (r.status) {
    case GRPC_PEER_OK:
        rc = 0;
        break;
    case GRPC_PEER_FAILED_PRECONDITION:
    case GRPC_PEER_NOT_FOUND:
    case GRPC_PEER_ABORTED:
    case GRPC_PEER_INVALID_ARGUMENT:
        reply_err(what, &r, err, errlen);
        rc = ROOMD_EPERM;
        break;
    case GRPC_PEER_UNAVAILABLE:
    case GRPC_PEER_DEADLINE_EXCEEDED:
        reply_err(what, &r, err, errlen);
        rc = ROOMD_EUNAVAIL; /* no answer: an outage, the row costs no attempt */
        break;
    default:
        reply_err(what, &r, err, errlen);
        rc = ROOMD_ERETRY;
    }
    free(r.body);
    return rc;
}

int
wallet_grpc_confirm(struct wallet *w, const char *app, const char *command_id,
                    int64_t deadline_mono_ms, char *err, size_t errlen)
{
    return resolve((struct wallet_grpc *)w, M_CONFIRM, "Confirm", app, command_id, deadline_mono_ms,
                   err, errlen);
}

int
wallet_grpc_cancel(struct wallet *w, const char *app, const char *command_id, char *err,
                   size_t errlen)
{
    struct wallet_grpc *g = (struct wallet_grpc *)w;

    return resolve(g, M_CANCEL, "Cancel", app, command_id, deadline_of(g), err, errlen);
}

static void
grpc_settle(struct wallet *w, const struct wallet_gift *gift, enum wallet_outcome o)
{
    struct wallet_grpc *g = (struct wallet_grpc *)w;
    char err[320];
    int rc;

    if (o == WALLET_REFUSED) {
        rc = wallet_grpc_cancel(w, gift->app, gift->command_id, err, sizeof(err));
        if (rc != 0)
            log_warn("wallet", "cancel failed, left to the reconciler",
                     "app=%s command_id=%s err=\"%s\"", gift->app, gift->command_id, err);
    }
    flight_remove(g, gift->app, gift->command_id);
}

int
wallet_grpc_unresolved(struct wallet *w, const char *app, int64_t older_than_ms, int limit,
                       struct wallet_hold **out, size_t *n, char *err, size_t errlen)
{
    struct wallet_grpc *g = (struct wallet_grpc *)w;
    Wallet__V1__ListUnresolvedRequest m = WALLET__V1__LIST_UNRESOLVED_REQUEST__INIT;
    Wallet__V1__ListUnresolvedReply *rep;
    struct grpc_reply r;

    *out = NULL;
    *n = 0;
    m.app_code = (char *)(app != NULL ? app : "");
    m.older_than_ms = older_than_ms;
    m.limit = limit;
    /* Not on a request's path (the reconciler, `roomctl wallet audit`): the
     * call may also wait for a first connection, which the request timeout
     * (500 ms in the tests) does not always cover on a loaded machine. */
    if (call(g, M_LIST, &m.base,
             clock_mono_ms() + (g->timeout_ms > LIST_TIMEOUT_MS ? g->timeout_ms : LIST_TIMEOUT_MS),
             &r) != 0 ||
        r.status != GRPC_PEER_OK) {
        reply_err("ListUnresolved", &r, err, errlen);
        free(r.body);
        return ROOMD_EUNAVAIL;
    }
    rep = wallet__v1__list_unresolved_reply__unpack(NULL, r.len, r.body);
    free(r.body);
    if (rep == NULL) {
        snprintf(err, errlen, "wallet ListUnresolved: the reply does not parse");
        return ROOMD_EUNAVAIL;
    }
    *out = xcalloc(rep->n_holds ? rep->n_holds : 1, sizeof(**out));
    for (size_t i = 0; i < rep->n_holds; i++) {
        const Wallet__V1__Hold *h = rep->holds[i];
        struct wallet_hold *o = &(*out)[i];
        strlcpy_(o->app_code, h->app_code, sizeof(o->app_code));
        strlcpy_(o->command_id, h->command_id, sizeof(o->command_id));
        strlcpy_(o->room_id, h->room_id, sizeof(o->room_id));
        strlcpy_(o->digest, h->request_digest, sizeof(o->digest));
        o->uid = h->uid;
        o->amount = h->amount;
        o->created_at_ms = h->created_at_ms;
    }
    *n = rep->n_holds;
    wallet__v1__list_unresolved_reply__free_unpacked(rep, NULL);
    return 0;
}

/* The wallet service owns its balances: no development ledger here. */
static int
grpc_topup(struct wallet *w, const char *app, int64_t uid, int64_t amount, const char *ref_id,
           int64_t *balance_after)
{
    (void)w, (void)app, (void)uid, (void)amount, (void)ref_id;
    *balance_after = 0;
    return ROOMD_ENOTFOUND;
}

static int
grpc_balance(struct wallet *w, const char *app, int64_t uid, int64_t *balance)
{
    (void)w, (void)app, (void)uid;
    *balance = 0;
    return ROOMD_ENOTFOUND;
}

static void
grpc_close(struct wallet *w)
{
    struct wallet_grpc *g = (struct wallet_grpc *)w;

    grpc_peer_close(g->peer);
    for (size_t i = 0; i < NBUCKETS; i++)
        while (g->buckets[i] != NULL) {
            struct flight *f = g->buckets[i];
            g->buckets[i] = f->next;
            free(f);
        }
    pthread_mutex_destroy(&g->mu);
}

#define GRPC_OP(op) .op = grpc_##op,
static const struct wallet_ops grpc_ops = {WALLET_REMOTE_OPS(GRPC_OP)};
#undef GRPC_OP

bool
wallet_is_grpc(const struct wallet *w)
{
    return w != NULL && w->ops == &grpc_ops;
}

int
wallet_grpc_open(struct wallet **out, const struct conf_wallet *cfg, char *err, size_t errlen)
{
    struct wallet_grpc *g = xcalloc(1, sizeof(*g));
    int rc;

    *out = NULL;
    if ((rc = grpc_peer_open(&g->peer, cfg->grpc_target, "wallet", err, errlen)) != 0) {
        free(g);
        return rc;
    }
    g->super.ops = &grpc_ops;
    g->timeout_ms = cfg->grpc_timeout_ms > 0 ? cfg->grpc_timeout_ms : 2000;
    pthread_mutex_init(&g->mu, NULL);
    *out = &g->super;
    log_info("wallet", "remote wallet ready", "target=%s", cfg->grpc_target);
    return 0;
}
