/* SPDX-License-Identifier: Apache-2.0 */
/*
 * main.c: roomd. Loads and validates the config, binds every listener (HTTP,
 * admin, gRPC: a port in use fails the start before anything else opened),
 * opens the modules in dependency order (store -> group commit -> wallet ->
 * lease -> projection -> broker -> sinks -> outbox worker -> room service ->
 * consumers), starts serving on the bound listeners, tells systemd it is
 * ready, serves until SIGINT or SIGTERM (SIGHUP reopens the log files and
 * reloads app.log_level and the JWT key), then closes them in reverse order.
 *
 *   roomd [-c FILE]                    serve (FILE defaults to ROOMD_DEFAULT_CONFIG)
 *   roomd --check-config FILE          validate FILE and what it names, exit 0/1
 *   roomd --print-config-doc           print the key reference of docs/conf.md
 *   roomd --print-routes               print the HTTP routes ("METHOD /path"), one a line
 *   roomd --version | --help           print to stdout, exit 0
 */
#include "admin/admin.h"
#include "admin/nodes.h"
#include "auth/auth.h"
#include "auth/throttle.h"
#include "cluster/forward.h"
#include "cluster/health.h"
#include "conf/conf.h"
#include "consume/roles.h"
#include "core/backoff.h"
#include "core/clock.h"
#include "core/daemon.h"
#include "core/err.h"
#include "core/log.h"
#include "core/version.h"
#include "core/xmalloc.h"
#include "http/ratelimit.h"
#include "http/router.h"
#include "http/server.h"
#include "lease/lease.h"
#include "metrics/deps.h"
#include "metrics/ha.h"
#include "outbox/outbox.h"
#include "projection/projection.h"
#include "publish/bus.h"
#include "publish/sink.h"
#include "publish/sink_activity.h"
#include "publish/sink_bus.h"
#include "publish/sink_tim.h"
#include "publish/sink_wallet.h"
#include "publish/tim_client.h"
#include "publish/tim_gate.h"
#include "rocketmq/client.h"
#include "rocketmq/consumer.h"
#include "rocketmq/sink.h"
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

#ifndef ROOMD_DEFAULT_CONFIG
#define ROOMD_DEFAULT_CONFIG "/etc/roomd/roomd.yaml"
#endif

static void usage(FILE *out, int status) __attribute__((noreturn));

static void
usage(FILE *out, int status)
{
    fprintf(
        out,
        "usage: roomd [-c FILE]              serve (default FILE: %s)\n"
        "       roomd --check-config FILE    validate FILE and what it names; exit 0 or 1\n"
        "       roomd --print-config-doc     print the config key reference (Markdown)\n"
        "       roomd --print-routes         print the HTTP routes (\"METHOD /path\"), one a line\n"
        "       roomd --version              print the version\n"
        "       roomd --help                 print this help\n"
        "Signals: SIGTERM/SIGINT drain and stop; SIGHUP reopens the log files and reloads\n"
        "app.log_level and the JWT key. See roomd(8).\n",
        ROOMD_DEFAULT_CONFIG);
    exit(status);
}

/* --check-config: the rules of conf_load, then what the config names. */
static int
check_config(const char *path)
{
    char err[4096];
    struct conf *conf = NULL;

    if (conf_load(path, &conf, err, sizeof(err)) != 0) {
        fprintf(stderr, "roomd: config: %s\n", err);
        return 1;
    }
    int rc = conf_check_environment(conf, err, sizeof(err));
    /* the JWKS's keys, as start-up would read them (docs/auth.md) */
    if (rc == 0 && strcmp(conf->auth.mode, "jwt") == 0 && conf->auth.jwks_file != NULL &&
        conf->auth.jwks_file[0] != '\0')
        rc = auth_jwks_check(conf->auth.jwks_file, NULL, err, sizeof(err));
    conf_free(conf);
    if (rc != 0) {
        fprintf(stderr, "roomd: %s:\n%s\n", path, err);
        return 1;
    }
    printf("%s: ok\n", path);
    return 0;
}

/* Returns when rc (an open's or a start's) is 0; otherwise exits (fatalx)
 * with what ("lease: ", or "" where err names its key already) and err. */
static void
or_die(int rc, const char *what, const char *err)
{
    if (rc != 0)
        fatalx("%s%s", what, err);
}

/* Opens the store; an unreachable MySQL server is retried for
 * store.mysql.startup_wait (one log line per attempt) instead of exiting.
 * A stop signal meanwhile exits. Returns the store or exits. */
static struct store *
open_store(const struct conf *c, const sigset_t *sigs)
{
    char err[1024];
    struct store *store = NULL;
    int64_t wait_ms = strcmp(c->store.driver, "mysql") == 0 ? c->store.mysql.startup_wait_ms : 0;
    int64_t start = clock_mono_ms();

    for (int attempt = 1;; attempt++) {
        int rc = store_open(&store, &c->store, err, sizeof(err));
        if (rc == 0)
            return store;
        int64_t left = wait_ms - (clock_mono_ms() - start);
        if (rc != ROOMD_EUNAVAIL || left <= 0)
            fatalx("store: %s", err);
        int64_t delay = backoff_ceiling_ms(attempt, 500, 5000);
        if (delay > left)
            delay = left;
        log_warn("main", "waiting for the database",
                 "attempt=%d retry_in_ms=%lld gives_up_in_ms=%lld err=\"%s\"", attempt,
                 (long long)delay, (long long)left, err);
        if (daemon_sleep(sigs, (long)delay) != 0)
            fatalx("store: stopped while waiting for the database");
    }
}

/* What SIGHUP reloads (daemon_wait calls reload in the main thread). */
struct reload_ctx {
    const char *path;
    struct sink *log_sink; /* or NULL */
    struct auth *auth;
};

/* SIGHUP: reopen the log file and the log sink's file (after logrotate moved
 * them), reread the config and apply its reloadable keys: app.log_level and
 * the JWT key (auth_reload_keys: a rotation, which empties the token cache)
 * with the token cache's size and TTL.
 * A config that no longer loads changes nothing and is logged. */
static void
reload(void *arg)
{
    struct reload_ctx *rc = arg;
    char err[1024];
    struct conf *c = NULL;

    if (log_reopen() != 0)
        log_error("main", "cannot reopen the log file; still writing the old one", NULL);
    if (rc->log_sink != NULL && sink_log_reopen(rc->log_sink, err, sizeof(err)) != 0)
        log_error("main", "cannot reopen the log sink", "err=\"%s\"", err);
    if (conf_load(rc->path, &c, err, sizeof(err)) != 0) {
        log_error("main", "reload refused: config error, nothing changed", "err=\"%s\"", err);
        return;
    }
    log_set_level((enum log_level)log_level_parse(c->app.log_level));
    if (auth_reload_keys(rc->auth, c, err, sizeof(err)) != 0)
        log_error("main", "auth key not reloaded; the old key stays in use", "err=\"%s\"", err);
    log_info("main", "reloaded", "config=%s log_level=%s", rc->path, c->app.log_level);
    conf_free(c);
}

/* metrics/deps.h's store probe: the readiness cache (arg), never the store. */
static bool
store_up(void *arg)
{
    int64_t age_ms;
    return http_ready_store_up(arg, &age_ms);
}

/* Builds the sinks of the publish mode (seed: 发布模式); bus is the JetStream
 * connection or NULL; wallet the remote wallet's Confirm (any mode) or NULL.
 * Returns the count. */
static size_t
open_sinks(const struct conf *c, struct bus *bus, struct rmq_client *rmq, struct wallet *wallet,
           struct sink **sinks)
{
    size_t n = 0;
    char err[512];
    const struct conf_outbox *ob = &c->outbox_worker;
    int direct = ob->publish_mode == PUBLISH_DIRECT || ob->publish_mode == PUBLISH_DUAL;

    if (direct && ob->log_sink_enabled) {
        or_die(sink_log_open(&sinks[n], ob->log_sink_path, err, sizeof(err)),
               "outbox_worker.log_sink: ", err);
        n++;
    }
    /* direct Tencent IM and activity sinks (docs/direct.md) */
    if (direct && c->tencent_im.enabled) {
        or_die(sink_tim_open(&sinks[n], &c->tencent_im, err, sizeof(err)), "", err);
        n++;
    }
    if (direct && c->activity.enabled) {
        or_die(sink_activity_open(&sinks[n], &c->activity, err, sizeof(err)), "", err);
        n++;
    }
    /* the JetStream bus sink (mq, dual) and the rocket wake-up sink (docs/bus.md) */
    if (bus && (ob->publish_mode == PUBLISH_MQ || ob->publish_mode == PUBLISH_DUAL) &&
        c->rocketmq.room_outbox.enabled)
        sink_bus_open(&sinks[n++], bus);
    /* the same sink on the rocketmq driver (docs/rocketmq.md) */
    if (rmq && (ob->publish_mode == PUBLISH_MQ || ob->publish_mode == PUBLISH_DUAL) &&
        c->rocketmq.room_outbox.enabled)
        sink_rmq_open(&sinks[n++], rmq, &c->rocketmq);
    if (bus && c->rocketmq.rocket_launch.enabled)
        sink_rocket_open(&sinks[n++], bus);
    if (rmq && c->rocketmq.rocket_launch.enabled)
        sink_rmq_rocket_open(&sinks[n++], rmq, &c->rocketmq);
    /* the remote wallet's Confirm of each committed gift (docs/wallet.md) */
    if (wallet != NULL && wallet_is_grpc(wallet))
        sink_wallet_open(&sinks[n++], wallet);
    return n;
}

/* The nodes view's readiness of this node (admin_ready_fn, admin/nodes.h):
 * what its admin /readyz answers, from the readiness cache of srv (a struct
 * http_server; before it serves: 503 "starting"). Thread: any. */
static int
self_ready(void *srv, char **json)
{
    struct http_response resp;
    int status;

    memset(&resp, 0, sizeof(resp));
    http_ready_reply(http_server_ready(srv), true, &resp);
    status = resp.status;
    *json = resp.body;
    resp.body = NULL;
    http_response_clear(&resp);
    return status;
}

/* Everything a serving node holds: opened by the node_open_* stages in
 * dependency order (each may need the ones before it), closed by node_close
 * in reverse. Lives on main's stack for the whole run (health, hd and
 * rmq_driver are pointed to by what they were handed to). Main thread only. */
struct node {
    const struct conf *conf;
    struct http_server *http;
    struct rpc_server *rpc;
    struct store *store;
    struct group_commit *gc;
    struct wallet *wallet;
    struct lease *lease;
    struct projection *proj;
    struct bus *bus;        /* the JetStream connection: sinks and consumer groups */
    struct rmq_client *rmq; /* or RocketMQ's remoting protocol */
    struct outbox *outbox;
    struct tim_client *tim; /* CreateRoom's synchronous IM create_group */
    struct tim_gate *gate;
    struct cluster_forward *fwd;
    struct room_service *rooms;
    struct wallet_reconciler *reconciler;
    struct consume_roles *consumers;
    struct consume_driver rmq_driver;
    struct auth *auth;
    struct auth_throttle *admin_throttle;
    struct node_health health;
    struct http_deps hd;
    struct admin *admin;
    struct admin_nodes *nodes;
    struct metrics_deps *deps;
    struct reload_ctx rctx;
};

/* Every listener bound before anything else opens: a port in use stops the
 * start here, before any worker, consumer or store write (connections wait
 * in the backlog). Exits on failure. */
static void
node_bind(struct node *n)
{
    char err[1024];

    or_die(http_server_bind(&n->http, n->conf, err, sizeof(err)), "", err);
    or_die(rpc_server_bind(&n->rpc, n->conf, err, sizeof(err)), "", err);
    log_info("main", "listeners bound", "listen=%s admin_listen=%s grpc_listen=%s",
             n->conf->http.listen, n->conf->admin.listen,
             n->conf->grpc.listen ? n->conf->grpc.listen : "");
}

/* The store and what lives beside it: group commit, wallet, lease,
 * projection, the create limit. Exits on failure. */
static void
node_open_state(struct node *n, const sigset_t *sigs)
{
    const struct conf *conf = n->conf;
    char err[1024];

    n->store = open_store(conf, sigs);
    if (group_commit_open(&n->gc, n->store, conf->store.group_commit_max) != 0)
        fatalx("store.group_commit_max: cannot start the committer");
    or_die(wallet_open(&n->wallet, &conf->wallet, n->store, err, sizeof(err)), "", err);
    or_die(lease_open(&n->lease, conf, err, sizeof(err)), "lease: ", err);
    or_die(projection_open(&n->proj, conf, err, sizeof(err)), "projection: ", err);
    or_die(http_create_limit_open(conf, err, sizeof(err)), "", err);
    /* several nodes need one shared projection (docs/nodes.md) */
    if (strcmp(conf->lease.driver, "redis") == 0 && strcmp(conf->projection.driver, "memory") == 0)
        log_warn("main",
                 "lease.driver redis with projection.driver memory: this node lists only "
                 "the rooms it saw; use projection.driver redis",
                 NULL);
    if (strcmp(conf->lease.driver, "redis") == 0 && conf->http.advertise_addr[0] == '\0')
        log_warn("main", "http.advertise_addr is empty: not_owner answers name http.listen",
                 "listen=%s", conf->http.listen);
}

/* The broker (JetStream or RocketMQ) and the outbox worker with its sinks.
 * Exits on failure. */
static void
node_open_outbox(struct node *n)
{
    const struct conf *conf = n->conf;
    char err[1024];

    if (conf->rocketmq.enabled && conf_rocketmq_driver(&conf->rocketmq) == CONF_MQ_ROCKETMQ) {
        const char *check =
            conf->rocketmq.room_outbox.enabled ? conf->rocketmq.room_outbox.topic : NULL;
        or_die(
            rmq_client_open(&n->rmq, &conf->rocketmq, conf->app.node_id, check, err, sizeof(err)),
            "", err);
    } else if (conf->rocketmq.enabled) {
        char *name = xasprintf("roomd/%s", conf->app.node_id);
        or_die(bus_open(&n->bus, &conf->rocketmq, name, err, sizeof(err)), "rocketmq: ", err);
        free(name);
    }
    if (!conf->outbox_worker.enabled)
        return;
    struct sink *sinks[MAX_SINKS];
    size_t nsinks = open_sinks(conf, n->bus, n->rmq, n->wallet, sinks);
    for (size_t i = 0; i < nsinks; i++)
        if (sinks[i]->bit == SINK_BIT_LOG)
            n->rctx.log_sink = sinks[i];
    if (outbox_open(&n->outbox, &conf->outbox_worker, &conf->store, n->store, conf->app.node_id,
                    sinks, nsinks) != 0)
        fatalx("outbox_worker: cannot start the workers");
}

/* The room service (with its IM create hook and the forwarding to owners),
 * the remote wallet's reconciler and the consumer groups run inside roomd.
 * Exits on failure. */
static void
node_open_rooms(struct node *n)
{
    const struct conf *conf = n->conf;
    char err[1024];
    struct room_deps rd = {
        .conf = conf,
        .store = n->store,
        .gc = n->gc,
        .wallet = n->wallet,
        .lease = n->lease,
        .projection = n->proj,
        .outbox = n->outbox,
        .rocket_timer =
            !((n->bus != NULL || n->rmq != NULL) && conf->rocketmq.rocket_launch.enabled),
        .projection_rebuild = true, /* in the background, docs/nodes.md */
    };

    if (conf->tencent_im.enabled) {
        or_die(tim_client_open(&n->tim, &conf->tencent_im, err, sizeof(err)), "tencent_im: ", err);
        /* behind a circuit: skipped while IM does not answer (issue 26) */
        n->gate = tim_gate_open(n->tim, conf->outbox_worker.circuit_failures,
                                conf->outbox_worker.circuit_probe_ms);
        rd.create_hook = tim_gate_hook;
        rd.create_hook_arg = n->gate;
    }
    /* any node takes any command: forward to the room's owner (docs/cluster.md) */
    if (conf->cluster.forward && strcmp(conf->lease.driver, "redis") == 0) {
        or_die(cluster_forward_open(&n->fwd, conf, conf->app.node_id, err, sizeof(err)),
               "cluster.forward: ", err);
        rd.forward = cluster_forward_call;
        rd.forward_arg = n->fwd;
    }
    if (room_service_open(&n->rooms, &rd) != 0)
        fatalx("room: cannot start the room service");
    /* the remote wallet's holds a crash left behind, settled from the command log */
    if (wallet_is_grpc(n->wallet) && wallet_reconcile_start(&n->reconciler, n->wallet, n->store,
                                                            conf->wallet.reconcile_after_ms) != 0)
        fatalx("wallet.reconcile_after: cannot start the reconciler");
    /* consumer groups (IM bridge, rocket open, ...) configured to run inside roomd */
    if (n->bus && consume_roles_start(&n->consumers, conf, n->bus, n->rooms,
                                      consume_roles_configured(conf), err, sizeof(err)) != 0)
        fatalx("rocketmq consumers: %s", err);
    if (n->rmq) { /* the same groups on RocketMQ (docs/rocketmq.md) */
        rmq_consume_driver(&n->rmq_driver, n->rmq);
        if (consume_roles_start_on(&n->consumers, conf, &n->rmq_driver, n->rooms,
                                   consume_roles_configured(conf), err, sizeof(err)) != 0)
            fatalx("rocketmq consumers: %s", err);
    }
}

/* Authentication, readiness, the admin API, then serving on the bound
 * listeners (HTTP and gRPC: the same router) and the scrape's collectors.
 * Exits on failure. */
static void
node_open_api(struct node *n)
{
    const struct conf *conf = n->conf;
    char err[1024];

    or_die(auth_open(&n->auth, conf, err, sizeof(err)), "", err);
    n->rctx.auth = n->auth;
    n->admin_throttle = auth_throttle_open(conf->admin.auth_backoff_ms);
    n->hd = (struct http_deps){.conf = conf,
                               .auth = n->auth,
                               .admin_throttle = n->admin_throttle,
                               .rooms = n->rooms,
                               .wallet = n->wallet,
                               .projection = n->proj,
                               .store = n->store,
                               .gc = n->gc};
    /* /readyz: 503 when this node cannot serve commands, "degraded" for the rest */
    if (strcmp(conf->lease.driver, "redis") == 0)
        node_health_add(&n->health, "lease", true, lease_ready, n->lease);
    if (n->bus != NULL)
        node_health_add(&n->health, "broker", false, bus_ready, n->bus);
    if (n->rmq != NULL)
        node_health_add(&n->health, "broker", false, rmq_ready, n->rmq);
    if (n->outbox != NULL)
        node_health_add(&n->health, "sinks", false, outbox_sinks_ready, n->outbox);
    if (n->consumers != NULL) /* the groups' downstreams (IM of the bridge and notice groups) */
        node_health_add(&n->health, "consumers", false, consume_roles_ready, n->consumers);
    n->hd.health = &n->health;
    /* the admin API and console on admin.listen; a bulk replay a crash cut short resumes */
    or_die(admin_open(&n->admin, conf, n->outbox, false, err, sizeof(err)), "admin: ", err);
    admin_set_bus(n->admin, n->bus);
    admin_set_rmq(n->admin, n->rmq); /* the %DLQ%<group> topics on the rocketmq driver */
    admin_resume(n->admin);
    /* the cluster's nodes for the console and roomctl nodes (admin/nodes.h) */
    n->nodes = admin_nodes_open(conf, n->lease, n->fwd, n->rooms, self_ready, n->http);
    admin_set_nodes(n->admin, n->nodes);
    n->hd.admin = n->admin;
    or_die(http_server_start(n->http, &n->hd, err, sizeof(err)), "", err);
    or_die(rpc_server_start(n->rpc, &n->hd, err, sizeof(err)), "", err);
    static const char *const mode_names[] = {"direct", "mq", "dual"};
    log_info("main", "roomd started",
             "listen=%s admin_listen=%s auth=%s store=%s publish_mode=%s node=%s",
             conf->http.listen, conf->admin.listen, conf->auth.mode, conf->store.driver,
             mode_names[conf->outbox_worker.publish_mode], conf->app.node_id);
    n->deps = metrics_deps_open(conf, store_up, http_server_ready(n->http), n->bus, n->outbox);
    if (n->rmq != NULL)
        metrics_deps_set_broker(n->deps, rmq_ready, n->rmq);
    if (n->consumers != NULL)
        metrics_deps_set_consumers(n->deps, consume_roles_downstream_up, n->consumers);
    metrics_ha_open(n->store);
}

/* Closes what the stages opened, in reverse order (NULL parts skipped). */
static void
node_close(struct node *n)
{
    rpc_server_close(n->rpc);
    http_server_close(n->http);
    http_create_limit_close();
    admin_close(n->admin);
    admin_nodes_close(n->nodes);
    metrics_deps_close(n->deps);
    metrics_ha_close(n->store);
    auth_close(n->auth);
    auth_throttle_close(n->admin_throttle);
    consume_roles_stop(n->consumers); /* before the rooms it launches rockets in */
    wallet_reconcile_stop(n->reconciler);
    room_service_close(n->rooms);
    cluster_forward_close(n->fwd);
    tim_gate_close(n->gate);
    tim_client_close(n->tim);
    outbox_close(n->outbox);
    bus_unref(n->bus); /* after the sinks (outbox_close) dropped theirs */
    rmq_client_close(n->rmq);
    projection_close(n->proj);
    lease_close(n->lease);
    wallet_close(n->wallet);
    group_commit_close(n->gc);
    store_close(n->store);
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
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    const char *path = ROOMD_DEFAULT_CONFIG;
    int ch;
    char err[1024];
    struct conf *conf = NULL;

    while ((ch = getopt_long(argc, argv, "c:hV", longopts, NULL)) != -1) {
        switch (ch) {
        case 'c':
            path = optarg;
            break;
        case 'C':
            return check_config(optarg);
        case 'D':
            conf_write_doc(stdout);
            return 0;
        case 'R':
            router_write_routes(stdout);
            return 0;
        case 'V':
            printf("roomd %s (commit %s)\n", roomd_version, roomd_commit);
            return 0;
        case 'h':
            usage(stdout, 0);
        default:
            usage(stderr, 2);
        }
    }
    if (optind != argc)
        usage(stderr, 2);
    or_die(conf_load(path, &conf, err, sizeof(err)), "config: ", err);
    /* the signals are blocked in every thread; main waits for them below */
    sigset_t sigs;
    daemon_start(conf->app.log_file, conf->app.log_level, &sigs);
    log_info("main", "starting", "version=%s commit=%s config=%s", roomd_version, roomd_commit,
             path);

    struct node n = {.conf = conf, .rctx = {.path = path}};
    node_bind(&n);
    node_open_state(&n, &sigs);
    node_open_outbox(&n);
    node_open_rooms(&n);
    node_open_api(&n);
    daemon_ready("serving");

    daemon_wait(&sigs, reload, &n.rctx);
    bool had_bus = n.bus != NULL;
    node_close(&n);
    log_info("main", "stopped", NULL);
    log_close();
    conf_free(conf);
    if (had_bus)
        bus_library_shutdown();
    return 0;
}
