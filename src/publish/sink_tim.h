/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sink_tim.h: the direct Tencent IM sink (SINK_BIT_TIM). CreateRoom's
 * synchronous group creation is tim_create_hook (tim_client.h). The IM actions themselves are
 * tim_client_deliver() (tim_client.h); the event -> IM calls table is in docs/direct.md.
 * With tencent_im.coalesce_after > 0 the sink takes the worker's batches and
 * coalesces a lagging group's state messages (sink_tim.c; docs/direct.md
 * "Coalescing a lagging group"); IM's rate limit is an outage to the worker.
 */
#ifndef ROOMD_SINK_TIM_H
#define ROOMD_SINK_TIM_H

#include <stddef.h>

struct sink;
struct conf_tencent_im;

/* Opens the IM sink with its own client for cfg. Returns 0 and *out (the
 * outbox worker owns it and calls close), or ROOMD_EINVAL with err naming the
 * config key at fault (e.g. the secret key is missing). Adds the coalescing
 * metrics' collector (removed by close). Thread: main; no network I/O. */
int sink_tim_open(struct sink **out, const struct conf_tencent_im *cfg, char *err, size_t errlen);

#endif
