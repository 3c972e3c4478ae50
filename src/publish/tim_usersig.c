/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tim_usersig.c: UserSig v2 (tim_usersig.h). HMAC-SHA256 via OpenSSL HMAC(),
 * zlib compress2 / inflate, base64 with "+", "/", "=" replaced by "*", "-",
 * "_". The JSON document is built and parsed with jansson. Read tim_client.c
 * next.
 */
#include "publish/tim_usersig.h"

#include "core/err.h"
#include "core/xmalloc.h"

#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define USERSIG_MAX_DOC 4096 /* an inflated document is a few hundred bytes */

/* Standard base64 of in[0..n) into a malloc'd string. */
static char *
b64_encode(const unsigned char *in, size_t n)
{
    char *out = xmalloc(4 * ((n + 2) / 3) + 1);

    EVP_EncodeBlock((unsigned char *)out, in, (int)n);
    return out;
}

/* Decodes standard base64 (padding required) into a malloc'd buffer. Returns
 * 0 and *out and *outlen, or -1. */
static int
b64_decode(const char *in, unsigned char **out, size_t *outlen)
{
    size_t n = strlen(in), pad = 0;
    unsigned char *buf;
    int got;

    if (n == 0 || n % 4 != 0)
        return -1;
    if (in[n - 1] == '=')
        pad++;
    if (in[n - 2] == '=')
        pad++;
    buf = xmalloc(n / 4 * 3 + 1);
    got = EVP_DecodeBlock(buf, (const unsigned char *)in, (int)n);
    if (got < 0 || (size_t)got < pad) {
        free(buf);
        return -1;
    }
    *out = buf;
    *outlen = (size_t)got - pad; /* EVP_DecodeBlock counts the padding as zero bytes */
    return 0;
}

int
tim_usersig_hmac(const char *key, const char *identifier, int64_t sdkappid, int64_t time,
                 int64_t expire, char *out, size_t outlen)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    char *text, *b64;
    int rc = 0;

    text = xasprintf("TLS.identifier:%s\nTLS.sdkappid:%lld\nTLS.time:%lld\nTLS.expire:%lld\n",
                     identifier, (long long)sdkappid, (long long)time, (long long)expire);
    if (HMAC(EVP_sha256(), key, (int)strlen(key), (const unsigned char *)text, strlen(text), md,
             &mdlen) == NULL) {
        rc = ROOMD_EINTERNAL;
        goto out;
    }
    b64 = b64_encode(md, mdlen);
    if (strlen(b64) >= outlen)
        rc = ROOMD_ETOOBIG;
    else
        memcpy(out, b64, strlen(b64) + 1);
    free(b64);
out:
    OPENSSL_cleanse(md, sizeof(md));
    free(text);
    return rc;
}

int
tim_usersig_gen(const char *key, int64_t sdkappid, const char *identifier, int64_t now,
                int64_t expire, char **out)
{
    char sig[64];
    json_t *doc = NULL;
    char *text = NULL, *b64 = NULL;
    unsigned char *z = NULL;
    uLongf zlen;
    int rc;

    *out = NULL;
    if (key == NULL || key[0] == '\0' || identifier == NULL || identifier[0] == '\0' || expire <= 0)
        return ROOMD_EINVAL;
    if ((rc = tim_usersig_hmac(key, identifier, sdkappid, now, expire, sig, sizeof(sig))) != 0)
        return rc;
    doc = json_pack("{s:s, s:s, s:I, s:I, s:I, s:s}", "TLS.ver", "2.0", "TLS.identifier",
                    identifier, "TLS.sdkappid", (json_int_t)sdkappid, "TLS.expire",
                    (json_int_t)expire, "TLS.time", (json_int_t)now, "TLS.sig", sig);
    if (doc == NULL || (text = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER)) == NULL) {
        rc = ROOMD_EINTERNAL;
        goto out;
    }
    zlen = compressBound(strlen(text));
    z = xmalloc(zlen);
    if (compress2(z, &zlen, (const Bytef *)text, strlen(text), Z_BEST_COMPRESSION) != Z_OK) {
        rc = ROOMD_EINTERNAL;
        goto out;
    }
    b64 = b64_encode(z, zlen);
    for (char *p = b64; *p; p++) {
        if (*p == '+')
            *p = '*';
        else if (*p == '/')
            *p = '-';
        else if (*p == '=')
            *p = '_';
    }
    *out = b64;
    b64 = NULL;
out:
    free(b64);
    free(z);
    free(text);
    json_decref(doc);
    return rc;
}

/* Inflates in[0..n) (zlib format) into a NUL-terminated malloc'd string of
 * at most USERSIG_MAX_DOC bytes. Returns 0 or -1. */
static int
inflate_doc(const unsigned char *in, size_t n, char **out)
{
    z_stream zs;
    char *buf = xmalloc(USERSIG_MAX_DOC + 1);
    int zrc;

    memset(&zs, 0, sizeof(zs));
    if (inflateInit(&zs) != Z_OK) {
        free(buf);
        return -1;
    }
    zs.next_in = (Bytef *)in;
    zs.avail_in = (uInt)n;
    zs.next_out = (Bytef *)buf;
    zs.avail_out = USERSIG_MAX_DOC;
    zrc = inflate(&zs, Z_FINISH);
    inflateEnd(&zs);
    if (zrc != Z_STREAM_END) {
        free(buf);
        return -1;
    }
    buf[zs.total_out] = '\0';
    *out = buf;
    return 0;
}

/* Reads the integer member name of object j. Returns 0 or -1. */
static int
get_int(json_t *j, const char *name, int64_t *out)
{
    json_t *v = json_object_get(j, name);

    if (!json_is_integer(v))
        return -1;
    *out = json_integer_value(v);
    return 0;
}

int
tim_usersig_decode(const char *usersig, struct tim_usersig_doc *doc, char *err, size_t errlen)
{
    char *b64 = xstrdup(usersig), *text = NULL;
    unsigned char *z = NULL;
    size_t zlen = 0;
    json_t *j = NULL, *v;
    json_error_t jerr;
    int rc = ROOMD_EINVAL;

    memset(doc, 0, sizeof(*doc));
    for (char *p = b64; *p; p++) {
        if (*p == '*')
            *p = '+';
        else if (*p == '-')
            *p = '/';
        else if (*p == '_')
            *p = '=';
    }
    if (b64_decode(b64, &z, &zlen) != 0) {
        snprintf(err, errlen, "usersig: not base64");
        goto out;
    }
    if (inflate_doc(z, zlen, &text) != 0) {
        snprintf(err, errlen, "usersig: not a zlib stream");
        goto out;
    }
    if ((j = json_loads(text, 0, &jerr)) == NULL || !json_is_object(j)) {
        snprintf(err, errlen, "usersig: not a JSON object");
        goto out;
    }
    v = json_object_get(j, "TLS.ver");
    if (!json_is_string(v) || strlen(json_string_value(v)) >= sizeof(doc->ver)) {
        snprintf(err, errlen, "usersig: TLS.ver missing");
        goto out;
    }
    strcpy(doc->ver, json_string_value(v));
    v = json_object_get(j, "TLS.identifier");
    if (!json_is_string(v) || strlen(json_string_value(v)) >= sizeof(doc->identifier)) {
        snprintf(err, errlen, "usersig: TLS.identifier missing");
        goto out;
    }
    strcpy(doc->identifier, json_string_value(v));
    v = json_object_get(j, "TLS.sig");
    if (!json_is_string(v) || strlen(json_string_value(v)) >= sizeof(doc->sig)) {
        snprintf(err, errlen, "usersig: TLS.sig missing");
        goto out;
    }
    strcpy(doc->sig, json_string_value(v));
    if (get_int(j, "TLS.sdkappid", &doc->sdkappid) != 0 ||
        get_int(j, "TLS.time", &doc->time) != 0 || get_int(j, "TLS.expire", &doc->expire) != 0) {
        snprintf(err, errlen, "usersig: TLS.sdkappid, TLS.time or TLS.expire missing");
        goto out;
    }
    rc = 0;
out:
    json_decref(j);
    free(text);
    free(z);
    free(b64);
    return rc;
}

int
tim_usersig_verify(const char *usersig, const char *key, int64_t sdkappid, const char *identifier,
                   int64_t now, char *err, size_t errlen)
{
    struct tim_usersig_doc doc;
    char want[64];
    int rc;

    if ((rc = tim_usersig_decode(usersig, &doc, err, errlen)) != 0)
        return rc;
    if (strcmp(doc.ver, "2.0") != 0) {
        snprintf(err, errlen, "usersig: version %s, want 2.0", doc.ver);
        return ROOMD_EINVAL;
    }
    if (doc.sdkappid != sdkappid) {
        snprintf(err, errlen, "usersig: sdkappid %lld, want %lld", (long long)doc.sdkappid,
                 (long long)sdkappid);
        return ROOMD_EINVAL;
    }
    if (strcmp(doc.identifier, identifier) != 0) {
        snprintf(err, errlen, "usersig: identifier mismatch");
        return ROOMD_EINVAL;
    }
    if (now > doc.time + doc.expire) {
        snprintf(err, errlen, "usersig: expired at %lld", (long long)(doc.time + doc.expire));
        return ROOMD_ETIMEDOUT;
    }
    if ((rc = tim_usersig_hmac(key, doc.identifier, doc.sdkappid, doc.time, doc.expire, want,
                               sizeof(want))) != 0) {
        snprintf(err, errlen, "usersig: cannot compute the HMAC");
        return rc;
    }
    if (strcmp(want, doc.sig) != 0) {
        snprintf(err, errlen, "usersig: signature mismatch");
        return ROOMD_EINVAL;
    }
    return 0;
}

/* ---- cache ----------------------------------------------------------------- */

int
tim_usersig_cache_init(struct tim_usersig_cache *c, const char *key, int64_t sdkappid,
                       const char *identifier, int64_t ttl_s)
{
    memset(c, 0, sizeof(*c));
    if (key == NULL || key[0] == '\0' || identifier == NULL ||
        strlen(identifier) >= sizeof(c->identifier) || identifier[0] == '\0' || ttl_s < 1)
        return ROOMD_EINVAL;
    pthread_mutex_init(&c->mu, NULL);
    c->key = xstrdup(key);
    c->sdkappid = sdkappid;
    strcpy(c->identifier, identifier);
    c->ttl_s = ttl_s;
    return 0;
}

static void
drop_key(char *key)
{
    if (key != NULL) {
        OPENSSL_cleanse(key, strlen(key));
        free(key);
    }
}

void
tim_usersig_cache_set_key(struct tim_usersig_cache *c, const char *key)
{
    pthread_mutex_lock(&c->mu);
    drop_key(c->key);
    c->key = xstrdup(key);
    free(c->sig);
    c->sig = NULL;
    pthread_mutex_unlock(&c->mu);
}

/* Seconds before expiry at which the sig is renewed. */
static int64_t
renew_margin(int64_t ttl_s)
{
    int64_t m = ttl_s / 10;

    if (m < 100)
        m = 100;
    if (m > 3600)
        m = 3600;
    if (m >= ttl_s)
        m = ttl_s / 2;
    return m;
}

int
tim_usersig_cache_get(struct tim_usersig_cache *c, int64_t now, char *buf, size_t len,
                      unsigned *gen)
{
    int rc = 0;

    pthread_mutex_lock(&c->mu);
    if (c->sig == NULL || now < c->made_at ||
        now >= c->made_at + c->ttl_s - renew_margin(c->ttl_s)) {
        char *sig = NULL;
        if ((rc = tim_usersig_gen(c->key, c->sdkappid, c->identifier, now, c->ttl_s, &sig)) != 0)
            goto out;
        free(c->sig);
        c->sig = sig;
        c->made_at = now;
        c->generation++;
    }
    if (strlen(c->sig) >= len) {
        rc = ROOMD_ETOOBIG;
        goto out;
    }
    strcpy(buf, c->sig);
    if (gen != NULL)
        *gen = c->generation;
out:
    pthread_mutex_unlock(&c->mu);
    return rc;
}

void
tim_usersig_cache_invalidate(struct tim_usersig_cache *c, unsigned gen)
{
    pthread_mutex_lock(&c->mu);
    if (c->generation == gen) {
        free(c->sig);
        c->sig = NULL;
    }
    pthread_mutex_unlock(&c->mu);
}

void
tim_usersig_cache_destroy(struct tim_usersig_cache *c)
{
    if (c->key == NULL)
        return;
    drop_key(c->key);
    c->key = NULL;
    free(c->sig);
    c->sig = NULL;
    pthread_mutex_destroy(&c->mu);
}
