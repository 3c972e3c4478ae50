/* SPDX-License-Identifier: Apache-2.0 */
/*
 * backoff.h: exponential backoff with jitter for outbox retries.
 * delay(n) = min(max, initial * 2^(n-1)), then "equal jitter": a uniform
 * value in [delay/2, delay]. Thread: any. Never blocks.
 */
#ifndef ROOMD_BACKOFF_H
#define ROOMD_BACKOFF_H

#include <stdint.h>

/* Returns the delay in ms before attempt number retry_count+1, where
 * retry_count >= 1 is the number of failed attempts so far. */
int64_t backoff_delay_ms(int retry_count, int64_t initial_ms, int64_t max_ms);
/* The same without jitter (the upper bound), for tests and docs. */
int64_t backoff_ceiling_ms(int retry_count, int64_t initial_ms, int64_t max_ms);

#endif
