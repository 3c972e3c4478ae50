/*
 * conf.c: YAML -> struct conf (conf.h). A table maps each dotted key path
 * to a type and an offsetof into struct conf; load() walks the libyaml
 * document over it, then validate() checks every rule. Errors read
 * "FILE:LINE:COL: key.path: problem" (libyaml marks are 0-based; printed 1-based).
 * To add a key: add a field to conf.h, a row to keys[], a default and a rule.
 */
#include "conf/conf.h"

#include "core/err.h"
#include "core/xmalloc.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <yaml.h>

/* ==== The key table ==== */

enum ktype {
    K_STR,       /* char * */
    K_BOOL,      /* bool */
    K_INT,       /* int */
    K_INT64,     /* int64_t */
    K_DUR,       /* int64_t milliseconds, written "500ms", "3s", "5m", "1h" */
    K_STRLIST,   /* char *[CONF_MAX_LIST] + int count at aux */
    K_INT64LIST, /* int64_t[CONF_MAX_ROCKET_LEVELS] + int count at aux */
    K_PUBMODE,   /* enum publish_mode: direct|mq|dual */
    K_SYNC,      /* bool synchronous_full: full|normal */
};

struct key {
    const char *path;
    enum ktype type;
    size_t off;
    size_t aux; /* list count offset */
};

#define F(field) offsetof(struct conf, field)
#define KEY(p, t, field)                                                                           \
    {                                                                                              \
        p, t, F(field), 0                                                                          \
    }
#define LIST(p, t, field, count)                                                                   \
    {                                                                                              \
        p, t, F(field), F(count)                                                                   \
    }

static const struct key keys[] = {
    KEY("app.default_app_code", K_STR, app.default_app_code),
    KEY("app.node_id", K_STR, app.node_id),
    KEY("app.log_file", K_STR, app.log_file),
    KEY("app.log_level", K_STR, app.log_level),

    KEY("http.listen", K_STR, http.listen),
    KEY("http.advertise_addr", K_STR, http.advertise_addr),
    KEY("http.max_body_bytes", K_INT64, http.max_body_bytes),
    KEY("http.max_connections", K_INT, http.max_connections),
    KEY("http.request_timeout", K_DUR, http.request_timeout_ms),
    KEY("http.header_timeout", K_DUR, http.header_timeout_ms),
    KEY("http.body_timeout", K_DUR, http.body_timeout_ms),
    KEY("http.max_connections_per_ip", K_INT, http.max_connections_per_ip),
    KEY("http.tls.cert_file", K_STR, http.tls_cert_file),
    KEY("http.tls.key_file", K_STR, http.tls_key_file),

    KEY("auth.mode", K_STR, auth.mode),
    KEY("auth.jwt.hs256_secret_env", K_STR, auth.hs256_secret_env),
    KEY("auth.jwt.hs256_secret_file", K_STR, auth.hs256_secret_file),
    KEY("auth.jwt.public_key_file", K_STR, auth.public_key_file),
    KEY("auth.jwt.leeway", K_DUR, auth.leeway_ms),
    KEY("auth.jwt.issuer", K_STR, auth.issuer),
    KEY("auth.jwt.audience", K_STR, auth.audience),

    KEY("admin.listen", K_STR, admin.listen),
    KEY("admin.token_env", K_STR, admin.token_env),
    KEY("admin.token_file", K_STR, admin.token_file),
    KEY("admin.max_connections", K_INT, admin.max_connections),
    KEY("admin.tls.cert_file", K_STR, admin.tls_cert_file),
    KEY("admin.tls.key_file", K_STR, admin.tls_key_file),

    KEY("store.driver", K_STR, store.driver),
    KEY("store.sqlite.path", K_STR, store.sqlite.path),
    KEY("store.sqlite.synchronous", K_SYNC, store.sqlite.synchronous_full),
    KEY("store.sqlite.busy_timeout", K_DUR, store.sqlite.busy_timeout_ms),
    KEY("store.mysql.host", K_STR, store.mysql.host),
    KEY("store.mysql.port", K_INT, store.mysql.port),
    KEY("store.mysql.user", K_STR, store.mysql.user),
    KEY("store.mysql.password", K_STR, store.mysql.password),
    KEY("store.mysql.password_env", K_STR, store.mysql.password_env),
    KEY("store.mysql.database", K_STR, store.mysql.database),
    KEY("store.mysql.pool_size", K_INT, store.mysql.pool_size),
    KEY("store.mysql.connect_timeout", K_DUR, store.mysql.connect_timeout_ms),
    KEY("store.mysql.read_timeout", K_DUR, store.mysql.read_timeout_ms),
    KEY("store.mysql.write_timeout", K_DUR, store.mysql.write_timeout_ms),
    KEY("store.mysql.deadlock_retries", K_INT, store.mysql.deadlock_retries),
    KEY("store.group_commit_max", K_INT, store.group_commit_max),
    KEY("store.retention.delivered_max_age", K_DUR, store.retention_delivered_ms),
    KEY("store.retention.purge_batch", K_INT, store.purge_batch),
    KEY("store.retention.purge_interval", K_DUR, store.purge_interval_ms),

    KEY("room.snapshot_every_n", K_INT, room.snapshot_every_n),
    KEY("room.snapshots_keep", K_INT, room.snapshots_keep),
    KEY("room.idle_evict_after", K_DUR, room.idle_evict_ms),
    KEY("room.seat_count", K_INT, room.seat_count),
    KEY("room.max_members", K_INT, room.max_members),
    KEY("room.kick_ban", K_DUR, room.kick_ban_ms),
    LIST("room.rocket.thresholds", K_INT64LIST, room.rocket.thresholds, room.rocket.nthresholds),
    KEY("room.rocket.countdown", K_DUR, room.rocket.countdown_ms),

    KEY("wallet.driver", K_STR, wallet.driver),
    KEY("wallet.initial_balance", K_INT64, wallet.initial_balance),
    KEY("wallet.allow_topup", K_BOOL, wallet.allow_topup),

    KEY("redis.enabled", K_BOOL, redis.enabled),
    KEY("redis.addr", K_STR, redis.addr),
    KEY("redis.password", K_STR, redis.password),
    KEY("redis.db", K_INT, redis.db),
    KEY("redis.key_prefix", K_STR, redis.key_prefix),
    KEY("redis.connect_timeout", K_DUR, redis.connect_timeout_ms),
    KEY("redis.command_timeout", K_DUR, redis.command_timeout_ms),

    KEY("lease.driver", K_STR, lease.driver),
    KEY("lease.ttl", K_DUR, lease.ttl_ms),
    KEY("lease.renew_every", K_DUR, lease.renew_every_ms),

    KEY("projection.driver", K_STR, projection.driver),

    KEY("rocketmq.enabled", K_BOOL, rocketmq.enabled),
    LIST("rocketmq.name_servers", K_STRLIST, rocketmq.name_servers, rocketmq.nname_servers),
    KEY("rocketmq.name_server_domain", K_STR, rocketmq.name_server_domain),
    KEY("rocketmq.access_key", K_STR, rocketmq.access_key),
    KEY("rocketmq.secret_key", K_STR, rocketmq.secret_key),
    KEY("rocketmq.namespace", K_STR, rocketmq.namespace_),
    KEY("rocketmq.send_timeout", K_DUR, rocketmq.send_timeout_ms),
    KEY("rocketmq.retry", K_INT, rocketmq.retry),
    KEY("rocketmq.stream_replicas", K_INT, rocketmq.stream_replicas),
    KEY("rocketmq.stream_max_age", K_DUR, rocketmq.stream_max_age_ms),
    KEY("rocketmq.duplicate_window", K_DUR, rocketmq.duplicate_window_ms),
    KEY("rocketmq.consumer_store_dir", K_STR, rocketmq.consumer_store_dir),
    LIST("rocketmq.consumer_retry_delays_ms", K_INT64LIST, rocketmq.consumer_retry_delays_ms,
         rocketmq.nconsumer_retry_delays),
    KEY("rocketmq.consumer_ack_wait", K_DUR, rocketmq.consumer_ack_wait_ms),
    KEY("rocketmq.room_outbox.enabled", K_BOOL, rocketmq.room_outbox.enabled),
    KEY("rocketmq.room_outbox.topic", K_STR, rocketmq.room_outbox.topic),
    KEY("rocketmq.room_outbox.producer_group", K_STR, rocketmq.room_outbox.producer_group),
    KEY("rocketmq.room_outbox.tencent_im_consumer_enabled", K_BOOL,
        rocketmq.room_outbox.tencent_im_consumer_enabled),
    KEY("rocketmq.room_outbox.tencent_im_consumer_group", K_STR,
        rocketmq.room_outbox.tencent_im_consumer_group),
    KEY("rocketmq.room_outbox.activity_consumer_group", K_STR,
        rocketmq.room_outbox.activity_consumer_group),
    KEY("rocketmq.room_outbox.notice_consumer_group", K_STR,
        rocketmq.room_outbox.notice_consumer_group),
    KEY("rocketmq.room_outbox.consumer_max_reconsume_times", K_INT,
        rocketmq.room_outbox.consumer_max_reconsume_times),
    KEY("rocketmq.room_outbox.activity_consumer_enabled", K_BOOL,
        rocketmq.room_outbox.activity_consumer_enabled),
    KEY("rocketmq.room_outbox.notice_consumer_enabled", K_BOOL,
        rocketmq.room_outbox.notice_consumer_enabled),
    KEY("rocketmq.rocket_launch.enabled", K_BOOL, rocketmq.rocket_launch.enabled),
    KEY("rocketmq.rocket_launch.topic", K_STR, rocketmq.rocket_launch.topic),
    KEY("rocketmq.rocket_launch.producer_group", K_STR, rocketmq.rocket_launch.producer_group),
    KEY("rocketmq.rocket_launch.consumer_group", K_STR, rocketmq.rocket_launch.consumer_group),
    KEY("rocketmq.rocket_launch.consumer_max_reconsume_times", K_INT,
        rocketmq.rocket_launch.consumer_max_reconsume_times),

    KEY("outbox_worker.enabled", K_BOOL, outbox_worker.enabled),
    KEY("outbox_worker.publish_mode", K_PUBMODE, outbox_worker.publish_mode),
    KEY("outbox_worker.poll_interval", K_DUR, outbox_worker.poll_interval_ms),
    KEY("outbox_worker.batch_size", K_INT, outbox_worker.batch_size),
    KEY("outbox_worker.publish_timeout", K_DUR, outbox_worker.publish_timeout_ms),
    KEY("outbox_worker.retry_strategy", K_STR, outbox_worker.retry_strategy),
    KEY("outbox_worker.max_retry_count", K_INT, outbox_worker.max_retry_count),
    KEY("outbox_worker.initial_backoff", K_DUR, outbox_worker.initial_backoff_ms),
    KEY("outbox_worker.max_backoff", K_DUR, outbox_worker.max_backoff_ms),
    KEY("outbox_worker.workers", K_INT, outbox_worker.workers),
    KEY("outbox_worker.lock_timeout", K_DUR, outbox_worker.lock_timeout_ms),
    KEY("outbox_worker.handoff_queue", K_INT, outbox_worker.handoff_queue),
    KEY("outbox_worker.log_sink.enabled", K_BOOL, outbox_worker.log_sink_enabled),
    KEY("outbox_worker.log_sink.path", K_STR, outbox_worker.log_sink_path),

    KEY("tencent_im.enabled", K_BOOL, tencent_im.enabled),
    KEY("tencent_im.base_url", K_STR, tencent_im.base_url),
    KEY("tencent_im.sdk_app_id", K_INT64, tencent_im.sdk_app_id),
    KEY("tencent_im.admin_identifier", K_STR, tencent_im.admin_identifier),
    KEY("tencent_im.secret_key_env", K_STR, tencent_im.secret_key_env),
    KEY("tencent_im.secret_key_file", K_STR, tencent_im.secret_key_file),
    KEY("tencent_im.usersig_ttl", K_DUR, tencent_im.usersig_ttl_ms),
    KEY("tencent_im.group_type", K_STR, tencent_im.group_type),
    KEY("tencent_im.ca_file", K_STR, tencent_im.ca_file),
    KEY("tencent_im.timeout", K_DUR, tencent_im.timeout_ms),

    KEY("activity.enabled", K_BOOL, activity.enabled),
    KEY("activity.target", K_STR, activity.target),
};

#define NKEYS (sizeof(keys) / sizeof(keys[0]))

static int
key_index(const char *path)
{
    for (size_t i = 0; i < NKEYS; i++)
        if (strcmp(keys[i].path, path) == 0)
            return (int)i;
    return -1;
}

/* True when path names a mapping that holds table keys ("store", "store.sqlite"). */
static int
is_section(const char *path)
{
    size_t n = strlen(path);

    for (size_t i = 0; i < NKEYS; i++)
        if (strncmp(keys[i].path, path, n) == 0 && keys[i].path[n] == '.')
            return 1;
    return 0;
}

/* ==== Defaults ==== */

static void
set_str(char **dst, const char *v)
{
    free(*dst);
    *dst = xstrdup(v);
}

void
conf_defaults(struct conf *c)
{
    memset(c, 0, sizeof(*c));
    c->path = xstrdup("");

    c->app.default_app_code = xstrdup("hyapp");
    c->app.node_id = xstrdup("");
    c->app.log_file = xstrdup("");
    c->app.log_level = xstrdup("info");

    c->http.listen = xstrdup("127.0.0.1:8080");
    c->http.advertise_addr = xstrdup("");
    c->http.max_body_bytes = 65536;
    c->http.max_connections = 1024;
    c->http.request_timeout_ms = 30000;
    c->http.header_timeout_ms = 10000;
    c->http.body_timeout_ms = 30000;
    c->http.max_connections_per_ip = 64;
    c->http.tls_cert_file = xstrdup("");
    c->http.tls_key_file = xstrdup("");

    c->auth.mode = xstrdup("none");
    c->auth.hs256_secret_env = xstrdup("");
    c->auth.hs256_secret_file = xstrdup("");
    c->auth.public_key_file = xstrdup("");
    c->auth.leeway_ms = 30000;
    c->auth.issuer = xstrdup("");
    c->auth.audience = xstrdup("");

    c->admin.listen = xstrdup("127.0.0.1:8081");
    c->admin.token_env = xstrdup("");
    c->admin.token_file = xstrdup("");
    c->admin.max_connections = 64;
    c->admin.tls_cert_file = xstrdup("");
    c->admin.tls_key_file = xstrdup("");

    c->store.driver = xstrdup("sqlite");
    c->store.sqlite.path = xstrdup("./var/roomd.db");
    c->store.sqlite.synchronous_full = true;
    c->store.sqlite.busy_timeout_ms = 5000;
    c->store.mysql.host = xstrdup("127.0.0.1");
    c->store.mysql.port = 3306;
    c->store.mysql.user = xstrdup("roomd");
    c->store.mysql.password = xstrdup("");
    c->store.mysql.password_env = xstrdup("");
    c->store.mysql.database = xstrdup("roomd");
    c->store.mysql.pool_size = 8;
    c->store.mysql.connect_timeout_ms = 3000;
    c->store.mysql.read_timeout_ms = 10000;
    c->store.mysql.write_timeout_ms = 10000;
    c->store.mysql.deadlock_retries = 3;
    c->store.group_commit_max = 64;
    c->store.retention_delivered_ms = 72LL * 3600 * 1000;
    c->store.purge_batch = 500;
    c->store.purge_interval_ms = 60000;

    c->room.snapshot_every_n = 50;
    c->room.snapshots_keep = 3;
    c->room.idle_evict_ms = 10 * 60000;
    c->room.seat_count = 8;
    c->room.max_members = 10000;
    c->room.kick_ban_ms = 10 * 60000;
    c->room.rocket.thresholds[0] = 1000;
    c->room.rocket.thresholds[1] = 5000;
    c->room.rocket.thresholds[2] = 20000;
    c->room.rocket.nthresholds = 3;
    c->room.rocket.countdown_ms = 60000;

    c->wallet.driver = xstrdup("embedded");
    c->wallet.initial_balance = 0;
    c->wallet.allow_topup = false;

    c->redis.enabled = false;
    c->redis.addr = xstrdup("127.0.0.1:6379");
    c->redis.password = xstrdup("");
    c->redis.db = 0;
    c->redis.key_prefix = xstrdup("roomd:");
    c->redis.connect_timeout_ms = 500;
    c->redis.command_timeout_ms = 500;

    c->lease.driver = xstrdup("local");
    c->lease.ttl_ms = 10000;
    c->lease.renew_every_ms = 3000;

    c->projection.driver = xstrdup("memory");

    struct conf_rocketmq *mq = &c->rocketmq;
    mq->enabled = false;
    mq->nname_servers = 0;
    mq->name_server_domain = xstrdup("");
    mq->access_key = xstrdup("");
    mq->secret_key = xstrdup("");
    mq->namespace_ = xstrdup("");
    mq->send_timeout_ms = 3000;
    mq->retry = 2;
    mq->stream_replicas = 1;
    mq->stream_max_age_ms = 72LL * 3600 * 1000;
    mq->duplicate_window_ms = 10 * 60000;
    mq->consumer_store_dir = xstrdup("./var/consumers");
    {
        /* RocketMQ's reconsume delay levels 3..18: 10s 30s 1m 2m ... 1h 2h. */
        static const int64_t sched[] = {10000,   30000,   60000,   120000, 180000, 240000,
                                        300000,  360000,  420000,  480000, 540000, 600000,
                                        1200000, 1800000, 3600000, 7200000};
        memcpy(mq->consumer_retry_delays_ms, sched, sizeof(sched));
        mq->nconsumer_retry_delays = (int)(sizeof(sched) / sizeof(sched[0]));
    }
    mq->consumer_ack_wait_ms = 30000;
    mq->room_outbox.enabled = false;
    mq->room_outbox.topic = xstrdup("hyapp_room_outbox");
    mq->room_outbox.producer_group = xstrdup("hyapp-room-outbox-producer");
    mq->room_outbox.tencent_im_consumer_enabled = false;
    mq->room_outbox.tencent_im_consumer_group = xstrdup("hyapp-room-im-bridge");
    mq->room_outbox.activity_consumer_group = xstrdup("hyapp-activity-room-outbox");
    mq->room_outbox.notice_consumer_group = xstrdup("hyapp-notice-room-outbox");
    mq->room_outbox.consumer_max_reconsume_times = 16;
    mq->rocket_launch.enabled = false;
    mq->rocket_launch.topic = xstrdup("hyapp_room_rocket_launch");
    mq->rocket_launch.producer_group = xstrdup("hyapp-room-rocket-open-producer");
    mq->rocket_launch.consumer_group = xstrdup("hyapp-room-rocket-open");
    mq->rocket_launch.consumer_max_reconsume_times = 16;

    struct conf_outbox *ob = &c->outbox_worker;
    ob->enabled = true;
    ob->publish_mode = PUBLISH_DIRECT;
    ob->poll_interval_ms = 1000;
    ob->batch_size = 100;
    ob->publish_timeout_ms = 3000;
    ob->retry_strategy = xstrdup("exponential_backoff");
    ob->max_retry_count = 10;
    ob->initial_backoff_ms = 5000;
    ob->max_backoff_ms = 5 * 60000;
    ob->workers = 2;
    ob->lock_timeout_ms = 30000;
    ob->handoff_queue = -1;
    ob->log_sink_enabled = true;
    ob->log_sink_path = xstrdup("./var/outbox-events.jsonl");

    struct conf_tencent_im *im = &c->tencent_im;
    im->enabled = false;
    im->base_url = xstrdup("https://console.tim.qq.com");
    im->sdk_app_id = 0;
    im->admin_identifier = xstrdup("");
    im->secret_key_env = xstrdup("TIM_SECRET_KEY");
    im->secret_key_file = xstrdup("");
    im->usersig_ttl_ms = 24LL * 3600 * 1000;
    im->group_type = xstrdup("AVChatRoom");
    im->ca_file = xstrdup("");
    im->timeout_ms = 4000;

    c->activity.enabled = false;
    c->activity.target = xstrdup("127.0.0.1:50051");
}

void
conf_free(struct conf *c)
{
    if (c == NULL)
        return;
    for (size_t i = 0; i < NKEYS; i++) {
        char *base = (char *)c + keys[i].off;
        if (keys[i].type == K_STR) {
            free(*(char **)base);
        } else if (keys[i].type == K_STRLIST) {
            char **list = (char **)base;
            int n = *(int *)((char *)c + keys[i].aux);
            for (int j = 0; j < n; j++)
                free(list[j]);
        }
    }
    free(c->path);
    free(c);
}

/* ==== Scalars ==== */

int
conf_parse_duration(const char *s, int64_t *out_ms)
{
    int64_t total = 0;
    const char *p = s;

    if (s == NULL || *s == '\0')
        return -1;
    if (strcmp(s, "0") == 0) {
        *out_ms = 0;
        return 0;
    }
    while (*p != '\0') {
        if (*p < '0' || *p > '9')
            return -1;
        int64_t n = 0;
        while (*p >= '0' && *p <= '9') {
            if (n > (INT64_MAX - 9) / 10)
                return -1;
            n = n * 10 + (*p++ - '0');
        }
        int64_t unit;
        if (strncmp(p, "ms", 2) == 0) {
            unit = 1;
            p += 2;
        } else if (*p == 's') {
            unit = 1000;
            p++;
        } else if (*p == 'm') {
            unit = 60000;
            p++;
        } else if (*p == 'h') {
            unit = 3600000;
            p++;
        } else {
            return -1;
        }
        if (n > (INT64_MAX - total) / unit)
            return -1;
        total += n * unit;
    }
    *out_ms = total;
    return 0;
}

static int
parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"true", "yes", "on"};
    static const char *const no[] = {"false", "no", "off"};

    for (size_t i = 0; i < 3; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = true;
            return 0;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = false;
            return 0;
        }
    }
    return -1;
}

static int
parse_int64(const char *s, int64_t *out)
{
    char *end;

    if (*s == '\0')
        return -1;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0')
        return -1;
    *out = v;
    return 0;
}

/* ==== The walker ==== */

struct mark {
    int set;
    size_t line, col; /* 0-based, as libyaml gives them */
};

struct loader {
    const char *file;
    yaml_document_t *doc;
    struct conf *c;
    struct mark marks[NKEYS];
    char *err;
    size_t errlen;
};

static int fail_at(struct loader *ld, const yaml_node_t *n, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int
fail_at(struct loader *ld, const yaml_node_t *n, const char *path, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    snprintf(ld->err, ld->errlen, "%s:%zu:%zu: %s: %s", ld->file, n->start_mark.line + 1,
             n->start_mark.column + 1, path, msg);
    return ROOMD_EINVAL;
}

static const char *
scalar(const yaml_node_t *n)
{
    return (const char *)n->data.scalar.value;
}

/* A plain "~", "null" or empty scalar. */
static int
is_null(const yaml_node_t *n)
{
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return 0;
    const char *s = scalar(n);
    return *s == '\0' || strcmp(s, "~") == 0 || strcmp(s, "null") == 0;
}

static const char *
type_name(enum ktype t)
{
    switch (t) {
    case K_STR:
        return "a string";
    case K_BOOL:
        return "true or false";
    case K_INT:
    case K_INT64:
        return "an integer";
    case K_DUR:
        return "a duration like 500ms, 3s, 5m";
    case K_STRLIST:
        return "a list of strings";
    case K_INT64LIST:
        return "a list of integers";
    case K_PUBMODE:
        return "one of direct, mq, dual";
    case K_SYNC:
        return "one of full, normal";
    }
    return "?";
}

static int
set_list(struct loader *ld, const struct key *k, const yaml_node_t *n, const char *path)
{
    char *base = (char *)ld->c + k->off;
    int *count = (int *)((char *)ld->c + k->aux);
    int max = k->type == K_STRLIST ? CONF_MAX_LIST : CONF_MAX_ROCKET_LEVELS;
    int i = 0;

    if (is_null(n)) {
        n = NULL; /* "key:" alone is an empty list */
    } else if (n->type != YAML_SEQUENCE_NODE) {
        return fail_at(ld, n, path, "expected %s", type_name(k->type));
    }
    if (k->type == K_STRLIST) {
        char **list = (char **)base;
        for (int j = 0; j < *count; j++) {
            free(list[j]);
            list[j] = NULL;
        }
    }
    *count = 0;
    if (n == NULL)
        return 0;
    for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top;
         it++, i++) {
        yaml_node_t *e = yaml_document_get_node(ld->doc, *it);
        if (i >= max)
            return fail_at(ld, e, path, "too many entries (at most %d)", max);
        if (e->type != YAML_SCALAR_NODE)
            return fail_at(ld, e, path, "expected %s", type_name(k->type));
        if (k->type == K_STRLIST) {
            ((char **)base)[i] = xstrdup(scalar(e));
        } else if (parse_int64(scalar(e), &((int64_t *)base)[i]) != 0) {
            return fail_at(ld, e, path, "expected an integer, got \"%s\"", scalar(e));
        }
        *count = i + 1;
    }
    return 0;
}

static int
set_value(struct loader *ld, const struct key *k, const yaml_node_t *n, const char *path)
{
    void *dst = (char *)ld->c + k->off;
    const char *s;
    int64_t v;
    bool b;

    if (k->type == K_STRLIST || k->type == K_INT64LIST)
        return set_list(ld, k, n, path);
    if (n->type != YAML_SCALAR_NODE)
        return fail_at(ld, n, path, "expected %s", type_name(k->type));
    s = scalar(n);
    switch (k->type) {
    case K_STR:
        set_str(dst, is_null(n) ? "" : s);
        return 0;
    case K_BOOL:
        if (parse_bool(s, &b) != 0)
            break;
        *(bool *)dst = b;
        return 0;
    case K_INT:
        if (parse_int64(s, &v) != 0 || v < INT_MIN || v > INT_MAX)
            break;
        *(int *)dst = (int)v;
        return 0;
    case K_INT64:
        if (parse_int64(s, &v) != 0)
            break;
        *(int64_t *)dst = v;
        return 0;
    case K_DUR:
        if (conf_parse_duration(s, &v) != 0)
            break;
        *(int64_t *)dst = v;
        return 0;
    case K_PUBMODE:
        if (strcmp(s, "direct") == 0)
            *(enum publish_mode *)dst = PUBLISH_DIRECT;
        else if (strcmp(s, "mq") == 0)
            *(enum publish_mode *)dst = PUBLISH_MQ;
        else if (strcmp(s, "dual") == 0)
            *(enum publish_mode *)dst = PUBLISH_DUAL;
        else
            break;
        return 0;
    case K_SYNC:
        if (strcmp(s, "full") == 0)
            *(bool *)dst = true;
        else if (strcmp(s, "normal") == 0)
            *(bool *)dst = false;
        else
            break;
        return 0;
    default:
        break;
    }
    return fail_at(ld, n, path, "expected %s, got \"%s\"", type_name(k->type), s);
}

/* Walks mapping n whose dotted path is prefix ("" for the root). */
static int
walk(struct loader *ld, const yaml_node_t *n, const char *prefix)
{
    char path[256];
    int rc;

    if (n->type != YAML_MAPPING_NODE) {
        if (*prefix == '\0')
            return fail_at(ld, n, "(top level)", "expected a mapping of sections");
        return fail_at(ld, n, prefix, "expected a mapping");
    }
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *kn = yaml_document_get_node(ld->doc, p->key);
        yaml_node_t *vn = yaml_document_get_node(ld->doc, p->value);
        if (kn->type != YAML_SCALAR_NODE)
            return fail_at(ld, kn, *prefix ? prefix : "(top level)", "keys must be scalars");
        snprintf(path, sizeof(path), "%s%s%s", prefix, *prefix ? "." : "", scalar(kn));
        int idx = key_index(path);
        if (idx >= 0) {
            if (ld->marks[idx].set)
                return fail_at(ld, kn, path, "duplicate key");
            ld->marks[idx].set = 1;
            ld->marks[idx].line = vn->start_mark.line;
            ld->marks[idx].col = vn->start_mark.column;
            if ((rc = set_value(ld, &keys[idx], vn, path)) != 0)
                return rc;
        } else if (is_section(path)) {
            if (is_null(vn))
                continue; /* "section:" with nothing under it */
            if ((rc = walk(ld, vn, path)) != 0)
                return rc;
        } else {
            return fail_at(ld, kn, path, "unknown key");
        }
    }
    return 0;
}

/* ==== Validation ==== */

struct vctx {
    const char *file;         /* NULL: no location prefix */
    const struct mark *marks; /* NULL: none */
    char *err;
    size_t errlen;
    int failed;
};

static void bad(struct vctx *v, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Records the first failure: "[FILE[:LINE:COL]: ]path: problem". */
static void
bad(struct vctx *v, const char *path, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    int idx;

    if (v->failed)
        return;
    v->failed = 1;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    idx = key_index(path);
    if (v->file != NULL && v->marks != NULL && idx >= 0 && v->marks[idx].set)
        snprintf(v->err, v->errlen, "%s:%zu:%zu: %s: %s", v->file, v->marks[idx].line + 1,
                 v->marks[idx].col + 1, path, msg);
    else if (v->file != NULL)
        snprintf(v->err, v->errlen, "%s: %s: %s", v->file, path, msg);
    else
        snprintf(v->err, v->errlen, "%s: %s", path, msg);
}

static int
empty(const char *s)
{
    return s == NULL || *s == '\0';
}

static int
one_of(const char *s, const char *const *names)
{
    for (; *names != NULL; names++)
        if (s != NULL && strcmp(s, *names) == 0)
            return 1;
    return 0;
}

/* "host:port" with a non-empty host and a port in 1..65535 ("[::1]:80" too). */
static int
host_port_ok(const char *s)
{
    const char *colon;
    char *end;

    if (empty(s) || (colon = strrchr(s, ':')) == NULL || colon == s)
        return 0;
    errno = 0;
    long port = strtol(colon + 1, &end, 10);
    return errno == 0 && end != colon + 1 && *end == '\0' && port >= 1 && port <= 65535;
}

static void
check_enum(struct vctx *v, const char *path, const char *s, const char *const *names,
           const char *list)
{
    if (!one_of(s, names))
        bad(v, path, "must be one of %s, got \"%s\"", list, s ? s : "");
}

bool
conf_listen_is_loopback(const char *listen)
{
    const char *colon = listen ? strrchr(listen, ':') : NULL;
    size_t n;

    if (colon == NULL)
        return false;
    n = (size_t)(colon - listen);
    if (n == 9 && strncmp(listen, "localhost", 9) == 0)
        return true;
    if (n == 5 && strncmp(listen, "[::1]", 5) == 0)
        return true;
    return n >= 4 && strncmp(listen, "127.", 4) == 0;
}

/* At most one of two "where the secret is" keys. */
static void
one_secret_source(struct vctx *v, const char *a_key, const char *a, const char *b_key,
                  const char *b)
{
    if (!empty(a) && !empty(b))
        bad(v, b_key, "set either %s or %s, not both", a_key, b_key);
}

/* auth.* and admin.* (docs/auth.md). */
static void
validate_auth_admin(const struct conf *c, struct vctx *v)
{
    static const char *const modes[] = {"none", "jwt", NULL};
    const struct conf_auth *a = &c->auth;
    const struct conf_admin *ad = &c->admin;
    bool hs = !empty(a->hs256_secret_env) || !empty(a->hs256_secret_file);

    check_enum(v, "auth.mode", a->mode, modes, "none, jwt");
    if (one_of(a->mode, (const char *const[]){"none", NULL})) {
        if (!conf_listen_is_loopback(c->http.listen))
            bad(v, "auth.mode", "none needs every listener on loopback; http.listen is \"%s\"",
                c->http.listen ? c->http.listen : "");
        else if (!conf_listen_is_loopback(ad->listen))
            bad(v, "auth.mode", "none needs every listener on loopback; admin.listen is \"%s\"",
                ad->listen ? ad->listen : "");
    }
    one_secret_source(v, "auth.jwt.hs256_secret_env", a->hs256_secret_env,
                      "auth.jwt.hs256_secret_file", a->hs256_secret_file);
    if (one_of(a->mode, (const char *const[]){"jwt", NULL})) {
        if (!hs && empty(a->public_key_file))
            bad(v, "auth.jwt.hs256_secret_env",
                "auth.mode jwt needs auth.jwt.hs256_secret_env, auth.jwt.hs256_secret_file or "
                "auth.jwt.public_key_file");
        if (hs && !empty(a->public_key_file))
            bad(v, "auth.jwt.public_key_file",
                "set either an HS256 secret or auth.jwt.public_key_file, not both");
    }
    if (a->leeway_ms < 0)
        bad(v, "auth.jwt.leeway", "must be >= 0");
    if (!host_port_ok(ad->listen))
        bad(v, "admin.listen", "must be host:port with a port in 1..65535, got \"%s\"",
            ad->listen ? ad->listen : "");
    else if (c->http.listen != NULL && strcmp(ad->listen, c->http.listen) == 0)
        bad(v, "admin.listen", "must differ from http.listen");
    one_secret_source(v, "admin.token_env", ad->token_env, "admin.token_file", ad->token_file);
    if (empty(ad->token_env) && empty(ad->token_file) && !conf_listen_is_loopback(ad->listen))
        bad(v, "admin.token_env",
            "admin.listen \"%s\" is not loopback: set admin.token_env or admin.token_file",
            ad->listen ? ad->listen : "");
    if (ad->max_connections < 1)
        bad(v, "admin.max_connections", "must be >= 1");
    if (empty(c->http.tls_cert_file) != empty(c->http.tls_key_file))
        bad(v, empty(c->http.tls_cert_file) ? "http.tls.cert_file" : "http.tls.key_file",
            "set both http.tls.cert_file and http.tls.key_file, or neither");
    if (empty(ad->tls_cert_file) != empty(ad->tls_key_file))
        bad(v, empty(ad->tls_cert_file) ? "admin.tls.cert_file" : "admin.tls.key_file",
            "set both admin.tls.cert_file and admin.tls.key_file, or neither");
}

static void
validate(const struct conf *c, struct vctx *v)
{
    static const char *const levels[] = {"debug", "info", "warn", "error", NULL};
    static const char *const stores[] = {"sqlite", "mysql", NULL};
    static const char *const wallets[] = {"embedded", NULL};
    static const char *const leases[] = {"local", "redis", NULL};
    static const char *const projs[] = {"memory", "redis", NULL};
    static const char *const groups[] = {"AVChatRoom", "Public", "ChatRoom", "Private", NULL};
    static const char *const strategies[] = {"exponential_backoff", NULL};
    const struct conf_outbox *ob = &c->outbox_worker;
    const struct conf_rocketmq *mq = &c->rocketmq;
    const struct conf_tencent_im *im = &c->tencent_im;
    const struct conf_room *r = &c->room;

    /* app, http */
    if (empty(c->app.default_app_code))
        bad(v, "app.default_app_code", "must not be empty");
    check_enum(v, "app.log_level", c->app.log_level, levels, "debug, info, warn, error");
    if (!host_port_ok(c->http.listen))
        bad(v, "http.listen", "must be host:port with a port in 1..65535, got \"%s\"",
            c->http.listen ? c->http.listen : "");
    if (!empty(c->http.advertise_addr) && !host_port_ok(c->http.advertise_addr))
        bad(v, "http.advertise_addr", "must be host:port, got \"%s\"", c->http.advertise_addr);
    if (c->http.max_body_bytes <= 0)
        bad(v, "http.max_body_bytes", "must be > 0");
    if (c->http.max_connections < 1)
        bad(v, "http.max_connections", "must be >= 1");
    if (c->http.request_timeout_ms <= 0)
        bad(v, "http.request_timeout", "must be > 0");
    if (c->http.header_timeout_ms <= 0)
        bad(v, "http.header_timeout", "must be > 0");
    if (c->http.body_timeout_ms <= 0)
        bad(v, "http.body_timeout", "must be > 0");
    if (c->http.max_connections_per_ip < 0)
        bad(v, "http.max_connections_per_ip", "must be >= 0 (0 = no limit)");
    validate_auth_admin(c, v);

    /* store */
    check_enum(v, "store.driver", c->store.driver, stores, "sqlite, mysql");
    if (one_of(c->store.driver, (const char *const[]){"sqlite", NULL})) {
        if (empty(c->store.sqlite.path))
            bad(v, "store.sqlite.path", "must not be empty with store.driver sqlite");
        if (c->store.sqlite.busy_timeout_ms < 0)
            bad(v, "store.sqlite.busy_timeout", "must be >= 0");
    }
    if (one_of(c->store.driver, (const char *const[]){"mysql", NULL})) {
        const struct conf_mysql *m = &c->store.mysql;
        if (empty(m->host))
            bad(v, "store.mysql.host", "must not be empty with store.driver mysql");
        if (m->port < 1 || m->port > 65535)
            bad(v, "store.mysql.port", "must be in 1..65535");
        if (empty(m->user))
            bad(v, "store.mysql.user", "must not be empty with store.driver mysql");
        if (empty(m->database))
            bad(v, "store.mysql.database", "must not be empty with store.driver mysql");
        if (m->pool_size < 1)
            bad(v, "store.mysql.pool_size", "must be >= 1");
        if (m->connect_timeout_ms <= 0)
            bad(v, "store.mysql.connect_timeout", "must be > 0");
        if (m->read_timeout_ms <= 0)
            bad(v, "store.mysql.read_timeout", "must be > 0");
        if (m->write_timeout_ms <= 0)
            bad(v, "store.mysql.write_timeout", "must be > 0");
        if (m->deadlock_retries < 0)
            bad(v, "store.mysql.deadlock_retries", "must be >= 0");
    }
    if (c->store.group_commit_max < 1)
        bad(v, "store.group_commit_max", "must be >= 1");
    if (c->store.retention_delivered_ms < 0)
        bad(v, "store.retention.delivered_max_age", "must be >= 0 (0 keeps delivered rows)");
    if (c->store.purge_batch < 1)
        bad(v, "store.retention.purge_batch", "must be >= 1");
    if (c->store.purge_interval_ms <= 0)
        bad(v, "store.retention.purge_interval", "must be > 0");

    /* room */
    if (r->snapshot_every_n < 1)
        bad(v, "room.snapshot_every_n", "must be >= 1");
    if (r->snapshots_keep < 1)
        bad(v, "room.snapshots_keep", "must be >= 1");
    if (r->idle_evict_ms <= 0)
        bad(v, "room.idle_evict_after", "must be > 0");
    if (r->seat_count < 1 || r->seat_count > 32)
        bad(v, "room.seat_count", "must be in 1..32 (ROOM_MAX_SEATS), got %d", r->seat_count);
    if (r->max_members < 1)
        bad(v, "room.max_members", "must be >= 1");
    if (r->kick_ban_ms < 0)
        bad(v, "room.kick_ban", "must be >= 0 (0 = no ban)");
    if (r->rocket.nthresholds < 1)
        bad(v, "room.rocket.thresholds", "needs at least one level");
    for (int i = 0; i < r->rocket.nthresholds; i++) {
        if (r->rocket.thresholds[i] <= 0)
            bad(v, "room.rocket.thresholds", "every threshold must be > 0");
        else if (i > 0 && r->rocket.thresholds[i] <= r->rocket.thresholds[i - 1])
            bad(v, "room.rocket.thresholds", "must be strictly increasing");
    }
    if (r->rocket.countdown_ms <= 0)
        bad(v, "room.rocket.countdown", "must be > 0");

    /* wallet */
    check_enum(v, "wallet.driver", c->wallet.driver, wallets, "embedded");
    if (c->wallet.initial_balance < 0)
        bad(v, "wallet.initial_balance", "must be >= 0");

    /* redis, lease, projection */
    if (c->redis.enabled) {
        if (!host_port_ok(c->redis.addr))
            bad(v, "redis.addr", "must be host:port, got \"%s\"", c->redis.addr);
        if (c->redis.db < 0)
            bad(v, "redis.db", "must be >= 0");
        if (c->redis.connect_timeout_ms <= 0)
            bad(v, "redis.connect_timeout", "must be > 0");
        if (c->redis.command_timeout_ms <= 0)
            bad(v, "redis.command_timeout", "must be > 0");
    }
    check_enum(v, "lease.driver", c->lease.driver, leases, "local, redis");
    if (one_of(c->lease.driver, leases + 1) && !c->redis.enabled)
        bad(v, "lease.driver", "redis needs redis.enabled: true");
    if (c->lease.ttl_ms <= 0)
        bad(v, "lease.ttl", "must be > 0");
    if (c->lease.renew_every_ms <= 0 || c->lease.renew_every_ms >= c->lease.ttl_ms)
        bad(v, "lease.renew_every", "must be > 0 and < lease.ttl");
    check_enum(v, "projection.driver", c->projection.driver, projs, "memory, redis");
    if (one_of(c->projection.driver, projs + 1) && !c->redis.enabled)
        bad(v, "projection.driver", "redis needs redis.enabled: true");

    /* rocketmq (NATS JetStream) */
    if (mq->enabled) {
        if (mq->nname_servers < 1)
            bad(v, "rocketmq.name_servers", "needs at least one NATS URL when rocketmq.enabled");
        for (int i = 0; i < mq->nname_servers; i++)
            if (empty(mq->name_servers[i]))
                bad(v, "rocketmq.name_servers", "entries must not be empty");
        if (mq->send_timeout_ms <= 0)
            bad(v, "rocketmq.send_timeout", "must be > 0");
        if (mq->retry < 0)
            bad(v, "rocketmq.retry", "must be >= 0");
        if (mq->stream_replicas < 1 || mq->stream_replicas > 5)
            bad(v, "rocketmq.stream_replicas", "must be in 1..5");
        if (mq->stream_max_age_ms < 0)
            bad(v, "rocketmq.stream_max_age", "must be >= 0 (0 = unlimited)");
        if (mq->duplicate_window_ms <= 0)
            bad(v, "rocketmq.duplicate_window", "must be > 0");
        if (mq->consumer_ack_wait_ms <= 0)
            bad(v, "rocketmq.consumer_ack_wait", "must be > 0");
        for (int i = 0; i < mq->nconsumer_retry_delays; i++)
            if (mq->consumer_retry_delays_ms[i] <= 0)
                bad(v, "rocketmq.consumer_retry_delays_ms", "every delay must be > 0");
    }
    if ((mq->room_outbox.activity_consumer_enabled || mq->room_outbox.notice_consumer_enabled) &&
        !mq->enabled)
        bad(v,
            mq->room_outbox.activity_consumer_enabled
                ? "rocketmq.room_outbox.activity_consumer_enabled"
                : "rocketmq.room_outbox.notice_consumer_enabled",
            "needs rocketmq.enabled: true");
    if (mq->room_outbox.enabled) {
        if (!mq->enabled)
            bad(v, "rocketmq.room_outbox.enabled", "needs rocketmq.enabled: true");
        if (empty(mq->room_outbox.topic))
            bad(v, "rocketmq.room_outbox.topic", "must not be empty");
        if (empty(mq->room_outbox.producer_group))
            bad(v, "rocketmq.room_outbox.producer_group", "must not be empty");
        if (mq->room_outbox.consumer_max_reconsume_times < 0)
            bad(v, "rocketmq.room_outbox.consumer_max_reconsume_times", "must be >= 0");
    }
    if (mq->room_outbox.tencent_im_consumer_enabled) {
        if (!mq->enabled)
            bad(v, "rocketmq.room_outbox.tencent_im_consumer_enabled",
                "needs rocketmq.enabled: true");
        if (!im->enabled)
            bad(v, "rocketmq.room_outbox.tencent_im_consumer_enabled",
                "needs tencent_im.enabled: true");
        if (empty(mq->room_outbox.tencent_im_consumer_group))
            bad(v, "rocketmq.room_outbox.tencent_im_consumer_group", "must not be empty");
    }
    if (mq->rocket_launch.enabled) {
        if (!mq->enabled)
            bad(v, "rocketmq.rocket_launch.enabled", "needs rocketmq.enabled: true");
        if (empty(mq->rocket_launch.topic))
            bad(v, "rocketmq.rocket_launch.topic", "must not be empty");
        if (empty(mq->rocket_launch.consumer_group))
            bad(v, "rocketmq.rocket_launch.consumer_group", "must not be empty");
        if (mq->rocket_launch.consumer_max_reconsume_times < 0)
            bad(v, "rocketmq.rocket_launch.consumer_max_reconsume_times", "must be >= 0");
    }

    /* outbox_worker (seed 配置规则) */
    if (ob->publish_mode != PUBLISH_DIRECT && ob->publish_mode != PUBLISH_MQ &&
        ob->publish_mode != PUBLISH_DUAL)
        bad(v, "outbox_worker.publish_mode", "must be one of direct, mq, dual");
    if (ob->publish_mode == PUBLISH_MQ || ob->publish_mode == PUBLISH_DUAL) {
        const char *m = ob->publish_mode == PUBLISH_MQ ? "mq" : "dual";
        if (!mq->enabled)
            bad(v, "outbox_worker.publish_mode", "%s needs rocketmq.enabled: true", m);
        else if (!mq->room_outbox.enabled)
            bad(v, "outbox_worker.publish_mode", "%s needs rocketmq.room_outbox.enabled: true", m);
    }
    if (ob->poll_interval_ms <= 0)
        bad(v, "outbox_worker.poll_interval", "must be > 0 (avoids a busy loop)");
    if (ob->batch_size <= 0)
        bad(v, "outbox_worker.batch_size", "must be > 0");
    if (ob->publish_timeout_ms <= 0)
        bad(v, "outbox_worker.publish_timeout", "must be > 0");
    check_enum(v, "outbox_worker.retry_strategy", ob->retry_strategy, strategies,
               "exponential_backoff");
    if (ob->max_retry_count <= 0)
        bad(v, "outbox_worker.max_retry_count", "must be > 0");
    if (ob->initial_backoff_ms <= 0)
        bad(v, "outbox_worker.initial_backoff", "must be > 0");
    if (ob->max_backoff_ms < ob->initial_backoff_ms)
        bad(v, "outbox_worker.max_backoff", "must be >= outbox_worker.initial_backoff");
    if (ob->workers < 1)
        bad(v, "outbox_worker.workers", "must be >= 1");
    if (ob->lock_timeout_ms <= ob->publish_timeout_ms)
        bad(v, "outbox_worker.lock_timeout", "must be > outbox_worker.publish_timeout");
    if (ob->handoff_queue < -1)
        bad(v, "outbox_worker.handoff_queue", "must be >= -1 (-1 auto, 0 off)");
    if (ob->log_sink_enabled && empty(ob->log_sink_path))
        bad(v, "outbox_worker.log_sink.path", "must not be empty when the log sink is enabled");

    /* tencent_im */
    check_enum(v, "tencent_im.group_type", im->group_type, groups,
               "AVChatRoom, Public, ChatRoom, Private");
    if (im->enabled) {
        if (empty(im->base_url))
            bad(v, "tencent_im.base_url", "must not be empty");
        if (im->sdk_app_id <= 0)
            bad(v, "tencent_im.sdk_app_id", "must be > 0 when tencent_im.enabled");
        if (empty(im->admin_identifier))
            bad(v, "tencent_im.admin_identifier", "must not be empty when tencent_im.enabled");
        if (empty(im->secret_key_env) && empty(im->secret_key_file))
            bad(v, "tencent_im.secret_key_env",
                "tencent_im.enabled needs secret_key_env or secret_key_file");
        if (im->usersig_ttl_ms <= 0)
            bad(v, "tencent_im.usersig_ttl", "must be > 0");
        if (im->timeout_ms <= 0)
            bad(v, "tencent_im.timeout", "must be > 0");
    }

    /* activity */
    if (c->activity.enabled && !host_port_ok(c->activity.target))
        bad(v, "activity.target", "must be host:port, got \"%s\"",
            c->activity.target ? c->activity.target : "");
}

int
conf_validate(const struct conf *c, char *err, size_t errlen)
{
    struct vctx v = {.err = err, .errlen = errlen};

    validate(c, &v);
    return v.failed ? ROOMD_EINVAL : 0;
}

/* ==== Loading ==== */

int
conf_load(const char *path, struct conf **out, char *err, size_t errlen)
{
    struct conf *c = xcalloc(1, sizeof(*c));
    struct loader *ld = xcalloc(1, sizeof(*ld));
    yaml_parser_t parser;
    yaml_document_t doc;
    int parser_ok = 0, doc_ok = 0, rc = ROOMD_EINVAL;
    FILE *f = NULL;

    *out = NULL;
    conf_defaults(c);
    set_str(&c->path, path);
    if ((f = fopen(path, "rb")) == NULL) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        goto out;
    }
    if (!yaml_parser_initialize(&parser)) {
        snprintf(err, errlen, "%s: cannot initialize the YAML parser", path);
        goto out;
    }
    parser_ok = 1;
    yaml_parser_set_input_file(&parser, f);
    if (!yaml_parser_load(&parser, &doc)) {
        const char *what = parser.problem ? parser.problem : "invalid YAML";
        if (parser.context)
            snprintf(err, errlen, "%s:%zu:%zu: syntax error: %s %s", path,
                     parser.problem_mark.line + 1, parser.problem_mark.column + 1, parser.context,
                     what);
        else
            snprintf(err, errlen, "%s:%zu:%zu: syntax error: %s", path,
                     parser.problem_mark.line + 1, parser.problem_mark.column + 1, what);
        goto out;
    }
    doc_ok = 1;

    ld->file = path;
    ld->doc = &doc;
    ld->c = c;
    ld->err = err;
    ld->errlen = errlen;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root != NULL && !is_null(root) && (rc = walk(ld, root, "")) != 0)
        goto out;

    struct vctx v = {.file = path, .marks = ld->marks, .err = err, .errlen = errlen};
    validate(c, &v);
    if (v.failed) {
        rc = ROOMD_EINVAL;
        goto out;
    }
    if (empty(c->app.node_id)) {
        char host[256] = "";
        if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0')
            strcpy(host, "roomd");
        free(c->app.node_id);
        c->app.node_id = xasprintf("%s-%ld", host, (long)getpid());
    }
    rc = 0;
    *out = c;
    c = NULL;
out:
    if (doc_ok)
        yaml_document_delete(&doc);
    if (parser_ok)
        yaml_parser_delete(&parser);
    if (f != NULL)
        fclose(f);
    free(ld);
    conf_free(c);
    return rc;
}
