/* SPDX-License-Identifier: Apache-2.0 */
/*
 * auth.h: who is calling (docs/auth.md). One verifier per process, shared by
 * every entry point (the HTTP listeners today, a gRPC server later):
 *
 *   auth_verify_bearer(a, "Bearer <JWT>", &p)   token -> principal {app, uid, service}
 *   auth_may_act_as(&p, app, uid)               may p act as uid of app?
 *   auth_admin_ok(a, "Bearer <token>")          the operator token of admin.*
 *   auth_admin_check(a, "Bearer <token>", &p)   ... and which one (admin.tokens)
 *
 * auth.mode none accepts every request as an "anyone" principal (conf/validate.c only
 * allows it when every listener binds loopback); auth.mode jwt verifies the
 * token with libjwt: HS256 with a shared secret, or RS256/ES256 with a PEM
 * public key; exp (required), nbf, iss and aud are checked. The token is never
 * logged or copied anywhere. Refusals are counted by reason in /metrics
 * (roomd_auth_refused_total{listener,status,reason}).
 * Verified tokens are kept in a bounded cache (auth.jwt.cache_entries, keyed by
 * the SHA-256 of the whole token; an entry ends at the token's exp or after
 * auth.jwt.cache_ttl, whichever is first; refusals are never kept);
 * auth_reload_keys (SIGHUP) rereads the key, applies cache_entries and
 * cache_ttl, and empties it.
 * auth.jwt.jwks_file: a JWKS (src/auth/jwks.h), several keys valid at once, the
 * token's kid header picking one (no kid, or one not in the set: 401
 * unknown_key). A watcher thread stats the file every
 * auth.jwt.jwks_poll_interval and rereads it when its mtime, size or inode
 * changed; a set that does not load keeps the one in use (logged, naming the
 * key). Each swap empties the token cache.
 * Thread: any, after auth_open; nothing blocks but auth_reload_keys.
 */
#ifndef ROOMD_AUTH_H
#define ROOMD_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct conf;
struct auth;

/* Why a request was refused. 401 reasons first, then the 403 ones. */
enum auth_reason {
    AUTH_OK = 0,
    AUTH_MISSING,         /* no Authorization header */
    AUTH_MALFORMED,       /* not "Bearer <JWT>", or the JWT does not parse */
    AUTH_BAD_SIGNATURE,   /* signature does not verify, or another alg */
    AUTH_EXPIRED,         /* exp + leeway is past */
    AUTH_NOT_YET_VALID,   /* nbf - leeway is ahead */
    AUTH_BAD_ISSUER,      /* iss differs from auth.jwt.issuer */
    AUTH_BAD_AUDIENCE,    /* aud does not hold auth.jwt.audience */
    AUTH_BAD_CLAIMS,      /* exp, sub or app missing or ill-typed */
    AUTH_UNKNOWN_KEY,     /* auth.jwt.jwks_file: no kid, or a kid not in the set */
    AUTH_BAD_ADMIN_TOKEN, /* the admin listener: not the admin token */
    AUTH_OTHER_APP,       /* 403: the token's app is not the request's */
    AUTH_OTHER_UID,       /* 403: a user token acting as another uid */
    AUTH_READ_ONLY,       /* 403: a read-only admin token (admin.tokens role read) writing */
    AUTH_REASON_COUNT_
};

/* The caller behind a verified token. */
struct auth_principal {
    char app[64]; /* the token's app claim; "" for anyone */
    int64_t uid;  /* sub; 0 for anyone, and for a service token whose sub names the
                   * service ("gateway") rather than a uid */
    char sub[64]; /* the token's sub as given ("" for anyone): a service's name is logged */
    bool service; /* scope holds "room:service": may act for any uid of app */
    bool anyone;  /* auth.mode none: may act as anyone of any app */
    /* the admin listener: the caller's name ("admin" for admin.token_env /
     * token_file, or with no admin token at all; else its admin.tokens name)
     * and whether it may only read */
    char admin_name[64];
    bool admin_read_only;
};

/*
 * Loads the keys named by conf->auth and conf->admin (reading the variables
 * and files they name) and registers the refusal counters with /metrics.
 * Returns 0 and *out, or ROOMD_EINVAL with err naming the key
 * ("auth.jwt.hs256_secret_env: TOKEN_SECRET is not set"); err never holds a
 * secret. Thread: main; blocks on file reads.
 */
int auth_open(struct auth **out, const struct conf *conf, char *err, size_t errlen);
/* Unregisters the counters, wipes the keys and frees. NULL is a no-op. */
void auth_close(struct auth *a);

/* True when auth.mode is none (every principal is "anyone"). */
bool auth_mode_none(const struct auth *a);

/*
 * Verifies an Authorization header value (NULL when absent). Returns AUTH_OK
 * and fills *p, or the reason of the 401. A token verified before (same text,
 * same key, before its exp and within auth.jwt.cache_ttl) is answered from the
 * cache. Does not count refusals (auth_count does). Thread: any; waits only
 * while auth_reload_keys swaps the key.
 */
enum auth_reason auth_verify_bearer(struct auth *a, const char *authorization,
                                    struct auth_principal *p);

/*
 * Key rotation: rereads the JWT key that conf->auth names (the HS256 secret's
 * variable or file, public_key_file, or the jwks_file set, whose watcher then
 * follows conf's jwks_file and jwks_poll_interval), swaps it in and empties the token
 * cache, so a token of the old key is verified again, and refused. Applies
 * auth.jwt.cache_entries (a new table when it changed; 0 = no cache) and
 * cache_ttl (entries stored from then on). Other auth keys keep their
 * start-up values. Returns 0, or ROOMD_EINVAL with err naming
 * the key (the old key stays in use; a change of auth.mode is refused).
 * Thread: any (main on SIGHUP); blocks on the file read and until the
 * verifications in progress finish.
 */
int auth_reload_keys(struct auth *a, const struct conf *conf, char *err, size_t errlen);

/*
 * --check-config: reads and parses the JWKS file as auth.jwt.jwks_file would
 * (src/auth/jwks.h). Returns 0 and *nkeys (the signing keys; NULL: not
 * wanted), or ROOMD_EINVAL with err naming the file and the key at fault
 * (never a key's bytes). Thread: any; blocks on the read.
 */
int auth_jwks_check(const char *file, int *nkeys, char *err, size_t errlen);
/* The same on JWKS text[0..len) (the fuzz target). Never blocks. */
int auth_jwks_parse_check(const char *text, size_t len, int *nkeys, char *err, size_t errlen);

/* The token cache's lookups so far: *hits answered from it, *misses verified
 * in full (also exported as roomd_auth_token_cache_total{result}). Thread: any. */
void auth_cache_counts(const struct auth *a, uint64_t *hits, uint64_t *misses);

/* AUTH_OK when p may act as uid of app (itself, or a service token of app,
 * or anyone); AUTH_OTHER_APP or AUTH_OTHER_UID when not. uid 0 checks the
 * app only (reads of the app's rooms). */
enum auth_reason auth_may_act_as(const struct auth_principal *p, const char *app, int64_t uid);

/* AUTH_OK when the admin listener may be used with this Authorization value:
 * it carries the admin token (constant-time compare), or no admin token is
 * configured (conf/validate.c allows that only on a loopback admin.listen). Else
 * AUTH_MISSING or AUTH_BAD_ADMIN_TOKEN. */
enum auth_reason auth_admin_ok(const struct auth *a, const char *authorization);

/* auth_admin_ok, and on AUTH_OK who called: p->admin_name and
 * p->admin_read_only (the rest of *p is zeroed, anyone set). Every token,
 * the single one and admin.tokens' named ones, is compared in constant time.
 * Thread: any; never blocks. */
enum auth_reason auth_admin_check(const struct auth *a, const char *authorization,
                                  struct auth_principal *p);

/* 401 for AUTH_MISSING..AUTH_BAD_ADMIN_TOKEN, 403 for the others, 200 for OK. */
int auth_reason_status(enum auth_reason r);
/* "missing", "malformed", "bad_signature", ... (the metric's reason label). */
const char *auth_reason_name(enum auth_reason r);
/* Counts one refusal on listener ("public" | "admin"). Thread: any; lock-free. */
void auth_count(struct auth *a, const char *listener, enum auth_reason r);

#endif
