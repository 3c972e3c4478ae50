/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_command.c: the command parser and apply. Byte 0 picks the command
 * type, the rest is the JSON body: room_cmd_parse, then (when it validates)
 * room_apply on a room created by a fixed CreateRoom with two members.
 */
#include "conf/conf.h"
#include "room/command.h"
#include "room/state.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct conf conf;

static struct room_state *
base_room(void)
{
    static const char *const setup[][2] = {
        {"0", "{\"command_id\":\"c0\",\"owner_uid\":1,\"title\":\"t\"}"},
        {"1", "{\"command_id\":\"c1\",\"uid\":1}"},
        {"1", "{\"command_id\":\"c2\",\"uid\":2}"},
    };
    struct room_state *s = room_state_new("app", "r1");

    for (size_t i = 0; i < sizeof(setup) / sizeof(setup[0]); i++) {
        struct room_cmd cmd;
        struct cmd_error ce;
        struct room_events ev = {0};
        struct apply_error ae;
        enum room_cmd_type t = (enum room_cmd_type)(setup[i][0][0] - '0');
        if (room_cmd_parse(t, "app", t == CMD_CREATE_ROOM ? NULL : "r1", setup[i][1],
                           strlen(setup[i][1]), &cmd, &ce) != 0)
            abort();
        if (t == CMD_CREATE_ROOM)
            strcpy(cmd.room_id, "r1");
        if (room_apply(s, &cmd, 1000 + (int64_t)i, &conf.room, &ev, &ae) != 0)
            abort();
        room_events_clear(&ev);
        room_cmd_clear(&cmd);
    }
    return s;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct room_cmd cmd;
    struct cmd_error ce;
    enum room_cmd_type t;

    if (conf.room.seat_count == 0)
        conf_defaults(&conf);
    if (size < 1)
        return 0;
    t = (enum room_cmd_type)(data[0] % CMD_COUNT_);
    if (room_cmd_parse(t, "app", t == CMD_CREATE_ROOM ? NULL : "r1", (const char *)data + 1,
                       size - 1, &cmd, &ce) == 0) {
        struct room_state *s = t == CMD_CREATE_ROOM ? room_state_new("app", cmd.room_id)
                                                    : base_room();
        struct room_events ev = {0};
        struct apply_error ae;
        room_apply(s, &cmd, 5000, &conf.room, &ev, &ae);
        room_events_clear(&ev);
        room_state_free(s);
    }
    room_cmd_clear(&cmd);
    return 0;
}
