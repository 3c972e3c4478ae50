/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sqlite/schema.c: the schema and its migrations (migration i+1 is
 * migrations[i]; never edit one, add one), applied at open.
 */
#include "store/sqlite/internal.h"

#include "store/seed_shape.h"

#include "core/err.h"
#include "core/log.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const migrations[] = {
    /* 1: the schema of store.h (times are INTEGER unix ms). IF NOT EXISTS:
     * tables of the seed's shape are checked and completed first
     * (adopt_tables), then kept; on a new file the same as without. */
    "CREATE TABLE IF NOT EXISTS rooms ("
    " app_code TEXT NOT NULL, room_id TEXT NOT NULL,"
    " owner_uid INTEGER NOT NULL DEFAULT 0, title TEXT NOT NULL DEFAULT '',"
    " status TEXT NOT NULL DEFAULT 'open', version INTEGER NOT NULL,"
    " fence_token INTEGER NOT NULL DEFAULT 0,"
    " rocket_status TEXT NOT NULL DEFAULT 'idle', rocket_id TEXT NOT NULL DEFAULT '',"
    " rocket_level INTEGER NOT NULL DEFAULT 0, rocket_launch_at_ms INTEGER NOT NULL DEFAULT 0,"
    " created_at_ms INTEGER NOT NULL, updated_at_ms INTEGER NOT NULL,"
    " PRIMARY KEY (app_code, room_id)) WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS rooms_rocket_ignited ON rooms (rocket_status)"
    " WHERE rocket_status = 'ignited';"
    "CREATE TABLE IF NOT EXISTS room_command_log ("
    " id INTEGER PRIMARY KEY, app_code TEXT NOT NULL, room_id TEXT NOT NULL,"
    " version INTEGER NOT NULL, command_id TEXT NOT NULL, command_type TEXT NOT NULL,"
    " request TEXT NOT NULL, response TEXT NOT NULL, created_at_ms INTEGER NOT NULL,"
    " UNIQUE (app_code, command_id), UNIQUE (app_code, room_id, version));"
    "CREATE TABLE IF NOT EXISTS room_snapshots ("
    " app_code TEXT NOT NULL, room_id TEXT NOT NULL, version INTEGER NOT NULL,"
    " state TEXT NOT NULL, created_at_ms INTEGER NOT NULL,"
    " PRIMARY KEY (app_code, room_id, version)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS room_outbox ("
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
    "CREATE INDEX IF NOT EXISTS room_outbox_due ON room_outbox (due_at_ms, id)"
    " WHERE due_at_ms IS NOT NULL;"
    "CREATE INDEX IF NOT EXISTS room_outbox_delivered ON room_outbox (delivered_at_ms)"
    " WHERE delivered_at_ms IS NOT NULL;"
    "CREATE TABLE IF NOT EXISTS wallet_accounts ("
    " app_code TEXT NOT NULL, uid INTEGER NOT NULL, balance INTEGER NOT NULL,"
    " updated_at_ms INTEGER NOT NULL, PRIMARY KEY (app_code, uid)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS wallet_ledger ("
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
    /* 6: a debit row records the gift it pays (issue 25): the room, the
     * gift's room version and its request digest, so that a command_id
     * whose log row was purged never commits a second gift on that debit
     * (wallet_debit_rule) and the audit matches every gift to its own debit.
     * "" / 0: written before. */
    "ALTER TABLE wallet_ledger ADD COLUMN room_id TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE wallet_ledger ADD COLUMN version INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE wallet_ledger ADD COLUMN request_digest TEXT NOT NULL DEFAULT '';"
    /* and the readiness write probe's row (store_write_probe) */
    "CREATE TABLE store_probe (id INTEGER PRIMARY KEY, at_ms INTEGER NOT NULL);",
    /* 7: the request that carried a command (X-Request-Id, traceparent; issue 29) */
    "ALTER TABLE room_command_log ADD COLUMN request_id TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE room_command_log ADD COLUMN traceparent TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE room_outbox ADD COLUMN request_id TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE room_outbox ADD COLUMN traceparent TEXT NOT NULL DEFAULT '';",
    /* 8: the seed's columns are the truth (issue 26, docs/migrate.md): the
     * reconcile of due_at_ms (outbox.c) ranges over (status, due_at_ms). */
    "CREATE INDEX room_outbox_status_due ON room_outbox (status, due_at_ms);",
    /* 9: exact catch-up (issue 30): a room's events by room_seq (store_room_events). */
    "CREATE INDEX IF NOT EXISTS room_outbox_seq ON room_outbox (app_code, room_id, room_seq);",
};

/*
 * Tables of the seed's shape (docs/migrate.md): a file roomd never migrated
 * may hold rooms, room_command_log, room_snapshots and room_outbox of
 * another writer. Before migration 1 (which then keeps them) each existing
 * one is checked and completed in place: the columns roomd needs and cannot
 * invent (need) must be there, no column roomd does not know may be NOT
 * NULL without a default, and the columns and unique indexes it lacks are
 * added; nothing is dropped, every row is kept.
 */
struct adopt {
    const char *table;
    const char *const *need;    /* NULL-ended */
    const char *const *columns; /* "name definition", NULL-ended */
    const char *indexes;        /* run after the columns, or NULL */
};

static const char *const outbox_need[] = {"id",      "event_id",      "app_code",
                                          "room_id", "event_type",    "payload",
                                          "status",  "created_at_ms", NULL};
static const char *const outbox_cols[] = {"room_version INTEGER NOT NULL DEFAULT 0",
                                          "command_id TEXT NOT NULL DEFAULT ''",
                                          "retry_count INTEGER NOT NULL DEFAULT 0",
                                          "sinks_done INTEGER NOT NULL DEFAULT 0",
                                          "next_retry_at_ms INTEGER NOT NULL DEFAULT 0",
                                          "lock_until_ms INTEGER NOT NULL DEFAULT 0",
                                          "locked_by TEXT NOT NULL DEFAULT ''",
                                          "last_error TEXT",
                                          "due_at_ms INTEGER",
                                          "updated_at_ms INTEGER NOT NULL DEFAULT 0",
                                          "delivered_at_ms INTEGER",
                                          NULL};
static const char *const cmdlog_need[] = {"id",      "app_code",      "room_id", "command_id",
                                          "version", "created_at_ms", NULL};
static const char *const cmdlog_cols[] = {"command_type TEXT NOT NULL DEFAULT ''",
                                          "request TEXT NOT NULL DEFAULT ''",
                                          "response TEXT NOT NULL DEFAULT ''", NULL};
static const char *const rooms_need[] = {"app_code", "room_id", NULL};
static const char *const rooms_cols[] = {"owner_uid INTEGER NOT NULL DEFAULT 0",
                                         "title TEXT NOT NULL DEFAULT ''",
                                         "status TEXT NOT NULL DEFAULT 'open'",
                                         "version INTEGER NOT NULL DEFAULT 0",
                                         "fence_token INTEGER NOT NULL DEFAULT 0",
                                         "rocket_status TEXT NOT NULL DEFAULT 'idle'",
                                         "rocket_id TEXT NOT NULL DEFAULT ''",
                                         "rocket_level INTEGER NOT NULL DEFAULT 0",
                                         "rocket_launch_at_ms INTEGER NOT NULL DEFAULT 0",
                                         "created_at_ms INTEGER NOT NULL DEFAULT 0",
                                         "updated_at_ms INTEGER NOT NULL DEFAULT 0",
                                         NULL};
static const char *const snap_need[] = {"app_code", "room_id", "version", "state", NULL};
static const char *const snap_cols[] = {"created_at_ms INTEGER NOT NULL DEFAULT 0", NULL};

static const struct adopt adopts[] = {
    {"rooms", rooms_need, rooms_cols,
     "CREATE UNIQUE INDEX IF NOT EXISTS rooms_key ON rooms (app_code, room_id)"},
    {"room_command_log", cmdlog_need, cmdlog_cols,
     "CREATE UNIQUE INDEX IF NOT EXISTS room_command_log_command"
     " ON room_command_log (app_code, command_id);"
     "CREATE UNIQUE INDEX IF NOT EXISTS room_command_log_version"
     " ON room_command_log (app_code, room_id, version)"},
    {"room_snapshots", snap_need, snap_cols,
     "CREATE UNIQUE INDEX IF NOT EXISTS room_snapshots_key"
     " ON room_snapshots (app_code, room_id, version)"},
    {"room_outbox", outbox_need, outbox_cols,
     "CREATE UNIQUE INDEX IF NOT EXISTS room_outbox_event ON room_outbox (event_id)"},
};

/* Checks and completes the existing table a->table (nothing when there is
 * none), inside the migration's transaction. Returns 0, ROOMD_EINVAL with
 * err naming the column roomd cannot take, or an SQLite failure code. */
static int
adopt_table(struct conn *c, const struct adopt *a, char *err, size_t errlen)
{
    char sql[256];
    sqlite3_stmt *q = NULL;
    bool have[16] = {false}, any = false, added[16] = {false};
    char bad[96] = "";
    int rc;

    snprintf(sql, sizeof(sql),
             "SELECT name, \"notnull\", dflt_value IS NULL, pk"
             " FROM pragma_table_info('%s')",
             a->table);
    if ((rc = sqlite3_prepare_v2(c->db, sql, -1, &q, NULL)) != SQLITE_OK)
        return rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(q, 0);

        any = true;
        for (size_t i = 0; a->need[i] != NULL; i++)
            if (strcasecmp(a->need[i], name) == 0)
                have[i] = true;
        for (size_t i = 0; a->columns[i] != NULL; i++)
            if (strncasecmp(a->columns[i], name, strlen(name)) == 0 &&
                a->columns[i][strlen(name)] == ' ')
                added[i] = true; /* already there */
        if (!store_known_column(name, strlen(name)) && sqlite3_column_int(q, 1) &&
            sqlite3_column_int(q, 2) && !sqlite3_column_int(q, 3) && !*bad)
            snprintf(bad, sizeof(bad), "%s", name);
    }
    sqlite3_finalize(q);
    if (rc != SQLITE_DONE)
        return rc;
    if (!any)
        return 0; /* migration 1 creates it */
    for (size_t i = 0; a->need[i] != NULL; i++)
        if (!have[i]) {
            snprintf(err, errlen,
                     "store: existing table %s has no column %s: roomd cannot take this table"
                     " (docs/migrate.md)",
                     a->table, a->need[i]);
            return ROOMD_EINVAL;
        }
    if (*bad) {
        snprintf(err, errlen,
                 "store: existing table %s has column %s NOT NULL without a default, which roomd"
                 " does not write: give it a default or make it nullable (docs/migrate.md)",
                 a->table, bad);
        return ROOMD_EINVAL;
    }
    for (size_t i = 0; a->columns[i] != NULL; i++) {
        if (added[i])
            continue;
        snprintf(sql, sizeof(sql), "ALTER TABLE %s ADD COLUMN %s", a->table, a->columns[i]);
        if ((rc = sqlite3_exec(c->db, sql, NULL, NULL, NULL)) != SQLITE_OK)
            return rc;
    }
    if (a->indexes != NULL && (rc = sqlite3_exec(c->db, a->indexes, NULL, NULL, NULL)) != SQLITE_OK)
        return rc;
    log_info("store", "existing table of the seed's shape taken in place", "table=%s", a->table);
    return 0;
}

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
    for (size_t i = 0; have == 0 && i < sizeof(adopts) / sizeof(adopts[0]); i++) {
        if ((rc = adopt_table(c, &adopts[i], err, errlen)) == ROOMD_EINVAL) {
            sq_rollback(c);
            return rc;
        }
        if (rc != 0)
            goto out;
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
    /* rows another writer left (or a seed table just taken): due_at_ms
     * derived from the seed's columns before the first claim */
    int fixed = 0;
    if (sq_outbox_reconcile_in_tx(c, &fixed) != 0) {
        snprintf(err, errlen, "store: deriving due_at_ms: %s", store_errmsg());
        sq_rollback(c);
        return ROOMD_EIO;
    }
    if (fixed > 0)
        log_info("store", "outbox rows of another writer made claimable", "rows=%d", fixed);
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
