/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tim_limit.h: Tencent IM's downstream limits as token buckets (docs/direct.md):
 * tencent_im.rate_limit_per_s calls per second per API and
 * tencent_im.group_rate_limit_per_s messages per second per group. One set of
 * buckets serves the whole process, so the direct IM sink, the IM bridge and
 * the notice consumer of a node share them (each has its own tim_client).
 * A caller reserves the next free slot and sleeps until it: calls are spaced
 * 1/rate apart, with a burst of one. /metrics: roomd_tim_rate_waits_total,
 * roomd_tim_rate_wait_seconds_total, roomd_tim_rate_limited_total.
 */
#ifndef ROOMD_PUBLISH_TIM_LIMIT_H
#define ROOMD_PUBLISH_TIM_LIMIT_H

#include <stdbool.h>
#include <stdint.h>

struct tim_limit;

/* Returns the process' buckets, opening them with these rates on first use
 * (0 = that limit is off); later callers share them (their rates are those of
 * the first). Release with tim_limit_release. Thread: any. */
struct tim_limit *tim_limit_get(int per_api_per_s, int per_group_per_s);
/* Drops one reference; the last frees the buckets. NULL is a no-op. */
void tim_limit_release(struct tim_limit *l);

/*
 * Waits for a slot of api (its short name, "send_group_msg") and, when group
 * is not NULL, of that group. Returns 0 once the call may be made, or
 * ROOMD_ETIMEDOUT without waiting when the slot lies beyond deadline_mono_ms
 * (no slot is then taken). Thread: any; blocks (sleeps) until the slot.
 */
int tim_limit_wait(struct tim_limit *l, const char *api, const char *group,
                   int64_t deadline_mono_ms);

/* Counts one rate-limit answer of IM (roomd_tim_rate_limited_total) and
 * notes its time (tim_limit_refused_within). Thread: any. */
void tim_limit_refused(struct tim_limit *l);

/* True when IM answered a call of this process with its rate limit within
 * the last ms milliseconds (the IM probes call it an outage: see
 * docs/direct.md, "Rate limits cost no attempts"). Thread: any; never blocks. */
bool tim_limit_refused_within(struct tim_limit *l, int64_t ms);

/* Microseconds until group's next free message slot (0 when free now or the
 * group limit is off): the group's messages already waiting for their slot.
 * Takes no slot. Thread: any; never blocks. */
int64_t tim_limit_group_backlog_us(struct tim_limit *l, const char *group);

/* The group bucket's gap between two messages in µs (0 = the limit is off).
 * Thread: any; never blocks. */
int64_t tim_limit_group_gap_us(const struct tim_limit *l);

#endif
