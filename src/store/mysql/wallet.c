/* SPDX-License-Identifier: Apache-2.0 */
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
/* The charged accounts' balances of a save in ONE statement: an array-bound
 * INSERT runs as one multi-row insert on MariaDB (an array-bound UPDATE runs
 * row by row). Every row exists and is locked (ensure_accounts,
 * lock_accounts), so each is an update by the delta in balance, which the
 * server also refuses to take below 0: with CLIENT_FOUND_ROWS a changed row
 * counts 2, a refused or inserted one 1 (write_charges checks the sum). */
MYS_SQL(ACCTS_ADD,
        "INSERT INTO wallet_accounts (app_code, uid, balance, updated_at_ms)"
        " VALUES (?,?,?,?) ON DUPLICATE KEY UPDATE"
        " updated_at_ms=IF(balance+VALUES(balance)>=0,VALUES(updated_at_ms),updated_at_ms),"
        " balance=IF(balance+VALUES(balance)>=0,balance+VALUES(balance),balance)");
/* The gift debits' reads, MYS_IN keys of one app per execution: the
 * accounts (already locked by SQL_ACCT_ENSURE's upsert; FOR UPDATE keeps
 * that explicit) and what the ledger holds under the gifts' ref_ids. */
MYS_SQL(ACCTS_LOCK,
        "SELECT uid, balance FROM wallet_accounts WHERE app_code=? AND uid IN (" MYS_IN_LIST
        ") FOR UPDATE");
MYS_SQL(LEDGER_GETS, "SELECT ref_id, kind, uid, amount FROM wallet_ledger WHERE app_code=? AND"
                     " ref_id IN (" MYS_IN_LIST ") AND kind IN ('debit', 'refund')");
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
    int64_t locked;  /* the balance as locked */
    bool found;
};

/* What the ledger holds under one debit's ref_id. */
struct held {
    bool debit, refund;
    int64_t uid, amount; /* of the debit row */
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

/* Creates every account of accts[0..n) (sorted, distinct) that is new, in
 * that order, with one array-bound upsert: its rows lock in primary key
 * order, so two batches never deadlock on each other. */
static int
ensure_accounts(struct conn *c, const struct account *accts, size_t n)
{
    struct bulk k;
    int64_t now = clock_wall_ms();
    int rc;

    mys_bulk_init(&k, "siii", n);
    for (size_t i = 0; i < n; i++) {
        bk_str(&k, 0, i, accts[i].app);
        bk_i64(&k, 1, i, accts[i].uid);
        bk_i64(&k, 2, i, accts[i].initial);
        bk_i64(&k, 3, i, now);
    }
    rc = mys_st_bulk(c, &SQL_ACCT_ENSURE, &k, NULL);
    mys_bulk_free(&k);
    return rc;
}

/* Reads the balances of accts[0..n) (sorted, distinct, just ensured): one
 * SQL_ACCTS_LOCK per MYS_IN accounts of one app. An account not found is
 * ROOMD_EINTERNAL. */
static int
lock_accounts(struct conn *c, struct account *accts, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t from = i, k = 0;
        int64_t uids[MYS_IN];
        struct params p;
        struct rows r;
        int rc;

        for (; i < n && k < MYS_IN && strcmp(accts[i].app, accts[from].app) == 0; i++)
            uids[k++] = accts[i].uid;
        PARAMS_INIT(&p);
        p_str(&p, accts[from].app);
        p_in_i64(&p, uids, k);
        if ((rc = mys_st_query(c, &SQL_ACCTS_LOCK, &p, &r, "ii")) != 0)
            return rc;
        while ((rc = mys_st_fetch(c, &r)) == 1) {
            struct account *a = account_find(accts + from, i - from, accts[from].app, r_i64(&r, 0));

            if (a != NULL) {
                a->balance = a->locked = r_i64(&r, 1);
                a->found = true;
            }
        }
        mys_rows_done(&r);
        if (rc < 0)
            return rc;
    }
    for (size_t i = 0; i < n; i++)
        if (!accts[i].found) {
            store_set_errmsg("wallet: account %lld not found after its upsert",
                             (long long)accts[i].uid);
            return ROOMD_EINTERNAL;
        }
    return 0;
}

/* Fills held[i] with the ledger rows under items[i]->ref_id: one
 * SQL_LEDGER_GETS per MYS_IN consecutive debits of one app. */
static int
read_ledger(struct conn *c, struct wallet_debit *const *items, size_t n, struct held *held)
{
    for (size_t i = 0; i < n;) {
        size_t from = i, k = 0;
        const char *refs[MYS_IN];
        struct params p;
        struct rows r;
        int rc;

        for (; i < n && k < MYS_IN && strcmp(items[i]->app, items[from]->app) == 0; i++)
            refs[k++] = items[i]->ref_id;
        PARAMS_INIT(&p);
        p_str(&p, items[from]->app);
        p_in_str(&p, refs, k);
        if ((rc = mys_st_query(c, &SQL_LEDGER_GETS, &p, &r, "ssii")) != 0)
            return rc;
        while ((rc = mys_st_fetch(c, &r)) == 1)
            for (size_t j = from; j < i; j++) {
                if (strcmp(items[j]->ref_id, r_str(&r, 0)) != 0)
                    continue;
                if (strcmp(r_str(&r, 1), "refund") == 0) {
                    held[j].refund = true;
                } else {
                    held[j].debit = true;
                    held[j].uid = r_i64(&r, 2);
                    held[j].amount = r_i64(&r, 3);
                }
            }
        mys_rows_done(&r);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* Writes the charges: new debit rows in one array-bound insert (a refunded
 * debit from an older ledger is rewritten alone, its refund row dropped),
 * then the charged accounts' balances in one SQL_ACCTS_ADD. */
static int
write_charges(struct conn *c, struct wallet_debit *const *items, const bool *charge,
              const struct held *held, size_t n, const struct account *accts, size_t na)
{
    struct bulk ins, add;
    size_t nins = 0, nadd = 0;
    uint64_t changed = 0;
    int64_t now = clock_wall_ms();
    int rc = 0;

    for (size_t i = 0; i < n; i++)
        nins += charge[i] && !held[i].debit;
    for (size_t i = 0; i < na; i++)
        nadd += accts[i].balance != accts[i].locked;
    mys_bulk_init(&ins, "ssiisi", nins);
    mys_bulk_init(&add, "siii", nadd);
    nins = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        const struct wallet_debit *d = items[i];

        if (!charge[i])
            continue;
        if (held[i].refund)
            rc = ledger_write(c, &SQL_LEDGER_DELETE, d->app, d->ref_id, "refund", 0, 0);
        if (rc == 0 && held[i].debit)
            rc = ledger_write(c, &SQL_LEDGER_UPDATE, d->app, d->ref_id, "debit", d->uid, d->amount);
        if (held[i].debit)
            continue;
        bk_str(&ins, 0, nins, d->app);
        bk_str(&ins, 1, nins, d->ref_id);
        bk_i64(&ins, 2, nins, d->uid);
        bk_i64(&ins, 3, nins, d->amount);
        bk_str(&ins, 4, nins, "debit");
        bk_i64(&ins, 5, nins++, now);
    }
    nadd = 0;
    for (size_t i = 0; i < na; i++)
        if (accts[i].balance != accts[i].locked) {
            bk_str(&add, 0, nadd, accts[i].app);
            bk_i64(&add, 1, nadd, accts[i].uid);
            bk_i64(&add, 2, nadd, accts[i].balance - accts[i].locked);
            bk_i64(&add, 3, nadd++, now);
        }
    if (rc == 0)
        rc = mys_st_bulk(c, &SQL_LEDGER_INSERT, &ins, NULL);
    if (rc == 0 && (rc = mys_st_bulk(c, &SQL_ACCTS_ADD, &add, &changed)) == 0 &&
        changed != 2 * nadd) {
        store_set_errmsg("wallet: %zu of %zu balance updates applied", (size_t)(changed / 2), nadd);
        rc = ROOMD_EINTERNAL; /* never: the rows are locked and the rule kept them >= 0 */
    }
    mys_bulk_free(&ins);
    mys_bulk_free(&add);
    return rc;
}

/*
 * The gifts' debits of one save, in a few statements whatever their number:
 * the accounts created and locked (in primary key order), their balances and
 * the ledger under the ref_ids read in chunks of MYS_IN, the rule applied
 * to each debit in order (wallet_debit_rule; an account's balance goes down
 * debit by debit), the charges written in two array-bound statements.
 */
int
mys_gift_debits(struct conn *c, struct wallet_debit *const *items, size_t n)
{
    struct account *accts = xcalloc(n ? n : 1, sizeof(*accts));
    struct held *held = xcalloc(n ? n : 1, sizeof(*held));
    bool *charge = xcalloc(n ? n : 1, sizeof(*charge));
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
    if (na > 0 &&
        ((rc = ensure_accounts(c, accts, na)) != 0 || (rc = lock_accounts(c, accts, na)) != 0 ||
         (rc = read_ledger(c, items, n, held)) != 0))
        goto out;
    for (size_t i = 0; i < n; i++) {
        struct wallet_debit *d = items[i];

        if (d->amount < 0) { /* refused before any read: its account is not locked */
            wallet_debit_rule(d, false, 0, 0, false, 0);
            continue;
        }
        struct account *a = account_find(accts, na, d->app, d->uid);
        enum wallet_debit_step step = wallet_debit_rule(d, held[i].debit, held[i].uid,
                                                        held[i].amount, held[i].refund, a->balance);
        if (step != WALLET_DEBIT_CHARGE) /* refused, or paid before */
            continue;
        charge[i] = true;
        a->balance = d->balance_after;
    }
    rc = write_charges(c, items, charge, held, n, accts, na);
out:
    free(accts);
    free(held);
    free(charge);
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
    rc = mys_run_tx((struct mstore *)s, topup_fn, &x);
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
