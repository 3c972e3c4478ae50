/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_outbox_event.c: outbox/event.c (the RoomOutboxEvent envelope and its
 * JSON with the payload decoded from the descriptor event_type names; poison
 * payloads and unknown types refused) and publish/sink_log.c (JSON lines
 * appended to a real file from several threads).
 */
#include "helpers.h"

#include "core/err.h"
#include "core/xmalloc.h"
#include "outbox/outbox.h"
#include "publish/sink.h"
#include "room_events.pb-c.h"
#include "store/store.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void
fill_row(struct outbox_row *r, const char *type, uint8_t *payload, size_t len)
{
    memset(r, 0, sizeof(*r));
    r->id = 7;
    strcpy(r->event_id, "01890a5d-ac96-774b-bcce-b302099a8057");
    strcpy(r->app_code, "hyapp");
    strcpy(r->room_id, "r-1");
    strcpy(r->command_id, "cmd-9");
    strcpy(r->event_type, type);
    r->room_version = 12;
    r->payload = payload;
    r->payload_len = len;
    r->created_at_ms = 1764464523456;
}

static uint8_t *
pack_gift(size_t *len)
{
    Roomd__V1__RoomGiftSent g = ROOMD__V1__ROOM_GIFT_SENT__INIT;
    g.uid = 1001;
    g.to_uid = 1002;
    g.gift_id = "rose";
    g.count = 3;
    g.unit_price = 10;
    g.total = 30;
    g.rocket_level = 1;
    g.rocket_energy = 9007199254740993LL; /* above 2^53: must stay exact */
    *len = roomd__v1__room_gift_sent__get_packed_size(&g);
    uint8_t *buf = xmalloc(*len);
    roomd__v1__room_gift_sent__pack(&g, buf);
    return buf;
}

static void
test_envelope_and_json(void **state)
{
    struct outbox_row r;
    size_t plen;
    uint8_t *payload = pack_gift(&plen);
    uint8_t *env;
    size_t envlen;
    char *json;

    fill_row(&r, "RoomGiftSent", payload, plen);
    assert_int_equal(outbox_event_build(&r, &env, &envlen, &json), 0);

    Roomd__V1__RoomOutboxEvent *ev = roomd__v1__room_outbox_event__unpack(NULL, envlen, env);
    assert_non_null(ev);
    assert_string_equal(ev->event_id, r.event_id);
    assert_string_equal(ev->app_code, "hyapp");
    assert_string_equal(ev->room_id, "r-1");
    assert_int_equal(ev->room_version, 12);
    assert_string_equal(ev->event_type, "RoomGiftSent");
    assert_int_equal(ev->occurred_at_ms, 1764464523456);
    assert_string_equal(ev->command_id, "cmd-9");
    assert_int_equal(ev->payload.len, plen);
    assert_memory_equal(ev->payload.data, payload, plen);
    roomd__v1__room_outbox_event__free_unpacked(ev, NULL);

    json_error_t jerr;
    json_t *j = json_loads(json, 0, &jerr);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "event_id")), r.event_id);
    assert_string_equal(json_string_value(json_object_get(j, "app_code")), "hyapp");
    assert_string_equal(json_string_value(json_object_get(j, "room_id")), "r-1");
    assert_int_equal(json_integer_value(json_object_get(j, "room_version")), 12);
    assert_string_equal(json_string_value(json_object_get(j, "event_type")), "RoomGiftSent");
    assert_int_equal(json_integer_value(json_object_get(j, "occurred_at_ms")), 1764464523456);
    assert_string_equal(json_string_value(json_object_get(j, "command_id")), "cmd-9");
    json_t *p = json_object_get(j, "payload");
    assert_true(json_is_object(p));
    assert_int_equal(json_integer_value(json_object_get(p, "uid")), 1001);
    assert_int_equal(json_integer_value(json_object_get(p, "to_uid")), 1002);
    assert_string_equal(json_string_value(json_object_get(p, "gift_id")), "rose");
    assert_int_equal(json_integer_value(json_object_get(p, "count")), 3);
    assert_int_equal(json_integer_value(json_object_get(p, "total")), 30);
    assert_true(json_integer_value(json_object_get(p, "rocket_energy")) == 9007199254740993LL);
    assert_int_equal(json_object_size(p), 8);
    assert_null(strchr(json, '\n'));
    json_decref(j);
    free(env);
    free(json);
    free(payload);
}

/* proto3 defaults (zero, "", false) are written too, so every key is there. */
static void
test_defaults_and_bool(void **state)
{
    Roomd__V1__RoomMicChanged m = ROOMD__V1__ROOM_MIC_CHANGED__INIT;
    m.uid = 5;
    m.on_mic = 1;
    size_t len = roomd__v1__room_mic_changed__get_packed_size(&m);
    uint8_t *buf = xmalloc(len);
    roomd__v1__room_mic_changed__pack(&m, buf);
    struct outbox_row r;
    uint8_t *env;
    size_t envlen;
    char *json;

    fill_row(&r, "RoomMicChanged", buf, len);
    assert_int_equal(outbox_event_build(&r, &env, &envlen, &json), 0);
    json_t *j = json_loads(json, 0, NULL);
    json_t *p = json_object_get(j, "payload");
    assert_int_equal(json_integer_value(json_object_get(p, "uid")), 5);
    assert_int_equal(json_integer_value(json_object_get(p, "seat")), 0);
    assert_true(json_is_true(json_object_get(p, "on_mic")));
    json_decref(j);
    free(env);
    free(json);

    /* An empty payload is a valid message of all defaults. */
    fill_row(&r, "RoomClosed", NULL, 0);
    assert_int_equal(outbox_event_build(&r, &env, &envlen, &json), 0);
    j = json_loads(json, 0, NULL);
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(j, "payload"), "operator_uid")), 0);
    json_decref(j);
    free(env);
    free(json);
    free(buf);
}

static void
test_poison_refused(void **state)
{
    static const uint8_t truncated[] = {0x08};           /* field 1 varint, value missing */
    static const uint8_t bad_wire[] = {0x1a, 0x05, 'a'}; /* length 5, 1 byte follows */
    size_t plen;
    uint8_t *good = pack_gift(&plen);
    struct outbox_row r;
    uint8_t *env = (uint8_t *)"x";
    size_t envlen = 1;
    char *json = "x";

    fill_row(&r, "RoomGiftSent", (uint8_t *)truncated, sizeof(truncated));
    assert_int_equal(outbox_event_build(&r, &env, &envlen, &json), ROOMD_EINVAL);
    assert_null(env);
    assert_null(json);
    fill_row(&r, "RoomUserKicked", (uint8_t *)bad_wire, sizeof(bad_wire));
    assert_int_equal(outbox_event_build(&r, &env, &envlen, &json), ROOMD_EINVAL);
    fill_row(&r, "RoomNoSuchThing", good, plen);
    assert_int_equal(outbox_event_build(&r, &env, &envlen, &json), ROOMD_EINVAL);
    /* The envelope itself is not an event type. */
    fill_row(&r, "RoomOutboxEvent", good, plen);
    assert_int_equal(outbox_event_build(&r, &env, &envlen, &json), ROOMD_EINVAL);
    /* The full descriptor name is accepted too. */
    fill_row(&r, "roomd.v1.RoomGiftSent", good, plen);
    assert_int_equal(outbox_event_build(&r, &env, &envlen, &json), 0);
    free(env);
    free(json);
    free(good);
}

/* ==== sink_log ==== */

struct writer_arg {
    struct sink *sink;
    int thread;
    int failures; /* cmocka asserts must stay on the main thread */
};

#define LINES_PER_THREAD 200
#define THREADS 4

static void *
writer(void *p)
{
    struct writer_arg *a = p;
    char json[256], err[128];
    struct outbox_row r;

    memset(&r, 0, sizeof(r));
    for (int i = 0; i < LINES_PER_THREAD; i++) {
        /* a long-ish line so interleaving would show */
        snprintf(json, sizeof(json), "{\"t\":%d,\"i\":%d,\"pad\":\"%0120d\"}", a->thread, i, 0);
        struct outbox_event ev = {.row = &r, .json = json};
        if (a->sink->publish(a->sink, &ev, 0, err, sizeof(err)) != 0)
            a->failures++;
    }
    return NULL;
}

static void
test_sink_log_lines(void **state)
{
    char *dir = th_tmpdir();
    char *path = xasprintf("%s/events.jsonl", dir);
    char err[256];
    struct sink *s;
    pthread_t th[THREADS];
    struct writer_arg args[THREADS];

    assert_int_equal(sink_log_open(&s, path, err, sizeof(err)), 0);
    assert_string_equal(s->name, "log");
    assert_int_equal(s->bit, SINK_BIT_LOG);
    assert_null(s->accepts);
    for (int t = 0; t < THREADS; t++) {
        args[t] = (struct writer_arg){.sink = s, .thread = t};
        pthread_create(&th[t], NULL, writer, &args[t]);
    }
    for (int t = 0; t < THREADS; t++) {
        pthread_join(th[t], NULL);
        assert_int_equal(args[t].failures, 0);
    }
    s->close(s);

    FILE *f = fopen(path, "r");
    char line[512];
    int n = 0, seen[THREADS] = {0};
    assert_non_null(f);
    while (fgets(line, sizeof(line), f) != NULL) {
        json_t *j = json_loads(line, 0, NULL);
        assert_non_null(j); /* every line is one whole JSON object */
        int t = (int)json_integer_value(json_object_get(j, "t"));
        int i = (int)json_integer_value(json_object_get(j, "i"));
        assert_int_equal(i, seen[t]); /* per thread, in order */
        seen[t]++;
        json_decref(j);
        n++;
    }
    fclose(f);
    assert_int_equal(n, THREADS * LINES_PER_THREAD);

    /* Appends: a second open adds lines after the first ones. */
    assert_int_equal(sink_log_open(&s, path, err, sizeof(err)), 0);
    struct outbox_row r;
    memset(&r, 0, sizeof(r));
    struct outbox_event ev = {.row = &r, .json = "{\"last\":true}"};
    assert_int_equal(s->publish(s, &ev, 0, err, sizeof(err)), 0);
    s->close(s);
    f = fopen(path, "r");
    n = 0;
    while (fgets(line, sizeof(line), f) != NULL)
        n++;
    fclose(f);
    assert_int_equal(n, THREADS * LINES_PER_THREAD + 1);

    /* A path that cannot be opened is ROOMD_EIO with the reason. */
    char *bad = xasprintf("%s/no/such/dir/x.jsonl", dir);
    assert_int_equal(sink_log_open(&s, bad, err, sizeof(err)), ROOMD_EIO);
    assert_null(s);
    assert_non_null(strstr(err, "No such file"));

    char *cmd = xasprintf("rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    free(cmd);
    free(bad);
    free(path);
    free(dir);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_envelope_and_json),
        cmocka_unit_test(test_defaults_and_bool),
        cmocka_unit_test(test_poison_refused),
        cmocka_unit_test(test_sink_log_lines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
