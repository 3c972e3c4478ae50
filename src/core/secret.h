/* SPDX-License-Identifier: Apache-2.0 */
/*
 * secret.h: reading a secret that the configuration names by an environment
 * variable ("*_env" keys) or a file ("*_file" keys): the Tencent IM key, the
 * JWT HS256 secret, the admin token. Errors name the config key, never the
 * secret. Thread: any; blocks on the file read.
 */
#ifndef ROOMD_CORE_SECRET_H
#define ROOMD_CORE_SECRET_H

#include <stddef.h>

/* The shortest admin token and HS256 secret accepted (at start and by
 * --check-config): 32 bytes, 256 bits. */
#define SECRET_MIN_BYTES 32
#define SECRET_MAX 4096 /* a buffer for one (HS256 secret, admin token) */

/*
 * Reads the secret from the variable named env (when env is non-empty and the
 * variable is set and not empty), else from file (when non-empty), into buf
 * (len bytes, NUL-terminated), trailing whitespace trimmed. env_key/file_key
 * are the config keys for messages ("tencent_im.secret_key_env"). Returns 0,
 * or ROOMD_EINVAL with err ("auth.jwt.hs256_secret_env: $X is not set and no
 * auth.jwt.hs256_secret_file is set"; no secret text in it).
 */
int secret_load(const char *env_key, const char *env, const char *file_key, const char *file,
                char *buf, size_t len, char *err, size_t errlen);

/*
 * Copies in to out (outlen bytes, always NUL-terminated, truncated to fit)
 * with secrets masked as "***": the password of a URL's userinfo
 * ("nats://user:***@host"; a userinfo without ':' is a token: "nats://" "***@h")
 * and the value of the parameters usersig=, password=, secret=, token=,
 * access_token= and passwd=. The log (core/log.c) passes every line through
 * it. Returns the length written. Thread: any; never blocks.
 */
size_t secret_redact(const char *in, char *out, size_t outlen);

/* Overwrites n bytes of p with zeros in a way the compiler keeps. */
void secret_wipe(void *p, size_t n);
/* Wipes the NUL-terminated secret s (secret_wipe) and frees it. NULL is a
 * no-op. Thread: s's owner. */
void secret_free(char *s);

#endif
