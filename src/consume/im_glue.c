/* SPDX-License-Identifier: Apache-2.0 */
/*
 * im_glue.c: the IM side of two consumer groups, through the Tencent IM
 * client of the direct publishers (publish/tim_client.h):
 *   hyapp-room-im-bridge      tim_client_deliver(): the same IM actions as
 *                             the direct IM sink (group system messages,
 *                             membership), deduplicated by IM through the
 *                             Random derived from the event_id;
 *   hyapp-notice-room-outbox  tim_send_c2c(): the private notice, MsgRandom
 *                             and MsgSeq derived from the notice id.
 * Each group gets its own client (its own curl pool and UserSig cache).
 * IM's rate limit, still answered at the end of an event's budget, comes
 * back from the client as ROOMD_ELIMIT and is handed to the group as
 * ROOMD_EUNAVAIL (limit_is_outage): a transport failure (group.h), Nak'ed
 * with the outage delay, no reconsume counted, like IM not answering; and
 * never a permanent failure to a kit that does not know ROOMD_ELIMIT as
 * retryable (roomd_err_retryable).
 */
#include "consume/handlers.h"

#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/xmalloc.h"
#include "publish/tim_client.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A private notice waits in IM for an offline user this long (7 days max). */
#define NOTICE_LIFETIME_S (7 * 24 * 3600)

struct im_ctx {
    struct tim_client *tim;
    int64_t budget_ms; /* one event's IM calls, all together */
};

static int64_t
budget_of(const struct conf *c)
{
    int64_t b = c->outbox_worker.publish_timeout_ms;
    int64_t t = c->tencent_im.timeout_ms;

    return b > t ? b : (t > 0 ? t : 3000);
}

static struct im_ctx *
im_ctx_open(const struct conf *c, const char *key, char *err, size_t errlen)
{
    struct im_ctx *x = xcalloc(1, sizeof(*x));
    char e[256] = "";

    if (!c->tencent_im.enabled) {
        snprintf(err, errlen, "%s: needs tencent_im.enabled: true", key);
        free(x);
        return NULL;
    }
    if (tim_client_open(&x->tim, &c->tencent_im, e, sizeof(e)) != 0) {
        snprintf(err, errlen, "%s: %s", key, e);
        free(x);
        return NULL;
    }
    x->budget_ms = budget_of(c);
    return x;
}

static void
im_ctx_close(struct im_ctx *x)
{
    if (x == NULL)
        return;
    tim_client_close(x->tim);
    free(x);
}

/* The groups' circuit probe (group.h): one account check, a read. Any IM
 * answer, an error code too, is an answer, but for IM's rate limit: while
 * IM rate-limits roomd (an answer within the last second, or this check's)
 * the probe reports an outage, so an open circuit stays open until IM
 * admits calls again. */
static int
im_probe(void *arg, int64_t deadline, char *err, size_t errlen)
{
    struct im_ctx *x = arg;

    if (tim_client_rate_limited(x->tim, 1000)) {
        snprintf(err, errlen, "tim: IM rate-limits roomd (an outage: no attempt counted)");
        return ROOMD_EUNAVAIL;
    }
    json_t *req = json_pack("{s:[{s:s}]}", "CheckItem", "UserID", "roomd_probe");
    int rc = tim_client_call(x->tim, "im_open_login_svc/account_check", req, deadline, NULL, NULL,
                             err, errlen);

    json_decref(req);
    return rc == ROOMD_EUNAVAIL || rc == ROOMD_ELIMIT ? ROOMD_EUNAVAIL : 0;
}

/* IM's rate limit (ROOMD_ELIMIT) as the consumer kits' outage: ROOMD_EUNAVAIL. */
static int
limit_is_outage(int rc, char *err, size_t errlen)
{
    if (rc != ROOMD_ELIMIT)
        return rc;
    size_t n = strlen(err);
    if (n + 1 < errlen)
        snprintf(err + n, errlen - n, "%s", " (IM rate limit: an outage)");
    return ROOMD_EUNAVAIL;
}

/* ==== notice: C2C ==== */

static int
c2c_send(void *arg, const char *app_code, int64_t to_uid, const char *notice_id, const char *text,
         char *err, size_t errlen)
{
    struct im_ctx *x = arg;
    char account[32];

    (void)app_code;
    snprintf(account, sizeof(account), "%" PRId64, to_uid);
    return limit_is_outage(tim_send_c2c(x->tim, account, text, "RoomNotice", notice_id,
                                        NOTICE_LIFETIME_S, clock_mono_ms() + x->budget_ms, err,
                                        errlen),
                           err, errlen);
}

int
consume_notice_sender_open(struct consume_notice_sender *s, const struct conf *c, char *err,
                           size_t errlen)
{
    memset(s, 0, sizeof(*s));
    if (!c->tencent_im.enabled)
        return 0; /* notices are recorded as "skipped" */
    struct im_ctx *x = im_ctx_open(c, "rocketmq.room_outbox.notice_consumer_enabled", err, errlen);
    if (x == NULL)
        return ROOMD_EINVAL;
    s->send = c2c_send;
    s->probe = im_probe;
    s->arg = x;
    s->budget_ms = x->budget_ms;
    return 0;
}

void
consume_notice_sender_close(struct consume_notice_sender *s)
{
    if (s->send == c2c_send)
        im_ctx_close(s->arg);
    memset(s, 0, sizeof(*s));
}

/* ==== IM bridge ==== */

static int
bridge_handle(void *arg, struct consume_msg *m)
{
    struct im_ctx *x = arg;

    return limit_is_outage(tim_client_deliver(x->tim, m->data, m->len, NULL,
                                              clock_mono_ms() + x->budget_ms, m->err,
                                              sizeof(m->err)),
                           m->err, sizeof(m->err));
}

int
consume_im_bridge_handler(struct consume_handler *h, const struct conf *c, char *err, size_t errlen)
{
    memset(h, 0, sizeof(*h));
    struct im_ctx *x =
        im_ctx_open(c, "rocketmq.room_outbox.tencent_im_consumer_enabled", err, errlen);
    if (x == NULL)
        return ROOMD_EINVAL;
    const char *g = c->rocketmq.room_outbox.tencent_im_consumer_group;
    h->group = g && *g ? g : "hyapp-room-im-bridge";
    h->stream = BUS_STREAM_OUTBOX;
    h->handle = bridge_handle;
    h->max_handle_ms = x->budget_ms;
    h->arg = x;
    h->downstream = "im";
    h->probe = im_probe;
    return 0;
}

void
consume_im_bridge_release(struct consume_handler *h)
{
    im_ctx_close(h->arg);
    h->arg = NULL;
}
