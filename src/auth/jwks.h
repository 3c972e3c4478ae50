/* SPDX-License-Identifier: Apache-2.0 */
/*
 * jwks.h: a JSON Web Key Set (RFC 7517) read into the keys libjwt 1.x takes
 * (the Debian libjwt has no JWKS support of its own): an RSA key (kty RSA,
 * n and e, >= 2048 bits) -> a PEM public key for RS256, an EC P-256 key
 * (kty EC, crv P-256, x and y, on the curve) -> a PEM public key for
 * ES256, a symmetric key (kty oct, k of >= 32 bytes) -> its bytes for
 * HS256. Every key needs a kid (1..127 printable characters, unique in the
 * set); an alg member, when present, must be the one of its kty; a key with
 * "use": "enc" is skipped (identity providers publish encryption keys beside
 * their signing keys). Any other problem refuses the whole set, with an
 * error naming the key (its index and kid), never a key's bytes.
 * Used by auth.c (auth.jwt.jwks_file) only.
 */
#ifndef ROOMD_AUTH_JWKS_H
#define ROOMD_AUTH_JWKS_H

#include <jwt.h>
#include <stddef.h>

#define JWKS_MAX_KEYS 32
#define JWKS_FILE_MAX 262144 /* a larger file is refused */

/* One verification key. */
struct jwk {
    char kid[128];      /* "" for the single key of hs256_secret_* / public_key_file */
    jwt_alg_t alg;      /* the one alg a token verified with it may use */
    unsigned char *key; /* HS256 secret bytes or a NUL-terminated PEM public key */
    int key_len;
};

/* A set of keys; n == 0 = empty. */
struct jwks {
    struct jwk *keys;
    int n;
};

/*
 * Parses the JWKS JSON text[0..len) into *out (owned by the caller, freed
 * with jwks_free). what prefixes every error ("auth.jwt.jwks_file: /etc/..").
 * Returns 0, or ROOMD_EINVAL with err naming the key and *out empty. A set
 * with no usable key is refused. Thread: any; never blocks.
 */
int jwks_parse(const char *text, size_t len, const char *what, struct jwks *out, char *err,
               size_t errlen);

/* Reads file and parses it (jwks_parse; errors start with
 * "auth.jwt.jwks_file: <file>"). Thread: any; blocks on the read. */
int jwks_load(const char *file, struct jwks *out, char *err, size_t errlen);

/* The key of kid, or NULL. Thread: any (the set does not change). */
const struct jwk *jwks_find(const struct jwks *s, const char *kid);

/* Wipes and frees the keys; *s is left empty. NULL keys is a no-op. */
void jwks_free(struct jwks *s);

#endif
