/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sink_tim.c: the direct Tencent IM sink. A thin wrapper: publish() is
 * tim_client_deliver_event() (tim_events.c), whose 0 / ROOMD_ERETRY /
 * ROOMD_EPERM and "tim <code>: ..." reason go straight to the worker, so a
 * permanent IM error fails the row on its first attempt.
 */
#include "publish/sink_tim.h"

#include "conf/conf.h"
#include "core/err.h"
#include "core/log.h"
#include "core/xmalloc.h"
#include "publish/sink.h"
#include "publish/tim_client.h"

#include <jansson.h>
#include <stdlib.h>

struct sink_tim {
    struct sink base; /* first: the worker sees a struct sink * */
    struct tim_client *client;
};

static int
tim_publish(struct sink *s, const struct outbox_event *ev, int64_t deadline, char *err,
            size_t errlen)
{
    struct sink_tim *t = (struct sink_tim *)s;

    return tim_client_deliver_event(t->client, ev, deadline, err, errlen);
}

/* The circuit's probe (sink.h): one account check (a read, no state
 * changed). Any IM answer, an error code too, is an answer. */
static int
tim_probe(struct sink *s, int64_t deadline, char *err, size_t errlen)
{
    struct sink_tim *t = (struct sink_tim *)s;
    json_t *req = json_pack("{s:[{s:s}]}", "CheckItem", "UserID", "roomd_probe");
    int rc = tim_client_call(t->client, "im_open_login_svc/account_check", req, deadline, NULL,
                             NULL, err, errlen);

    json_decref(req);
    return rc == ROOMD_EUNAVAIL ? ROOMD_EUNAVAIL : 0;
}

static void
tim_close(struct sink *s)
{
    struct sink_tim *t = (struct sink_tim *)s;

    tim_client_close(t->client);
    free(t);
}

int
sink_tim_open(struct sink **out, const struct conf_tencent_im *cfg, char *err, size_t errlen)
{
    struct sink_tim *t;
    struct tim_client *c = NULL;
    int rc;

    *out = NULL;
    if ((rc = tim_client_open(&c, cfg, err, errlen)) != 0)
        return rc;
    t = xcalloc(1, sizeof(*t));
    /* accepts NULL: every room event has an IM action */
    sink_init(&t->base, "tim", SINK_BIT_TIM, NULL, tim_publish, tim_close, false);
    t->client = c;
    t->base.probe = tim_probe;
    *out = &t->base;
    log_info("tim", "IM sink ready", "base_url=%s group_type=%s timeout_ms=%lld", cfg->base_url,
             tim_client_group_type(c), (long long)cfg->timeout_ms);
    return 0;
}
