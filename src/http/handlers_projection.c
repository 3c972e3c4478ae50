/* SPDX-License-Identifier: Apache-2.0 */
/*
 * handlers_projection.c: the read models of projection.h over HTTP:
 *   GET /v1/rooms?cursor=N&limit=M     the room list, ranked, paged
 *   GET /v1/users/{uid}/presence       the room a user is in
 * Both answer the projection's JSON as is; a projection that cannot answer
 * (Redis down) is 503. Read docs/http.md for the shapes.
 */
#include "http/router.h"

#include "core/err.h"
#include "projection/projection.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#define LIST_LIMIT_DEFAULT 20
#define LIST_LIMIT_MAX 100

/* A 503 for a projection that cannot answer, else a 500. */
static void
projection_error(struct http_response *resp, int rc)
{
    if (rc == ROOMD_EUNAVAIL)
        http_response_error(resp, 503, "unavailable", "projection: %s", roomd_strerror(rc));
    else
        http_response_error(resp, 500, "internal", "projection: %s", roomd_strerror(rc));
}

void
handle_list_rooms(const struct http_deps *d, const struct http_request *req, const char *app,
                  struct http_response *resp)
{
    const char *cs = http_request_query(req, "cursor");
    const char *ls = http_request_query(req, "limit");
    int64_t cursor = 0, limit = LIST_LIMIT_DEFAULT;
    char *json = NULL;
    int rc;

    /* an empty value ("?cursor=") means the default: the first page */
    if (cs != NULL && cs[0] != '\0' && !http_parse_digits(cs, &cursor)) {
        http_response_field_error(resp, "invalid_argument", "cursor",
                                  "cursor: must be a next_cursor of an earlier page (an integer "
                                  ">= 0)");
        return;
    }
    if (ls != NULL && ls[0] != '\0' &&
        (!http_parse_digits(ls, &limit) || limit < 1 || limit > LIST_LIMIT_MAX)) {
        http_response_field_error(resp, "invalid_argument", "limit",
                                  "limit: must be an integer 1..100");
        return;
    }
    if (d->projection == NULL) {
        http_response_error(resp, 503, "unavailable", "projection: not configured");
        return;
    }
    rc = d->projection->ops->list_rooms(d->projection, app, cursor, (int)limit, &json);
    if (rc != 0 || json == NULL) {
        free(json);
        projection_error(resp, rc != 0 ? rc : ROOMD_EINTERNAL);
        return;
    }
    http_response_take(resp, 200, json);
}

void
handle_presence(const struct http_deps *d, const struct http_request *req,
                const struct auth_principal *p, const char *app, const char *uid_text,
                struct http_response *resp)
{
    int64_t uid = 0;
    char *json = NULL;
    int rc;

    if (!http_acting_uid(d, req, p, app, uid_text, &uid, resp))
        return;
    if (d->projection == NULL) {
        http_response_error(resp, 503, "unavailable", "projection: not configured");
        return;
    }
    rc = d->projection->ops->presence(d->projection, app, uid, &json);
    if (rc != 0 || json == NULL) {
        free(json);
        projection_error(resp, rc != 0 ? rc : ROOMD_EINTERNAL);
        return;
    }
    http_response_take(resp, 200, json);
}
