/*
 * test_wallet_embedded.c: the embedded wallet on a real SQLite file, many
 * threads debiting at once through its debit committer: every balance is
 * exact, a repeated ref charges once, a poor account is charged exactly as
 * far as it goes (the rest EFUNDS), and the debits really were batched.
 */
#include "helpers.h"
#include "store_suite.h"

#include "conf/conf.h"
#include "core/err.h"
#include "store/store.h"
#include "wallet/wallet.h"
#include "wallet/wallet_embedded.h"

#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NTHREADS 16
#define PER_THREAD 30
#define NUIDS 4
#define INITIAL 100000
#define POOR_UID 99
#define POOR_LEFT 10

static char err[512];

/* A gift's hold of amount from uid under ref (the embedded wallet debits). */
static int
debit(struct wallet *w, const char *app, int64_t uid, int64_t amount, const char *ref, int64_t *bal)
{
    struct wallet_gift g;

    wallet_gift_init(&g, app, "r1", ref, uid, amount, "{}");
    return w->ops->hold(w, &g, bal);
}

static void
refund(struct wallet *w, const char *app, const char *ref)
{
    struct wallet_gift g;

    wallet_gift_init(&g, app, "r1", ref, 1, 1, "{}");
    w->ops->settle(w, &g, WALLET_REFUSED);
}

struct worker {
    struct wallet *w;
    int idx;
    int failures;
    int efunds; /* debits of the poor account refused */
    int charged_poor;
};

static void *
worker_main(void *arg)
{
    struct worker *k = arg;

    for (int i = 0; i < PER_THREAD; i++) {
        char ref[48];
        int64_t uid = (k->idx + i) % NUIDS + 1, bal = -1;
        int rc;

        snprintf(ref, sizeof(ref), "t%d-%d", k->idx, i);
        if (debit(k->w, "we", uid, uid, ref, &bal) != 0 || bal < 0)
            k->failures++;
        /* The same ref again: charges nothing. */
        if (i % 5 == 0 && debit(k->w, "we", uid, uid, ref, &bal) != 0)
            k->failures++;
        snprintf(ref, sizeof(ref), "poor-t%d-%d", k->idx, i);
        rc = debit(k->w, "we", POOR_UID, 1, ref, &bal);
        if (rc == 0)
            k->charged_poor++;
        else if (rc == ROOMD_EFUNDS && bal == 0)
            k->efunds++;
        else
            k->failures++;
    }
    return NULL;
}

static int
rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void
t_concurrent_debits(void **state)
{
    (void)state;
    char *dir = th_tmpdir();
    struct conf *c = th_conf_sqlite(dir);
    struct store *st = store_suite_open(c);
    struct conf_wallet cw = {.driver = "embedded", .initial_balance = INITIAL};
    struct wallet *w = NULL;
    struct worker k[NTHREADS];
    pthread_t th[NTHREADS];
    int64_t b, charged[NUIDS + 1] = {0};
    uint64_t batches, debits;
    int efunds = 0, charged_poor = 0;

    assert_int_equal(wallet_open(&w, &cw, st, err, sizeof(err)), 0);
    /* The poor account keeps POOR_LEFT. */
    assert_int_equal(debit(w, "we", POOR_UID, INITIAL - POOR_LEFT, "poor", &b), 0);
    assert_int_equal(b, POOR_LEFT);
    for (int i = 0; i < NTHREADS; i++) {
        k[i] = (struct worker){.w = w, .idx = i};
        assert_int_equal(pthread_create(&th[i], NULL, worker_main, &k[i]), 0);
    }
    for (int i = 0; i < NTHREADS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(k[i].failures, 0);
        efunds += k[i].efunds;
        charged_poor += k[i].charged_poor;
        for (int j = 0; j < PER_THREAD; j++) {
            int64_t uid = (i + j) % NUIDS + 1;

            charged[uid] += uid;
        }
    }
    for (int64_t uid = 1; uid <= NUIDS; uid++) {
        assert_int_equal(w->ops->balance(w, "we", uid, &b), 0);
        assert_int_equal(b, INITIAL - charged[uid]);
    }
    assert_int_equal(charged_poor, POOR_LEFT);
    assert_int_equal(efunds, NTHREADS * PER_THREAD - POOR_LEFT);
    assert_int_equal(w->ops->balance(w, "we", POOR_UID, &b), 0);
    assert_int_equal(b, 0);

    /* A refunded ref is charged again through the committer, once. */
    refund(w, "we", "t0-0");
    assert_int_equal(w->ops->balance(w, "we", 1, &b), 0);
    assert_int_equal(b, INITIAL - charged[1] + 1);
    assert_int_equal(debit(w, "we", 1, 1, "t0-0", &b), 0);
    assert_int_equal(b, INITIAL - charged[1]);
    assert_int_equal(debit(w, "we", 1, 1, "t0-0", &b), 0);
    assert_int_equal(b, INITIAL - charged[1]);
    assert_int_equal(debit(w, "we", 1, -1, "neg", &b), ROOMD_EINVAL);

    wallet_embedded_stats(w, &batches, &debits);
    print_message("embedded wallet: %llu debits in %llu batches\n", (unsigned long long)debits,
                  (unsigned long long)batches);
    assert_int_equal(debits, 1 + NTHREADS * (PER_THREAD * 2 + PER_THREAD / 5) + 3);
    assert_true(batches < debits);

    wallet_close(w);
    store_close(st);
    conf_free(c);
    nftw(dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
    free(dir);
}

/* Close with nothing queued returns at once; a debit right before close is durable. */
static void
t_close(void **state)
{
    (void)state;
    char *dir = th_tmpdir();
    struct conf *c = th_conf_sqlite(dir);
    struct store *st = store_suite_open(c);
    struct conf_wallet cw = {.driver = "embedded", .initial_balance = 50};
    struct wallet *w = NULL;
    int64_t b;

    assert_int_equal(wallet_open(&w, &cw, st, err, sizeof(err)), 0);
    assert_int_equal(debit(w, "we", 1, 20, "c1", &b), 0);
    assert_int_equal(b, 30);
    assert_int_equal(debit(w, "we", 1, 31, "c2", &b), ROOMD_EFUNDS);
    assert_int_equal(b, 30);
    wallet_close(w);
    assert_int_equal(store_wallet_balance(st, "we", 1, 50, &b), 0);
    assert_int_equal(b, 30);
    store_close(st);
    conf_free(c);
    nftw(dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
    free(dir);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(t_concurrent_debits),
        cmocka_unit_test(t_close),
    };

    return cmocka_run_group_tests_name("wallet_embedded", tests, NULL, NULL);
}
