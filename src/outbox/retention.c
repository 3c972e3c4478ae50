/* SPDX-License-Identifier: Apache-2.0 */
/*
 * retention.c: the purge thread for delivered room_outbox rows and old
 * command log rows (see retention.h). Every purge_interval it deletes rows
 * delivered longer than retention_delivered_ms ago and command log rows older
 * than retention_command_log_ms that no replay needs, purge_batch rows per
 * transaction, and logs one line per pass that purged something, or per
 * store state change.
 */
#include "outbox/retention.h"

#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/thread.h"
#include "core/xmalloc.h"
#include "store/store.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

/* Batches per pass: bounds one pass' work; the next pass continues. */
#define MAX_BATCHES_PER_PASS 1000

struct retention {
    struct store *store;
    int64_t keep_ms;     /* delivered outbox rows; 0 = keep */
    int64_t keep_log_ms; /* command log rows; 0 = keep */
    int batch;
    int64_t interval_ms;
    struct bg_thread th;
};

typedef int purge_op(struct store *s, int64_t before_ms, int limit, size_t *purged);

/* Runs op in batches until one comes back short or max_batches ran. */
static int
purge_batches(purge_op *op, struct store *store, int64_t before_ms, int batch, int max_batches,
              size_t *purged)
{
    int rc = 0;

    *purged = 0;
    for (int i = 0; i < max_batches; i++) {
        size_t n = 0;
        if ((rc = op(store, before_ms, batch, &n)) != 0)
            break;
        *purged += n;
        if (n < (size_t)batch)
            break;
    }
    return rc;
}

int
retention_purge(struct store *store, int64_t before_ms, int batch, int max_batches, size_t *purged)
{
    return purge_batches(store_outbox_purge, store, before_ms, batch, max_batches, purged);
}

int
retention_purge_command_log(struct store *store, int64_t before_ms, int batch, int max_batches,
                            size_t *purged)
{
    return purge_batches(store_command_log_purge, store, before_ms, batch, max_batches, purged);
}

/* One pass over the outbox and the command log. Returns 0 or the first error. */
static int
purge_pass(struct retention *r)
{
    size_t purged = 0;
    int rc = 0;

    if (r->keep_ms > 0) {
        int64_t before = clock_wall_ms() - r->keep_ms;
        rc = retention_purge(r->store, before, r->batch, MAX_BATCHES_PER_PASS, &purged);
        if (purged > 0)
            log_info("outbox", "purged delivered rows", "rows=%zu delivered_before_ms=%lld", purged,
                     (long long)before);
    }
    if (rc == 0 && r->keep_log_ms > 0) {
        int64_t before = clock_wall_ms() - r->keep_log_ms;
        rc = retention_purge_command_log(r->store, before, r->batch, MAX_BATCHES_PER_PASS, &purged);
        if (purged > 0)
            log_info("store", "purged command log rows", "rows=%zu created_before_ms=%lld", purged,
                     (long long)before);
    }
    return rc;
}

static void *
purge_main(void *arg)
{
    struct retention *r = arg;
    bool down = false;

    do {
        int rc = purge_pass(r);
        if (rc != 0 && !down)
            log_warn("outbox", "purge failed, store unavailable", "err=\"%s\"", store_errmsg());
        else if (rc == 0 && down)
            log_info("outbox", "purge resumed", NULL);
        down = rc != 0;
    } while (!bg_thread_sleep(&r->th, r->interval_ms));
    return NULL;
}

int
retention_open(struct retention **out, const struct conf_store *cs, struct store *store)
{
    struct retention *r;

    if (cs->retention_delivered_ms <= 0 && cs->retention_command_log_ms <= 0)
        return 0;
    r = xcalloc(1, sizeof(*r));
    r->store = store;
    r->keep_ms = cs->retention_delivered_ms;
    r->keep_log_ms = cs->retention_command_log_ms;
    r->batch = cs->purge_batch > 0 ? cs->purge_batch : 1000;
    r->interval_ms = cs->purge_interval_ms > 0 ? cs->purge_interval_ms : 60000;
    *out = bg_thread_start_owner(&r->th, purge_main, r);
    return *out != NULL ? 0 : ROOMD_EINTERNAL;
}

void
retention_close(struct retention *r)
{
    if (r != NULL)
        bg_thread_stop_free(&r->th, r);
}
