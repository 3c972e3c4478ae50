/* SPDX-License-Identifier: Apache-2.0 */
/*
 * roomd_consumer.c: runs consumer groups of hyapp_room_outbox as a process
 * of their own, from the same YAML as roomd (its rocketmq and tencent_im
 * sections). The groups are in src/consume (roles.h); the rocket open group
 * needs the Room Cells and runs inside roomd only.
 *
 *   roomd_consumer -c FILE -g activity,notice,im-bridge
 *
 * Stops on SIGINT/SIGTERM after the message in hand; what was not yet
 * acknowledged is redelivered (and deduplicated by the inbox). SIGHUP
 * reopens the log file.
 */
#include "conf/conf.h"
#include "consume/roles.h"
#include "core/daemon.h"
#include "core/log.h"
#include "core/version.h"
#include "core/xmalloc.h"
#include "publish/bus.h"
#include "rocketmq/client.h"
#include "rocketmq/consumer.h"

#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out, int status) __attribute__((noreturn));

static void
usage(FILE *out, int status)
{
    fprintf(out, "usage: roomd_consumer -c FILE -g GROUP[,GROUP...]\n"
                 "       roomd_consumer --version | --help\n"
                 "  groups: activity, notice, im-bridge (or their group names)\n");
    exit(status);
}

/* SIGHUP: the log file was rotated. */
static void
reopen_log(void *arg)
{
    if (log_reopen() != 0)
        log_error("main", "cannot reopen the log file; still writing the old one", NULL);
}

int
main(int argc, char **argv)
{
    const char *path = NULL;
    char *groups = NULL, err[1024];
    unsigned roles = 0;
    int ch;

    static const struct option longopts[] = {
        {"config", required_argument, NULL, 'c'},
        {"groups", required_argument, NULL, 'g'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    while ((ch = getopt_long(argc, argv, "c:g:hV", longopts, NULL)) != -1) {
        switch (ch) {
        case 'c':
            path = optarg;
            break;
        case 'g':
            groups = optarg;
            break;
        case 'V':
            printf("roomd_consumer %s (commit %s)\n", roomd_version, roomd_commit);
            return 0;
        case 'h':
            usage(stdout, 0);
        default:
            usage(stderr, 2);
        }
    }
    if (path == NULL || groups == NULL)
        usage(stderr, 2);
    for (char *save = NULL, *g = strtok_r(groups, ",", &save); g; g = strtok_r(NULL, ",", &save)) {
        unsigned r = consume_role_parse(g);
        if (r == 0 || r == CONSUME_ROLE_ROCKET_OPEN) {
            fprintf(stderr, "roomd_consumer: %s: not a group this tool runs\n", g);
            usage(stderr, 2);
        }
        roles |= r;
    }

    struct conf *conf = NULL;
    if (conf_load(path, &conf, err, sizeof(err)) != 0)
        fatalx("config: %s", err);
    if (!conf->rocketmq.enabled)
        fatalx("rocketmq.enabled: the consumer groups need the broker");
    sigset_t stopset;
    daemon_start(conf->app.log_file, conf->app.log_level, &stopset);

    struct bus *bus = NULL;
    struct rmq_client *rmq = NULL; /* rocketmq.driver rocketmq (docs/rocketmq.md) */
    struct consume_roles *r = NULL;
    char *name = xasprintf("roomd_consumer/%s", conf->app.node_id);
    if (conf_rocketmq_driver(&conf->rocketmq) == CONF_MQ_ROCKETMQ) {
        struct consume_driver d;
        if (rmq_client_open(&rmq, &conf->rocketmq, name, NULL, err, sizeof(err)) != 0)
            fatalx("%s", err);
        rmq_consume_driver(&d, rmq);
        if (consume_roles_start_on(&r, conf, &d, NULL, roles, err, sizeof(err)) != 0)
            fatalx("%s", err);
    } else {
        if (bus_open(&bus, &conf->rocketmq, name, err, sizeof(err)) != 0)
            fatalx("rocketmq: %s", err);
        if (consume_roles_start(&r, conf, bus, NULL, roles, err, sizeof(err)) != 0)
            fatalx("%s", err);
    }
    free(name);
    log_info("main", "roomd_consumer started", "roles=%u node=%s", roles, conf->app.node_id);

    daemon_ready("consuming");
    daemon_wait(&stopset, reopen_log, NULL);
    consume_roles_stop(r);
    bus_unref(bus);
    rmq_client_close(rmq);
    log_info("main", "stopped", NULL);
    log_close();
    conf_free(conf);
    bus_library_shutdown();
    return 0;
}
