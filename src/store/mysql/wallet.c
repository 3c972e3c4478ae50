/*
 * mysql/wallet.c: the embedded wallet: balances in wallet_accounts (locked
 * FOR UPDATE) and an idempotent ledger, one row per (ref_id, kind): debit
 * (batched, accounts locked in one order), refund, topup, balance.
 */
#include "store/mysql/internal.h"

#include "core/clock.h"
#include "core/err.h"
#include "core/xmalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct mys_sql SQL_ACCT_ENSURE = {
    S_ACCT_ENSURE, "INSERT INTO wallet_accounts (app_code, uid, balance, updated_at_ms)"
                   " VALUES (?,?,?,?) ON DUPLICATE KEY UPDATE uid=uid"};
static const struct mys_sql SQL_ACCT_LOCK = {
    S_ACCT_LOCK, "SELECT balance FROM wallet_accounts WHERE app_code=? AND uid=? FOR UPDATE"};
static const struct mys_sql SQL_ACCT_GET = {
    S_ACCT_GET, "SELECT balance FROM wallet_accounts WHERE app_code=? AND uid=?"};
static const struct mys_sql SQL_ACCT_ADD = {
    S_ACCT_ADD, "UPDATE wallet_accounts SET balance=balance+?, updated_at_ms=?"
                " WHERE app_code=? AND uid=?"};
static const struct mys_sql SQL_LEDGER_GET = {S_LEDGER_GET,
                                              "SELECT uid, amount FROM wallet_ledger"
                                              " WHERE app_code=? AND ref_id=? AND kind=?"};
static const struct mys_sql SQL_LEDGER_INSERT = {
    S_LEDGER_INSERT, "INSERT INTO wallet_ledger (app_code, ref_id, uid, amount, kind,"
                     " created_at_ms) VALUES (?,?,?,?,?,?)"};
static const struct mys_sql SQL_LEDGER_UPDATE = {
    S_LEDGER_UPDATE, "UPDATE wallet_ledger SET uid=?, amount=?, created_at_ms=?"
                     " WHERE app_code=? AND ref_id=? AND kind=?"};
static const struct mys_sql SQL_LEDGER_DELETE = {
    S_LEDGER_DELETE, "DELETE FROM wallet_ledger WHERE app_code=? AND ref_id=? AND kind=?"};

struct wallet_ctx {
    const char *app, *ref_id;
    int64_t uid, amount, initial;
    int64_t balance; /* out */
};

/* Creates (app, uid) with the initial balance if new, then locks its row. */
static int
lock_account(struct conn *c, const char *app, int64_t uid, int64_t initial, int64_t *balance)
{
    struct params p = {0};
    struct rows r;
    int rc;

    p_str(&p, app);
    p_i64(&p, uid);
    p_i64(&p, initial);
    p_i64(&p, clock_wall_ms());
    if ((rc = mys_st_exec(c, &SQL_ACCT_ENSURE, &p, NULL)) != 0)
        return rc;
    p.n = 2;
    if ((rc = mys_st_query_one(c, &SQL_ACCT_LOCK, &p, &r, "i")) == 1) {
        *balance = r_i64(&r, 0);
        rc = 0;
    } else if (rc == 0) {
        rc = ROOMD_EINTERNAL;
    }
    mys_rows_done(&r);
    return rc;
}

/* Reads the balance of (app, uid); a never-seen account has initial. */
static int
account_balance(struct conn *c, const char *app, int64_t uid, int64_t initial, int64_t *balance)
{
    struct params p = {0};
    struct rows r;
    int rc;

    p_str(&p, app);
    p_i64(&p, uid);
    if ((rc = mys_st_query_one(c, &SQL_ACCT_GET, &p, &r, "i")) >= 0) {
        *balance = rc == 1 ? r_i64(&r, 0) : initial;
        rc = 0;
    }
    mys_rows_done(&r);
    return rc;
}

/* Adds delta to (app, uid), whose row the caller locked. */
static int
account_add(struct conn *c, const char *app, int64_t uid, int64_t delta)
{
    struct params p = {0};

    p_i64(&p, delta);
    p_i64(&p, clock_wall_ms());
    p_str(&p, app);
    p_i64(&p, uid);
    return mys_st_exec(c, &SQL_ACCT_ADD, &p, NULL);
}

/* Finds ledger row (ref_id, kind): 1 found (uid, amount), 0 not, or < 0. */
static int
ledger_get(struct conn *c, const char *app, const char *ref_id, const char *kind, int64_t *uid,
           int64_t *amount)
{
    struct params p = {0};
    struct rows r;
    int rc;

    p_str(&p, app);
    p_str(&p, ref_id);
    p_str(&p, kind);
    if ((rc = mys_st_query_one(c, &SQL_LEDGER_GET, &p, &r, "ii")) == 1) {
        if (uid != NULL)
            *uid = r_i64(&r, 0);
        if (amount != NULL)
            *amount = r_i64(&r, 1);
    }
    mys_rows_done(&r);
    return rc;
}

/* Writes ledger row (ref_id, kind) with &SQL_LEDGER_INSERT, _UPDATE or _DELETE. */
static int
ledger_write(struct conn *c, const struct mys_sql *id, const char *app, const char *ref_id,
             const char *kind, int64_t uid, int64_t amount)
{
    struct params p = {0};
    int64_t now = clock_wall_ms();

    if (id == &SQL_LEDGER_UPDATE) {
        p_i64(&p, uid);
        p_i64(&p, amount);
        p_i64(&p, now);
    }
    p_str(&p, app);
    p_str(&p, ref_id);
    if (id == &SQL_LEDGER_INSERT) {
        p_i64(&p, uid);
        p_i64(&p, amount);
    }
    p_str(&p, kind);
    if (id == &SQL_LEDGER_INSERT)
        p_i64(&p, now);
    return mys_st_exec(c, id, &p, NULL);
}

/* ---- A batch of debits in one transaction (store_wallet_debit_many) ---- */

struct account {
    const char *app;
    int64_t uid;
    int64_t balance; /* as locked, then as the batch charged it */
};

struct debit_many_ctx {
    struct wallet_debit *items;
    size_t n;
    int64_t initial;
    struct account *accts; /* the distinct accounts of the items, in primary key order */
    size_t naccts;
};

static int
account_cmp(const void *a, const void *b)
{
    const struct account *x = a, *y = b;
    int c = strcmp(x->app, y->app);

    return c != 0 ? c : (x->uid > y->uid) - (x->uid < y->uid);
}

static struct account *
account_find(struct debit_many_ctx *x, const char *app, int64_t uid)
{
    struct account key = {.app = app, .uid = uid};

    return bsearch(&key, x->accts, x->naccts, sizeof(key), account_cmp);
}

/*
 * The batch: locks every account of the batch first, in primary key order
 * (any two batches lock in the same order: no deadlock between them), then
 * applies each debit. A ref already debited (and not refunded) is not charged
 * again: 0 and the current balance. A refunded ref debited again is charged
 * again (the refund row removed, the debit row rewritten): the command refunded
 * because its commit failed is being retried. A short balance charges nothing
 * for its item and does not affect the others (nothing of it is written).
 */
static int
debit_many_fn(struct conn *c, void *arg)
{
    struct debit_many_ctx *x = arg;
    int rc;

    for (size_t i = 0; i < x->n; i++) {
        x->items[i].balance_after = 0;
        x->items[i].rc = 0;
    }
    if ((rc = mys_tx_begin(c)) != 0)
        return rc;
    for (size_t i = 0; i < x->naccts; i++) {
        struct account *a = &x->accts[i];

        if ((rc = lock_account(c, a->app, a->uid, x->initial, &a->balance)) != 0)
            return rc;
    }
    for (size_t i = 0; i < x->n; i++) {
        struct wallet_debit *d = &x->items[i];
        struct account *a = account_find(x, d->app, d->uid), *la;
        int64_t luid = 0;
        int have_debit, have_refund;

        if (d->amount < 0) { /* refused before any read: its account is not locked */
            wallet_debit_rule(d, false, false, 0);
            continue;
        }
        if ((rc = have_debit = ledger_get(c, d->app, d->ref_id, "debit", &luid, NULL)) < 0)
            return rc;
        if ((rc = have_refund = ledger_get(c, d->app, d->ref_id, "refund", NULL, NULL)) < 0)
            return rc;
        enum wallet_debit_step step = wallet_debit_rule(d, have_debit, have_refund, a->balance);

        if (step == WALLET_DEBIT_REFUSED)
            continue;
        if (step == WALLET_DEBIT_STANDS) { /* already charged */
            if ((la = account_find(x, d->app, luid)) != NULL)
                d->balance_after = la->balance;
            else if ((rc = account_balance(c, d->app, luid, x->initial, &d->balance_after)) != 0)
                return rc;
            continue;
        }
        if (have_refund &&
            (rc = ledger_write(c, &SQL_LEDGER_DELETE, d->app, d->ref_id, "refund", 0, 0)) != 0)
            return rc;
        rc = ledger_write(c, have_debit ? &SQL_LEDGER_UPDATE : &SQL_LEDGER_INSERT, d->app,
                          d->ref_id, "debit", d->uid, d->amount);
        if (rc != 0 || (rc = account_add(c, d->app, d->uid, -d->amount)) != 0)
            return rc;
        a->balance = d->balance_after;
    }
    return mys_tx_commit(c);
}

int
mys_wallet_debit_many(struct store *s, struct wallet_debit *items, size_t n,
                      int64_t initial_balance)
{
    struct debit_many_ctx x = {items, n, initial_balance, xcalloc(n, sizeof(struct account)), 0};
    size_t k = 0;
    int rc;

    for (size_t i = 0; i < n; i++)
        if (items[i].amount >= 0)
            x.accts[x.naccts++] = (struct account){.app = items[i].app, .uid = items[i].uid};
    qsort(x.accts, x.naccts, sizeof(*x.accts), account_cmp);
    for (size_t i = 0; i < x.naccts; i++) /* keep the distinct ones */
        if (k == 0 || account_cmp(&x.accts[k - 1], &x.accts[i]) != 0)
            x.accts[k++] = x.accts[i];
    x.naccts = k;
    rc = mys_run((struct mstore *)s, debit_many_fn, &x);
    if (rc != 0)
        for (size_t i = 0; i < n; i++) {
            items[i].rc = rc;
            items[i].balance_after = 0;
        }
    free(x.accts);
    return rc;
}

static int
refund_fn(struct conn *c, void *arg)
{
    struct wallet_ctx *x = arg;
    int64_t uid = 0, amount = 0, bal;
    int rc;

    if ((rc = mys_tx_begin(c)) != 0)
        return rc;
    if ((rc = ledger_get(c, x->app, x->ref_id, "debit", &uid, &amount)) <= 0) {
        if (rc == 0)
            store_set_errmsg("wallet: no debit %s", x->ref_id);
        return rc == 0 ? ROOMD_ENOTFOUND : rc;
    }
    if ((rc = lock_account(c, x->app, uid, 0, &bal)) != 0)
        return rc;
    if ((rc = ledger_get(c, x->app, x->ref_id, "refund", NULL, NULL)) < 0)
        return rc;
    if (rc == 0) { /* not refunded yet */
        if ((rc = ledger_write(c, &SQL_LEDGER_INSERT, x->app, x->ref_id, "refund", uid, amount)) !=
                0 ||
            (rc = account_add(c, x->app, uid, amount)) != 0)
            return rc;
    }
    return mys_tx_commit(c);
}

int
mys_wallet_refund(struct store *s, const char *app, const char *ref_id)
{
    struct wallet_ctx x = {app, ref_id, 0, 0, 0, 0};

    return mys_run((struct mstore *)s, refund_fn, &x);
}

static int
topup_fn(struct conn *c, void *arg)
{
    struct wallet_ctx *x = arg;
    int64_t bal = 0, luid = 0;
    int rc;

    if ((rc = mys_tx_begin(c)) != 0 ||
        (rc = lock_account(c, x->app, x->uid, x->initial, &bal)) != 0)
        return rc;
    if ((rc = ledger_get(c, x->app, x->ref_id, "topup", &luid, NULL)) < 0)
        return rc;
    if (rc == 1) { /* already credited */
        if (luid != x->uid && (rc = account_balance(c, x->app, luid, x->initial, &bal)) != 0)
            return rc;
    } else {
        if ((rc = ledger_write(c, &SQL_LEDGER_INSERT, x->app, x->ref_id, "topup", x->uid,
                               x->amount)) != 0 ||
            (rc = account_add(c, x->app, x->uid, x->amount)) != 0)
            return rc;
        bal += x->amount;
    }
    x->balance = bal;
    return mys_tx_commit(c);
}

int
mys_wallet_topup(struct store *s, const char *app, int64_t uid, int64_t amount, const char *ref_id,
                 int64_t initial_balance, int64_t *balance_after)
{
    struct wallet_ctx x = {app, ref_id, uid, amount, initial_balance, 0};
    int rc;

    *balance_after = 0;
    if (amount < 0) {
        store_set_errmsg("wallet topup: negative amount");
        return ROOMD_EINVAL;
    }
    rc = mys_run((struct mstore *)s, topup_fn, &x);
    if (rc == 0)
        *balance_after = x.balance;
    return rc;
}

static int
balance_fn(struct conn *c, void *arg)
{
    struct wallet_ctx *x = arg;

    return account_balance(c, x->app, x->uid, x->initial, &x->balance);
}

int
mys_wallet_balance(struct store *s, const char *app, int64_t uid, int64_t initial_balance,
                   int64_t *balance)
{
    struct wallet_ctx x = {app, NULL, uid, 0, initial_balance, 0};
    int rc = mys_run((struct mstore *)s, balance_fn, &x);

    *balance = rc == 0 ? x.balance : 0;
    return rc;
}
