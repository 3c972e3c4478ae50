/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check.c: what `roomd --check-config` checks beyond conf_load's rules: that
 * what the config names outside itself exists on this machine. Secrets named
 * by environment variables are set and not empty, files it reads are
 * readable, directories it writes into exist, and servers are URLs of the
 * right scheme. Each problem names its key; no secret text is ever printed.
 */
#include "conf/conf.h"

#include "core/err.h"
#include "core/secret.h"

#include <errno.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct problems {
    char *err;
    size_t len, used;
    int n;
};

static void add(struct problems *p, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
add(struct problems *p, const char *key, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (p->used < p->len) {
        int w =
            snprintf(p->err + p->used, p->len - p->used, "%s%s: %s", p->n ? "\n" : "", key, msg);
        if (w > 0)
            p->used += (size_t)w;
    }
    p->n++;
}

static int
unset(const char *s)
{
    return s == NULL || *s == '\0';
}

/* key names an environment variable that must be set and not empty. */
static void
need_env(struct problems *p, const char *key, const char *var)
{
    const char *v = getenv(var);

    if (v == NULL || *v == '\0')
        add(p, key, "environment variable %s is %s", var, v == NULL ? "not set" : "empty");
}

/* key names a file that must be readable. */
static void
need_file(struct problems *p, const char *key, const char *path)
{
    if (access(path, R_OK) != 0)
        add(p, key, "cannot read %s: %s", path, strerror(errno));
}

/* key names a file roomd creates or appends to: its directory must exist and be writable. */
static void
need_dir_of(struct problems *p, const char *key, const char *path)
{
    char *copy = strdup(path);
    const char *dir = copy ? dirname(copy) : ".";

    if (access(dir, W_OK) != 0)
        add(p, key, "directory %s of %s is not writable: %s", dir, path, strerror(errno));
    free(copy);
}

/* A secret named by env_key (a variable) or file_key (a file), at least
 * SECRET_MIN_BYTES long as start-up wants it (its length is said, never its
 * text); both unset is conf_load's business. */
static void
need_secret(struct problems *p, const char *env_key, const char *var, const char *file_key,
            const char *file, const char *what)
{
    char buf[SECRET_MAX], err[256];
    int n0 = p->n;

    if (!unset(file))
        need_file(p, file_key, file);
    else if (!unset(var))
        need_env(p, env_key, var);
    else
        return;
    if (p->n != n0 ||
        secret_load(env_key, var, file_key, file, buf, sizeof(buf), err, sizeof(err)) != 0)
        return;
    if (strlen(buf) < SECRET_MIN_BYTES)
        add(p, !unset(file) ? file_key : env_key, "%s is %zu bytes: it must be at least %d", what,
            strlen(buf), SECRET_MIN_BYTES);
    secret_wipe(buf, sizeof(buf));
}

/* A listener's TLS pair: both files readable when the certificate is set. */
static void
need_tls_pair(struct problems *p, const char *cert_key, const char *cert, const char *key_key,
              const char *key)
{
    if (unset(cert))
        return;
    need_file(p, cert_key, cert);
    if (!unset(key))
        need_file(p, key_key, key);
}

/* "scheme://host[:port]..." with one of schemes (NULL-terminated). */
static int
url_ok(const char *s, const char *const *schemes)
{
    for (int i = 0; schemes[i] != NULL; i++) {
        size_t n = strlen(schemes[i]);
        if (strncmp(s, schemes[i], n) == 0 && strncmp(s + n, "://", 3) == 0 && s[n + 3] != '\0' &&
            s[n + 3] != '/' && s[n + 3] != ':')
            return 1;
    }
    return 0;
}

int
conf_check_environment(const struct conf *c, char *err, size_t errlen)
{
    static const char *const http_schemes[] = {"https", "http", NULL};
    static const char *const nats_schemes[] = {"nats", "tls", NULL};
    struct problems p = {err, errlen, 0, 0};

    if (errlen > 0)
        err[0] = '\0';
    if (!unset(c->app.log_file))
        need_dir_of(&p, "app.log_file", c->app.log_file);

    if (strcmp(c->store.driver, "sqlite") == 0)
        need_dir_of(&p, "store.sqlite.path", c->store.sqlite.path);
    if (strcmp(c->store.driver, "mysql") == 0 && !unset(c->store.mysql.password_env))
        need_env(&p, "store.mysql.password_env", c->store.mysql.password_env);

    need_tls_pair(&p, "http.tls.cert_file", c->http.tls_cert_file, "http.tls.key_file",
                  c->http.tls_key_file);
    need_tls_pair(&p, "admin.tls.cert_file", c->admin.tls_cert_file, "admin.tls.key_file",
                  c->admin.tls_key_file);
    need_tls_pair(&p, "grpc.tls.cert_file", c->grpc.tls_cert_file, "grpc.tls.key_file",
                  c->grpc.tls_key_file);
    need_secret(&p, "admin.token_env", c->admin.token_env, "admin.token_file", c->admin.token_file,
                "the admin token");
    if (strcmp(c->auth.mode, "jwt") == 0) {
        if (!unset(c->auth.public_key_file))
            need_file(&p, "auth.jwt.public_key_file", c->auth.public_key_file);
        if (!unset(c->auth.jwks_file))
            need_file(&p, "auth.jwt.jwks_file", c->auth.jwks_file);
        need_secret(&p, "auth.jwt.hs256_secret_env", c->auth.hs256_secret_env,
                    "auth.jwt.hs256_secret_file", c->auth.hs256_secret_file, "the HS256 secret");
    }
    /* read by the forwarder, which runs where main.c opens it */
    if (c->cluster.forward && strcmp(c->lease.driver, "redis") == 0 &&
        !unset(c->cluster.tls_ca_file))
        need_file(&p, "cluster.tls_ca_file", c->cluster.tls_ca_file);

    if (c->outbox_worker.enabled && c->outbox_worker.log_sink_enabled &&
        c->outbox_worker.publish_mode != PUBLISH_MQ)
        need_dir_of(&p, "outbox_worker.log_sink.path", c->outbox_worker.log_sink_path);

    if (c->tencent_im.enabled) {
        const struct conf_tencent_im *im = &c->tencent_im;
        if (!url_ok(im->base_url, http_schemes))
            add(&p, "tencent_im.base_url", "\"%s\" is not an http(s):// URL", im->base_url);
        if (!unset(im->secret_key_file))
            need_file(&p, "tencent_im.secret_key_file", im->secret_key_file);
        else if (unset(im->secret_key_env))
            add(&p, "tencent_im.secret_key_env",
                "neither it nor tencent_im.secret_key_file is set");
        else
            need_env(&p, "tencent_im.secret_key_env", im->secret_key_env);
        if (!unset(im->ca_file))
            need_file(&p, "tencent_im.ca_file", im->ca_file);
    }
    if (c->tencent_im.callback_enabled) { /* POST /callbacks/tim: the signature's token */
        const struct conf_tencent_im *im = &c->tencent_im;
        if (!unset(im->callback_token_file))
            need_file(&p, "tencent_im.callback.token_file", im->callback_token_file);
        else if (!unset(im->callback_token_env))
            need_env(&p, "tencent_im.callback.token_env", im->callback_token_env);
    }

    /* the rocketmq driver's host:port name servers are checked by the rules (validate.c) */
    if (c->rocketmq.enabled && conf_rocketmq_driver(&c->rocketmq) == CONF_MQ_JETSTREAM)
        for (int i = 0; i < c->rocketmq.nname_servers; i++)
            if (!url_ok(c->rocketmq.name_servers[i], nats_schemes))
                add(&p, "rocketmq.name_servers", "\"%s\" is not a nats:// (or tls://) URL",
                    c->rocketmq.name_servers[i]);
    return p.n ? ROOMD_EINVAL : 0;
}
