/* SPDX-License-Identifier: Apache-2.0 */
/*
 * response.c: building struct http_response (router.h): JSON bodies, the
 * error shape {"error":{"code":..,"message":..}} of ARCHITECTURE §6, and
 * extra headers. Bodies are built with jansson so strings are escaped.
 */
#include "http/router.h"

#include "core/xmalloc.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void
http_response_header(struct http_response *r, const char *name, const char *value)
{
    if (r->nheaders >= HTTP_MAX_HEADERS)
        return;
    r->headers[r->nheaders].name = name;
    strlcpy_(r->headers[r->nheaders].value, value, sizeof(r->headers[0].value));
    r->nheaders++;
}

void
http_response_take(struct http_response *r, int status, char *body)
{
    free(r->body);
    r->status = status;
    r->body = body;
    if (status == 503)
        http_response_header(r, "Retry-After", "1");
}

static void
set_error(struct http_response *r, int status, const char *code, const char *field,
          const char *message)
{
    json_t *err = json_pack("{s:s, s:s}", "code", code, "message", message);
    if (field != NULL)
        json_object_set_new(err, "field", json_string(field));
    json_t *root = json_pack("{s:o}", "error", err);
    char *text = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (text == NULL) /* message was not UTF-8: say so without it */
        text = xasprintf("{\"error\":{\"code\":\"%s\",\"message\":\"(not utf-8)\"}}", code);
    http_response_take(r, status, text);
}

void
http_response_error(struct http_response *r, int status, const char *code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    set_error(r, status, code, NULL, msg);
}

void
http_response_field_error(struct http_response *r, const char *code, const char *field,
                          const char *message)
{
    set_error(r, 400, code, field, message);
}

void
http_response_clear(struct http_response *r)
{
    free(r->body);
    memset(r, 0, sizeof(*r));
}
