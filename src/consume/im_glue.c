/*
 * im_glue.c: the IM side of the notice and IM bridge groups. Both need the
 * Tencent IM client (publish/tim_client.[ch], the direct publishers issue);
 * until it is part of the build, a config that needs IM from a consumer
 * group is refused at start-up with a clear message, and the notice group
 * runs with IM disabled (notices recorded as "skipped").
 */
#include "consume/handlers.h"

#include "conf/conf.h"
#include "core/err.h"

#include <stdio.h>
#include <string.h>

int
consume_notice_sender_open(struct consume_notice_sender *s, const struct conf *c, char *err,
                           size_t errlen)
{
    memset(s, 0, sizeof(*s));
    if (c->tencent_im.enabled) {
        snprintf(err, errlen,
                 "rocketmq.room_outbox.notice_consumer_enabled: the IM client is "
                 "not in this build");
        return ROOMD_EINVAL;
    }
    return 0;
}

void
consume_notice_sender_close(struct consume_notice_sender *s)
{
    memset(s, 0, sizeof(*s));
}

int
consume_im_bridge_handler(struct consume_handler *h, const struct conf *c, char *err, size_t errlen)
{
    (void)c;
    memset(h, 0, sizeof(*h));
    snprintf(err, errlen,
             "rocketmq.room_outbox.tencent_im_consumer_enabled: the IM client is "
             "not in this build");
    return ROOMD_EINVAL;
}

void
consume_im_bridge_release(struct consume_handler *h)
{
    (void)h;
}
