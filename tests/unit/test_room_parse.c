/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_room_parse.c: room_cmd_parse validation (each field typed and
 * bounded, unknown fields refused, the error naming the field) and the
 * canonical request (sorted keys, "type" and "room_id", parsed again by a
 * replay to the same text).
 */
#include "helpers.h"

#include "core/err.h"
#include "room/command.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void
parses(enum room_cmd_type t, const char *room, const char *body, const char *canonical)
{
    struct room_cmd cmd, again;
    struct cmd_error e;

    if (room_cmd_parse(t, "app1", room, body, strlen(body), &cmd, &e) != 0)
        fail_msg("%s: %s", body, e.message);
    assert_non_null(cmd.request);
    if (canonical)
        assert_string_equal(cmd.request, canonical);
    /* written directly (command.c), byte for byte jansson's canonical dump of itself */
    json_t *j = json_loads(cmd.request, 0, NULL);
    assert_non_null(j);
    char *dump = json_dumps(j, JSON_SORT_KEYS | JSON_COMPACT);
    assert_string_equal(cmd.request, dump);
    free(dump);
    json_decref(j);
    /* a replay parses the stored request (with the room from the log row) to the same text */
    assert_int_equal(
        room_cmd_parse(t, "app1", cmd.room_id, cmd.request, strlen(cmd.request), &again, &e), 0);
    assert_string_equal(again.request, cmd.request);
    room_cmd_clear(&again);
    room_cmd_clear(&cmd);
}

/* Asserts body is refused and the message starts with want ("uid: ..."). */
static void
refuses(enum room_cmd_type t, const char *body, const char *field, const char *want)
{
    struct room_cmd cmd;
    struct cmd_error e;

    assert_int_equal(
        room_cmd_parse(t, "app1", t == CMD_CREATE_ROOM ? NULL : "r1", body, strlen(body), &cmd, &e),
        ROOMD_EINVAL);
    assert_null(cmd.request);
    assert_string_equal(e.field, field);
    if (strncmp(e.message, want, strlen(want)) != 0)
        fail_msg("message \"%s\" does not start with \"%s\"", e.message, want);
}

static void
test_valid_commands(void **state)
{
    parses(CMD_CREATE_ROOM, NULL,
           "{\"title\":\"Hi \\u4f60\\u597d\",\"owner_uid\":7,\"command_id\":\"c-1\","
           "\"room_id\":\"room.A:1\"}",
           "{\"command_id\":\"c-1\",\"owner_uid\":7,\"room_id\":\"room.A:1\",\"title\":\"Hi "
           "\xe4\xbd\xa0\xe5\xa5\xbd\",\"type\":\"CreateRoom\"}");
    parses(CMD_JOIN_ROOM, "r1", "{\"command_id\":\"j\",\"uid\":9007199254740993}",
           "{\"command_id\":\"j\",\"room_id\":\"r1\",\"type\":\"JoinRoom\","
           "\"uid\":9007199254740993}");
    parses(CMD_LEAVE_ROOM, "r1", "{\"command_id\":\"l\",\"uid\":2}",
           "{\"command_id\":\"l\",\"room_id\":\"r1\",\"type\":\"LeaveRoom\",\"uid\":2}");
    parses(CMD_MIC_UP, "r1", "{\"command_id\":\"m\",\"uid\":2}",
           "{\"command_id\":\"m\",\"room_id\":\"r1\",\"type\":\"MicUp\",\"uid\":2}");
    parses(CMD_MIC_UP, "r1", "{\"command_id\":\"m\",\"uid\":2,\"seat\":0}",
           "{\"command_id\":\"m\",\"room_id\":\"r1\",\"seat\":0,\"type\":\"MicUp\",\"uid\":2}");
    parses(CMD_MIC_DOWN, "r1", "{\"command_id\":\"m\",\"uid\":2,\"room_id\":\"r1\"}",
           "{\"command_id\":\"m\",\"room_id\":\"r1\",\"type\":\"MicDown\",\"uid\":2}");
    parses(CMD_SEND_GIFT, "r1",
           "{\"command_id\":\"g\",\"uid\":2,\"to_uid\":3,\"gift_id\":\"rose\",\"count\":9999,"
           "\"unit_price\":1000000000}",
           "{\"command_id\":\"g\",\"count\":9999,\"gift_id\":\"rose\",\"room_id\":\"r1\","
           "\"to_uid\":3,\"type\":\"SendGift\",\"uid\":2,\"unit_price\":1000000000}");
    /* unit_price is optional (the gift catalog prices it): absent, not in the request */
    parses(CMD_SEND_GIFT, "r1",
           "{\"command_id\":\"g\",\"uid\":2,\"to_uid\":3,\"gift_id\":\"rose\",\"count\":2}",
           "{\"command_id\":\"g\",\"count\":2,\"gift_id\":\"rose\",\"room_id\":\"r1\","
           "\"to_uid\":3,\"type\":\"SendGift\",\"uid\":2}");
    parses(CMD_KICK_USER, "r1", "{\"command_id\":\"k\",\"operator_uid\":1,\"uid\":2}",
           "{\"command_id\":\"k\",\"operator_uid\":1,\"reason\":\"\",\"room_id\":\"r1\","
           "\"type\":\"KickUser\",\"uid\":2}");
    parses(CMD_CLOSE_ROOM, "r1", "{\"command_id\":\"x\",\"operator_uid\":1}",
           "{\"command_id\":\"x\",\"operator_uid\":1,\"room_id\":\"r1\",\"type\":\"CloseRoom\"}");
    parses(CMD_LAUNCH_ROCKET, "r1",
           "{\"command_id\":\"~rl-r1-1-1\",\"rocket_id\":\"r1-1-1\",\"level\":1,"
           "\"launch_at_ms\":1700000000000}",
           "{\"command_id\":\"~rl-r1-1-1\",\"launch_at_ms\":1700000000000,\"level\":1,"
           "\"rocket_id\":\"r1-1-1\",\"room_id\":\"r1\",\"type\":\"LaunchRocket\"}");
    /* free text escaped as jansson does: quote, backslash, the short escapes,
     * other control characters as \u00XX, DEL, '/', non-ASCII and a 4-byte
     * character as they are (parses() compares with jansson's dump) */
    parses(CMD_CREATE_ROOM, NULL,
           "{\"title\":\"a\\\"b\\\\c/d\\b\\f\\n\\r\\t\\u0001\\u001f\\u007f\\u00e9\\ud83d\\ude00\","
           "\"owner_uid\":7,\"command_id\":\"c-2\",\"room_id\":\"r2\"}",
           "{\"command_id\":\"c-2\",\"owner_uid\":7,\"room_id\":\"r2\",\"title\":\"a\\\"b\\\\c/"
           "d\\b\\f\\n\\r\\t\\u0001\\u001F\x7f\xc3\xa9\xf0\x9f\x98\x80\",\"type\":\"CreateRoom\"}");
    parses(CMD_KICK_USER, "r1",
           "{\"command_id\":\"k2\",\"operator_uid\":1,\"uid\":2,\"reason\":\"spam \\\"x\\\"\\n\"}",
           NULL);
}

static void
test_generated_room_id(void **state)
{
    struct room_cmd cmd;
    struct cmd_error e;
    const char *body = "{\"command_id\":\"c\",\"owner_uid\":1,\"title\":\"t\"}";

    assert_int_equal(room_cmd_parse(CMD_CREATE_ROOM, "app1", NULL, body, strlen(body), &cmd, &e),
                     0);
    assert_int_equal(strlen(cmd.room_id), 32);
    assert_true(cmd.room_id_generated);
    assert_int_equal(cmd.room_id[12], '7'); /* UUID version 7 */
    assert_non_null(strstr(cmd.request, cmd.room_id));
    room_cmd_clear(&cmd);
}

static void
test_body(void **state)
{
    refuses(CMD_JOIN_ROOM, "{\"command_id\":\"j\",", "body", "body: invalid JSON at line 1");
    refuses(CMD_JOIN_ROOM, "", "body", "body: invalid JSON");
    refuses(CMD_JOIN_ROOM, "[1]", "body", "body: must be a JSON object");
    refuses(CMD_JOIN_ROOM, "{\"command_id\":\"j\",\"uid\":1,\"uid\":2}", "body",
            "body: invalid JSON");
    refuses(CMD_JOIN_ROOM, "{\"command_id\":\"j\",\"uid\":1,\"extra\":true}", "extra",
            "extra: unknown field");
    refuses(CMD_JOIN_ROOM, "{\"command_id\":\"j\",\"uid\":1,\"seat\":1}", "seat",
            "seat: unknown field");
    refuses(CMD_JOIN_ROOM, "{\"command_id\":\"j\",\"uid\":1,\"type\":\"MicUp\"}", "type",
            "type: must be \"JoinRoom\"");
    refuses(CMD_JOIN_ROOM, "{\"command_id\":\"j\",\"uid\":1,\"room_id\":\"r2\"}", "room_id",
            "room_id: does not match");
}

static void
test_ids(void **state)
{
    char body[256];

    refuses(CMD_JOIN_ROOM, "{\"uid\":1}", "command_id", "command_id: is required");
    refuses(CMD_JOIN_ROOM, "{\"command_id\":\"\",\"uid\":1}", "command_id",
            "command_id: must be a string of 1..63");
    refuses(CMD_JOIN_ROOM, "{\"command_id\":\"a b\",\"uid\":1}", "command_id", "command_id:");
    refuses(CMD_JOIN_ROOM, "{\"command_id\":7,\"uid\":1}", "command_id", "command_id:");
    snprintf(body, sizeof(body), "{\"command_id\":\"%064d\",\"uid\":1}", 0);
    refuses(CMD_JOIN_ROOM, body, "command_id", "command_id:");
    snprintf(body, sizeof(body), "{\"command_id\":\"%063d\",\"uid\":1}", 0);
    parses(CMD_JOIN_ROOM, "r1", body, NULL);
    /* room_id: at most 48 bytes (IM GroupId) */
    snprintf(body, sizeof(body),
             "{\"command_id\":\"c\",\"room_id\":\"%049d\",\"owner_uid\":1,\"title\":\"t\"}", 0);
    refuses(CMD_CREATE_ROOM, body, "room_id", "room_id: must be a string of 1..48");
    snprintf(body, sizeof(body),
             "{\"command_id\":\"c\",\"room_id\":\"%048d\",\"owner_uid\":1,\"title\":\"t\"}", 0);
    parses(CMD_CREATE_ROOM, NULL, body, NULL);
    refuses(CMD_CREATE_ROOM,
            "{\"command_id\":\"c\",\"room_id\":\"a/b\",\"owner_uid\":1,"
            "\"title\":\"t\"}",
            "room_id", "room_id:");
}

static void
test_uids(void **state)
{
    refuses(CMD_JOIN_ROOM, "{\"command_id\":\"j\"}", "uid", "uid: is required");
    refuses(CMD_JOIN_ROOM, "{\"command_id\":\"j\",\"uid\":\"5\"}", "uid",
            "uid: must be a positive integer");
    refuses(CMD_JOIN_ROOM, "{\"command_id\":\"j\",\"uid\":0}", "uid",
            "uid: must be a positive integer");
    refuses(CMD_JOIN_ROOM, "{\"command_id\":\"j\",\"uid\":-3}", "uid",
            "uid: must be a positive integer");
    refuses(CMD_JOIN_ROOM, "{\"command_id\":\"j\",\"uid\":1.5}", "uid",
            "uid: must be a positive integer");
    refuses(CMD_JOIN_ROOM, "{\"command_id\":\"j\",\"uid\":true}", "uid",
            "uid: must be a positive integer");
    refuses(CMD_JOIN_ROOM, "{\"command_id\":\"j\",\"uid\":null}", "uid",
            "uid: must be a positive integer");
    refuses(CMD_CREATE_ROOM, "{\"command_id\":\"c\",\"title\":\"t\"}", "owner_uid",
            "owner_uid: is required");
    refuses(CMD_KICK_USER, "{\"command_id\":\"k\",\"uid\":2}", "operator_uid",
            "operator_uid: is required");
    refuses(CMD_CLOSE_ROOM, "{\"command_id\":\"k\",\"operator_uid\":\"1\"}", "operator_uid",
            "operator_uid: must be a positive integer");
    refuses(CMD_MIC_UP, "{\"command_id\":\"m\",\"uid\":1,\"seat\":-1}", "seat",
            "seat: must be an integer in 0..31");
    refuses(CMD_MIC_UP, "{\"command_id\":\"m\",\"uid\":1,\"seat\":\"1\"}", "seat", "seat:");
}

static void
test_texts(void **state)
{
    char body[1024], big[300];

    refuses(CMD_CREATE_ROOM, "{\"command_id\":\"c\",\"owner_uid\":1}", "title",
            "title: is required");
    refuses(CMD_CREATE_ROOM, "{\"command_id\":\"c\",\"owner_uid\":1,\"title\":\"\"}", "title",
            "title: must be 1..128 bytes");
    refuses(CMD_CREATE_ROOM, "{\"command_id\":\"c\",\"owner_uid\":1,\"title\":5}", "title",
            "title: must be a string");
    memset(big, 'x', 129);
    big[129] = '\0';
    snprintf(body, sizeof(body), "{\"command_id\":\"c\",\"owner_uid\":1,\"title\":\"%s\"}", big);
    refuses(CMD_CREATE_ROOM, body, "title", "title: must be 1..128 bytes");
    big[128] = '\0';
    snprintf(body, sizeof(body), "{\"command_id\":\"c\",\"owner_uid\":1,\"title\":\"%s\"}", big);
    parses(CMD_CREATE_ROOM, NULL, body, NULL);
    /* a NUL inside the text is refused by the JSON parser */
    refuses(CMD_CREATE_ROOM, "{\"command_id\":\"c\",\"owner_uid\":1,\"title\":\"a\\u0000b\"}",
            "body", "body: invalid JSON");
    memset(big, 'r', 256);
    big[256] = '\0';
    snprintf(body, sizeof(body),
             "{\"command_id\":\"k\",\"operator_uid\":1,\"uid\":2,\"reason\":\"%s\"}", big);
    refuses(CMD_KICK_USER, body, "reason", "reason: must be 0..255 bytes");
    big[255] = '\0';
    snprintf(body, sizeof(body),
             "{\"command_id\":\"k\",\"operator_uid\":1,\"uid\":2,\"reason\":\"%s\"}", big);
    parses(CMD_KICK_USER, "r1", body, NULL);
}

static void
test_gift_fields(void **state)
{
    refuses(CMD_SEND_GIFT,
            "{\"command_id\":\"g\",\"uid\":1,\"gift_id\":\"x\",\"count\":1,\"unit_price\":1}",
            "to_uid", "to_uid: is required");
    refuses(CMD_SEND_GIFT,
            "{\"command_id\":\"g\",\"uid\":1,\"to_uid\":2,\"count\":1,\"unit_price\":1}", "gift_id",
            "gift_id: is required");
    refuses(CMD_SEND_GIFT,
            "{\"command_id\":\"g\",\"uid\":1,\"to_uid\":2,\"gift_id\":\"\",\"count\":1,"
            "\"unit_price\":1}",
            "gift_id", "gift_id:");
    refuses(CMD_SEND_GIFT,
            "{\"command_id\":\"g\",\"uid\":1,\"to_uid\":2,\"gift_id\":\"x\",\"count\":0,"
            "\"unit_price\":1}",
            "count", "count: must be an integer in 1..9999");
    refuses(CMD_SEND_GIFT,
            "{\"command_id\":\"g\",\"uid\":1,\"to_uid\":2,\"gift_id\":\"x\",\"count\":10000,"
            "\"unit_price\":1}",
            "count", "count: must be an integer in 1..9999");
    refuses(CMD_SEND_GIFT,
            "{\"command_id\":\"g\",\"uid\":1,\"to_uid\":2,\"gift_id\":\"x\",\"count\":1,"
            "\"unit_price\":1000000001}",
            "unit_price", "unit_price: must be an integer in 1..1000000000");
    refuses(CMD_LAUNCH_ROCKET,
            "{\"command_id\":\"l\",\"rocket_id\":\"x\",\"level\":0,\"launch_at_ms\":1}", "level",
            "level:");
    refuses(CMD_LAUNCH_ROCKET, "{\"command_id\":\"l\",\"rocket_id\":\"x\",\"level\":1}",
            "launch_at_ms", "launch_at_ms: is required");
}

static void
test_names(void **state)
{
    for (int t = 0; t < CMD_COUNT_; t++)
        assert_int_equal(room_cmd_parse_name(room_cmd_name((enum room_cmd_type)t)), t);
    assert_int_equal(room_cmd_parse_name("Nope"), -1);
    assert_string_equal(room_cmd_name(CMD_SEND_GIFT), "SendGift");
}

/* The reserved namespace: clients cannot use it; a launch must use its own
 * reserved id, of a rocket of its room; the log is replayed as it is. */
static void
test_reserved_ids(void **state)
{
    struct room_cmd cmd;
    struct cmd_error e;
    const char *old = "{\"command_id\":\"rl-r1-1-1\",\"launch_at_ms\":5,\"level\":1,"
                      "\"rocket_id\":\"r1-1-1\",\"room_id\":\"r1\",\"type\":\"LaunchRocket\"}";
    char id[STORE_ID_MAX];

    refuses(CMD_JOIN_ROOM, "{\"command_id\":\"~rl-r1-1-1\",\"uid\":2}", "command_id",
            "command_id: ids starting with \"~\" are reserved");
    refuses(CMD_SEND_GIFT,
            "{\"command_id\":\"~x\",\"uid\":1,\"to_uid\":2,\"gift_id\":\"x\",\"count\":1,"
            "\"unit_price\":1}",
            "command_id", "command_id: ids starting with \"~\" are reserved");
    refuses(CMD_CREATE_ROOM, "{\"command_id\":\"~c\",\"owner_uid\":1,\"title\":\"t\"}",
            "command_id", "command_id: ids starting with \"~\" are reserved");
    refuses(CMD_JOIN_ROOM, "{\"command_id\":\"~\",\"uid\":2}", "command_id",
            "command_id: ids starting with");
    /* a launch takes exactly its reserved id, and only a rocket of its room */
    refuses(CMD_LAUNCH_ROCKET,
            "{\"command_id\":\"rl-r1-1-1\",\"rocket_id\":\"r1-1-1\",\"level\":1,"
            "\"launch_at_ms\":5}",
            "command_id", "command_id: must be \"~rl-r1-1-1\"");
    refuses(CMD_LAUNCH_ROCKET,
            "{\"command_id\":\"~rl-r1-1-2\",\"rocket_id\":\"r1-1-1\",\"level\":1,"
            "\"launch_at_ms\":5}",
            "command_id", "command_id: must be \"~rl-r1-1-1\"");
    refuses(CMD_LAUNCH_ROCKET,
            "{\"command_id\":\"~rl-r2-1-1\",\"rocket_id\":\"r2-1-1\",\"level\":1,"
            "\"launch_at_ms\":5}",
            "rocket_id", "rocket_id: must be a rocket of room r1");
    refuses(CMD_LAUNCH_ROCKET,
            "{\"command_id\":\"~rl-r10-1-1\",\"rocket_id\":\"r10-1-1\",\"level\":1,"
            "\"launch_at_ms\":5}",
            "rocket_id", "rocket_id: must be a rocket of room r1");
    /* the longest room id's launch id still fits */
    memset(id, 'a', 48);
    id[48] = '\0';
    strcat(id, "-99999-10");
    rocket_launch_command_id(id, cmd.command_id, sizeof(cmd.command_id));
    assert_int_equal(strlen(cmd.command_id), 4 + 57);
    /* a logged launch from before the namespace replays */
    assert_int_equal(room_cmd_parse_logged(CMD_LAUNCH_ROCKET, "app1", "r1", old, &cmd, &e), 0);
    assert_string_equal(cmd.command_id, "rl-r1-1-1");
    assert_string_equal(cmd.request, old);
    room_cmd_clear(&cmd);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_commands), cmocka_unit_test(test_generated_room_id),
        cmocka_unit_test(test_body),           cmocka_unit_test(test_ids),
        cmocka_unit_test(test_uids),           cmocka_unit_test(test_texts),
        cmocka_unit_test(test_gift_fields),    cmocka_unit_test(test_names),
        cmocka_unit_test(test_reserved_ids),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
