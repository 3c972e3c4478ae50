/* SPDX-License-Identifier: Apache-2.0 */
/* test_log.c: the JSON lines logger: every record one valid JSON object,
 * values escaped, "k=v" tails split into fields, the level honoured (also
 * for log_fields records) and changed at run time, reopen after rotation. */
#include "helpers.h"

#include "core/log.h"
#include "core/xmalloc.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *dir, *path;

static int
setup(void **state)
{
    dir = th_tmpdir();
    path = xasprintf("%s/roomd.log", dir);
    assert_int_equal(log_open(path, LOG_INFO), 0);
    return 0;
}

static int
teardown(void **state)
{
    log_close();
    unlink(path);
    rmdir(dir);
    free(path);
    free(dir);
    return 0;
}

/* The records of file p, parsed; every line must be one JSON object. */
static json_t *
records(const char *p)
{
    FILE *f = fopen(p, "r");
    char line[8192];
    json_t *all = json_array();

    assert_non_null(f);
    while (fgets(line, sizeof(line), f) != NULL) {
        json_error_t e;
        json_t *j = json_loads(line, 0, &e);
        if (j == NULL || !json_is_object(j))
            fail_msg("not a JSON object line: %s (%s)", line, e.text);
        json_array_append_new(all, j);
    }
    fclose(f);
    return all;
}

static const char *
str(json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}

static void
test_fields_and_escaping(void **state)
{
    log_warn("outbox", "publish failed, will retry",
             "id=%d event_id=%s rc=%s err=\"%s\" empty= neg=%d", 42, "01a2-b3",
             "temporary failure, retry", "peer said \"no\"\n\tbye", -7);
    log_info("main", "a \"quoted\" msg", NULL);
    log_info("main", "not pairs", "just some words");
    json_t *all = records(path);
    assert_int_equal(json_array_size(all), 3);
    json_t *r = json_array_get(all, 0);
    assert_string_equal(str(r, "level"), "warn");
    assert_string_equal(str(r, "mod"), "outbox");
    assert_string_equal(str(r, "msg"), "publish failed, will retry");
    assert_non_null(str(r, "ts"));
    assert_int_equal(json_integer_value(json_object_get(r, "id")), 42);
    assert_string_equal(str(r, "event_id"), "01a2-b3");
    assert_string_equal(str(r, "rc"), "temporary failure, retry");
    assert_string_equal(str(r, "err"), "peer said \"no\"\n\tbye");
    assert_string_equal(str(r, "empty"), "");
    assert_int_equal(json_integer_value(json_object_get(r, "neg")), -7);
    assert_string_equal(str(json_array_get(all, 1), "msg"), "a \"quoted\" msg");
    assert_string_equal(str(json_array_get(all, 2), "detail"), "just some words");
    json_decref(all);
}

static void
test_level_honoured(void **state)
{
    log_set_level(LOG_ERROR);
    log_info("main", "hidden", NULL);
    log_warn("main", "hidden too", NULL);
    assert_false(log_enabled(LOG_INFO));
    log_fields(LOG_INFO, "room", "room_command_timing", json_pack("{s:i}", "status", 200));
    log_error("main", "shown", NULL);
    log_set_level(LOG_DEBUG);
    log_debug("main", "debug shown", NULL);
    log_fields(LOG_INFO, "room", "room_command_timing", json_pack("{s:i}", "status", 200));
    log_set_level(LOG_INFO);
    json_t *all = records(path);
    assert_int_equal(json_array_size(all), 3);
    assert_string_equal(str(json_array_get(all, 0), "msg"), "shown");
    assert_string_equal(str(json_array_get(all, 1), "msg"), "debug shown");
    json_t *t = json_array_get(all, 2);
    assert_string_equal(str(t, "msg"), "room_command_timing");
    assert_string_equal(str(t, "level"), "info");
    assert_int_equal(json_integer_value(json_object_get(t, "status")), 200);
    json_decref(all);
}

static void
test_invalid_utf8_and_long_values(void **state)
{
    char big[6000];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    log_fields(LOG_WARN, "t", "big", json_pack("{s:s}", "v", big));
    log_warn("t", "bytes", "v=%s", "ok\xff\xfe");
    json_t *all = records(path);
    assert_int_equal(json_array_size(all), 2);
    assert_int_equal(strlen(str(json_array_get(all, 0), "v")), sizeof(big) - 1);
    assert_string_equal(str(json_array_get(all, 1), "v"), "ok??");
    json_decref(all);
}

static void
test_reopen_after_rotation(void **state)
{
    char *rotated = xasprintf("%s.1", path);
    log_info("main", "before", NULL);
    assert_int_equal(rename(path, rotated), 0);
    log_info("main", "still the old file", NULL);
    assert_int_equal(log_reopen(), 0);
    log_info("main", "after", NULL);
    json_t *old = records(rotated), *now = records(path);
    assert_int_equal(json_array_size(old), 2);
    assert_int_equal(json_array_size(now), 1);
    assert_string_equal(str(json_array_get(now, 0), "msg"), "after");
    json_decref(old);
    json_decref(now);
    unlink(rotated);
    free(rotated);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fields_and_escaping, setup, teardown),
        cmocka_unit_test_setup_teardown(test_level_honoured, setup, teardown),
        cmocka_unit_test_setup_teardown(test_invalid_utf8_and_long_values, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reopen_after_rotation, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
