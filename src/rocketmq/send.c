/* SPDX-License-Identifier: Apache-2.0 */
/*
 * send.c: sending on the RocketMQ client (client.h): SEND_MESSAGE_V2 with
 * its properties and retries, and the 4.x delay levels (timer messages on
 * a 5.x broker).
 */
#include "rocketmq/internal.h"

#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/xmalloc.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The default messageDelayLevel, in ms (a 4.x broker's levels 1..18). */
static const int64_t delay_levels_ms[] = {1000,   5000,   10000,   30000,   60000,   120000,
                                          180000, 240000, 300000,  360000,  420000,  480000,
                                          540000, 600000, 1200000, 1800000, 3600000, 7200000};
#define NLEVELS ((int)(sizeof(delay_levels_ms) / sizeof(delay_levels_ms[0])))

/* ==== sending ==== */

static void
props_add(char **buf, size_t *len, size_t *cap, const char *k, const char *v)
{
    if (v == NULL || *v == '\0')
        return;
    size_t kl = strlen(k), vl = strlen(v);
    if (*len + kl + vl + 3 > *cap) {
        *cap = 2 * (*len + kl + vl + 3);
        *buf = xrealloc(*buf, *cap);
    }
    memcpy(*buf + *len, k, kl);
    (*buf)[*len + kl] = 1;
    memcpy(*buf + *len + kl + 1, v, vl);
    (*buf)[*len + kl + 1 + vl] = 2;
    *len += kl + vl + 2;
    (*buf)[*len] = '\0';
}

/* UNIQ_KEY as MessageClientIDSetter: 16 bytes in upper-case hex (ip, pid,
 * a per-process value, ms since start, counter). */
static void
uniq_key(struct rmq_client *c, char out[33])
{
    uint32_t n = (uint32_t)atomic_fetch_add(&c->uniq_counter, 1);
    uint64_t t = (uint64_t)clock_wall_ms();

    snprintf(out, 33, "7F000001%04X%08X%08X%04X", (unsigned)getpid() & 0xFFFF,
             (unsigned)((uintptr_t)c & 0xFFFFFFFF), (unsigned)(t & 0xFFFFFFFF), n & 0xFFFF);
}

/* The 4.x delay level for deliver_at: the longest one not later than it. */
static int
delay_level_for(int64_t wait_ms)
{
    int level = 0;

    for (int i = 0; i < NLEVELS; i++)
        if (delay_levels_ms[i] <= wait_ms)
            level = i + 1;
    return level;
}

static bool
sent_ok(int code)
{
    return code == 0 || code == 10 || code == 11 || code == 12;
}

int
rmq_send(struct rmq_client *c, const char *producer_group, const struct rmq_msg *m,
         int64_t deadline_mono_ms, struct rmq_send_result *res, char *err, size_t errlen)
{
    char *topic = rmq_wrap(c, m->topic), *group = rmq_wrap(c, producer_group);
    int attempts = 1 + c->retry;
    int rc = ROOMD_EUNAVAIL;
    char uk[33];

    memset(res, 0, sizeof(*res));
    uniq_key(c, uk);
    snprintf(err, errlen, "send deadline passed");
    for (int i = 0; i < attempts; i++) {
        int64_t left = deadline_mono_ms - clock_mono_ms();
        if (left <= 0)
            break;
        int64_t dl = clock_mono_ms() + (left < c->send_timeout_ms ? left : c->send_timeout_ms);
        struct queue_ref q;
        char addr[256];
        rc = rmq_pick_queue(c, topic, m->shard_key, dl, &q, addr, sizeof(addr), err, errlen);
        if (rc != 0) {
            if (rc == ROOMD_EUNAVAIL)
                continue;
            break;
        }
        /* properties: KEYS, TAGS, WAIT, UNIQ_KEY, then the delay */
        char *props = NULL;
        size_t plen = 0, pcap = 0;
        props_add(&props, &plen, &pcap, "KEYS", m->keys);
        props_add(&props, &plen, &pcap, "TAGS", m->tags);
        props_add(&props, &plen, &pcap, "WAIT", "true");
        props_add(&props, &plen, &pcap, "UNIQ_KEY", uk);
        props_add(&props, &plen, &pcap, "RETRY_TOPIC", m->retry_topic);
        pthread_mutex_lock(&c->mu);
        bool timers = c->broker_version >= V5_0_0 && !c->timers_refused;
        pthread_mutex_unlock(&c->mu);
        int64_t wait = m->deliver_at_ms - clock_wall_ms();
        char num[32];
        res->delay_level = 0;
        if (m->deliver_at_ms > 0 && wait > 0) {
            if (timers) {
                snprintf(num, sizeof(num), "%" PRId64, m->deliver_at_ms);
                props_add(&props, &plen, &pcap, "TIMER_DELIVER_MS", num);
            } else if ((res->delay_level = delay_level_for(wait)) > 0) {
                snprintf(num, sizeof(num), "%d", res->delay_level);
                props_add(&props, &plen, &pcap, "DELAY", num);
            }
        }
        struct rmq_cmd *req = rmq_cmd_new(RC_SEND_MESSAGE_V2), *resp = NULL;
        rmq_cmd_set(req, "a", group);
        rmq_cmd_set(req, "b", topic);
        rmq_cmd_set(req, "c", DEFAULT_TOPIC);
        rmq_cmd_set_int(req, "d", 4);
        rmq_cmd_set_int(req, "e", q.qid);
        rmq_cmd_set_int(req, "f", 0);
        rmq_cmd_set_int(req, "g", clock_wall_ms());
        rmq_cmd_set_int(req, "h", 0);
        rmq_cmd_set(req, "i", props ? props : "");
        rmq_cmd_set_int(req, "j", 0);
        rmq_cmd_set(req, "k", "false");
        rmq_cmd_set(req, "m", "false");
        rmq_cmd_set(req, "n", q.broker);
        rmq_cmd_set_body(req, m->body, m->len);
        free(props);
        rc = rmq_call(c, addr, req, dl, &resp, err, errlen);
        rmq_cmd_free(req);
        rmq_note_answer(c, rc == 0, err);
        if (rc != 0) {
            rc = ROOMD_EUNAVAIL; /* no answer: the route may have moved too */
            rmq_invalidate_route(c, topic);
            continue;
        }
        pthread_mutex_lock(&c->mu);
        c->broker_version = resp->version;
        pthread_mutex_unlock(&c->mu);
        res->code = resp->code;
        if (sent_ok(resp->code)) {
            snprintf(res->msg_id, sizeof(res->msg_id), "%s", rmq_cmd_get(resp, "msgId") ?: "");
            res->queue_id = (int)rmq_cmd_int(resp, "queueId", q.qid);
            res->queue_offset = rmq_cmd_int(resp, "queueOffset", -1);
            rmq_cmd_free(resp);
            rc = 0;
            break;
        }
        const char *remark = resp->remark ? resp->remark : "";
        if (rmq_acl_refused(resp)) {
            rmq_acl_error(err, errlen);
            rmq_note_answer(c, false, err); /* readiness names the key too */
            rc = ROOMD_EUNAVAIL;
            rmq_cmd_free(resp);
            break; /* a configuration fault: no other try does better */
        }
        if (timers && resp->code == RS_SYSTEM_ERROR && strstr(remark, "WHEEL_TIMER_NOT_ENABLE")) {
            pthread_mutex_lock(&c->mu);
            c->timers_refused = true; /* timerWheelEnable=false: delay levels from now on */
            pthread_mutex_unlock(&c->mu);
            log_warn("rocketmq", "broker refuses timer messages; using delay levels", "addr=%s",
                     addr);
            attempts++;
        }
        snprintf(err, errlen, "send to %s queue %s/%d: code %d: %.120s", topic, q.broker, q.qid,
                 resp->code, remark);
        int code = resp->code;
        rmq_cmd_free(resp);
        if (code == RS_MESSAGE_ILLEGAL) {
            rc = ROOMD_EPERM;
            break;
        }
        rc = code == RS_SERVICE_NOT_AVAILABLE || code == RS_GO_AWAY ? ROOMD_EUNAVAIL : ROOMD_ERETRY;
        if (code == RS_TOPIC_NOT_EXIST || code == RS_NO_PERMISSION)
            rmq_invalidate_route(c, topic);
    }
    pthread_mutex_lock(&c->mu);
    if (rc == 0)
        c->stats.sends_ok++;
    else if (rc == ROOMD_EUNAVAIL)
        c->stats.sends_unavailable++;
    else
        c->stats.sends_failed++;
    pthread_mutex_unlock(&c->mu);
    free(topic);
    free(group);
    return rc;
}

int
rmq_delay_level_at_least(int64_t delay_ms)
{
    for (int i = 0; i < NLEVELS; i++)
        if (delay_levels_ms[i] >= delay_ms)
            return i + 1;
    return NLEVELS;
}

int
rmq_delay_level_not_later(int64_t delay_ms)
{
    int level = delay_level_for(delay_ms);

    return level > 0 ? level : 1;
}
