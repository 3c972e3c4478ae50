/* SPDX-License-Identifier: Apache-2.0 */
/* store/admin.c: the admin store's dispatch (see store/admin.h). */
#include "store/admin.h"

#include "conf/conf.h"
#include "core/driver.h"
#include "core/err.h"
#include "core/sink_bits.h"
#include "core/xmalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const admin_store_ddl[] = {
    "CREATE TABLE IF NOT EXISTS admin_audit ("
    " id %s, actor VARCHAR(64) NOT NULL, action VARCHAR(16) NOT NULL,"
    " filter TEXT NOT NULL, state VARCHAR(16) NOT NULL, max_id BIGINT NOT NULL,"
    " cursor_id BIGINT NOT NULL, count BIGINT NOT NULL, created_at_ms BIGINT NOT NULL,"
    " updated_at_ms BIGINT NOT NULL, finished_at_ms BIGINT NOT NULL DEFAULT 0)",
    "CREATE TABLE IF NOT EXISTS admin_audit_rows ("
    " audit_id BIGINT NOT NULL, outbox_id BIGINT NOT NULL, event_id VARCHAR(36) NOT NULL,"
    " new_event_id VARCHAR(36) NOT NULL DEFAULT '', PRIMARY KEY (audit_id, outbox_id))",
    NULL,
};

static void
copy_text(const struct admin_cols *c, int i, char *dst, size_t cap)
{
    const char *t = c->text(c->src, i);
    snprintf(dst, cap, "%s", t ? t : "");
}

void
admin_read_outbox_row(const struct admin_cols *c, void *dst)
{
    struct outbox_row *r = dst;
    const void *p;
    const char *err;

    memset(r, 0, sizeof(*r));
    r->id = c->i64(c->src, 0);
    copy_text(c, 1, r->event_id, sizeof(r->event_id));
    copy_text(c, 2, r->app_code, sizeof(r->app_code));
    copy_text(c, 3, r->room_id, sizeof(r->room_id));
    copy_text(c, 4, r->command_id, sizeof(r->command_id));
    copy_text(c, 5, r->event_type, sizeof(r->event_type));
    r->room_version = c->i64(c->src, 6);
    p = c->blob(c->src, 7, &r->payload_len);
    r->payload = xmalloc(r->payload_len ? r->payload_len : 1);
    if (r->payload_len)
        memcpy(r->payload, p, r->payload_len);
    r->status = outbox_status_read(c->text(c->src, 8));
    r->retry_count = (int)c->i64(c->src, 9);
    r->sinks_done = (uint32_t)c->i64(c->src, 10);
    r->next_retry_at_ms = c->i64(c->src, 11);
    r->lock_until_ms = c->i64(c->src, 12);
    copy_text(c, 13, r->locked_by, sizeof(r->locked_by));
    err = c->text(c->src, 14);
    r->last_error = err ? xstrdup(err) : NULL;
    r->created_at_ms = c->i64(c->src, 15);
    r->delivered_at_ms = c->i64(c->src, 16);
    r->room_seq = c->i64(c->src, 17);
    copy_text(c, 18, r->request_id, sizeof(r->request_id));
    copy_text(c, 19, r->traceparent, sizeof(r->traceparent));
}

void
admin_read_audit_row(const struct admin_cols *c, void *dst)
{
    struct admin_audit_row *r = dst;

    r->outbox_id = c->i64(c->src, 0);
    copy_text(c, 1, r->event_id, sizeof(r->event_id));
    copy_text(c, 2, r->new_event_id, sizeof(r->new_event_id));
}

void
admin_read_count(const struct admin_cols *c, void *dst)
{
    int64_t *got = dst;

    got[0] = c->i64(c->src, 0);
    got[1] = c->i64(c->src, 1);
}

void
admin_rows_add(struct admin_rows *x, const struct admin_cols *c)
{
    x->rows = xgrow(x->rows, x->n, &x->cap, x->size);
    x->read(c, (char *)x->rows + x->n++ * x->size);
}

void
admin_summary_add(const struct admin_cols *c, struct admin_summary *out)
{
    enum outbox_status st = outbox_status_read(c->text(c->src, 0));
    uint32_t done = (uint32_t)c->i64(c->src, 1);
    const char *type = c->text(c->src, 2);
    int64_t n = c->i64(c->src, 3), oldest = c->i64(c->src, 4);

    out->by_status[st] += n;
    for (int b = 0; st != OUTBOX_DELIVERED && b < OUTBOX_SINK_BITS; b++)
        if (!(done & (1u << b)) && sink_bit_carries(1u << b, type)) {
            out->lacking[b] += n;
            if (st != OUTBOX_FAILED)
                continue;
            out->failed_lacking[b] += n;
            if (out->oldest_failed_ms[b] == 0 || oldest < out->oldest_failed_ms[b])
                out->oldest_failed_ms[b] = oldest;
        }
}

void
admin_read_audit(const struct admin_cols *c, void *dst)
{
    struct admin_audit *r = dst;
    const char *f = c->text(c->src, 3);

    memset(r, 0, sizeof(*r));
    r->id = c->i64(c->src, 0);
    copy_text(c, 1, r->actor, sizeof(r->actor));
    copy_text(c, 2, r->action, sizeof(r->action));
    r->filter = xstrdup(f ? f : "{}");
    copy_text(c, 4, r->state, sizeof(r->state));
    r->max_id = c->i64(c->src, 5);
    r->cursor_id = c->i64(c->src, 6);
    r->count = c->i64(c->src, 7);
    r->created_at_ms = c->i64(c->src, 8);
    r->updated_at_ms = c->i64(c->src, 9);
    r->finished_at_ms = c->i64(c->src, 10);
}

void
admin_audits_free(struct admin_audit *a, size_t n)
{
    for (size_t i = 0; a != NULL && i < n; i++)
        free(a[i].filter);
    free(a);
}

int
admin_store_open(struct admin_store **out, const struct conf_store *cs, bool readonly, char *err,
                 size_t errlen)
{
    static const struct admin_store_ops *const ops[] = {&admin_store_sqlite_ops,
                                                        &admin_store_mysql_ops};
    static const char *const drivers[] = {"sqlite", "mysql", NULL};
    int d = driver_pick("store.driver", cs->driver, drivers, err, errlen);

    *out = NULL;
    return d < 0 ? ROOMD_EINVAL : ops[d]->open(out, cs, readonly, err, errlen);
}

void
admin_store_close(struct admin_store *s)
{
    if (s != NULL)
        s->ops->close(s);
}

bool
admin_store_has_audit(const struct admin_store *s)
{
    return s->has_audit;
}

const char *
admin_store_errmsg(struct admin_store *s)
{
    return s->errmsg;
}

int
admin_store_summary(struct admin_store *s, struct admin_summary *out)
{
    return s->ops->summary(s, out);
}

int
admin_store_search(struct admin_store *s, const struct admin_filter *f, int64_t after_id, int limit,
                   struct outbox_row **rows, size_t *n)
{
    *rows = NULL;
    *n = 0;
    return s->ops->search(s, f, after_id, limit, rows, n);
}

int
admin_store_count(struct admin_store *s, const struct admin_filter *f, int64_t *count,
                  int64_t *max_id)
{
    return s->ops->count(s, f, count, max_id);
}

int
admin_store_get(struct admin_store *s, const char *event_id, struct outbox_row *out)
{
    return s->ops->get(s, event_id, out);
}

int
admin_store_audit_begin(struct admin_store *s, const char *actor, bool repair,
                        const char *filter_json, int64_t max_id, int64_t now_ms, int64_t *id)
{
    return s->ops->audit_begin(s, actor, repair, filter_json, max_id, now_ms, id);
}

int
admin_store_replay_chunk(struct admin_store *s, int64_t id, const struct admin_filter *f,
                         bool repair, int limit, int64_t now_ms, int64_t *done, bool *finished)
{
    *done = 0;
    *finished = false;
    return s->ops->replay_chunk(s, id, f, repair, limit, now_ms, done, finished);
}

int
admin_store_audit_record(struct admin_store *s, const char *actor, const char *action,
                         const char *filter_json, const struct admin_audit_row *rows, size_t n,
                         int64_t now_ms, int64_t *id)
{
    return s->ops->audit_record(s, actor, action, filter_json, rows, n, now_ms, id);
}

int
admin_store_audit_list(struct admin_store *s, int64_t before_id, int limit,
                       struct admin_audit **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    return s->ops->audit_list(s, before_id, limit, out, n);
}

int
admin_store_audit_get(struct admin_store *s, int64_t id, struct admin_audit *out)
{
    return s->ops->audit_get(s, id, out);
}

int
admin_store_audit_rows(struct admin_store *s, int64_t id, int64_t after, int limit,
                       struct admin_audit_row **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    return s->ops->audit_rows(s, id, after, limit, out, n);
}
