/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sqlite/db.h: the SQLite backend's one open path, for its files that are
 * not the store (sqlite/inbox.c: a group's own file) as well as for the
 * store's connections (internal.h includes it).
 */
#ifndef ROOMD_STORE_SQLITE_DB_H
#define ROOMD_STORE_SQLITE_DB_H

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

/* conn.c: the one open of every SQLite connection of roomd (the store's,
 * the admin store's, the consumer inboxes'): path with flags (SQLITE_OPEN_*;
 * NOMUTEX added: each connection has one user at a time), extended result
 * codes, busy_ms (<= 0: 5000 ms) for a writer's lock, then pragmas (NULL:
 * none). Returns 0 and *db, or ROOMD_EUNAVAIL (cannot open, busy) /
 * ROOMD_EIO with err ("cannot open \"path\": why" or "\"path\": why") and
 * *db NULL. Thread: any; blocks on the file. */
int sq_open_db(sqlite3 **db, const char *path, int flags, int64_t busy_ms, const char *pragmas,
               char *err, size_t errlen);

#endif
