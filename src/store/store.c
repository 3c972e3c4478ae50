/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store.c: backend selection and the parts every backend shares: status
 * names and counts, the checks of a mutation, the last_error cut, freeing
 * results, the thread-local error text, fault hooks. The SQL lives in
 * the backends, src/store/sqlite/ and src/store/mysql/.
 */
#include "store/store.h"

#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/sink_bits.h"
#include "core/xmalloc.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LAST_ERROR_MAX 1000 /* bytes of room_outbox.last_error */

static _Thread_local char errbuf[512];

static const char *const status_names[] = {"pending", "delivering", "delivered", "retryable",
                                           "failed"};

const char *
outbox_status_name(enum outbox_status s)
{
    return (unsigned)s < 5 ? status_names[s] : "unknown";
}

int
outbox_status_parse(const char *name)
{
    for (int i = 0; i < 5; i++)
        if (strcmp(name, status_names[i]) == 0)
            return i;
    if (strcmp(name, "published") == 0) /* legacy, read as delivered */
        return OUTBOX_DELIVERED;
    return -1;
}

enum outbox_status
outbox_status_read(const char *name)
{
    int st = name != NULL ? outbox_status_parse(name) : -1;

    return st < 0 ? OUTBOX_FAILED : (enum outbox_status)st;
}

void
outbox_counts_add(struct outbox_counts *c, const char *name, int64_t n)
{
    int64_t *of[] = {[OUTBOX_PENDING] = &c->pending,
                     [OUTBOX_DELIVERING] = &c->delivering,
                     [OUTBOX_DELIVERED] = &c->delivered,
                     [OUTBOX_RETRYABLE] = &c->retryable,
                     [OUTBOX_FAILED] = &c->failed};

    *of[outbox_status_read(name)] += n; /* read: always one of the five */
}

static void
keep_oldest(int64_t *slot, int64_t ms)
{
    if (ms > 0 && (*slot == 0 || ms < *slot))
        *slot = ms;
}

void
outbox_counts_oldest(struct outbox_counts *c, uint32_t sinks_done, const char *event_type,
                     int64_t oldest_ms)
{
    keep_oldest(&c->oldest_undelivered_ms, oldest_ms);
    for (int b = 0; b < OUTBOX_SINK_BITS; b++)
        if (!(sinks_done & (1u << b)) && sink_bit_carries(1u << b, event_type))
            keep_oldest(&c->oldest_missing_ms[b], oldest_ms);
}

size_t
outbox_last_error_len(const char *last_error)
{
    size_t len = strlen(last_error);

    if (len > LAST_ERROR_MAX) {
        len = LAST_ERROR_MAX;
        while (len > 0 && ((unsigned char)last_error[len] & 0xc0) == 0x80)
            len--;
    }
    return len;
}

static int
cmp_row_id(const void *a, const void *b)
{
    const struct outbox_row *x = a, *y = b;

    return x->id < y->id ? -1 : x->id > y->id;
}

void
outbox_rows_sort(struct outbox_row *rows, size_t n)
{
    if (n > 1)
        qsort(rows, n, sizeof(*rows), cmp_row_id);
}

bool
outbox_rooms_add(struct outbox_room **rooms, size_t *n, size_t *cap, const char *app,
                 const char *room)
{
    for (size_t i = 0; i < *n; i++)
        if (strcmp((*rooms)[i].room_id, room) == 0 && strcmp((*rooms)[i].app_code, app) == 0)
            return false;
    *rooms = xgrow(*rooms, *n, cap, sizeof(**rooms));
    strlcpy_((*rooms)[*n].app_code, app, sizeof((*rooms)[*n].app_code));
    strlcpy_((*rooms)[*n].room_id, room, sizeof((*rooms)[*n].room_id));
    (*n)++;
    return true;
}

void
outbox_initial_of(const struct mutation *m, struct outbox_initial *out)
{
    if (m->locked_by != NULL && *m->locked_by && !m->room_busy) {
        *out =
            (struct outbox_initial){"delivering", m->locked_by, m->lock_until_ms, m->lock_until_ms};
    } else {
        *out = (struct outbox_initial){"pending", NULL, 0, m->created_at_ms};
    }
}

void
outbox_outcome_of(const struct outbox_result *r, struct outbox_outcome *out)
{
    *out = (struct outbox_outcome){
        .status = outbox_status_name(r->status),
        .retryable = r->status == OUTBOX_RETRYABLE,
        .retry_at_ms = r->status == OUTBOX_RETRYABLE ? r->next_retry_at_ms : 0,
        .delivered = r->status == OUTBOX_DELIVERED,
        .last_error = r->last_error,
        .last_error_len = r->last_error != NULL ? outbox_last_error_len(r->last_error) : 0,
    };
}

enum wallet_debit_step
wallet_debit_rule(struct wallet_debit *d, bool have_debit, int64_t luid, int64_t lamount,
                  const char *ldigest, bool have_refund, int64_t balance)
{
    d->rc = 0;
    d->balance_after = balance;
    if (d->amount < 0) {
        store_set_errmsg("wallet debit: negative amount");
        d->rc = ROOMD_EINVAL;
        return WALLET_DEBIT_REFUSED;
    }
    if (have_debit && !have_refund) {
        bool same = ldigest != NULL && ldigest[0] != '\0' ? strcmp(ldigest, d->digest) == 0
                                                          : luid == d->uid && lamount == d->amount;

        if (same) {
            store_set_errmsg("command_id %s: this gift committed and was paid before; its "
                             "command log row was purged (store.retention.command_log_max_age)",
                             d->ref_id);
            d->rc = ROOMD_EEXPIRED;
        } else {
            store_set_errmsg("wallet: %s already debited %lld from uid %lld for another request",
                             d->ref_id, (long long)lamount, (long long)luid);
            d->rc = ROOMD_EREUSED;
        }
        return WALLET_DEBIT_REFUSED;
    }
    if (balance < d->amount) {
        store_set_errmsg("wallet: balance %lld < %lld", (long long)balance, (long long)d->amount);
        d->balance_after = balance;
        d->rc = ROOMD_EFUNDS;
        return WALLET_DEBIT_REFUSED;
    }
    d->balance_after = balance - d->amount;
    return WALLET_DEBIT_CHARGE;
}

int
store_check_mutation(const struct mutation *m, bool exists, int64_t cur_version, int64_t cur_token)
{
    if (m->create && exists) {
        store_set_errmsg("room %s/%s already exists", m->app_code, m->room_id);
        return ROOMD_EEXIST;
    }
    if (!m->create && !exists) {
        store_set_errmsg("room %s/%s not found", m->app_code, m->room_id);
        return ROOMD_ENOTFOUND;
    }
    if (!m->create && (cur_version != m->version - 1 || m->fence_token < cur_token)) {
        store_set_errmsg("room %s/%s fenced: at version %lld token %lld, mutation version %lld"
                         " token %lld",
                         m->app_code, m->room_id, (long long)cur_version, (long long)cur_token,
                         (long long)m->version, (long long)m->fence_token);
        return ROOMD_EFENCED;
    }
    return 0;
}

int
store_check_owner_rooms(const struct mutation *m, int64_t open_rooms)
{
    if (m->max_owner_rooms <= 0 || open_rooms <= m->max_owner_rooms)
        return 0;
    store_set_errmsg("owner_uid %lld already holds %d open rooms of app %s",
                     (long long)m->meta.owner_uid, m->max_owner_rooms, m->app_code);
    return ROOMD_ELIMIT;
}

const char *
store_errmsg(void)
{
    return errbuf;
}

void
store_set_errmsg(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(errbuf, sizeof(errbuf), fmt, ap);
    va_end(ap);
}

void
command_record_clear(struct command_record *r)
{
    free(r->command_type);
    free(r->request);
    free(r->response);
    memset(r, 0, sizeof(*r));
}

void
room_load_clear(struct room_load *l)
{
    free(l->snapshot);
    for (size_t i = 0; i < l->ntail; i++)
        command_record_clear(&l->tail[i]);
    free(l->tail);
    memset(l, 0, sizeof(*l));
}

void
outbox_rows_free(struct outbox_row *rows, size_t n)
{
    if (rows == NULL)
        return;
    for (size_t i = 0; i < n; i++) {
        free(rows[i].payload);
        free(rows[i].last_error);
    }
    free(rows);
}

int
store_open(struct store **out, const struct conf_store *cs, char *err, size_t errlen)
{
    const struct store_ops *ops;

    *out = NULL;
    if (strcmp(cs->driver, "sqlite") == 0)
        ops = &store_sqlite_ops;
    else if (strcmp(cs->driver, "mysql") == 0)
        ops = &store_mysql_ops;
    else {
        snprintf(err, errlen, "store.driver: unknown driver \"%s\" (sqlite|mysql)", cs->driver);
        return ROOMD_EINVAL;
    }
    return ops->open(out, cs, err, errlen);
}

void
store_close(struct store *s)
{
    if (s != NULL)
        s->ops->close(s);
}

int
store_server_info(struct store *s, char *host, size_t len, uint64_t *failovers)
{
    if (s->ops->server_info == NULL)
        return ROOMD_ENOTFOUND;
    return s->ops->server_info(s, host, len, failovers);
}

int
store_find_command(struct store *s, const char *app, const char *command_id,
                   struct command_record *out)
{
    return s->ops->find_command(s, app, command_id, out);
}

int
store_load_room(struct store *s, const char *app, const char *room_id, struct room_load *out)
{
    return s->ops->load_room(s, app, room_id, out);
}

int
store_save(struct store *s, struct mutation *const *muts, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (muts[i]->debit != NULL) { /* the ledger row records the gift it pays */
            muts[i]->debit->room_id = muts[i]->room_id;
            muts[i]->debit->version = muts[i]->version;
        }
    int rc = s->ops->save(s, muts, n);
    /* what readiness reads (store_writes_failing): the batch's transaction */
    atomic_store(rc == 0 ? &s->write_ok_ms : &s->write_failed_ms, clock_wall_ms());
    return rc;
}

int
store_outbox_claim(struct store *s, int64_t now_ms, int64_t lock_until_ms, const char *locked_by,
                   int limit, struct outbox_row **rows, size_t *n)
{
    return s->ops->outbox_claim(s, now_ms, lock_until_ms, locked_by, limit, false, rows, n);
}

int
store_outbox_claim_ordered(struct store *s, int64_t now_ms, int64_t lock_until_ms,
                           const char *locked_by, int limit, bool per_room,
                           struct outbox_row **rows, size_t *n)
{
    return s->ops->outbox_claim(s, now_ms, lock_until_ms, locked_by, limit, per_room, rows, n);
}

void
store_outbox_park(struct store *s, uint32_t need)
{
    atomic_store(&s->outbox_park, need);
}

int
store_outbox_complete(struct store *s, struct outbox_result *res, size_t n)
{
    return s->ops->outbox_complete(s, res, n);
}

int
store_outbox_complete_claim(struct store *s, struct outbox_result *res, size_t nres, int64_t now_ms,
                            int64_t lock_until_ms, const char *locked_by, int limit, bool per_room,
                            struct outbox_row **rows, size_t *n, bool *completed)
{
    return s->ops->outbox_complete_claim(s, res, nres, now_ms, lock_until_ms, locked_by, limit,
                                         per_room, rows, n, completed);
}

int
store_outbox_list(struct store *s, int status, int64_t after_id, int limit,
                  struct outbox_row **rows, size_t *n)
{
    return s->ops->outbox_list(s, status, after_id, limit, rows, n);
}

int
store_outbox_get(struct store *s, const char *event_id, struct outbox_row *out)
{
    return s->ops->outbox_get(s, event_id, out);
}

int
store_outbox_replay(struct store *s, const char *event_id, int64_t now_ms)
{
    return s->ops->outbox_replay(s, event_id, now_ms);
}

int
store_write_probe(struct store *s)
{
    return s->ops->write_probe(s, clock_wall_ms());
}

bool
store_writes_failing(struct store *s, int64_t within_ms)
{
    int64_t failed = atomic_load(&s->write_failed_ms), ok = atomic_load(&s->write_ok_ms);

    return failed > ok && clock_wall_ms() - failed < within_ms;
}

int
store_outbox_counts(struct store *s, struct outbox_counts *out)
{
    return s->ops->outbox_counts(s, out);
}

int
store_outbox_purge(struct store *s, int64_t delivered_before_ms, int limit, size_t *purged)
{
    return s->ops->outbox_purge(s, delivered_before_ms, limit, purged);
}

int
store_command_log_purge(struct store *s, int64_t before_ms, int limit, size_t *purged)
{
    return s->ops->command_log_purge(s, before_ms, limit, purged);
}

const struct store_col store_command_cols[] = {STORE_COL('c', struct command_record, room_id),
                                               STORE_COL('c', struct command_record, command_id),
                                               STORE_COL('s', struct command_record, command_type),
                                               STORE_COL('s', struct command_record, request),
                                               STORE_COL('s', struct command_record, response),
                                               STORE_COL('i', struct command_record, version),
                                               STORE_COL('i', struct command_record, created_at_ms),
                                               {0}};
const struct store_col store_rocket_cols[] = {STORE_COL('c', struct rocket_pending, app_code),
                                              STORE_COL('c', struct rocket_pending, room_id),
                                              STORE_COL('c', struct rocket_pending, rocket_id),
                                              STORE_COL('d', struct rocket_pending, level),
                                              STORE_COL('i', struct rocket_pending, launch_at_ms),
                                              {0}};
const struct store_col store_room_cols[] = {
    STORE_COL('c', struct room_row, app_code),      STORE_COL('c', struct room_row, room_id),
    STORE_COL('i', struct room_row, owner_uid),     STORE_COL('e', struct room_row, title),
    STORE_COL('c', struct room_row, status),        STORE_COL('i', struct room_row, version),
    STORE_COL('i', struct room_row, fence_token),   STORE_COL('i', struct room_row, created_at_ms),
    STORE_COL('i', struct room_row, updated_at_ms), {0}};
const struct store_col store_audit_cols[] = {
    STORE_COL('k', struct audit_row, kind),          STORE_COL('c', struct audit_row, app_code),
    STORE_COL('c', struct audit_row, key),           STORE_COL('c', struct audit_row, ledger_kind),
    STORE_COL('i', struct audit_row, uid),           STORE_COL('i', struct audit_row, amount),
    STORE_COL('s', struct audit_row, request),       STORE_COL('c', struct audit_row, room_id),
    STORE_COL('i', struct audit_row, version),       STORE_COL('c', struct audit_row, digest),
    STORE_COL('i', struct audit_row, created_at_ms), {0}};
const struct store_col store_gift_cols[] = {STORE_COL('c', struct gift_item, app_code),
                                            STORE_COL('c', struct gift_item, gift_id),
                                            STORE_COL('i', struct gift_item, unit_price),
                                            STORE_COL('i', struct gift_item, energy_per_unit),
                                            STORE_COL('d', struct gift_item, enabled),
                                            STORE_COL('i', struct gift_item, version),
                                            STORE_COL('i', struct gift_item, updated_at_ms),
                                            {0}};

void
store_read_cols(const struct store_col *cols, store_col_fn *col, const void *row, void *dst,
                size_t size)
{
    memset(dst, 0, size);
    for (unsigned int k = 0; cols[k].type != '\0'; k++) {
        char *f = (char *)dst + cols[k].off;
        const char *t = NULL;
        int64_t v = 0;

        if (cols[k].type == 'i' || cols[k].type == 'd')
            col(row, k, NULL, &v);
        else
            col(row, k, &t, NULL);
        switch (cols[k].type) {
        case 'c':
            strlcpy_(f, t != NULL ? t : "", cols[k].size);
            break;
        case 's':
        case 'e':
            *(char **)f = xstrdup(t == NULL && cols[k].type == 'e' ? "" : t);
            break;
        case 'k':
            *f = t != NULL ? t[0] : '\0';
            break;
        case 'i':
            *(int64_t *)f = v;
            break;
        default:
            *(int *)f = (int)v;
        }
    }
}

void
store_free_cols(const struct store_col *cols, void *rows, size_t n, size_t size)
{
    for (size_t i = 0; rows != NULL && i < n; i++)
        for (const struct store_col *c = cols; c->type != '\0'; c++)
            if (c->type == 's' || c->type == 'e')
                free(*(char **)((char *)rows + i * size + c->off));
    free(rows);
}

void
audit_rows_free(struct audit_row *rows, size_t n)
{
    if (rows == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        free(rows[i].request);
    free(rows);
}

int
store_wallet_audit_rows(struct store *s, const char *app, struct audit_row **rows, size_t *n)
{
    return s->ops->wallet_audit_rows(s, app != NULL ? app : "", rows, n);
}

int
store_wallet_topup(struct store *s, const char *app, int64_t uid, int64_t amount,
                   const char *ref_id, int64_t initial_balance, int64_t *balance_after)
{
    return s->ops->wallet_topup(s, app, uid, amount, ref_id, initial_balance, balance_after);
}

int
store_wallet_balance(struct store *s, const char *app, int64_t uid, int64_t initial_balance,
                     int64_t *balance)
{
    return s->ops->wallet_balance(s, app, uid, initial_balance, balance);
}

int
store_rockets_pending(struct store *s, struct rocket_pending **out, size_t *n)
{
    return s->ops->rockets_pending(s, out, n);
}

int
store_rooms_list(struct store *s, const char *after_app, const char *after_room, bool open_only,
                 int limit, struct room_row **rows, size_t *n)
{
    *rows = NULL;
    *n = 0;
    if (limit <= 0)
        return 0;
    return s->ops->rooms_list(s, after_app ? after_app : "", after_room ? after_room : "",
                              open_only, limit, rows, n);
}

void
room_rows_free(struct room_row *rows, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(rows[i].title);
    free(rows);
}

int
store_fence_room(struct store *s, const char *app, const char *room_id, int64_t token)
{
    return s->ops->fence_room(s, app, room_id, token);
}

int
store_gift_get(struct store *s, const char *app, const char *gift_id, struct gift_item *out)
{
    memset(out, 0, sizeof(*out));
    return s->ops->gift_get(s, app, gift_id, out);
}

int
store_gift_put(struct store *s, struct gift_item *g, int64_t expect_version)
{
    if (g->unit_price < 1 || g->unit_price > STORE_GIFT_VALUE_MAX || g->energy_per_unit < 0 ||
        g->energy_per_unit > STORE_GIFT_VALUE_MAX || g->app_code[0] == '\0' ||
        g->gift_id[0] == '\0') {
        store_set_errmsg("gift: unit_price 1..%lld, energy_per_unit 0..%lld, app and id set",
                         (long long)STORE_GIFT_VALUE_MAX, (long long)STORE_GIFT_VALUE_MAX);
        return ROOMD_EINVAL;
    }
    g->enabled = g->enabled != 0;
    return s->ops->gift_put(s, g, expect_version);
}

int
store_room_events(struct store *s, const char *app, const char *room_id, int64_t after_seq,
                  int limit, struct outbox_row **rows, size_t *n, int64_t *oldest_seq,
                  int64_t *latest_seq)
{
    *rows = NULL;
    *n = 0;
    *oldest_seq = 0;
    *latest_seq = -1;
    return s->ops->room_events(s, app, room_id, after_seq < 0 ? 0 : after_seq, limit, rows, n,
                               oldest_seq, latest_seq);
}

int
store_gift_list(struct store *s, const char *app, struct gift_item **rows, size_t *n)
{
    *rows = NULL;
    *n = 0;
    return s->ops->gift_list(s, app != NULL ? app : "", rows, n);
}

#ifdef ROOMD_TESTING
static atomic_int fail_saves;

void
store_fail_next_saves(int n)
{
    atomic_store(&fail_saves, n);
}

int
store_should_fail_save(void)
{
    int v = atomic_load(&fail_saves);

    while (v > 0)
        if (atomic_compare_exchange_weak(&fail_saves, &v, v - 1))
            return 1;
    return 0;
}
#endif
