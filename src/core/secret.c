/*
 * secret.c: secret_load (secret.h): one place that reads a secret from an
 * environment variable or a file, so every secret has the same rules.
 */
#include "core/secret.h"

#include "core/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
