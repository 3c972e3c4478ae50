/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sqlite/gifts.c: the gift catalog (store.h, store_gift_*): one row per
 * (app_code, gift_id), its version raised by every change.
 */
#include "store/sqlite/internal.h"

#include "core/clock.h"
#include "core/err.h"

#include <string.h>

#define GIFT_COLS "app_code, gift_id, unit_price, energy_per_unit, enabled, version, updated_at_ms"

SQ_SQL(GIFT_GET, "SELECT " GIFT_COLS " FROM gift_catalog WHERE app_code = ?1 AND gift_id = ?2");
SQ_SQL(GIFT_VERSION, "SELECT version FROM gift_catalog WHERE app_code = ?1 AND gift_id = ?2");
SQ_SQL(GIFT_UPSERT,
       "INSERT INTO gift_catalog (" GIFT_COLS ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"
       " ON CONFLICT (app_code, gift_id) DO UPDATE SET unit_price = excluded.unit_price,"
       " energy_per_unit = excluded.energy_per_unit, enabled = excluded.enabled,"
       " version = excluded.version, updated_at_ms = excluded.updated_at_ms");
SQ_SQL(GIFT_LIST, "SELECT " GIFT_COLS " FROM gift_catalog WHERE ?1 = '' OR app_code = ?1"
                  " ORDER BY app_code, gift_id");

static void
read_gift(sqlite3_stmt *q, void *out)
{
    sq_read_cols(q, store_gift_cols, out, sizeof(struct gift_item));
}

int
sq_gift_get(struct store *st, const char *app, const char *gift_id, struct gift_item *out)
{
    return sq_read_one((struct sq_store *)st, &SQL_GIFT_GET, app, gift_id, read_gift, out,
                       "gift get");
}

int
sq_gift_put(struct store *st, struct gift_item *g, int64_t expect_version)
{
    struct sq_store *s = (struct sq_store *)st;
    struct conn *c = sq_writer_get(s);
    int64_t cur = 0, now = clock_wall_ms();
    int rc;

    if ((rc = sq_run(c, &SQL_BEGIN_IMMEDIATE)) != 0)
        goto out;
    rc = sq_step_i64(c, sq_bound(c, &SQL_GIFT_VERSION, "ss", g->app_code, g->gift_id), &cur,
                     "gift version");
    if (rc < 0)
        goto out;
    if (expect_version >= 0 && expect_version != cur) {
        store_set_errmsg("gift %s is at version %lld, not %lld", g->gift_id, (long long)cur,
                         (long long)expect_version);
        g->version = cur;
        rc = ROOMD_ECONFLICT;
        goto out;
    }
    rc = sq_step_write(c,
                       sq_bound(c, &SQL_GIFT_UPSERT, "ssiidii", g->app_code, g->gift_id,
                                g->unit_price, g->energy_per_unit, g->enabled, cur + 1, now),
                       "gift put");
    if (rc == 0 && (rc = sq_run(c, &SQL_COMMIT)) == 0) {
        g->version = cur + 1;
        g->updated_at_ms = now;
    }
out:
    sq_writer_put(s, c); /* rolls back what an error left open */
    return rc;
}

int
sq_gift_list(struct store *st, const char *app, struct gift_item **rows, size_t *n)
{
    struct sq_all x = {sizeof(**rows), store_gift_cols, "gift list", NULL, 0};

    return sq_read_list(st, &SQL_GIFT_LIST, app, &x, rows, n);
}
