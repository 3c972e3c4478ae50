/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tim_gate.h: CreateRoom's synchronous IM group creation behind a circuit
 * (issue 26; seed 阶段耗时日志 tencent_im_ms). The room service's create hook
 * (room_create_hook, room/service.h) is tim_gate_hook with a struct tim_gate:
 * it calls tim_create_hook (EnsureGroup within tencent_im.timeout) while IM
 * answers; after outbox_worker.circuit_failures calls in a row without an
 * answer (a timeout, a transport failure) it skips the call,
 * counts it (roomd_im_create_skipped_total) and logs once per opening, and
 * lets one call through per outbox_worker.circuit_probe_every to see whether
 * IM answers again. A skipped group is created later by the outbox's
 * RoomCreated EnsureGroup (docs/direct.md).
 */
#ifndef ROOMD_TIM_GATE_H
#define ROOMD_TIM_GATE_H

#include <stdint.h>

struct tim_client;
struct tim_gate;

/* Opens the gate around tim (borrowed; must outlive the gate). failures and probe_ms as
 * outbox_worker.circuit_failures / circuit_probe_every. Adds the metrics
 * collector. Returns the gate (tim_gate_close frees it). Thread: main. */
struct tim_gate *tim_gate_open(struct tim_client *tim, int failures, int64_t probe_ms);

/* room_create_hook: arg is the struct tim_gate. Returns 0, the IM error, or
 * ROOMD_EUNAVAIL at once when the circuit is open (skipped). Thread: any;
 * blocks up to tencent_im.timeout when it calls IM. */
int tim_gate_hook(void *arg, const char *app, const char *room_id, const char *title,
                  int64_t owner_uid);

/* Removes the collector and frees g (NULL: no-op). Thread: main, after the
 * room service stopped. */
void tim_gate_close(struct tim_gate *g);

#endif
