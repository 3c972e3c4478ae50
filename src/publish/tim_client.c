/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tim_client.c: the Tencent IM REST transport (tim_client.h): the HTTP
 * exchange (libcurl handles from a small pool, keep-alive per handle, behind
 * struct tim_exchange so that another transport can stand in), the admin
 * UserSig cache, the
 * error classes of tencent-im-rest.md §4, and one function per IM API used.
 * The room-event mapping is in tim_events.c.
 */
#include "publish/tim_client.h"

#include "conf/conf.h"
#include "core/clock.h"
#include "core/curl_pool.h"
#include "core/err.h"
#include "core/hex.h"
#include "core/log.h"
#include "core/secret.h"
#include "core/xmalloc.h"
#include "publish/tim_limit.h"
#include "publish/tim_usersig.h"

#include <curl/curl.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TIM_MAX_RESPONSE (1 << 20)
#define TIM_MAX_DATA 8000 /* MsgBody limit (doc §4: 80002 / 93000) */
#define TIM_KEY_MAX 512

struct tim_client {
    char *base_url; /* without a trailing '/' */
    char *admin;
    int64_t sdkappid;
    const char *group_type; /* normalized, static */
    char *ca_file;          /* NULL = system CAs */
    int64_t timeout_ms;
    char *key_env; /* where the key comes from */
    char *key_file;
    struct tim_usersig_cache sig;

    struct tim_exchange x;      /* the HTTP exchange: curl_post unless replaced */
    struct curl_pool pool;      /* idle curl handles (curl_post) */
    struct tim_limit *limit;    /* the process' IM token buckets (shared) */
    _Atomic int64_t latency_us; /* moving average of an HTTP exchange (tim_client_latency_ms) */
};

static int curl_post(void *arg, const char *url, const char *body, int64_t timeout_ms, long *status,
                     char **resp, char *why, size_t whylen);

/* ---- error classes (doc §4) ------------------------------------------------ */

static const int retry_codes[] = {60008, 60014, 60007, 60011, 60018, 60019, 10006, 10023, 10002,
                                  20004, 20005, 90992, 90994, 90995, 91000, 70169, 70500};
/* IM's rate-limit answers (doc §4), and HTTP 429: waited out and retried
 * within the call; still limited at the deadline -> ROOMD_ELIMIT, which the
 * sinks and consumer groups treat as an outage (no attempt counted). */
static const int rate_codes[] = {60007, 60011, 60018, 60019, 10006, 10023};
#define RATE_RETRY_MS 100 /* + up to as much jitter */
static const int resig_codes[] = {60004, 60005, 70052, 70013, 70014};
static const int perm_codes[] = {
    60002, 60003, 60009, 60012, 60013, 60015, 10003, 10004, 10011, 90031, 90044, 60010, 90009,
    70403, 60006, 60016, 60017, 60020, 60021, 10010, 10015, 10019, 20003, 90012, 90048, 70107,
    10007, 10017, 20012, 10036, 10037, 10038, 70398, 10016, 20006, 80001, 80002, 93000, 90026};

static bool
in_list(int code, const int *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (list[i] == code)
            return true;
    return false;
}

enum tim_class
tim_classify(int code)
{
    if (code == 0)
        return TIM_CLASS_OK;
    if (in_list(code, retry_codes, sizeof(retry_codes) / sizeof(retry_codes[0])))
        return TIM_CLASS_RETRY;
    if (in_list(code, resig_codes, sizeof(resig_codes) / sizeof(resig_codes[0])))
        return TIM_CLASS_RESIG;
    if ((code >= 90001 && code <= 90010) ||
        in_list(code, perm_codes, sizeof(perm_codes) / sizeof(perm_codes[0])))
        return TIM_CLASS_PERM;
    return TIM_CLASS_UNKNOWN;
}

/* ---- secret key ------------------------------------------------------------------ */

/* Reads the key into buf (core/secret.h). Returns 0 or ROOMD_EINVAL with err. */
static int
load_key(const char *env, const char *file, char *buf, size_t len, char *err, size_t errlen)
{
    return secret_load("tencent_im.secret_key_env", env, "tencent_im.secret_key_file", file, buf,
                       len, err, errlen);
}

/* ---- open / close ---------------------------------------------------------------- */

static const char *
normalize_type(const char *t)
{
    static const char *const names[][2] = {
        {"AVChatRoom", "AVChatRoom"}, {"Public", "Public"},   {"ChatRoom", "ChatRoom"},
        {"Meeting", "ChatRoom"},      {"Private", "Private"}, {"Work", "Private"},
        {"Community", "Community"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (t != NULL && strcmp(t, names[i][0]) == 0)
            return names[i][1];
    return NULL;
}

int
tim_client_open(struct tim_client **out, const struct conf_tencent_im *cfg, char *err,
                size_t errlen)
{
    struct tim_client *c;
    char key[TIM_KEY_MAX];
    const char *type = normalize_type(cfg->group_type);
    size_t n;
    int rc;

    *out = NULL;
    if (type == NULL) {
        snprintf(err, errlen,
                 "tencent_im.group_type: \"%s\" is not one of AVChatRoom, Public, "
                 "ChatRoom, Private, Community",
                 cfg->group_type ? cfg->group_type : "");
        return ROOMD_EINVAL;
    }
    if (cfg->base_url == NULL || strncmp(cfg->base_url, "http", 4) != 0) {
        snprintf(err, errlen, "tencent_im.base_url: want https://host");
        return ROOMD_EINVAL;
    }
    if (cfg->admin_identifier == NULL || cfg->admin_identifier[0] == '\0') {
        snprintf(err, errlen, "tencent_im.admin_identifier: empty");
        return ROOMD_EINVAL;
    }
    if ((rc = load_key(cfg->secret_key_env, cfg->secret_key_file, key, sizeof(key), err, errlen)) !=
        0)
        return rc;

    c = xcalloc(1, sizeof(*c));
    c->base_url = xstrdup(cfg->base_url);
    n = strlen(c->base_url);
    while (n > 0 && c->base_url[n - 1] == '/')
        c->base_url[--n] = '\0';
    c->admin = xstrdup(cfg->admin_identifier);
    c->sdkappid = cfg->sdk_app_id;
    c->group_type = type;
    c->ca_file = (cfg->ca_file && cfg->ca_file[0]) ? xstrdup(cfg->ca_file) : NULL;
    c->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : 5000;
    c->key_env = xstrdup(cfg->secret_key_env ? cfg->secret_key_env : "");
    c->key_file = xstrdup(cfg->secret_key_file ? cfg->secret_key_file : "");
    rc = tim_usersig_cache_init(&c->sig, key, c->sdkappid, c->admin,
                                cfg->usersig_ttl_ms >= 1000 ? cfg->usersig_ttl_ms / 1000 : 86400);
    OPENSSL_cleanse(key, sizeof(key));
    if (rc != 0) {
        snprintf(err, errlen, "tencent_im.admin_identifier: too long");
        tim_client_close(c);
        return rc;
    }

    if (c->timeout_ms <= 3000)
        log_warn("tim", "tencent_im.timeout is not above IM's own 3 s", "timeout_ms=%lld",
                 (long long)c->timeout_ms);
    /* curl_global_init (thread-safe in this libcurl) is still done before
     * the outbox workers start when the sink is opened. */
    curl_pool_init(&c->pool);
    c->x = (struct tim_exchange){.post = curl_post, .arg = c};
    c->limit = tim_limit_get(cfg->rate_limit_per_s, cfg->group_rate_limit_per_s);
    *out = c;
    return 0;
}

void
tim_client_close(struct tim_client *c)
{
    if (c == NULL)
        return;
    if (c->sig.key != NULL) { /* fully opened */
        curl_pool_destroy(&c->pool);
        tim_limit_release(c->limit);
        tim_usersig_cache_destroy(&c->sig);
    }
    free(c->base_url);
    free(c->admin);
    free(c->ca_file);
    free(c->key_env);
    free(c->key_file);
    free(c);
}

const char *
tim_client_group_type(const struct tim_client *c)
{
    return c->group_type;
}

int64_t
tim_client_timeout_ms(const struct tim_client *c)
{
    return c->timeout_ms;
}

/* ---- transport ------------------------------------------------------------------- */

static uint32_t
random_u32(void)
{
    uint32_t r = 0;

    if (RAND_bytes((unsigned char *)&r, sizeof(r)) != 1)
        r = (uint32_t)clock_mono_us();
    return r;
}

/* The short API name for messages: "create_group" of "group_open_http_svc/create_group". */
static const char *
api_short(const char *api)
{
    const char *s = strrchr(api, '/');
    return s ? s + 1 : api;
}

/* The libcurl exchange (struct tim_exchange, the default; arg = the
 * client): a handle from the pool, keep-alive kept across calls, the body
 * collected up to TIM_MAX_RESPONSE. */
static int
curl_post(void *arg, const char *url, const char *body, int64_t timeout_ms, long *status,
          char **resp, char *why, size_t whylen)
{
    struct tim_client *c = arg;
    struct curl_body b = {.max = TIM_MAX_RESPONSE};
    struct curl_slist *hdrs = NULL;
    CURL *h;
    CURLcode cc;
    int rc = 0;

    *resp = NULL;
    if ((h = curl_pool_take(&c->pool)) == NULL) {
        snprintf(why, whylen, "curl_easy_init failed");
        return ROOMD_EUNAVAIL;
    }
    hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
    hdrs = curl_slist_append(hdrs, "Expect:");

    curl_easy_reset(h); /* keeps the connection cache: keep-alive survives */
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)timeout_ms);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, curl_body_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "roomd-tim/1");
    if (c->ca_file != NULL)
        curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_file);

    cc = curl_easy_perform(h);
    if (cc != CURLE_OK) {
        snprintf(why, whylen, "curl %d: %s", (int)cc, curl_easy_strerror(cc));
        free(b.p);
        rc = ROOMD_EUNAVAIL; /* no answer: an outage, not the event's fault */
    } else {
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
        *resp = b.p;
    }
    curl_slist_free_all(hdrs);
    /* The URL holds the sig: wipe it from the handle before it idles in the pool. */
    curl_easy_setopt(h, CURLOPT_URL, "");
    curl_pool_give(&c->pool, h);
    return rc;
}

void
tim_client_set_exchange(struct tim_client *c, const struct tim_exchange *x)
{
    c->x = *x;
}

/* POSTs body to api with the current sig through c's exchange. Returns 0
 * with *status and the body in *resp (malloc'd or NULL), or ROOMD_EUNAVAIL
 * (no answer: transport, deadline) with err. */
static int
http_post(struct tim_client *c, const char *api, const char *sig, const char *body,
          int64_t deadline, long *status, char **resp, char *err, size_t errlen)
{
    int64_t left = deadline - clock_mono_ms();
    int64_t tmo = c->timeout_ms < left ? c->timeout_ms : left;
    char *url, *ident, why[256] = "";
    int rc;

    *resp = NULL;
    if (tmo <= 0) {
        snprintf(err, errlen, "tim %s: publish deadline passed", api_short(api));
        return ROOMD_EUNAVAIL;
    }
    ident = curl_easy_escape(NULL, c->admin, 0); /* the handle is unused (libcurl >= 7.82) */
    url =
        xasprintf("%s/v4/%s?sdkappid=%lld&identifier=%s&usersig=%s&random=%u"
                  "&contenttype=json",
                  c->base_url, api, (long long)c->sdkappid, ident ? ident : "", sig, random_u32());
    int64_t t0 = clock_mono_us();
    rc = c->x.post(c->x.arg, url, body, tmo, status, resp, why, sizeof(why));
    if (rc == 0) { /* answers only: an outage's timeouts say nothing of IM's pace */
        int64_t took = clock_mono_us() - t0, avg = atomic_load(&c->latency_us);
        atomic_store(&c->latency_us, avg == 0 ? took : (7 * avg + took) / 8);
    }
    if (rc != 0) {
        snprintf(err, errlen, "tim %s: %s", api_short(api), why);
        free(*resp);
        *resp = NULL;
        rc = ROOMD_EUNAVAIL;
    }
    OPENSSL_cleanse(url, strlen(url)); /* it holds the sig */
    curl_free(ident);
    free(url);
    return rc;
}

static void
reload_key(struct tim_client *c)
{
    char key[TIM_KEY_MAX], err[256];

    if (load_key(c->key_env, c->key_file, key, sizeof(key), err, sizeof(err)) == 0)
        tim_usersig_cache_set_key(&c->sig, key);
    else
        log_warn("tim", "cannot re-read the secret key", "why=\"%s\"", err);
    OPENSSL_cleanse(key, sizeof(key));
}

/* Counts one rate-limit answer and sleeps RATE_RETRY_MS plus jitter before
 * the call is sent again. Returns false (no sleep) when that would pass
 * deadline: the call then ends in ROOMD_ELIMIT. */
static bool
rate_pause(struct tim_client *c, int64_t deadline)
{
    int64_t pause = RATE_RETRY_MS + (int64_t)(random_u32() % RATE_RETRY_MS);

    tim_limit_refused(c->limit);
    if (clock_mono_ms() + pause >= deadline)
        return false;
    struct timespec ts = {0, pause * 1000000L};
    nanosleep(&ts, NULL);
    return true;
}

int64_t
tim_client_latency_ms(struct tim_client *c)
{
    return (atomic_load(&c->latency_us) + 999) / 1000;
}

bool
tim_client_rate_limited(const struct tim_client *c, int64_t within_ms)
{
    return tim_limit_refused_within(c->limit, within_ms);
}

struct tim_limit *
tim_client_limit(const struct tim_client *c)
{
    return c->limit;
}

int
tim_client_call(struct tim_client *c, const char *api, json_t *req, int64_t deadline, json_t **resp,
                int *im_code, char *err, size_t errlen)
{
    char *body = json_dumps(req, JSON_COMPACT);
    char sig[1024];
    unsigned gen = 0;
    int rc = ROOMD_ERETRY, code = -1;
    json_t *j = NULL;

    if (resp != NULL)
        *resp = NULL;
    if (body == NULL) {
        snprintf(err, errlen, "tim %s: cannot encode the request", api_short(api));
        rc = ROOMD_EPERM;
        goto out;
    }
    const char *group = strcmp(api_short(api), "send_group_msg") == 0
                            ? json_string_value(json_object_get(req, "GroupId"))
                            : NULL;
    for (int attempt = 0; attempt < 2; attempt++) {
        char *answer = NULL;
        long status = 0;
        json_error_t jerr;
        enum tim_class cls;
        const char *info;

        json_decref(j);
        j = NULL;
        code = -1;
        if (tim_usersig_cache_get(&c->sig, clock_wall_ms() / 1000, sig, sizeof(sig), &gen) != 0) {
            snprintf(err, errlen, "tim %s: cannot make the UserSig", api_short(api));
            rc = ROOMD_EPERM;
            goto out;
        }
        if (clock_mono_ms() >= deadline) {
            OPENSSL_cleanse(sig, sizeof(sig));
            snprintf(err, errlen, "tim %s: publish deadline passed", api_short(api));
            rc = ROOMD_EUNAVAIL; /* as http_post says it */
            goto out;
        }
        if (tim_limit_wait(c->limit, api_short(api), group, deadline) != 0) {
            OPENSSL_cleanse(sig, sizeof(sig));
            snprintf(err, errlen, "tim %s: no rate-limit slot before the deadline", api_short(api));
            rc = ROOMD_ELIMIT; /* our own bucket: IM's rate, not the event's fault */
            goto out;
        }
        rc = http_post(c, api, sig, body, deadline, &status, &answer, err, errlen);
        OPENSSL_cleanse(sig, sizeof(sig));
        if (rc != 0)
            goto out;
        if (status == 429) {
            /* HTTP's rate limit: as IM's frequency-control codes below */
            free(answer);
            snprintf(err, errlen, "tim %s: http 429 (rate limit)", api_short(api));
            if (rate_pause(c, deadline)) {
                attempt--;
                continue;
            }
            rc = ROOMD_ELIMIT;
            goto out;
        }
        if (status != 200) {
            snprintf(err, errlen, "tim %s: http %ld", api_short(api), status);
            free(answer);
            rc = ROOMD_ERETRY;
            goto out;
        }
        j = answer ? json_loads(answer, 0, &jerr) : NULL;
        free(answer);
        if (!json_is_object(j) || !json_is_integer(json_object_get(j, "ErrorCode"))) {
            snprintf(err, errlen, "tim %s: answer is not an IM JSON envelope", api_short(api));
            rc = ROOMD_ERETRY;
            goto out;
        }
        code = (int)json_integer_value(json_object_get(j, "ErrorCode"));
        info = json_string_value(json_object_get(j, "ErrorInfo"));
        cls = tim_classify(code);
        if (cls == TIM_CLASS_OK) {
            rc = 0;
            goto out;
        }
        snprintf(err, errlen, "tim %d: %.160s (%s)", code, info ? info : "", api_short(api));
        if (in_list(code, rate_codes, sizeof(rate_codes) / sizeof(rate_codes[0]))) {
            if (rate_pause(c, deadline)) {
                attempt--; /* IM's rate limit: not an attempt */
                continue;
            }
            rc = ROOMD_ELIMIT; /* still limited at the deadline: an outage, not the event */
            goto out;
        }
        if (cls == TIM_CLASS_RESIG && attempt == 0) {
            log_warn("tim", "UserSig refused; regenerating", "api=%s code=%d", api_short(api),
                     code);
            tim_usersig_cache_invalidate(&c->sig, gen);
            reload_key(c);
            continue;
        }
        if (cls == TIM_CLASS_PERM || code == 70013 || code == 70014)
            rc = ROOMD_EPERM;
        else
            rc = ROOMD_ERETRY;
        goto out;
    }
out:
    if (im_code != NULL)
        *im_code = code;
    if (resp != NULL)
        *resp = j;
    else
        json_decref(j);
    free(body);
    return rc;
}

/* ---- helpers ----------------------------------------------------------------------- */

void
tim_group_id(const char *app, const char *room_id, char *out, size_t outlen)
{
    unsigned char md[SHA256_DIGEST_LENGTH];
    char *s = xasprintf("%s_%s", app, room_id);

    if (strlen(s) < TIM_GROUP_ID_MAX && strlen(s) < outlen && strncmp(s, "@TGS#", 5) != 0) {
        strcpy(out, s);
    } else {
        char hex[2 * SHA256_DIGEST_LENGTH + 1];
        SHA256((const unsigned char *)s, strlen(s), md);
        hex_lower(md, SHA256_DIGEST_LENGTH, hex);
        snprintf(out, outlen, "r_%.46s", hex);
    }
    free(s);
}

uint32_t
tim_derive_u32(const char *id, int which)
{
    unsigned char md[SHA256_DIGEST_LENGTH];
    const unsigned char *p;

    SHA256((const unsigned char *)id, strlen(id), md);
    p = md + (which ? 4 : 0);
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Copies at most max bytes of s into out without cutting a UTF-8 sequence. */
static void
utf8_cut(const char *s, size_t max, char *out)
{
    size_t n = strlen(s);

    if (n > max) {
        n = max;
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
            n--;
    }
    memcpy(out, s, n);
    out[n] = '\0';
}

/* Calls api with req (reference stolen). */
static int
call_steal(struct tim_client *c, const char *api, json_t *req, int64_t deadline, json_t **resp,
           int *im_code, char *err, size_t errlen)
{
    int rc;

    if (req == NULL) {
        snprintf(err, errlen, "tim %s: cannot build the request", api_short(api));
        return ROOMD_EPERM;
    }
    rc = tim_client_call(c, api, req, deadline, resp, im_code, err, errlen);
    json_decref(req);
    return rc;
}

/* ---- group calls ------------------------------------------------------------------- */

int
tim_group_type(struct tim_client *c, const char *group_id, char *type, size_t typelen,
               int64_t deadline, char *err, size_t errlen)
{
    json_t *resp = NULL, *item;
    const char *t;
    int rc, code;

    rc = call_steal(c, "group_open_http_svc/get_group_info",
                    json_pack("{s:[s], s:{s:[s, s]}}", "GroupIdList", group_id, "ResponseFilter",
                              "GroupBaseInfoFilter", "Type", "Name"),
                    deadline, &resp, NULL, err, errlen);
    if (rc != 0)
        goto out;
    item = json_array_get(json_object_get(resp, "GroupInfo"), 0);
    if (!json_is_object(item)) {
        snprintf(err, errlen, "tim get_group_info: no GroupInfo item");
        rc = ROOMD_ERETRY;
        goto out;
    }
    code = (int)json_integer_value(json_object_get(item, "ErrorCode"));
    if (code == 10010 || code == 10015) {
        snprintf(err, errlen, "tim %d: group %s not found (get_group_info)", code, group_id);
        rc = ROOMD_ENOTFOUND;
        goto out;
    }
    if (code != 0) {
        snprintf(err, errlen, "tim %d: %.120s (get_group_info)", code,
                 json_string_value(json_object_get(item, "ErrorInfo"))
                     ? json_string_value(json_object_get(item, "ErrorInfo"))
                     : "");
        rc = tim_classify(code) == TIM_CLASS_PERM ? ROOMD_EPERM : ROOMD_ERETRY;
        goto out;
    }
    t = json_string_value(json_object_get(item, "Type"));
    snprintf(type, typelen, "%s", t ? t : "");
out:
    json_decref(resp);
    return rc;
}

int
tim_ensure_group(struct tim_client *c, const char *group_id, const char *name, int64_t deadline,
                 char *err, size_t errlen)
{
    char cut[31], type[32];
    const char *have;
    json_t *req;
    int rc, code = -1;

    utf8_cut(name && name[0] ? name : group_id, 30, cut);
    req = json_pack("{s:s, s:s, s:s}", "Type", c->group_type, "Name", cut, "GroupId", group_id);
    if (req != NULL && strcmp(c->group_type, "Private") != 0)
        json_object_set_new(req, "ApplyJoinOption", json_string("FreeAccess"));
    rc = call_steal(c, "group_open_http_svc/create_group", req, deadline, NULL, &code, err, errlen);
    if (rc == 0 || (code != 10021 && code != 10025))
        return rc;
    /* "ID in use": ours (10025) or maybe someone else's (10021); confirm its type. */
    rc = tim_group_type(c, group_id, type, sizeof(type), deadline, err, errlen);
    if (rc == ROOMD_ENOTFOUND)
        return ROOMD_ERETRY; /* destroyed in between: create again next time */
    if (rc != 0)
        return rc;
    have = normalize_type(type);
    if (have == NULL || strcmp(have, c->group_type) != 0) {
        snprintf(err, errlen, "tim %d: group %s exists with type %s, want %s", code, group_id, type,
                 c->group_type);
        return ROOMD_EPERM;
    }
    return 0;
}

int
tim_destroy_group(struct tim_client *c, const char *group_id, int64_t deadline, char *err,
                  size_t errlen)
{
    int code = -1;
    int rc =
        call_steal(c, "group_open_http_svc/destroy_group", json_pack("{s:s}", "GroupId", group_id),
                   deadline, NULL, &code, err, errlen);

    if (rc != 0 && (code == 10010 || code == 10015))
        return 0; /* already gone */
    return rc;
}

int
tim_send_group_custom(struct tim_client *c, const char *group_id, const char *data,
                      const char *desc, const char *dedupe_id, const char *priority,
                      int64_t deadline, int *im_code, char *err, size_t errlen)
{
    json_t *req, *resp = NULL;
    const char *drop;
    int rc;

    if (im_code != NULL)
        *im_code = -1;
    if (strlen(data) >= TIM_MAX_DATA) {
        snprintf(err, errlen, "tim send_group_msg: event JSON is %zu bytes (limit %d)",
                 strlen(data), TIM_MAX_DATA);
        return ROOMD_EPERM;
    }
    req =
        json_pack("{s:s, s:I, s:s, s:[{s:s, s:{s:s, s:s}}]}", "GroupId", group_id, "Random",
                  (json_int_t)tim_derive_u32(dedupe_id, 0), "MsgPriority", priority, "MsgBody",
                  "MsgType", "TIMCustomElem", "MsgContent", "Data", data, "Desc", desc ? desc : "");
    rc = call_steal(c, "group_open_http_svc/send_group_msg", req, deadline, &resp, im_code, err,
                    errlen);
    if (rc == 0 && (drop = json_string_value(json_object_get(resp, "MsgDropReason"))) != NULL &&
        drop[0] != '\0') {
        snprintf(err, errlen, "tim send_group_msg: dropped (%.80s)", drop);
        rc = ROOMD_ERETRY;
    }
    json_decref(resp);
    return rc;
}

int
tim_add_members(struct tim_client *c, const char *group_id, const char *const *accounts, size_t n,
                int *results, int64_t deadline, int *im_code, char *err, size_t errlen)
{
    json_t *resp = NULL, *list = json_array(), *got;
    int code = -1, rc;

    if (im_code == NULL)
        im_code = &code;
    for (size_t i = 0; i < n; i++) {
        json_array_append_new(list, json_pack("{s:s}", "Member_Account", accounts[i]));
        results[i] = 0;
    }
    rc = call_steal(
        c, "group_open_http_svc/add_group_member",
        json_pack("{s:s, s:i, s:o}", "GroupId", group_id, "Silence", 1, "MemberList", list),
        deadline, &resp, im_code, err, errlen);
    if (rc != 0) {
        json_decref(resp);
        return *im_code == 10013 ? 0 : rc; /* 10013: already members */
    }
    got = json_object_get(resp, "MemberList");
    for (size_t k = 0; k < json_array_size(got); k++) {
        json_t *m = json_array_get(got, k);
        const char *a = json_string_value(json_object_get(m, "Member_Account"));
        if (a == NULL || json_integer_value(json_object_get(m, "Result")) != 0)
            continue;
        for (size_t i = 0; i < n; i++)
            if (strcmp(accounts[i], a) == 0) {
                results[i] = ROOMD_ERETRY;
                snprintf(err, errlen, "tim add_group_member: %s not added (Result 0)", a);
            }
    }
    json_decref(resp);
    return 0;
}

int
tim_delete_members(struct tim_client *c, const char *group_id, const char *const *accounts,
                   size_t n, const char *reason, int64_t deadline, int *im_code, char *err,
                   size_t errlen)
{
    json_t *list = json_array();

    for (size_t i = 0; i < n; i++)
        json_array_append_new(list, json_string(accounts[i]));
    return call_steal(c, "group_open_http_svc/delete_group_member",
                      json_pack("{s:s, s:o, s:i, s:s}", "GroupId", group_id, "MemberToDel_Account",
                                list, "Silence", 1, "Reason", reason ? reason : ""),
                      deadline, NULL, im_code, err, errlen);
}

int
tim_add_member(struct tim_client *c, const char *group_id, const char *account, int64_t deadline,
               int *im_code, char *err, size_t errlen)
{
    json_t *resp = NULL, *m;
    int code = -1, rc;

    if (im_code == NULL)
        im_code = &code;

    rc = call_steal(c, "group_open_http_svc/add_group_member",
                    json_pack("{s:s, s:i, s:[{s:s}]}", "GroupId", group_id, "Silence", 1,
                              "MemberList", "Member_Account", account),
                    deadline, &resp, im_code, err, errlen);
    if (rc != 0) {
        json_decref(resp);
        return *im_code == 10013 ? 0 : rc; /* 10013: already a member */
    }
    m = json_array_get(json_object_get(resp, "MemberList"), 0);
    if (json_is_object(m) && json_integer_value(json_object_get(m, "Result")) == 0) {
        snprintf(err, errlen, "tim add_group_member: %s not added (Result 0)", account);
        rc = ROOMD_ERETRY;
    }
    json_decref(resp);
    return rc;
}

int
tim_delete_member(struct tim_client *c, const char *group_id, const char *account,
                  const char *reason, int64_t deadline, int *im_code, char *err, size_t errlen)
{
    return call_steal(c, "group_open_http_svc/delete_group_member",
                      json_pack("{s:s, s:[s], s:i, s:s}", "GroupId", group_id,
                                "MemberToDel_Account", account, "Silence", 1, "Reason",
                                reason ? reason : ""),
                      deadline, NULL, im_code, err, errlen);
}

int
tim_mute_member(struct tim_client *c, const char *group_id, const char *account, int64_t seconds,
                int64_t deadline, char *err, size_t errlen)
{
    return call_steal(c, "group_open_http_svc/forbid_send_msg",
                      json_pack("{s:s, s:[s], s:I}", "GroupId", group_id, "Members_Account",
                                account, "ShutUpTime", (json_int_t)seconds),
                      deadline, NULL, NULL, err, errlen);
}

int
tim_ban_member(struct tim_client *c, const char *group_id, const char *account, int64_t seconds,
               const char *description, int64_t deadline, int *im_code, char *err, size_t errlen)
{
    return call_steal(c, "group_open_http_svc/ban_group_member",
                      json_pack("{s:s, s:[s], s:I, s:s}", "GroupId", group_id, "Members_Account",
                                account, "Duration", (json_int_t)seconds, "Description",
                                description ? description : ""),
                      deadline, NULL, im_code, err, errlen);
}

int
tim_send_c2c(struct tim_client *c, const char *to_account, const char *data, const char *desc,
             const char *notice_id, int64_t lifetime_s, int64_t deadline, char *err, size_t errlen)
{
    if (strlen(data) >= TIM_MAX_DATA) {
        snprintf(err, errlen, "tim sendmsg: notice JSON is %zu bytes (limit %d)", strlen(data),
                 TIM_MAX_DATA);
        return ROOMD_EPERM;
    }
    if (lifetime_s < 0 || lifetime_s > 604800)
        lifetime_s = 604800;
    return call_steal(c, "openim/sendmsg",
                      json_pack("{s:i, s:s, s:I, s:I, s:I, s:[{s:s, s:{s:s, s:s}}]}",
                                "SyncOtherMachine", 2, "To_Account", to_account, "MsgSeq",
                                (json_int_t)tim_derive_u32(notice_id, 1), "MsgRandom",
                                (json_int_t)tim_derive_u32(notice_id, 0), "MsgLifeTime",
                                (json_int_t)lifetime_s, "MsgBody", "MsgType", "TIMCustomElem",
                                "MsgContent", "Data", data, "Desc", desc ? desc : ""),
                      deadline, NULL, NULL, err, errlen);
}
