/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_auth.c: the Authorization path: auth_verify_bearer (header shape,
 * libjwt decode + HS256 verify, claims), auth_admin_ok, and the router's
 * one percent-decoding of the path (http_decode_path).
 */
#include "auth/auth.h"
#include "conf/conf.h"
#include "http/router.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct auth *auth;

static void
open_auth(void)
{
    struct conf *c = calloc(1, sizeof(*c));
    char err[256];

    conf_defaults(c);
    free(c->auth.mode);
    c->auth.mode = strdup("jwt");
    free(c->auth.hs256_secret_env);
    c->auth.hs256_secret_env = strdup("FUZZ_JWT_SECRET");
    free(c->admin.token_env);
    c->admin.token_env = strdup("FUZZ_ADMIN_TOKEN");
    setenv("FUZZ_JWT_SECRET", "fuzz-secret-fuzz-secret-fuzz-secret!", 1);
    setenv("FUZZ_ADMIN_TOKEN", "fuzz-admin-token-fuzz-admin-token", 1);
    if (auth_open(&auth, c, err, sizeof(err)) != 0)
        abort();
    conf_free(c);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 8);
    char path[1024];
    struct auth_principal p;

    if (auth == NULL)
        open_auth();
    memcpy(text, "Bearer ", 7);
    memcpy(text + 7, data, size);
    text[size + 7] = '\0';
    if (auth_verify_bearer(auth, text, &p) == AUTH_OK)
        auth_may_act_as(&p, "app", p.uid + 1);
    auth_verify_bearer(auth, text + 7, &p);
    auth_admin_ok(auth, text);
    http_decode_path(text + 7, path, sizeof(path));
    free(text);
    return 0;
}
