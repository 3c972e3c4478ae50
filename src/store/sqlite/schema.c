/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sqlite/schema.c: the schema and its migrations (migration i+1 is
 * migrations[i]; never edit one, add one), applied at open.
 */
#include "store/sqlite/internal.h"

#include "core/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const migrations[] = {
    /* 1: the schema of store.h (times are INTEGER unix ms). */
    "CREATE TABLE rooms ("
    " app_code TEXT NOT NULL, room_id TEXT NOT NULL,"
    " owner_uid INTEGER NOT NULL DEFAULT 0, title TEXT NOT NULL DEFAULT '',"
    " status TEXT NOT NULL DEFAULT 'open', version INTEGER NOT NULL,"
    " fence_token INTEGER NOT NULL DEFAULT 0,"
    " rocket_status TEXT NOT NULL DEFAULT 'idle', rocket_id TEXT NOT NULL DEFAULT '',"
    " rocket_level INTEGER NOT NULL DEFAULT 0, rocket_launch_at_ms INTEGER NOT NULL DEFAULT 0,"
    " created_at_ms INTEGER NOT NULL, updated_at_ms INTEGER NOT NULL,"
    " PRIMARY KEY (app_code, room_id)) WITHOUT ROWID;"
    "CREATE INDEX rooms_rocket_ignited ON rooms (rocket_status)"
    " WHERE rocket_status = 'ignited';"
    "CREATE TABLE room_command_log ("
    " id INTEGER PRIMARY KEY, app_code TEXT NOT NULL, room_id TEXT NOT NULL,"
    " version INTEGER NOT NULL, command_id TEXT NOT NULL, command_type TEXT NOT NULL,"
    " request TEXT NOT NULL, response TEXT NOT NULL, created_at_ms INTEGER NOT NULL,"
    " UNIQUE (app_code, command_id), UNIQUE (app_code, room_id, version));"
    "CREATE TABLE room_snapshots ("
    " app_code TEXT NOT NULL, room_id TEXT NOT NULL, version INTEGER NOT NULL,"
    " state TEXT NOT NULL, created_at_ms INTEGER NOT NULL,"
    " PRIMARY KEY (app_code, room_id, version)) WITHOUT ROWID;"
    "CREATE TABLE room_outbox ("
    " id INTEGER PRIMARY KEY AUTOINCREMENT, event_id TEXT NOT NULL UNIQUE,"
    " app_code TEXT NOT NULL, room_id TEXT NOT NULL, room_version INTEGER NOT NULL,"
    " command_id TEXT NOT NULL, event_type TEXT NOT NULL, payload BLOB,"
    " status TEXT NOT NULL, retry_count INTEGER NOT NULL DEFAULT 0,"
    " sinks_done INTEGER NOT NULL DEFAULT 0, next_retry_at_ms INTEGER NOT NULL DEFAULT 0,"
    " lock_until_ms INTEGER NOT NULL DEFAULT 0, locked_by TEXT NOT NULL DEFAULT '',"
    " last_error TEXT, due_at_ms INTEGER, created_at_ms INTEGER NOT NULL,"
    " updated_at_ms INTEGER NOT NULL, delivered_at_ms INTEGER);"
    /* The claim key: only claimable rows have a due_at_ms, so a claim never
     * touches delivered or failed rows however many the table holds. */
    "CREATE INDEX room_outbox_due ON room_outbox (due_at_ms, id)"
    " WHERE due_at_ms IS NOT NULL;"
    "CREATE INDEX room_outbox_delivered ON room_outbox (delivered_at_ms)"
    " WHERE delivered_at_ms IS NOT NULL;"
    "CREATE TABLE wallet_accounts ("
    " app_code TEXT NOT NULL, uid INTEGER NOT NULL, balance INTEGER NOT NULL,"
    " updated_at_ms INTEGER NOT NULL, PRIMARY KEY (app_code, uid)) WITHOUT ROWID;"
    "CREATE TABLE wallet_ledger ("
    " app_code TEXT NOT NULL, ref_id TEXT NOT NULL, uid INTEGER NOT NULL,"
    " amount INTEGER NOT NULL, kind TEXT NOT NULL, created_at_ms INTEGER NOT NULL,"
    " PRIMARY KEY (app_code, ref_id, kind)) WITHOUT ROWID;",
    /* 2: counts and lists by status read this index instead of the table
     * (1M rows: 50 ms instead of 300 ms for the counts). */
    "CREATE INDEX room_outbox_status ON room_outbox (status);",
    /* 3: a CreateRoom counts its owner's open rooms in its commit
     * (room.max_rooms_per_owner): a range of this index, not a scan. */
    "CREATE INDEX IF NOT EXISTS rooms_owner ON rooms (app_code, owner_uid, status);",
    /* 4: per-room order (issue 12). rooms.event_seq is the room's last
     * room_seq; room_outbox.room_seq numbers a room's events 1, 2, ...
     * without gaps (0: written before this migration). room_outbox_room
     * holds a room's undelivered rows only: the ordered claim and the
     * hand-off check read it. */
    "ALTER TABLE rooms ADD COLUMN event_seq INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE room_outbox ADD COLUMN room_seq INTEGER NOT NULL DEFAULT 0;"
    "CREATE INDEX room_outbox_room ON room_outbox (app_code, room_id, due_at_ms, id)"
    " WHERE due_at_ms IS NOT NULL;",
    /* 5: the gift catalog (issue 30): SendGift's unit price and rocket
     * energy per unit, per app, versioned (store.h, store_gift_*). */
    "CREATE TABLE gift_catalog ("
    " app_code TEXT NOT NULL, gift_id TEXT NOT NULL, unit_price INTEGER NOT NULL,"
    " energy_per_unit INTEGER NOT NULL, enabled INTEGER NOT NULL, version INTEGER NOT NULL,"
    " updated_at_ms INTEGER NOT NULL, PRIMARY KEY (app_code, gift_id)) WITHOUT ROWID;",
    /* 6: exact catch-up (issue 30): a room's events by room_seq (store_room_events). */
    "CREATE INDEX IF NOT EXISTS room_outbox_seq ON room_outbox (app_code, room_id, room_seq);",
};

#define NMIGRATIONS ((int)(sizeof(migrations) / sizeof(migrations[0])))

/* Applies the migrations the file lacks, inside one IMMEDIATE transaction so
 * two processes opening one new file do not both apply them. */
int
sq_migrate(struct conn *c, char *err, size_t errlen)
{
    sqlite3_stmt *s = NULL;
    char *emsg = NULL;
    int have = 0, rc;

    rc = sqlite3_exec(c->db,
                      "BEGIN IMMEDIATE; CREATE TABLE IF NOT EXISTS schema_migrations ("
                      " version INTEGER PRIMARY KEY, applied_at_ms INTEGER NOT NULL);",
                      NULL, NULL, &emsg);
    if (rc != SQLITE_OK)
        goto out;
    rc = sqlite3_prepare_v2(c->db, "SELECT coalesce(max(version), 0) FROM schema_migrations", -1,
                            &s, NULL);
    if (rc != SQLITE_OK)
        goto out;
    if ((rc = sqlite3_step(s)) != SQLITE_ROW)
        goto out;
    have = sqlite3_column_int(s, 0);
    sqlite3_finalize(s);
    s = NULL;
    if (have > NMIGRATIONS) {
        snprintf(err, errlen, "store: database schema version %d is newer than this roomd (%d)",
                 have, NMIGRATIONS);
        sq_rollback(c);
        return ROOMD_EINVAL;
    }
    for (int v = have + 1; v <= NMIGRATIONS; v++) {
        if ((rc = sqlite3_exec(c->db, migrations[v - 1], NULL, NULL, &emsg)) != SQLITE_OK)
            goto out;
        rc = sqlite3_prepare_v2(c->db,
                                "INSERT INTO schema_migrations (version, applied_at_ms)"
                                " VALUES (?1, CAST((julianday('now') - 2440587.5) * 86400000"
                                " AS INTEGER))",
                                -1, &s, NULL);
        if (rc != SQLITE_OK)
            goto out;
        sqlite3_bind_int(s, 1, v);
        rc = sqlite3_step(s);
        sqlite3_finalize(s);
        s = NULL;
        if (rc != SQLITE_DONE)
            goto out;
    }
    rc = sqlite3_exec(c->db, "COMMIT", NULL, NULL, &emsg);
out:
    sqlite3_finalize(s);
    if (rc != SQLITE_OK && rc != SQLITE_DONE) {
        snprintf(err, errlen, "store: migration failed: %s", emsg ? emsg : sqlite3_errmsg(c->db));
        sqlite3_free(emsg);
        sq_rollback(c);
        return (rc & 0xff) == SQLITE_BUSY ? ROOMD_EUNAVAIL : ROOMD_EIO;
    }
    sqlite3_free(emsg);
    return 0;
}
