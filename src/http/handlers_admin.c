/* SPDX-License-Identifier: Apache-2.0 */
/*
 * handlers_admin.c: the admin API and the web console on the admin listener
 * (admin/http.h holds the routes): the router calls handle_admin first for
 * every request of admin.listen. API calls need the admin token (and a POST
 * Content-Type application/json, else 415) and are audited under its name;
 * console files need none (they hold no data).
 */
#include "http/router.h"

#include "admin/http.h"
#include "auth/auth.h"
#include "core/log.h"

#include <stdio.h>
#include <string.h>

/* The query lookup of store/filter.h over the request's query string. */
static const char *
query(void *ctx, const char *key)
{
    return http_request_query(ctx, key);
}

bool
handle_admin(const struct http_deps *d, const struct http_request *req, const char *path,
             struct http_response *resp)
{
    struct admin_http_reply out;
    struct auth_principal p;
    bool console = admin_http_is_console(path);

    if (!console && strncmp(path, "/admin/", 7) != 0)
        return false;
    if (console)
        snprintf(p.admin_name, sizeof(p.admin_name), "-");
    else if (!http_authenticate_admin(d, req, &p, resp) || !http_write_is_json(req, resp))
        return true;
    /* the caller's name (admin.tokens, or "admin") goes into the audit */
    if (!admin_http_route(d->admin, req->method, path, query, (void *)req, req->body, req->body_len,
                          p.admin_name, &out)) {
        http_response_error(resp, 404, "not_found", "no route %s %s", req->method, path);
        return true;
    }
    if (!console && strcmp(req->method, "GET") != 0 && strcmp(req->method, "HEAD") != 0)
        log_info("admin", "admin call", "caller=%s method=%s path=%s status=%d", p.admin_name,
                 req->method, path, out.r.status);
    http_response_take(resp, out.r.status, out.r.body);
    resp->content_type = out.content_type;
    if (out.allow != NULL)
        http_response_header(resp, "Allow", out.allow);
    return true;
}
