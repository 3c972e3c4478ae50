/* SPDX-License-Identifier: Apache-2.0 */
/* admin_suite.c: the admin conformance suite (see admin_suite.h). */
#include "admin_suite.h"
#include "helpers.h"
#include "store_suite.h"

#include "admin/admin.h"
#include "conf/conf.h"
#include "core/xmalloc.h"
#include "publish/sink.h"
#include "store/admin.h"
#include "store/store.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define T0 1700000000000LL

static struct conf *(*suite_conf)(void);
static void (*suite_reset)(struct conf *c);

struct fx {
    struct conf *conf;
    struct store *st;
    struct admin *adm;
};

static int
setup(void **state)
{
    struct fx *f = xcalloc(1, sizeof(*f));
    char err[256];

    f->conf = suite_conf();
    f->st = store_suite_open(f->conf);
    if (suite_reset)
        suite_reset(f->conf);
    if (admin_open(&f->adm, f->conf, NULL, false, err, sizeof(err)) != 0)
        fail_msg("admin_open: %s", err);
    *state = f;
    return 0;
}

static int
teardown(void **state)
{
    struct fx *f = *state;

    admin_close(f->adm);
    store_close(f->st);
    conf_free(f->conf);
    free(f);
    return 0;
}

/* ---- a query string as key=value pairs ---- */

struct kv {
    const char *k[8], *v[8];
    int n;
};

static const char *
kv_get(void *ctx, const char *key)
{
    struct kv *q = ctx;
    for (int i = 0; i < q->n; i++)
        if (strcmp(q->k[i], key) == 0)
            return q->v[i];
    return NULL;
}

static struct kv
kv1(const char *k, const char *v)
{
    struct kv q = {.n = 1};
    q.k[0] = k;
    q.v[0] = v;
    return q;
}

/* The reply body parsed (asserting the status). */
static json_t *
body(struct admin_reply *r, int status)
{
    if (r->status != status)
        fail_msg("status %d, want %d: %s", r->status, status, r->body ? r->body : "");
    json_t *j = json_loads(r->body, 0, NULL);
    assert_non_null(j);
    admin_reply_clear(r);
    return j;
}

static int64_t
jint(json_t *o, const char *path)
{
    return json_integer_value(json_object_get(o, path));
}

/* ---- rows in every state ---- */

/* Claims every due row and completes it with status, sinks_done and err. */
static void
complete_all(struct store *st, int64_t now, enum outbox_status status, uint32_t done,
             const char *err)
{
    struct outbox_row *rows;
    size_t n;

    assert_int_equal(store_outbox_claim(st, now, now + 100000, "W", 1000, &rows, &n), 0);
    struct outbox_result *res = xcalloc(n ? n : 1, sizeof(*res));
    for (size_t i = 0; i < n; i++)
        res[i] = (struct outbox_result){.id = rows[i].id,
                                        .locked_by = "W",
                                        .status = status,
                                        .retry_count = status == OUTBOX_FAILED ? 5 : 1,
                                        .sinks_done = done,
                                        .next_retry_at_ms = now + 1000000,
                                        .last_error = status == OUTBOX_DELIVERED ? NULL : err,
                                        .now_ms = now};
    assert_int_equal(store_outbox_complete(st, res, n), 0);
    free(res);
    outbox_rows_free(rows, n);
}

/*
 * The fixture's outbox: 2 delivered (r1), 3 failed lacking tim (r2: log
 * done, "tim: curl 7"), 1 failed lacking both (r3 of app a2, "log: ENOSPC"),
 * 1 retryable (r4), 1 pending (r5).
 */
static void
make_rows(struct store *st)
{
    store_suite_create_room(st, "a1", "r1", 2, T0 + 1);
    complete_all(st, T0 + 1, OUTBOX_DELIVERED, SINK_BIT_LOG | SINK_BIT_TIM, NULL);
    store_suite_create_room(st, "a1", "r2", 3, T0 + 2);
    complete_all(st, T0 + 2, OUTBOX_FAILED, SINK_BIT_LOG, "tim: curl 7 (connection refused)");
    store_suite_create_room(st, "a2", "r3", 1, T0 + 3);
    complete_all(st, T0 + 3, OUTBOX_FAILED, 0, "log: write: No space left on device");
    store_suite_create_room(st, "a1", "r4", 1, T0 + 4);
    complete_all(st, T0 + 4, OUTBOX_RETRYABLE, 0, "tim: 503");
    store_suite_create_room(st, "a1", "r5", 1, T0 + 5);
}

/* Status of each row of room, in id order, as "f,f,p". */
static void
statuses(struct store *st, const char *room, char *out, size_t len)
{
    struct outbox_row *rows;
    size_t n;

    out[0] = '\0';
    assert_int_equal(store_outbox_list(st, -1, 0, 1000, &rows, &n), 0);
    for (size_t i = 0; i < n; i++)
        if (strcmp(rows[i].room_id, room) == 0)
            snprintf(out + strlen(out), len - strlen(out), "%s%c", out[0] ? "," : "",
                     outbox_status_name(rows[i].status)[0]);
    outbox_rows_free(rows, n);
}

/* ---- the tests ---- */

static void
t_filter(void **state)
{
    struct admin_filter f;
    const char *field = NULL;
    char why[256];
    struct kv q = {.n = 3, .k = {"status", "sink", "created_after"}, .v = {"failed", "tim", "5"}};

    assert_int_equal(admin_filter_from_lookup(&f, kv_get, &q, &field, why, sizeof(why)), 0);
    assert_int_equal(f.status, OUTBOX_FAILED);
    assert_int_equal(f.sink, SINK_BIT_TIM);
    assert_int_equal(f.created_after, 5);
    q.v[0] = "broken";
    assert_int_equal(admin_filter_from_lookup(&f, kv_get, &q, &field, why, sizeof(why)), -1);
    assert_string_equal(field, "status");
    q = kv1("sink", "pigeon");
    assert_int_equal(admin_filter_from_lookup(&f, kv_get, &q, &field, why, sizeof(why)), -1);
    assert_string_equal(field, "sink");
    q = kv1("created_before", "-3");
    assert_int_equal(admin_filter_from_lookup(&f, kv_get, &q, &field, why, sizeof(why)), -1);
    assert_string_equal(field, "created_before");
    json_t *j =
        json_loads("{\"status\":\"failed\",\"room_id\":\"r2\",\"created_after\":7}", 0, NULL);
    assert_int_equal(admin_filter_from_json(&f, j, &field, why, sizeof(why)), 0);
    json_t *back = admin_filter_to_json(&f);
    assert_true(json_equal(j, back));
    json_decref(back);
    json_decref(j);
    j = json_loads("{\"colour\":\"red\"}", 0, NULL);
    assert_int_equal(admin_filter_from_json(&f, j, &field, why, sizeof(why)), -1);
    assert_non_null(strstr(why, "colour"));
    json_decref(j);
}

static void
t_summary_list_show(void **state)
{
    struct fx *f = *state;
    struct admin_reply r = {0};

    make_rows(f->st);
    admin_summary(f->adm, &r);
    json_t *s = body(&r, 200), *bs = json_object_get(s, "by_status");
    assert_int_equal(jint(bs, "delivered"), 2);
    assert_int_equal(jint(bs, "failed"), 4);
    assert_int_equal(jint(bs, "retryable"), 1);
    assert_int_equal(jint(bs, "pending"), 1);
    json_t *logs = json_object_get(json_object_get(s, "sinks"), "log");
    assert_int_equal(jint(logs, "undelivered"), 3); /* r3, r4, r5 */
    assert_int_equal(jint(logs, "failed"), 1);
    assert_true(json_real_value(json_object_get(logs, "oldest_undelivered_s")) > 0);
    /* failed rows apart: r3's dead letter (T0+3) is older than r4/r5 (T0+4) */
    assert_true(json_real_value(json_object_get(logs, "oldest_failed_s")) >
                json_real_value(json_object_get(logs, "oldest_undelivered_s")));
    json_decref(s);

    struct kv q = {.n = 2, .k = {"status", "error"}, .v = {"failed", "curl 7"}};
    admin_list(f->adm, kv_get, &q, &r);
    json_t *l = body(&r, 200), *rows = json_object_get(l, "rows");
    assert_int_equal(json_array_size(rows), 3);
    for (size_t i = 0; i < 3; i++)
        assert_string_equal(json_string_value(json_object_get(json_array_get(rows, i), "room_id")),
                            "r2");
    const char *ev = json_string_value(json_object_get(json_array_get(rows, 0), "event_id"));
    char *event_id = xstrdup(ev);
    json_decref(l);

    /* keyset pages of one row */
    int64_t after = 0;
    int pages = 0;
    char buf[32];
    for (;;) {
        snprintf(buf, sizeof(buf), "%lld", (long long)after);
        struct kv p = {.n = 3, .k = {"status", "limit", "after"}, .v = {"failed", "1", buf}};
        admin_list(f->adm, kv_get, &p, &r);
        l = body(&r, 200);
        size_t n = json_array_size(json_object_get(l, "rows"));
        json_t *next = json_object_get(l, "next_after");
        pages += (int)n;
        if (json_is_null(next)) {
            json_decref(l);
            break;
        }
        after = json_integer_value(next);
        json_decref(l);
    }
    assert_int_equal(pages, 4);

    q = kv1("app", "a2");
    admin_list(f->adm, kv_get, &q, &r);
    l = body(&r, 200);
    assert_int_equal(json_array_size(json_object_get(l, "rows")), 1);
    json_decref(l);
    q = kv1("limit", "0");
    admin_list(f->adm, kv_get, &q, &r);
    l = body(&r, 400);
    assert_string_equal(json_string_value(json_object_get(json_object_get(l, "error"), "field")),
                        "limit");
    json_decref(l);

    admin_show(f->adm, event_id, &r);
    json_t *one = body(&r, 200);
    assert_string_equal(json_string_value(json_object_get(one, "status")), "failed");
    assert_int_equal(jint(one, "attempts"), 5);
    assert_non_null(strstr(json_string_value(json_object_get(one, "last_error")), "curl 7"));
    json_t *sinks = json_object_get(one, "sinks");
    assert_string_equal(json_string_value(json_object_get(sinks, "log")), "delivered");
    json_decref(one);
    free(event_id);
    admin_show(f->adm, "00000000-0000-7000-8000-000000000000", &r);
    json_decref(body(&r, 404));
}

static void
t_dry_run_replay_audit(void **state)
{
    struct fx *f = *state;
    struct admin_reply r = {0};
    char st[64];

    make_rows(f->st);
    const char *dry = "{\"filter\":{\"sink\":\"tim\"},\"dry_run\":true,\"sample\":2}";
    admin_replay(f->adm, "ops-token", dry, strlen(dry), NULL, NULL, &r);
    json_t *d = body(&r, 200);
    assert_int_equal(jint(d, "count"), 4); /* the failed rows lacking tim: r2 x3, r3 */
    assert_int_equal(json_array_size(json_object_get(d, "sample")), 2);
    json_decref(d);
    statuses(f->st, "r2", st, sizeof(st));
    assert_string_equal(st, "f,f,f"); /* a dry run changes nothing */

    const char *go = "{\"filter\":{\"room_id\":\"r2\"}}";
    admin_replay(f->adm, "ops-token", go, strlen(go), NULL, NULL, &r);
    json_t *res = body(&r, 200);
    assert_int_equal(jint(res, "replayed"), 3);
    int64_t audit = jint(res, "audit_id");
    json_decref(res);
    statuses(f->st, "r2", st, sizeof(st));
    assert_string_equal(st, "p,p,p");
    statuses(f->st, "r3", st, sizeof(st));
    assert_string_equal(st, "f"); /* outside the filter */

    admin_audits(f->adm, NULL, NULL, &r);
    json_t *al = body(&r, 200), *a0 = json_array_get(json_object_get(al, "audits"), 0);
    assert_int_equal(jint(a0, "id"), audit);
    assert_string_equal(json_string_value(json_object_get(a0, "actor")), "ops-token");
    assert_string_equal(json_string_value(json_object_get(a0, "state")), "done");
    assert_int_equal(jint(a0, "count"), 3);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(a0, "filter"), "room_id")), "r2");
    assert_true(jint(a0, "created_at_ms") > 0);
    json_decref(al);
    admin_audit(f->adm, audit, NULL, NULL, &r);
    json_t *one = body(&r, 200);
    assert_int_equal(json_array_size(json_object_get(one, "rows")), 3);
    json_decref(one);

    /* again: nothing left to replay in r2 */
    admin_replay(f->adm, "ops-token", go, strlen(go), NULL, NULL, &r);
    res = body(&r, 200);
    assert_int_equal(jint(res, "replayed"), 0);
    json_decref(res);
}

static void
t_resume_after_crash(void **state)
{
    struct fx *f = *state;
    struct admin_store *as = NULL;
    struct admin_filter flt;
    char err[256], st[64];
    int64_t id, done;
    bool finished;

    for (int i = 0; i < 5; i++) {
        char room[16];
        snprintf(room, sizeof(room), "c%d", i);
        store_suite_create_room(f->st, "a1", room, 2, T0 + i);
    }
    complete_all(f->st, T0 + 10, OUTBOX_FAILED, 0, "x");
    /* a replay that died after its first chunk of 3 */
    assert_int_equal(admin_store_open(&as, &f->conf->store, false, err, sizeof(err)), 0);
    admin_filter_init(&flt);
    flt.replayable = true;
    flt.not_repaired = true;
    assert_int_equal(admin_store_audit_begin(as, "crashed", false, "{}", INT64_MAX, T0, &id), 0);
    assert_int_equal(admin_store_replay_chunk(as, id, &flt, false, 3, T0 + 20, &done, &finished),
                     0);
    assert_int_equal(done, 3);
    assert_false(finished);
    admin_store_close(as);

    assert_int_equal(admin_resume(f->adm), 1);
    struct admin_reply r = {0};
    admin_audit(f->adm, id, NULL, NULL, &r);
    json_t *a = body(&r, 200);
    assert_string_equal(json_string_value(json_object_get(a, "state")), "done");
    assert_int_equal(jint(a, "count"), 10);
    assert_int_equal(json_array_size(json_object_get(a, "rows")), 10); /* each row once */
    json_decref(a);
    for (int i = 0; i < 5; i++) {
        char room[16];
        snprintf(room, sizeof(room), "c%d", i);
        statuses(f->st, room, st, sizeof(st));
        assert_string_equal(st, "p,p");
    }
    assert_int_equal(admin_resume(f->adm), 0); /* nothing running any more */
}

static void
t_repair(void **state)
{
    struct fx *f = *state;
    struct admin_reply r = {0};
    char st[64];

    make_rows(f->st);
    const char *rep = "{\"filter\":{\"app\":\"a2\"},\"repair\":true}";
    admin_replay(f->adm, "ops", rep, strlen(rep), NULL, NULL, &r);
    json_t *res = body(&r, 200);
    assert_int_equal(jint(res, "replayed"), 1);
    json_decref(res);
    statuses(f->st, "r3", st, sizeof(st));
    assert_string_equal(st, "f,p"); /* the original stays a dead letter; a new event */

    struct kv q = {.n = 2, .k = {"room_id", "status"}, .v = {"r3", "pending"}};
    admin_list(f->adm, kv_get, &q, &r);
    json_t *l = body(&r, 200), *row = json_array_get(json_object_get(l, "rows"), 0);
    const char *of = json_string_value(json_object_get(row, "repair_of"));
    assert_non_null(of);
    assert_true(strncmp(json_string_value(json_object_get(row, "command_id")), "repair:", 7) == 0);
    assert_string_not_equal(of, json_string_value(json_object_get(row, "event_id")));
    json_decref(l);

    /* a repaired row is never replayed or repaired again */
    const char *dry = "{\"filter\":{\"app\":\"a2\"},\"dry_run\":true}";
    admin_replay(f->adm, "ops", dry, strlen(dry), NULL, NULL, &r);
    res = body(&r, 200);
    assert_int_equal(jint(res, "count"), 0);
    json_decref(res);
}

static void
t_bad_input_changes_nothing(void **state)
{
    struct fx *f = *state;
    struct admin_reply r = {0};
    char st[64];
    static const struct {
        const char *body, *code, *field;
    } bad[] = {
        {"{nope", "invalid_json", NULL},
        {"[1]", "invalid_json", NULL},
        {"{\"filter\":{\"status\":\"pending\"}}", "invalid_argument", "status"},
        {"{\"filter\":{\"sink\":\"fax\"}}", "invalid_argument", "sink"},
        {"{\"dry_run\":\"yes\"}", "invalid_argument", "dry_run"},
        {"{\"chunk\":0}", "invalid_argument", "chunk"},
        {"{\"everything\":true}", "invalid_argument", "everything"},
    };

    make_rows(f->st);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        admin_replay(f->adm, "ops", bad[i].body, strlen(bad[i].body), NULL, NULL, &r);
        json_t *root = body(&r, 400), *e = json_object_get(root, "error");
        assert_string_equal(json_string_value(json_object_get(e, "code")), bad[i].code);
        if (bad[i].field)
            assert_string_equal(json_string_value(json_object_get(e, "field")), bad[i].field);
        json_decref(root);
    }
    statuses(f->st, "r2", st, sizeof(st));
    assert_string_equal(st, "f,f,f");
    admin_audits(f->adm, NULL, NULL, &r);
    json_t *al = body(&r, 200);
    assert_int_equal(json_array_size(json_object_get(al, "audits")), 0);
    json_decref(al);
}

static void
t_read_only(void **state)
{
    struct fx *f = *state;
    struct admin *ro = NULL;
    struct admin_reply r = {0};
    char err[256];

    make_rows(f->st);
    assert_int_equal(admin_open(&ro, f->conf, NULL, true, err, sizeof(err)), 0);
    const char *go = "{\"filter\":{\"room_id\":\"r2\"}}";
    admin_replay(ro, "ops", go, strlen(go), NULL, NULL, &r);
    json_decref(body(&r, 405));
    const char *dry = "{\"filter\":{\"room_id\":\"r2\"},\"dry_run\":true}";
    admin_replay(ro, "ops", dry, strlen(dry), NULL, NULL, &r);
    json_t *d = body(&r, 200);
    assert_int_equal(jint(d, "count"), 3);
    json_decref(d);
    admin_summary(ro, &r);
    json_decref(body(&r, 200));
    admin_close(ro);
}

int
admin_suite_run(const char *name, struct conf *(*make_conf)(void), void (*reset)(struct conf *c))
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(t_filter),
        cmocka_unit_test_setup_teardown(t_summary_list_show, setup, teardown),
        cmocka_unit_test_setup_teardown(t_dry_run_replay_audit, setup, teardown),
        cmocka_unit_test_setup_teardown(t_resume_after_crash, setup, teardown),
        cmocka_unit_test_setup_teardown(t_repair, setup, teardown),
        cmocka_unit_test_setup_teardown(t_bad_input_changes_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(t_read_only, setup, teardown),
    };

    suite_conf = make_conf;
    suite_reset = reset;
    return cmocka_run_group_tests_name(name, tests, NULL, NULL);
}
