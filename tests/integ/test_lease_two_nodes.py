"""test_lease_two_nodes: two roomd processes on ONE store (a shared SQLite file; MariaDB once
its backend lands) and one Redis, lease.driver redis, projection.driver redis.

1. commands for one room sent to both nodes in parallel: the owner commits them, the other
   answers 503 not_owner naming the owner's address; the command log is one linear history.
2. kill -9 the owner: the other takes over once the TTL ran out and continues from the
   committed state.
3. SIGSTOP the owner past its lease, let the other take over, SIGCONT it: the paused one
   cannot commit (503 naming the new owner); the history stays linear.
4. Redis (a private redis-server) down and back: no node commits without a lease (the
   owner stops within the TTL, the other never starts), both recover by themselves, the
   fencing token keeps growing, and the Redis projection catches up.

Run: python3 tests/integ/test_lease_two_nodes.py (PYTHONPATH=tests, ROOMD_BUILD_DIR=build)
"""
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(__file__))
import http_util as hu  # noqa: E402
from roomd_test import Roomd, env_port, free_port, need, run, wait_until  # noqa: E402

TTL_MS = 1500
REDIS_PORT = env_port("ROOMD_REDIS_PORT", 6390)
PREFIX = f"roomdtest:{os.getpid()}:{int(time.time() * 1000)}:"
TMP = tempfile.mkdtemp(prefix="roomd-lease2-")


def pair(tmp, redis_port):
    """Two roomd processes sharing tmp/roomd.db, each its own port, node_id and sink file."""
    db = os.path.join(tmp, "roomd.db")
    procs = []
    for name in ("a", "b"):
        d = os.path.join(tmp, name)
        os.makedirs(d, exist_ok=True)
        procs.append(Roomd({
            "app": {"node_id": f"node-{name}"},
            "store": {"sqlite": {"path": db}},
            "outbox_worker": {"log_sink": {"enabled": True,
                                           "path": os.path.join(d, "events.jsonl")}},
            "redis": {"enabled": True, "addr": f"127.0.0.1:{redis_port}", "key_prefix": PREFIX,
                      "connect_timeout": "200ms", "command_timeout": "300ms"},
            "lease": {"driver": "redis", "ttl": f"{TTL_MS}ms", "renew_every": "300ms"},
            "projection": {"driver": "redis"},
        }, tmp=d))
    return db, procs


def addr(rd):
    return f"127.0.0.1:{rd.port}"


def log_versions(db, room):
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        rows = con.execute("SELECT version FROM room_command_log WHERE room_id = ? ORDER BY id",
                           (room,)).fetchall()
    finally:
        con.close()
    return [r[0] for r in rows]


def assert_linear(db, room, want_n=None):
    v = log_versions(db, room)
    assert v == list(range(1, len(v) + 1)), f"history of {room} is not linear: {v}"
    if want_n is not None:
        assert len(v) == want_n, (len(v), want_n)
    return len(v)


def assert_not_owner(res, owner, what):
    err = hu.expect_error(res, 503, what=what)
    assert err["code"] in ("not_owner", "dependency_unavailable", "unavailable"), err
    if owner is not None:
        assert err["code"] == "not_owner", err
        assert err.get("owner") == owner, f"{what}: want owner {owner}, got {err}"
        assert res[1].get("X-Room-Owner") == owner, res[1]
    return err


def join_until_ok(rd, room, uid, timeout):
    """Retries a join (same command_id) until it commits; returns (seconds, answers seen)."""
    c = hu.cid("join")
    t0 = time.time()
    seen = []
    while True:
        st, hd, js = hu.join(rd, room, uid, command_id=c)
        e = js.get("error", {}) if isinstance(js, dict) else {}
        seen.append((round(time.time() - t0, 2), st, e.get("code"), e.get("owner")))
        if st == 200:
            return time.time() - t0, seen
        assert st == 503, (st, js)
        assert time.time() - t0 < timeout, f"no takeover within {timeout}s: {seen[-5:]}"
        time.sleep(0.05)


# --- 1 to 3: the shared test redis-server ---------------------------------------------------

STATE = {}


def test_one_owner_in_parallel():
    need("127.0.0.1", REDIS_PORT, "redis-server")
    db, (a, b) = pair(os.path.join(TMP, "shared"), REDIS_PORT)
    STATE.update(db=db, a=a, b=b)
    a.start()
    b.start()
    room = hu.room_name()
    STATE["room"] = room
    hu.expect_ok(hu.create(a, room, owner=1), "create on a")

    def one(i):
        rd = a if i % 2 == 0 else b
        return i, hu.join(rd, room, 1000 + i)

    with ThreadPoolExecutor(8) as ex:
        res = list(ex.map(one, range(40)))
    ok = 0
    for i, r in res:
        if i % 2 == 0:
            hu.expect_ok(r, f"join {i} on the owner")
            ok += 1
        else:
            assert_not_owner(r, addr(a), f"join {i} on the other node")
    assert_linear(db, room, want_n=1 + ok)
    room_js = hu.room_of(hu.expect_ok(hu.get_room(a, room), "GET on owner"))
    assert room_js["version"] == 1 + ok
    assert sorted(hu.members(room_js)) == sorted(1000 + i for i in range(0, 40, 2))


def test_kill_owner_takeover():
    db, a, b, room = STATE["db"], STATE["a"], STATE["b"], STATE["room"]
    before = assert_linear(db, room)
    a.kill()
    took, seen = join_until_ok(b, room, 2000, timeout=TTL_MS / 1000 + 5)
    assert seen[0][1] == 503, seen  # the dead owner's lease still held at first
    assert took >= 0.2, took
    room_js = hu.room_of(hu.expect_ok(hu.get_room(b, room), "GET on new owner"))
    assert room_js["version"] == before + 1, room_js
    assert 2000 in hu.members(room_js) and 1000 in hu.members(room_js), room_js
    assert_linear(db, room, want_n=before + 1)


def test_paused_owner_cannot_commit():
    db, a, b = STATE["db"], STATE["a"], STATE["b"]
    # A fresh process on a's port, without outbox worker: a process stopped inside a SQLite
    # write transaction (the worker claims every 200 ms) would block the shared file for
    # everyone; this test is about the lease, so a is stopped while idle.
    a.cfg["outbox_worker"]["enabled"] = False
    with open(a.cfg_path, "w") as f:
        json.dump(a.cfg, f, indent=1)
    a.start()
    room = hu.room_name()
    hu.expect_ok(hu.create(a, room, owner=1), "create on a")
    hu.expect_ok(hu.join(a, room, 3000), "join on a")
    assert_not_owner(hu.join(b, room, 3001), addr(a), "b while a owns")
    os.kill(a.proc.pid, signal.SIGSTOP)
    try:
        took, _ = join_until_ok(b, room, 3001, timeout=TTL_MS / 1000 + 5)
    finally:
        os.kill(a.proc.pid, signal.SIGCONT)
    # a woke up believing nothing happened: it must not commit
    for uid in (3002, 3003):
        assert_not_owner(hu.join(a, room, uid), addr(b), "paused owner after resume")
    hu.expect_ok(hu.join(b, room, 3004), "join on b")
    n = assert_linear(db, room, want_n=4)
    members = hu.members(hu.room_of(hu.expect_ok(hu.get_room(b, room), "GET")))
    assert sorted(members) == [3000, 3001, 3004], members
    a.stop()
    b.stop()
    return n


# --- 4: a private redis-server, stopped and restarted -------------------------------------

def start_redis(port, d):
    p = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                          "--dir", d, "--save", "", "--appendonly", "no"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until(lambda: redis_cli(port, "PING") == "PONG", timeout=10, what="redis-server")
    return p


def redis_cli(port, *args):
    r = subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True, text=True,
                       timeout=10)
    return r.stdout.strip() if r.returncode == 0 else None


def test_redis_down_and_back():
    d = os.path.join(TMP, "private")
    os.makedirs(d, exist_ok=True)
    port = free_port()
    rp = start_redis(port, d)
    db, (a, b) = pair(d, port)
    a.start()
    b.start()
    try:
        room = hu.room_name()
        hu.expect_ok(hu.create(a, room, owner=1), "create on a")
        hu.expect_ok(hu.join(a, room, 1), "join on a")
        pkey = f"{PREFIX}proj:hyapp:room:{room}"
        wait_until(lambda: redis_cli(port, "HGET", pkey, "version") == "2", what="projection")
        rp.kill()
        rp.wait()
        down_at = time.time()
        # the other node can never start owning the room without Redis
        assert_not_owner(hu.join(b, room, 50), None, "b while redis is down")
        # the owner keeps its lease at most for the TTL, then refuses too
        uid, committed = 100, 0
        while True:
            st, _, js = hu.join(a, room, uid)
            if st == 503:
                break
            assert st == 200, (st, js)
            committed += 1
            uid += 1
            assert time.time() - down_at < TTL_MS / 1000 + 1, "owner kept committing"
            time.sleep(0.05)
        assert_not_owner(hu.join(b, room, 51), None, "b while redis is down")
        rp = start_redis(port, d)  # back, and empty
        took, _ = join_until_ok(a, room, 200, timeout=10)
        n = assert_linear(db, room)
        assert n == 2 + committed + 1, (n, committed)
        # the projection caught up with the latest version
        wait_until(lambda: redis_cli(port, "HGET", pkey, "version") == str(n), timeout=10,
                   what="projection catch-up")
        assert_not_owner(hu.join(b, room, 53), addr(a), "b after the restart")
    finally:
        a.stop()
        b.stop()
        rp.kill()
        rp.wait()


if __name__ == "__main__":
    try:
        run([test_one_owner_in_parallel, test_kill_owner_takeover,
             test_paused_owner_cannot_commit, test_redis_down_and_back])
    finally:
        for k in ("a", "b"):
            if k in STATE:
                try:
                    STATE[k].stop()
                except Exception:  # noqa: BLE001
                    pass
        shutil.rmtree(TMP, ignore_errors=True)
        keys = redis_cli(REDIS_PORT, "--scan", "--pattern", PREFIX + "*") or ""
        for k in keys.split():
            redis_cli(REDIS_PORT, "DEL", k)
