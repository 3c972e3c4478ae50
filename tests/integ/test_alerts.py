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

from roomd_test import SOURCE, Roomd, run

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
    rd = Roomd().start()
    try:
        st, _, _ = rd.post("/v1/rooms", {"command_id": "a1", "room_id": "al1", "owner_uid": 1,
                                         "title": "t"})
        assert st == 201
        st, _, text = rd.admin("GET", "/metrics")
        assert st == 200
    finally:
        assert rd.stop() == 0
    exposed = set(re.findall(r"^# TYPE (\S+) ", text, re.M))
    missing = sorted(queried_names() - exposed)
    assert not missing, f"queried but not exposed by roomd: {missing}"


if __name__ == "__main__":
    run([test_rules_check_and_unit_tests, test_queried_metrics_exist])
