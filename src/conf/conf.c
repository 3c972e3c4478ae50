/* SPDX-License-Identifier: Apache-2.0 */
/*
 * conf.c: YAML -> struct conf (conf.h). keys[] below holds ONE row per key:
 * its dotted path, type, field (offsetof into struct conf), default (written
 * as in YAML), single-key rule (bounds or allowed values, optionally only
 * when another key is set) and its one-line doc. conf_defaults() applies the
 * defaults of the rows, check_row() their rules, validate_cross() the rules
 * that span keys, conf_write_doc() prints the key reference of docs/conf.md.
 * Errors read "FILE:LINE:COL: key.path: problem" (libyaml marks are 0-based;
 * printed 1-based).
 *
 * To add a key:
 *   1. add the field to struct conf in conf.h;
 *   2. add one row to keys[] (keep the section's order): e.g.
 *        {"http.foo", K_DUR, F(http.foo_ms), "5s", GT(0), .doc = "what it does"}
 *      bounds: GT(n) GE(n) RANGE(a, b) NONEMPTY ONE_OF(names) HOSTPORT
 *      HOSTPORT_OPT; .when = "sec.enabled" or "sec.driver=x" limits the
 *      rule; .note is appended to its message;
 *   3. only a rule that reads two keys goes into validate_cross();
 *   4. regenerate the key reference: build/roomd --print-config-doc, paste it
 *      over the generated block of docs/conf.md (test_conf checks they match),
 *      and spell the key out in configs/local.yaml.
 */
#include "conf/conf.h"
#include "conf/internal.h"

#include "core/err.h"
#include "core/xmalloc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <yaml.h>

/* ==== The key table ==== */

#define F(field) offsetof(struct conf, field), 0
#define L(field, count) offsetof(struct conf, field), offsetof(struct conf, count)
#define GT(n) .check = CK_GT, .lo = (n)
#define GE(n) .check = CK_GE, .lo = (n)
#define RANGE(a, b) .check = CK_RANGE, .lo = (a), .hi = (b)
#define NONEMPTY .check = CK_NONEMPTY
#define ONE_OF(list) .check = CK_ONE_OF, .names = (list)
#define HOSTPORT .check = CK_HOSTPORT
#define HOSTPORT_OPT .check = CK_HOSTPORT_OPT

static const char *const log_levels[] = {"debug", "info", "warn", "error", NULL};
static const char *const store_drivers[] = {"sqlite", "mysql", NULL};
static const char *const wallet_drivers[] = {"embedded", "grpc", NULL};
static const char *const lease_drivers[] = {"local", "redis", NULL};
static const char *const proj_drivers[] = {"memory", "redis", NULL};
static const char *const publish_modes[] = {"direct", "mq", "dual", NULL}; /* enum publish_mode */
static const char *const inbox_drivers[] = {"auto", "sqlite", "mysql", NULL}; /* inbox.h */
static const char *const mq_drivers[] = {"auto", "jetstream", "rocketmq", NULL}; /* conf.h */
static const char *const strategies[] = {"exponential_backoff", NULL};
static const char *const orderings[] = {"per_room", "none", NULL}; /* enum outbox_ordering */
static const char *const group_types[] = {"AVChatRoom", "Public", "ChatRoom", "Private", NULL};
static const char *const auth_modes[] = {"none", "jwt", NULL};
static const char *const gift_catalogs[] = {"required", "off", NULL};

#define MYSQL_ON "store.driver=mysql"
#define MQ_ON "rocketmq.enabled"
#define IM_ON "tencent_im.enabled"

const struct key conf_keys[] = {
    {"app.default_app_code", K_STR, F(app.default_app_code), "hyapp", NONEMPTY,
     .doc = "app code when a request has no X-App-Code header"},
    {"app.node_id", K_STR, F(app.node_id), "",
     .doc = "this process' name in leases and locked_by; \"\" = <hostname>-<pid>"},
    {"app.log_file", K_STR, F(app.log_file), "", .doc = "JSON log lines go here; \"\" = stderr"},
    {"app.log_level", K_STR, F(app.log_level), "info", ONE_OF(log_levels),
     .doc = "lowest level logged; reloaded on SIGHUP"},

    {"http.listen", K_STR, F(http.listen), "127.0.0.1:8080", HOSTPORT,
     .note = "with a port in 1..65535", .doc = "address the HTTP API listens on"},
    {"http.advertise_addr", K_STR, F(http.advertise_addr), "", HOSTPORT_OPT,
     .doc = "host:port other nodes and gateways reach us at (not_owner); \"\" = listen"},
    {"http.max_body_bytes", K_INT64, F(http.max_body_bytes), "65536", GT(0),
     .doc = "larger request bodies answer 413"},
    {"http.max_connections", K_INT, F(http.max_connections), "1024", GE(1),
     .doc = "concurrent HTTP connections"},
    {"http.request_timeout", K_DUR, F(http.request_timeout_ms), "30s", GT(0),
     .doc = "an idle connection is closed after this"},
    {"http.header_timeout", K_DUR, F(http.header_timeout_ms), "10s", GT(0),
     .doc = "a request's headers must be in within this, else the connection is cut"},
    {"http.body_timeout", K_DUR, F(http.body_timeout_ms), "30s", GT(0),
     .doc = "a request's body must be in within this, else the connection is cut"},
    {"http.max_connections_per_ip", K_INT, F(http.max_connections_per_ip), "64", GE(0),
     .note = "(0 = no limit)", .doc = "concurrent connections of one client address"},
    {"http.tls.cert_file", K_STR, F(http.tls_cert_file), "",
     .doc = "PEM certificate: HTTPS on http.listen (with http.tls.key_file); \"\" = plain HTTP"},
    {"http.tls.key_file", K_STR, F(http.tls_key_file), "", .doc = "PEM private key of it"},
    {"http.trusted_proxies", K_STRLIST, L(http.trusted_proxies, http.ntrusted_proxies), "",
     .doc = "load balancers (addresses or CIDRs) whose X-Forwarded-For names the client for "
            "per-address caps, rate limits and logs (docs/http.md); [] = none"},

    {"auth.mode", K_STR, F(auth.mode), "none", ONE_OF(auth_modes),
     .doc = "none (only when every listener is loopback) or jwt (docs/auth.md)"},
    {"auth.jwt.hs256_secret_env", K_STR, F(auth.hs256_secret_env), "",
     .doc = "environment variable holding the HS256 secret (>= 32 bytes)"},
    {"auth.jwt.hs256_secret_file", K_STR, F(auth.hs256_secret_file), "",
     .doc = "or a file holding it"},
    {"auth.jwt.public_key_file", K_STR, F(auth.public_key_file), "",
     .doc = "or a PEM public key: RSA -> RS256, EC P-256 -> ES256"},
    {"auth.jwt.leeway", K_DUR, F(auth.leeway_ms), "30s", GE(0),
     .doc = "clock skew allowed on exp and nbf"},
    {"auth.jwt.issuer", K_STR, F(auth.issuer), "", .doc = "required iss; \"\" = not checked"},
    {"auth.jwt.audience", K_STR, F(auth.audience), "",
     .doc = "required in aud; \"\" = not checked"},
    {"auth.jwt.cache_entries", K_INT, F(auth.cache_entries), "4096", RANGE(0, 65536),
     .note = "(0 = no cache)",
     .doc = "verified tokens kept (0 = none; SHA-256 of the token -> its principal, 128 B "
            "each); reloaded on SIGHUP"},
    {"auth.jwt.cache_ttl", K_DUR, F(auth.cache_ttl_ms), "60s", GT(0),
     .doc = "longest life of a cache entry; it also ends at the token's exp; reloaded on SIGHUP"},

    {"admin.listen", K_STR, F(admin.listen), "127.0.0.1:8081", HOSTPORT,
     .note = "with a port in 1..65535",
     .doc = "the operator listener: /internal/v1/..., /metrics, readiness details, top-up"},
    {"admin.advertise_addr", K_STR, F(admin.advertise_addr), "", HOSTPORT_OPT,
     .doc = "host:port other nodes reach admin.listen at (forwarded rocket launches); \"\" = "
            "admin.listen"},
    {"admin.token_env", K_STR, F(admin.token_env), "",
     .doc = "environment variable holding the admin bearer token (required off loopback)"},
    {"admin.token_file", K_STR, F(admin.token_file), "", .doc = "or a file holding it"},
    {"admin.tokens", K_STRLIST, L(admin.tokens, admin.ntokens), "",
     .doc = "named admin credentials, each {name, role: read | operate (default), token_env | "
            "token_file}; audits and admin log lines name the caller; read may only GET"},
    {"admin.max_connections", K_INT, F(admin.max_connections), "64", GE(1),
     .doc = "concurrent admin connections (apart from http.max_connections)"},
    {"admin.max_connections_per_ip", K_INT, F(admin.max_connections_per_ip), "16", GE(0),
     .doc = "concurrent admin connections from one address (0 = no limit): one address cannot "
            "lock the operators and the other nodes out"},
    {"admin.auth_backoff", K_DUR, F(admin.auth_backoff_ms), "100ms", GE(0),
     .doc = "after a failed admin authentication its address waits this long before its next "
            "admin request is checked (429 meanwhile), doubling per failure in a row up to 10s; "
            "0 = off"},
    {"admin.tls.cert_file", K_STR, F(admin.tls_cert_file), "",
     .doc = "PEM certificate: HTTPS on admin.listen (with admin.tls.key_file)"},
    {"admin.tls.key_file", K_STR, F(admin.tls_key_file), "", .doc = "PEM private key of it"},

    {"grpc.listen", K_STR, F(grpc.listen), "", HOSTPORT_OPT,
     .doc = "address the gRPC API (docs/grpc.md) listens on; \"\" = no gRPC API"},
    {"grpc.workers", K_INT, F(grpc.workers), "64", RANGE(1, 1024),
     .doc = "threads serving gRPC calls (each call holds one until it answers)"},
    {"grpc.max_concurrent_streams", K_INT, F(grpc.max_concurrent_streams), "16", RANGE(1, 1024),
     .doc = "open calls (HTTP/2 streams) per connection; keep it below grpc.workers so one "
            "connection cannot hold every worker"},
    {"grpc.receive_timeout", K_DUR, F(grpc.receive_timeout_ms), "2s", GT(0),
     .doc = "a call's request message must arrive within this after its headers, else "
            "DEADLINE_EXCEEDED and its worker is free again"},
    {"grpc.call_timeout", K_DUR, F(grpc.call_timeout_ms), "30s", GT(0),
     .doc = "the longest a call may take: a client deadline that is later (or none) is cut to "
            "it; a command never starts after it, and the answer waits at most until it"},
    {"grpc.tls.cert_file", K_STR, F(grpc.tls_cert_file), "",
     .doc = "PEM certificate (chain): TLS on grpc.listen (with grpc.tls.key_file)"},
    {"grpc.tls.key_file", K_STR, F(grpc.tls_key_file), "", .doc = "PEM private key of it"},

    {"store.driver", K_STR, F(store.driver), "sqlite", ONE_OF(store_drivers),
     .doc = "the store backend"},
    {"store.sqlite.path", K_STR, F(store.sqlite.path), "./var/roomd.db", NONEMPTY,
     .when = "store.driver=sqlite", .note = "with store.driver sqlite",
     .doc = "the SQLite database file"},
    {"store.sqlite.synchronous", K_SYNC, F(store.sqlite.synchronous_full), "full",
     .doc = "full (durable) or normal (development: a power cut may lose the last commits)"},
    {"store.sqlite.busy_timeout", K_DUR, F(store.sqlite.busy_timeout_ms), "5s", GE(0),
     .when = "store.driver=sqlite", .doc = "wait this long for another process' write lock"},
    {"store.mysql.host", K_STR, F(store.mysql.host), "127.0.0.1", NONEMPTY, .when = MYSQL_ON,
     .note = "with store.driver mysql", .doc = "MySQL/MariaDB server host"},
    {"store.mysql.port", K_INT, F(store.mysql.port), "3306", RANGE(1, 65535), .when = MYSQL_ON,
     .doc = "MySQL/MariaDB server port"},
    {"store.mysql.hosts", K_STRLIST, L(store.mysql.hosts, store.mysql.nhosts), "",
     .doc = "servers \"host:port\" of a Galera cluster, tried in order; the pool uses the first "
            "that answers and is ready and moves on a loss (docs/ha.md); [] = host and port"},
    {"store.mysql.failover_timeout", K_DUR, F(store.mysql.failover_timeout_ms), "5s", GE(0),
     .when = MYSQL_ON,
     .doc = "with store.mysql.hosts: how long a call waits for a usable server before 503"},
    {"store.mysql.wsrep_sync_wait", K_INT, F(store.mysql.wsrep_sync_wait), "1", RANGE(0, 15),
     .when = MYSQL_ON,
     .doc = "on Galera: the sessions' wsrep_sync_wait (1: reads see every earlier commit of the "
            "cluster; 0 = off)"},
    {"store.mysql.user", K_STR, F(store.mysql.user), "roomd", NONEMPTY, .when = MYSQL_ON,
     .note = "with store.driver mysql", .doc = "MySQL user"},
    {"store.mysql.password", K_STR, F(store.mysql.password), "",
     .doc = "MySQL password (prefer password_env)"},
    {"store.mysql.password_env", K_STR, F(store.mysql.password_env), "",
     .doc = "environment variable holding the MySQL password"},
    {"store.mysql.database", K_STR, F(store.mysql.database), "roomd", NONEMPTY, .when = MYSQL_ON,
     .note = "with store.driver mysql", .doc = "MySQL database (schema)"},
    {"store.mysql.pool_size", K_INT, F(store.mysql.pool_size), "8", GE(1), .when = MYSQL_ON,
     .doc = "connections in the pool"},
    {"store.mysql.connect_timeout", K_DUR, F(store.mysql.connect_timeout_ms), "3s", GT(0),
     .when = MYSQL_ON, .doc = "connect timeout"},
    {"store.mysql.read_timeout", K_DUR, F(store.mysql.read_timeout_ms), "10s", GT(0),
     .when = MYSQL_ON, .doc = "read timeout of one statement"},
    {"store.mysql.write_timeout", K_DUR, F(store.mysql.write_timeout_ms), "10s", GT(0),
     .when = MYSQL_ON, .doc = "write timeout of one statement"},
    {"store.mysql.deadlock_retries", K_INT, F(store.mysql.deadlock_retries), "3", GE(0),
     .when = MYSQL_ON, .doc = "retries of a deadlocked or lock-wait-timed-out transaction"},
    {"store.mysql.batches_in_flight", K_INT, F(store.mysql.batches_in_flight), "1", GE(1),
     .when = MYSQL_ON,
     .doc = "group-commit batches committing at once, each on its own pooled connection"},
    {"store.mysql.startup_wait", K_DUR, F(store.mysql.startup_wait_ms), "60s", GE(0),
     .when = MYSQL_ON, .note = "(0 = exit at once)",
     .doc = "at start-up, retry an unreachable server this long before exiting"},
    {"store.group_commit_max", K_INT, F(store.group_commit_max), "64", GE(1),
     .doc = "mutations committed together in one transaction"},
    {"store.retention.delivered_max_age", K_DUR, F(store.retention_delivered_ms), "72h", GE(0),
     .note = "(0 keeps delivered rows)", .doc = "purge delivered outbox rows older than this"},
    {"store.retention.command_log_max_age", K_DUR, F(store.retention_command_log_ms), "168h", GE(0),
     .note = "(0 keeps the log)",
     .doc = "purge command log rows older than this that no replay needs: the idempotency window"},
    {"store.retention.purge_batch", K_INT, F(store.purge_batch), "500", GE(1),
     .doc = "rows deleted per purge statement"},
    {"store.retention.purge_interval", K_DUR, F(store.purge_interval_ms), "1m", GT(0),
     .doc = "time between purges"},

    {"room.snapshot_every_n", K_INT, F(room.snapshot_every_n), "50", GE(1),
     .doc = "snapshot a room when version % n == 0"},
    {"room.snapshots_keep", K_INT, F(room.snapshots_keep), "3", GE(1),
     .doc = "snapshots kept per room"},
    {"room.idle_evict_after", K_DUR, F(room.idle_evict_ms), "10m", GT(0),
     .doc = "evict a room cell idle this long (reloaded on demand)"},
    {"room.seat_count", K_INT, F(room.seat_count), "8", RANGE(1, 32), .note = "(ROOM_MAX_SEATS)",
     .doc = "mic seats per room"},
    {"room.max_members", K_INT, F(room.max_members), "10000", GE(1), .doc = "members per room"},
    {"room.max_creates_per_minute", K_INT, F(room.max_creates_per_minute), "60", GE(0),
     .note = "(0 = no limit)",
     .doc = "CreateRoom calls per owner_uid and app per minute, summed over the nodes in Redis "
            "when redis.enabled (per process while Redis does not answer); above: 429 with "
            "Retry-After"},
    {"room.max_rooms_per_owner", K_INT, F(room.max_rooms_per_owner), "1000", GE(0),
     .note = "(0 = no limit)",
     .doc = "open rooms one owner_uid may hold per app (counted by the store in the create's "
            "commit, on every node); a CreateRoom above: 429 too_many_rooms with Retry-After"},
    {"room.kick_ban", K_DUR, F(room.kick_ban_ms), "10m", GE(0), .note = "(0 = no ban)",
     .doc = "a kicked user cannot rejoin for this long"},
    {"room.rocket.thresholds", K_INT64LIST, L(room.rocket.thresholds, room.rocket.nthresholds),
     "1000, 5000, 20000", .doc = "energy igniting each rocket level (> 0, increasing)"},
    {"room.rocket.countdown", K_DUR, F(room.rocket.countdown_ms), "1m", GT(0),
     .doc = "ignition -> launch"},
    {"room.gift_catalog", K_STR, F(room.gift_catalog), "required", ONE_OF(gift_catalogs),
     .doc = "required: SendGift takes unit price and rocket energy from the gift catalog in the "
            "store (docs/room.md, Gift catalog; a request naming another unit_price: 409 "
            "price_changed); off: the request's unit_price is taken as is (development: only "
            "with auth.mode none)"},

    {"wallet.driver", K_STR, F(wallet.driver), "embedded", ONE_OF(wallet_drivers),
     .doc = "embedded: the ledger lives in the store; grpc: a wallet service (docs/wallet.md)"},
    {"wallet.initial_balance", K_INT64, F(wallet.initial_balance), "0", GE(0),
     .doc = "balance of a never-seen user (development)"},
    {"wallet.allow_topup", K_BOOL, F(wallet.allow_topup), "false",
     .doc = "serve POST /v1/wallet/topup on the admin listener (development)"},
    {"wallet.grpc.target", K_STR, F(wallet.grpc_target), "127.0.0.1:50061", HOSTPORT,
     .when = "wallet.driver=grpc",
     .doc = "the wallet service's gRPC host:port (proto/wallet.proto)"},
    {"wallet.grpc.timeout", K_DUR, F(wallet.grpc_timeout_ms), "2s", GT(0),
     .doc = "deadline of one wallet call"},
    {"wallet.reconcile_after", K_DUR, F(wallet.reconcile_after_ms), "60s", GE(1000),
     .note = "(and >= 4 x wallet.grpc.timeout)",
     .doc = "grpc: holds older than this are resolved against the command log"},

    {"redis.enabled", K_BOOL, F(redis.enabled), "false",
     .doc = "connect to Redis (needed by the redis lease and projection; the CreateRoom rate "
            "limit then counts in it)"},
    {"redis.addr", K_STR, F(redis.addr), "127.0.0.1:6379", HOSTPORT, .when = "redis.enabled",
     .doc = "Redis host:port"},
    {"redis.password", K_STR, F(redis.password), "", .doc = "Redis AUTH password; \"\" = none"},
    {"redis.db", K_INT, F(redis.db), "0", GE(0), .when = "redis.enabled",
     .doc = "Redis database number"},
    {"redis.sentinel.addrs", K_STRLIST, L(redis.sentinel_addrs, redis.nsentinel_addrs), "",
     .doc = "Redis Sentinels \"host:port\": the master is found through them and followed "
            "after a failover (docs/ha.md); [] = redis.addr"},
    {"redis.sentinel.master_name", K_STR, F(redis.sentinel_master_name), "",
     .doc = "the master's name in the sentinels (sentinel monitor NAME ...)"},
    {"redis.key_prefix", K_STR, F(redis.key_prefix), "roomd:", .doc = "prefix of every Redis key"},
    {"redis.connect_timeout", K_DUR, F(redis.connect_timeout_ms), "500ms", GT(0),
     .when = "redis.enabled", .doc = "connect timeout"},
    {"redis.command_timeout", K_DUR, F(redis.command_timeout_ms), "500ms", GT(0),
     .when = "redis.enabled", .doc = "timeout of one command"},

    {"lease.driver", K_STR, F(lease.driver), "local", ONE_OF(lease_drivers),
     .doc = "room ownership: local (one node) or redis (several; needs redis.enabled)"},
    {"lease.ttl", K_DUR, F(lease.ttl_ms), "10s", GT(0),
     .doc = "a dead owner's rooms are taken over after this"},
    {"lease.renew_every", K_DUR, F(lease.renew_every_ms), "3s",
     .doc = "held leases are renewed this often (> 0, < lease.ttl)"},

    {"cluster.forward", K_BOOL, F(cluster.forward), "true",
     .doc = "a node that does not own a room forwards the request to the owner (lease.driver "
            "redis); false = answer 503 not_owner for a gateway"},
    {"cluster.forward_timeout", K_DUR, F(cluster.forward_timeout_ms), "5s", GT(0),
     .doc = "the whole forwarded request, owner's answer included"},
    {"cluster.tls_ca_file", K_STR, F(cluster.tls_ca_file), "",
     .doc = "PEM CA bundle verifying the owner's certificate when forwarding to a TLS "
            "listener (http.tls / admin.tls: https); \"\" = the system store"},

    {"projection.driver", K_STR, F(projection.driver), "memory", ONE_OF(proj_drivers),
     .doc = "room list and presence: memory (one node) or redis (shared; needs redis.enabled)"},

    {"rocketmq.enabled", K_BOOL, F(rocketmq.enabled), "false",
     .doc = "connect to the broker (rocketmq.driver: NATS JetStream or RocketMQ)"},
    {"rocketmq.driver", K_CHOICE, F(rocketmq.driver), "auto", ONE_OF(mq_drivers),
     .doc = "jetstream (NATS JetStream), rocketmq (RocketMQ remoting protocol, docs/rocketmq.md) "
            "or auto: jetstream when a name server is a nats:// or tls:// URL, else rocketmq"},
    {"rocketmq.name_servers", K_STRLIST, L(rocketmq.name_servers, rocketmq.nname_servers), "",
     .doc = "jetstream: NATS URLs (nats://host:port); rocketmq: name servers host:port, tried "
            "in turn; at least one when enabled (rocketmq: or name_server_domain)"},
    {"rocketmq.name_server_domain", K_STR, F(rocketmq.name_server_domain), "",
     .doc = "rocketmq: the name server address service (GET http://<domain>[:8080]/rocketmq/"
            "nsaddr -> host:port;host:port) when name_servers is empty; unused by NATS"},
    {"rocketmq.access_key", K_STR, F(rocketmq.access_key), "",
     .doc = "jetstream: NATS user; rocketmq: the ACL AccessKey (every request signed)"},
    {"rocketmq.secret_key", K_STR, F(rocketmq.secret_key), "",
     .doc = "jetstream: NATS password; rocketmq: the ACL SecretKey (HMAC-SHA1 signing key)"},
    {"rocketmq.namespace", K_STR, F(rocketmq.namespace_), "",
     .doc = "jetstream: subject and stream prefix; rocketmq: the namespace, applied to topics "
            "and groups as RocketMQ clients do (ns%topic, %RETRY%ns%group); \"\" = none"},
    {"rocketmq.send_timeout", K_DUR, F(rocketmq.send_timeout_ms), "3s", GT(0), .when = MQ_ON,
     .doc = "wait this long for the broker's ack of one publish (rocketmq: one send)"},
    {"rocketmq.retry", K_INT, F(rocketmq.retry), "2", GE(0), .when = MQ_ON,
     .doc = "publish retries within one outbox attempt (rocketmq: retryTimesWhenSendFailed)"},
    {"rocketmq.stream_replicas", K_INT, F(rocketmq.stream_replicas), "1", RANGE(1, 5),
     .when = MQ_ON, .doc = "JetStream stream replicas"},
    {"rocketmq.stream_max_age", K_DUR, F(rocketmq.stream_max_age_ms), "72h", GE(0), .when = MQ_ON,
     .note = "(0 = unlimited)", .doc = "the stream keeps messages this long"},
    {"rocketmq.duplicate_window", K_DUR, F(rocketmq.duplicate_window_ms), "10m", GT(0),
     .when = MQ_ON, .doc = "JetStream deduplicates an event_id within this window"},
    {"rocketmq.consumer_store_dir", K_STR, F(rocketmq.consumer_store_dir), "./var/consumers",
     .doc = "consumer groups' SQLite inboxes (rocketmq.consumer_inbox sqlite): <dir>/<group>.db"},
    {"rocketmq.consumer_inbox", K_CHOICE, F(rocketmq.consumer_inbox), "auto", ONE_OF(inbox_drivers),
     .doc = "where consumer groups dedupe: auto (mysql when store.driver is mysql), sqlite "
            "(per node), mysql (the store's database, shared by all nodes)"},
    {"rocketmq.consumer_retry_delays_ms", K_INT64LIST,
     L(rocketmq.consumer_retry_delays_ms, rocketmq.nconsumer_retry_delays),
     "10000, 30000, 60000, 120000, 180000, 240000, 300000, 360000, 420000, 480000, 540000, "
     "600000, 1200000, 1800000, 3600000, 7200000",
     .doc = "redelivery delay after the k-th failure, ms (the last repeats; RocketMQ's levels)"},
    {"rocketmq.consumer_ack_wait", K_DUR, F(rocketmq.consumer_ack_wait_ms), "30s", GT(0),
     .when = MQ_ON, .doc = "AckWait of the group consumers"},
    {"rocketmq.consumer_circuit_failures", K_INT, F(rocketmq.consumer_circuit_failures), "5", GE(1),
     .when = MQ_ON,
     .doc = "transport failures in a row (downstream unreachable, rate-limited) that open a "
            "consumer group's circuit; outages never count toward consumer_max_reconsume_times"},
    {"rocketmq.consumer_circuit_probe_every", K_DUR, F(rocketmq.consumer_circuit_probe_ms), "1s",
     GT(0), .when = MQ_ON,
     .doc = "an open consumer group circuit lets one message (or a probe) through this often"},
    {"rocketmq.dlq_max_age", K_DUR, F(rocketmq.dlq_max_age_ms), "336h", GE(0), .when = MQ_ON,
     .note = "(0 = unlimited)", .doc = "the dead-letter stream keeps messages this long"},
    {"rocketmq.room_outbox.enabled", K_BOOL, F(rocketmq.room_outbox.enabled), "false",
     .doc = "publish outbox events to the broker (needed by publish_mode mq and dual)"},
    {"rocketmq.room_outbox.topic", K_STR, F(rocketmq.room_outbox.topic), "hyapp_room_outbox",
     NONEMPTY, .when = "rocketmq.room_outbox.enabled", .doc = "topic: stream and subject prefix"},
    {"rocketmq.room_outbox.producer_group", K_STR, F(rocketmq.room_outbox.producer_group),
     "hyapp-room-outbox-producer", NONEMPTY, .when = "rocketmq.room_outbox.enabled",
     .doc = "producer name"},
    {"rocketmq.room_outbox.tencent_im_consumer_enabled", K_BOOL,
     F(rocketmq.room_outbox.tencent_im_consumer_enabled), "false",
     .doc = "run the IM bridge consumer group (needs rocketmq and tencent_im enabled)"},
    {"rocketmq.room_outbox.tencent_im_consumer_group", K_STR,
     F(rocketmq.room_outbox.tencent_im_consumer_group), "hyapp-room-im-bridge", NONEMPTY,
     .when = "rocketmq.room_outbox.tencent_im_consumer_enabled",
     .doc = "the IM bridge's consumer group"},
    {"rocketmq.room_outbox.activity_consumer_group", K_STR,
     F(rocketmq.room_outbox.activity_consumer_group), "hyapp-activity-room-outbox",
     .doc = "the activity consumer group"},
    {"rocketmq.room_outbox.notice_consumer_group", K_STR,
     F(rocketmq.room_outbox.notice_consumer_group), "hyapp-notice-room-outbox",
     .doc = "the notice consumer group"},
    {"rocketmq.room_outbox.consumer_max_reconsume_times", K_INT,
     F(rocketmq.room_outbox.consumer_max_reconsume_times), "16", GE(0),
     .when = "rocketmq.room_outbox.enabled", .doc = "deliveries before a message is dead-lettered"},
    {"rocketmq.room_outbox.activity_consumer_enabled", K_BOOL,
     F(rocketmq.room_outbox.activity_consumer_enabled), "false",
     .doc = "run the activity consumer group in this process (needs rocketmq.enabled)"},
    {"rocketmq.room_outbox.notice_consumer_enabled", K_BOOL,
     F(rocketmq.room_outbox.notice_consumer_enabled), "false",
     .doc = "run the notice consumer group in this process (needs rocketmq.enabled)"},
    {"rocketmq.rocket_launch.enabled", K_BOOL, F(rocketmq.rocket_launch.enabled), "false",
     .doc = "rocket wake-ups through the broker (needs rocketmq.enabled)"},
    {"rocketmq.rocket_launch.topic", K_STR, F(rocketmq.rocket_launch.topic),
     "hyapp_room_rocket_launch", NONEMPTY, .when = "rocketmq.rocket_launch.enabled",
     .doc = "the wake-up topic"},
    {"rocketmq.rocket_launch.producer_group", K_STR, F(rocketmq.rocket_launch.producer_group),
     "hyapp-room-rocket-open-producer", .doc = "producer name"},
    {"rocketmq.rocket_launch.consumer_group", K_STR, F(rocketmq.rocket_launch.consumer_group),
     "hyapp-room-rocket-open", NONEMPTY, .when = "rocketmq.rocket_launch.enabled",
     .doc = "the wake-up consumer group"},
    {"rocketmq.rocket_launch.consumer_max_reconsume_times", K_INT,
     F(rocketmq.rocket_launch.consumer_max_reconsume_times), "16", GE(0),
     .when = "rocketmq.rocket_launch.enabled",
     .doc = "deliveries before a wake-up is dead-lettered"},

    {"outbox_worker.enabled", K_BOOL, F(outbox_worker.enabled), "true",
     .doc = "run the outbox worker in this process"},
    {"outbox_worker.publish_mode", K_CHOICE, F(outbox_worker.publish_mode), "direct",
     ONE_OF(publish_modes), .doc = "direct sinks, the broker (mq) or both (dual)"},
    {"outbox_worker.poll_interval", K_DUR, F(outbox_worker.poll_interval_ms), "1s", GT(0),
     .note = "(avoids a busy loop)", .doc = "time between claims when idle"},
    {"outbox_worker.batch_size", K_INT, F(outbox_worker.batch_size), "100", GT(0),
     .doc = "the most rows one claim takes (with claim_batches 1), and the most rows of one sink "
            "call"},
    {"outbox_worker.claim_batches", K_INT, F(outbox_worker.claim_batches), "1", GE(1),
     .doc = "a multiple of batch_size: a claim after one that brought batch_size rows (a deep "
            "backlog) takes up to claim_batches x batch_size rows, each sink call still at most "
            "batch_size; 1 (the default): batch_size caps every claim, as the seed says"},
    {"outbox_worker.publish_timeout", K_DUR, F(outbox_worker.publish_timeout_ms), "3s", GT(0),
     .doc = "one publish attempt"},
    {"outbox_worker.retry_strategy", K_STR, F(outbox_worker.retry_strategy), "exponential_backoff",
     ONE_OF(strategies), .doc = "delay between attempts"},
    {"outbox_worker.max_retry_count", K_INT, F(outbox_worker.max_retry_count), "10", GT(0),
     .doc = "attempts before a row is failed (dead letter)"},
    {"outbox_worker.initial_backoff", K_DUR, F(outbox_worker.initial_backoff_ms), "5s", GT(0),
     .doc = "delay after the first failure"},
    {"outbox_worker.max_backoff", K_DUR, F(outbox_worker.max_backoff_ms), "5m",
     .doc = "delay cap (>= initial_backoff)"},
    {"outbox_worker.workers", K_INT, F(outbox_worker.workers), "2", GE(1), .doc = "worker threads"},
    {"outbox_worker.lock_timeout", K_DUR, F(outbox_worker.lock_timeout_ms), "30s",
     .doc = "a claim expires after this (> publish_timeout)"},
    {"outbox_worker.complete_gather", K_DUR, F(outbox_worker.complete_gather_ms), "20ms", GE(0),
     .note = "(0 off)",
     .doc = "a worker writes the completions of the batches that landed within this (or 4 x "
            "batch_size rows) in one store transaction; the rows stay delivering until then"},
    {"outbox_worker.handoff_queue", K_INT, F(outbox_worker.handoff_queue), "-1", GE(-1),
     .note = "(-1 auto, 0 off)",
     .doc = "hand-off queue rows; -1 = max(1024, 4 x workers x batch_size), 0 = off"},
    {"outbox_worker.ordering", K_CHOICE, F(outbox_worker.ordering), "per_room", ONE_OF(orderings),
     .doc = "per_room: a room's events reach each sink in commit order; none: independent"},
    {"outbox_worker.circuit_failures", K_INT, F(outbox_worker.circuit_failures), "5", GE(1),
     .doc = "consecutive transport failures of a sink that open its circuit (no attempts "
            "counted while open)"},
    {"outbox_worker.circuit_probe_every", K_DUR, F(outbox_worker.circuit_probe_ms), "1s", GT(0),
     .doc = "an open circuit lets one probe row through this often"},
    {"outbox_worker.log_sink.enabled", K_BOOL, F(outbox_worker.log_sink_enabled), "true",
     .doc = "direct sink writing one JSON line per event"},
    {"outbox_worker.log_sink.path", K_STR, F(outbox_worker.log_sink_path),
     "./var/outbox-events.jsonl", NONEMPTY, .when = "outbox_worker.log_sink.enabled",
     .note = "when the log sink is enabled", .doc = "the log sink's file"},

    {"tencent_im.enabled", K_BOOL, F(tencent_im.enabled), "false",
     .doc = "deliver to Tencent Cloud IM (direct or dual)"},
    {"tencent_im.base_url", K_STR, F(tencent_im.base_url), "https://console.tim.qq.com", NONEMPTY,
     .when = IM_ON, .doc = "IM REST API base URL"},
    {"tencent_im.sdk_app_id", K_INT64, F(tencent_im.sdk_app_id), "0", GT(0), .when = IM_ON,
     .note = "when tencent_im.enabled", .doc = "SDKAppID"},
    {"tencent_im.admin_identifier", K_STR, F(tencent_im.admin_identifier), "", NONEMPTY,
     .when = IM_ON, .note = "when tencent_im.enabled", .doc = "the App admin account"},
    {"tencent_im.secret_key_env", K_STR, F(tencent_im.secret_key_env), "TIM_SECRET_KEY",
     .doc = "environment variable holding the secret key"},
    {"tencent_im.secret_key_file", K_STR, F(tencent_im.secret_key_file), "",
     .doc = "or a file holding it"},
    {"tencent_im.usersig_ttl", K_DUR, F(tencent_im.usersig_ttl_ms), "24h", GT(0), .when = IM_ON,
     .doc = "lifetime of a generated UserSig"},
    {"tencent_im.group_type", K_STR, F(tencent_im.group_type), "AVChatRoom", ONE_OF(group_types),
     .doc = "IM group type of a room"},
    {"tencent_im.ca_file", K_STR, F(tencent_im.ca_file), "",
     .doc = "extra CA bundle; \"\" = the system's"},
    {"tencent_im.timeout", K_DUR, F(tencent_im.timeout_ms), "4s", GT(0), .when = IM_ON,
     .doc = "one HTTP call (above IM's own 3 s)"},

    {"tencent_im.rate_limit_per_s", K_INT, F(tencent_im.rate_limit_per_s), "200", GE(0),
     .note = "(0 = no limit)", .doc = "IM calls per second per API from this node"},
    {"tencent_im.group_rate_limit_per_s", K_INT, F(tencent_im.group_rate_limit_per_s), "40", GE(0),
     .note = "(0 = no limit)", .doc = "IM messages per second per group from this node"},

    {"activity.enabled", K_BOOL, F(activity.enabled), "false",
     .doc = "deliver to the activity gRPC service (direct or dual)"},
    {"activity.target", K_STR, F(activity.target), "127.0.0.1:50051", HOSTPORT,
     .when = "activity.enabled", .doc = "the activity service's gRPC host:port"},
};

const size_t conf_nkeys = sizeof(conf_keys) / sizeof(conf_keys[0]);
_Static_assert(sizeof(conf_keys) / sizeof(conf_keys[0]) <= CONF_MAX_KEYS, "raise CONF_MAX_KEYS");
#define keys conf_keys
#define NKEYS conf_nkeys

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

static int
empty(const char *s)
{
    return s == NULL || *s == '\0';
}

/* ==== Defaults ==== */

/* Applies a row's default text; lists are written "a, b, c". A default that
 * does not parse is a bug in keys[]: abort. */
static void
set_default(struct conf *c, const struct key *k)
{
    if (k->type != K_STRLIST && k->type != K_INT64LIST) {
        if (conf_set_scalar(c, k, k->def) != 0)
            abort();
        return;
    }
    conf_list_clear(c, k);
    for (const char *p = k->def; *p != '\0';) {
        size_t n = strcspn(p, ",");
        char item[64];
        if (n >= sizeof(item) || *(int *)((char *)c + k->aux) >= conf_list_max(k))
            abort();
        memcpy(item, p, n);
        item[n] = '\0';
        if (conf_list_append(c, k, item) != 0)
            abort();
        p += n;
        p += strspn(p, ", ");
    }
}

void
conf_defaults(struct conf *c)
{
    memset(c, 0, sizeof(*c));
    c->path = xstrdup("");
    for (size_t i = 0; i < NKEYS; i++)
        set_default(c, &keys[i]);
}

void
conf_free(struct conf *c)
{
    if (c == NULL)
        return;
    for (size_t i = 0; i < NKEYS; i++) {
        if (keys[i].type == K_STR)
            free(*(char **)((char *)c + keys[i].off));
        else if (keys[i].type == K_STRLIST)
            conf_list_clear(c, &keys[i]);
    }
    free(c->path);
    free(c);
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
    struct mark marks[CONF_MAX_KEYS];
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

/* What a value of k's type looks like, for errors ("an integer"). */
static const char *
type_name(const struct key *k, char *buf, size_t len)
{
    char names[128];

    switch (k->type) {
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
    case K_CHOICE:
        snprintf(buf, len, "one of %s", conf_join_names(k->names, names, sizeof(names)));
        return buf;
    case K_SYNC:
        return "one of full, normal";
    }
    return "?";
}

/* A mapping entry of a string list (admin.tokens) as "key=value key=value":
 * scalar keys and values without spaces, '=' or quotes. */
static int
flatten(struct loader *ld, const yaml_node_t *e, const char *path, char *out, size_t outlen)
{
    size_t len = 0;

    out[0] = '\0';
    for (yaml_node_pair_t *p = e->data.mapping.pairs.start; p < e->data.mapping.pairs.top; p++) {
        yaml_node_t *kn = yaml_document_get_node(ld->doc, p->key);
        yaml_node_t *vn = yaml_document_get_node(ld->doc, p->value);
        if (kn->type != YAML_SCALAR_NODE || vn->type != YAML_SCALAR_NODE)
            return fail_at(ld, e, path, "an entry's keys and values must be scalars");
        const char *kv[2] = {scalar(kn), scalar(vn)};
        for (int i = 0; i < 2; i++)
            if (*kv[i] == '\0' || strpbrk(kv[i], " \t=\"'") != NULL)
                return fail_at(ld, i ? vn : kn, path, "\"%s\": no spaces, '=' or quotes here",
                               kv[i]);
        len += (size_t)snprintf(out + len, len < outlen ? outlen - len : 0, "%s%s=%s",
                                len ? " " : "", kv[0], kv[1]);
        if (len >= outlen)
            return fail_at(ld, e, path, "entry too long");
    }
    return 0;
}

static int
set_list(struct loader *ld, const struct key *k, const yaml_node_t *n, const char *path)
{
    char tn[160];
    int i = 0;

    if (is_null(n))
        n = NULL; /* "key:" alone is an empty list */
    else if (n->type != YAML_SEQUENCE_NODE)
        return fail_at(ld, n, path, "expected %s", type_name(k, tn, sizeof(tn)));
    conf_list_clear(ld->c, k);
    if (n == NULL)
        return 0;
    for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top;
         it++, i++) {
        yaml_node_t *e = yaml_document_get_node(ld->doc, *it);
        if (i >= conf_list_max(k))
            return fail_at(ld, e, path, "too many entries (at most %d)", conf_list_max(k));
        char flat[1024];
        if (e->type == YAML_MAPPING_NODE && k->type == K_STRLIST) {
            if (flatten(ld, e, path, flat, sizeof(flat)) != 0)
                return ROOMD_EINVAL;
            if (conf_list_append(ld->c, k, flat) != 0)
                return fail_at(ld, e, path, "cannot store the entry");
            continue;
        }
        if (e->type != YAML_SCALAR_NODE)
            return fail_at(ld, e, path, "expected %s", type_name(k, tn, sizeof(tn)));
        if (conf_list_append(ld->c, k, scalar(e)) != 0)
            return fail_at(ld, e, path, "expected an integer, got \"%s\"", scalar(e));
    }
    return 0;
}

static int
set_value(struct loader *ld, const struct key *k, const yaml_node_t *n, const char *path)
{
    char tn[160];

    if (k->type == K_STRLIST || k->type == K_INT64LIST)
        return set_list(ld, k, n, path);
    if (n->type != YAML_SCALAR_NODE)
        return fail_at(ld, n, path, "expected %s", type_name(k, tn, sizeof(tn)));
    if (conf_set_scalar(ld->c, k, k->type == K_STR && is_null(n) ? "" : scalar(n)) == 0)
        return 0;
    return fail_at(ld, n, path, "expected %s, got \"%s\"", type_name(k, tn, sizeof(tn)), scalar(n));
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
static void bad(struct vctx *v, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bool topics_collide(const char *a, const char *b);

/* Topics and consumer groups that collide (issue 26): the rocket wake-ups'
 * topic beside the outbox's (its group would read, and dead-letter, every
 * room event), and one consumer group name for two roles (they would share
 * one position and each see only part of the events). */
static void
validate_mq_names(const struct conf_rocketmq *mq, struct vctx *v)
{
    const struct {
        const char *key, *name;
    } groups[] = {
        {"rocketmq.room_outbox.tencent_im_consumer_group",
         mq->room_outbox.tencent_im_consumer_group},
        {"rocketmq.room_outbox.activity_consumer_group", mq->room_outbox.activity_consumer_group},
        {"rocketmq.room_outbox.notice_consumer_group", mq->room_outbox.notice_consumer_group},
        {"rocketmq.rocket_launch.consumer_group", mq->rocket_launch.consumer_group},
    };

    if (mq->room_outbox.enabled && mq->rocket_launch.enabled && mq->room_outbox.topic != NULL &&
        mq->rocket_launch.topic != NULL &&
        topics_collide(mq->room_outbox.topic, mq->rocket_launch.topic))
        bad(v, "rocketmq.rocket_launch.topic",
            "\"%s\" collides with rocketmq.room_outbox.topic \"%s\": the wake-ups' group would "
            "read every room event; give them distinct topics",
            mq->rocket_launch.topic, mq->room_outbox.topic);
    for (size_t i = 0; i < sizeof(groups) / sizeof(groups[0]); i++)
        for (size_t j = i + 1; j < sizeof(groups) / sizeof(groups[0]); j++)
            if (groups[i].name != NULL && groups[j].name != NULL && *groups[i].name &&
                strcmp(groups[i].name, groups[j].name) == 0)
                bad(v, groups[j].key, "\"%s\" is also %s: each consumer role needs its own group",
                    groups[j].name, groups[i].key);
}

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

/* The numeric value of row k in c (bool 0/1, choice index). */
static int64_t
num_value(const struct conf *c, const struct key *k)
{
    const void *p = (const char *)c + k->off;

    switch (k->type) {
    case K_INT:
    case K_CHOICE:
        return *(const int *)p;
    case K_INT64:
    case K_DUR:
        return *(const int64_t *)p;
    case K_BOOL:
    case K_SYNC:
        return *(const bool *)p;
    default:
        return 0;
    }
}

static const char *
str_value(const struct conf *c, const struct key *k)
{
    return k->type == K_STR ? *(char *const *)((const char *)c + k->off) : NULL;
}

/* Whether row k's rule applies: no .when, a true bool "key" or "key=value". */
static int
when_holds(const struct conf *c, const struct key *k)
{
    char name[128];
    const char *eq;
    int idx;

    if (k->when == NULL)
        return 1;
    eq = strchr(k->when, '=');
    snprintf(name, sizeof(name), "%.*s", eq ? (int)(eq - k->when) : (int)strlen(k->when), k->when);
    if ((idx = key_index(name)) < 0)
        abort(); /* a bad .when in keys[] */
    if (eq == NULL)
        return num_value(c, &keys[idx]) != 0;
    const char *s = str_value(c, &keys[idx]);
    return s != NULL && strcmp(s, eq + 1) == 0;
}

/* Checks row k's single-key rule; the message names the key and the bound. */
static void
check_row(const struct conf *c, const struct key *k, struct vctx *v)
{
    const char *sep = k->note ? " " : "", *note = k->note ? k->note : "";
    const char *s = str_value(c, k);
    int64_t n = num_value(c, k);
    char names[160];

    if (k->check == CK_NONE || !when_holds(c, k))
        return;
    switch (k->check) {
    case CK_GT:
        if (n <= k->lo)
            bad(v, k->path, "must be > %lld%s%s", (long long)k->lo, sep, note);
        break;
    case CK_GE:
        if (n < k->lo)
            bad(v, k->path, "must be >= %lld%s%s", (long long)k->lo, sep, note);
        break;
    case CK_RANGE:
        if (n < k->lo || n > k->hi)
            bad(v, k->path, "must be in %lld..%lld%s%s, got %lld", (long long)k->lo,
                (long long)k->hi, sep, note, (long long)n);
        break;
    case CK_NONEMPTY:
        if (empty(s))
            bad(v, k->path, "must not be empty%s%s", sep, note);
        break;
    case CK_ONE_OF:
        conf_join_names(k->names, names, sizeof(names));
        if (k->type == K_CHOICE) {
            if (n < 0 || n >= conf_count_names(k->names))
                bad(v, k->path, "must be one of %s", names);
        } else if (conf_name_index(k->names, s) < 0) {
            bad(v, k->path, "must be one of %s, got \"%s\"", names, s ? s : "");
        }
        break;
    case CK_HOSTPORT:
    case CK_HOSTPORT_OPT:
        if (!(k->check == CK_HOSTPORT_OPT && empty(s)) && !host_port_ok(s))
            bad(v, k->path, "must be host:port%s%s, got \"%s\"", sep, note, s ? s : "");
        break;
    case CK_NONE:
        break;
    }
}

bool
conf_listen_is_loopback(const char *listen)
{
    const char *colon = listen ? strrchr(listen, ':') : NULL;
    char host[64];
    struct in_addr a4;
    struct in6_addr a6;
    size_t n;

    if (colon == NULL || (n = (size_t)(colon - listen)) == 0 || n >= sizeof(host))
        return false;
    if (listen[0] == '[' && listen[n - 1] == ']') /* "[::1]:8080" */
        snprintf(host, sizeof(host), "%.*s", (int)(n - 2), listen + 1);
    else
        snprintf(host, sizeof(host), "%.*s", (int)n, listen);
    if (strcmp(host, "localhost") == 0)
        return true;
    /* the parsed address, not its text: "127.0.0.1" yes, "127.example.com" no */
    if (inet_pton(AF_INET, host, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, host, &a6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&a6) || (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
    return false;
}

bool
conf_cidr_parse(const char *s, struct conf_cidr *out)
{
    char host[64];
    const char *slash = s ? strchr(s, '/') : NULL;
    size_t n = s ? (slash ? (size_t)(slash - s) : strlen(s)) : 0;
    int max;

    memset(out, 0, sizeof(*out));
    if (n == 0 || n >= sizeof(host))
        return false;
    memcpy(host, s, n);
    host[n] = '\0';
    if (inet_pton(AF_INET, host, out->addr) == 1)
        out->family = AF_INET, max = 32;
    else if (inet_pton(AF_INET6, host, out->addr) == 1)
        out->family = AF_INET6, max = 128;
    else
        return false;
    out->bits = max;
    if (slash != NULL) {
        char *end;
        long b;
        if (slash[1] < '0' || slash[1] > '9')
            return false;
        errno = 0;
        b = strtol(slash + 1, &end, 10);
        if (*end != '\0' || errno != 0 || b < 0 || b > max)
            return false;
        out->bits = (int)b;
    }
    return true;
}

bool
conf_cidr_match(const struct conf_cidr *c, const char *a)
{
    unsigned char x[16];
    const unsigned char *p = x;
    int family;

    if (a == NULL)
        return false;
    if (inet_pton(AF_INET, a, x) == 1) {
        family = AF_INET;
    } else if (inet_pton(AF_INET6, a, x) == 1) {
        family = AF_INET6;
        if (IN6_IS_ADDR_V4MAPPED((const struct in6_addr *)x))
            family = AF_INET, p = x + 12;
    } else {
        return false;
    }
    if (family != c->family)
        return false;
    for (int i = 0, left = c->bits; left > 0; i++, left -= 8) {
        unsigned char mask = left >= 8 ? 0xff : (unsigned char)(0xff << (8 - left));
        if ((p[i] & mask) != (c->addr[i] & mask))
            return false;
    }
    return true;
}

/* At most one of two keys saying where a secret (or a TLS file) is. */
static void
not_both(struct vctx *v, const char *a_key, const char *a, const char *b_key, const char *b)
{
    if (!empty(a) && !empty(b))
        bad(v, b_key, "set either %s or %s, not both", a_key, b_key);
}

/* Both of a TLS pair, or neither. */
static void
pair(struct vctx *v, const char *a_key, const char *a, const char *b_key, const char *b)
{
    if (empty(a) != empty(b))
        bad(v, empty(a) ? a_key : b_key, "set both %s and %s, or neither", a_key, b_key);
}

int
conf_admin_token_parse(const char *entry, struct conf_admin_token *out, char *err, size_t errlen)
{
    char buf[1024];
    char *save = NULL;

    memset(out, 0, sizeof(*out));
    snprintf(buf, sizeof(buf), "%s", entry);
    for (char *w = strtok_r(buf, " ", &save); w != NULL; w = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(w, '=');
        if (eq == NULL) {
            snprintf(err, errlen, "want {name, role, token_env | token_file}, got \"%.40s\"", w);
            return ROOMD_EINVAL;
        }
        *eq++ = '\0';
        if (strcmp(w, "name") == 0)
            snprintf(out->name, sizeof(out->name), "%s", eq);
        else if (strcmp(w, "role") == 0 && (strcmp(eq, "read") == 0 || strcmp(eq, "operate") == 0))
            out->read_only = strcmp(eq, "read") == 0;
        else if (strcmp(w, "role") == 0) {
            snprintf(err, errlen, "role: read or operate, not \"%.40s\"", eq);
            return ROOMD_EINVAL;
        } else if (strcmp(w, "token_env") == 0)
            snprintf(out->token_env, sizeof(out->token_env), "%s", eq);
        else if (strcmp(w, "token_file") == 0)
            snprintf(out->token_file, sizeof(out->token_file), "%s", eq);
        else {
            snprintf(err, errlen, "unknown key \"%.40s\" (name, role, token_env, token_file)", w);
            return ROOMD_EINVAL;
        }
    }
    if (out->name[0] == '\0' ||
        strspn(out->name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                          "0123456789_.-") != strlen(out->name)) {
        snprintf(err, errlen, "name: want [A-Za-z0-9_.-]{1,63}");
        return ROOMD_EINVAL;
    }
    if ((out->token_env[0] == '\0') == (out->token_file[0] == '\0')) {
        snprintf(err, errlen, "%s: set one of token_env, token_file", out->name);
        return ROOMD_EINVAL;
    }
    return 0;
}

/* auth.* and admin.* (docs/auth.md). */
static void
validate_auth_admin(const struct conf *c, struct vctx *v)
{
    const struct conf_auth *a = &c->auth;
    const struct conf_admin *ad = &c->admin;
    bool hs = !empty(a->hs256_secret_env) || !empty(a->hs256_secret_file);

    if (strcmp(a->mode, "none") == 0) {
        if (!conf_listen_is_loopback(c->http.listen))
            bad(v, "auth.mode", "none needs every listener on loopback; http.listen is \"%s\"",
                c->http.listen);
        else if (!conf_listen_is_loopback(ad->listen))
            bad(v, "auth.mode", "none needs every listener on loopback; admin.listen is \"%s\"",
                ad->listen);
        else if (!empty(c->grpc.listen) && !conf_listen_is_loopback(c->grpc.listen))
            bad(v, "auth.mode", "none needs every listener on loopback; grpc.listen is \"%s\"",
                c->grpc.listen);
    }
    if (strcmp(c->room.gift_catalog, "off") == 0 && strcmp(a->mode, "none") != 0)
        bad(v, "room.gift_catalog",
            "off lets a caller choose the price of its gifts: only allowed with auth.mode none");
    not_both(v, "auth.jwt.hs256_secret_env", a->hs256_secret_env, "auth.jwt.hs256_secret_file",
             a->hs256_secret_file);
    if (strcmp(a->mode, "jwt") == 0 && !hs && empty(a->public_key_file))
        bad(v, "auth.jwt.hs256_secret_env",
            "auth.mode jwt needs auth.jwt.hs256_secret_env, auth.jwt.hs256_secret_file or "
            "auth.jwt.public_key_file");
    if (hs && !empty(a->public_key_file))
        bad(v, "auth.jwt.public_key_file",
            "set either an HS256 secret or auth.jwt.public_key_file, not both");
    if (strcmp(ad->listen, c->http.listen) == 0)
        bad(v, "admin.listen", "must differ from http.listen");
    not_both(v, "admin.token_env", ad->token_env, "admin.token_file", ad->token_file);
    for (int i = 0; i < ad->ntokens; i++) {
        struct conf_admin_token t, u;
        char e[256];
        if (conf_admin_token_parse(ad->tokens[i], &t, e, sizeof(e)) != 0) {
            bad(v, "admin.tokens", "entry %d: %s", i + 1, e);
            break;
        }
        for (int j = 0; j < i; j++)
            if (conf_admin_token_parse(ad->tokens[j], &u, e, sizeof(e)) == 0 &&
                strcmp(u.name, t.name) == 0)
                bad(v, "admin.tokens", "entry %d: name \"%s\" used twice", i + 1, t.name);
    }
    if (empty(ad->token_env) && empty(ad->token_file) && ad->ntokens == 0 &&
        !conf_listen_is_loopback(ad->listen))
        bad(v, "admin.token_env",
            "admin.listen \"%s\" is not loopback: set admin.token_env or admin.token_file",
            ad->listen);
    /* gRPC's RoomInternalService checks the admin token, as admin.listen does */
    if (empty(ad->token_env) && empty(ad->token_file) && ad->ntokens == 0 &&
        !empty(c->grpc.listen) && !conf_listen_is_loopback(c->grpc.listen))
        bad(v, "admin.token_env",
            "grpc.listen \"%s\" is not loopback: set admin.token_env or admin.token_file "
            "(RoomInternalService checks it)",
            c->grpc.listen);
    if (!empty(c->grpc.listen) &&
        (strcmp(c->grpc.listen, c->http.listen) == 0 || strcmp(c->grpc.listen, ad->listen) == 0))
        bad(v, "grpc.listen", "must differ from http.listen and admin.listen");
    pair(v, "http.tls.cert_file", c->http.tls_cert_file, "http.tls.key_file", c->http.tls_key_file);
    pair(v, "admin.tls.cert_file", ad->tls_cert_file, "admin.tls.key_file", ad->tls_key_file);
    pair(v, "grpc.tls.cert_file", c->grpc.tls_cert_file, "grpc.tls.key_file", c->grpc.tls_key_file);
}

int
conf_rocketmq_driver(const struct conf_rocketmq *mq)
{
    if (mq->driver == CONF_MQ_JETSTREAM || mq->driver == CONF_MQ_ROCKETMQ)
        return mq->driver;
    for (int i = 0; i < mq->nname_servers; i++) {
        const char *u = mq->name_servers[i] ? mq->name_servers[i] : "";
        if (strncmp(u, "nats://", 7) == 0 || strncmp(u, "tls://", 6) == 0)
            return CONF_MQ_JETSTREAM; /* a NATS list (its other entries checked as URLs) */
    }
    return mq->nname_servers > 0 || !empty(mq->name_server_domain) ? CONF_MQ_ROCKETMQ
                                                                    : CONF_MQ_JETSTREAM;
}

/* "host:port" with a port 1..65535 (a leading http:// allowed, as the
 * RocketMQ clients strip it). */
static bool
rmq_host_port(const char *s)
{
    if (strncmp(s, "http://", 7) == 0)
        s += 7;
    const char *colon = strrchr(s, ':');
    if (colon == NULL || colon == s || strchr(s, '/') != NULL)
        return false;
    char *end;
    long port = strtol(colon + 1, &end, 10);
    return colon[1] != '\0' && *end == '\0' && port > 0 && port < 65536;
}

/* The rules that read more than one key (or every entry of a list). */
static void
validate_cross(const struct conf *c, struct vctx *v)
{
    const struct conf_outbox *ob = &c->outbox_worker;
    const struct conf_rocketmq *mq = &c->rocketmq;
    const struct conf_tencent_im *im = &c->tencent_im;
    const struct conf_rocket *rk = &c->room.rocket;

    if (rk->nthresholds < 1)
        bad(v, "room.rocket.thresholds", "needs at least one level");
    for (int i = 0; i < rk->nthresholds; i++) {
        if (rk->thresholds[i] <= 0)
            bad(v, "room.rocket.thresholds", "every threshold must be > 0");
        else if (i > 0 && rk->thresholds[i] <= rk->thresholds[i - 1])
            bad(v, "room.rocket.thresholds", "must be strictly increasing");
    }

    /* redis, lease, projection */
    if (strcmp(c->lease.driver, "redis") == 0 && !c->redis.enabled)
        bad(v, "lease.driver", "redis needs redis.enabled: true");
    if (c->lease.renew_every_ms <= 0 || c->lease.renew_every_ms >= c->lease.ttl_ms)
        bad(v, "lease.renew_every", "must be > 0 and < lease.ttl");
    /* a command gives up on its hold at half of reconcile_after (docs/wallet.md),
     * so a hold the reconciler sees is never about to commit */
    if (c->wallet.reconcile_after_ms < 4 * c->wallet.grpc_timeout_ms)
        bad(v, "wallet.reconcile_after", "must be >= 4 x wallet.grpc.timeout");
    if (strcmp(c->projection.driver, "redis") == 0 && !c->redis.enabled)
        bad(v, "projection.driver", "redis needs redis.enabled: true");
    if (c->rocketmq.consumer_inbox == 2 && strcmp(c->store.driver, "mysql") != 0)
        bad(v, "rocketmq.consumer_inbox", "mysql needs store.driver: mysql");

    for (int i = 0; i < c->redis.nsentinel_addrs; i++)
        if (!host_port_ok(c->redis.sentinel_addrs[i]))
            bad(v, "redis.sentinel.addrs", "entries must be host:port, got \"%s\"",
                c->redis.sentinel_addrs[i]);
    if (c->redis.nsentinel_addrs > 0 && empty(c->redis.sentinel_master_name))
        bad(v, "redis.sentinel.master_name", "must be set with redis.sentinel.addrs");
    for (int i = 0; i < c->store.mysql.nhosts; i++)
        if (!host_port_ok(c->store.mysql.hosts[i]))
            bad(v, "store.mysql.hosts", "entries must be host:port, got \"%s\"",
                c->store.mysql.hosts[i]);

    /* rocketmq (NATS JetStream, or RocketMQ: docs/rocketmq.md) */
    bool rmq = conf_rocketmq_driver(mq) == CONF_MQ_ROCKETMQ;
    if (mq->enabled) {
        if (mq->nname_servers < 1 && !(rmq && !empty(mq->name_server_domain)))
            bad(v, "rocketmq.name_servers",
                rmq ? "needs at least one name server host:port (or rocketmq.name_server_domain)"
                    : "needs at least one NATS URL when rocketmq.enabled");
        for (int i = 0; i < mq->nname_servers; i++)
            if (empty(mq->name_servers[i]))
                bad(v, "rocketmq.name_servers", "entries must not be empty");
            else if (rmq && !rmq_host_port(mq->name_servers[i]))
                bad(v, "rocketmq.name_servers",
                    "driver rocketmq: every entry is a name server host:port (9876 by default)");
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
    if (mq->room_outbox.enabled && !mq->enabled)
        bad(v, "rocketmq.room_outbox.enabled", "needs rocketmq.enabled: true");
    if (mq->room_outbox.tencent_im_consumer_enabled && !mq->enabled)
        bad(v, "rocketmq.room_outbox.tencent_im_consumer_enabled", "needs rocketmq.enabled: true");
    if (mq->room_outbox.tencent_im_consumer_enabled && !im->enabled)
        bad(v, "rocketmq.room_outbox.tencent_im_consumer_enabled",
            "needs tencent_im.enabled: true");
    if (mq->room_outbox.tencent_im_consumer_enabled && im->enabled &&
        ob->publish_mode == PUBLISH_DUAL)
        bad(v, "rocketmq.room_outbox.tencent_im_consumer_enabled",
            "not with outbox_worker.publish_mode: dual (the direct IM sink already sends every "
            "IM call; use mq with the bridge, or dual without it)");
    if (mq->rocket_launch.enabled && !mq->enabled)
        bad(v, "rocketmq.rocket_launch.enabled", "needs rocketmq.enabled: true");
    if (mq->enabled)
        validate_mq_names(mq, v);

    /* outbox_worker (seed 配置规则) */
    if (ob->publish_mode == PUBLISH_MQ || ob->publish_mode == PUBLISH_DUAL) {
        const char *m = ob->publish_mode == PUBLISH_MQ ? "mq" : "dual";
        if (!mq->enabled)
            bad(v, "outbox_worker.publish_mode", "%s needs rocketmq.enabled: true", m);
        else if (!mq->room_outbox.enabled)
            bad(v, "outbox_worker.publish_mode", "%s needs rocketmq.room_outbox.enabled: true", m);
    }
    if (ob->max_backoff_ms < ob->initial_backoff_ms)
        bad(v, "outbox_worker.max_backoff", "must be >= outbox_worker.initial_backoff");
    if (ob->lock_timeout_ms <= ob->publish_timeout_ms)
        bad(v, "outbox_worker.lock_timeout", "must be > outbox_worker.publish_timeout");
    else if (ob->complete_gather_ms >= ob->lock_timeout_ms - ob->publish_timeout_ms)
        bad(v, "outbox_worker.complete_gather",
            "must be < outbox_worker.lock_timeout - outbox_worker.publish_timeout");

    /* tencent_im */
    if (im->enabled && empty(im->secret_key_env) && empty(im->secret_key_file))
        bad(v, "tencent_im.secret_key_env",
            "tencent_im.enabled needs secret_key_env or secret_key_file");

    for (int i = 0; i < c->http.ntrusted_proxies; i++) {
        struct conf_cidr cidr;
        if (!conf_cidr_parse(c->http.trusted_proxies[i], &cidr))
            bad(v, "http.trusted_proxies",
                "want an address or CIDR (10.0.0.0/8, fd00::/8), got \"%s\"",
                c->http.trusted_proxies[i]);
    }

    validate_auth_admin(c, v);
}

/* True when topics a and b would share messages: equal, or one a subject
 * prefix of the other ("t" and "t.x": the JetStream driver's subjects are
 * "<topic>.<...>"). */
static bool
topics_collide(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);

    if (la > lb)
        return topics_collide(b, a);
    return strncmp(a, b, la) == 0 && (b[la] == '\0' || b[la] == '.');
}
static void
validate(const struct conf *c, struct vctx *v)
{
    for (size_t i = 0; i < NKEYS && !v->failed; i++)
        check_row(c, &keys[i], v);
    if (!v->failed)
        validate_cross(c, v);
}

int
conf_validate(const struct conf *c, char *err, size_t errlen)
{
    struct vctx v = {.err = err, .errlen = errlen};

    validate(c, &v);
    return v.failed ? ROOMD_EINVAL : 0;
}

/* ==== Loading ==== */

/* Parses the YAML that parser reads, under the name name. See conf_load. */
static int
load_parsed(const char *name, yaml_parser_t *parser, struct conf **out, char *err, size_t errlen)
{
    struct conf *c = xcalloc(1, sizeof(*c));
    struct loader *ld = xcalloc(1, sizeof(*ld));
    yaml_document_t doc;
    int doc_ok = 0, rc = ROOMD_EINVAL;

    conf_defaults(c);
    free(c->path);
    c->path = xstrdup(name);
    if (!yaml_parser_load(parser, &doc)) {
        const char *what = parser->problem ? parser->problem : "invalid YAML";
        if (parser->context)
            snprintf(err, errlen, "%s:%zu:%zu: syntax error: %s %s", name,
                     parser->problem_mark.line + 1, parser->problem_mark.column + 1,
                     parser->context, what);
        else
            snprintf(err, errlen, "%s:%zu:%zu: syntax error: %s", name,
                     parser->problem_mark.line + 1, parser->problem_mark.column + 1, what);
        goto out;
    }
    doc_ok = 1;

    ld->file = name;
    ld->doc = &doc;
    ld->c = c;
    ld->err = err;
    ld->errlen = errlen;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root != NULL && !is_null(root) && (rc = walk(ld, root, "")) != 0)
        goto out;

    struct vctx v = {.file = name, .marks = ld->marks, .err = err, .errlen = errlen};
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
    free(ld);
    conf_free(c);
    return rc;
}

int
conf_load(const char *path, struct conf **out, char *err, size_t errlen)
{
    yaml_parser_t parser;
    FILE *f;
    int rc;

    *out = NULL;
    if ((f = fopen(path, "rb")) == NULL) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return ROOMD_EINVAL;
    }
    if (!yaml_parser_initialize(&parser)) {
        snprintf(err, errlen, "%s: cannot initialize the YAML parser", path);
        fclose(f);
        return ROOMD_EINVAL;
    }
    yaml_parser_set_input_file(&parser, f);
    rc = load_parsed(path, &parser, out, err, errlen);
    yaml_parser_delete(&parser);
    fclose(f);
    return rc;
}

int
conf_load_buffer(const char *name, const char *buf, size_t len, struct conf **out, char *err,
                 size_t errlen)
{
    yaml_parser_t parser;
    int rc;

    *out = NULL;
    if (!yaml_parser_initialize(&parser)) {
        snprintf(err, errlen, "%s: cannot initialize the YAML parser", name);
        return ROOMD_EINVAL;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)buf, len);
    rc = load_parsed(name, &parser, out, err, errlen);
    yaml_parser_delete(&parser);
    return rc;
}
