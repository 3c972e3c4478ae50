/* SPDX-License-Identifier: Apache-2.0 */
/* seed_shape.c: the column names of roomd's tables (seed_shape.h). */
#include "store/seed_shape.h"

#include <strings.h>

static const char *const known_cols[] = {"id",
                                         "event_id",
                                         "app_code",
                                         "room_id",
                                         "room_version",
                                         "command_id",
                                         "event_type",
                                         "payload",
                                         "status",
                                         "retry_count",
                                         "sinks_done",
                                         "next_retry_at_ms",
                                         "lock_until_ms",
                                         "locked_by",
                                         "last_error",
                                         "due_at_ms",
                                         "created_at_ms",
                                         "updated_at_ms",
                                         "delivered_at_ms",
                                         "room_seq",
                                         "owner_uid",
                                         "title",
                                         "version",
                                         "fence_token",
                                         "rocket_status",
                                         "rocket_id",
                                         "rocket_level",
                                         "rocket_launch_at_ms",
                                         "event_seq",
                                         "command_type",
                                         "request",
                                         "response",
                                         "state",
                                         "request_id",
                                         "traceparent",
                                         NULL};

bool
store_known_column(const char *name, size_t len)
{
    for (const char *const *k = known_cols; *k != NULL; k++)
        if (strncasecmp(*k, name, len) == 0 && (*k)[len] == '\0')
            return true;
    return false;
}
