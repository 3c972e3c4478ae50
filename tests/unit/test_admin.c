/* SPDX-License-Identifier: Apache-2.0 */
/* test_admin.c: the admin suite (tests/admin_suite.c) on SQLite, then what
 * only SQLite shows: a read-only handle never creates a missing file, and
 * reads a store roomd left in WAL mode. */
#include "admin_suite.h"
#include "helpers.h"
#include "store_suite.h"

#include "admin/admin.h"
#include "conf/conf.h"
#include "core/err.h"
#include "core/xmalloc.h"
#include "store/admin.h"
#include "store/store.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *dirs[64];
static int ndirs;

static struct conf *
make_conf(void)
{
    char *d = th_tmpdir();
    if (ndirs < 64)
        dirs[ndirs++] = d;
    return th_conf_sqlite(d);
}

static void
t_readonly_never_creates(void **state)
{
    struct conf *c = make_conf();
    struct admin *a = NULL;
    char err[256];

    assert_int_equal(admin_open(&a, c, NULL, true, err, sizeof(err)), ROOMD_ENOTFOUND);
    assert_non_null(strstr(err, "store.sqlite.path"));
    assert_int_equal(access(c->store.sqlite.path, F_OK), -1); /* nothing created */
    assert_int_equal(admin_open(&a, c, NULL, false, err, sizeof(err)), ROOMD_ENOTFOUND);
    assert_int_equal(access(c->store.sqlite.path, F_OK), -1);
    /* a file that is not a roomd store */
    FILE *fp = fopen(c->store.sqlite.path, "w");
    fclose(fp);
    assert_int_equal(admin_open(&a, c, NULL, true, err, sizeof(err)), ROOMD_EINVAL);
    assert_non_null(strstr(err, "not a roomd store"));
    conf_free(c);
}

static void
t_readonly_reads_wal_store(void **state)
{
    struct conf *c = make_conf();
    struct store *st = store_suite_open(c);
    struct admin *a = NULL;
    struct admin_reply r = {0};
    char err[256];

    store_suite_create_room(st, "a1", "w1", 2, 1700000000000LL);
    store_close(st);
    assert_int_equal(admin_open(&a, c, NULL, true, err, sizeof(err)), 0);
    admin_summary(a, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"pending\":2"));
    admin_reply_clear(&r);
    admin_audits(a, NULL, NULL, &r); /* no audit table: no audits, not an error */
    assert_int_equal(r.status, 200);
    admin_reply_clear(&r);
    admin_close(a);
    conf_free(c);
}

static int
rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    return remove(p);
}

int
main(void)
{
    const struct CMUnitTest sqlite_only[] = {
        cmocka_unit_test(t_readonly_never_creates),
        cmocka_unit_test(t_readonly_reads_wal_store),
    };
    int failed = admin_suite_run("admin_sqlite", make_conf, NULL);

    failed += cmocka_run_group_tests_name("admin_sqlite_only", sqlite_only, NULL, NULL);
    for (int i = 0; i < ndirs; i++) {
        nftw(dirs[i], rm_one, 8, FTW_DEPTH | FTW_PHYS);
        free(dirs[i]);
    }
    return failed ? 1 : 0;
}
