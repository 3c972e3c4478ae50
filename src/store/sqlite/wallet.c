/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sqlite/wallet.c: the embedded wallet: balances in wallet_accounts and one
 * ledger row per (ref_id, kind): a gift's debit (inside the gift's own
 * savepoint, called by save_one), topup, balance.
 */
#include "store/sqlite/internal.h"

#include "core/checked.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/xmalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

SQ_SQL(W_LEDGER_GET, "SELECT uid, amount, request_digest FROM wallet_ledger WHERE app_code = ?1"
                     " AND ref_id = ?2 AND kind = ?3");
SQ_SQL(W_LEDGER_INSERT, "INSERT INTO wallet_ledger (app_code, ref_id, uid, amount, kind,"
                        " created_at_ms, room_id, version, request_digest)"
                        " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)");
SQ_SQL(W_LEDGER_DELETE, "DELETE FROM wallet_ledger WHERE app_code = ?1 AND ref_id = ?2"
                        " AND kind = ?3");
SQ_SQL(W_LEDGER_UPDATE, "UPDATE wallet_ledger SET amount = ?4, uid = ?3, created_at_ms = ?6,"
                        " room_id = ?7, version = ?8, request_digest = ?9"
                        " WHERE app_code = ?1 AND ref_id = ?2 AND kind = ?5");
SQ_SQL(W_BALANCE, "SELECT balance FROM wallet_accounts WHERE app_code = ?1 AND uid = ?2");
SQ_SQL(W_SET_BALANCE, "INSERT INTO wallet_accounts (app_code, uid, balance, updated_at_ms)"
                      " VALUES (?1, ?2, ?3, ?4) ON CONFLICT (app_code, uid) DO UPDATE"
                      " SET balance = excluded.balance, updated_at_ms = excluded.updated_at_ms");

/* Reads the balance of (app, uid); a never-seen account has initial. */
static int
w_balance(struct conn *c, const char *app, int64_t uid, int64_t initial, int64_t *balance)
{
    int rc;

    *balance = initial;
    rc = sq_step_i64(c, sq_bound(c, &SQL_W_BALANCE, "si", app, uid), balance, "wallet balance");
    return rc < 0 ? rc : 0;
}

static int
w_set_balance(struct conn *c, const char *app, int64_t uid, int64_t balance, int64_t now)
{
    sqlite3_stmt *q = sq_bound(c, &SQL_W_SET_BALANCE, "siii", app, uid, balance, now);

    return sq_step_write(c, q, "wallet set balance");
}

/* Looks up ledger row (app, ref, kind): 1 found (uid, amount and, when not
 * NULL, its request digest into digest[65] set), 0 not, <0 error. */
static int
w_ledger_get(struct conn *c, const char *app, const char *ref, const char *kind, int64_t *uid,
             int64_t *amount, char *digest)
{
    sqlite3_stmt *q = sq_bound(c, &SQL_W_LEDGER_GET, "sss", app, ref, kind);
    int rc;

    if ((rc = sq_step_one(c, q, "wallet ledger")) == 1) {
        const unsigned char *t = sqlite3_column_text(q, 2);

        *uid = sqlite3_column_int64(q, 0);
        *amount = sqlite3_column_int64(q, 1);
        if (digest != NULL)
            strlcpy_(digest, t != NULL ? (const char *)t : "", 65);
    }
    done(q);
    return rc;
}

/* Writes ledger row (app, ref, kind) with stmt id (insert, update or
 * delete); a debit records its gift d (NULL: a top-up). */
static int
w_ledger_write(struct conn *c, const struct sq_sql *id, const char *app, const char *ref,
               const char *kind, int64_t uid, int64_t amount, int64_t now,
               const struct wallet_debit *d)
{
    sqlite3_stmt *q = id == &SQL_W_LEDGER_DELETE
                          ? sq_bound(c, id, "sss", app, ref, kind)
                          : sq_bound(c, id, "ssiisisis", app, ref, uid, amount, kind, now,
                                     d != NULL && d->room_id != NULL ? d->room_id : "",
                                     d != NULL ? d->version : 0, d != NULL ? d->digest : "");

    return sq_step_write(c, q, "wallet ledger write");
}

/*
 * A gift's debit inside the open transaction and the gift's savepoint
 * (sqlite/command.c save_one), by wallet_debit_rule. Returns 0, a refusal
 * of this mutation alone (EFUNDS, EINVAL, EREUSED: nothing written), or a
 * failure of the transaction (*fatal set).
 */
int
sq_gift_debit(struct conn *c, struct wallet_debit *d, int64_t now, int *fatal)
{
    int64_t luid = 0, lamount = 0, bal = 0, ruid, ramount;
    char ldigest[65] = "";
    int rc, have_debit, have_refund;

    if ((rc = have_debit = w_ledger_get(c, d->app, d->ref_id, "debit", &luid, &lamount, ldigest)) <
        0)
        return *fatal = rc;
    if ((rc = have_refund = w_ledger_get(c, d->app, d->ref_id, "refund", &ruid, &ramount, NULL)) <
        0)
        return *fatal = rc;
    if ((rc = w_balance(c, d->app, d->uid, d->initial_balance, &bal)) != 0)
        return *fatal = rc;
    if (wallet_debit_rule(d, have_debit, luid, lamount, ldigest, have_refund, bal) ==
        WALLET_DEBIT_REFUSED)
        return d->rc;
    if (have_refund && (rc = w_ledger_write(c, &SQL_W_LEDGER_DELETE, d->app, d->ref_id, "refund", 0,
                                            0, now, NULL)) != 0)
        return *fatal = rc;
    rc = w_ledger_write(c, have_debit ? &SQL_W_LEDGER_UPDATE : &SQL_W_LEDGER_INSERT, d->app,
                        d->ref_id, "debit", d->uid, d->amount, now, d);
    if (rc != 0 || (rc = w_set_balance(c, d->app, d->uid, d->balance_after, now)) != 0)
        return *fatal = rc;
    return 0;
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
    if ((rc = found = w_ledger_get(c, app, ref_id, "topup", &luid, &lamount, NULL)) < 0)
        goto out;
    if ((rc = w_balance(c, app, found ? luid : uid, initial_balance, &bal)) != 0)
        goto out;
    if (!found) {
        if (!i64_add_ok(bal, amount, &bal)) {
            store_set_errmsg("amount: the balance would pass %lld", (long long)INT64_MAX);
            rc = ROOMD_ERANGE;
            goto out;
        }
        if ((rc = w_ledger_write(c, &SQL_W_LEDGER_INSERT, app, ref_id, "topup", uid, amount, now,
                                 NULL)) != 0)
            goto out;
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

SQ_SQL(W_AUDIT, "SELECT 'G', app_code, command_id, '', 0, 0, request, room_id, version, '', 0"
                " FROM room_command_log"
                " WHERE command_type = 'SendGift' AND (?1 = '' OR app_code = ?1)"
                " UNION ALL SELECT 'L', app_code, ref_id, kind, uid, amount, NULL, room_id,"
                " version, request_digest, created_at_ms"
                " FROM wallet_ledger WHERE ?1 = '' OR app_code = ?1"
                " UNION ALL SELECT 'A', app_code, '', '', uid, balance, NULL, '', 0, '', 0"
                " FROM wallet_accounts WHERE ?1 = '' OR app_code = ?1"
                " UNION ALL SELECT 'M', app_code, '', '', 0, 0, NULL, room_id, MIN(version), '', 0"
                " FROM room_command_log WHERE ?1 = '' OR app_code = ?1"
                " GROUP BY app_code, room_id");

/* The audit's three tables (and each room's oldest logged version) in one
 * statement: one read snapshot. */
int
sq_wallet_audit_rows(struct store *st, const char *app, struct audit_row **rows, size_t *n)
{
    struct sq_all x = {sizeof(**rows), store_audit_cols, "wallet audit", NULL, 0};

    return sq_read_list(st, &SQL_W_AUDIT, app, &x, rows, n);
}
