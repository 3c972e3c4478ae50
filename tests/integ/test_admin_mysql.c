/* SPDX-License-Identifier: Apache-2.0 */
/* test_admin_mysql.c: the admin suite (tests/admin_suite.c) on a real
 * mariadbd (scripts/servers.sh), in a database of its own, emptied before
 * each test. */
#include "admin_suite.h"
#include "helpers.h"

#include "conf/conf.h"
#include "core/clock.h"
#include "core/xmalloc.h"

#include <mysql.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dbname[64];
static char *dir;
static MYSQL *raw;

static struct conf *
make_conf(void)
{
    struct conf *c = th_conf_mysql(dir);

    free(c->store.mysql.database);
    c->store.mysql.database = xstrdup(dbname);
    c->store.mysql.pool_size = 2;
    return c;
}

static void
sql(const char *q)
{
    if (mysql_query(raw, q) != 0)
        fail_msg("%s: %s", q, mysql_error(raw));
}

static void
reset(struct conf *c)
{
    static const char *const tables[] = {"room_outbox", "room_command_log", "room_snapshots",
                                         "rooms",       "admin_audit",      "admin_audit_rows"};
    char q[128];

    for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++) {
        snprintf(q, sizeof(q), "DELETE FROM %s", tables[i]);
        if (mysql_query(raw, q) != 0 && mysql_errno(raw) != 1146) /* not created yet */
            fail_msg("%s: %s", q, mysql_error(raw));
    }
}

int
main(void)
{
    char q[160];
    int rc;

    dir = th_tmpdir();
    if (th_listing()) {
        rc = admin_suite_run("admin_mysql", make_conf, reset);
        rmdir(dir);
        free(dir);
        return rc;
    }
    struct conf *c = th_conf_mysql(dir);
    raw = mysql_init(NULL);
    if (!mysql_real_connect(raw, "127.0.0.1", "root", "", NULL, (unsigned)c->store.mysql.port, NULL,
                            0)) {
        conf_free(c);
        th_skip_or_fail("mariadbd not reachable (scripts/servers.sh start)");
        return 77;
    }
    conf_free(c);
    snprintf(dbname, sizeof(dbname), "roomd_adm%d_%lld", (int)getpid(),
             (long long)(clock_wall_ms() % 100000));
    snprintf(q, sizeof(q), "CREATE DATABASE %s CHARACTER SET utf8mb4", dbname);
    sql(q);
    snprintf(q, sizeof(q), "USE %s", dbname);
    sql(q);
    rc = admin_suite_run("admin_mysql", make_conf, reset);
    snprintf(q, sizeof(q), "DROP DATABASE %s", dbname);
    sql(q);
    mysql_close(raw);
    rmdir(dir);
    free(dir);
    return rc ? 1 : 0;
}
