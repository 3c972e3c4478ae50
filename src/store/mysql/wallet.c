/*
 * mysql/wallet.c: the embedded wallet: balances in wallet_accounts (locked
 * FOR UPDATE) and an idempotent ledger, one row per (ref_id, kind): the
 * gifts' debits inside their save (accounts locked in one order), topup,
 * balance.
 */
#include "store/mysql/internal.h"

#include "core/checked.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/xmalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

MYS_SQL(ACCT_ENSURE, "INSERT INTO wallet_accounts (app_code, uid, balance, updated_at_ms)"
                     " VALUES (?,?,?,?) ON DUPLICATE KEY UPDATE uid=uid");
MYS_SQL(ACCT_LOCK, "SELECT balance FROM wallet_accounts WHERE app_code=? AND uid=? FOR UPDATE");
MYS_SQL(ACCT_GET, "SELECT balance FROM wallet_accounts WHERE app_code=? AND uid=?");
MYS_SQL(ACCT_ADD, "UPDATE wallet_accounts SET balance=balance+?, updated_at_ms=?"
                  " WHERE app_code=? AND uid=?");
MYS_SQL(LEDGER_GET, "SELECT uid, amount FROM wallet_ledger"
                    " WHERE app_code=? AND ref_id=? AND kind=?");
MYS_SQL(LEDGER_INSERT, "INSERT INTO wallet_ledger (app_code, ref_id, uid, amount, kind,"
                       " created_at_ms) VALUES (?,?,?,?,?,?)");
MYS_SQL(LEDGER_UPDATE, "UPDATE wallet_ledger SET uid=?, amount=?, created_at_ms=?"
                       " WHERE app_code=? AND ref_id=? AND kind=?");
MYS_SQL(LEDGER_DELETE, "DELETE FROM wallet_ledger WHERE app_code=? AND ref_id=? AND kind=?");

struct wallet_ctx {
    const char *app, *ref_id;
    int64_t uid, amount, initial;
    int64_t balance; /* out */
};

/* Runs id (a SELECT balance .. WHERE app_code=? AND uid=?). Returns 1 with
 * *balance, 0 (no such account; *balance untouched) or the failure. */
static int
read_balance(struct conn *c, const struct mys_sql *id, const char *app, int64_t uid,
             int64_t *balance)
{
    struct rows r;
    int rc;

    if ((rc = mys_query_one(c, id, &r, "i", "si", app, uid)) == 1)
        *balance = r_i64(&r, 0);
    mys_rows_done(&r);
    return rc;
}

/* Creates (app, uid) with the initial balance if new, then locks its row. */
static int
lock_account(struct conn *c, const char *app, int64_t uid, int64_t initial, int64_t *balance)
{
    int rc = mys_exec(c, &SQL_ACCT_ENSURE, NULL, "siii", app, uid, initial, clock_wall_ms());

    if (rc != 0)
        return rc;
    rc = read_balance(c, &SQL_ACCT_LOCK, app, uid, balance);
    return rc == 1 ? 0 : rc == 0 ? ROOMD_EINTERNAL : rc;
}

/* Reads the balance of (app, uid); a never-seen account has initial. */
static int
account_balance(struct conn *c, const char *app, int64_t uid, int64_t initial, int64_t *balance)
{
    int rc;

    *balance = initial;
    rc = read_balance(c, &SQL_ACCT_GET, app, uid, balance);
    return rc < 0 ? rc : 0;
}

/* Adds delta to (app, uid), whose row the caller locked. */
static int
account_add(struct conn *c, const char *app, int64_t uid, int64_t delta)
{
    return mys_exec(c, &SQL_ACCT_ADD, NULL, "iisi", delta, clock_wall_ms(), app, uid);
}

/* Finds ledger row (ref_id, kind): 1 found (uid, amount), 0 not, or < 0. */
static int
ledger_get(struct conn *c, const char *app, const char *ref_id, const char *kind, int64_t *uid,
           int64_t *amount)
{
    struct rows r;
    int rc;

    if ((rc = mys_query_one(c, &SQL_LEDGER_GET, &r, "ii", "sss", app, ref_id, kind)) == 1) {
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
    int64_t now = clock_wall_ms();

    if (id == &SQL_LEDGER_UPDATE)
        return mys_exec(c, id, NULL, "iiisss", uid, amount, now, app, ref_id, kind);
    if (id == &SQL_LEDGER_INSERT)
        return mys_exec(c, id, NULL, "ssiisi", app, ref_id, uid, amount, kind, now);
    return mys_exec(c, id, NULL, "sss", app, ref_id, kind);
}

/* ---- Gift debits inside the gifts' transaction (mysql/command.c) ---- */

struct account {
    const char *app;
    int64_t uid, initial;
    int64_t balance; /* as locked, then as the debits charged it */
};

static int
account_cmp(const void *a, const void *b)
{
    const struct account *x = a, *y = b;
    int c = strcmp(x->app, y->app);

    return c != 0 ? c : (x->uid > y->uid) - (x->uid < y->uid);
}

static struct account *
account_find(struct account *accts, size_t n, const char *app, int64_t uid)
{
    struct account key = {.app = app, .uid = uid};

    return bsearch(&key, accts, n, sizeof(key), account_cmp);
}

int
mys_gift_debits(struct conn *c, struct wallet_debit *const *items, size_t n)
{
    struct account *accts = xcalloc(n ? n : 1, sizeof(*accts));
    size_t na = 0, k = 0;
    int rc = 0;

    for (size_t i = 0; i < n; i++)
        if (items[i]->amount >= 0)
            accts[na++] = (struct account){
                .app = items[i]->app, .uid = items[i]->uid, .initial = items[i]->initial_balance};
    qsort(accts, na, sizeof(*accts), account_cmp);
    for (size_t i = 0; i < na; i++) /* keep the distinct ones */
        if (k == 0 || account_cmp(&accts[k - 1], &accts[i]) != 0)
            accts[k++] = accts[i];
    na = k;
    /* every account first, in primary key order: any two transactions lock
     * in the same order, so they cannot deadlock on each other */
    for (size_t i = 0; i < na; i++)
        if ((rc = lock_account(c, accts[i].app, accts[i].uid, accts[i].initial,
                               &accts[i].balance)) != 0)
            goto out;
    for (size_t i = 0; i < n; i++) {
        struct wallet_debit *d = items[i];
        struct account *a = account_find(accts, na, d->app, d->uid);
        int64_t luid = 0, lamount = 0;
        int have_debit, have_refund;

        if (d->amount < 0) { /* refused before any read: its account is not locked */
            wallet_debit_rule(d, false, 0, 0, false, 0);
            continue;
        }
        if ((rc = have_debit = ledger_get(c, d->app, d->ref_id, "debit", &luid, &lamount)) < 0)
            goto out;
        if ((rc = have_refund = ledger_get(c, d->app, d->ref_id, "refund", NULL, NULL)) < 0)
            goto out;
        rc = 0;
        enum wallet_debit_step step =
            wallet_debit_rule(d, have_debit, luid, lamount, have_refund, a->balance);
        if (step != WALLET_DEBIT_CHARGE) /* refused, or paid before */
            continue;
        if (have_refund &&
            (rc = ledger_write(c, &SQL_LEDGER_DELETE, d->app, d->ref_id, "refund", 0, 0)) != 0)
            goto out;
        rc = ledger_write(c, have_debit ? &SQL_LEDGER_UPDATE : &SQL_LEDGER_INSERT, d->app,
                          d->ref_id, "debit", d->uid, d->amount);
        if (rc != 0 || (rc = account_add(c, d->app, d->uid, -d->amount)) != 0)
            goto out;
        a->balance = d->balance_after;
    }
out:
    free(accts);
    return rc;
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
        if (!i64_add_ok(bal, x->amount, &bal)) {
            store_set_errmsg("amount: the balance would pass %lld", (long long)INT64_MAX);
            return ROOMD_ERANGE;
        }
        if ((rc = ledger_write(c, &SQL_LEDGER_INSERT, x->app, x->ref_id, "topup", x->uid,
                               x->amount)) != 0 ||
            (rc = account_add(c, x->app, x->uid, x->amount)) != 0)
            return rc;
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

MYS_SQL(W_AUDIT, "SELECT 'G', app_code, command_id, '', 0, 0, request FROM room_command_log"
                 " WHERE command_type='SendGift' AND (?='' OR app_code=?)"
                 " UNION ALL SELECT 'L', app_code, ref_id, kind, uid, amount, NULL"
                 " FROM wallet_ledger WHERE ?='' OR app_code=?"
                 " UNION ALL SELECT 'A', app_code, '', '', uid, balance, NULL"
                 " FROM wallet_accounts WHERE ?='' OR app_code=?");

/* The audit's three tables in one statement: one read snapshot. */
int
mys_wallet_audit_rows(struct store *s, const char *app, struct audit_row **rows, size_t *n)
{
    struct all_ctx x = {&SQL_W_AUDIT,     "ssssiis", {.n = 0}, sizeof(**rows),
                        store_audit_cols, NULL,      0};
    int rc;

    for (int i = 0; i < 6; i++) /* the app filter of each table */
        p_str(&x.p, app);
    rc = mys_read_all((struct mstore *)s, &x);
    *rows = x.rows;
    *n = x.n;
    return rc;
}
