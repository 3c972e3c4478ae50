/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_auth.c: the Authorization path: auth_verify_bearer (header shape,
 * libjwt decode + HS256 verify, claims), auth_admin_ok, and the router's
 * one percent-decoding of the path (http_decode_path). The same input is
 * also read as a JWKS (auth_jwks_parse_check: jansson, base64url, OpenSSL's
 * RSA / EC key building) and verified as a token by a verifier whose keys
 * come from a JWKS file (the kid lookup).
 */
#include "auth/auth.h"
#include "conf/conf.h"
#include "http/router.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct auth *auth;
static struct auth *auth_jwks; /* auth.jwt.jwks_file: two oct keys, kid "a" and "b" */

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
    /* the same with a JWKS */
    char path[] = "/tmp/fuzz_auth_jwks_XXXXXX";
    int fd = mkstemp(path);
    static const char jwks[] = "{\"keys\":[{\"kty\":\"oct\",\"kid\":\"a\",\"alg\":\"HS256\","
                               "\"k\":\"ZnV6ei1zZWNyZXQtZnV6ei1zZWNyZXQtZnV6ei1zZWNyZXQh\"},"
                               "{\"kty\":\"oct\",\"kid\":\"b\",\"k\":"
                               "\"YW5vdGhlci1zZWNyZXQtYW5vdGhlci1zZWNyZXQtYW5vdGhlciE\"}]}";
    if (fd < 0 || write(fd, jwks, sizeof(jwks) - 1) != (ssize_t)(sizeof(jwks) - 1))
        abort();
    close(fd);
    free(c->auth.hs256_secret_env);
    c->auth.hs256_secret_env = strdup("");
    free(c->auth.jwks_file);
    c->auth.jwks_file = strdup(path);
    c->auth.jwks_poll_ms = 0;
    if (auth_open(&auth_jwks, c, err, sizeof(err)) != 0)
        abort();
    unlink(path);
    conf_free(c);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 8);
    char path[1024], err[512];
    struct auth_principal p;
    int nkeys = 0;

    if (auth == NULL)
        open_auth();
    memcpy(text, "Bearer ", 7);
    memcpy(text + 7, data, size);
    text[size + 7] = '\0';
    if (auth_verify_bearer(auth, text, &p) == AUTH_OK)
        auth_may_act_as(&p, "app", p.uid + 1);
    auth_verify_bearer(auth, text + 7, &p);
    auth_verify_bearer(auth_jwks, text, &p);
    auth_jwks_parse_check((const char *)data, size, &nkeys, err, sizeof(err));
    auth_admin_ok(auth, text);
    http_decode_path(text + 7, path, sizeof(path));
    free(text);
    return 0;
}
