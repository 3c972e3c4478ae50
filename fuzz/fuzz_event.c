/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_event.c: event decode. Byte 0 picks the event type, the rest is the
 * row's protobuf payload: outbox_event_build decodes it into the envelope and
 * its JSON (what every sink sends).
 */
#include "outbox/outbox.h"
#include "store/store.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const types[] = {
    "RoomCreated",    "RoomUserJoined",    "RoomUserLeft",       "RoomMicChanged",
    "RoomGiftSent",   "RoomUserKicked",    "RoomClosed",         "RoomRocketIgnited",
    "RoomRocketLaunched", "RoomRocketReset", "roomd.v1.RoomGiftSent", "NoSuchEvent",
};

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct outbox_row row;
    uint8_t *env = NULL;
    char *json = NULL;
    size_t env_len = 0;

    if (size < 1)
        return 0;
    memset(&row, 0, sizeof(row));
    strcpy(row.event_id, "01a22a3a-4b8f-7424-b66d-e3f93b482f0d");
    strcpy(row.app_code, "app");
    strcpy(row.room_id, "r1");
    strcpy(row.command_id, "c1");
    strcpy(row.event_type, types[data[0] % (sizeof(types) / sizeof(types[0]))]);
    row.room_version = 2;
    row.payload = (uint8_t *)data + 1;
    row.payload_len = size - 1;
    row.created_at_ms = 1;
    outbox_event_build(&row, &env, &env_len, &json);
    free(env);
    free(json);
    return 0;
}
