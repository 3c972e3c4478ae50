/* SPDX-License-Identifier: Apache-2.0 */
/*
 * roles.h: which consumer groups a process runs. roomd runs the groups its
 * config switches on (rocketmq.room_outbox.tencent_im_consumer_enabled,
 * notice_consumer_enabled, activity_consumer_enabled, and the rocket open
 * group whenever rocketmq.rocket_launch.enabled); tools/roomd_consumer.c
 * runs the outbox groups named on its command line. Each group is its own
 * thread and database (consume/group.h).
 */
#ifndef ROOMD_CONSUME_ROLES_H
#define ROOMD_CONSUME_ROLES_H

#include <stddef.h>

struct conf;
struct bus;
struct room_service;
struct consume_group;
struct consume_roles;

#define CONSUME_ROLE_IM_BRIDGE (1u << 0)
#define CONSUME_ROLE_NOTICE (1u << 1)
#define CONSUME_ROLE_ACTIVITY (1u << 2)
#define CONSUME_ROLE_ROCKET_OPEN (1u << 3)

/* The roles c switches on inside roomd (0 when rocketmq is disabled). */
unsigned consume_roles_configured(const struct conf *c);

/* Parses "im-bridge", "notice", "activity", "rocket-open" (or the group
 * names); returns the role bit or 0. */
unsigned consume_role_parse(const char *name);

/*
 * Starts one group per role bit in roles, on bus (borrowed; each group
 * takes a reference). rooms is needed by CONSUME_ROLE_ROCKET_OPEN (else
 * ROOMD_EINVAL). c must outlive the roles. Returns 0 and *out, or an error
 * with err (nothing left running). Thread: main.
 */
int consume_roles_start(struct consume_roles **out, const struct conf *c, struct bus *bus,
                        struct room_service *rooms, unsigned roles, char *err, size_t errlen);

/* 1 when every running group calling downstream ("im") had its last call
 * answered and its circuit closed, 0 when one did not, -1 when no group
 * calls it (or r is NULL). Thread: any; never blocks. */
int consume_roles_downstream_up(void *r, const char *downstream);

/* A readiness check (cluster/health.h) over the groups' downstreams: 0, or
 * ROOMD_EUNAVAIL with why naming each one not answering ("im unreachable
 * (hyapp-room-im-bridge, circuit open): ..."). arg is the roles. Thread:
 * any; never blocks. */
int consume_roles_ready(void *arg, char *why, size_t whylen);
/*
 * Opens the inbox of group (a group name, as in a dead letter's
 * Roomd-Group) the way this config's groups open theirs (driver, directory,
 * database: consume/group.h), with inbox_config.existing: nothing is
 * created, and a SQLite inbox that is not on this machine answers
 * ROOMD_ENOTFOUND. For the dead-letter operations (admin/dlq.c) on any
 * node, beside the running group's own handle. Returns 0 and *out (the
 * caller closes it with inbox_close), or ROOMD_EINVAL (a group name other
 * than [A-Za-z0-9._-], or a config error) / ROOMD_ENOTFOUND / ROOMD_EIO /
 * ROOMD_EUNAVAIL with err. Thread: any (the handle is the caller's).
 * Blocks on the database.
 */
struct consume_inbox;
int consume_group_inbox_open(struct consume_inbox **out, const struct conf *c, const char *group,
                             char *err, size_t errlen);

/* Stops every group (see consume_group_stop). NULL is a no-op. */
void consume_roles_stop(struct consume_roles *r);

/* The transport the groups run over (the seam between the kit's handlers
 * and a broker driver): JetStream's consumer kit (consume/group.c) for
 * consume_roles_start, RocketMQ's (rocketmq/consumer.c) through
 * consume_roles_start_on. start gets conn and the handler's topic
 * (rocketmq.room_outbox.topic or rocket_launch.topic). */
struct consume_handler;
struct consume_opts;
struct consume_stats;
struct consume_driver {
    int (*start)(void **g, void *conn, const char *topic, const struct consume_handler *h,
                 const struct consume_opts *o, char *err, size_t errlen);
    void (*stop)(void *g);
    void (*stats)(void *g, struct consume_stats *out);
    void *conn;
};
/* consume_roles_start over driver d (borrowed until stop). */
int consume_roles_start_on(struct consume_roles **out, const struct conf *c,
                           const struct consume_driver *d, struct room_service *rooms,
                           unsigned roles, char *err, size_t errlen);

#endif
