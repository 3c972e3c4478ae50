/* SPDX-License-Identifier: Apache-2.0 */
/*
 * jwks.c: jwks.h. jansson reads the set; OpenSSL 3 builds each RSA / EC
 * public key from its JWK members (EVP_PKEY_fromdata) and writes it as the
 * PEM that libjwt verifies with; an oct key's k is its HS256 secret.
 */
#include "auth/jwks.h"

#include "core/err.h"
#include "core/file.h"
#include "core/secret.h"
#include "core/xmalloc.h"

#include <jansson.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define B64_MAX 2048 /* decoded bytes of one member (n of an RSA-16384 key) */

/* Decodes base64url (padding optional) s into out[0..max); returns the
 * length or -1 when s is not base64url or too long. */
static int
b64url_decode(const char *s, unsigned char *out, size_t max)
{
    size_t n = strlen(s), o = 0;
    uint32_t acc = 0;
    int bits = 0;

    while (n > 0 && s[n - 1] == '=')
        n--;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int v;
        if (c >= 'A' && c <= 'Z')
            v = c - 'A';
        else if (c >= 'a' && c <= 'z')
            v = c - 'a' + 26;
        else if (c >= '0' && c <= '9')
            v = c - '0' + 52;
        else if (c == '-' || c == '+')
            v = 62;
        else if (c == '_' || c == '/')
            v = 63;
        else
            return -1;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (o >= max)
                return -1;
            out[o++] = (unsigned char)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    if (bits >= 6) /* one character left over: not a whole byte */
        return -1;
    return (int)o;
}

/* A base64url string member of o decoded into out; -1 when absent or bad. */
static int
member_bytes(json_t *o, const char *name, unsigned char *out, size_t max)
{
    const char *s = json_string_value(json_object_get(o, name));

    return s == NULL || s[0] == '\0' ? -1 : b64url_decode(s, out, max);
}

/* Takes pk (freed here) as k's key of alg: a new NUL-terminated PEM
 * (SubjectPublicKeyInfo) in k->key. Returns NULL, or why it failed. */
static const char *
set_pem(struct jwk *k, EVP_PKEY *pk, jwt_alg_t alg)
{
    BIO *bio = BIO_new(BIO_s_mem());
    const char *why = NULL;
    char *data;
    long n;

    if (bio == NULL || PEM_write_bio_PUBKEY(bio, pk) != 1) {
        why = "cannot write the key as PEM";
    } else {
        n = BIO_get_mem_data(bio, &data);
        k->key = xmalloc((size_t)n + 1);
        memcpy(k->key, data, (size_t)n);
        k->key[n] = '\0';
        k->key_len = (int)n;
        k->alg = alg;
    }
    BIO_free(bio);
    EVP_PKEY_free(pk);
    return why;
}

/* EVP_PKEY_fromdata of a public key of type ("RSA" | "EC") from the params
 * that bld holds; NULL when OpenSSL refuses them. */
static EVP_PKEY *
pkey_from(const char *type, OSSL_PARAM_BLD *bld)
{
    OSSL_PARAM *params = OSSL_PARAM_BLD_to_param(bld);
    EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_name(NULL, type, NULL);
    EVP_PKEY *pk = NULL;

    if (params == NULL || ctx == NULL || EVP_PKEY_fromdata_init(ctx) != 1 ||
        EVP_PKEY_fromdata(ctx, &pk, EVP_PKEY_PUBLIC_KEY, params) != 1)
        pk = NULL;
    EVP_PKEY_CTX_free(ctx);
    OSSL_PARAM_free(params);
    return pk;
}

/* Checks pk's public part (an EC point on its curve); frees it when bad. */
static EVP_PKEY *
pkey_checked(EVP_PKEY *pk)
{
    EVP_PKEY_CTX *ctx = pk ? EVP_PKEY_CTX_new_from_pkey(NULL, pk, NULL) : NULL;
    int ok = ctx != NULL && EVP_PKEY_public_check(ctx) == 1;

    EVP_PKEY_CTX_free(ctx);
    if (!ok) {
        EVP_PKEY_free(pk);
        return NULL;
    }
    return pk;
}

static const char *
rsa_key(json_t *o, struct jwk *k)
{
    unsigned char n[B64_MAX], e[16];
    int nl = member_bytes(o, "n", n, sizeof(n)), el = member_bytes(o, "e", e, sizeof(e));
    BIGNUM *bn = NULL, *be = NULL;
    OSSL_PARAM_BLD *bld;
    EVP_PKEY *pk = NULL;

    if (nl <= 0 || el <= 0)
        return "an RSA key needs base64url n and e";
    bn = BN_bin2bn(n, nl, NULL);
    be = BN_bin2bn(e, el, NULL);
    bld = OSSL_PARAM_BLD_new();
    if (bn && be && bld && OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_N, bn) == 1 &&
        OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_E, be) == 1)
        pk = pkey_from("RSA", bld);
    OSSL_PARAM_BLD_free(bld);
    BN_free(bn);
    BN_free(be);
    if (pk == NULL)
        return "OpenSSL refused the RSA key";
    if (EVP_PKEY_bits(pk) < 2048) {
        EVP_PKEY_free(pk);
        return "an RSA key must have at least 2048 bits";
    }
    return set_pem(k, pk, JWT_ALG_RS256);
}

static const char *
ec_key(json_t *o, struct jwk *k)
{
    const char *crv = json_string_value(json_object_get(o, "crv"));
    unsigned char point[65], x[64], y[64];
    int xl = member_bytes(o, "x", x, sizeof(x)), yl = member_bytes(o, "y", y, sizeof(y));
    OSSL_PARAM_BLD *bld;
    EVP_PKEY *pk = NULL;

    if (crv == NULL || strcmp(crv, "P-256") != 0)
        return "an EC key must have crv P-256 (ES256)";
    if (xl != 32 || yl != 32)
        return "an EC P-256 key needs x and y of 32 bytes each";
    point[0] = 0x04; /* uncompressed */
    memcpy(point + 1, x, 32);
    memcpy(point + 33, y, 32);
    bld = OSSL_PARAM_BLD_new();
    if (bld &&
        OSSL_PARAM_BLD_push_utf8_string(bld, OSSL_PKEY_PARAM_GROUP_NAME, "prime256v1", 0) == 1 &&
        OSSL_PARAM_BLD_push_octet_string(bld, OSSL_PKEY_PARAM_PUB_KEY, point, sizeof(point)) == 1)
        pk = pkey_checked(pkey_from("EC", bld));
    OSSL_PARAM_BLD_free(bld);
    if (pk == NULL)
        return "x, y is not a point of P-256";
    return set_pem(k, pk, JWT_ALG_ES256);
}

static const char *
oct_key(json_t *o, struct jwk *k)
{
    unsigned char buf[SECRET_MAX];
    int n = member_bytes(o, "k", buf, sizeof(buf));

    if (n < 0)
        return "an oct key needs a base64url k";
    if (n < SECRET_MIN_BYTES) {
        secret_wipe(buf, sizeof(buf));
        return "an oct (HS256) key must have at least 32 bytes";
    }
    k->key = xmalloc((size_t)n + 1);
    memcpy(k->key, buf, (size_t)n);
    k->key[n] = '\0';
    k->key_len = n;
    k->alg = JWT_ALG_HS256;
    secret_wipe(buf, sizeof(buf));
    return NULL;
}

/* True when kid is 1..127 printable ASCII characters. */
static bool
kid_ok(const char *kid)
{
    size_t n = strlen(kid);

    if (n == 0 || n >= sizeof(((struct jwk *)0)->kid))
        return false;
    for (size_t i = 0; i < n; i++)
        if (kid[i] < 0x21 || kid[i] > 0x7e)
            return false;
    return true;
}

/* One key of the set into *k: NULL, "" (skipped: an encryption key) or why not. */
static const char *
one_key(json_t *o, struct jwk *k)
{
    const char *kty = json_string_value(json_object_get(o, "kty"));
    const char *use = json_string_value(json_object_get(o, "use"));
    const char *alg = json_string_value(json_object_get(o, "alg"));
    const char *why;

    if (!json_is_object(o))
        return "not a JSON object";
    if (json_object_get(o, "use") != NULL && use == NULL)
        return "use is not a string";
    if (use != NULL && strcmp(use, "enc") == 0)
        return "";
    if (use != NULL && strcmp(use, "sig") != 0)
        return "use must be sig";
    if (kty == NULL)
        return "kty is missing";
    if (strcmp(kty, "RSA") == 0)
        why = rsa_key(o, k);
    else if (strcmp(kty, "EC") == 0)
        why = ec_key(o, k);
    else if (strcmp(kty, "oct") == 0)
        why = oct_key(o, k);
    else
        return "kty must be RSA, EC or oct";
    if (why != NULL)
        return why;
    if (json_object_get(o, "alg") != NULL &&
        (alg == NULL || jwt_str_alg(alg) != k->alg || k->alg == JWT_ALG_NONE))
        return "alg does not match the key (RSA: RS256, EC P-256: ES256, oct: HS256)";
    return NULL;
}

static void
free_key(struct jwk *k)
{
    if (k->key != NULL) {
        secret_wipe(k->key, (size_t)k->key_len);
        free(k->key);
    }
    memset(k, 0, sizeof(*k));
}

int
jwks_parse(const char *text, size_t len, const char *what, struct jwks *out, char *err,
           size_t errlen)
{
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    json_t *keys = json_object_get(root, "keys"), *o;
    struct jwks s = {0};
    size_t i;
    int rc = 0;

    out->keys = NULL;
    out->n = 0;
    if (root == NULL) {
        snprintf(err, errlen, "%s: not JSON (line %d: %s)", what, je.line, je.text);
        return ROOMD_EINVAL;
    }
    if (!json_is_array(keys)) {
        snprintf(err, errlen, "%s: not a JWKS: no \"keys\" array", what);
        json_decref(root);
        return ROOMD_EINVAL;
    }
    if (json_array_size(keys) > JWKS_MAX_KEYS) {
        snprintf(err, errlen, "%s: %zu keys; at most %d", what, json_array_size(keys),
                 JWKS_MAX_KEYS);
        json_decref(root);
        return ROOMD_EINVAL;
    }
    s.keys = xcalloc(JWKS_MAX_KEYS, sizeof(*s.keys));
    json_array_foreach(keys, i, o)
    {
        struct jwk k = {0};
        const char *kid = json_string_value(json_object_get(o, "kid"));
        char shown[64];
        const char *why;

        /* the kid as shown in an error: printable, cut */
        snprintf(shown, sizeof(shown), "%s", kid && kid_ok(kid) ? kid : "?");
        why = one_key(o, &k);
        if (why != NULL && why[0] == '\0') { /* an encryption key: not ours */
            free_key(&k);
            continue;
        }
        if (why == NULL && (kid == NULL || !kid_ok(kid)))
            why = "kid must be 1..127 printable characters";
        if (why == NULL && jwks_find(&s, kid) != NULL)
            why = "kid used twice";
        if (why != NULL) {
            snprintf(err, errlen, "%s: keys[%zu] (kid \"%s\"): %s", what, i, shown, why);
            free_key(&k);
            rc = ROOMD_EINVAL;
            break;
        }
        strlcpy_(k.kid, kid, sizeof(k.kid));
        s.keys[s.n++] = k;
    }
    json_decref(root);
    if (rc == 0 && s.n == 0) {
        snprintf(err, errlen, "%s: no signing key in the set", what);
        rc = ROOMD_EINVAL;
    }
    if (rc != 0) {
        jwks_free(&s);
        return rc;
    }
    *out = s;
    return 0;
}

int
jwks_load(const char *file, struct jwks *out, char *err, size_t errlen)
{
    char what[512];
    size_t n;
    char *text;
    int rc;

    out->keys = NULL;
    out->n = 0;
    text = file_read_text("auth.jwt.jwks_file", file, JWKS_FILE_MAX + 1, &n, err, errlen);
    if (text == NULL)
        return ROOMD_EINVAL;
    snprintf(what, sizeof(what), "auth.jwt.jwks_file: %s", file);
    if (n >= JWKS_FILE_MAX) {
        snprintf(err, errlen, "%s: larger than %d bytes", what, JWKS_FILE_MAX);
        rc = ROOMD_EINVAL;
    } else {
        rc = jwks_parse(text, n, what, out, err, errlen);
    }
    secret_wipe(text, n);
    free(text);
    return rc;
}

const struct jwk *
jwks_find(const struct jwks *s, const char *kid)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->keys[i].kid, kid) == 0)
            return &s->keys[i];
    return NULL;
}

void
jwks_free(struct jwks *s)
{
    if (s->keys == NULL)
        return;
    for (int i = 0; i < s->n; i++)
        free_key(&s->keys[i]);
    free(s->keys);
    s->keys = NULL;
    s->n = 0;
}
