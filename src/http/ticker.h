/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ticker.h: a thread calling fn(arg) every every_ms until stopped: the
 * readiness refresh (ready.c) and the slow-client watchdog (server.c).
 * Thread: start/stop from one owner thread; fn runs on the ticker's thread.
 */
#ifndef ROOMD_HTTP_TICKER_H
#define ROOMD_HTTP_TICKER_H

#include <stdint.h>

struct ticker;

/* Starts the thread; the first call is immediate. Returns 0 and *out, or
 * ROOMD_ENOMEM when no thread could start. */
int ticker_start(struct ticker **out, int64_t every_ms, void (*fn)(void *), void *arg);
/* Wakes the thread, waits for the call in progress to return, joins and
 * frees. NULL is a no-op. Blocks as long as fn does. */
void ticker_stop(struct ticker *t);

#endif
