/* SPDX-License-Identifier: Apache-2.0 */
/* sink_names.c: the name of each sinks_done bit (sink.h), the one table of them. */
#include "publish/sink.h"

#include <string.h>

static const struct {
    const char *name;
    uint32_t bit;
} names[] = {{"log", SINK_BIT_LOG},
             {"tim", SINK_BIT_TIM},
             {"activity", SINK_BIT_ACTIVITY},
             {"bus", SINK_BIT_BUS},
             {"rocket", SINK_BIT_ROCKET}};
#define NNAMES (sizeof(names) / sizeof(names[0]))

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
    for (size_t i = 0; i < NNAMES; i++)
        if (strcmp(names[i].name, name) == 0)
            return names[i].bit;
    return 0;
}
