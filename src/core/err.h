/* SPDX-License-Identifier: Apache-2.0 */
/*
 * err.h: roomd's error codes. Every fallible function returns 0 or one of
 * these negative codes; detail text lives on the object that failed
 * (store_errmsg(), a caller's char err[] buffer). roomd_err_retryable() says
 * which codes are transient and who decides retries by it.
 */
#ifndef ROOMD_ERR_H
#define ROOMD_ERR_H

#include <stdbool.h>

/* X-macro table: name, http status a command answers with, text. */
#define ROOMD_ERR_MAP(X)                                                                           \
    X(ENOMEM, 500, "out of memory")                                                                \
    X(EINVAL, 400, "invalid argument")                                                             \
    X(ENOTFOUND, 404, "not found")                                                                 \
    X(ECONFLICT, 409, "state conflict")                                                            \
    X(EEXIST, 409, "already exists")                                                               \
    X(EREUSED, 409, "idempotency key reused")                                                      \
    X(EFUNDS, 402, "insufficient balance")                                                         \
    X(ERANGE, 409, "the result would overflow")                                                    \
    X(ETOOBIG, 413, "too large")                                                                   \
    X(EUNAVAIL, 503, "dependency unavailable")                                                     \
    X(ETIMEDOUT, 503, "timed out")                                                                 \
    X(EFENCED, 503, "fenced: another owner committed first")                                       \
    X(ENOTOWNER, 503, "room is owned by another node")                                             \
    X(ESTALE, 409, "lost the claim on this row")                                                   \
    X(ERETRY, 503, "temporary failure, retry")                                                     \
    X(EPERM, 400, "permanent failure")                                                             \
    X(EIO, 500, "i/o error")                                                                       \
    X(EINTERNAL, 500, "internal error")                                                            \
    X(ELIMIT, 429, "limit reached")

enum roomd_err {
    ROOMD_OK = 0,
#define X(name, http, text) ROOMD_##name,
    ROOMD_ERR_FIRST_ = -1000,
    ROOMD_ERR_MAP(X)
#undef X
};

/* Returns a static string for rc (0 or a ROOMD_E* code). Thread: any. */
const char *roomd_strerror(int rc);

/* Returns the HTTP status a command answers with for rc (200 for 0). */
int roomd_err_http_status(int rc);

/* Returns the short snake_case code used in JSON error bodies ("not_found").
 * Static string. */
const char *roomd_err_code(int rc);

/* True when the failure is transient and the same operation may succeed if
 * retried later: EUNAVAIL, ETIMEDOUT, ERETRY, EIO, ENOMEM, and the two
 * ownership codes EFENCED and ENOTOWNER (another node, or this one after a
 * new lease, may succeed). Consumer groups (consume/group.c) use it to choose
 * between a redelivery with backoff and a dead letter. The other paths decide
 * by themselves: a command answers every 503 code (EUNAVAIL, ETIMEDOUT,
 * EFENCED, ENOTOWNER, ERETRY) with Retry-After and never retries inside
 * roomd; the outbox worker retries a sink's every failure but EPERM with
 * backoff (publish/sink.h) until outbox_worker.max_retry_count. Thread: any. */
bool roomd_err_retryable(int rc);

#endif
