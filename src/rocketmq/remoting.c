/* SPDX-License-Identifier: Apache-2.0 */
/*
 * remoting.c: RocketMQ remoting commands and one connection (remoting.h).
 * The header is written as JSON the way the Java client's fastjson writes
 * it: {"code","extFields","flag","language","opaque","serializeTypeCurrentRPC",
 * "version"}, every ext value a string. Responses are matched by opaque;
 * a request that times out breaks the connection (its late answer would
 * otherwise be taken for nothing), as the Java client closes the channel.
 */
#include "rocketmq/remoting.h"

#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/xmalloc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_FRAME (16 * 1024 * 1024) /* the server's frameMaxLength */
#define SER_JSON 0
#define SER_ROCKETMQ 1
#define CLIENT_VERSION 479 /* MQVersion V5_3_3: >= 401 asks for standard JSON routes */

/* ==== commands ==== */

struct rmq_cmd *
rmq_cmd_new(int code)
{
    struct rmq_cmd *c = xcalloc(1, sizeof(*c));

    c->code = code;
    c->version = CLIENT_VERSION;
    c->ext = json_object();
    return c;
}

void
rmq_cmd_free(struct rmq_cmd *c)
{
    if (c == NULL)
        return;
    json_decref(c->ext);
    free(c->remark);
    free(c->body);
    free(c);
}

void
rmq_cmd_set(struct rmq_cmd *c, const char *k, const char *v)
{
    json_object_set_new(c->ext, k, json_string(v ? v : ""));
}

void
rmq_cmd_set_int(struct rmq_cmd *c, const char *k, int64_t v)
{
    char b[32];

    snprintf(b, sizeof(b), "%" PRId64, v);
    rmq_cmd_set(c, k, b);
}

const char *
rmq_cmd_get(const struct rmq_cmd *c, const char *k)
{
    return json_string_value(json_object_get(c->ext, k));
}

int64_t
rmq_cmd_int(const struct rmq_cmd *c, const char *k, int64_t dflt)
{
    json_t *v = json_object_get(c->ext, k);
    const char *s;
    char *end;

    if (json_is_integer(v))
        return json_integer_value(v);
    if ((s = json_string_value(v)) == NULL || *s == '\0')
        return dflt;
    long long n = strtoll(s, &end, 10);
    return *end == '\0' ? (int64_t)n : dflt;
}

void
rmq_cmd_set_body(struct rmq_cmd *c, const void *body, size_t len)
{
    free(c->body);
    c->body = len ? xmemdup(body, len) : NULL;
    c->body_len = len;
}

static void
put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint32_t
get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

void
rmq_cmd_encode(const struct rmq_cmd *c, uint8_t **out, size_t *len)
{
    json_t *h = json_pack("{s:i, s:O, s:i, s:s, s:i, s:s, s:i}", "code", c->code, "extFields",
                          c->ext, "flag", c->flag, "language", "CPP", "opaque", (int)c->opaque,
                          "serializeTypeCurrentRPC", "JSON", "version", c->version);
    if (c->remark)
        json_object_set_new(h, "remark", json_string(c->remark));
    char *hs = json_dumps(h, JSON_COMPACT);
    size_t hl = strlen(hs);
    size_t total = 4 + hl + c->body_len;
    uint8_t *f = xmalloc(4 + total);

    put32(f, (uint32_t)total);
    put32(f + 4, (uint32_t)SER_JSON << 24 | (uint32_t)hl);
    memcpy(f + 8, hs, hl);
    if (c->body_len)
        memcpy(f + 8 + hl, c->body, c->body_len);
    free(hs);
    json_decref(h);
    *out = f;
    *len = 4 + total;
}

/* ROCKETMQ binary header (RocketMQSerializable): int16 code | int8 language
 * | int16 version | int32 opaque | int32 flag | int32 remarkLen, remark |
 * int32 extLen, {int16 keyLen, key, int32 valLen, val}... */
static int
decode_binary(const uint8_t *h, size_t hl, struct rmq_cmd *c)
{
    size_t pos = 13;

    if (hl < 21)
        return -1;
    c->code = (int16_t)(h[0] << 8 | h[1]);
    c->version = (int16_t)(h[3] << 8 | h[4]);
    c->opaque = (int32_t)get32(h + 5);
    c->flag = (int)get32(h + 9);
    uint32_t rl = get32(h + pos);
    pos += 4;
    if (rl > hl - pos)
        return -1;
    if (rl > 0)
        c->remark = xstrndup((const char *)h + pos, rl);
    pos += rl;
    if (hl - pos < 4)
        return -1;
    uint32_t el = get32(h + pos);
    pos += 4;
    if (el > hl - pos)
        return -1;
    size_t end = pos + el;
    while (pos < end) {
        if (end - pos < 2)
            return -1;
        size_t kl = (size_t)(h[pos] << 8 | h[pos + 1]);
        pos += 2;
        if (kl > end - pos || end - pos - kl < 4)
            return -1;
        char *k = xstrndup((const char *)h + pos, kl);
        pos += kl;
        uint32_t vl = get32(h + pos);
        pos += 4;
        if (vl > end - pos) {
            free(k);
            return -1;
        }
        json_object_set_new(c->ext, k, json_stringn((const char *)h + pos, vl));
        free(k);
        pos += vl;
    }
    return 0;
}

static int
decode_json(const uint8_t *h, size_t hl, struct rmq_cmd *c, char *err, size_t errlen)
{
    json_error_t je;
    json_t *j = json_loadb((const char *)h, hl, 0, &je);

    if (!json_is_object(j)) {
        snprintf(err, errlen, "bad JSON header: %s", je.text);
        json_decref(j);
        return ROOMD_EINVAL;
    }
    c->code = (int)json_integer_value(json_object_get(j, "code"));
    c->flag = (int)json_integer_value(json_object_get(j, "flag"));
    c->opaque = (int32_t)json_integer_value(json_object_get(j, "opaque"));
    c->version = (int)json_integer_value(json_object_get(j, "version"));
    const char *r = json_string_value(json_object_get(j, "remark"));
    if (r)
        c->remark = xstrdup(r);
    json_t *ext = json_object_get(j, "extFields");
    if (json_is_object(ext)) {
        const char *k;
        json_t *v;
        json_object_foreach(ext, k, v)
        {
            if (json_is_string(v))
                json_object_set(c->ext, k, v);
            else if (json_is_integer(v)) {
                char b[32];
                snprintf(b, sizeof(b), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
                rmq_cmd_set(c, k, b);
            } else if (json_is_boolean(v))
                rmq_cmd_set(c, k, json_is_true(v) ? "true" : "false");
        }
    }
    json_decref(j);
    return 0;
}

int
rmq_cmd_decode(const uint8_t *buf, size_t len, struct rmq_cmd **out, char *err, size_t errlen)
{
    struct rmq_cmd *c;
    int rc;

    *out = NULL;
    if (len < 4) {
        snprintf(err, errlen, "frame shorter than its header word");
        return ROOMD_EINVAL;
    }
    uint32_t hw = get32(buf);
    size_t hl = hw & 0xFFFFFF;
    int ser = (int)(hw >> 24);
    if (hl > len - 4) {
        snprintf(err, errlen, "header length %zu beyond the frame (%zu)", hl, len);
        return ROOMD_EINVAL;
    }
    c = rmq_cmd_new(0);
    if (ser == SER_JSON) {
        rc = decode_json(buf + 4, hl, c, err, errlen);
    } else if (ser == SER_ROCKETMQ) {
        rc = decode_binary(buf + 4, hl, c) == 0 ? 0 : ROOMD_EINVAL;
        if (rc)
            snprintf(err, errlen, "bad ROCKETMQ header");
    } else {
        snprintf(err, errlen, "unknown serialize type %d", ser);
        rc = ROOMD_EINVAL;
    }
    if (rc != 0) {
        rmq_cmd_free(c);
        return rc;
    }
    rmq_cmd_set_body(c, buf + 4 + hl, len - 4 - hl);
    *out = c;
    return 0;
}

/* ==== one connection ==== */

struct waiter {
    int32_t opaque;
    struct rmq_cmd *resp;
    bool done;
    struct waiter *next;
};

struct rmq_conn {
    atomic_int refs;
    char *addr;
    int fd;
    rmq_request_cb on_request;
    void *arg;
    pthread_t reader;
    pthread_mutex_t wmu; /* one frame written at a time */
    pthread_mutex_t mu;  /* waiters, dead */
    pthread_cond_t cv;
    struct waiter *waiters;
    bool dead;
    atomic_int next_opaque;
};

static void
mark_dead(struct rmq_conn *c)
{
    pthread_mutex_lock(&c->mu);
    if (!c->dead) {
        c->dead = true;
        shutdown(c->fd, SHUT_RDWR);
    }
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static bool
read_full(int fd, uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t r = recv(fd, p, n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        p += r;
        n -= (size_t)r;
    }
    return true;
}

static void *
reader_main(void *arg)
{
    struct rmq_conn *c = arg;
    uint8_t lenb[4];
    char err[256];

    for (;;) {
        if (!read_full(c->fd, lenb, 4))
            break;
        uint32_t total = get32(lenb);
        if (total < 4 || total > MAX_FRAME) {
            log_warn("rocketmq", "bad frame length, closing", "addr=%s length=%u", c->addr, total);
            break;
        }
        uint8_t *buf = xmalloc(total);
        if (!read_full(c->fd, buf, total)) {
            free(buf);
            break;
        }
        struct rmq_cmd *cmd = NULL;
        int rc = rmq_cmd_decode(buf, total, &cmd, err, sizeof(err));
        free(buf);
        if (rc != 0) {
            log_warn("rocketmq", "undecodable frame, closing", "addr=%s error=\"%s\"", c->addr,
                     err);
            break;
        }
        if (!(cmd->flag & RMQ_FLAG_RESPONSE)) {
            if (c->on_request)
                c->on_request(c, cmd, c->arg);
            rmq_cmd_free(cmd);
            continue;
        }
        pthread_mutex_lock(&c->mu);
        struct waiter *w = c->waiters;
        while (w && w->opaque != cmd->opaque)
            w = w->next;
        if (w && !w->done) {
            w->resp = cmd;
            w->done = true;
            cmd = NULL;
            pthread_cond_broadcast(&c->cv);
        }
        pthread_mutex_unlock(&c->mu);
        rmq_cmd_free(cmd); /* an answer nobody waits for: dropped */
    }
    mark_dead(c);
    return NULL;
}

static int
connect_to(const char *addr, int64_t timeout_ms, int *fdp, char *err, size_t errlen)
{
    char host[256];
    const char *colon = strrchr(addr, ':');
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;

    if (colon == NULL || colon == addr || (size_t)(colon - addr) >= sizeof(host) ||
        colon[1] == '\0') {
        snprintf(err, errlen, "%s: not host:port", addr);
        return ROOMD_EINVAL;
    }
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    if (getaddrinfo(host, colon + 1, &hints, &res) != 0 || res == NULL) {
        snprintf(err, errlen, "%s: cannot resolve", addr);
        return ROOMD_EUNAVAIL;
    }
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int rc = ROOMD_EUNAVAIL;
    if (fd >= 0) {
        int fl = fcntl(fd, F_GETFL);
        fcntl(fd, F_SETFL, fl | O_NONBLOCK);
        int r = connect(fd, res->ai_addr, res->ai_addrlen);
        if (r != 0 && errno == EINPROGRESS) {
            struct pollfd pf = {.fd = fd, .events = POLLOUT};
            int soerr = 0;
            socklen_t sl = sizeof(soerr);
            r = poll(&pf, 1, (int)(timeout_ms > 0 ? timeout_ms : 1)) == 1 &&
                        getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0
                    ? 0
                    : -1;
            if (r != 0 && soerr != 0)
                errno = soerr;
            else if (r != 0)
                errno = ETIMEDOUT;
        }
        if (r == 0) {
            fcntl(fd, F_SETFL, fl);
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            struct timeval tv = {.tv_sec = 5};
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
            *fdp = fd;
            rc = 0;
        } else {
            snprintf(err, errlen, "connect %s: %s", addr, strerror(errno));
            close(fd);
        }
    } else {
        snprintf(err, errlen, "socket: %s", strerror(errno));
    }
    freeaddrinfo(res);
    return rc;
}

int
rmq_conn_open(struct rmq_conn **out, const char *addr, int64_t connect_timeout_ms,
              rmq_request_cb on_request, void *arg, char *err, size_t errlen)
{
    int fd = -1;
    int rc = connect_to(addr, connect_timeout_ms, &fd, err, errlen);

    *out = NULL;
    if (rc != 0)
        return rc;
    struct rmq_conn *c = xcalloc(1, sizeof(*c));
    atomic_init(&c->refs, 1);
    atomic_init(&c->next_opaque, 1);
    c->addr = xstrdup(addr);
    c->fd = fd;
    c->on_request = on_request;
    c->arg = arg;
    pthread_mutex_init(&c->wmu, NULL);
    pthread_mutex_init(&c->mu, NULL);
    clock_cond_init(&c->cv);
    if (pthread_create(&c->reader, NULL, reader_main, c) != 0) {
        snprintf(err, errlen, "cannot start the reader thread");
        close(fd);
        free(c->addr);
        free(c);
        return ROOMD_EUNAVAIL;
    }
    *out = c;
    return 0;
}

static bool
write_full(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

static void
unlink_waiter(struct rmq_conn *c, struct waiter *w)
{
    for (struct waiter **pp = &c->waiters; *pp; pp = &(*pp)->next)
        if (*pp == w) {
            *pp = w->next;
            return;
        }
}

int
rmq_conn_invoke(struct rmq_conn *c, struct rmq_cmd *req, int64_t deadline_mono_ms, bool oneway,
                struct rmq_cmd **resp, char *err, size_t errlen)
{
    struct waiter w = {0};
    uint8_t *frame;
    size_t flen;
    int rc = 0;

    req->opaque = atomic_fetch_add(&c->next_opaque, 1);
    if (oneway)
        req->flag |= RMQ_FLAG_ONEWAY;
    rmq_cmd_encode(req, &frame, &flen);
    w.opaque = req->opaque;
    pthread_mutex_lock(&c->mu);
    if (c->dead) {
        pthread_mutex_unlock(&c->mu);
        free(frame);
        snprintf(err, errlen, "%s: connection closed", c->addr);
        return ROOMD_EUNAVAIL;
    }
    if (!oneway) {
        w.next = c->waiters;
        c->waiters = &w;
    }
    pthread_mutex_unlock(&c->mu);

    pthread_mutex_lock(&c->wmu);
    bool wrote = write_full(c->fd, frame, flen);
    pthread_mutex_unlock(&c->wmu);
    free(frame);
    if (!wrote) {
        mark_dead(c);
        snprintf(err, errlen, "%s: write failed", c->addr);
        rc = ROOMD_EUNAVAIL;
    }
    if (oneway) {
        return rc;
    }
    pthread_mutex_lock(&c->mu);
    if (rc == 0) {
        struct timespec ts;
        clock_mono_deadline(&ts, deadline_mono_ms - clock_mono_ms());
        while (!w.done && !c->dead && clock_mono_ms() < deadline_mono_ms)
            pthread_cond_timedwait(&c->cv, &c->mu, &ts);
        if (w.done) {
            *resp = w.resp;
        } else {
            snprintf(err, errlen, "%s: %s", c->addr,
                     c->dead ? "connection closed" : "no answer before the timeout");
            rc = ROOMD_EUNAVAIL;
        }
    }
    unlink_waiter(c, &w);
    bool timed_out = rc != 0 && !c->dead;
    pthread_mutex_unlock(&c->mu);
    if (timed_out)
        mark_dead(c); /* as the Java client closes the channel of a timed-out call */
    return rc;
}

bool
rmq_conn_alive(struct rmq_conn *c)
{
    pthread_mutex_lock(&c->mu);
    bool alive = !c->dead;
    pthread_mutex_unlock(&c->mu);
    return alive;
}

const char *
rmq_conn_addr(const struct rmq_conn *c)
{
    return c->addr;
}

void
rmq_conn_ref(struct rmq_conn *c)
{
    atomic_fetch_add(&c->refs, 1);
}

void
rmq_conn_break(struct rmq_conn *c)
{
    mark_dead(c);
}

void
rmq_conn_unref(struct rmq_conn *c)
{
    if (c == NULL || atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    mark_dead(c);
    pthread_join(c->reader, NULL);
    close(c->fd);
    pthread_mutex_destroy(&c->wmu);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c->addr);
    free(c);
}
