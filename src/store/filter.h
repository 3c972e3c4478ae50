/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store/filter.h: which room_outbox rows an operator means. One filter for
 * every admin operation (list, count, dry run, bulk replay), read from a
 * query string (GET /admin/v1/outbox?status=failed&sink=tim) or a JSON
 * object ({"filter":{"status":"failed","sink":"tim"}}) with the same keys,
 * and turned into one SQL WHERE clause both admin store backends bind.
 *
 *   status         pending | delivering | delivered | retryable | failed
 *   sink           log | tim | activity | bus | rocket: rows it has not delivered
 *   event_id       one row                     event_type, room_id, app: exact
 *   error          substring of last_error (case-sensitive)
 *   created_after, created_before   created_at_ms bounds (ms, inclusive)
 *   failed_after, failed_before     when a failed row failed (its updated_at_ms)
 * Thread: any; pure.
 */
#ifndef ROOMD_STORE_FILTER_H
#define ROOMD_STORE_FILTER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct admin_filter {
    int status;    /* enum outbox_status, -1 = any */
    uint32_t sink; /* SINK_BIT_* the rows lack, 0 = any */
    char event_id[40];
    char event_type[32];
    char room_id[64];
    char app[64];
    char error[128];
    int64_t created_after, created_before; /* 0 = unbounded */
    int64_t failed_after, failed_before;
    bool replayable;   /* set by the replay itself: failed rows only */
    bool not_repaired; /* and none a repair already copied (needs the audit tables) */
};

/* Looks a key up; NULL when absent. */
typedef const char *(*admin_lookup_fn)(void *ctx, const char *key);

/* Sets *f to "every row". */
void admin_filter_init(struct admin_filter *f);

/* Reads the filter keys from lookup (a query string). Returns 0, or -1 with
 * *field the bad key and why[len] the reason ("status: one of pending, ...").
 * Keys it does not know are left for the caller. */
int admin_filter_from_lookup(struct admin_filter *f, admin_lookup_fn lookup, void *ctx,
                             const char **field, char *why, size_t len);

/* Reads a JSON object of filter keys (values strings, times integers). Any
 * other key is an error. Returns 0 or -1 as above. */
int admin_filter_from_json(struct admin_filter *f, const json_t *o, const char **field, char *why,
                           size_t len);

/* The filter as a JSON object of its set keys (for the audit; new reference). */
json_t *admin_filter_to_json(const struct admin_filter *f);

/* One bound parameter of a WHERE clause. */
struct admin_param {
    bool is_text;
    int64_t i;
    const char *s; /* borrowed from the filter */
};

#define ADMIN_MAX_PARAMS 16

/* Appends " AND ..." conditions with '?' placeholders to sql (len bytes) and
 * their values to p[*np..]. Returns 0, or -1 when sql is too small. */
int admin_filter_where(const struct admin_filter *f, char *sql, size_t len, struct admin_param *p,
                       int *np);

#endif
