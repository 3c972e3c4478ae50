/* SPDX-License-Identifier: Apache-2.0 */
/*
 * client.h: roomd's RocketMQ client (the rocketmq driver, docs/rocketmq.md;
 * protocol in design/rocketmq.md). One struct rmq_client per process is
 * shared by the outbox and rocket sinks (rocketmq/sink.c) and the consumer
 * groups. It keeps:
 *   - the name servers (rocketmq.name_servers host:port, tried in turn; or
 *     the list rocketmq.name_server_domain's address service gives),
 *   - a route per topic (GET_ROUTEINFO_BY_TOPIC, refreshed every 30 s and
 *     after a failed send), the master (brokerId 0) of each broker for writes,
 *   - one connection per address (reconnected on the next use after a
 *     break), a heartbeat thread (HEART_BEAT to every known broker every
 *     30 s with the producer and consumer groups),
 *   - the ACL 1.0 signature of every request when access_key is set
 *     (HMAC-SHA1 with secret_key over the sorted ext values + body, base64),
 *   - the namespace applied to topics and groups as the Java client's
 *     NamespaceUtil does ("ns%name", "%RETRY%ns%group", system names kept).
 * Names given to this API are the configured ones, without the namespace.
 */
#ifndef ROOMD_RMQ_CLIENT_H
#define ROOMD_RMQ_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct conf_rocketmq;
struct rmq_client;

/* Response codes the callers look at (ResponseCode.java). */
#define RMQ_SUCCESS 0
#define RMQ_PULL_NOT_FOUND 19
#define RMQ_PULL_RETRY_IMMEDIATELY 20
#define RMQ_PULL_OFFSET_MOVED 21
#define RMQ_QUERY_NOT_FOUND 22

/*
 * Opens the client: copies what it needs of cfg; instance names this
 * process in its clientID ("<instance>@<pid>"). When a name server answers,
 * checks the credentials at once with a signed HEART_BEAT to the master of
 * check_topic (NULL: no check): a broker that refuses the signature fails
 * the open with ROOMD_EINVAL and an err naming rocketmq.secret_key (never
 * the key). Name servers or broker down: 0, checked on first use.
 * Returns 0 and *out, or ROOMD_EINVAL with err. Thread: main. Blocks up to
 * about 2 x send_timeout.
 */
int rmq_client_open(struct rmq_client **out, const struct conf_rocketmq *cfg, const char *instance,
                    const char *check_topic, char *err, size_t errlen);
/* Stops the heartbeat thread, closes every connection, frees c (NULL:
 * no-op). No other call may be running. Thread: main. Blocks briefly. */
void rmq_client_close(struct rmq_client *c);

/* The wire name of a topic or group: the namespace applied (malloc'd,
 * caller frees). "%RETRY%g" -> "%RETRY%ns%g". Thread: any. */
char *rmq_wrap(const struct rmq_client *c, const char *name);

/* Registers a producer group for the heartbeats. Thread: any. */
void rmq_add_producer(struct rmq_client *c, const char *group);

/* One message to send; everything borrowed. */
struct rmq_msg {
    const char *topic; /* configured name */
    const char *tags;  /* TAGS, or NULL */
    const char *keys;  /* KEYS (space separated), or NULL */
    const void *body;
    size_t len;
    const char *shard_key; /* queue = Java String.hashCode(shard_key) % writable queues; NULL: 0 */
    int64_t deliver_at_ms; /* > 0: a delayed message (timer, else delay level), epoch ms */
    const char *retry_topic; /* RETRY_TOPIC (a message sent to %RETRY%<group> by hand: the
                                topic it came from), or NULL */
};

struct rmq_send_result {
    char msg_id[64];
    int queue_id;
    int64_t queue_offset;
    int code;        /* the broker's answer (0, or 10/11/12 stored without the flush) */
    int delay_level; /* the 4.x level used for deliver_at_ms (0: none or a timer) */
};

/*
 * Sends m synchronously as SEND_MESSAGE_V2 to the master of the queue
 * picked by m->shard_key, 1 + rocketmq.retry tries while time is left,
 * each at most send_timeout. SUCCESS, FLUSH_DISK_TIMEOUT,
 * FLUSH_SLAVE_TIMEOUT and SLAVE_NOT_AVAILABLE are sent (stored on the
 * master). Returns 0 and *res, ROOMD_EUNAVAIL with err (no name server or
 * broker answered, a timeout, the broker not serving (14, GO_AWAY), or it
 * refused the request signature: an outage that burns no attempt),
 * ROOMD_ERETRY (another answer: the broker's code and remark in err) or
 * ROOMD_EPERM (MESSAGE_ILLEGAL: never accepted). Thread: any. Blocks
 * until the answer or deadline_mono_ms.
 */
int rmq_send(struct rmq_client *c, const char *producer_group, const struct rmq_msg *m,
             int64_t deadline_mono_ms, struct rmq_send_result *res, char *err, size_t errlen);

/* A cheap call the broker must answer: topic's route, then a HEART_BEAT to
 * its master. Returns 0, or ROOMD_EUNAVAIL with err (also when the broker
 * refuses the signature). Thread: any. Blocks
 * until deadline_mono_ms at most. */
int rmq_probe(struct rmq_client *c, const char *topic, int64_t deadline_mono_ms, char *err,
              size_t errlen);

/* Readiness (cluster/health.h): 0 when the last call to a name server or
 * broker got an answer, else ROOMD_EUNAVAIL with why. Thread: any; never
 * blocks. */
int rmq_ready(void *c, char *why, size_t whylen);

/* Counters for /metrics (monotonic since open). Thread: any. */
struct rmq_stats {
    uint64_t sends_ok, sends_failed, sends_unavailable, reconnects, route_refreshes;
};
void rmq_stats_get(struct rmq_client *c, struct rmq_stats *out);

/* ==== the consumer side (rocketmq/consumer.c) ==== */

/* One message queue: wire topic, broker, queue id and its master's address. */
struct rmq_mq {
    char topic[256];
    char broker[128];
    char addr[128];
    int qid;
};

/* Registers a clustering consumer group (configured names) subscribed to
 * topic and %RETRY%<group> ("*"), sent with every heartbeat from now on. */
void rmq_add_consumer(struct rmq_client *c, const char *group, const char *topic);
/* Heartbeats every known master now (after rmq_add_consumer). Blocks up to
 * send_timeout per broker. */
void rmq_heartbeat_now(struct rmq_client *c);
/* This process' clientID (borrowed). */
const char *rmq_client_id(const struct rmq_client *c);

/* The readable queues of topic (configured name), fetched from the name
 * servers now, sorted by broker then queue id: *out (free()) and *n.
 * Returns 0, ROOMD_EUNAVAIL or ROOMD_ERETRY with err. Blocks. */
int rmq_read_queues(struct rmq_client *c, const char *topic, int64_t deadline_mono_ms,
                    struct rmq_mq **out, int *n, char *err, size_t errlen);
/* GET_CONSUMER_LIST_BY_GROUP at addr: *ids (each and the array free()) and
 * *n. Returns 0, ROOMD_EUNAVAIL, ROOMD_EINVAL (signature) or ROOMD_ERETRY. */
int rmq_consumer_ids(struct rmq_client *c, const char *addr, const char *group,
                     int64_t deadline_mono_ms, char ***ids, int *n, char *err, size_t errlen);
/* QUERY_CONSUMER_OFFSET: *offset, -1 when the broker has none (22). */
int rmq_query_offset(struct rmq_client *c, const struct rmq_mq *mq, const char *group,
                     int64_t deadline_mono_ms, int64_t *offset, char *err, size_t errlen);
/* GET_MAX_OFFSET / GET_MIN_OFFSET of mq: the offset after its last message
 * and of its first one still stored. Returns 0 and *offset, ROOMD_EUNAVAIL
 * or ROOMD_ERETRY with err. Thread: any. Blocks until deadline_mono_ms. */
int rmq_max_offset(struct rmq_client *c, const struct rmq_mq *mq, int64_t deadline_mono_ms,
                   int64_t *offset, char *err, size_t errlen);
int rmq_min_offset(struct rmq_client *c, const struct rmq_mq *mq, int64_t deadline_mono_ms,
                   int64_t *offset, char *err, size_t errlen);
/* UPDATE_CONSUMER_OFFSET (answered). */
int rmq_update_offset(struct rmq_client *c, const struct rmq_mq *mq, const char *group,
                      int64_t offset, int64_t deadline_mono_ms, char *err, size_t errlen);

/* One pulled message (MessageDecoder); body and props point into the
 * rmq_pulled's raw buffer. */
struct rmq_message_ext {
    char *topic;
    int queue_id;
    int64_t queue_offset;
    int64_t commit_offset;
    int reconsume;
    int sys_flag;
    int64_t born_ms;  /* BORNTIMESTAMP: when the producer sent it, epoch ms */
    int64_t store_ms; /* STORETIMESTAMP: when this broker stored it, epoch ms */
    const uint8_t *body;
    size_t len;
    const char *props; /* name 0x01 value 0x02 ... */
    size_t props_len;
};
struct rmq_pulled {
    int code; /* 0 found, 19 none, 20 filtered, 21 offset moved */
    int64_t next_begin;
    struct rmq_message_ext *msgs;
    int n;
    uint8_t *raw;
};
/* PULL_MESSAGE without suspend, subscription "*". Returns 0 and *out (any
 * of the four codes; rmq_pulled_free it), ROOMD_EUNAVAIL or ROOMD_ERETRY. */
int rmq_pull(struct rmq_client *c, const struct rmq_mq *mq, const char *group, int64_t offset,
             int max, int64_t deadline_mono_ms, struct rmq_pulled *out, char *err, size_t errlen);
void rmq_pulled_free(struct rmq_pulled *p);
/* The property name of m into buf (NULL when absent). */
const char *rmq_prop(const struct rmq_message_ext *m, const char *name, char *buf, size_t len);
/* CONSUMER_SEND_MSG_BACK of m: delay_level > 0 -> %RETRY%<group> after
 * that level, -1 -> %DLQ%<group>; max_reconsume is the broker's DLQ limit.
 * Returns 0, ROOMD_EUNAVAIL or ROOMD_ERETRY with err. */
int rmq_send_back(struct rmq_client *c, const struct rmq_mq *mq, const char *group,
                  const struct rmq_message_ext *m, int delay_level, int max_reconsume,
                  int64_t deadline_mono_ms, char *err, size_t errlen);
/* The smallest default delay level lasting at least delay_ms (18 = 2 h). */
int rmq_delay_level_at_least(int64_t delay_ms);
/* The longest default delay level not later than delay_ms (at least 1). */
int rmq_delay_level_not_later(int64_t delay_ms);

#endif
