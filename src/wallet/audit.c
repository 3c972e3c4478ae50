/* SPDX-License-Identifier: Apache-2.0 */
/*
 * audit.c: the money invariant (audit.h). Reads the committed gifts, the
 * ledger and the accounts in one store snapshot (store_wallet_audit_rows)
 * and matches them in memory: every committed gift to its own debit (by
 * (app, command_id), then the room, version and request digest the debit
 * row records), sums per app in 128 bits. A debit whose gift's log row was
 * purged (its room's log now starts after the gift's version) is no
 * offence. The remote wallet's side is its unresolved holds.
 */
#include "wallet/audit.h"

#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/xmalloc.h"
#include "store/store.h"
#include "wallet/wallet.h"
#include "wallet/wallet_grpc.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* Orders two struct audit_row * by app_code, then by the text field at off. */
static int
cmp_app_then(const void *a, const void *b, size_t off)
{
    const struct audit_row *x = *(const struct audit_row *const *)a;
    const struct audit_row *y = *(const struct audit_row *const *)b;
    int c = strcmp(x->app_code, y->app_code);

    return c != 0 ? c : strcmp((const char *)x + off, (const char *)y + off);
}

static int
cmp_key(const void *a, const void *b)
{
    return cmp_app_then(a, b, offsetof(struct audit_row, key));
}

/* The row of kind among sorted rows v[0..n) with app and key, or NULL. */
static const struct audit_row *
find(struct audit_row **v, size_t n, const char *app, const char *key)
{
    struct audit_row k, *kp = &k, **hit;

    strlcpy_(k.app_code, app, sizeof(k.app_code));
    strlcpy_(k.key, key, sizeof(k.key));
    hit = bsearch(&kp, v, n, sizeof(*v), cmp_key);
    return hit != NULL ? *hit : NULL;
}

static int
cmp_room(const void *a, const void *b)
{
    return cmp_app_then(a, b, offsetof(struct audit_row, room_id));
}

/* True when the log row of debit d's gift was purged: its room's oldest
 * logged version (rooms[0..n), sorted by cmp_room) is past the gift's, or
 * the room has no log rows left. A debit that does not record its gift
 * (written before digests were kept) is never taken as purged. */
static bool
gift_purged(struct audit_row **rooms, size_t n, const struct audit_row *d)
{
    struct audit_row **hit;
    const struct audit_row *kp = d;

    if (d->version <= 0 || d->room_id[0] == '\0')
        return false;
    hit = bsearch(&kp, rooms, n, sizeof(*rooms), cmp_room);
    return hit == NULL || (*hit)->version > d->version;
}

/* True when debit d pays gift g itself: the debit records g's room, version
 * and request digest (a debit written before digests were kept is taken as
 * g's, matched by uid and amount alone). */
static bool
own_debit(const struct audit_row *g, const struct audit_row *d)
{
    char digest[65];

    if (d->version <= 0)
        return true;
    wallet_request_digest(g->request, digest);
    return d->version == g->version && strcmp(d->room_id, g->room_id) == 0 &&
           strcmp(d->digest, digest) == 0;
}

/* The sender and value of a logged SendGift request; false when it does not parse. */
static bool
gift_of(const char *request, int64_t *uid, int64_t *amount)
{
    json_t *o = request != NULL ? json_loads(request, 0, NULL) : NULL;
    json_int_t u = 0, count = 0, price = 0;
    json_t *cat = json_object_get(o, "catalog"); /* the catalog's price, when it priced it */
    bool ok = o != NULL && json_unpack(o, "{s:I, s:I}", "uid", &u, "count", &count) == 0 &&
              json_unpack(cat != NULL ? cat : o, "{s:I}", "unit_price", &price) == 0;

    json_decref(o);
    *uid = u;
    *amount = count * price; /* validated: count <= 9999, unit_price <= 1e9 */
    return ok;
}

/* Per app sums: balances + standing debits against grants + top-ups. */
struct sums {
    char app[STORE_ID_MAX];
    __int128 balances, debits, topups;
    int64_t accounts;
};

static struct sums *
sums_of(struct sums **v, size_t *n, size_t *cap, const char *app)
{
    for (size_t i = 0; i < *n; i++)
        if (strcmp((*v)[i].app, app) == 0)
            return &(*v)[i];
    *v = xgrow(*v, *n, cap, sizeof(**v));
    memset(&(*v)[*n], 0, sizeof(**v));
    strlcpy_((*v)[*n].app, app, sizeof((*v)[*n].app));
    return &(*v)[(*n)++];
}

static void
offend(FILE *out, size_t *offences, const char *app, const char *key, const char *what)
{
    fprintf(out, "%s %s %s\n", app, key[0] ? key : "-", what);
    (*offences)++;
}

static int
audit_ledger(struct store *store, const struct conf_wallet *cfg, const char *app, FILE *out,
             size_t *offences)
{
    struct audit_row *rows = NULL, **gifts, **debits, **rooms;
    struct sums *sums = NULL;
    size_t n = 0, ng = 0, nd = 0, nr = 0, ns = 0, scap = 0, npurged = 0;
    char what[320];
    int rc;

    if ((rc = store_wallet_audit_rows(store, app, &rows, &n)) != 0) {
        fprintf(out, "store: %s: %s\n", roomd_strerror(rc), store_errmsg());
        return ROOMD_EUNAVAIL;
    }
    gifts = xcalloc(n ? n : 1, sizeof(*gifts));
    debits = xcalloc(n ? n : 1, sizeof(*debits));
    rooms = xcalloc(n ? n : 1, sizeof(*rooms));
    for (size_t i = 0; i < n; i++) {
        struct audit_row *r = &rows[i];
        struct sums *s;

        if (r->kind == 'M') {
            rooms[nr++] = r;
            continue;
        }
        s = sums_of(&sums, &ns, &scap, r->app_code);
        if (r->kind == 'G') {
            gifts[ng++] = r;
        } else if (r->kind == 'A') {
            s->balances += r->amount;
            s->accounts++;
        } else if (strcmp(r->ledger_kind, "topup") == 0) {
            s->topups += r->amount;
        } else if (strcmp(r->ledger_kind, "debit") == 0) {
            debits[nd++] = r;
            s->debits += r->amount;
        } else if (strcmp(r->ledger_kind, "refund") == 0) {
            s->debits -= r->amount; /* an older version's refund: that debit no longer stands */
            r->uid = -1;            /* marks the refund; matched below */
        }
    }
    qsort(gifts, ng, sizeof(*gifts), cmp_key);
    qsort(debits, nd, sizeof(*debits), cmp_key);
    qsort(rooms, nr, sizeof(*rooms), cmp_room);
    for (size_t i = 0; i < n; i++) /* a refunded debit does not stand */
        if (rows[i].kind == 'L' && rows[i].uid == -1) {
            const struct audit_row *d = find(debits, nd, rows[i].app_code, rows[i].key);
            if (d != NULL)
                ((struct audit_row *)d)->kind = 'R';
        }
    for (size_t i = 0; i < ng; i++) {
        const struct audit_row *g = gifts[i], *d = find(debits, nd, g->app_code, g->key);
        int64_t uid, amount;

        if (!gift_of(g->request, &uid, &amount)) {
            offend(out, offences, g->app_code, g->key, "gift request does not parse");
        } else if (d == NULL || d->kind != 'L') {
            offend(out, offences, g->app_code, g->key, "committed gift without its debit");
        } else if (!own_debit(g, d)) {
            /* the debit under this command_id pays another gift (an earlier one whose log
             * row was purged): this one is unpaid */
            snprintf(what, sizeof(what),
                     "committed gift (room %s version %lld) without its own debit: the debit "
                     "pays room %s version %lld",
                     g->room_id, (long long)g->version, d->room_id, (long long)d->version);
            offend(out, offences, g->app_code, g->key, what);
        } else if (d->uid != uid || d->amount != amount) {
            snprintf(what, sizeof(what), "gift of %lld by uid %lld, debit of %lld from uid %lld",
                     (long long)amount, (long long)uid, (long long)d->amount, (long long)d->uid);
            offend(out, offences, g->app_code, g->key, what);
        }
    }
    for (size_t i = 0; i < nd; i++) {
        if (debits[i]->kind != 'L' || find(gifts, ng, debits[i]->app_code, debits[i]->key) != NULL)
            continue;
        if (gift_purged(rooms, nr, debits[i]))
            npurged++; /* paid by a gift whose log row is past the retention */
        else
            offend(out, offences, debits[i]->app_code, debits[i]->key, "debit without its gift");
    }
    for (size_t i = 0; i < ns; i++) {
        __int128 have = sums[i].balances + sums[i].debits;
        __int128 want = (__int128)sums[i].accounts * cfg->initial_balance + sums[i].topups;
        if (have != want) {
            snprintf(what, sizeof(what),
                     "balances + debits = %.0Lf, accounts x initial_balance + top-ups = %.0Lf",
                     (long double)have, (long double)want);
            offend(out, offences, sums[i].app, "", what);
        }
    }
    fprintf(out, "ledger: %zu gifts, %zu debits (%zu of purged gifts), %zu apps\n", ng, nd, npurged,
            ns);
    free(gifts);
    free(rooms);
    free(debits);
    free(sums);
    audit_rows_free(rows, n);
    return 0;
}

static int
audit_remote(struct wallet *w, const struct conf_wallet *cfg, const char *app, FILE *out,
             size_t *offences)
{
    struct wallet_hold *h = NULL;
    size_t n = 0;
    char err[320], what[160];

    if (wallet_grpc_unresolved(w, app != NULL ? app : "", clock_wall_ms() - cfg->reconcile_after_ms,
                               1000, &h, &n, err, sizeof(err)) != 0) {
        fprintf(out, "wallet: %s\n", err);
        return ROOMD_EUNAVAIL;
    }
    for (size_t i = 0; i < n; i++) {
        snprintf(what, sizeof(what), "hold of %lld from uid %lld unresolved since %lld",
                 (long long)h[i].amount, (long long)h[i].uid, (long long)h[i].created_at_ms);
        offend(out, offences, h[i].app_code, h[i].command_id, what);
    }
    fprintf(out, "wallet: %zu holds older than wallet.reconcile_after\n", n);
    free(h);
    return 0;
}

int
wallet_audit(struct store *store, const struct conf_wallet *cfg, struct wallet *w, const char *app,
             FILE *out, size_t *offences)
{
    *offences = 0;
    if (wallet_is_grpc(w))
        return audit_remote(w, cfg, app, out, offences);
    return audit_ledger(store, cfg, app, out, offences);
}
