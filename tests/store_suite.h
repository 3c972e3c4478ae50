/*
 * store_suite.h: ONE conformance suite for the store interface (store.h),
 * run by every backend's test program: tests/unit/test_store_sqlite.c and the
 * MySQL test. The suite only uses store.h. The test programs link only
 * tests/helpers.c, so a program includes store_suite.c itself:
 *     #include "store_suite.c"
 */
#ifndef ROOMD_STORE_SUITE_H
#define ROOMD_STORE_SUITE_H

struct conf;
struct store;

/*
 * Runs every conformance test (one cmocka group named backend_name) and
 * returns the number of failed tests. Each test calls make_conf() for a
 * fresh struct conf (freed by the suite with conf_free), opens the store of
 * conf->store, and, when reset is not NULL, calls reset(store) so the test
 * starts on empty tables (a shared server database); without reset, each
 * make_conf() must name an empty database (a new SQLite file). Some tests
 * open a second store on the same conf, as a second process would.
 */
int store_suite_run(const char *backend_name, struct conf *(*make_conf)(void),
                    int (*reset)(struct store *s));

#endif
