/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tim_usersig.h: Tencent IM UserSig v2 (TLS-Sig-API v2, HMAC-SHA256), as
 * shared/design/tencent-im-rest.md §2 specifies: generation, verification
 * (decode, inflate, parse, check, recompute), and a cache that renews the
 * admin's sig before it expires. The REST client (tim_client.c) is the user.
 *
 * The secret key is never logged nor copied into an error text.
 */
#ifndef ROOMD_TIM_USERSIG_H
#define ROOMD_TIM_USERSIG_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define TIM_USERSIG_ID_MAX 128

/* The fields of a decoded UserSig document. */
struct tim_usersig_doc {
    char ver[8]; /* "2.0" */
    char identifier[TIM_USERSIG_ID_MAX];
    int64_t sdkappid;
    int64_t time;   /* unix seconds it was made */
    int64_t expire; /* validity in seconds */
    char sig[64];   /* standard base64 of the HMAC-SHA256 */
};

/* Computes TLS.sig: standard base64 of HMAC-SHA256(key, the 4-line string to
 * sign) into out (>= 45 bytes). Returns 0 or ROOMD_EINTERNAL. Thread: any. */
int tim_usersig_hmac(const char *key, const char *identifier, int64_t sdkappid, int64_t time,
                     int64_t expire, char *out, size_t outlen);

/* Generates a UserSig made at unix second now, valid expire seconds.
 * Returns 0 and *out (malloc'd, caller frees), or ROOMD_EINVAL / ROOMD_EINTERNAL.
 * Thread: any. Never blocks. */
int tim_usersig_gen(const char *key, int64_t sdkappid, const char *identifier, int64_t now,
                    int64_t expire, char **out);

/* Decodes usersig (reverses * - _, base64, inflate, parses the JSON) into *doc
 * without checking it. Returns 0 or ROOMD_EINVAL with a reason in err. */
int tim_usersig_decode(const char *usersig, struct tim_usersig_doc *doc, char *err, size_t errlen);

/* Verifies usersig as the Go SDK's VerifyUserSig does: decode, check sdkappid
 * and identifier, reject when now > time + expire, recompute the HMAC with
 * key and compare. Returns 0, or ROOMD_EINVAL (malformed / mismatch / bad
 * sig) or ROOMD_ETIMEDOUT (expired) with a reason in err. Thread: any. */
int tim_usersig_verify(const char *usersig, const char *key, int64_t sdkappid,
                       const char *identifier, int64_t now, char *err, size_t errlen);

/* A cached admin UserSig, renewed when less than a tenth of its validity (at
 * least 100 s, at most 1 h) is left, or when invalidated. */
struct tim_usersig_cache {
    pthread_mutex_t mu;
    char *key; /* owned; replaced by tim_usersig_cache_set_key */
    int64_t sdkappid;
    char identifier[TIM_USERSIG_ID_MAX];
    int64_t ttl_s;
    char *sig;           /* current sig or NULL */
    int64_t made_at;     /* unix seconds */
    unsigned generation; /* bumped at each regeneration */
};

/* Initializes c with a copy of key. ttl_s >= 1. Returns 0 or ROOMD_EINVAL. */
int tim_usersig_cache_init(struct tim_usersig_cache *c, const char *key, int64_t sdkappid,
                           const char *identifier, int64_t ttl_s);
/* Replaces the key (rotation) and drops the cached sig. Thread: any. */
void tim_usersig_cache_set_key(struct tim_usersig_cache *c, const char *key);
/* Copies a valid sig into buf (renewing it when due) and its generation into
 * *gen (may be NULL). Returns 0, ROOMD_ETOOBIG (buf too small) or
 * ROOMD_EINTERNAL. Thread: any; takes a mutex, never blocks otherwise. */
int tim_usersig_cache_get(struct tim_usersig_cache *c, int64_t now, char *buf, size_t len,
                          unsigned *gen);
/* Drops the sig of generation gen (IM refused it) so the next get makes a new
 * one; a newer sig made meanwhile is kept. Thread: any. */
void tim_usersig_cache_invalidate(struct tim_usersig_cache *c, unsigned gen);
void tim_usersig_cache_destroy(struct tim_usersig_cache *c);

#endif
