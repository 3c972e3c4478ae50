/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pull.c: the consumer-side calls of the RocketMQ client (client.h, used
 * by rocketmq/consumer.c): read queues, the consumer list, offsets, PULL
 * with the records' decoding, and CONSUMER_SEND_MSG_BACK.
 */
#include "rocketmq/internal.h"

#include "core/clock.h"
#include "core/err.h"
#include "core/xmalloc.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int
rmq_read_queues(struct rmq_client *c, const char *topic, int64_t deadline_mono_ms,
                struct rmq_mq **out, int *n, char *err, size_t errlen)
{
    char *wire = rmq_wrap(c, topic);
    int rc = rmq_refresh_route(c, wire, deadline_mono_ms, err, errlen);

    *out = NULL;
    *n = 0;
    if (rc == 0) {
        pthread_mutex_lock(&c->mu);
        for (size_t i = 0; i < c->nroutes; i++) {
            struct route *r = &c->routes[i];
            if (strcmp(r->topic, wire) != 0)
                continue;
            *out = xcalloc((size_t)r->nrq + 1, sizeof(**out));
            for (int q = 0; q < r->nrq; q++) {
                struct rmq_mq *m = &(*out)[q];
                snprintf(m->topic, sizeof(m->topic), "%s", wire);
                snprintf(m->broker, sizeof(m->broker), "%s", r->rq[q].broker);
                m->qid = r->rq[q].qid;
                for (int b = 0; b < r->nbrokers; b++)
                    if (strcmp(r->bnames[b], m->broker) == 0 && r->masters[b])
                        snprintf(m->addr, sizeof(m->addr), "%s", r->masters[b]);
            }
            *n = r->nrq;
        }
        pthread_mutex_unlock(&c->mu);
    }
    free(wire);
    return rc;
}

/* One request to a broker: 0 and *resp (any code), or ROOMD_EUNAVAIL /
 * ROOMD_EINVAL (the signature refused) with err. */
static int
broker_call(struct rmq_client *c, const char *addr, struct rmq_cmd *req, int64_t deadline,
            struct rmq_cmd **resp, char *err, size_t errlen)
{
    int rc = rmq_call(c, addr, req, deadline, resp, err, errlen);

    rmq_note_answer(c, rc == 0, err);
    if (rc != 0)
        return ROOMD_EUNAVAIL;
    if (rmq_acl_refused(*resp)) {
        rmq_acl_error(err, errlen);
        rmq_cmd_free(*resp);
        *resp = NULL;
        return ROOMD_EINVAL;
    }
    return 0;
}

int
rmq_consumer_ids(struct rmq_client *c, const char *addr, const char *group,
                 int64_t deadline_mono_ms, char ***ids, int *n, char *err, size_t errlen)
{
    char *wg = rmq_wrap(c, group);
    struct rmq_cmd *req = rmq_cmd_new(38), *resp = NULL;
    int rc;

    *ids = NULL;
    *n = 0;
    rmq_cmd_set(req, "consumerGroup", wg);
    rc = broker_call(c, addr, req, deadline_mono_ms, &resp, err, errlen);
    rmq_cmd_free(req);
    free(wg);
    if (rc != 0)
        return rc;
    if (resp->code != 0) {
        snprintf(err, errlen, "consumer list: code %d: %s", resp->code,
                 resp->remark ? resp->remark : "");
        rmq_cmd_free(resp);
        return ROOMD_ERETRY;
    }
    json_t *j = json_loadb((const char *)resp->body, resp->body_len, 0, NULL);
    json_t *list = json_object_get(j, "consumerIdList");
    size_t i;
    json_t *v;
    *ids = xcalloc(json_array_size(list) + 1, sizeof(char *));
    json_array_foreach(list, i, v)
    {
        if (json_is_string(v))
            (*ids)[(*n)++] = xstrdup(json_string_value(v));
    }
    json_decref(j);
    rmq_cmd_free(resp);
    return 0;
}

int
rmq_query_offset(struct rmq_client *c, const struct rmq_mq *mq, const char *group,
                 int64_t deadline_mono_ms, int64_t *offset, char *err, size_t errlen)
{
    char *wg = rmq_wrap(c, group);
    struct rmq_cmd *req = rmq_cmd_new(14), *resp = NULL;
    int rc;

    rmq_cmd_set(req, "consumerGroup", wg);
    rmq_cmd_set(req, "topic", mq->topic);
    rmq_cmd_set_int(req, "queueId", mq->qid);
    rc = broker_call(c, mq->addr, req, deadline_mono_ms, &resp, err, errlen);
    rmq_cmd_free(req);
    free(wg);
    if (rc != 0)
        return rc;
    if (resp->code == RMQ_SUCCESS)
        *offset = rmq_cmd_int(resp, "offset", 0);
    else if (resp->code == RMQ_QUERY_NOT_FOUND)
        *offset = -1;
    else {
        snprintf(err, errlen, "query offset: code %d: %s", resp->code,
                 resp->remark ? resp->remark : "");
        rc = ROOMD_ERETRY;
    }
    rmq_cmd_free(resp);
    return rc;
}

int
rmq_update_offset(struct rmq_client *c, const struct rmq_mq *mq, const char *group, int64_t offset,
                  int64_t deadline_mono_ms, char *err, size_t errlen)
{
    char *wg = rmq_wrap(c, group);
    struct rmq_cmd *req = rmq_cmd_new(15), *resp = NULL;
    int rc;

    rmq_cmd_set(req, "consumerGroup", wg);
    rmq_cmd_set(req, "topic", mq->topic);
    rmq_cmd_set_int(req, "queueId", mq->qid);
    rmq_cmd_set_int(req, "commitOffset", offset);
    rc = broker_call(c, mq->addr, req, deadline_mono_ms, &resp, err, errlen);
    rmq_cmd_free(req);
    free(wg);
    if (rc == 0 && resp->code != 0) {
        snprintf(err, errlen, "update offset: code %d", resp->code);
        rc = ROOMD_ERETRY;
    }
    rmq_cmd_free(resp);
    return rc;
}

/* GET_MAX_OFFSET (30) / GET_MIN_OFFSET (31) of mq: *offset. */
static int
queue_offset(struct rmq_client *c, int code, const struct rmq_mq *mq, int64_t deadline_mono_ms,
             int64_t *offset, char *err, size_t errlen)
{
    struct rmq_cmd *req = rmq_cmd_new(code), *resp = NULL;
    int rc;

    rmq_cmd_set(req, "topic", mq->topic);
    rmq_cmd_set_int(req, "queueId", mq->qid);
    rc = broker_call(c, mq->addr, req, deadline_mono_ms, &resp, err, errlen);
    rmq_cmd_free(req);
    if (rc != 0)
        return rc;
    if (resp->code == RMQ_SUCCESS) {
        *offset = rmq_cmd_int(resp, "offset", 0);
    } else {
        snprintf(err, errlen, "%s offset: code %d: %s", code == 30 ? "max" : "min", resp->code,
                 resp->remark ? resp->remark : "");
        rc = ROOMD_ERETRY;
    }
    rmq_cmd_free(resp);
    return rc;
}

int
rmq_max_offset(struct rmq_client *c, const struct rmq_mq *mq, int64_t deadline_mono_ms,
               int64_t *offset, char *err, size_t errlen)
{
    return queue_offset(c, 30, mq, deadline_mono_ms, offset, err, errlen);
}

int
rmq_min_offset(struct rmq_client *c, const struct rmq_mq *mq, int64_t deadline_mono_ms,
               int64_t *offset, char *err, size_t errlen)
{
    return queue_offset(c, 31, mq, deadline_mono_ms, offset, err, errlen);
}

static uint32_t
rd32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int64_t
rd64(const uint8_t *p)
{
    return (int64_t)((uint64_t)rd32(p) << 32 | rd32(p + 4));
}

const char *
rmq_prop(const struct rmq_message_ext *m, const char *name, char *buf, size_t len)
{
    size_t nl = strlen(name);
    const char *p = m->props, *end = m->props + m->props_len;

    while (p < end) {
        const char *sep = memchr(p, 2, (size_t)(end - p));
        const char *e = sep ? sep : end;
        const char *eq = memchr(p, 1, (size_t)(e - p));
        if (eq && (size_t)(eq - p) == nl && memcmp(p, name, nl) == 0) {
            size_t vl = (size_t)(e - eq - 1);
            if (vl >= len)
                vl = len - 1;
            memcpy(buf, eq + 1, vl);
            buf[vl] = '\0';
            return buf;
        }
        p = e + 1;
    }
    return NULL;
}

/* MessageDecoder.decode of the records in body (V1/V2 magic, IPv4/IPv6). */
static int
decode_records(const uint8_t *b, size_t len, struct rmq_pulled *out)
{
    size_t pos = 0, cap = 0;

    while (len - pos >= 8) {
        const uint8_t *r = b + pos;
        uint32_t size = rd32(r), magic = rd32(r + 4);
        if (size < 8 || size > len - pos)
            return -1;
        bool v2 = magic == 0xDAA320ABu;
        size_t o = 12;
        struct rmq_message_ext m = {0};
        if (size < 4 * 5 + 8 * 2 + 4 + 8)
            return -1;
        m.queue_id = (int)rd32(r + o);
        o += 4;
        o += 4; /* flag */
        m.queue_offset = rd64(r + o);
        o += 8;
        m.commit_offset = rd64(r + o);
        o += 8;
        uint32_t sys = rd32(r + o);
        o += 4;
        m.born_ms = rd64(r + o);
        o += 8;                         /* born timestamp */
        o += (sys & 0x10 ? 16 : 4) + 4; /* born host */
        m.store_ms = rd64(r + o);
        o += 8;                         /* store timestamp */
        o += (sys & 0x20 ? 16 : 4) + 4; /* store host */
        if (o + 16 > size)
            return -1;
        m.reconsume = (int)rd32(r + o);
        o += 4 + 8;
        uint32_t bl = rd32(r + o);
        o += 4;
        if (o + bl > size)
            return -1;
        m.body = r + o;
        m.len = bl;
        o += bl;
        size_t tl;
        if (v2) {
            tl = (size_t)(r[o] << 8 | r[o + 1]);
            o += 2;
        } else {
            tl = r[o];
            o += 1;
        }
        if (o + tl + 2 > size)
            return -1;
        m.topic = xstrndup((const char *)r + o, tl);
        o += tl;
        size_t pl = (size_t)(r[o] << 8 | r[o + 1]);
        o += 2;
        if (o + pl > size) {
            free(m.topic);
            return -1;
        }
        m.props = (const char *)r + o;
        m.props_len = pl;
        m.sys_flag = (int)sys;
        out->msgs = xgrow(out->msgs, (size_t)out->n + 1, &cap, sizeof(*out->msgs));
        out->msgs[out->n++] = m;
        pos += size;
    }
    return 0;
}

int
rmq_pull(struct rmq_client *c, const struct rmq_mq *mq, const char *group, int64_t offset, int max,
         int64_t deadline_mono_ms, struct rmq_pulled *out, char *err, size_t errlen)
{
    char *wg = rmq_wrap(c, group);
    struct rmq_cmd *req = rmq_cmd_new(11), *resp = NULL;
    int rc;

    memset(out, 0, sizeof(*out));
    rmq_cmd_set(req, "consumerGroup", wg);
    rmq_cmd_set(req, "topic", mq->topic);
    rmq_cmd_set_int(req, "queueId", mq->qid);
    rmq_cmd_set_int(req, "queueOffset", offset);
    rmq_cmd_set_int(req, "maxMsgNums", max);
    rmq_cmd_set_int(req, "sysFlag", 4); /* SUBSCRIPTION: this request's "*" */
    rmq_cmd_set_int(req, "commitOffset", 0);
    rmq_cmd_set_int(req, "suspendTimeoutMillis", 0);
    rmq_cmd_set(req, "subscription", "*");
    rmq_cmd_set_int(req, "subVersion", clock_wall_ms());
    rmq_cmd_set(req, "expressionType", "TAG");
    rc = broker_call(c, mq->addr, req, deadline_mono_ms, &resp, err, errlen);
    rmq_cmd_free(req);
    free(wg);
    if (rc != 0)
        return rc;
    out->code = resp->code;
    out->next_begin = rmq_cmd_int(resp, "nextBeginOffset", offset);
    if (resp->code == RMQ_SUCCESS) {
        out->raw = resp->body;
        resp->body = NULL;
        if (decode_records(out->raw, resp->body_len, out) != 0) {
            snprintf(err, errlen, "pull %s/%d: undecodable records", mq->topic, mq->qid);
            rmq_pulled_free(out);
            rc = ROOMD_ERETRY;
        }
    } else if (resp->code != RMQ_PULL_NOT_FOUND && resp->code != RMQ_PULL_RETRY_IMMEDIATELY &&
               resp->code != RMQ_PULL_OFFSET_MOVED) {
        snprintf(err, errlen, "pull %s/%d: code %d: %s", mq->topic, mq->qid, resp->code,
                 resp->remark ? resp->remark : "");
        rc = ROOMD_ERETRY;
    }
    rmq_cmd_free(resp);
    return rc;
}

void
rmq_pulled_free(struct rmq_pulled *p)
{
    for (int i = 0; i < p->n; i++)
        free(p->msgs[i].topic);
    free(p->msgs);
    free(p->raw);
    memset(p, 0, sizeof(*p));
}

int
rmq_send_back(struct rmq_client *c, const struct rmq_mq *mq, const char *group,
              const struct rmq_message_ext *m, int delay_level, int max_reconsume,
              int64_t deadline_mono_ms, char *err, size_t errlen)
{
    char *wg = rmq_wrap(c, group);
    struct rmq_cmd *req = rmq_cmd_new(36), *resp = NULL;
    char origin[128];
    int rc;

    rmq_cmd_set_int(req, "offset", m->commit_offset);
    rmq_cmd_set(req, "group", wg);
    rmq_cmd_set_int(req, "delayLevel", delay_level);
    rmq_cmd_set(req, "originMsgId", rmq_prop(m, "ORIGIN_MESSAGE_ID", origin, sizeof(origin)) ?: "");
    rmq_cmd_set(req, "originTopic", m->topic);
    rmq_cmd_set(req, "unitMode", "false");
    rmq_cmd_set_int(req, "maxReconsumeTimes", max_reconsume);
    rc = broker_call(c, mq->addr, req, deadline_mono_ms, &resp, err, errlen);
    rmq_cmd_free(req);
    free(wg);
    if (rc == 0 && resp->code != 0) {
        snprintf(err, errlen, "send back: code %d: %s", resp->code,
                 resp->remark ? resp->remark : "");
        rc = ROOMD_ERETRY;
    }
    rmq_cmd_free(resp);
    return rc;
}
