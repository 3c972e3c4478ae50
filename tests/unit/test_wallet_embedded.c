/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_wallet_embedded.c: the wallet front (wallet.c) and the embedded
 * wallet on a real SQLite file: a gift's debit is attached to its mutation
 * (store_save writes it; tests/store_suite.c t_wallet checks that), the
 * request digest binds a key to its request and ignores the room's logged
 * "rules", top-up and balance go to the store, and an unknown driver is
 * refused naming wallet.driver.
 */
#include "helpers.h"
#include "store_suite.h"

#include "conf/conf.h"
#include "core/err.h"
#include "store/store.h"
#include "wallet/wallet.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int
rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static void
t_attach_topup_balance(void **state)
{
    (void)state;
    char *dir = th_tmpdir(), err[256];
    struct conf *c = th_conf_sqlite(dir);
    struct store *st = store_suite_open(c);
    struct conf_wallet cw = {.driver = "embedded", .initial_balance = 50};
    struct wallet *w = NULL;
    struct wallet_gift g;
    struct wallet_debit d;
    int64_t b;

    assert_int_equal(wallet_open(&w, &cw, st, err, sizeof(err)), 0);
    assert_null(w->ops->hold);
    assert_null(w->ops->settle);
    wallet_gift_init(&g, "we", "r1", "g1", 7, 30, "{\"type\":\"SendGift\"}");
    w->ops->attach(w, &g, &d);
    assert_string_equal(d.app, "we");
    assert_string_equal(d.ref_id, "g1");
    assert_int_equal(d.uid, 7);
    assert_int_equal(d.amount, 30);
    assert_int_equal(d.initial_balance, 50);
    assert_int_equal(w->ops->balance(w, "we", 7, &b), 0);
    assert_int_equal(b, 50);
    assert_int_equal(w->ops->topup(w, "we", 7, 25, "t1", &b), 0);
    assert_int_equal(b, 75);
    assert_int_equal(w->ops->topup(w, "we", 7, INT64_MAX, "t2", &b), ROOMD_ERANGE);
    assert_int_equal(w->ops->balance(w, "we", 7, &b), 0);
    assert_int_equal(b, 75);
    wallet_close(w);
    store_close(st);
    conf_free(c);
    nftw(dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
    free(dir);
}

static void
t_digest(void **state)
{
    (void)state;
    char a[65], b[65], x[65];

    wallet_request_digest("{\"command_id\":\"g\",\"count\":1,\"type\":\"SendGift\"}", a);
    assert_int_equal(strlen(a), 64);
    /* a logged request with the room's rules is the same request */
    wallet_request_digest("{\"command_id\":\"g\",\"count\":1,\"rules\":{\"max_members\":3},"
                          "\"type\":\"SendGift\"}",
                          b);
    assert_string_equal(a, b);
    wallet_request_digest("{\"command_id\":\"g\",\"count\":2,\"type\":\"SendGift\"}", x);
    assert_string_not_equal(a, x);
    /* SHA-256 of "" */
    wallet_request_digest("", x);
    assert_string_equal(x, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

static void
t_unknown_driver(void **state)
{
    (void)state;
    struct conf_wallet cw = {.driver = "paypal"};
    struct wallet *w = (struct wallet *)1;
    char err[256];

    assert_int_equal(wallet_open(&w, &cw, NULL, err, sizeof(err)), ROOMD_EINVAL);
    assert_null(w);
    assert_non_null(strstr(err, "wallet.driver"));
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(t_attach_topup_balance),
        cmocka_unit_test(t_digest),
        cmocka_unit_test(t_unknown_driver),
    };

    return cmocka_run_group_tests_name("wallet_embedded", tests, NULL, NULL);
}
