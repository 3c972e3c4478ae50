# SPDX-License-Identifier: Apache-2.0
"""test_check_config: `roomd --check-config FILE` on the shipped configs and on broken
files: exit 0 and "FILE: ok" for good ones, exit 1 and a message naming the key (with
its line) for bad ones, and `roomd -c BAD` refuses to start the same way. Beyond the
rules, --check-config checks what a config names on this machine: environment variables
holding secrets are set, files it reads exist, directories it writes into are writable,
servers are URLs (never printing a secret)."""
import json
import os
import subprocess
import tempfile

from roomd_test import ROOMD, SOURCE, base_config, free_port, merge, run

TMP = tempfile.mkdtemp(prefix="roomd-checkcfg-")


# what the shipped configs name: their secrets' variables, ./var under the working dir
ENV = dict(os.environ, ROOMD_MYSQL_PASSWORD="pw", TIM_SECRET_KEY="k3y-never-printed",
           ROOMD_JWT_SECRET="j" * 32, ROOMD_ADMIN_TOKEN="admin-never-printed-" + "a" * 16)
os.makedirs(os.path.join(TMP, "var"), exist_ok=True)
os.makedirs(os.path.join(TMP, "tls"), exist_ok=True)  # grpc.tls of docker.yaml and cloud.yaml
for _name in ("grpc.crt", "grpc.key"):
    with open(os.path.join(TMP, "tls", _name), "w") as _f:
        _f.write("-----BEGIN PLACEHOLDER-----\n")


def check(path, *args, env=None):
    p = subprocess.run([ROOMD, *(args or ("--check-config",)), path], capture_output=True,
                       text=True, timeout=20, cwd=TMP, env=env or ENV)
    return p.returncode, p.stdout + p.stderr


def write(name, text):
    path = os.path.join(TMP, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def test_shipped_configs_ok():
    for name in ("local.yaml", "docker.yaml", "cloud.yaml"):
        path = os.path.join(SOURCE, "configs", name)
        rc, out = check(path)
        assert rc == 0, f"{name}: rc={rc} {out}"
        assert f"{path}: ok" in out, out


def test_harness_json_config_ok():
    cfg = base_config(TMP, free_port())
    path = write("harness.yaml", json.dumps(cfg, indent=1))
    rc, out = check(path)
    assert rc == 0, out


BAD = [
    ("tokrole.yaml", "admin:\n  tokens:\n    - {name: ro, role: reader, token_env: X}\n",
     "admin.tokens: entry 1: role: read or operate, not \"reader\""),
    ("tokboth.yaml", "admin:\n  tokens:\n    - {name: ro, token_env: X, token_file: /f}\n",
     "admin.tokens: entry 1: ro: set one of token_env, token_file"),
    ("tokdup.yaml", "admin:\n  tokens:\n    - {name: a, token_env: X}\n"
     "    - {name: a, token_env: Y}\n", "admin.tokens: entry 2: name \"a\" used twice"),
    ("tokspace.yaml", "admin:\n  tokens:\n    - {name: a b, token_env: X}\n",
     "admin.tokens: \"a b\": no spaces"),
    ("poll0.yaml", "outbox_worker:\n  poll_interval: 0s\n",
     ":2:18: outbox_worker.poll_interval: must be > 0"),
    ("batch0.yaml", "outbox_worker:\n  batch_size: 0\n", "outbox_worker.batch_size: must be > 0"),
    ("mq.yaml", "outbox_worker:\n  publish_mode: mq\n",
     "outbox_worker.publish_mode: mq needs rocketmq.enabled"),
    ("dur.yaml", "outbox_worker:\n  max_backoff: 5 minutes\n",
     ":2:16: outbox_worker.max_backoff: expected a duration like 500ms, 3s, 5m"),
    ("unknown.yaml", "outbox_worker:\n  pol_interval: 1s\n",
     ":2:3: outbox_worker.pol_interval: unknown key"),
    ("syntax.yaml", "app:\n  node_id: a\n   x: 1\n", ":3:"),
    ("seats.yaml", "room:\n  seat_count: 99\n", "room.seat_count: must be in 1..32"),
    ("giftoff.yaml", "auth:\n  mode: jwt\n  jwt:\n    hs256_secret_env: ROOMD_TEST_S\n"
     "room:\n  gift_catalog: off\n",
     "room.gift_catalog: off lets a caller choose the price of its gifts: only allowed with "
     "auth.mode none"),
    ("giftbad.yaml", "room:\n  gift_catalog: maybe\n", "room.gift_catalog: must be one of"),
    ("im.yaml", "tencent_im:\n  enabled: true\n", "tencent_im.sdk_app_id: must be > 0"),
    ("hosts.yaml", "store:\n  driver: mysql\n  mysql:\n    hosts: [\"db1\", \"db2:3306\"]\n",
     "store.mysql.hosts: entries must be host:port, got \"db1\""),
    ("sentinel.yaml", "redis:\n  enabled: true\n  sentinel:\n    addrs: [\"s1:26379\"]\n",
     "redis.sentinel.master_name: must be set with redis.sentinel.addrs"),
]


def test_bad_configs_refused():
    for name, text, want in BAD:
        path = write(name, text)
        rc, out = check(path)
        assert rc == 1, f"{name}: rc={rc} {out}"
        assert want in out, f"{name}: want {want!r} in {out!r}"
        assert path in out, out


def test_json_bad_value_refused():
    cfg = merge(base_config(TMP, free_port()), {"outbox_worker": {"batch_size": 0}})
    path = write("harness-bad.yaml", json.dumps(cfg, indent=1))
    rc, out = check(path)
    assert rc == 1 and "outbox_worker.batch_size: must be > 0" in out, out
    # RequestTime is in seconds: an IM callback skew under 1 s would accept no callback at all
    cfg = merge(base_config(TMP, free_port()),
                {"tencent_im": {"callback": {"enabled": True, "token_env": "TIM_CB_TOKEN",
                                             "max_skew": "500ms"}}})
    path = write("harness-skew.yaml", json.dumps(cfg, indent=1))
    rc, out = check(path, env={"TIM_CB_TOKEN": "t" * 32})
    assert rc == 1 and "tencent_im.callback.max_skew: must be at least 1s" in out, out


# The seed's configuration block, verbatim (seed 配置, room-outbox-worker.zh.md).
SEED_BLOCK = """rocketmq:
  enabled: false
  name_servers: []
  name_server_domain: ""
  access_key: ""
  secret_key: ""
  namespace: ""
  send_timeout: "3s"
  retry: 2
  room_outbox:
    enabled: false
    topic: "hyapp_room_outbox"
    producer_group: "hyapp-room-outbox-producer"
    tencent_im_consumer_enabled: false
    tencent_im_consumer_group: "hyapp-room-im-bridge"
    consumer_max_reconsume_times: 16
  rocket_launch:
    enabled: false
    topic: "hyapp_room_rocket_launch"
    producer_group: "hyapp-room-rocket-open-producer"
    consumer_group: "hyapp-room-rocket-open"
    consumer_max_reconsume_times: 16

outbox_worker:
  enabled: true
  publish_mode: "direct"
  poll_interval: "1s"
  batch_size: 100
  publish_timeout: "3s"
  retry_strategy: "exponential_backoff"
  max_retry_count: 10
  initial_backoff: "5s"
  max_backoff: "5m"
"""

MQ_ON = {"rocketmq:\n  enabled: false": "rocketmq:\n  enabled: true",
         'name_servers: []': 'name_servers: ["nats://127.0.0.1:4222"]',
         "room_outbox:\n    enabled: false": "room_outbox:\n    enabled: true",
         "rocket_launch:\n    enabled: false": "rocket_launch:\n    enabled: true"}


def seed_block(**repl):
    text = SEED_BLOCK
    for a, b in repl.items():
        assert a in text, a
        text = text.replace(a, b)
    return text


def test_seed_config_block_and_collisions():
    """The seed's block verbatim passes, also with MQ and the wake-ups on; each collision
    (the wake-ups' topic equal to or under the outbox topic, one consumer group for two
    roles) is refused naming the key (issue 26)."""
    rc, out = check(write("seed.yaml", SEED_BLOCK))
    assert rc == 0, out
    rc, out = check(write("seed-mq.yaml", seed_block(**MQ_ON)))
    assert rc == 0, out
    bad = [
        ('topic: "hyapp_room_rocket_launch"', 'topic: "hyapp_room_outbox"',
         'rocketmq.rocket_launch.topic: "hyapp_room_outbox" collides with '
         'rocketmq.room_outbox.topic'),
        ('topic: "hyapp_room_rocket_launch"', 'topic: "hyapp_room_outbox.rocket"',
         "rocketmq.rocket_launch.topic:"),
        ('consumer_group: "hyapp-room-rocket-open"', 'consumer_group: "hyapp-room-im-bridge"',
         "rocketmq.rocket_launch.consumer_group: \"hyapp-room-im-bridge\" is also "
         "rocketmq.room_outbox.tencent_im_consumer_group"),
    ]
    for i, (a, b, want) in enumerate(bad):
        text = seed_block(**MQ_ON).replace(a, b, 1)
        path = write(f"seed-collide-{i}.yaml", text)
        rc, out = check(path)
        assert rc == 1 and want in out, (i, out)
        assert path in out, out


def test_serve_refuses_bad_config():
    path = write("serve-bad.yaml", "outbox_worker:\n  batch_size: 0\n")
    rc, out = check(path, "-c")
    assert rc == 1 and "outbox_worker.batch_size" in out, out


def test_environment_checked():
    """Every missing thing named by its key, one per line, exit 1; no secret printed."""
    cfg = merge(base_config(TMP, free_port()), {
        "app": {"log_file": os.path.join(TMP, "no-such-dir", "roomd.log")},
        "store": {"driver": "mysql", "mysql": {"password_env": "ROOMD_TEST_UNSET_PW"}},
        "rocketmq": {"enabled": True, "name_servers": ["nats://127.0.0.1:4222",
                                                       "127.0.0.1:4222"]},
        "tencent_im": {"enabled": True, "sdk_app_id": 1, "admin_identifier": "admin",
                       "base_url": "console.tim.qq.com",
                       "secret_key_file": os.path.join(TMP, "no-such-key"),
                       "ca_file": os.path.join(TMP, "no-such-ca.pem")},
    })
    path = write("env.yaml", json.dumps(cfg, indent=1))
    env = dict(ENV)
    env.pop("ROOMD_TEST_UNSET_PW", None)
    rc, out = check(path, env=env)
    assert rc == 1, out
    for want in ("app.log_file: directory", "store.mysql.password_env: environment variable "
                 "ROOMD_TEST_UNSET_PW is not set", "rocketmq.name_servers: \"127.0.0.1:4222\" "
                 "is not a nats://", "tencent_im.base_url: \"console.tim.qq.com\" is not an "
                 "http(s):// URL", "tencent_im.secret_key_file: cannot read",
                 "tencent_im.ca_file: cannot read"):
        assert want in out, f"want {want!r} in {out!r}"
    assert "nats://127.0.0.1:4222\" is not" not in out, out
    # the same config with everything present passes
    key = write("im.key", "secret-text-42\n")
    ca = write("ca.pem", "-----BEGIN CERTIFICATE-----\n")
    os.makedirs(os.path.join(TMP, "logs"), exist_ok=True)
    cfg = merge(cfg, {"app": {"log_file": os.path.join(TMP, "logs", "roomd.log")},
                      "rocketmq": {"name_servers": ["nats://127.0.0.1:4222"]},
                      "tencent_im": {"base_url": "https://console.tim.qq.com",
                                     "secret_key_file": key, "ca_file": ca}})
    path = write("env-ok.yaml", json.dumps(cfg, indent=1))
    rc, out = check(path, env=dict(env, ROOMD_TEST_UNSET_PW="pw"))
    assert rc == 0, out
    # an empty secret variable is refused too, and no secret text is ever printed
    rc, out = check(path, env=dict(env, ROOMD_TEST_UNSET_PW=""))
    assert rc == 1 and "ROOMD_TEST_UNSET_PW is empty" in out, out
    assert "secret-text-42" not in out and "k3y-never-printed" not in out, out


def test_files_checked():
    """The files the listeners, auth and the cluster forwarder read: each missing one named
    by its key; the secrets' variables of jwt and the admin token too; all present passes."""
    missing = lambda n: os.path.join(TMP, "absent", n)  # noqa: E731
    cfg = merge(base_config(TMP, free_port()), {
        "http": {"tls": {"cert_file": missing("http.crt"), "key_file": missing("http.key")}},
        "admin": {"tls": {"cert_file": missing("admin.crt"), "key_file": missing("admin.key")},
                  "token_file": missing("admin.token")},
        "auth": {"mode": "jwt", "jwt": {"public_key_file": missing("jwt.pem")}},
        "room": {"gift_catalog": "required"},
        "redis": {"enabled": True, "addr": "127.0.0.1:6379"},
        "lease": {"driver": "redis"},
        "cluster": {"forward": True, "tls_ca_file": missing("cluster-ca.pem")},
    })
    rc, out = check(write("files.yaml", json.dumps(cfg, indent=1)))
    assert rc == 1, out
    for key, name in (("http.tls.cert_file", "http.crt"), ("http.tls.key_file", "http.key"),
                      ("admin.tls.cert_file", "admin.crt"), ("admin.tls.key_file", "admin.key"),
                      ("admin.token_file", "admin.token"), ("auth.jwt.public_key_file", "jwt.pem"),
                      ("cluster.tls_ca_file", "cluster-ca.pem")):
        assert f"{key}: cannot read {missing(name)}" in out, f"want {key} in {out!r}"
    # the CA file is read only by the forwarder: not with cluster.forward off
    rc, out = check(write("files-noforward.yaml", json.dumps(merge(cfg, {
        "cluster": {"forward": False}}), indent=1)))
    assert rc == 1 and "cluster.tls_ca_file" not in out, out
    # every file there: ok; an HS256 secret variable unset: named
    present = {n: write(n, "x\n") for n in ("http.crt", "http.key", "admin.crt", "admin.key",
                                            "jwt.pem", "cluster-ca.pem")}
    present["admin.token"] = write("admin.token", "t" * 32 + "\n")  # >= 32 bytes
    ok = merge(cfg, {
        "http": {"tls": {"cert_file": present["http.crt"], "key_file": present["http.key"]}},
        "admin": {"tls": {"cert_file": present["admin.crt"], "key_file": present["admin.key"]},
                  "token_file": present["admin.token"]},
        "auth": {"jwt": {"public_key_file": present["jwt.pem"]}},
        "cluster": {"tls_ca_file": present["cluster-ca.pem"]}})
    path = write("files-ok.yaml", json.dumps(ok, indent=1))
    rc, out = check(path)
    assert rc == 0, out
    ok["auth"]["jwt"] = {"hs256_secret_env": "ROOMD_TEST_UNSET_JWT"}
    rc, out = check(write("files-env.yaml", json.dumps(ok, indent=1)))
    assert rc == 1 and "auth.jwt.hs256_secret_env: environment variable ROOMD_TEST_UNSET_JWT " \
        "is not set" in out, out


def test_missing_file():
    rc, out = check(os.path.join(TMP, "nope.yaml"))
    assert rc == 1 and "cannot open" in out, out


if __name__ == "__main__":
    run([test_shipped_configs_ok, test_harness_json_config_ok, test_bad_configs_refused,
         test_seed_config_block_and_collisions,
         test_json_bad_value_refused, test_serve_refuses_bad_config, test_environment_checked,
         test_files_checked, test_missing_file])
