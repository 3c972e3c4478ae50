/*
 * roomd_consumer.c: runs consumer groups of hyapp_room_outbox as a process
 * of their own, from the same YAML as roomd (its rocketmq and tencent_im
 * sections). The groups are in src/consume (roles.h); the rocket open group
 * needs the Room Cells and runs inside roomd only.
 *
 *   roomd_consumer -c FILE -g activity,notice,im-bridge
 *
 * Stops on SIGINT/SIGTERM after the message in hand; what was not yet
 * acknowledged is redelivered (and deduplicated by the inbox).
 */
#include "conf/conf.h"
#include "consume/roles.h"
#include "core/daemon.h"
#include "core/log.h"
#include "core/xmalloc.h"
#include "publish/bus.h"

#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void
usage(void)
{
    fprintf(stderr, "usage: roomd_consumer -c FILE -g GROUP[,GROUP...]\n"
                    "  groups: activity, notice, im-bridge (or their group names)\n");
    exit(2);
}

int
main(int argc, char **argv)
{
    const char *path = NULL;
    char *groups = NULL, err[1024];
    unsigned roles = 0;
    int ch;

    while ((ch = getopt(argc, argv, "c:g:h")) != -1) {
        switch (ch) {
        case 'c':
            path = optarg;
            break;
        case 'g':
            groups = optarg;
            break;
        default:
            usage();
        }
    }
    if (path == NULL || groups == NULL)
        usage();
    for (char *save = NULL, *g = strtok_r(groups, ",", &save); g; g = strtok_r(NULL, ",", &save)) {
        unsigned r = consume_role_parse(g);
        if (r == 0 || r == CONSUME_ROLE_ROCKET_OPEN) {
            fprintf(stderr, "roomd_consumer: %s: not a group this tool runs\n", g);
            usage();
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
    char *name = xasprintf("roomd_consumer/%s", conf->app.node_id);
    if (bus_open(&bus, &conf->rocketmq, name, err, sizeof(err)) != 0)
        fatalx("rocketmq: %s", err);
    free(name);
    struct consume_roles *r = NULL;
    if (consume_roles_start(&r, conf, bus, NULL, roles, err, sizeof(err)) != 0)
        fatalx("%s", err);
    log_info("main", "roomd_consumer started", "roles=%u node=%s", roles, conf->app.node_id);

    daemon_wait(&stopset);
    consume_roles_stop(r);
    bus_unref(bus);
    log_info("main", "stopped", NULL);
    log_close();
    conf_free(conf);
    bus_library_shutdown();
    return 0;
}
