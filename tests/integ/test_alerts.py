# SPDX-License-Identifier: Apache-2.0
"""test_alerts: deploy/prometheus/alerts.yml passes `promtool check rules` and its unit
tests (`promtool test rules alerts_test.yml`: stuck vs busy vs idle, dead letters growing,
lag SLO burn, a dependency down, roomd down); every roomd_* / process_* metric that the
rules and deploy/grafana/roomd.json query is one a real roomd exposes (no drift)."""
import json
import os
import re
import shutil
import subprocess
import sys

from bus_util import Nats, js_delete_stream
from roomd_test import SOURCE, Roomd, env_port, run, wait_until

PROM = os.path.join(SOURCE, "deploy", "prometheus")
GRAFANA = os.path.join(SOURCE, "deploy", "grafana", "roomd.json")


def promtool():
    p = shutil.which("promtool")
    if p is None:
        if os.environ.get("ROOMD_REQUIRE_SERVERS", "") not in ("", "0"):
            print("FAIL: promtool missing (Debian package prometheus, scripts/deps.sh)")
            sys.exit(1)
        print("SKIP: promtool not installed")
        sys.exit(77)
    return p


def test_rules_check_and_unit_tests():
    tool = promtool()
    p = subprocess.run([tool, "check", "rules", "alerts.yml"], cwd=PROM, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    p = subprocess.run([tool, "test", "rules", "alerts_test.yml"], cwd=PROM,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "SUCCESS" in p.stdout, p.stdout + p.stderr


def queried_names():
    with open(os.path.join(PROM, "alerts.yml")) as f:
        text = f.read()
    with open(GRAFANA) as f:
        dash = json.load(f)
    text += "\n".join(t["expr"] for p in dash["panels"] for t in p["targets"])
    names = set(re.findall(r"\b((?:roomd|process)_[a-z_]+)\b", text))
    # a histogram is queried through its series
    return {re.sub(r"_(bucket|count|sum)$", "", n) for n in names}


def test_queried_metrics_exist():
    """A roomd in mq mode on the suite's nats-server (ROOMD_NATS_PORT) with a consumer group
    (activity), so that the consumer group families are there, their position samples too."""
    ns = f"alerts{os.getpid()}_"
    url = f"nats://127.0.0.1:{env_port('ROOMD_NATS_PORT', 4231)}"
    rd = Roomd({"rocketmq": {"enabled": True, "name_servers": [url], "namespace": ns,
                             "room_outbox": {"enabled": True, "activity_consumer_enabled": True},
                             "rocket_launch": {"enabled": False}},
                "outbox_worker": {"publish_mode": "mq"}})
    rd.cfg["rocketmq"]["consumer_store_dir"] = os.path.join(rd.tmp, "consumers")
    with open(rd.cfg_path, "w") as f:
        json.dump(rd.cfg, f)
    rd.start()
    try:
        st, _, _ = rd.post("/v1/rooms", {"command_id": "a1", "room_id": "al1", "owner_uid": 1,
                                         "title": "t"})
        assert st == 201
        lag = 'roomd_consumer_lag{group="hyapp-activity-room-outbox"} 0'
        text = wait_until(lambda: (lambda t: t if lag in t.splitlines() else None)(
            rd.admin("GET", "/metrics")[2]), timeout=20, step=0.5, what="the group's lag 0")
    finally:
        assert rd.stop() == 0
        try:
            nc = Nats(env_port("ROOMD_NATS_PORT", 4231))
            for s in ("hyapp_room_outbox", "hyapp_dlq"):
                js_delete_stream(nc, ns + s)
            nc.close()
        except OSError:
            pass
    exposed = set(re.findall(r"^# TYPE (\S+) ", text, re.M))
    missing = sorted(queried_names() - exposed)
    assert not missing, f"queried but not exposed by roomd: {missing}"


if __name__ == "__main__":
    run([test_rules_check_and_unit_tests, test_queried_metrics_exist])
