/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mysql/schema.c: the schema as versioned migrations, applied at open under
 * GET_LOCK so that several processes starting at once migrate once.
 */
#include "store/mysql/internal.h"

#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* 5: exact catch-up (issue 30): a room's events by room_seq (store_room_events). */
static const char *const migration_5[] = {
    "ALTER TABLE room_outbox ADD KEY IF NOT EXISTS ix_outbox_seq (app_code, room_id, room_seq)",
    NULL,
};

static const struct migration {
    int version;
    const char *const *sql;
} migrations[] = {
    {1, migration_1}, {2, migration_2}, {3, migration_3}, {4, migration_4}, {5, migration_5},
};

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
unlock:
    if (c->db != NULL)
        mys_q_exec(c, "SELECT RELEASE_LOCK('roomd.schema_migrations')");
out:
    if (rc != 0)
        snprintf(err, errlen, "store.mysql: migrating %s: %s", s->database, c->errmsg);
    return rc;
}
