/* SPDX-License-Identifier: Apache-2.0 */
/* sink_bits.c: the table of the sinks_done bits (sink_bits.h). */
#include "core/sink_bits.h"

#include <stddef.h>
#include <string.h>

static const struct {
    const char *name;
    uint32_t bit;
    const char *event_type; /* the one event the sink takes; NULL: all */
} names[] = {{"log", SINK_BIT_LOG, NULL},
             {"tim", SINK_BIT_TIM, NULL},
             {"activity", SINK_BIT_ACTIVITY, NULL},
             {"bus", SINK_BIT_BUS, NULL},
             {"rocket", SINK_BIT_ROCKET, "RoomRocketIgnited"},
             {"wallet", SINK_BIT_WALLET, "RoomGiftSent"}};
#define NNAMES (sizeof(names) / sizeof(names[0]))

_Static_assert(SINK_BITS_ALL == 63, "SINK_BITS_ALL_SQL in sink_bits.h is SINK_BITS_ALL");

const char *
sink_bit_name(uint32_t bit)
{
    for (size_t i = 0; i < NNAMES; i++)
        if (names[i].bit == bit)
            return names[i].name;
    return "";
}

uint32_t
sink_bit_parse(const char *name)
{
    for (size_t i = 0; name != NULL && i < NNAMES; i++)
        if (strcmp(names[i].name, name) == 0)
            return names[i].bit;
    return 0;
}

const char *
sink_bit_names(void)
{
    return "log, tim, activity, bus, rocket, wallet";
}

const char *
sink_bit_event_type(uint32_t bit)
{
    for (size_t i = 0; i < NNAMES; i++)
        if (names[i].bit == bit)
            return names[i].event_type;
    return NULL;
}

bool
sink_bit_carries(uint32_t bit, const char *event_type)
{
    const char *only = sink_bit_event_type(bit);
    return only == NULL || (event_type != NULL && strcmp(only, event_type) == 0);
}
