/* SPDX-License-Identifier: Apache-2.0 */
/*
 * secret.c: secret_load (secret.h): one place that reads a secret from an
 * environment variable or a file, so every secret has the same rules.
 */
#include "core/secret.h"

#include "core/err.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int
read_file(const char *file_key, const char *file, char *buf, size_t len, char *err, size_t errlen)
{
    FILE *f = fopen(file, "r");
    size_t n;
    int more;

    if (f == NULL) {
        snprintf(err, errlen, "%s: cannot open %s", file_key, file);
        return ROOMD_EINVAL;
    }
    n = fread(buf, 1, len - 1, f);
    more = fgetc(f) != EOF;
    fclose(f);
    buf[n] = '\0';
    if (more) {
        snprintf(err, errlen, "%s: %s is longer than %zu bytes", file_key, file, len - 1);
        return ROOMD_EINVAL;
    }
    return 0;
}

int
secret_load(const char *env_key, const char *env, const char *file_key, const char *file, char *buf,
            size_t len, char *err, size_t errlen)
{
    const char *v = (env && env[0]) ? getenv(env) : NULL;
    size_t n;
    int rc;

    buf[0] = '\0';
    if (v != NULL && v[0] != '\0') {
        if (strlen(v) >= len) {
            snprintf(err, errlen, "%s: $%s is longer than %zu bytes", env_key, env, len - 1);
            return ROOMD_EINVAL;
        }
        strcpy(buf, v);
    } else if (file && file[0]) {
        if ((rc = read_file(file_key, file, buf, len, err, errlen)) != 0)
            return rc;
    } else {
        snprintf(err, errlen, "%s: %s%s is not set and no %s is set", env_key,
                 env && env[0] ? "$" : "", env && env[0] ? env : "(empty)", file_key);
        return ROOMD_EINVAL;
    }
    n = strlen(buf);
    while (n > 0 &&
           (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' || buf[n - 1] == '\t'))
        buf[--n] = '\0';
    if (n == 0) {
        snprintf(err, errlen, "%s: the secret is empty", env && env[0] ? env_key : file_key);
        return ROOMD_EINVAL;
    }
    return 0;
}

void
secret_wipe(void *p, size_t n)
{
    volatile unsigned char *q = p;

    while (n-- > 0)
        *q++ = 0;
}

void
secret_free(char *s)
{
    if (s != NULL)
        secret_wipe(s, strlen(s));
    free(s);
}

/* Parameter names whose value is a secret (matched case-insensitively, after
 * a non-alphanumeric byte, followed by '='). */
static const char *const secret_params[] = {"usersig",      "password", "passwd", "secret",
                                            "access_token", "token",    NULL};

static bool
is_word_byte(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* Ends a URL's userinfo, a parameter value. */
static bool
is_stop(char c)
{
    return c == '\0' || c == ' ' || c == '"' || c == '\'' || c == '&' || c == '\n' || c == '\t' ||
           c == ',' || c == ';';
}

/* Length of the secret parameter name at in[i] ("password" of "password=x"),
 * 0 when there is none. */
static size_t
param_at(const char *in, size_t i)
{
    if (i > 0 && is_word_byte(in[i - 1]))
        return 0;
    for (int k = 0; secret_params[k] != NULL; k++) {
        size_t n = strlen(secret_params[k]);
        if (strncasecmp(in + i, secret_params[k], n) == 0 && in[i + n] == '=')
            return n;
    }
    return 0;
}

/* Length of a URL userinfo at in[i] (just after "://") up to and without
 * its '@', or 0 when the authority has none. */
static size_t
userinfo_at(const char *in, size_t i)
{
    size_t j = i;

    while (!is_stop(in[j]) && in[j] != '/' && in[j] != '@' && in[j] != '?' && in[j] != '#')
        j++;
    return in[j] == '@' ? j - i : 0;
}

size_t
secret_redact(const char *in, char *out, size_t outlen)
{
    size_t i = 0, o = 0, n;

    if (outlen == 0)
        return 0;
#define PUT(c)                                                                                     \
    do {                                                                                           \
        if (o + 1 < outlen)                                                                        \
            out[o++] = (c);                                                                        \
    } while (0)
    while (in[i] != '\0') {
        if (strncmp(in + i, "://", 3) == 0 && (n = userinfo_at(in, i + 3)) > 0) {
            const char *colon = memchr(in + i + 3, ':', n);
            size_t keep = colon ? (size_t)(colon - (in + i)) + 1 : 3; /* "://user:" or "://" */
            for (size_t k = 0; k < keep; k++)
                PUT(in[i + k]);
            PUT('*');
            PUT('*');
            PUT('*');
            i += 3 + n; /* at the '@' */
            continue;
        }
        if ((n = param_at(in, i)) > 0) {
            for (size_t k = 0; k <= n; k++) /* the name and '=' */
                PUT(in[i + k]);
            i += n + 1;
            if (!is_stop(in[i])) {
                PUT('*');
                PUT('*');
                PUT('*');
            }
            while (!is_stop(in[i]))
                i++;
            continue;
        }
        PUT(in[i]);
        i++;
    }
#undef PUT
    out[o] = '\0';
    return o;
}
