/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mysql/gifts.c: the gift catalog (store.h, store_gift_*): one row per
 * (app_code, gift_id), its version raised by every change.
 */
#include "store/mysql/internal.h"

#include "core/clock.h"
#include "core/err.h"

#include <string.h>

#define GIFT_COLS "app_code, gift_id, unit_price, energy_per_unit, enabled, version, updated_at_ms"
#define GIFT_TYPES "ssiiiii"

MYS_SQL(GIFT_GET, "SELECT " GIFT_COLS " FROM gift_catalog WHERE app_code=? AND gift_id=?");
/* the row (or, absent, its gap) locked until the put commits: two puts of
 * one gift run one after the other, each on the version the other wrote */
MYS_SQL(GIFT_VERSION, "SELECT version FROM gift_catalog WHERE app_code=? AND gift_id=? FOR UPDATE");
MYS_SQL(GIFT_UPSERT, "INSERT INTO gift_catalog (" GIFT_COLS ") VALUES (?,?,?,?,?,?,?)"
                     " ON DUPLICATE KEY UPDATE unit_price=VALUES(unit_price),"
                     " energy_per_unit=VALUES(energy_per_unit), enabled=VALUES(enabled),"
                     " version=VALUES(version), updated_at_ms=VALUES(updated_at_ms)");
MYS_SQL(GIFT_LIST, "SELECT " GIFT_COLS " FROM gift_catalog WHERE ?='' OR app_code=?"
                   " ORDER BY app_code, gift_id");

static void
read_gift(const struct rows *r, void *dst)
{
    mys_read_cols(r, store_gift_cols, dst, sizeof(struct gift_item));
}

int
mys_gift_get(struct store *s, const char *app, const char *gift_id, struct gift_item *out)
{
    struct one_ctx x = {&SQL_GIFT_GET, GIFT_TYPES, app, gift_id, read_gift, out};

    return mys_run((struct mstore *)s, mys_one_fn, &x);
}

struct put_ctx {
    struct gift_item *g;
    int64_t expect;
    int64_t version, now; /* out */
};

static int
put_fn(struct conn *c, void *arg)
{
    struct put_ctx *x = arg;
    struct gift_item *g = x->g;
    struct rows r;
    int64_t cur = 0;
    int rc;

    x->version = 0;
    x->now = clock_wall_ms();
    if ((rc = mys_tx_begin(c)) != 0)
        return rc;
    rc = mys_query_one(c, &SQL_GIFT_VERSION, &r, "i", "ss", g->app_code, g->gift_id);
    if (rc == 1)
        cur = r_i64(&r, 0);
    mys_rows_done(&r);
    if (rc < 0)
        return rc;
    if (x->expect >= 0 && x->expect != cur) {
        store_set_errmsg("gift %s is at version %lld, not %lld", g->gift_id, (long long)cur,
                         (long long)x->expect);
        x->version = cur;
        mys_tx_rollback(c);
        return ROOMD_ECONFLICT;
    }
    if ((rc = mys_exec(c, &SQL_GIFT_UPSERT, NULL, "ssiidii", g->app_code, g->gift_id, g->unit_price,
                       g->energy_per_unit, g->enabled, cur + 1, x->now)) != 0)
        return rc;
    x->version = cur + 1;
    return mys_tx_commit(c);
}

int
mys_gift_put(struct store *s, struct gift_item *g, int64_t expect_version)
{
    struct put_ctx x = {g, expect_version, 0, 0};
    int rc = mys_run_tx((struct mstore *)s, put_fn, &x);

    g->version = x.version;
    if (rc == 0)
        g->updated_at_ms = x.now;
    return rc;
}

int
mys_gift_list(struct store *s, const char *app, struct gift_item **rows, size_t *n)
{
    struct all_ctx x = {&SQL_GIFT_LIST,  GIFT_TYPES, {.n = 0}, sizeof(**rows),
                        store_gift_cols, NULL,       0};
    int rc;

    p_str(&x.p, app);
    p_str(&x.p, app);
    rc = mys_read_all((struct mstore *)s, &x);
    *rows = x.rows;
    *n = x.n;
    return rc;
}
