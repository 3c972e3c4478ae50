/* SPDX-License-Identifier: Apache-2.0 */
/*
 * internal.h: what the RocketMQ client's files share (client.c, route.c,
 * send.c, pull.c; client.h is the interface): the request and response
 * codes, the private struct rmq_client with its connection pool and route
 * cache, and the helpers one file defines for the others. Included by
 * those four files only.
 */
#ifndef ROOMD_RMQ_INTERNAL_H
#define ROOMD_RMQ_INTERNAL_H

#include "rocketmq/client.h"
#include "rocketmq/remoting.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* request codes (RequestCode.java) */
#define RC_HEART_BEAT 34
#define RC_GET_ROUTEINFO_BY_TOPIC 105
#define RC_SEND_MESSAGE_V2 310
/* response codes */
#define RS_SYSTEM_ERROR 1
#define RS_SERVICE_NOT_AVAILABLE 14
#define RS_MESSAGE_ILLEGAL 13
#define RS_NO_PERMISSION 16
#define RS_TOPIC_NOT_EXIST 17
#define RS_GO_AWAY 1500

#define MAX_NS 16
#define ROUTE_TTL_MS 30000
#define HEARTBEAT_MS 30000
#define CONNECT_TIMEOUT_MS 1000
#define V5_0_0 413 /* MQVersion ordinal: brokers from here have timer messages */
#define DEFAULT_TOPIC "TBW102"

struct pooled {
    char *addr;
    struct rmq_conn *conn; /* one reference held by the pool */
};

struct queue_ref {
    char broker[128];
    int qid;
};

struct route {
    char *topic; /* wire name */
    struct queue_ref *wq;
    int nwq;
    struct queue_ref *rq; /* readable queues (consumers), same order */
    int nrq;
    char (*bnames)[128];
    char **masters; /* per bnames entry, the brokerId 0 address or NULL */
    int nbrokers;
    int64_t fetched_ms;
};

struct rmq_client {
    char *ns;
    char *access_key;
    char *secret_key;
    char *domain;
    int64_t send_timeout_ms;
    int retry;
    char *client_id;

    pthread_mutex_t mu; /* everything below */
    char *name_servers[MAX_NS];
    int nns;
    int ns_good; /* the one that answered last */
    int64_t domain_fetched_ms;
    struct pooled *pool;
    size_t npool, cappool;
    struct route *routes;
    size_t nroutes, caproutes;
    char **producers;
    size_t nproducers, capproducers;
    struct consumer_reg {
        char *group;     /* wire name */
        char *topics[2]; /* wire names: the topic and %RETRY%<group> */
    } * consumers;
    size_t nconsumers, capconsumers;
    int broker_version;  /* the last broker answer's version (0: none yet) */
    bool timers_refused; /* the broker answered WHEEL_TIMER_NOT_ENABLE: delay levels */
    char last_error[256];
    bool answered; /* the last call got an answer */

    atomic_uint_fast32_t uniq_counter;
    struct rmq_stats stats;

    pthread_t hb;
    bool hb_started;
    pthread_mutex_t hb_mu;
    pthread_cond_t hb_cv;
    bool stopping;
};

/* ==== client.c: signing, connections, name servers ==== */

/* A refusal of the signature or the access key (ACL 1.0 and 2.0). */
bool rmq_acl_refused(const struct rmq_cmd *resp);
/* err = the message naming rocketmq.access_key / secret_key. */
void rmq_acl_error(char *err, size_t errlen);
/* Records whether the last call was answered (readiness, rmq_ready). */
void rmq_note_answer(struct rmq_client *c, bool answered, const char *err);
/* Signs req and invokes it on addr. Returns what rmq_conn_invoke does. */
int rmq_call(struct rmq_client *c, const char *addr, struct rmq_cmd *req, int64_t deadline,
             struct rmq_cmd **resp, char *err, size_t errlen);
/* Invokes req on the name servers, each in turn until one answers. */
int rmq_call_ns(struct rmq_client *c, struct rmq_cmd *req, int64_t deadline, struct rmq_cmd **resp,
                char *err, size_t errlen);

/* ==== route.c: routes and the queue pick ==== */

void rmq_route_free(struct route *r);
/* Fetches topic's route from the name servers and caches it. */
int rmq_refresh_route(struct rmq_client *c, const char *wire_topic, int64_t deadline, char *err,
                      size_t errlen);
/* The queue for shard_key on topic and its master's address. */
int rmq_pick_queue(struct rmq_client *c, const char *wire_topic, const char *shard_key,
                   int64_t deadline, struct queue_ref *q, char *addr, size_t addrlen, char *err,
                   size_t errlen);
/* Marks topic's cached route stale (fetched again on next use). */
void rmq_invalidate_route(struct rmq_client *c, const char *wire_topic);

#endif
