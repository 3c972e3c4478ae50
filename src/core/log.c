/* SPDX-License-Identifier: Apache-2.0 */
/* log.c: the JSON lines logger (see log.h). */
#include "core/log.h"

#include "core/clock.h"
#include "core/err.h"
#include "core/secret.h"
#include "core/xmalloc.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LINE_MAX_STACK 4096

static int log_fd = 2;
static char log_path[4096];
static atomic_int log_min = LOG_INFO;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

int
log_open(const char *path, enum log_level min)
{
    atomic_store(&log_min, min);
    log_path[0] = '\0';
    if (path == NULL || *path == '\0')
        return 0;
    if (strlen(path) >= sizeof(log_path))
        return ROOMD_EIO;
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return ROOMD_EIO;
    log_fd = fd;
    memcpy(log_path, path, strlen(path) + 1);
    return 0;
}

/* ---- Repeated warnings: at most LOG_KIND_LINES per kind per interval ---- */

/* A kind is (mod, msg) of a warn or error record. Its first LOG_KIND_LINES
 * records of each LOG_KIND_INTERVAL_MS are written; the rest are counted and
 * one "log lines suppressed" record per kind and interval says how many
 * (written at the kind's next record after the interval, by
 * log_flush_suppressed, or at log_close). A table of KIND_SLOTS kinds; kinds
 * past it share the last slot. */
#define KIND_SLOTS 256
#define KIND_KEY 96

struct kind {
    char key[KIND_KEY]; /* "mod\x1fmsg", cut; "" = free slot */
    int64_t start_ms;   /* the interval's start (monotonic) */
    uint32_t lines;     /* written in it */
    uint64_t suppressed;
};

static struct kind kinds[KIND_SLOTS];
static pthread_mutex_t kinds_mu = PTHREAD_MUTEX_INITIALIZER;

static void emit_suppressed(const char *key, uint64_t n);

static struct kind *
kind_of(const char *mod, const char *msg)
{
    char key[KIND_KEY];
    uint32_t h = 2166136261u;

    snprintf(key, sizeof(key), "%s\x1f%s", mod, msg);
    for (const char *p = key; *p != '\0'; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    for (uint32_t i = 0; i < KIND_SLOTS - 1; i++) {
        struct kind *k = &kinds[(h + i) % (KIND_SLOTS - 1)];
        if (k->key[0] == '\0')
            strlcpy_(k->key, key, sizeof(k->key));
        if (strcmp(k->key, key) == 0)
            return k;
    }
    if (kinds[KIND_SLOTS - 1].key[0] == '\0')
        strlcpy_(kinds[KIND_SLOTS - 1].key, "log\x1f(other kinds)", KIND_KEY);
    return &kinds[KIND_SLOTS - 1];
}

/* True when a record of lvl, mod, msg may be written now (debug and info
 * always). Writes the kind's count of the interval that ended, if any. */
static bool
rate_ok(enum log_level lvl, const char *mod, const char *msg)
{
    char key[KIND_KEY];
    uint64_t ended = 0;
    int64_t now;
    bool ok;

    if (lvl < LOG_WARN)
        return true;
    now = clock_mono_ms();
    pthread_mutex_lock(&kinds_mu);
    struct kind *k = kind_of(mod, msg);
    if (now - k->start_ms >= LOG_KIND_INTERVAL_MS) {
        ended = k->suppressed;
        strlcpy_(key, k->key, sizeof(key));
        k->start_ms = now;
        k->lines = 0;
        k->suppressed = 0;
    }
    ok = k->lines < LOG_KIND_LINES;
    if (ok)
        k->lines++;
    else
        k->suppressed++;
    pthread_mutex_unlock(&kinds_mu);
    if (ended > 0)
        emit_suppressed(key, ended);
    return ok;
}

void
log_flush_suppressed(void)
{
    struct {
        char key[KIND_KEY];
        uint64_t n;
    } *out = NULL;
    size_t n = 0;
    int64_t now = clock_mono_ms();

    pthread_mutex_lock(&kinds_mu);
    for (size_t i = 0; i < KIND_SLOTS; i++) {
        struct kind *k = &kinds[i];
        if (k->suppressed == 0 || now - k->start_ms < LOG_KIND_INTERVAL_MS)
            continue;
        if (out == NULL && (out = malloc(KIND_SLOTS * sizeof(*out))) == NULL)
            break;
        strlcpy_(out[n].key, k->key, sizeof(out[n].key));
        out[n++].n = k->suppressed;
        k->start_ms = now;
        k->lines = 0;
        k->suppressed = 0;
    }
    pthread_mutex_unlock(&kinds_mu);
    for (size_t i = 0; i < n; i++)
        emit_suppressed(out[i].key, out[i].n);
    free(out);
}

void
log_close(void)
{
    for (size_t i = 0; i < KIND_SLOTS; i++) /* every count still held */
        kinds[i].start_ms -= LOG_KIND_INTERVAL_MS;
    log_flush_suppressed();
    if (log_fd > 2)
        close(log_fd);
    log_fd = 2;
    log_path[0] = '\0';
}

int
log_reopen(void)
{
    if (log_fd <= 2 || log_path[0] == '\0')
        return 0;
    int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return ROOMD_EIO;
    /* dup2 swaps the file under the same descriptor number atomically, so a
     * thread writing now never sees a closed descriptor. */
    int rc = dup3(fd, log_fd, O_CLOEXEC) < 0 ? ROOMD_EIO : 0;
    close(fd);
    return rc;
}

void
log_set_level(enum log_level min)
{
    atomic_store(&log_min, min);
}

bool
log_enabled(enum log_level lvl)
{
    return (int)lvl >= atomic_load(&log_min);
}

int
log_level_parse(const char *s)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(s, level_names[i]) == 0)
            return i;
    return -1;
}

const char *
log_level_name(enum log_level lvl)
{
    return (unsigned)lvl < 4 ? level_names[lvl] : "error";
}

static void
write_all(const char *buf, size_t len)
{
    ssize_t n;

    while (len > 0) {
        n = write(log_fd, buf, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;
        buf += n;
        len -= (size_t)n;
    }
}

/* A JSON string of s[0..n); bytes that are not UTF-8 become '?'. */
static json_t *
text(const char *s, size_t n)
{
    json_t *j = json_stringn(s, n);
    if (j != NULL)
        return j;
    char *c = malloc(n + 1);
    if (c == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++)
        c[i] = (unsigned char)s[i] < 0x80 && s[i] != '\0' ? s[i] : '?';
    j = json_stringn(c, n);
    free(c);
    return j;
}

/* A value: digits alone (at most 18, optional '-') are an integer. */
static json_t *
value(const char *s, size_t n)
{
    size_t i = (n > 0 && s[0] == '-') ? 1 : 0;
    size_t digits = n - i;

    if (digits == 0 || digits > 18)
        return text(s, n);
    for (; i < n; i++)
        if (!isdigit((unsigned char)s[i]))
            return text(s, n);
    return json_integer(strtoll(s, NULL, 10));
}

/* Length of the key at p when p starts "key=" (key: [A-Za-z0-9_.-]+), else 0. */
static size_t
key_at(const char *p)
{
    size_t k = 0;

    while (isalnum((unsigned char)p[k]) || p[k] == '_' || p[k] == '.' || p[k] == '-')
        k++;
    return k > 0 && p[k] == '=' ? k : 0;
}

/* Adds the "key=value ..." pairs of tail to o (see log.h); a key o already
 * has is kept; text that is not a pair lands in "detail". */
static void
add_pairs(json_t *o, const char *tail)
{
    const char *p = tail;

    while (*p != '\0') {
        while (*p == ' ')
            p++;
        if (*p == '\0')
            break;
        size_t kl = key_at(p);
        if (kl == 0) {
            json_object_set_new(o, "detail", text(p, strlen(p)));
            return;
        }
        char key[64];
        snprintf(key, sizeof(key), "%.*s", (int)kl, p);
        const char *v = p + kl + 1, *q = NULL, *next = NULL;
        if (*v == '"') { /* a quoted value ends at a quote before " key=" or the end */
            for (q = v + 1; *q != '\0'; q++)
                if (*q == '"' && (q[1] == '\0' || (q[1] == ' ' && key_at(q + 2) > 0)))
                    break;
            if (*q == '"') {
                next = q + 1;
                v++;
            }
        }
        if (next == NULL) {
            for (q = v; *q != '\0' && !(*q == ' ' && key_at(q + 1) > 0); q++)
                ;
            next = q;
        }
        if (json_object_get(o, key) == NULL)
            json_object_set_new(o, key, value(v, (size_t)(q - v)));
        p = next;
    }
}

/* Writes o as one line and drops its reference. */
static void
emit(json_t *o)
{
    char stack[LINE_MAX_STACK];
    size_t flags = JSON_COMPACT | JSON_REAL_PRECISION(9);
    size_t n = json_dumpb(o, stack, sizeof(stack) - 1, flags);

    if (n == 0) {
        json_decref(o);
        return;
    }
    if (n < sizeof(stack) - 1) {
        stack[n] = '\n';
        write_all(stack, n + 1);
    } else {
        char *big = malloc(n + 1);
        if (big != NULL && json_dumpb(o, big, n, flags) == n) {
            big[n] = '\n';
            write_all(big, n + 1);
        }
        free(big);
    }
    json_decref(o);
}

/* The request of this thread (log_set_request). */
static _Thread_local char req_id[65];
static _Thread_local char req_tp[64];

void
log_set_request(const char *request_id, const char *traceparent)
{
    snprintf(req_id, sizeof(req_id), "%s", request_id ? request_id : "");
    snprintf(req_tp, sizeof(req_tp), "%s", traceparent ? traceparent : "");
}

const char *
log_request_id(void)
{
    return req_id;
}

const char *
log_traceparent(void)
{
    return req_tp;
}

static json_t *
header(enum log_level lvl, const char *mod, const char *msg)
{
    char ts[32];
    json_t *o = json_object();

    clock_format_utc(clock_wall_ms(), ts, sizeof(ts));
    json_object_set_new(o, "ts", json_string(ts));
    json_object_set_new(o, "level", json_string(log_level_name(lvl)));
    json_object_set_new(o, "mod", text(mod, strlen(mod)));
    json_object_set_new(o, "msg", text(msg, strlen(msg)));
    if (req_id[0] != '\0')
        json_object_set_new(o, "request_id", json_string(req_id));
    if (req_tp[0] != '\0') /* "00-<trace-id>-<parent-id>-<flags>" */
        json_object_set_new(o, "trace_id", json_stringn(req_tp + 3, 32));
    return o;
}

/* The record of a kind's suppressed lines (warn; never itself limited). */
static void
emit_suppressed(const char *key, uint64_t n)
{
    const char *sep = strchr(key, '\x1f');
    char mod[KIND_KEY];
    json_t *o;

    snprintf(mod, sizeof(mod), "%.*s", sep != NULL ? (int)(sep - key) : 0, key);
    o = header(LOG_WARN, mod, "log lines suppressed");
    json_object_set_new(o, "kind", text(sep != NULL ? sep + 1 : key, strlen(sep ? sep + 1 : key)));
    json_object_set_new(o, "suppressed", json_integer((json_int_t)n));
    json_object_set_new(o, "interval_ms", json_integer(LOG_KIND_INTERVAL_MS));
    emit(o);
}

void
log_msg(enum log_level lvl, const char *mod, const char *msg, const char *fmt, ...)
{
    char tail[2048], clean[2048 + 64];
    va_list ap;

    if (!log_enabled(lvl) || !rate_ok(lvl, mod, msg))
        return;
    json_t *o = header(lvl, mod, msg);
    if (fmt != NULL) {
        va_start(ap, fmt);
        vsnprintf(tail, sizeof(tail), fmt, ap);
        va_end(ap);
        secret_redact(tail, clean, sizeof(clean)); /* no password or token in a log line */
        add_pairs(o, clean);
    }
    emit(o);
}

void
log_fields(enum log_level lvl, const char *mod, const char *msg, json_t *fields)
{
    const char *k;
    json_t *v;

    if (!log_enabled(lvl) || !rate_ok(lvl, mod, msg)) {
        json_decref(fields);
        return;
    }
    json_t *o = header(lvl, mod, msg);
    if (fields != NULL) {
        json_object_foreach(fields, k, v)
        {
            if (json_object_get(o, k) == NULL)
                json_object_set(o, k, v);
        }
        json_decref(fields);
    }
    emit(o);
}

void
fatalx(const char *fmt, ...)
{
    char raw[2048], why[2048 + 64];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(raw, sizeof(raw), fmt, ap);
    va_end(ap);
    secret_redact(raw, why, sizeof(why));
    fprintf(stderr, "roomd: %s\n", why);
    if (log_fd > 2) { /* the log file gets the reason too */
        json_t *o = header(LOG_ERROR, "main", "fatal");
        json_object_set_new(o, "err", text(why, strlen(why)));
        emit(o);
    }
    exit(1);
}
