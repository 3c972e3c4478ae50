/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_suite.h: ONE conformance suite for the store interface (store.h),
 * run by every backend's test program: tests/unit/test_store_sqlite.c and the
 * MySQL test. The suite only uses store.h; it is linked into every test
 * program through the test helper archive (every .c directly in tests/).
 */
#ifndef ROOMD_STORE_SUITE_H
#define ROOMD_STORE_SUITE_H

#include <stdint.h>

struct conf;
struct store;
struct mutation;

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

/* Opens the store of c->store or fails the running cmocka test. */
struct store *store_suite_open(struct conf *c);

/* A mutation of room (app, room) at version (create when version == 1) with
 * command_id cmd, nevents (<= 8) outbox rows and the command clock t; its
 * events and payloads live inside the same allocation. Free with free(). */
struct mutation *store_suite_mutation(const char *app, const char *room, const char *cmd,
                                      int64_t version, int nevents, int64_t t);

/* Commits version 1 of room with nevents events at t (command_id "<room>-create");
 * fails the running test unless it committed. */
void store_suite_create_room(struct store *st, const char *app, const char *room, int nevents,
                             int64_t t);

#endif
