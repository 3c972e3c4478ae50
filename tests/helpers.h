/* SPDX-License-Identifier: Apache-2.0 */
/*
 * helpers.h: what the C tests share: a fresh temp directory, a default conf
 * pointing at it, and the test servers' addresses from the environment
 * (scripts/servers.sh). A test needing a server that is not there skips
 * (exit 77) locally and fails when ROOMD_REQUIRE_SERVERS is set (make test).
 */
#ifndef ROOMD_TEST_HELPERS_H
#define ROOMD_TEST_HELPERS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* cmocka.h needs the four headers above first */
#include <cmocka.h>

struct conf;

/* Creates and returns a new empty directory under $TMPDIR (static buffer per call
 * is NOT used: the string is malloc'd). */
char *th_tmpdir(void);
/* conf_defaults() with the SQLite file, logs and log sink inside dir. Free with conf_free. */
struct conf *th_conf_sqlite(const char *dir);
/* conf_defaults() pointed at the test MariaDB (database roomd_test) or NULL
 * when it is not reachable (then th_skip_or_fail was called). */
struct conf *th_conf_mysql(const char *dir);
/* A free TCP port on 127.0.0.1 (bound, read back, closed). */
int th_free_port(void);
/* True when something accepts TCP connections on 127.0.0.1:port. */
int th_port_open(int port);
/* Starts a private redis-server on port with its files in dir (no persistence)
 * and waits until it accepts connections; returns its pid. */
int th_start_redis(int port, const char *dir);
/* SIGKILLs pid and reaps it. */
void th_kill(int pid);
/* Port of a test server from the environment (ROOMD_MYSQL_PORT, ...) or dflt. */
int th_env_port(const char *name, int dflt);
/* Skips the calling test program (exit 77) unless ROOMD_REQUIRE_SERVERS is set,
 * in which case it fails with why. */
void th_skip_or_fail(const char *why);

/* One ctest entry per test function (tests/cases.c): every program's groups
 * run through th_run_group. `prog --list` prints one id per test ("name", or
 * "group.name" for a group not called "tests") and runs nothing; `prog ID`
 * runs that test alone (its group's setup/teardown around it; other groups
 * are skipped); an ID no group holds fails the program. CMake lists the ids
 * of each program after building it (cannot drift from the arrays). */
int th_run_group(const char *group, const struct CMUnitTest *tests, size_t n,
                 CMFixtureFunction setup, CMFixtureFunction teardown);

/* True while the program runs with --list: main skips its server set-up. */
int th_listing(void);

#undef cmocka_run_group_tests
#define cmocka_run_group_tests(t, s, td) th_run_group("tests", t, sizeof(t) / sizeof((t)[0]), s, td)
#undef cmocka_run_group_tests_name
#define cmocka_run_group_tests_name(g, t, s, td)                                                   \
    th_run_group(g, t, sizeof(t) / sizeof((t)[0]), s, td)

#endif
