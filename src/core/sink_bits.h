/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sink_bits.h: the sinks_done bits of room_outbox (one per sink of
 * publish/sink.h), the one table of them: each bit's sink name and the one
 * event type the sink is limited to (NULL: every event). The store counts
 * a row against a sink only when the row carries it (sink_bit_carries), the
 * admin filter parses names with it, and the rocket and wallet sinks accept
 * by it. Lowest layer (core): the store reads the bits, the sinks set them.
 * Thread: any; pure.
 */
#ifndef ROOMD_CORE_SINK_BITS_H
#define ROOMD_CORE_SINK_BITS_H

#include <stdbool.h>
#include <stdint.h>

/* Stable bit per sink, stored in room_outbox.sinks_done. Never renumber. */
#define SINK_BIT_LOG (1u << 0)
#define SINK_BIT_TIM (1u << 1)
#define SINK_BIT_ACTIVITY (1u << 2)
#define SINK_BIT_BUS (1u << 3)
#define SINK_BIT_ROCKET (1u << 4)
#define SINK_BIT_WALLET (1u << 5)
/* Every bit above: a new sink adds its bit here and its row in
 * sink_bits.c (a unit test walks every bit both ways). */
#define SINK_BITS_ALL                                                                              \
    (SINK_BIT_LOG | SINK_BIT_TIM | SINK_BIT_ACTIVITY | SINK_BIT_BUS | SINK_BIT_ROCKET |            \
     SINK_BIT_WALLET)

/* SINK_BITS_ALL as SQL text: the stores' ordered claims compute which
 * sinks a row still lacks in SQL (63 & ~sinks_done; sink_bits.c checks it
 * equals SINK_BITS_ALL). */
#define SINK_BITS_ALL_SQL "63"

/* The sink name of a bit ("log", "tim", "activity", "bus", "rocket",
 * "wallet"; "" for another), and back (0 for an unknown name). The names
 * are the sinks' struct sink.name. */
const char *sink_bit_name(uint32_t bit);
uint32_t sink_bit_parse(const char *name);
/* "log, tim, activity, bus, rocket, wallet" (static), for error texts. */
const char *sink_bit_names(void);
/* The one event type sink bit is limited to ("RoomRocketIgnited" for the
 * rocket sink, "RoomGiftSent" for the wallet's Confirm), NULL when it takes
 * every event (or bit is not a sink's). */
const char *sink_bit_event_type(uint32_t bit);
/* True when a row of event_type is one sink bit delivers (its accepts). */
bool sink_bit_carries(uint32_t bit, const char *event_type);

#endif
