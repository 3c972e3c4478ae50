/* SPDX-License-Identifier: Apache-2.0 */
/*
 * conf.h: roomd's configuration, loaded once from YAML (configs/ (YAML), the
 * seed's shape) and validated before anything starts. Every rule of the
 * seed's 配置规则 table is enforced by conf_load(); an error names the key
 * ("outbox_worker.poll_interval: must be > 0"). Durations are written
 * "500ms", "3s", "5m", "1h" and stored as milliseconds.
 *
 * The struct is read-only after conf_load() and may be read from any thread.
 * Strings inside are owned by the struct and freed by conf_free().
 */
#ifndef ROOMD_CONF_H
#define ROOMD_CONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define CONF_MAX_LIST 16
#define CONF_MAX_ROCKET_LEVELS 16

enum publish_mode { PUBLISH_DIRECT = 0, PUBLISH_MQ, PUBLISH_DUAL };
enum outbox_ordering { ORDERING_PER_ROOM = 0, ORDERING_NONE };

struct conf_app {
    char *default_app_code; /* X-App-Code when the header is absent ("hyapp") */
    char *node_id;          /* this process' name in locked_by and leases; "" = host-pid */
    char *log_file;         /* "" = stderr */
    char *log_level;        /* debug|info|warn|error */
};

struct conf_http {
    char *listen;           /* "127.0.0.1:8080" */
    char *advertise_addr;   /* address other nodes/gateways use to reach us; "" = listen */
    int64_t max_body_bytes; /* bodies above answer 413 */
    int max_connections;
    int64_t request_timeout_ms;           /* idle connection timeout */
    int64_t header_timeout_ms;            /* a request's headers must be in within this */
    int64_t body_timeout_ms;              /* a request's body must be in within this */
    int max_connections_per_ip;           /* 0 = no per-IP limit */
    char *tls_cert_file;                  /* http.tls.cert_file: PEM; "" = plain HTTP */
    char *tls_key_file;                   /* http.tls.key_file */
    char *trusted_proxies[CONF_MAX_LIST]; /* addresses / CIDRs whose X-Forwarded-For counts */
    int ntrusted_proxies;
};

/* auth: who may call the public /v1 API (docs/auth.md). */
struct conf_auth {
    char *mode;              /* "none" (loopback listeners only) | "jwt" */
    char *hs256_secret_env;  /* auth.jwt.hs256_secret_env: variable holding the HS256 secret */
    char *hs256_secret_file; /* auth.jwt.hs256_secret_file: or a file holding it */
    char *public_key_file;   /* auth.jwt.public_key_file: PEM, RSA (RS256) or EC P-256 (ES256) */
    int64_t leeway_ms;       /* auth.jwt.leeway: clock skew allowed on exp / nbf */
    char *issuer;            /* auth.jwt.issuer: "" = iss not checked */
    char *audience;          /* auth.jwt.audience: "" = aud not checked */
    int cache_entries;       /* auth.jwt.cache_entries: verified tokens kept; 0 = no cache */
    int64_t cache_ttl_ms;    /* auth.jwt.cache_ttl: an entry's longest life (and exp) */
    char *jwks_file;         /* auth.jwt.jwks_file: a JWKS; the token's kid picks the key */
    int64_t jwks_poll_ms;    /* auth.jwt.jwks_poll_interval: stat of jwks_file; 0 = SIGHUP only */
};

/* admin: the operator listener (/internal/v1/..., /metrics, readiness details, top-up). */
struct conf_admin {
    char *listen;               /* "127.0.0.1:8081" */
    char *token_env;            /* variable holding the admin bearer token */
    char *token_file;           /* or a file holding it */
    int max_connections;        /* its own limit, apart from http.max_connections */
    int max_connections_per_ip; /* 0 = none */
    char *tls_cert_file;        /* admin.tls.cert_file: PEM; "" = plain HTTP */
    char *tls_key_file;         /* admin.tls.key_file */
    /* where other nodes reach admin.listen (forwarded internal commands); "" = admin.listen */
    char *advertise_addr;
    int64_t auth_backoff_ms; /* a failed admin authentication's first wait, doubling; 0 = off */
    /* admin.tokens: named credentials, one entry each, a YAML mapping kept as
     * "name=N role=R token_env=V" (or token_file=F); conf_admin_token_parse */
    char *tokens[CONF_MAX_LIST];
    int ntokens;
};

/* One entry of admin.tokens. Strings point into a copy the parser made in buf. */
struct conf_admin_token {
    char name[64];
    bool read_only; /* role read: GET/HEAD only; operate (default): everything */
    char token_env[128];
    char token_file[512];
};

/* Parses an admin.tokens entry ("name=alice role=read token_env=X"). Returns
 * 0, or ROOMD_EINVAL with err saying what is wrong (never a secret: the entry
 * holds only names). Thread: any. */
int conf_admin_token_parse(const char *entry, struct conf_admin_token *out, char *err,
                           size_t errlen);

struct conf_grpc {
    char *listen; /* "127.0.0.1:9090"; "" = no gRPC API */
    int workers;  /* threads serving calls (a call blocks one, as a command an HTTP thread) */
    int max_concurrent_streams; /* open calls per connection */
    int64_t receive_timeout_ms; /* the request message after the headers */
    int64_t call_timeout_ms;    /* cap on every call's deadline */
    char *tls_cert_file;        /* "" = plaintext */
    char *tls_key_file;
    int64_t watch_poll_ms;     /* grpc.watch.poll_interval: a WatchRoom's store read when idle */
    int watch_max_streams;     /* grpc.watch.max_streams: WatchRoom calls at once (workers held) */
    int max_calls_per_address; /* grpc.max_calls_per_address: calls one address holds; 0 = off */
};

struct conf_sqlite {
    char *path;            /* "./var/roomd.db" */
    bool synchronous_full; /* synchronous: "full" (default, durable) or "normal" (dev) */
    int64_t busy_timeout_ms;
};

struct conf_mysql {
    char *host;
    int port;
    char *hosts[CONF_MAX_LIST]; /* "h1:3306", ...: a Galera cluster (failover.c) */
    int nhosts;
    int64_t failover_timeout_ms; /* wait this long for a usable server before 503 */
    int wsrep_sync_wait;         /* the session's wsrep_sync_wait on Galera */
    char *user;
    char *password; /* or password_env names an environment variable */
    char *password_env;
    char *database;
    int pool_size;
    int64_t connect_timeout_ms;
    int64_t read_timeout_ms;
    int64_t write_timeout_ms;
    int deadlock_retries;    /* bounded retries of a deadlocked/lock-wait transaction */
    int batches_in_flight;   /* group-commit batches committing at once (>= 1) */
    int64_t startup_wait_ms; /* start-up waits this long for the server; 0 = fail at once */
};

struct conf_store {
    char *driver; /* "sqlite" | "mysql" */
    struct conf_sqlite sqlite;
    struct conf_mysql mysql;
    int group_commit_max;             /* mutations committed together in one transaction (>= 1) */
    int64_t retention_delivered_ms;   /* purge delivered rows older than this; 0 = keep */
    int64_t retention_command_log_ms; /* purge command log rows older than this; 0 = keep */
    int purge_batch;
    int64_t purge_interval_ms;
};

struct conf_rocket {
    int64_t thresholds[CONF_MAX_ROCKET_LEVELS]; /* energy needed to ignite level i+1 */
    int nthresholds;
    int64_t countdown_ms; /* ignition -> launch_at_ms */
};

struct conf_room {
    int snapshot_every_n; /* snapshot when version % n == 0 */
    int snapshots_keep;
    int64_t idle_evict_ms; /* evict a cell idle this long; reload on demand */
    int seat_count;        /* mic seats per room */
    int max_members;
    int64_t kick_ban_ms;        /* a kicked user cannot rejoin for this long; 0 = no ban */
    int max_creates_per_minute; /* CreateRoom per owner per minute (429 above); 0 = no limit */
    int max_rooms_per_owner;    /* open rooms per (app, owner_uid) (429 above); 0 = no limit */
    struct conf_rocket rocket;
    char *gift_catalog; /* "required": SendGift priced by the store's catalog | "off" (auth none) */
    int64_t member_idle_timeout_ms; /* a member silent this long leaves (presence); 0 = off */
};

struct conf_wallet {
    char *driver;               /* "embedded" (ledger in the store) | "grpc" (docs/wallet.md) */
    int64_t initial_balance;    /* balance of a never-seen user (development) */
    bool allow_topup;           /* POST /v1/wallet/topup (development) */
    char *grpc_target;          /* grpc: the wallet service, host:port */
    int64_t grpc_timeout_ms;    /* grpc: deadline of one call */
    int64_t reconcile_after_ms; /* grpc: holds older than this are resolved from the log */
};

struct conf_redis {
    bool enabled;
    char *addr; /* "127.0.0.1:6379" */
    char *password;
    int db;
    char *key_prefix;                    /* "roomd:" */
    char *sentinel_addrs[CONF_MAX_LIST]; /* "host:port" of Redis Sentinels; none = addr */
    int nsentinel_addrs;
    char *sentinel_master_name;
    int64_t connect_timeout_ms;
    int64_t command_timeout_ms;
};

struct conf_lease {
    char *driver; /* "local" (one node) | "redis" */
    int64_t ttl_ms;
    int64_t renew_every_ms;
};

/* Several nodes (docs/cluster.md): a node that does not own a room forwards
 * the request to the owner's http.advertise_addr. */
struct conf_cluster {
    bool forward;               /* false: answer 503 not_owner (a gateway routes) */
    int64_t forward_timeout_ms; /* the whole forwarded request */
    char *tls_ca_file;          /* PEM CA bundle verifying the owner (https); "" = system */
};

struct conf_projection {
    char *driver; /* "memory" | "redis" */
};

struct conf_rocketmq_outbox {
    bool enabled;
    char *topic; /* "hyapp_room_outbox" -> stream + subject prefix */
    char *producer_group;
    bool tencent_im_consumer_enabled;
    char *tencent_im_consumer_group;
    char *activity_consumer_group; /* "hyapp-activity-room-outbox" */
    char *notice_consumer_group;   /* "hyapp-notice-room-outbox" */
    int consumer_max_reconsume_times;
    /* Run the reference activity / notice consumer groups inside this
     * process (roles; tools/roomd_consumer runs them on their own). */
    bool activity_consumer_enabled;
    bool notice_consumer_enabled;
};

struct conf_rocketmq_rocket {
    bool enabled;
    char *topic; /* "hyapp_room_rocket_launch" */
    char *producer_group;
    char *consumer_group; /* "hyapp-room-rocket-open" */
    int consumer_max_reconsume_times;
};

/* rocketmq.driver (conf_rocketmq_driver resolves auto). */
enum conf_mq_driver { CONF_MQ_AUTO = 0, CONF_MQ_JETSTREAM = 1, CONF_MQ_ROCKETMQ = 2 };

/* The seed's rocketmq section, served by NATS JetStream (ARCHITECTURE §7)
 * or by RocketMQ's remoting protocol (src/rocketmq, docs/rocketmq.md). */
struct conf_rocketmq {
    bool enabled;
    int driver;                        /* enum conf_mq_driver as configured */
    char *name_servers[CONF_MAX_LIST]; /* NATS URLs "nats://127.0.0.1:4222", or RocketMQ
                                        * name servers "127.0.0.1:9876" */
    int nname_servers;
    char *name_server_domain;
    char *access_key; /* NATS user / RocketMQ ACL AccessKey */
    char *secret_key; /* NATS password / RocketMQ ACL SecretKey */
    char *namespace_; /* subject prefix; "" = none */
    int64_t send_timeout_ms;
    int retry;
    int stream_replicas;
    int64_t stream_max_age_ms;
    int64_t duplicate_window_ms;
    /* Consumer groups (src/consume): a group's SQLite inbox is the file
     * "<consumer_store_dir>/<group>.db" ("" = "./var/consumers"). A failed
     * message is redelivered after consumer_retry_delays[k] (k = failures-1,
     * the last entry repeats; none = RocketMQ's 10s 30s 1m 2m ... 2h). */
    char *consumer_store_dir;
    /* Where the groups' inboxes live (enum inbox_driver of store/inbox.h):
     * 0 auto (mysql when store.driver is mysql), 1 sqlite (per node, in
     * consumer_store_dir), 2 mysql (the store's database, shared by nodes). */
    int consumer_inbox;
    int64_t consumer_retry_delays_ms[CONF_MAX_LIST];
    int nconsumer_retry_delays;
    int64_t consumer_ack_wait_ms;      /* AckWait of the group consumers; 0 = 30s */
    int consumer_circuit_failures;     /* transport failures in a row opening a group's circuit */
    int64_t consumer_circuit_probe_ms; /* an open group circuit lets one call through this often */
    int64_t dlq_max_age_ms;            /* the dead-letter stream keeps messages this long */
    struct conf_rocketmq_outbox room_outbox;
    struct conf_rocketmq_rocket rocket_launch;
};

struct conf_outbox {
    bool enabled;
    enum publish_mode publish_mode;
    int64_t poll_interval_ms;
    int batch_size;    /* rows claimed at once; the most rows of one sink call */
    int claim_batches; /* after a claim of >= batch_size rows, the next one takes up to
                        * claim_batches x batch_size (published batch_size at a time) */
    int64_t publish_timeout_ms;
    char *retry_strategy; /* "exponential_backoff" */
    int max_retry_count;
    int64_t initial_backoff_ms;
    int64_t max_backoff_ms;
    int workers;                   /* worker threads */
    int64_t lock_timeout_ms;       /* lock_until_ms = claim time + this */
    int64_t complete_gather_ms;    /* landed batches' completions written together within
                                    * this (one store transaction); 0 = one per batch */
    int handoff_queue;             /* hand-off queue rows; 0 = off, -1 = auto:
                                    * max(1024, 4 x workers x batch_size) */
    enum outbox_ordering ordering; /* per_room (default): a room's events reach each sink
                                    * in commit order; a later one waits while an earlier
                                    * one is retried. none: independent */
    int circuit_failures;          /* consecutive transport failures that open a sink's circuit */
    int64_t circuit_probe_ms;      /* an open circuit lets one probe through this often */
    bool log_sink_enabled;         /* direct sink writing event JSON lines */
    char *log_sink_path;           /* "./var/outbox-events.jsonl" */
};

struct conf_tencent_im {
    bool enabled;
    char *base_url; /* "https://console.tim.qq.com" */
    int64_t sdk_app_id;
    char *admin_identifier; /* App admin account */
    char *secret_key_env;   /* environment variable holding the key */
    char *secret_key_file;  /* or a file holding it */
    int64_t usersig_ttl_ms;
    char *group_type;           /* AVChatRoom | Public | ChatRoom | Private */
    char *ca_file;              /* extra CA bundle (stand-in in tests); "" = system */
    int64_t timeout_ms;         /* per HTTP call; above IM's own 3 s */
    int rate_limit_per_s;       /* calls per second per API, this node (0 = no limit) */
    int group_rate_limit_per_s; /* messages per second per group, this node (0 = no limit) */
    int64_t coalesce_after_ms;  /* coalesce a group's state messages behind by more (0 = off) */

    /* POST /callbacks/tim (State.StateChange, docs/room.md Presence) */
    bool callback_enabled;
    char *callback_token_env;     /* the callback authentication token: environment variable */
    char *callback_token_file;    /* or a file holding it */
    int64_t callback_max_skew_ms; /* a RequestTime further from now is refused */
};

struct conf_activity {
    bool enabled;
    char *target; /* "127.0.0.1:50051" */
};

struct conf {
    char *path; /* file it was loaded from */
    struct conf_app app;
    struct conf_http http;
    struct conf_grpc grpc;
    struct conf_auth auth;
    struct conf_admin admin;
    struct conf_store store;
    struct conf_room room;
    struct conf_wallet wallet;
    struct conf_redis redis;
    struct conf_lease lease;
    struct conf_cluster cluster;
    struct conf_projection projection;
    struct conf_rocketmq rocketmq;
    struct conf_outbox outbox_worker;
    struct conf_tencent_im tencent_im;
    struct conf_activity activity;
};

/* Loads and validates path. On success returns 0 and *out (free with
 * conf_free). On failure returns ROOMD_EINVAL, *out = NULL, and err holds
 * "file:line:col: key: problem". Keys absent from the file take the
 * defaults of conf_defaults(); unknown keys are an error. Any thread; blocks
 * on file I/O. */
int conf_load(const char *path, struct conf **out, char *err, size_t errlen);

/* conf_load on YAML held in memory (buf, len bytes; need not end in NUL; the
 * caller keeps it): the same result and errors, with name in place of the
 * file name ("name:line:col: key: problem") and as (*out)->path. For tests
 * and fuzzers. Any thread; does not block. */
int conf_load_buffer(const char *name, const char *buf, size_t len, struct conf **out, char *err,
                     size_t errlen);

/* Fills c (memset first: the caller frees with conf_free) with the built-in
 * defaults of the key table (what configs/local.yaml spells out). */
void conf_defaults(struct conf *c);

/* Checks every rule: each key's bounds, then the rules spanning keys
 * (conf_load calls it). Returns 0 or ROOMD_EINVAL with the key named in err. */
int conf_validate(const struct conf *c, char *err, size_t errlen);

/* What `roomd --check-config` adds to conf_load (check.c): the environment
 * variables the config names are set, the files it reads are readable, the
 * directories it writes into are writable, servers are URLs of their scheme.
 * Returns 0, or ROOMD_EINVAL with every problem in err, one "key: problem"
 * a line (never a secret's value). Any thread; blocks on access(2). */
int conf_check_environment(const struct conf *c, char *err, size_t errlen);

/* True when listen ("host:port") binds a loopback address: 127.x.x.x,
 * localhost or [::1]. Thread: any. */
bool conf_listen_is_loopback(const char *listen);

/* One address or CIDR of http.trusted_proxies, parsed: family AF_INET or
 * AF_INET6, the address (IPv4 in the first 4 bytes), the prefix length. */
struct conf_cidr {
    int family;
    unsigned char addr[16];
    int bits;
};

/* Parses "10.0.0.1", "10.0.0.0/8", "::1", "fd00::/8" into *out. Returns
 * true when s is one of those. Pure; any thread. */
bool conf_cidr_parse(const char *s, struct conf_cidr *out);

/* Whether the address text a ("127.0.0.2", "::1"; an IPv4-mapped IPv6 counts
 * as IPv4) lies in c. Pure; any thread. */
bool conf_cidr_match(const struct conf_cidr *c, const char *a);

/* The lines around the generated key reference in docs/conf.md. */
#define CONF_DOC_BEGIN "<!-- BEGIN keys: generated by `roomd --print-config-doc`; do not edit -->"
#define CONF_DOC_END "<!-- END keys -->"

/* Writes the key reference (a Markdown table: key, type, default, rule, doc;
 * between CONF_DOC_BEGIN and CONF_DOC_END lines) to out. Any thread. */
void conf_write_doc(FILE *out);

/* Parses "500ms", "3s", "5m", "1h", "2h30m"; returns 0 or -1. */
int conf_parse_duration(const char *s, int64_t *out_ms);

/* The broker driver of mq: rocketmq.driver when set, else JetStream when
 * every name server is a nats:// or tls:// URL (today's configs) and
 * RocketMQ otherwise (the seed's host:port name servers). Returns
 * CONF_MQ_JETSTREAM or CONF_MQ_ROCKETMQ. Thread: any. */
int conf_rocketmq_driver(const struct conf_rocketmq *mq);

void conf_free(struct conf *c);

#endif
