/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_conf.c: the config loader (src/conf/: keys.c, conf.c, validate.c):
 * defaults are valid, every file in configs/ loads, every rule refuses a bad
 * value with the key named (table-driven, one YAML snippet per rule),
 * durations, unknown keys, wrong types, syntax errors with their line, JSON
 * (flow style) input.
 */
#include "helpers.h"

#include "conf/conf.h"
#include "core/err.h"
#include "core/xmalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *tmpdir;

static int
setup(void **state)
{
    tmpdir = th_tmpdir();
    return 0;
}

static int
teardown(void **state)
{
    char *cmd = xasprintf("rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", tmpdir);
    free(cmd);
    free(tmpdir);
    return 0;
}

/* Writes text into a file in tmpdir; returns its malloc'd path. */
static char *
write_yaml(const char *text)
{
    static int seq;
    char *path = xasprintf("%s/c%d.yaml", tmpdir, seq++);
    FILE *f = fopen(path, "w");

    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

/* Loads text; returns rc and fills err. *out freed unless wanted. */
static int
load_text(const char *text, struct conf **out, char *err, size_t errlen)
{
    char *path = write_yaml(text);
    struct conf *c = NULL;
    int rc = conf_load(path, &c, err, errlen);

    if (rc != 0)
        assert_null(c);
    if (out != NULL)
        *out = c;
    else
        conf_free(c);
    free(path);
    return rc;
}

static void
test_defaults_valid(void **state)
{
    struct conf *c = xcalloc(1, sizeof(*c));
    char err[512] = "";

    conf_defaults(c);
    assert_int_equal(conf_validate(c, err, sizeof(err)), 0);
    assert_string_equal(c->store.driver, "sqlite");
    assert_string_equal(c->store.sqlite.path, "./var/roomd.db");
    assert_string_equal(c->http.listen, "127.0.0.1:8080");
    assert_int_equal(c->outbox_worker.publish_mode, PUBLISH_DIRECT);
    assert_int_equal(c->outbox_worker.poll_interval_ms, 1000);
    assert_int_equal(c->outbox_worker.batch_size, 100);
    assert_int_equal(c->outbox_worker.publish_timeout_ms, 3000);
    assert_int_equal(c->outbox_worker.max_retry_count, 10);
    assert_int_equal(c->outbox_worker.initial_backoff_ms, 5000);
    assert_int_equal(c->outbox_worker.max_backoff_ms, 300000);
    assert_int_equal(c->outbox_worker.handoff_queue, -1);
    assert_int_equal(c->room.rocket.nthresholds, 3);
    assert_int_equal(c->room.rocket.thresholds[2], 20000);
    assert_string_equal(c->rocketmq.room_outbox.activity_consumer_group,
                        "hyapp-activity-room-outbox");
    assert_string_equal(c->tencent_im.group_type, "AVChatRoom");
    conf_free(c);
}

static void
test_empty_file_is_defaults(void **state)
{
    struct conf *c = NULL;
    char err[512] = "";

    assert_int_equal(load_text("", &c, err, sizeof(err)), 0);
    assert_string_equal(c->store.driver, "sqlite");
    /* node_id filled with host-pid */
    char suffix[32];
    snprintf(suffix, sizeof(suffix), "-%ld", (long)getpid());
    assert_true(strlen(c->app.node_id) > strlen(suffix));
    assert_string_equal(c->app.node_id + strlen(c->app.node_id) - strlen(suffix), suffix);
    conf_free(c);
}

static void
test_config_files_load(void **state)
{
    const char *src = getenv("ROOMD_SOURCE_DIR");
    const char *names[] = {"local.yaml", "docker.yaml", "cloud.yaml"};
    char err[512];

    assert_non_null(src);
    for (size_t i = 0; i < 3; i++) {
        char *path = xasprintf("%s/configs/%s", src, names[i]);
        struct conf *c = NULL;
        err[0] = '\0';
        int rc = conf_load(path, &c, err, sizeof(err));
        if (rc != 0)
            fail_msg("%s: %s", path, err);
        assert_string_equal(c->path, path);
        if (i == 0) {
            assert_string_equal(c->store.driver, "sqlite");
            assert_int_equal(c->outbox_worker.publish_mode, PUBLISH_DIRECT);
            assert_false(c->rocketmq.enabled);
        } else {
            assert_string_equal(c->store.driver, "mysql");
            assert_int_equal(c->outbox_worker.publish_mode, PUBLISH_MQ);
            assert_true(c->rocketmq.enabled);
            assert_true(c->rocketmq.nname_servers >= 1);
            assert_true(strncmp(c->rocketmq.name_servers[0], "nats://", 7) == 0);
            assert_true(c->tencent_im.enabled);
        }
        if (i == 2)
            assert_string_equal(c->lease.driver, "redis");
        conf_free(c);
        free(path);
    }
}

static void
test_values_read(void **state)
{
    struct conf *c = NULL;
    char err[512] = "";
    const char *y = "app:\n  node_id: n1\n"
                    "store:\n  sqlite:\n    synchronous: normal\n"
                    "room:\n  rocket:\n    thresholds:\n      - 10\n      - 20\n"
                    "    countdown: 1m30s\n"
                    "rocketmq:\n  name_servers: [\"nats://a:1\", 'nats://b:2']\n"
                    "outbox_worker:\n  publish_mode: dual\n  workers: 7\n"
                    "  log_sink: {enabled: off, path: \"\"}\n"
                    "rocketmq_dummy_absent_check: ~\n";
    /* the last key is unknown: first check it is refused, then load without it */
    assert_int_equal(load_text(y, NULL, err, sizeof(err)), ROOMD_EINVAL);
    assert_non_null(strstr(err, "rocketmq_dummy_absent_check: unknown key"));

    const char *ok = "app:\n  node_id: n1\n"
                     "store:\n  sqlite:\n    synchronous: normal\n"
                     "room:\n  rocket:\n    thresholds:\n      - 10\n      - 20\n"
                     "    countdown: 1m30s\n"
                     "rocketmq:\n  enabled: yes\n  name_servers: [\"nats://a:1\", 'nats://b:2']\n"
                     "  room_outbox: {enabled: true}\n"
                     "outbox_worker:\n  publish_mode: dual\n  workers: 7\n  handoff_queue: 0\n"
                     "  log_sink: {enabled: off, path: \"\"}\n";
    assert_int_equal(load_text(ok, &c, err, sizeof(err)), 0);
    assert_string_equal(c->app.node_id, "n1");
    assert_false(c->store.sqlite.synchronous_full);
    assert_int_equal(c->room.rocket.nthresholds, 2);
    assert_int_equal(c->room.rocket.thresholds[1], 20);
    assert_int_equal(c->room.rocket.countdown_ms, 90000);
    assert_int_equal(c->rocketmq.nname_servers, 2);
    assert_string_equal(c->rocketmq.name_servers[1], "nats://b:2");
    assert_int_equal(c->outbox_worker.publish_mode, PUBLISH_DUAL);
    assert_int_equal(c->outbox_worker.workers, 7);
    assert_int_equal(c->outbox_worker.handoff_queue, 0);
    assert_false(c->outbox_worker.log_sink_enabled);
    assert_string_equal(c->outbox_worker.log_sink_path, "");
    conf_free(c);
}

/* What tests/roomd_test.py writes: JSON, i.e. YAML flow style. */
static void
test_json_config(void **state)
{
    struct conf *c = NULL;
    char err[512] = "";
    const char *j =
        "{\n \"app\": {\"default_app_code\": \"hyapp\", \"node_id\": \"test-1\",\n"
        "  \"log_file\": \"/tmp/x.log\", \"log_level\": \"info\"},\n"
        " \"http\": {\"listen\": \"127.0.0.1:40001\", \"max_body_bytes\": 65536},\n"
        " \"store\": {\"driver\": \"sqlite\", \"sqlite\": {\"path\": \"/tmp/r.db\",\n"
        "  \"synchronous\": \"full\"}},\n"
        " \"room\": {\"snapshot_every_n\": 5, \"idle_evict_after\": \"10m\",\n"
        "  \"seat_count\": 8, \"rocket\": {\"thresholds\": [1000, 5000], \"countdown\": \"2s\"}},\n"
        " \"wallet\": {\"driver\": \"embedded\", \"initial_balance\": 100000,\n"
        "  \"allow_topup\": true},\n"
        " \"outbox_worker\": {\"enabled\": true, \"publish_mode\": \"direct\",\n"
        "  \"poll_interval\": \"200ms\", \"batch_size\": 100, \"publish_timeout\": \"2s\",\n"
        "  \"max_retry_count\": 3, \"initial_backoff\": \"100ms\", \"max_backoff\": \"1s\",\n"
        "  \"workers\": 2, \"lock_timeout\": \"5s\",\n"
        "  \"log_sink\": {\"enabled\": true, \"path\": \"/tmp/events.jsonl\"}}\n}\n";

    if (load_text(j, &c, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    assert_string_equal(c->http.listen, "127.0.0.1:40001");
    assert_int_equal(c->room.snapshot_every_n, 5);
    assert_int_equal(c->room.rocket.countdown_ms, 2000);
    assert_int_equal(c->wallet.initial_balance, 100000);
    assert_int_equal(c->outbox_worker.poll_interval_ms, 200);
    assert_string_equal(c->outbox_worker.log_sink_path, "/tmp/events.jsonl");
    conf_free(c);
}

static void
test_durations(void **state)
{
    static const struct {
        const char *s;
        int64_t ms;
    } good[] = {{"0", 0},          {"500ms", 500},     {"3s", 3000},     {"5m", 300000},
                {"1h", 3600000},   {"2h30m", 9000000}, {"1m30s", 90000}, {"0s", 0},
                {"1s500ms", 1500}, {"72h", 259200000}};
    static const char *const bad_[] = {"",  "5",    "5 minutes", "-1s", "1.5s",
                                       "s", "3sec", "1d",        "ms",  "99999999999999999999s"};
    int64_t v;

    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        v = -1;
        if (conf_parse_duration(good[i].s, &v) != 0)
            fail_msg("refused \"%s\"", good[i].s);
        assert_int_equal(v, good[i].ms);
    }
    for (size_t i = 0; i < sizeof(bad_) / sizeof(bad_[0]); i++)
        if (conf_parse_duration(bad_[i], &v) == 0)
            fail_msg("accepted \"%s\"", bad_[i]);
}

static void
test_unknown_key(void **state)
{
    char err[512] = "";

    assert_int_equal(
        load_text("outbox_worker:\n  enabled: true\n  pol_interval: 1s\n", NULL, err, sizeof(err)),
        ROOMD_EINVAL);
    assert_non_null(strstr(err, ":3:3: outbox_worker.pol_interval: unknown key"));
    assert_int_equal(load_text("nope: 1\n", NULL, err, sizeof(err)), ROOMD_EINVAL);
    assert_non_null(strstr(err, ":1:1: nope: unknown key"));
    /* a leaf used as a section */
    assert_int_equal(load_text("app:\n  node_id:\n    x: 1\n", NULL, err, sizeof(err)),
                     ROOMD_EINVAL);
    assert_non_null(strstr(err, "app.node_id: expected a string"));
    /* a section given a scalar */
    assert_int_equal(load_text("store: sqlite\n", NULL, err, sizeof(err)), ROOMD_EINVAL);
    assert_non_null(strstr(err, "store: expected a mapping"));
    assert_int_equal(
        load_text("app:\n  log_level: info\n  log_level: debug\n", NULL, err, sizeof(err)),
        ROOMD_EINVAL);
    assert_non_null(strstr(err, ":3:3: app.log_level: duplicate key"));
}

static void
test_wrong_types(void **state)
{
    static const struct {
        const char *yaml;
        const char *want;
    } cases[] = {
        {"outbox_worker:\n  max_backoff: 5 minutes\n",
         ":2:16: outbox_worker.max_backoff: expected a duration like 500ms, 3s, 5m, got \"5 "
         "minutes\""},
        {"outbox_worker:\n  poll_interval: 1\n",
         "outbox_worker.poll_interval: expected a duration"},
        {"outbox_worker:\n  batch_size: many\n", ":2:15: outbox_worker.batch_size: expected an "
                                                 "integer"},
        {"outbox_worker:\n  batch_size: 99999999999\n", "outbox_worker.batch_size: expected an "
                                                        "integer"},
        {"outbox_worker:\n  enabled: maybe\n", "outbox_worker.enabled: expected true or false"},
        {"outbox_worker:\n  publish_mode: kafka\n",
         "outbox_worker.publish_mode: expected one of direct, mq, dual"},
        {"store:\n  sqlite:\n    synchronous: off\n",
         ":3:18: store.sqlite.synchronous: expected one of full, normal"},
        {"room:\n  rocket:\n    thresholds: 100\n", "room.rocket.thresholds: expected a list"},
        {"room:\n  rocket:\n    thresholds: [1, x]\n",
         ":3:21: room.rocket.thresholds: expected an integer, got \"x\""},
        {"rocketmq:\n  name_servers: [[a]]\n", "rocketmq.name_servers: expected a list of strings"},
        {"http:\n  listen: [a]\n", "http.listen: expected a string"},
        {"- a\n- b\n", "(top level): expected a mapping"},
    };
    char err[512];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        err[0] = '\0';
        assert_int_equal(load_text(cases[i].yaml, NULL, err, sizeof(err)), ROOMD_EINVAL);
        if (strstr(err, cases[i].want) == NULL)
            fail_msg("case %zu: got \"%s\", want \"%s\"", i, err, cases[i].want);
    }
}

static void
test_syntax_error(void **state)
{
    char err[512] = "";

    assert_int_equal(load_text("app:\n  node_id: a\nhttp:\n  listen: \"127.0.0.1:1\n  x: 1\n"
                               "store:\n  driver: sqlite\n  sqlite: [\n",
                               NULL, err, sizeof(err)),
                     ROOMD_EINVAL);
    assert_non_null(strstr(err, "syntax error"));
    assert_int_equal(load_text("app:\n  node_id: a\n   bad_indent: 1\n", NULL, err, sizeof(err)),
                     ROOMD_EINVAL);
    assert_non_null(strstr(err, ".yaml:3:"));
    assert_non_null(strstr(err, "syntax error"));
    assert_int_equal(load_text("{\"app\": {\"node_id\": \"a\",}\n", NULL, err, sizeof(err)),
                     ROOMD_EINVAL);
    assert_non_null(strstr(err, "syntax error"));
}

static void
test_missing_file(void **state)
{
    struct conf *c = (struct conf *)1;
    char err[512] = "";

    assert_int_equal(conf_load("/nonexistent/roomd.yaml", &c, err, sizeof(err)), ROOMD_EINVAL);
    assert_null(c);
    assert_non_null(strstr(err, "/nonexistent/roomd.yaml: cannot open"));
}

/* Every rule: a snippet breaking it and the key its message must name. */
static const struct {
    const char *yaml;
    const char *key;
} rules[] = {
    /* the seed's 配置规则 */
    {"outbox_worker:\n  poll_interval: 0s\n", "2:18: outbox_worker.poll_interval: must be > 0"},
    {"outbox_worker:\n  batch_size: 0\n", "2:15: outbox_worker.batch_size: must be > 0"},
    {"outbox_worker:\n  batch_size: -5\n", "outbox_worker.batch_size: must be > 0"},
    {"outbox_worker:\n  publish_timeout: 0ms\n", "outbox_worker.publish_timeout: must be > 0"},
    {"outbox_worker:\n  max_retry_count: 0\n", "outbox_worker.max_retry_count: must be > 0"},
    {"outbox_worker:\n  publish_mode: mq\n",
     "outbox_worker.publish_mode: mq needs rocketmq.enabled"},
    {"outbox_worker:\n  publish_mode: dual\n",
     "outbox_worker.publish_mode: dual needs rocketmq.enabled"},
    {"rocketmq:\n  enabled: true\n  name_servers: [\"nats://x:1\"]\n"
     "outbox_worker:\n  publish_mode: mq\n",
     "outbox_worker.publish_mode: mq needs rocketmq.room_outbox.enabled"},
    {"outbox_worker:\n  retry_strategy: linear\n", "outbox_worker.retry_strategy: must be one of"},
    {"outbox_worker:\n  initial_backoff: 0s\n", "outbox_worker.initial_backoff: must be > 0"},
    {"outbox_worker:\n  initial_backoff: 10s\n  max_backoff: 5s\n",
     "3:16: outbox_worker.max_backoff: must be >= outbox_worker.initial_backoff"},
    {"outbox_worker:\n  workers: 0\n", "outbox_worker.workers: must be >= 1"},
    {"outbox_worker:\n  lock_timeout: 3s\n",
     "outbox_worker.lock_timeout: must be > outbox_worker.publish_timeout"},
    {"outbox_worker:\n  log_sink:\n    path: \"\"\n", "outbox_worker.log_sink.path: must not be"},
    {"outbox_worker:\n  handoff_queue: -2\n", "2:18: outbox_worker.handoff_queue: must be >= -1"},
    {"outbox_worker:\n  lock_timeout: 4s\n  complete_gather: 1s\n",
     "outbox_worker.complete_gather: must be < outbox_worker.lock_timeout - "
     "outbox_worker.publish_timeout"},
    /* app, http */
    {"app:\n  default_app_code: \"\"\n", "app.default_app_code: must not be empty"},
    {"app:\n  log_level: loud\n", "app.log_level: must be one of"},
    {"http:\n  listen: \"8080\"\n", "2:11: http.listen: must be host:port"},
    {"http:\n  listen: \"127.0.0.1:99999\"\n", "http.listen: must be host:port"},
    {"http:\n  listen: \":8080\"\n", "http.listen: must be host:port"},
    {"http:\n  advertise_addr: \"nohost\"\n", "http.advertise_addr: must be host:port"},
    {"http:\n  max_body_bytes: 0\n", "http.max_body_bytes: must be > 0"},
    {"http:\n  max_connections: 0\n", "http.max_connections: must be >= 1"},
    {"http:\n  request_timeout: 0s\n", "http.request_timeout: must be > 0"},
    /* store */
    {"store:\n  driver: postgres\n", "store.driver: must be one of sqlite, mysql"},
    {"store:\n  sqlite:\n    path: \"\"\n", "store.sqlite.path: must not be empty"},
    {"store:\n  driver: mysql\n  mysql:\n    host: \"\"\n", "store.mysql.host: must not be empty"},
    {"store:\n  driver: mysql\n  mysql:\n    database: \"\"\n", "store.mysql.database: must not"},
    {"store:\n  driver: mysql\n  mysql:\n    user: \"\"\n", "store.mysql.user: must not"},
    {"store:\n  driver: mysql\n  mysql:\n    port: 0\n", "store.mysql.port: must be in 1..65535"},
    {"store:\n  driver: mysql\n  mysql:\n    pool_size: 0\n", "store.mysql.pool_size: must be"},
    {"store:\n  group_commit_max: 0\n", "store.group_commit_max: must be >= 1"},
    {"store:\n  retention:\n    purge_batch: 0\n", "store.retention.purge_batch: must be >= 1"},
    {"store:\n  retention:\n    purge_interval: 0s\n", "store.retention.purge_interval: must be"},
    /* room */
    {"room:\n  snapshot_every_n: 0\n", "room.snapshot_every_n: must be >= 1"},
    {"room:\n  snapshots_keep: 0\n", "room.snapshots_keep: must be >= 1"},
    {"room:\n  idle_evict_after: 0s\n", "room.idle_evict_after: must be > 0"},
    {"room:\n  seat_count: 0\n", "room.seat_count: must be in 1..32"},
    {"room:\n  seat_count: 33\n", "room.seat_count: must be in 1..32"},
    {"room:\n  max_members: 0\n", "room.max_members: must be >= 1"},
    {"room:\n  rocket:\n    thresholds: []\n", "room.rocket.thresholds: needs at least one"},
    {"room:\n  rocket:\n    thresholds: [100, 100]\n", "room.rocket.thresholds: must be strictly"},
    {"room:\n  rocket:\n    thresholds: [0, 100]\n", "room.rocket.thresholds: every threshold"},
    {"room:\n  rocket:\n    countdown: 0s\n", "room.rocket.countdown: must be > 0"},
    /* wallet, redis, lease, projection */
    {"wallet:\n  driver: remote\n", "wallet.driver: must be one of embedded"},
    {"wallet:\n  initial_balance: -1\n", "wallet.initial_balance: must be >= 0"},
    {"redis:\n  enabled: true\n  addr: localhost\n", "redis.addr: must be host:port"},
    {"lease:\n  driver: etcd\n", "lease.driver: must be one of local, redis"},
    {"lease:\n  driver: redis\n", "2:11: lease.driver: redis needs redis.enabled"},
    {"lease:\n  ttl: 2s\n  renew_every: 2s\n", "lease.renew_every: must be > 0 and < lease.ttl"},
    {"projection:\n  driver: redis\n", "projection.driver: redis needs redis.enabled"},
    {"projection:\n  driver: disk\n", "projection.driver: must be one of memory, redis"},
    {"rocketmq:\n  consumer_inbox: mysql\n",
     "rocketmq.consumer_inbox: mysql needs store.driver: mysql"},
    {"rocketmq:\n  consumer_inbox: redis\n",
     "rocketmq.consumer_inbox: expected one of auto, sqlite, mysql"},
    /* rocketmq */
    {"rocketmq:\n  enabled: true\n", "rocketmq.name_servers: needs at least one NATS URL"},
    {"rocketmq:\n  room_outbox:\n    enabled: true\n",
     "rocketmq.room_outbox.enabled: needs rocketmq.enabled"},
    {"rocketmq:\n  rocket_launch:\n    enabled: true\n",
     "rocketmq.rocket_launch.enabled: needs rocketmq.enabled"},
    {"rocketmq:\n  enabled: true\n  name_servers: [\"nats://x:1\"]\n  room_outbox:\n"
     "    tencent_im_consumer_enabled: true\n",
     "rocketmq.room_outbox.tencent_im_consumer_enabled: needs tencent_im.enabled"},
    {"rocketmq:\n  enabled: true\n  name_servers: [\"nats://x:1\"]\n  stream_replicas: 0\n",
     "rocketmq.stream_replicas: must be in 1..5"},
    {"rocketmq:\n  enabled: true\n  name_servers: [\"nats://x:1\"]\n  send_timeout: 0s\n",
     "rocketmq.send_timeout: must be > 0"},
    /* tencent_im */
    {"tencent_im:\n  enabled: true\n  admin_identifier: admin\n",
     "tencent_im.sdk_app_id: must be > 0"},
    {"tencent_im:\n  enabled: true\n  sdk_app_id: 1400000001\n",
     "tencent_im.admin_identifier: must not be empty"},
    {"tencent_im:\n  enabled: true\n  sdk_app_id: 1\n  admin_identifier: a\n"
     "  secret_key_env: \"\"\n",
     "tencent_im.secret_key_env: tencent_im.enabled needs secret_key_env or secret_key_file"},
    {"tencent_im:\n  group_type: Meeting\n", "tencent_im.group_type: must be one of AVChatRoom"},
    {"tencent_im:\n  enabled: true\n  sdk_app_id: 1\n  admin_identifier: a\n  timeout: 0s\n",
     "tencent_im.timeout: must be > 0"},
    /* activity */
    {"activity:\n  enabled: true\n  target: \"\"\n", "activity.target: must be host:port"},
};

static void
test_rules(void **state)
{
    char err[512];

    for (size_t i = 0; i < sizeof(rules) / sizeof(rules[0]); i++) {
        err[0] = '\0';
        int rc = load_text(rules[i].yaml, NULL, err, sizeof(err));
        if (rc != ROOMD_EINVAL)
            fail_msg("rule %zu accepted:\n%s", i, rules[i].yaml);
        if (strstr(err, rules[i].key) == NULL)
            fail_msg("rule %zu: got \"%s\", want \"%s\"", i, err, rules[i].key);
    }
}

/* The same rules hold for a struct built in code (conf_validate). */
static void
test_validate_direct(void **state)
{
    struct conf *c = xcalloc(1, sizeof(*c));
    char err[512] = "";

    conf_defaults(c);
    c->outbox_worker.batch_size = 0;
    assert_int_equal(conf_validate(c, err, sizeof(err)), ROOMD_EINVAL);
    assert_string_equal(err, "outbox_worker.batch_size: must be > 0");
    c->outbox_worker.batch_size = 1;
    c->outbox_worker.publish_mode = PUBLISH_MQ;
    c->rocketmq.enabled = true;
    assert_int_equal(conf_validate(c, err, sizeof(err)), ROOMD_EINVAL);
    /* no name servers is reported first */
    assert_non_null(strstr(err, "rocketmq.name_servers"));
    c->rocketmq.name_servers[0] = xstrdup("nats://127.0.0.1:4222");
    c->rocketmq.nname_servers = 1;
    assert_int_equal(conf_validate(c, err, sizeof(err)), ROOMD_EINVAL);
    assert_non_null(strstr(err, "outbox_worker.publish_mode: mq needs rocketmq.room_outbox"));
    c->rocketmq.room_outbox.enabled = true;
    assert_int_equal(conf_validate(c, err, sizeof(err)), 0);
    conf_free(c);
}

/* conf_load_buffer: the same values and the same errors as a file, named by name. */
static void
test_load_buffer(void **state)
{
    struct conf *c = NULL;
    char err[512] = "";
    const char *y = "outbox_worker:\n  workers: 7\n";
    const char *bad_ = "outbox_worker:\n  poll_interval: 0s\n";

    assert_int_equal(conf_load_buffer("mem", y, strlen(y), &c, err, sizeof(err)), 0);
    assert_int_equal(c->outbox_worker.workers, 7);
    assert_string_equal(c->path, "mem");
    conf_free(c);
    assert_int_equal(conf_load_buffer("mem", bad_, strlen(bad_), &c, err, sizeof(err)),
                     ROOMD_EINVAL);
    assert_null(c);
    assert_string_equal(err,
                        "mem:2:18: outbox_worker.poll_interval: must be > 0 (avoids a busy loop)");
    /* not NUL-terminated: only len bytes are read */
    assert_int_equal(
        conf_load_buffer("mem", "app: {log_level: warn}XXXX", 22, &c, err, sizeof(err)), 0);
    assert_string_equal(c->app.log_level, "warn");
    conf_free(c);
    assert_int_equal(conf_load_buffer("mem", "app: [", 6, &c, err, sizeof(err)), ROOMD_EINVAL);
    assert_non_null(strstr(err, "mem:"));
    assert_non_null(strstr(err, "syntax error"));
}

/* docs/conf.md holds exactly the key reference the table generates. */
static void
test_doc_matches_table(void **state)
{
    const char *src = getenv("ROOMD_SOURCE_DIR");
    char *path, *doc = NULL, *gen = NULL;
    size_t doclen = 0, genlen = 0;
    FILE *f;

    assert_non_null(src);
    path = xasprintf("%s/docs/conf.md", src);
    f = fopen(path, "r");
    assert_non_null(f);
    FILE *m = open_memstream(&doc, &doclen);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
        fwrite(buf, 1, n, m);
    fclose(m);
    fclose(f);
    m = open_memstream(&gen, &genlen);
    conf_write_doc(m);
    fclose(m);
    char *begin = strstr(doc, CONF_DOC_BEGIN);
    char *end = begin ? strstr(begin, CONF_DOC_END "\n") : NULL;
    if (begin == NULL || end == NULL)
        fail_msg("%s: no generated key reference block", path);
    end += strlen(CONF_DOC_END "\n");
    if ((size_t)(end - begin) != genlen || memcmp(begin, gen, genlen) != 0)
        fail_msg("%s differs from the key table: replace its block with the output of "
                 "`build-asan/roomd --print-config-doc`",
                 path);
    free(gen);
    free(doc);
    free(path);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_valid),
        cmocka_unit_test(test_empty_file_is_defaults),
        cmocka_unit_test(test_config_files_load),
        cmocka_unit_test(test_values_read),
        cmocka_unit_test(test_json_config),
        cmocka_unit_test(test_durations),
        cmocka_unit_test(test_unknown_key),
        cmocka_unit_test(test_wrong_types),
        cmocka_unit_test(test_syntax_error),
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_rules),
        cmocka_unit_test(test_validate_direct),
        cmocka_unit_test(test_load_buffer),
        cmocka_unit_test(test_doc_matches_table),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
