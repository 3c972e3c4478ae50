/* SPDX-License-Identifier: Apache-2.0 */
/* err.c: text, HTTP status and JSON code of each ROOMD_E* (see err.h). */
#include "core/err.h"

#include <stddef.h>

struct err_info {
    int rc;
    int http;
    const char *code;
    const char *text;
};

static const struct err_info errs[] = {
#define X(name, status, txt) {ROOMD_##name, status, #name, txt},
    ROOMD_ERR_MAP(X)
#undef X
};

static const struct err_info *
find(int rc)
{
    for (size_t i = 0; i < sizeof(errs) / sizeof(errs[0]); i++)
        if (errs[i].rc == rc)
            return &errs[i];
    return NULL;
}

const char *
roomd_strerror(int rc)
{
    const struct err_info *e;

    if (rc == 0)
        return "ok";
    e = find(rc);
    return e ? e->text : "unknown error";
}

int
roomd_err_http_status(int rc)
{
    const struct err_info *e;

    if (rc == 0)
        return 200;
    e = find(rc);
    return e ? e->http : 500;
}

const char *
roomd_err_code(int rc)
{
    switch (rc) {
    case 0:
        return "ok";
    case ROOMD_ENOMEM:
        return "out_of_memory";
    case ROOMD_EINVAL:
        return "invalid_argument";
    case ROOMD_ENOTFOUND:
        return "not_found";
    case ROOMD_ECONFLICT:
        return "conflict";
    case ROOMD_EEXIST:
        return "already_exists";
    case ROOMD_EREUSED:
        return "idempotency_key_reused";
    case ROOMD_EFUNDS:
        return "insufficient_balance";
    case ROOMD_ERANGE:
        return "out_of_range";
    case ROOMD_ETOOBIG:
        return "payload_too_large";
    case ROOMD_EUNAVAIL:
        return "unavailable";
    case ROOMD_ETIMEDOUT:
        return "timeout";
    case ROOMD_EFENCED:
        return "fenced";
    case ROOMD_ENOTOWNER:
        return "not_owner";
    case ROOMD_ESTALE:
        return "stale";
    case ROOMD_ERETRY:
        return "retry";
    case ROOMD_EPERM:
        return "permanent";
    case ROOMD_EIO:
        return "io_error";
    case ROOMD_ELIMIT:
        return "limit_reached";
    default:
        return "internal";
    }
}

bool
roomd_err_retryable(int rc)
{
    switch (rc) {
    case ROOMD_EUNAVAIL:
    case ROOMD_ETIMEDOUT:
    case ROOMD_ERETRY:
    case ROOMD_EIO:
    case ROOMD_ENOMEM:
    case ROOMD_EFENCED:
    case ROOMD_ENOTOWNER:
        return true;
    default:
        return false;
    }
}
