/* SPDX-License-Identifier: Apache-2.0 */
/*
 * throttle.h: failed admin authentications slowed per client address. After
 * an address's n-th failure in a row (a wrong or missing admin token on the
 * admin listener or RoomInternalService) it must wait base x 2^(n-1) (base
 * admin.auth_backoff, 100 ms),
 * at most 10 s, before its next admin request is even checked; a request in
 * that wait is refused (429 rate_limited with Retry-After; gRPC
 * RESOURCE_EXHAUSTED). A success forgets the address. So a guesser gets at
 * most a few tries per 10 s per address instead of thousands per second.
 * Counted: roomd_admin_auth_failures_total, roomd_admin_auth_throttled_total.
 * A table of THROTTLE_SLOTS addresses; the least recently failed one makes
 * room. Thread: any, concurrently; never blocks but on its mutex.
 */
#ifndef ROOMD_AUTH_THROTTLE_H
#define ROOMD_AUTH_THROTTLE_H

#include <stdbool.h>
#include <stdint.h>

struct auth_throttle;

/* A new, empty table with its /metrics collector registered; the caller's
 * (auth_throttle_close). base_ms (admin.auth_backoff) replaces the 100 ms
 * first wait; 0 turns the waits off (failures are still counted). Thread:
 * main. */
struct auth_throttle *auth_throttle_open(int64_t base_ms);
/* Unregisters and frees; NULL is a no-op. Thread: main, after its users stopped. */
void auth_throttle_close(struct auth_throttle *t);
/* How many ms addr must still wait before its admin authentication is
 * checked (0: now); a positive answer counts as a throttled request. t NULL
 * or addr NULL/"" never waits. */
int64_t auth_throttle_wait_ms(struct auth_throttle *t, const char *addr);
/* Records the outcome of an admin authentication from addr (checked after
 * auth_throttle_wait_ms said 0). */
void auth_throttle_result(struct auth_throttle *t, const char *addr, bool ok);

#endif
