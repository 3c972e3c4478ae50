/*
 * main.c: roomd. Loads and validates the config, opens the modules in
 * dependency order (store -> group commit -> wallet -> lease -> projection ->
 * broker -> sinks -> outbox worker -> room service -> consumers -> HTTP),
 * serves until SIGINT or SIGTERM, then closes them in reverse order.
 *
 *   roomd -c configs/local.yaml        serve
 *   roomd --check-config FILE          validate FILE and exit (0 ok, 1 error)
 *   roomd --print-config-doc           print the key reference of docs/conf.md
 *   roomd --print-routes               print the HTTP routes ("METHOD /path"), one a line
 */
#include "auth/auth.h"
#include "cluster/forward.h"
#include "cluster/health.h"
#include "conf/conf.h"
#include "consume/roles.h"
#include "core/daemon.h"
#include "core/err.h"
#include "core/log.h"
#include "core/xmalloc.h"
#include "http/router.h"
#include "http/server.h"
#include "lease/lease.h"
#include "outbox/outbox.h"
#include "projection/projection.h"
#include "publish/bus.h"
#include "publish/sink.h"
#include "publish/sink_activity.h"
#include "publish/sink_bus.h"
#include "publish/sink_tim.h"
#include "publish/sink_wallet.h"
#include "publish/tim_client.h"
#include "room/service.h"
#include "rpc/server.h"
#include "store/group_commit.h"
#include "store/store.h"
#include "wallet/reconcile.h"
#include "wallet/wallet.h"
#include "wallet/wallet_grpc.h"

#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_SINKS 8

static void
usage(void)
{
    fprintf(stderr, "usage: roomd -c FILE\n       roomd --check-config FILE\n       roomd "
                    "--print-config-doc\n       roomd --print-routes\n");
    exit(2);
}

/* Builds the sinks of the publish mode (seed: 发布模式); bus is the JetStream
 * connection or NULL; wallet the remote wallet's Confirm (any mode) or NULL.
 * Returns the count. */
static size_t
open_sinks(const struct conf *c, struct bus *bus, struct wallet *wallet, struct sink **sinks)
{
    size_t n = 0;
    char err[512];
    const struct conf_outbox *ob = &c->outbox_worker;
    int direct = ob->publish_mode == PUBLISH_DIRECT || ob->publish_mode == PUBLISH_DUAL;

    if (direct && ob->log_sink_enabled) {
        if (sink_log_open(&sinks[n], ob->log_sink_path, err, sizeof(err)) != 0)
            fatalx("outbox_worker.log_sink: %s", err);
        n++;
    }
    /* direct Tencent IM and activity sinks (docs/direct.md) */
    if (direct && c->tencent_im.enabled) {
        if (sink_tim_open(&sinks[n], &c->tencent_im, err, sizeof(err)) != 0)
            fatalx("%s", err);
        n++;
    }
    if (direct && c->activity.enabled) {
        if (sink_activity_open(&sinks[n], &c->activity, err, sizeof(err)) != 0)
            fatalx("%s", err);
        n++;
    }
    /* the JetStream bus sink (mq, dual) and the rocket wake-up sink (docs/bus.md) */
    if (bus && (ob->publish_mode == PUBLISH_MQ || ob->publish_mode == PUBLISH_DUAL) &&
        c->rocketmq.room_outbox.enabled)
        sink_bus_open(&sinks[n++], bus);
    if (bus && c->rocketmq.rocket_launch.enabled)
        sink_rocket_open(&sinks[n++], bus);
    /* the remote wallet's Confirm of each committed gift (docs/wallet.md) */
    if (wallet != NULL && wallet_is_grpc(wallet))
        sink_wallet_open(&sinks[n++], wallet);
    return n;
}

int
main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"config", required_argument, NULL, 'c'},
        {"check-config", required_argument, NULL, 'C'},
        {"print-config-doc", no_argument, NULL, 'D'},
        {"print-routes", no_argument, NULL, 'R'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *path = NULL;
    int check_only = 0, ch;
    char err[1024];
    struct conf *conf = NULL;

    while ((ch = getopt_long(argc, argv, "c:h", longopts, NULL)) != -1) {
        switch (ch) {
        case 'c':
            path = optarg;
            break;
        case 'C':
            path = optarg;
            check_only = 1;
            break;
        case 'D':
            conf_write_doc(stdout);
            return 0;
        case 'R':
            router_write_routes(stdout);
            return 0;
        default:
            usage();
        }
    }
    if (path == NULL)
        usage();
    if (conf_load(path, &conf, err, sizeof(err)) != 0)
        fatalx("config: %s", err);
    if (check_only) {
        printf("%s: ok\n", path);
        conf_free(conf);
        return 0;
    }
    /* the stop signals are blocked in every thread; main waits for them below */
    sigset_t stopset;
    daemon_start(conf->app.log_file, conf->app.log_level, &stopset);

    struct store *store = NULL;
    if (store_open(&store, &conf->store, err, sizeof(err)) != 0)
        fatalx("store: %s", err);
    struct group_commit *gc = NULL;
    if (group_commit_open(&gc, store, conf->store.group_commit_max) != 0)
        fatalx("store.group_commit_max: cannot start the committer");
    struct wallet *wallet = NULL;
    if (wallet_open(&wallet, &conf->wallet, store, err, sizeof(err)) != 0)
        fatalx("%s", err);
    struct lease *lease = NULL;
    if (lease_open(&lease, conf, err, sizeof(err)) != 0)
        fatalx("lease: %s", err);
    struct projection *proj = NULL;
    if (projection_open(&proj, conf, err, sizeof(err)) != 0)
        fatalx("projection: %s", err);
    /* several nodes need one shared projection (docs/nodes.md) */
    if (strcmp(conf->lease.driver, "redis") == 0 && strcmp(conf->projection.driver, "memory") == 0)
        log_warn("main",
                 "lease.driver redis with projection.driver memory: this node lists only "
                 "the rooms it saw; use projection.driver redis",
                 NULL);
    if (strcmp(conf->lease.driver, "redis") == 0 && conf->http.advertise_addr[0] == '\0')
        log_warn("main", "http.advertise_addr is empty: not_owner answers name http.listen",
                 "listen=%s", conf->http.listen);

    /* the JetStream connection, shared by the bus and rocket sinks and the consumer groups */
    struct bus *bus = NULL;
    if (conf->rocketmq.enabled) {
        char *name = xasprintf("roomd/%s", conf->app.node_id);
        if (bus_open(&bus, &conf->rocketmq, name, err, sizeof(err)) != 0)
            fatalx("rocketmq: %s", err);
        free(name);
    }

    struct outbox *outbox = NULL;
    if (conf->outbox_worker.enabled) {
        struct sink *sinks[MAX_SINKS];
        size_t nsinks = open_sinks(conf, bus, wallet, sinks);
        if (outbox_open(&outbox, &conf->outbox_worker, &conf->store, store, conf->app.node_id,
                        sinks, nsinks) != 0)
            fatalx("outbox_worker: cannot start the workers");
    }

    struct room_deps rd = {
        .conf = conf,
        .store = store,
        .gc = gc,
        .wallet = wallet,
        .lease = lease,
        .projection = proj,
        .outbox = outbox,
        .rocket_timer = !(conf->rocketmq.enabled && conf->rocketmq.rocket_launch.enabled),
        .projection_rebuild = true, /* in the background, docs/nodes.md */
    };
    /* CreateRoom's synchronous IM create_group when tencent_im.enabled */
    struct tim_client *tim = NULL;
    if (conf->tencent_im.enabled) {
        if (tim_client_open(&tim, &conf->tencent_im, err, sizeof(err)) != 0)
            fatalx("tencent_im: %s", err);
        rd.create_hook = tim_create_hook;
        rd.create_hook_arg = tim;
    }
    /* any node takes any command: forward to the room's owner (docs/cluster.md) */
    struct cluster_forward *fwd = NULL;
    if (conf->cluster.forward && strcmp(conf->lease.driver, "redis") == 0) {
        if (cluster_forward_open(&fwd, conf, conf->app.node_id, err, sizeof(err)) != 0)
            fatalx("cluster.forward: %s", err);
        rd.forward = cluster_forward_call;
        rd.forward_arg = fwd;
    }
    struct room_service *rooms = NULL;
    if (room_service_open(&rooms, &rd) != 0)
        fatalx("room: cannot start the room service");
    /* the remote wallet's holds a crash left behind, settled from the command log */
    struct wallet_reconciler *reconciler = NULL;
    if (wallet_is_grpc(wallet) &&
        wallet_reconcile_start(&reconciler, wallet, store, conf->wallet.reconcile_after_ms) != 0)
        fatalx("wallet.reconcile_after: cannot start the reconciler");

    /* consumer groups (IM bridge, rocket open, ...) configured to run inside roomd */
    struct consume_roles *consumers = NULL;
    if (bus && consume_roles_start(&consumers, conf, bus, rooms, consume_roles_configured(conf),
                                   err, sizeof(err)) != 0)
        fatalx("rocketmq consumers: %s", err);

    struct auth *auth = NULL;
    if (auth_open(&auth, conf, err, sizeof(err)) != 0)
        fatalx("%s", err);
    struct http_deps hd = {.conf = conf,
                           .auth = auth,
                           .rooms = rooms,
                           .wallet = wallet,
                           .projection = proj,
                           .store = store,
                           .gc = gc};
    /* /readyz: 503 when this node cannot serve commands, "degraded" for the rest */
    struct node_health health = {0};
    if (strcmp(conf->lease.driver, "redis") == 0)
        node_health_add(&health, "lease", true, lease_ready, lease);
    if (bus != NULL)
        node_health_add(&health, "broker", false, bus_ready, bus);
    if (outbox != NULL)
        node_health_add(&health, "sinks", false, outbox_sinks_ready, outbox);
    hd.health = &health;
    struct http_server *http = NULL;
    if (http_server_open(&http, &hd, err, sizeof(err)) != 0)
        fatalx("%s", err);
    /* the gRPC API beside it: the same router behind another transport */
    struct rpc_server *rpc = NULL;
    if (rpc_server_open(&rpc, &hd, err, sizeof(err)) != 0)
        fatalx("%s", err);
    static const char *const mode_names[] = {"direct", "mq", "dual"};
    log_info("main", "roomd started",
             "listen=%s admin_listen=%s auth=%s store=%s publish_mode=%s node=%s",
             conf->http.listen, conf->admin.listen, conf->auth.mode, conf->store.driver,
             mode_names[conf->outbox_worker.publish_mode], conf->app.node_id);

    daemon_wait(&stopset);
    rpc_server_close(rpc);
    http_server_close(http);
    auth_close(auth);
    consume_roles_stop(consumers); /* before the rooms it launches rockets in */
    wallet_reconcile_stop(reconciler);
    room_service_close(rooms);
    cluster_forward_close(fwd);
    tim_client_close(tim);
    outbox_close(outbox);
    bus_unref(bus); /* after the sinks (outbox_close) dropped theirs */
    projection_close(proj);
    lease_close(lease);
    wallet_close(wallet);
    group_commit_close(gc);
    store_close(store);
    log_info("main", "stopped", NULL);
    log_close();
    conf_free(conf);
    if (bus)
        bus_library_shutdown();
    return 0;
}
