/*
 * sqlite/wallet.c: the embedded wallet: balances in wallet_accounts and one
 * ledger row per (ref_id, kind): debit (batched, a savepoint per debit),
 * refund, topup, balance.
 */
#include "store/sqlite/internal.h"

#include "core/clock.h"
#include "core/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct sq_sql SQL_W_LEDGER_GET = {
    ST_W_LEDGER_GET, "SELECT uid, amount FROM wallet_ledger WHERE app_code = ?1"
                     " AND ref_id = ?2 AND kind = ?3"};
static const struct sq_sql SQL_W_LEDGER_INSERT = {
    ST_W_LEDGER_INSERT, "INSERT INTO wallet_ledger (app_code, ref_id, uid, amount, kind,"
                        " created_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"};
static const struct sq_sql SQL_W_LEDGER_DELETE = {
    ST_W_LEDGER_DELETE, "DELETE FROM wallet_ledger WHERE app_code = ?1 AND ref_id = ?2"
                        " AND kind = ?3"};
static const struct sq_sql SQL_W_LEDGER_UPDATE = {
    ST_W_LEDGER_UPDATE, "UPDATE wallet_ledger SET amount = ?4, uid = ?3, created_at_ms = ?6"
                        " WHERE app_code = ?1 AND ref_id = ?2 AND kind = ?5"};
static const struct sq_sql SQL_W_BALANCE = {
    ST_W_BALANCE, "SELECT balance FROM wallet_accounts WHERE app_code = ?1 AND uid = ?2"};
static const struct sq_sql SQL_W_SET_BALANCE = {
    ST_W_SET_BALANCE, "INSERT INTO wallet_accounts (app_code, uid, balance, updated_at_ms)"
                      " VALUES (?1, ?2, ?3, ?4) ON CONFLICT (app_code, uid) DO UPDATE"
                      " SET balance = excluded.balance, updated_at_ms = excluded.updated_at_ms"};

/* Reads the balance of (app, uid); a never-seen account has initial. */
static int
w_balance(struct conn *c, const char *app, int64_t uid, int64_t initial, int64_t *balance)
{
    sqlite3_stmt *q = sq_stmt(c, &SQL_W_BALANCE);
    int rc;

    if (q == NULL)
        return ROOMD_EIO;
    bind_text(q, 1, app);
    sqlite3_bind_int64(q, 2, uid);
    rc = sq_step_one(c, q, "wallet balance");
    *balance = rc == 1 ? sqlite3_column_int64(q, 0) : initial;
    done(q);
    return rc < 0 ? rc : 0;
}

static int
w_set_balance(struct conn *c, const char *app, int64_t uid, int64_t balance, int64_t now)
{
    sqlite3_stmt *q = sq_stmt(c, &SQL_W_SET_BALANCE);

    if (q == NULL)
        return ROOMD_EIO;
    bind_text(q, 1, app);
    sqlite3_bind_int64(q, 2, uid);
    sqlite3_bind_int64(q, 3, balance);
    sqlite3_bind_int64(q, 4, now);
    return sq_step_write(c, q, "wallet set balance");
}

/* Looks up ledger row (app, ref, kind): 1 found (uid, amount set), 0 not, <0 error. */
static int
w_ledger_get(struct conn *c, const char *app, const char *ref, const char *kind, int64_t *uid,
             int64_t *amount)
{
    sqlite3_stmt *q = sq_stmt(c, &SQL_W_LEDGER_GET);
    int rc;

    if (q == NULL)
        return ROOMD_EIO;
    bind_text(q, 1, app);
    bind_text(q, 2, ref);
    bind_text(q, 3, kind);
    if ((rc = sq_step_one(c, q, "wallet ledger")) == 1) {
        *uid = sqlite3_column_int64(q, 0);
        *amount = sqlite3_column_int64(q, 1);
    }
    done(q);
    return rc;
}

/* Writes ledger row (app, ref, kind) with stmt id (insert, update or delete). */
static int
w_ledger_write(struct conn *c, const struct sq_sql *id, const char *app, const char *ref,
               const char *kind, int64_t uid, int64_t amount, int64_t now)
{
    sqlite3_stmt *q = sq_stmt(c, id);

    if (q == NULL)
        return ROOMD_EIO;
    bind_text(q, 1, app);
    bind_text(q, 2, ref);
    if (id == &SQL_W_LEDGER_DELETE) {
        bind_text(q, 3, kind);
    } else {
        sqlite3_bind_int64(q, 3, uid);
        sqlite3_bind_int64(q, 4, amount);
        bind_text(q, 5, kind);
        sqlite3_bind_int64(q, 6, now);
    }
    return sq_step_write(c, q, "wallet ledger write");
}

/*
 * One debit inside the open transaction. A ref already debited (and not
 * refunded) is not charged again: 0 and the current balance. A refunded ref
 * debited again is charged again (the refund row is removed, the debit row
 * rewritten): the command that was refunded because its commit failed is
 * being retried. Returns 0 or ROOMD_EFUNDS/EINVAL (nothing written), or a
 * failure of the transaction (*fatal set).
 */
static int
debit_one(struct conn *c, struct wallet_debit *d, int64_t initial, int64_t now, int *fatal)
{
    int64_t luid = 0, lamount = 0, bal = 0, ruid, ramount;
    int rc, have_debit, have_refund;

    if ((rc = have_debit = w_ledger_get(c, d->app, d->ref_id, "debit", &luid, &lamount)) < 0)
        return *fatal = rc;
    if ((rc = have_refund = w_ledger_get(c, d->app, d->ref_id, "refund", &ruid, &ramount)) < 0)
        return *fatal = rc;
    if ((rc = w_balance(c, d->app, d->uid, initial, &bal)) != 0)
        return *fatal = rc;
    switch (wallet_debit_rule(d, have_debit, have_refund, bal)) {
    case WALLET_DEBIT_REFUSED:
        return d->rc;
    case WALLET_DEBIT_STANDS: /* already charged: report the balance, charge nothing */
        return *fatal = w_balance(c, d->app, luid, initial, &d->balance_after);
    case WALLET_DEBIT_CHARGE:
        break;
    }
    if (have_refund &&
        (rc = w_ledger_write(c, &SQL_W_LEDGER_DELETE, d->app, d->ref_id, "refund", 0, 0, now)) != 0)
        return *fatal = rc;
    rc = w_ledger_write(c, have_debit ? &SQL_W_LEDGER_UPDATE : &SQL_W_LEDGER_INSERT, d->app,
                        d->ref_id, "debit", d->uid, d->amount, now);
    if (rc != 0 || (rc = w_set_balance(c, d->app, d->uid, d->balance_after, now)) != 0)
        return *fatal = rc;
    return 0;
}

struct debit_batch {
    struct wallet_debit *items;
    int64_t initial_balance;
    int64_t now;
};

static int
debit_item(struct conn *c, void *arg, size_t i, int *fatal)
{
    struct debit_batch *b = arg;

    return b->items[i].rc = debit_one(c, &b->items[i], b->initial_balance, b->now, fatal);
}

/* Debits in one transaction, a savepoint per item (as sq_save). */
int
sq_wallet_debit_many(struct store *st, struct wallet_debit *items, size_t n,
                     int64_t initial_balance)
{
    struct sq_store *s = (struct sq_store *)st;
    struct conn *c = sq_writer_get(s);
    struct debit_batch b = {items, initial_balance, clock_wall_ms()};
    int rc;

    for (size_t i = 0; i < n; i++)
        items[i].rc = 0;
    rc = sq_in_savepoints(c, n, debit_item, &b);
    if (rc != 0)
        for (size_t i = 0; i < n; i++) {
            items[i].rc = rc;
            items[i].balance_after = 0;
        }
    sq_writer_put(s, c);
    return rc;
}

int
sq_wallet_refund(struct store *st, const char *app, const char *ref_id)
{
    struct sq_store *s = (struct sq_store *)st;
    struct conn *c = sq_writer_get(s);
    int64_t now = clock_wall_ms(), uid = 0, amount = 0, ruid, ramount, bal;
    int rc, found;

    if ((rc = sq_run(c, &SQL_BEGIN_IMMEDIATE)) != 0)
        goto out;
    if ((rc = found = w_ledger_get(c, app, ref_id, "debit", &uid, &amount)) < 0)
        goto out;
    if (!found) {
        store_set_errmsg("wallet: no debit %s", ref_id);
        rc = ROOMD_ENOTFOUND;
        goto out;
    }
    if ((rc = found = w_ledger_get(c, app, ref_id, "refund", &ruid, &ramount)) < 0)
        goto out;
    if (found) { /* refunded already: idempotent */
        rc = sq_run(c, &SQL_COMMIT);
        goto out;
    }
    /* The account exists: the debit wrote it. */
    if ((rc = w_balance(c, app, uid, 0, &bal)) != 0)
        goto out;
    if ((rc = w_ledger_write(c, &SQL_W_LEDGER_INSERT, app, ref_id, "refund", uid, amount, now)) !=
        0)
        goto out;
    if ((rc = w_set_balance(c, app, uid, bal + amount, now)) != 0)
        goto out;
    rc = sq_run(c, &SQL_COMMIT);
out:
    sq_writer_put(s, c);
    return rc;
}

int
sq_wallet_topup(struct store *st, const char *app, int64_t uid, int64_t amount, const char *ref_id,
                int64_t initial_balance, int64_t *balance_after)
{
    struct sq_store *s = (struct sq_store *)st;
    struct conn *c = sq_writer_get(s);
    int64_t now = clock_wall_ms(), luid, lamount, bal = 0;
    int rc, found;

    *balance_after = 0;
    if (amount < 0) {
        store_set_errmsg("wallet topup: negative amount");
        rc = ROOMD_EINVAL;
        goto out;
    }
    if ((rc = sq_run(c, &SQL_BEGIN_IMMEDIATE)) != 0)
        goto out;
    if ((rc = found = w_ledger_get(c, app, ref_id, "topup", &luid, &lamount)) < 0)
        goto out;
    if ((rc = w_balance(c, app, found ? luid : uid, initial_balance, &bal)) != 0)
        goto out;
    if (!found) {
        if ((rc = w_ledger_write(c, &SQL_W_LEDGER_INSERT, app, ref_id, "topup", uid, amount,
                                 now)) != 0)
            goto out;
        bal += amount;
        if ((rc = w_set_balance(c, app, uid, bal, now)) != 0)
            goto out;
    }
    if ((rc = sq_run(c, &SQL_COMMIT)) == 0)
        *balance_after = bal;
out:
    sq_writer_put(s, c);
    return rc;
}

int
sq_wallet_balance(struct store *st, const char *app, int64_t uid, int64_t initial_balance,
                  int64_t *balance)
{
    struct sq_store *s = (struct sq_store *)st;
    struct conn *c = sq_reader_get(s);
    int rc = w_balance(c, app, uid, initial_balance, balance);

    sq_reader_put(s, c);
    return rc;
}
