/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_timing_flags.c: room_command_timing's activity_async_outbox and
 * tencent_im_async_outbox (seed 阶段耗时日志, issue 26): each true only when
 * the command wrote outbox rows and that side delivers them in the publish
 * mode: the direct sink when enabled (direct, dual), the broker's consumer
 * groups (mq, dual: activity always consumes the topic, IM only through the
 * IM bridge), never with the outbox worker off. Every combination of mode,
 * the two sinks, the IM bridge and the worker (answer_async_sinks).
 */
#include "helpers.h"

#include "conf/conf.h"
#include "room/answer.h"

#include <stdbool.h>
#include <string.h>

static void
test_flags_follow_each_sink(void **state)
{
    (void)state;
    static const enum publish_mode modes[] = {PUBLISH_DIRECT, PUBLISH_MQ, PUBLISH_DUAL};
    int checked = 0;

    for (size_t m = 0; m < 3; m++)
        for (int bits = 0; bits < 32; bits++) {
            struct conf c;
            struct timing tm;
            bool act = bits & 1, im = bits & 2, bridge = bits & 4, any = bits & 8,
                 worker = !(bits & 16);
            bool direct = modes[m] != PUBLISH_MQ, mq = modes[m] != PUBLISH_DIRECT;

            memset(&c, 0, sizeof(c));
            c.outbox_worker.enabled = worker;
            c.outbox_worker.publish_mode = modes[m];
            c.activity.enabled = act;
            c.tencent_im.enabled = im;
            c.rocketmq.room_outbox.tencent_im_consumer_enabled = bridge;
            memset(&tm, 0, sizeof(tm));
            answer_async_sinks(&c, any, &tm);
            bool want_act = any && worker && ((direct && act) || mq);
            bool want_im = any && worker && ((direct && im) || (mq && bridge));
            if (tm.activity_async != want_act || tm.im_async != want_im)
                fail_msg("mode %zu activity %d im %d bridge %d rows %d worker %d: "
                         "activity_async %d (want %d), im_async %d (want %d)",
                         m, act, im, bridge, any, worker, tm.activity_async, want_act, tm.im_async,
                         want_im);
            checked++;
        }
    assert_int_equal(checked, 96);
    /* the two flags are independent: IM on, activity off, direct */
    {
        struct conf c;
        struct timing tm = {0};
        memset(&c, 0, sizeof(c));
        c.outbox_worker.enabled = true;
        c.outbox_worker.publish_mode = PUBLISH_DIRECT;
        c.tencent_im.enabled = true;
        answer_async_sinks(&c, true, &tm);
        assert_false(tm.activity_async);
        assert_true(tm.im_async);
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flags_follow_each_sink),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
