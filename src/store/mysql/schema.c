/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mysql/schema.c: the schema as versioned migrations, applied at open under
 * GET_LOCK so that several processes starting at once migrate once.
 */
#include "store/mysql/internal.h"

#include "store/seed_shape.h"

#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/*
 * Ids are VARBINARY: byte-exact like SQLite (utf8mb4_bin pads spaces in
 * MariaDB) and never refused for their encoding. due_at_ms is the claim key
 * (see store.h): non-NULL only for claimable rows, so ix_outbox_due never
 * holds delivered or failed rows.
 */
#define TABLE_OPTS " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"

static const char *const migration_1[] = {
    "CREATE TABLE IF NOT EXISTS rooms ("
    " app_code VARBINARY(64) NOT NULL,"
    " room_id VARBINARY(64) NOT NULL,"
    " owner_uid BIGINT NOT NULL,"
    " title TEXT NOT NULL,"
    " status VARCHAR(16) NOT NULL,"
    " version BIGINT NOT NULL,"
    " fence_token BIGINT NOT NULL DEFAULT 0,"
    " rocket_status VARCHAR(16) NOT NULL DEFAULT 'idle',"
    " rocket_id VARBINARY(64) NOT NULL DEFAULT '',"
    " rocket_level INT NOT NULL DEFAULT 0,"
    " rocket_launch_at_ms BIGINT NOT NULL DEFAULT 0,"
    " created_at_ms BIGINT NOT NULL,"
    " updated_at_ms BIGINT NOT NULL,"
    " PRIMARY KEY (app_code, room_id),"
    " KEY ix_rooms_rocket (rocket_status)"
    ")" TABLE_OPTS,

    "CREATE TABLE IF NOT EXISTS room_command_log ("
    " id BIGINT NOT NULL AUTO_INCREMENT,"
    " app_code VARBINARY(64) NOT NULL,"
    " room_id VARBINARY(64) NOT NULL,"
    " version BIGINT NOT NULL,"
    " command_id VARBINARY(64) NOT NULL,"
    " command_type VARCHAR(32) NOT NULL,"
    " request MEDIUMTEXT NOT NULL,"
    " response MEDIUMTEXT NOT NULL,"
    " created_at_ms BIGINT NOT NULL,"
    " PRIMARY KEY (id),"
    " UNIQUE KEY uq_cmdlog_command (app_code, command_id),"
    " UNIQUE KEY uq_cmdlog_version (app_code, room_id, version)"
    ")" TABLE_OPTS,

    "CREATE TABLE IF NOT EXISTS room_snapshots ("
    " app_code VARBINARY(64) NOT NULL,"
    " room_id VARBINARY(64) NOT NULL,"
    " version BIGINT NOT NULL,"
    " state MEDIUMTEXT NOT NULL,"
    " created_at_ms BIGINT NOT NULL,"
    " PRIMARY KEY (app_code, room_id, version)"
    ")" TABLE_OPTS,

    "CREATE TABLE IF NOT EXISTS room_outbox ("
    " id BIGINT NOT NULL AUTO_INCREMENT,"
    " event_id CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
    " app_code VARBINARY(64) NOT NULL,"
    " room_id VARBINARY(64) NOT NULL,"
    " room_version BIGINT NOT NULL,"
    " command_id VARBINARY(64) NOT NULL,"
    " event_type VARCHAR(32) NOT NULL,"
    " payload MEDIUMBLOB NOT NULL,"
    " status VARCHAR(16) NOT NULL,"
    " retry_count INT NOT NULL DEFAULT 0,"
    " sinks_done INT UNSIGNED NOT NULL DEFAULT 0,"
    " next_retry_at_ms BIGINT NULL,"
    " lock_until_ms BIGINT NULL,"
    " locked_by VARBINARY(64) NULL,"
    " last_error BLOB NULL,"
    " due_at_ms BIGINT NULL,"
    " created_at_ms BIGINT NOT NULL,"
    " updated_at_ms BIGINT NOT NULL,"
    " delivered_at_ms BIGINT NULL,"
    " PRIMARY KEY (id),"
    " UNIQUE KEY uq_outbox_event (event_id),"
    " KEY ix_outbox_due (due_at_ms, id),"
    " KEY ix_outbox_status (status, id),"
    " KEY ix_outbox_delivered (delivered_at_ms)"
    ")" TABLE_OPTS,

    "CREATE TABLE IF NOT EXISTS wallet_accounts ("
    " app_code VARBINARY(64) NOT NULL,"
    " uid BIGINT NOT NULL,"
    " balance BIGINT NOT NULL,"
    " updated_at_ms BIGINT NOT NULL,"
    " PRIMARY KEY (app_code, uid)"
    ")" TABLE_OPTS,

    "CREATE TABLE IF NOT EXISTS wallet_ledger ("
    " app_code VARBINARY(64) NOT NULL,"
    " ref_id VARBINARY(64) NOT NULL,"
    " uid BIGINT NOT NULL,"
    " amount BIGINT NOT NULL,"
    " kind VARCHAR(16) NOT NULL,"
    " created_at_ms BIGINT NOT NULL,"
    " PRIMARY KEY (app_code, ref_id, kind)"
    ")" TABLE_OPTS,
    NULL,
};

/* A CreateRoom counts its owner's open rooms in its commit
 * (room.max_rooms_per_owner): a range of ix_rooms_owner, after taking the
 * owner's row of room_owner_locks (one row per owner that ever created a
 * room), so that the creates of one owner commit one at a time and none can
 * miss another's room (mysql/command.c). */
static const char *const migration_2[] = {
    "ALTER TABLE rooms ADD KEY IF NOT EXISTS ix_rooms_owner (app_code, owner_uid, status)",
    "CREATE TABLE IF NOT EXISTS room_owner_locks ("
    " app_code VARBINARY(64) NOT NULL,"
    " owner_uid BIGINT NOT NULL,"
    " PRIMARY KEY (app_code, owner_uid)"
    ")" TABLE_OPTS,
    NULL,
};

/* 3: per-room order (issue 12): rooms.event_seq is the room's last room_seq;
 * room_outbox.room_seq numbers a room's events 1, 2, ... without gaps (0:
 * written before this migration). ix_outbox_room (app_code, room_id,
 * due_at_ms, id): the ordered claim and the hand-off check range over a
 * room's undelivered rows only (due_at_ms NOT NULL), never its delivered
 * ones. */
static const char *const migration_3[] = {
    "ALTER TABLE rooms ADD COLUMN IF NOT EXISTS event_seq BIGINT NOT NULL DEFAULT 0",
    "ALTER TABLE room_outbox ADD COLUMN IF NOT EXISTS room_seq BIGINT NOT NULL DEFAULT 0,"
    " ADD KEY IF NOT EXISTS ix_outbox_room (app_code, room_id, due_at_ms, id)",
    NULL,
};

/* 4: the gift catalog (issue 30): SendGift's unit price and rocket energy
 * per unit, per app, versioned (store.h, store_gift_*). */
static const char *const migration_4[] = {
    "CREATE TABLE IF NOT EXISTS gift_catalog ("
    " app_code VARBINARY(64) NOT NULL,"
    " gift_id VARBINARY(64) NOT NULL,"
    " unit_price BIGINT NOT NULL,"
    " energy_per_unit BIGINT NOT NULL,"
    " enabled TINYINT NOT NULL,"
    " version BIGINT NOT NULL,"
    " updated_at_ms BIGINT NOT NULL,"
    " PRIMARY KEY (app_code, gift_id)"
    ")" TABLE_OPTS,
    NULL,
};

/* 5: a debit row records the gift it pays (issue 25): the room, the gift's
 * room version and its request digest, so that a command_id whose log row
 * was purged never commits a second gift on that debit (wallet_debit_rule)
 * and the audit matches every gift to its own debit. "" / 0: written
 * before. */
static const char *const migration_5[] = {
    "ALTER TABLE wallet_ledger ADD COLUMN IF NOT EXISTS room_id VARBINARY(64) NOT NULL DEFAULT '',"
    " ADD COLUMN IF NOT EXISTS version BIGINT NOT NULL DEFAULT 0,"
    " ADD COLUMN IF NOT EXISTS request_digest VARBINARY(64) NOT NULL DEFAULT ''",
    /* and the readiness write probe's row (store_write_probe) */
    "CREATE TABLE IF NOT EXISTS store_probe (id INT NOT NULL PRIMARY KEY, at_ms BIGINT NOT "
    "NULL)" TABLE_OPTS,
    NULL,
};

/* 6: the request that carried a command (X-Request-Id, traceparent; issue 29). */
static const char *const migration_6[] = {
    "ALTER TABLE room_command_log"
    " ADD COLUMN IF NOT EXISTS request_id VARBINARY(64) NOT NULL DEFAULT '',"
    " ADD COLUMN IF NOT EXISTS traceparent VARBINARY(55) NOT NULL DEFAULT ''",
    "ALTER TABLE room_outbox"
    " ADD COLUMN IF NOT EXISTS request_id VARBINARY(64) NOT NULL DEFAULT '',"
    " ADD COLUMN IF NOT EXISTS traceparent VARBINARY(55) NOT NULL DEFAULT ''",
    NULL,
};

/* 7: the seed's columns are the truth (issue 26, docs/migrate.md): the
 * reconcile of due_at_ms (outbox.c) ranges over (status, due_at_ms). */
static const char *const migration_7[] = {
    "ALTER TABLE room_outbox ADD KEY IF NOT EXISTS ix_outbox_status_due (status, due_at_ms)",
    NULL,
};

/* 8: exact catch-up (issue 30): a room's events by room_seq (store_room_events). */
static const char *const migration_8[] = {
    "ALTER TABLE room_outbox ADD KEY IF NOT EXISTS ix_outbox_seq (app_code, room_id, room_seq)",
    NULL,
};

static const struct migration {
    int version;
    const char *const *sql;
} migrations[] = {
    {1, migration_1}, {2, migration_2}, {3, migration_3}, {4, migration_4},
    {5, migration_5}, {6, migration_6}, {7, migration_7}, {8, migration_8},
};

/*
 * Tables of the seed's shape (docs/migrate.md): a database that roomd never
 * migrated may hold rooms, room_command_log, room_snapshots and room_outbox
 * written by the seed's room-service. Migration 1 creates only missing
 * tables (IF NOT EXISTS), so before it each existing one is checked and
 * completed in place: the columns roomd needs and cannot invent (need) must
 * be there, no column roomd does not know may be NOT NULL without a default
 * (roomd's INSERTs would fail), and the columns and keys it lacks are added
 * (add); nothing is dropped, every row is kept. The later migrations then
 * apply as on roomd's own tables.
 */
struct adopt {
    const char *table;
    const char *const *need; /* NULL-ended */
    const char *const *add;  /* "ADD ... IF NOT EXISTS ..." clauses, NULL-ended */
};

static const char *const outbox_need[] = {"id",      "event_id",      "app_code",
                                          "room_id", "event_type",    "payload",
                                          "status",  "created_at_ms", NULL};
static const char *const outbox_add[] = {
    "ADD COLUMN IF NOT EXISTS room_version BIGINT NOT NULL DEFAULT 0",
    "ADD COLUMN IF NOT EXISTS command_id VARBINARY(64) NOT NULL DEFAULT ''",
    "ADD COLUMN IF NOT EXISTS retry_count INT NOT NULL DEFAULT 0",
    "ADD COLUMN IF NOT EXISTS sinks_done INT UNSIGNED NOT NULL DEFAULT 0",
    "ADD COLUMN IF NOT EXISTS next_retry_at_ms BIGINT NULL",
    "ADD COLUMN IF NOT EXISTS lock_until_ms BIGINT NULL",
    "ADD COLUMN IF NOT EXISTS locked_by VARBINARY(64) NULL",
    "ADD COLUMN IF NOT EXISTS last_error BLOB NULL",
    "ADD COLUMN IF NOT EXISTS due_at_ms BIGINT NULL",
    "ADD COLUMN IF NOT EXISTS updated_at_ms BIGINT NOT NULL DEFAULT 0",
    "ADD COLUMN IF NOT EXISTS delivered_at_ms BIGINT NULL",
    "ADD UNIQUE KEY IF NOT EXISTS uq_outbox_event (event_id)",
    "ADD KEY IF NOT EXISTS ix_outbox_due (due_at_ms, id)",
    "ADD KEY IF NOT EXISTS ix_outbox_status (status, id)",
    "ADD KEY IF NOT EXISTS ix_outbox_delivered (delivered_at_ms)",
    NULL,
};
static const char *const cmdlog_need[] = {"id",      "app_code",      "room_id", "command_id",
                                          "version", "created_at_ms", NULL};
static const char *const cmdlog_add[] = {
    "ADD COLUMN IF NOT EXISTS command_type VARCHAR(32) NOT NULL DEFAULT ''",
    "ADD COLUMN IF NOT EXISTS request MEDIUMTEXT NOT NULL DEFAULT ''",
    "ADD COLUMN IF NOT EXISTS response MEDIUMTEXT NOT NULL DEFAULT ''",
    "ADD UNIQUE KEY IF NOT EXISTS uq_cmdlog_command (app_code, command_id)",
    "ADD UNIQUE KEY IF NOT EXISTS uq_cmdlog_version (app_code, room_id, version)",
    NULL,
};
static const char *const rooms_need[] = {"app_code", "room_id", NULL};
static const char *const rooms_add[] = {
    "ADD COLUMN IF NOT EXISTS owner_uid BIGINT NOT NULL DEFAULT 0",
    "ADD COLUMN IF NOT EXISTS title TEXT NOT NULL DEFAULT ''",
    "ADD COLUMN IF NOT EXISTS status VARCHAR(16) NOT NULL DEFAULT 'open'",
    "ADD COLUMN IF NOT EXISTS version BIGINT NOT NULL DEFAULT 0",
    "ADD COLUMN IF NOT EXISTS fence_token BIGINT NOT NULL DEFAULT 0",
    "ADD COLUMN IF NOT EXISTS rocket_status VARCHAR(16) NOT NULL DEFAULT 'idle'",
    "ADD COLUMN IF NOT EXISTS rocket_id VARBINARY(64) NOT NULL DEFAULT ''",
    "ADD COLUMN IF NOT EXISTS rocket_level INT NOT NULL DEFAULT 0",
    "ADD COLUMN IF NOT EXISTS rocket_launch_at_ms BIGINT NOT NULL DEFAULT 0",
    "ADD COLUMN IF NOT EXISTS created_at_ms BIGINT NOT NULL DEFAULT 0",
    "ADD COLUMN IF NOT EXISTS updated_at_ms BIGINT NOT NULL DEFAULT 0",
    "ADD KEY IF NOT EXISTS ix_rooms_rocket (rocket_status)",
    NULL,
};
static const char *const snap_need[] = {"app_code", "room_id", "version", "state", NULL};
static const char *const snap_add[] = {
    "ADD COLUMN IF NOT EXISTS created_at_ms BIGINT NOT NULL DEFAULT 0",
    NULL,
};

static const struct adopt adopts[] = {
    {"rooms", rooms_need, rooms_add},
    {"room_command_log", cmdlog_need, cmdlog_add},
    {"room_snapshots", snap_need, snap_add},
    {"room_outbox", outbox_need, outbox_add},
};

/* Checks and completes the existing table a->table (nothing when it does
 * not exist). Returns 0, ROOMD_EINVAL with c->errmsg naming the column
 * roomd cannot take, or a database failure. */
static int
adopt_table(struct conn *c, const struct adopt *a)
{
    char sql[512];
    MYSQL_RES *res;
    MYSQL_ROW row;
    bool have[16] = {false}, any = false;
    char bad[96] = "";
    int rc;

    snprintf(sql, sizeof(sql),
             "SELECT COLUMN_NAME, IS_NULLABLE, COLUMN_DEFAULT IS NULL, EXTRA"
             " FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=DATABASE()"
             " AND TABLE_NAME='%s'",
             a->table);
    if (mysql_real_query(c->db, sql, strlen(sql)) != 0 || (res = mysql_store_result(c->db)) == NULL)
        return mys_db_fail(c, "information_schema.COLUMNS");
    while ((row = mysql_fetch_row(res)) != NULL) {
        any = true;
        for (size_t i = 0; a->need[i] != NULL && i < 16; i++)
            if (strcasecmp(a->need[i], row[0]) == 0)
                have[i] = true;
        if (!store_known_column(row[0], strlen(row[0])) && strcmp(row[1], "NO") == 0 &&
            strcmp(row[2], "1") == 0 && strstr(row[3], "auto_increment") == NULL &&
            strstr(row[3], "GENERATED") == NULL && !*bad)
            snprintf(bad, sizeof(bad), "%s", row[0]);
    }
    mysql_free_result(res);
    if (!any)
        return 0; /* migration 1 creates it */
    for (size_t i = 0; a->need[i] != NULL; i++)
        if (!have[i]) {
            snprintf(c->errmsg, sizeof(c->errmsg),
                     "existing table %s has no column %s: roomd cannot take this table"
                     " (docs/migrate.md)",
                     a->table, a->need[i]);
            return ROOMD_EINVAL;
        }
    if (*bad) {
        snprintf(c->errmsg, sizeof(c->errmsg),
                 "existing table %s has column %s NOT NULL without a default, which roomd"
                 " does not write: give it a default or make it nullable (docs/migrate.md)",
                 a->table, bad);
        return ROOMD_EINVAL;
    }
    for (const char *const *q = a->add; *q != NULL; q++) {
        snprintf(sql, sizeof(sql), "ALTER TABLE %s %s", a->table, *q);
        if ((rc = mys_q_exec(c, sql)) != 0)
            return rc;
    }
    log_info("store", "existing table of the seed's shape taken in place", "table=%s", a->table);
    return 0;
}

#define NMIGRATIONS (sizeof(migrations) / sizeof(migrations[0]))

int
mys_migrate(struct mstore *s, struct conn *c, char *err, size_t errlen)
{
    bool applied[NMIGRATIONS + 1] = {false};
    MYSQL_RES *res;
    MYSQL_ROW row;
    char sql[160];
    int64_t locked = 0;
    int rc = 0, got;

    /* Several processes may start at once: one migrates, the others wait. */
    if ((rc = mys_q_int(c, "SELECT GET_LOCK('roomd.schema_migrations', 60)", &locked)) != 0)
        goto out;
    if (locked != 1) {
        snprintf(c->errmsg, sizeof(c->errmsg), "GET_LOCK timed out after 60 s");
        rc = ROOMD_ETIMEDOUT;
        goto out;
    }
    if ((rc = mys_q_exec(c, "CREATE TABLE IF NOT EXISTS schema_migrations ("
                            " version INT NOT NULL PRIMARY KEY,"
                            " applied_at_ms BIGINT NOT NULL)" TABLE_OPTS)) != 0)
        goto unlock;
    if (mysql_real_query(c->db, "SELECT version FROM schema_migrations",
                         strlen("SELECT version FROM schema_migrations")) != 0 ||
        (res = mysql_store_result(c->db)) == NULL) {
        rc = mys_db_fail(c, "schema_migrations");
        goto unlock;
    }
    while ((row = mysql_fetch_row(res)) != NULL) {
        got = atoi(row[0]);
        if (got >= 1 && got <= (int)NMIGRATIONS)
            applied[got] = true;
        else if (got > (int)NMIGRATIONS)
            log_warn("store", "database schema is newer than this roomd", "version=%d", got);
    }
    mysql_free_result(res);
    for (size_t i = 0; !applied[1] && i < sizeof(adopts) / sizeof(adopts[0]); i++)
        if ((rc = adopt_table(c, &adopts[i])) != 0)
            goto unlock;
    for (size_t i = 0; i < NMIGRATIONS; i++) {
        const struct migration *m = &migrations[i];

        if (applied[m->version])
            continue;
        for (const char *const *q = m->sql; *q != NULL; q++)
            if ((rc = mys_q_exec(c, *q)) != 0)
                goto unlock;
        snprintf(sql, sizeof(sql),
                 "INSERT INTO schema_migrations (version, applied_at_ms) VALUES (%d, %lld)",
                 m->version, (long long)clock_wall_ms());
        if ((rc = mys_q_exec(c, sql)) != 0)
            goto unlock;
        log_info("store", "mysql migration applied", "version=%d database=%s", m->version,
                 s->database);
    }
    /* rows another writer left (or a seed table just taken): due_at_ms
     * derived from the seed's columns before the first claim */
    uint64_t fixed = 0;
    if ((rc = mys_outbox_reconcile_on(c, &fixed)) != 0)
        goto unlock;
    if (fixed > 0)
        log_info("store", "outbox rows of another writer made claimable", "rows=%llu",
                 (unsigned long long)fixed);
unlock:
    if (c->db != NULL)
        mys_q_exec(c, "SELECT RELEASE_LOCK('roomd.schema_migrations')");
out:
    if (rc != 0)
        snprintf(err, errlen, "store.mysql: migrating %s: %s", s->database, c->errmsg);
    return rc;
}
