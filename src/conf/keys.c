/* SPDX-License-Identifier: Apache-2.0 */
/*
 * keys.c: the key table conf_keys[], ONE row per config key: its dotted path,
 * type, field (offsetof into struct conf), default (written as in YAML),
 * single-key rule (bounds or allowed values, optionally only when another key
 * is set) and its one-line doc. conf.c loads and defaults from it, validate.c
 * checks its rules, doc.c prints it as the key reference of docs/conf.md.
 *
 * To add a key:
 *   1. add the field to struct conf in conf.h;
 *   2. add one row to conf_keys[] below (keep the section's order): e.g.
 *        {"http.foo", K_DUR, F(http.foo_ms), "5s", GT(0), .doc = "what it does"}
 *      bounds: GT(n) GE(n) RANGE(a, b) NONEMPTY ONE_OF(names) HOSTPORT
 *      HOSTPORT_OPT; .when = "sec.enabled" or "sec.driver=x" limits the
 *      rule; .note is appended to its message;
 *   3. only a rule that reads two keys goes into validate_cross() (validate.c);
 *   4. regenerate the key reference: build/roomd --print-config-doc, paste it
 *      over the generated block of docs/conf.md (test_conf checks they match),
 *      and spell the key out in configs/local.yaml.
 */
#include "conf/conf.h"
#include "conf/internal.h"

#include <stddef.h>
#include <string.h>

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
static const char *const inbox_drivers[] = {"auto", "sqlite", "mysql", NULL};    /* inbox.h */
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
    {"auth.jwt.jwks_file", K_STR, F(auth.jwks_file), "",
     .doc = "or a JWKS (JSON Web Key Set: RSA, EC P-256, oct keys, each with a kid): the "
            "token's kid header picks the key; reread on SIGHUP and when the file changes "
            "(docs/auth.md: rotation)"},
    {"auth.jwt.jwks_poll_interval", K_DUR, F(auth.jwks_poll_ms), "1s", GE(0),
     .note = "(0 = on SIGHUP only)",
     .doc = "how often the JWKS file's mtime, size and inode are checked for a change"},

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
    {"grpc.watch.poll_interval", K_DUR, F(grpc.watch_poll_ms), "200ms", RANGE(10, 10000),
     .note = "(10ms..10s)",
     .doc = "a WatchRoom stream with nothing new reads the room's events again after this "
            "(the latency of a live event on the stream)"},
    {"grpc.watch.max_streams", K_INT, F(grpc.watch_max_streams), "16", RANGE(1, 1024),
     .doc = "WatchRoom streams open at once on this node (each holds a worker while open); "
            "at most grpc.workers - 1 are let in; more are RESOURCE_EXHAUSTED"},
    {"grpc.max_calls_per_address", K_INT, F(grpc.max_calls_per_address), "0", RANGE(0, 1024),
     .note = "(0 = no cap)",
     .doc = "calls (streams, over all its connections) one client address may hold workers "
            "with at once, so one address cannot take every worker; more are "
            "RESOURCE_EXHAUSTED"},

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
    {"room.member_idle_timeout", K_DUR, F(room.member_idle_timeout_ms), "60s", GE(0),
     .note = "(0 = off)",
     .doc = "a member with no heartbeat (POST /v1/rooms/{id}/heartbeat) and no command of its "
            "own for this long is removed by a LeaveRoom of roomd's own (docs/room.md, Presence)"},

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
    {"tencent_im.callback.enabled", K_BOOL, F(tencent_im.callback_enabled), "false",
     .doc = "serve POST /callbacks/tim, Tencent IM's State.StateChange callback: a Login is a "
            "heartbeat, a Logout makes the member idle at once (docs/room.md, Presence)"},
    {"tencent_im.callback.token_env", K_STR, F(tencent_im.callback_token_env), "TIM_CALLBACK_TOKEN",
     .doc = "environment variable holding the callback authentication token (IM console: "
            "callback authentication); a callback must carry Sign = sha256(token + RequestTime)"},
    {"tencent_im.callback.token_file", K_STR, F(tencent_im.callback_token_file), "",
     .doc = "or a file holding it"},
    {"tencent_im.callback.max_skew", K_DUR, F(tencent_im.callback_max_skew_ms), "60s", GT(0),
     .doc = "a callback whose RequestTime is further from now than this is refused (replay)"},

    {"tencent_im.rate_limit_per_s", K_INT, F(tencent_im.rate_limit_per_s), "200", GE(0),
     .note = "(0 = no limit)", .doc = "IM calls per second per API from this node"},
    {"tencent_im.group_rate_limit_per_s", K_INT, F(tencent_im.group_rate_limit_per_s), "40", GE(0),
     .note = "(0 = no limit)", .doc = "IM messages per second per group from this node"},
    {"tencent_im.coalesce_after", K_DUR, F(tencent_im.coalesce_after_ms), "2s", GE(0),
     .note = "(0 = off)",
     .doc = "a group's unsent state messages that its rate would not send within this are "
            "coalesced into one (docs/direct.md)"},

    {"activity.enabled", K_BOOL, F(activity.enabled), "false",
     .doc = "deliver to the activity gRPC service (direct or dual)"},
    {"activity.target", K_STR, F(activity.target), "127.0.0.1:50051", HOSTPORT,
     .when = "activity.enabled", .doc = "the activity service's gRPC host:port"},
};

const size_t conf_nkeys = sizeof(conf_keys) / sizeof(conf_keys[0]);
_Static_assert(sizeof(conf_keys) / sizeof(conf_keys[0]) <= CONF_MAX_KEYS, "raise CONF_MAX_KEYS");

int
conf_key_index(const char *path)
{
    for (size_t i = 0; i < conf_nkeys; i++)
        if (strcmp(conf_keys[i].path, path) == 0)
            return (int)i;
    return -1;
}
