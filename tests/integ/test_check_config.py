"""test_check_config: `roomd --check-config FILE` on the shipped configs and on broken
files: exit 0 and "FILE: ok" for good ones, exit 1 and a message naming the key (with
its line) for bad ones, and `roomd -c BAD` refuses to start the same way."""
import json
import os
import subprocess
import tempfile

from roomd_test import ROOMD, SOURCE, base_config, free_port, merge, run

TMP = tempfile.mkdtemp(prefix="roomd-checkcfg-")


def check(path, *args):
    p = subprocess.run([ROOMD, *(args or ("--check-config",)), path], capture_output=True,
                       text=True, timeout=20)
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
    ("im.yaml", "tencent_im:\n  enabled: true\n", "tencent_im.sdk_app_id: must be > 0"),
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


def test_serve_refuses_bad_config():
    path = write("serve-bad.yaml", "outbox_worker:\n  batch_size: 0\n")
    rc, out = check(path, "-c")
    assert rc == 1 and "outbox_worker.batch_size" in out, out


def test_missing_file():
    rc, out = check(os.path.join(TMP, "nope.yaml"))
    assert rc == 1 and "cannot open" in out, out


if __name__ == "__main__":
    run([test_shipped_configs_ok, test_harness_json_config_ok, test_bad_configs_refused,
         test_json_bad_value_refused, test_serve_refuses_bad_config, test_missing_file])
