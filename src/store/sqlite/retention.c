/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sqlite/retention.c: purging the command log (store_command_log_purge,
 * store.h). One DELETE of up to limit rows, its own short transaction: rows
 * created before the cut-off whose version is at or below the room's oldest
 * kept snapshot (load_room replays only the log after the newest one; the
 * rebuild starts from a snapshot too), oldest id first. sq_purge_rows runs
 * such a DELETE for the outbox's purge too.
 */
#include "store/sqlite/internal.h"

#include "core/err.h"

SQ_SQL(LOG_PURGE, "DELETE FROM room_command_log WHERE id IN (SELECT l.id FROM room_command_log l"
                  " WHERE l.created_at_ms < ?1 AND l.version <= (SELECT min(s.version)"
                  " FROM room_snapshots s WHERE s.app_code = l.app_code"
                  " AND s.room_id = l.room_id) ORDER BY l.id LIMIT ?2)");

int
sq_purge_rows(struct store *st, const struct sq_sql *sql, int64_t before_ms, int limit,
              size_t *purged, const char *what)
{
    struct sq_store *s = (struct sq_store *)st;
    struct conn *c = sq_writer_get(s);
    int rc = sq_step_write(c, sq_bound(c, sql, "id", before_ms, limit), what);

    *purged = rc == 0 ? (size_t)sqlite3_changes(c->db) : 0;
    sq_writer_put(s, c);
    return rc;
}

int
sq_command_log_purge(struct store *st, int64_t before_ms, int limit, size_t *purged)
{
    return sq_purge_rows(st, &SQL_LOG_PURGE, before_ms, limit, purged, "command log purge");
}
