# SPDX-License-Identifier: Apache-2.0
"""test_cluster_nodes: the cluster's nodes view (GET /admin/v1/nodes, /admin/v1/node,
roomctl nodes; docs/admin.md "Nodes") on two roomd nodes sharing one MariaDB database
(ROOMD_MYSQL_PORT, a fresh database) and one Redis (ROOMD_REDIS_PORT, a fresh key prefix):
lease.driver redis, cluster.forward on, the admin token on both.

1. both nodes are listed from either node, A ready, B degraded (its broker is a closed port:
   the reason named, read over the node-to-node channel), with the build's version, the room
   leases it holds counted and named exactly as Redis's lease keys say (rooms created on
   node A are A's, on B are B's); ?rooms=1 lists one name and says truncated; a bad ?rooms
   is a 400; a read-only admin token reads the view, no token is a 401;
2. the console's nodes view (Chromium, 1280 and 360 px, no sideways scroll) and roomctl
   nodes (table and --json) show the same;
3. node B killed -9: node A shows it unreachable at once and missing (no heartbeat) within
   the lease ttl plus one renewal (the console too, refreshing by itself), while A stays ready
   with its leases; A stopped cleanly deletes its heartbeat.

Run: python3 tests/integ/test_cluster_nodes.py (PYTHONPATH=tests, ROOMD_BUILD_DIR=build).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(__file__))
import http_util as hu  # noqa: E402
from roomd_test import BUILD, ROOMD, Roomd, env_port, free_port, merge, need  # noqa: E402
from roomd_test import redis_cli, run, wait_until  # noqa: E402
from roomd_test import mysql_query as mysql  # noqa: E402

TTL_MS = 1500
RENEW_MS = 300
REDIS_PORT = env_port("ROOMD_REDIS_PORT", 6390)
MYSQL_PORT = env_port("ROOMD_MYSQL_PORT", 3417)
PREFIX = f"roomdnodes:{os.getpid()}:{uuid.uuid4().hex[:6]}:"
DB = f"roomd_nodes_view_{os.getpid()}_{uuid.uuid4().hex[:6]}"
TMP = tempfile.mkdtemp(prefix="roomd-nodes-")
ADMIN = "nodes-admin-" + os.urandom(16).hex()
READER = "nodes-reader-" + os.urandom(16).hex()
ENV = {"ROOMD_TEST_ADMIN": ADMIN, "ROOMD_TEST_READER": READER}
ROOMCTL = os.path.join(os.path.dirname(ROOMD), "roomctl")

_nodes = {}
_rooms = {"node-a": [], "node-b": []}


def node(name, extra=None):
    d = os.path.join(TMP, name)
    os.makedirs(d, exist_ok=True)
    cfg = {
        "app": {"node_id": name},
        "store": {"driver": "mysql", "mysql": {
            "host": "127.0.0.1", "port": MYSQL_PORT, "user": "root", "password": "",
            "database": DB, "pool_size": 4, "connect_timeout": "1s", "read_timeout": "3s",
            "write_timeout": "3s"}},
        "redis": {"enabled": True, "addr": f"127.0.0.1:{REDIS_PORT}", "key_prefix": PREFIX,
                  "connect_timeout": "200ms", "command_timeout": "500ms"},
        "lease": {"driver": "redis", "ttl": f"{TTL_MS}ms", "renew_every": f"{RENEW_MS}ms"},
        "projection": {"driver": "redis"},
        "cluster": {"forward": True, "forward_timeout": "2s"},
        "admin": {"token_env": "ROOMD_TEST_ADMIN",
                  "tokens": [{"name": "reader", "role": "read",
                              "token_env": "ROOMD_TEST_READER"}]},
    }
    rd = Roomd(merge(cfg, extra or {}), tmp=d)
    rd.admin_token = ADMIN
    return rd


def setup():
    need("127.0.0.1", MYSQL_PORT, "mariadbd (scripts/servers.sh)")
    need("127.0.0.1", REDIS_PORT, "redis-server (scripts/servers.sh)")
    mysql(f"CREATE DATABASE {DB} CHARACTER SET utf8mb4")
    _nodes["node-a"] = node("node-a").start(env=ENV)
    # node-b's broker is a closed port: it serves commands, degraded, its readiness says why
    _nodes["node-b"] = node("node-b", {"rocketmq": {
        "enabled": True, "name_servers": [f"nats://127.0.0.1:{free_port()}"],
        "namespace": f"nodes{os.getpid()}_", "room_outbox": {"enabled": False},
        "rocket_launch": {"enabled": False}}}).start(env=ENV)


def teardown():
    for rd in _nodes.values():
        try:
            rd.stop()
        except Exception:  # noqa: BLE001 - keep cleaning up
            pass
    mysql(f"DROP DATABASE IF EXISTS {DB}")


def lease_owner(room):
    """The node_id holding room's lease in Redis ("<token> <node_id>/<rnd> <addr> <admin>")."""
    v = redis_cli(REDIS_PORT, "GET", f"{PREFIX}lease:hyapp:{room}")
    return v.split()[1].split("/")[0] if v else None


def nodes_of(rd, query="", headers=None):
    js = hu.expect_ok(rd.admin("GET", "/admin/v1/nodes" + query, headers=headers),
                      "GET /admin/v1/nodes")
    return js, {n["node_id"]: n for n in js["nodes"]}


def version():
    out = subprocess.run([ROOMD, "--version"], capture_output=True, text=True, check=True)
    return out.stdout.split()[1]


def test_both_nodes_listed_with_their_leases():
    a, b = _nodes["node-a"], _nodes["node-b"]
    for name, rd, n in (("node-a", a, 3), ("node-b", b, 2)):
        for _ in range(n):
            rid = hu.room_name(name)
            hu.expect_ok(rd.post("/v1/rooms", {"command_id": hu.cid(), "room_id": rid,
                                               "owner_uid": 1, "title": "t"}), "create")
            _rooms[name].append(rid)
    for name, rooms in _rooms.items():
        for rid in rooms:
            assert lease_owner(rid) == name, (rid, lease_owner(rid), name)
    ver = version()
    for me, rd in (("node-a", a), ("node-b", b)):
        js, by = nodes_of(rd)
        assert js["self"] == me and js["membership"] == "redis", js
        assert js["lease_driver"] == "redis" and js["lease_ttl_ms"] == TTL_MS, js
        assert sorted(by) == ["node-a", "node-b"], js
        assert [n["node_id"] for n in js["nodes"]] == ["node-a", "node-b"], "sorted by node_id"
        for name, n in by.items():
            assert n["self"] == (name == me), (me, n)
            if name == "node-a":
                assert n["state"] == "ready" and n["reasons"] == [], (me, n)
                assert n["readiness"]["status"] == "ready", n
            else:  # asked over the node-to-node channel (or itself): the reason named
                assert n["state"] == "degraded", (me, n)
                assert n["reasons"][0].startswith("broker: down"), (me, n)
                assert n["readiness"]["status"] == "degraded", n
            assert n["version"] == ver, (n["version"], ver)
            assert n["alive"] is True and n["seen_ms"] > 0, n
            other = _nodes[name]
            assert n["admin_addr"] == f"127.0.0.1:{other.admin_port}", n
            assert n["public_addr"] == f"127.0.0.1:{other.port}", n
            want = sorted(f"hyapp:{r}" for r in _rooms[name])
            assert n["leases"]["count"] == len(want), (me, name, n["leases"])
            assert n["leases"]["rooms"] == want and n["leases"]["truncated"] is False, n
    # a bounded list: the count stays, one name, truncated
    _, by = nodes_of(a, "?rooms=1")
    assert by["node-b"]["leases"]["count"] == 2 and len(by["node-b"]["leases"]["rooms"]) == 1
    assert by["node-b"]["leases"]["truncated"] is True, by["node-b"]
    assert by["node-a"]["leases"]["count"] == 3 and by["node-a"]["leases"]["truncated"] is True
    for bad in ("?rooms=-1", "?rooms=x", "?rooms=1001"):
        err = hu.expect_error(a.admin("GET", "/admin/v1/nodes" + bad), 400, what=bad)
        assert err["code"] == "invalid_argument" and err["field"] == "rooms", err
    # this node alone
    one = hu.expect_ok(b.admin("GET", "/admin/v1/node"))
    assert one["node_id"] == "node-b" and one["self"] is True and one["state"] == "degraded", one
    assert one["leases"]["count"] == 2, one
    # authenticated like every admin route: read role suffices, no token is refused
    _, by = nodes_of(a, headers={"Authorization": f"Bearer {READER}"})
    assert sorted(by) == ["node-a", "node-b"]
    for path in ("/admin/v1/nodes", "/admin/v1/node"):
        st, hd, js = a.admin("GET", path, headers={"Authorization": ""})
        assert st == 401 and hd.get("WWW-Authenticate", "").startswith("Bearer"), (st, js)
        assert a.http("GET", path)[0] == 404, "the public listener serves no admin route"
    text = "\n".join(a.log_lines() + b.log_lines())
    assert ADMIN not in text and READER not in text, "a token in the log"


HERE = os.path.dirname(os.path.abspath(__file__))


def console_nodes(rd, want, tag):
    """node-a's console, its nodes view at 1280 and 360 px (console_test.js, nodes mode) until
    every node of want ({node_id: "state|state"}) is shown so; None without a browser."""
    if not (os.path.exists("/usr/bin/chromium") and shutil.which("node") and os.path.isdir(
            os.path.join(HERE, "..", "standins", "node_modules", "playwright-core"))):
        assert os.environ.get("ROOMD_REQUIRE_SERVERS", "") in ("", "0"), \
            "chromium, node or playwright-core missing (scripts/deps.sh)"
        return None
    shot = os.path.join(BUILD, "artifacts", f"console-nodes-{tag}.png")
    os.makedirs(os.path.dirname(shot), exist_ok=True)
    p = subprocess.run(["node", os.path.join(HERE, "console_test.js")], capture_output=True,
                       text=True, timeout=180, env=dict(
                           os.environ, CONSOLE_URL=f"http://127.0.0.1:{rd.admin_port}/console/",
                           CONSOLE_TOKEN=READER, CONSOLE_MODE="nodes",
                           CONSOLE_NODES=json.dumps(want), CONSOLE_SCREENSHOT=shot))
    assert p.returncode == 0, p.stdout + p.stderr
    seen = json.loads(p.stdout.strip().splitlines()[-1])
    assert seen["page_errors"] == [], seen
    for width in ("1280", "360"):
        w = seen["widths"][width]
        assert w["overflow"] <= 0, (width, w)  # no sideways scroll
        assert "nodes" in w["nav"] and w["note"].startswith("2 node(s); membership: redis"), w
    return seen["widths"]


def test_console_nodes_view():
    """The console's nodes view (a read-only token suffices): both nodes, their states, lease
    counts and room names, the reasons of the degraded one, at 1280 and 360 px."""
    a = _nodes["node-a"]
    widths = console_nodes(a, {"node-a": "ready", "node-b": "degraded"}, "both")
    if widths is None:
        return
    for width, w in widths.items():
        rows = {r["node"]: r["cells"] for r in w["rows"]}
        assert sorted(rows) == ["node-a", "node-b"], (width, w)
        assert rows["node-a"][0] == "node-a (this node)" and rows["node-b"][0] == "node-b", rows
        assert rows["node-a"][3] == "3" and rows["node-b"][3] == "2", rows  # leases
        for name in ("node-a", "node-b"):
            assert rows[name][4].split(", ") == sorted(f"hyapp:{r}" for r in _rooms[name]), rows
        assert rows["node-b"][2].startswith("broker: down"), rows
        assert rows["node-a"][6] == f"127.0.0.1:{a.admin_port}", rows


def roomctl(rd, *args):
    env = dict(os.environ, ROOMD_ADMIN_TOKEN=ADMIN)
    return subprocess.run([ROOMCTL, "--url", f"http://127.0.0.1:{rd.admin_port}", *args],
                          capture_output=True, text=True, env=env, timeout=30)


def test_roomctl_nodes():
    a = _nodes["node-a"]
    r = roomctl(a, "nodes", "--json")
    assert r.returncode == 0, (r.returncode, r.stderr)
    js = json.loads(r.stdout)
    assert sorted(n["node_id"] for n in js["nodes"]) == ["node-a", "node-b"], js
    r = roomctl(a, "nodes")
    assert r.returncode == 0 and r.stderr == "", (r.returncode, r.stderr)
    lines = r.stdout.splitlines()
    assert lines[0].split()[:4] == ["NODE", "STATE", "LEASES", "VERSION"], lines
    row = {ln.split()[0]: ln.split() for ln in lines[1:] if not ln.startswith("#")}
    assert sorted(row) == ["node-a*", "node-b"], lines  # * marks the node asked
    row = {k.rstrip("*"): v for k, v in row.items()}
    assert row["node-a"][1] == "ready" and row["node-a"][2] == "3", lines
    assert row["node-b"][1] == "degraded" and row["node-b"][2] == "2", lines
    assert "broker: down" in " ".join(row["node-b"][5:]), lines
    assert roomctl(a, "nodes", "--help").returncode == 0
    # without --url: the admin listener the config names
    r = subprocess.run([ROOMCTL, "-c", a.cfg_path, "nodes", "--json"], capture_output=True,
                       text=True, env=dict(os.environ, ROOMD_ADMIN_TOKEN=ADMIN), timeout=30)
    assert r.returncode == 0 and json.loads(r.stdout)["self"] == "node-a", (r.stdout, r.stderr)
    r = subprocess.run([ROOMCTL, "--url", f"http://127.0.0.1:{a.admin_port}", "nodes"],
                       capture_output=True, text=True, env={"PATH": os.environ["PATH"]})
    assert r.returncode == 1 and "401" in r.stderr, (r.returncode, r.stderr)


def test_killed_node_unreachable_then_missing():
    a, b = _nodes["node-a"], _nodes["node-b"]
    b.kill()
    t0 = time.time()
    _, by = nodes_of(a)
    assert by["node-b"]["state"] in ("unreachable", "missing"), by["node-b"]
    assert by["node-b"]["self"] is False and by["node-b"]["leases"] is None, by["node-b"]
    assert by["node-b"]["reasons"], by["node-b"]

    def missing():
        _, by = nodes_of(a)
        return by["node-b"]["state"] == "missing" and by

    by = wait_until(missing, timeout=(TTL_MS + 2 * RENEW_MS) / 1000 + 2, step=0.1,
                    what="node-b missing")
    took = time.time() - t0
    print(f"node-b killed -9: missing after {took:.2f}s (lease ttl {TTL_MS}ms)")
    assert by["node-b"]["alive"] is False and "heartbeat" in by["node-b"]["reasons"][0], by
    assert by["node-a"]["state"] == "ready" and by["node-a"]["leases"]["count"] == 3, by
    # the console refreshes by itself to the same
    widths = console_nodes(a, {"node-a": "ready", "node-b": "missing"}, "killed")
    for w in (widths or {}).values():
        rows = {r["node"]: r["cells"] for r in w["rows"]}
        assert rows["node-b"][3] == "-" and "no heartbeat" in rows["node-b"][2], rows
    # a clean stop (ASan's leak check runs at exit) takes node-a's heartbeat with it
    assert a.stop() == 0, a.stderr_text()
    assert redis_cli(REDIS_PORT, "EXISTS", f"{PREFIX}node:node-a") == "0"
    assert redis_cli(REDIS_PORT, "HEXISTS", f"{PREFIX}nodes", "node-a") == "1"


if __name__ == "__main__":
    if "--list" in sys.argv:
        run([], fixture="cluster_nodes")
    setup()
    try:
        run([test_both_nodes_listed_with_their_leases, test_console_nodes_view,
             test_roomctl_nodes, test_killed_node_unreachable_then_missing],
            fixture="cluster_nodes")
    finally:
        teardown()
