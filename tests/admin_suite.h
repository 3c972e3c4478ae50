/* SPDX-License-Identifier: Apache-2.0 */
/*
 * admin_suite.h: the admin module's conformance suite (tests/admin_suite.c),
 * run on SQLite (tests/unit/test_admin.c) and on MariaDB
 * (tests/integ/test_admin_mysql.c): filters, summary, keyset list, show,
 * dry run, audited bulk replay, resume after a crash, repair, read-only.
 */
#ifndef ROOMD_TEST_ADMIN_SUITE_H
#define ROOMD_TEST_ADMIN_SUITE_H

struct conf;

/* Runs the suite as cmocka group name. make_conf returns a conf on an empty
 * store (the suite frees it); reset (may be NULL) empties that store's
 * tables before each test. Returns the failures. */
int admin_suite_run(const char *name, struct conf *(*make_conf)(void),
                    void (*reset)(struct conf *c));

#endif
