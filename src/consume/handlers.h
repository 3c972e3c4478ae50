/* SPDX-License-Identifier: Apache-2.0 */
/*
 * handlers.h: the consumer groups roomd ships, each a struct consume_handler
 * for the kit in group.h:
 *   activity.c     hyapp-activity-room-outbox (reference: gift totals and
 *                  rocket launches per room, transactional with the inbox)
 *   notice.c       hyapp-notice-room-outbox (notice_delivery_events, then a
 *                  C2C private notice through the IM client)
 *   im_bridge.c    hyapp-room-im-bridge (the direct IM sink's actions)
 *   rocket_open.c  hyapp-room-rocket-open (holds wake-ups until launch_at,
 *                  then LaunchRocket in-process)
 * roles.c starts the ones the config enables.
 */
#ifndef ROOMD_CONSUME_HANDLERS_H
#define ROOMD_CONSUME_HANDLERS_H

#include "consume/group.h"

struct conf;
struct room_service;

/* Fills h for the activity group named group (NULL = the default name).
 * service (borrowed, NULL = none): the activity service's room event entry
 * (sink_activity_open), called for every event before it is settled. */
struct sink;
void consume_activity_handler(struct consume_handler *h, const char *group, struct sink *service);

/* Sends one C2C private notice; the notice group's effect. to_uid gets
 * text; notice_id (the event_id) must make a resend a duplicate at the IM
 * side (MsgRandom/MsgSeq derived from it). Returns 0, a retryable ROOMD_E*
 * or ROOMD_EPERM, with err. Thread: the notice group's. */
typedef int (*consume_c2c_send)(void *arg, const char *app_code, int64_t to_uid,
                                const char *notice_id, const char *text, char *err, size_t errlen);

struct consume_notice_sender {
    consume_c2c_send send; /* NULL: IM disabled, notices recorded "skipped" */
    /* the circuit's probe of IM (consume_handler.probe; arg is this arg) */
    int (*probe)(void *arg, int64_t deadline_mono_ms, char *err, size_t errlen);
    void *arg;
    int64_t budget_ms; /* the longest one send may take */
};

/* Fills h for the notice group; sender (borrowed, must outlive the group)
 * delivers the C2C notice. */
void consume_notice_handler(struct consume_handler *h, const char *group,
                            const struct consume_notice_sender *sender);

/* Fills *s for the notice group from c: the IM client's C2C send when
 * tencent_im.enabled, else send = NULL. Returns 0 or an error with err.
 * consume_notice_sender_close frees what open made (zeroed *s is fine). */
int consume_notice_sender_open(struct consume_notice_sender *s, const struct conf *c, char *err,
                               size_t errlen);
void consume_notice_sender_close(struct consume_notice_sender *s);

/* Fills h for the IM bridge group (tencent_im_consumer_group): the same IM
 * actions as the direct IM sink, through its own IM client. Returns 0, or an
 * error with err (IM config unusable). The client is freed by
 * consume_im_bridge_release(h) after the group stopped. */
int consume_im_bridge_handler(struct consume_handler *h, const struct conf *c, char *err,
                              size_t errlen);
void consume_im_bridge_release(struct consume_handler *h);

/* Fills h for the rocket open group; LaunchRocket goes to rooms (borrowed,
 * must outlive the group). */
void consume_rocket_open_handler(struct consume_handler *h, const char *group,
                                 struct room_service *rooms);

/* The wake-up key "rocket-<app>-<room>-<rocket_id>" of a packed
 * roomd.v1.RocketLaunchWakeup (the rocket group's inbox key). */
int consume_rocket_key(void *arg, const uint8_t *data, size_t len, char *key, size_t keylen);

#endif
