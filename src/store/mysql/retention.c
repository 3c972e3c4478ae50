/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mysql/retention.c: purging the command log (store_command_log_purge,
 * store.h) in chunks of PURGE_CHUNK, each its own short autocommit statement:
 * rows created before the cut-off whose version is at or below the room's
 * oldest kept snapshot (load_room replays only the log after the newest one;
 * the rebuild starts from a snapshot too), oldest id first. mys_purge_chunks
 * (the chunked DELETE loop) serves the outbox purge too. MariaDB refuses a
 * subquery on the table being deleted from, so the ids are picked through a
 * derived table.
 */
#include "store/mysql/internal.h"

#include "core/err.h"

#define PURGE_CHUNK 500

MYS_SQL(LOG_PURGE,
        "DELETE FROM room_command_log WHERE id IN (SELECT id FROM (SELECT l.id"
        " FROM room_command_log l WHERE l.created_at_ms < ? AND l.version <= (SELECT MIN(s.version)"
        " FROM room_snapshots s WHERE s.app_code = l.app_code AND s.room_id = l.room_id)"
        " ORDER BY l.id LIMIT ?) AS old)");

struct purge_ctx {
    const struct mys_sql *sql;
    int64_t before;
    int limit;
    size_t purged;
};

/* Runs x->sql (before, chunk) until x->limit rows went or a chunk came back short. */
static int
purge_fn(struct conn *c, void *arg)
{
    struct purge_ctx *x = arg;
    uint64_t aff;
    int rc;

    while (x->purged < (size_t)x->limit) {
        size_t want = (size_t)x->limit - x->purged;

        if (want > PURGE_CHUNK)
            want = PURGE_CHUNK;
        if ((rc = mys_exec(c, x->sql, &aff, "ii", x->before, (int64_t)want)) != 0)
            return rc;
        x->purged += aff;
        if (aff < want)
            break;
    }
    return 0;
}

int
mys_purge_chunks(struct mstore *s, const struct mys_sql *sql, int64_t before, int limit,
                 size_t *purged)
{
    struct purge_ctx x = {sql, before, limit, 0};
    int rc = 0;

    if (limit > 0)
        rc = mys_run(s, purge_fn, &x);
    if (purged != NULL)
        *purged = x.purged;
    return rc;
}

int
mys_command_log_purge(struct store *s, int64_t before_ms, int limit, size_t *purged)
{
    return mys_purge_chunks((struct mstore *)s, &SQL_LOG_PURGE, before_ms, limit, purged);
}
