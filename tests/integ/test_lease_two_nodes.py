# SPDX-License-Identifier: Apache-2.0
"""test_lease_two_nodes: two roomd processes on ONE store and one Redis, lease.driver redis,
projection.driver redis. Every scenario runs twice: on one MariaDB database (the production
shape; server from scripts/servers.sh, ROOMD_MYSQL_PORT, default 3417, a fresh database per
run) and on one shared SQLite file.

1. commands for one room sent to both nodes in parallel: the owner commits them, the other
   answers 503 not_owner naming the owner (X-Room-Owner); a gateway that follows the header
   with the same command_id gets every command committed exactly once. room_command_log holds
   versions 1..N without gap or duplicate and every command_id answered 200.
2. kill -9 the owner: the other takes over once the TTL ran out and continues from the
   committed state.
3. SIGSTOP the owner past its lease, let the other take over, SIGCONT it: the paused one
   cannot commit (503 naming the new owner).
4. the store's fence: the owner is paused between its lease check and its commit
   (ROOMD_TEST_PRECOMMIT_DELAY_MS holds commands there); the other node takes the room over
   and only READS it (its load claims rooms.fence_token); resumed, the old owner's commit is
   refused by the store (503 fenced) although its version would still fit.
5. Redis (a private redis-server) down and back: no node commits without a lease (the owner
   stops within the TTL, the other never starts), both recover by themselves, a single-node
   roomd on the local lease is not affected; the Redis projection catches up: updates parked
   during the outage are replayed and the rooms nobody touched since are rebuilt from the
   store (Redis came back empty).

Run: python3 tests/integ/test_lease_two_nodes.py [sqlite|mysql] (PYTHONPATH=tests,
ROOMD_BUILD_DIR=build); without an argument both.
"""
import json
import os
import shutil
import signal
import socket
import sqlite3
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(__file__))
import http_util as hu  # noqa: E402
from roomd_test import Roomd, env_port, free_port, listing, need, run, wait_until  # noqa: E402
from roomd_test import redis_cli, start_redis  # noqa: E402
from roomd_test import mysql_query as mysql  # noqa: E402

TTL_MS = 1500
REDIS_PORT = env_port("ROOMD_REDIS_PORT", 6390)
MYSQL_PORT = env_port("ROOMD_MYSQL_PORT", 3417)
PREFIX = f"roomdtest:{os.getpid()}:{int(time.time() * 1000)}:"
TMP = tempfile.mkdtemp(prefix="roomd-lease2-")


# --- the two stores -------------------------------------------------------------------------

class MysqlStore:
    name = "mysql"

    def __init__(self):
        self.db = f"roomd_nodes_{os.getpid()}_{uuid.uuid4().hex[:6]}"
        mysql(f"CREATE DATABASE {self.db} CHARACTER SET utf8mb4")

    def cfg(self, tmp):
        return {"store": {"driver": "mysql", "mysql": {
            "host": "127.0.0.1", "port": MYSQL_PORT, "user": "root", "password": "",
            "database": self.db, "pool_size": 8, "connect_timeout": "1s", "read_timeout": "3s",
            "write_timeout": "3s", "deadlock_retries": 3}}}

    def log(self, room):
        """[(version, command_id)] of room's command log in commit order."""
        rows = mysql(f"SELECT version, command_id FROM room_command_log WHERE room_id = '{room}'"
                     " ORDER BY id", self.db)
        return [(int(v), c) for v, c in rows]

    def fence_token(self, room):
        rows = mysql(f"SELECT fence_token FROM rooms WHERE room_id = '{room}'", self.db)
        return int(rows[0][0])

    def close(self):
        mysql(f"DROP DATABASE IF EXISTS {self.db}")


class SqliteStore:
    name = "sqlite"

    def __init__(self):
        d = os.path.join(TMP, "sqlite")
        os.makedirs(d, exist_ok=True)
        self.path = os.path.join(d, "roomd.db")

    def cfg(self, tmp):
        return {"store": {"driver": "sqlite", "sqlite": {"path": self.path}}}

    def _q(self, sql, args):
        con = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=10)
        try:
            return con.execute(sql, args).fetchall()
        finally:
            con.close()

    def log(self, room):
        return self._q("SELECT version, command_id FROM room_command_log WHERE room_id = ?"
                       " ORDER BY id", (room,))

    def fence_token(self, room):
        return self._q("SELECT fence_token FROM rooms WHERE room_id = ?", (room,))[0][0]

    def close(self):
        pass


# --- nodes ----------------------------------------------------------------------------------

def node(store, name, redis_port, extra=None):
    d = os.path.join(TMP, f"{store.name}-{name}-{uuid.uuid4().hex[:4]}")
    os.makedirs(d, exist_ok=True)
    cfg = store.cfg(d)
    hu_merge(cfg, {
        "app": {"node_id": f"node-{name}"},
        "outbox_worker": {"log_sink": {"enabled": True, "path": os.path.join(d, "events.jsonl")}},
        "redis": {"enabled": True, "addr": f"127.0.0.1:{redis_port}", "key_prefix": PREFIX,
                  "connect_timeout": "200ms", "command_timeout": "300ms"},
        "lease": {"driver": "redis", "ttl": f"{TTL_MS}ms", "renew_every": "300ms"},
        "projection": {"driver": "redis"},
        # these tests route like a gateway by X-Room-Owner (test_cluster.py: forwarding)
        "cluster": {"forward": False},
    })
    hu_merge(cfg, extra or {})
    return Roomd(cfg, tmp=d)


def hu_merge(a, b):
    for k, v in b.items():
        if isinstance(v, dict) and isinstance(a.get(k), dict):
            hu_merge(a[k], v)
        else:
            a[k] = v
    return a


def stop_all(*nodes):
    """Stops every node (SIGTERM), also after a failure; returns their exit codes."""
    rcs = []
    for rd in nodes:
        try:
            rcs.append(rd.stop())
        except Exception as e:  # noqa: BLE001 - keep stopping the others
            rcs.append(repr(e))
    return rcs


def addr(rd):
    return f"127.0.0.1:{rd.port}"


def assert_linear(store, room, want_n=None, answered=()):
    """room's log is versions 1..N (no gap, no fork) and holds every command_id answered 200."""
    log = store.log(room)
    versions = [v for v, _ in log]
    assert versions == list(range(1, len(versions) + 1)), f"history of {room} forked: {versions}"
    ids = [c for _, c in log]
    assert len(ids) == len(set(ids)), f"a command committed twice: {ids}"
    lost = set(answered) - set(ids)
    assert not lost, f"answered 200 but not in the log: {lost}"
    if want_n is not None:
        assert len(versions) == want_n, (len(versions), want_n)
    return len(versions)


def assert_not_owner(res, owner, what):
    err = hu.expect_error(res, 503, what=what)
    assert err["code"] in ("not_owner", "unavailable"), err
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


def rooms_page(rd):
    st, _, js = rd.http("GET", "/v1/rooms?limit=100")
    return js if st == 200 else None


# --- the scenarios, per store ---------------------------------------------------------------

def scenarios(store):
    S = {}

    def one_owner_in_parallel():
        a, b = node(store, "a", REDIS_PORT), node(store, "b", REDIS_PORT)
        S.update(a=a, b=b)
        a.start()
        b.start()
        nodes = {addr(a): a, addr(b): b}
        room = hu.room_name()
        S["room"] = room
        hu.expect_ok(hu.create(a, room, owner=1), "create on a")

        def one(i):
            rd = a if i % 2 == 0 else b
            c = hu.cid("join")
            first = hu.join(rd, room, 1000 + i, command_id=c)
            res = first
            if res[0] == 503 and res[1].get("X-Room-Owner") in nodes:
                # what a gateway does: the same request, to the owner named
                res = hu.join(nodes[res[1]["X-Room-Owner"]], room, 1000 + i, command_id=c)
            return i, c, first, res

        with ThreadPoolExecutor(8) as ex:
            res = list(ex.map(one, range(40)))
        answered = []
        for i, c, first, final in res:
            if i % 2 == 0:
                hu.expect_ok(first, f"join {i} on the owner")
            else:
                assert_not_owner(first, addr(a), f"join {i} on the other node")
            hu.expect_ok(final, f"join {i} routed to the owner")
            answered.append(c)
        assert_linear(store, room, want_n=41, answered=answered)
        room_js = hu.room_of(hu.expect_ok(hu.get_room(a, room), "GET on owner"))
        assert room_js["version"] == 41
        assert sorted(hu.members(room_js)) == [1000 + i for i in range(40)]
        # the shared projection, read through either node
        page = wait_until(lambda: (lambda p: p if p and any(
            r["room_id"] == room and r["version"] == 41 for r in p["rooms"]) else None)(
                rooms_page(b)), what="projection of the room on b")
        assert [r for r in page["rooms"] if r["room_id"] == room][0]["online"] == 40

    def kill_owner_takeover():
        a, b, room = S["a"], S["b"], S["room"]
        before = assert_linear(store, room)
        a.kill()
        took, seen = join_until_ok(b, room, 2000, timeout=TTL_MS / 1000 + 5)
        assert seen[0][1] == 503 and seen[0][2] == "not_owner", seen  # a's lease still held
        assert seen[0][3] == addr(a), seen
        assert took >= 0.2, took
        print(f"  [{store.name}] takeover after kill -9: {took:.2f}s (ttl {TTL_MS} ms)")
        room_js = hu.room_of(hu.expect_ok(hu.get_room(b, room), "GET on new owner"))
        assert room_js["version"] == before + 1, room_js
        assert 2000 in hu.members(room_js) and 1000 in hu.members(room_js), room_js
        assert_linear(store, room, want_n=before + 1)
        assert stop_all(b) == [0]

    def paused_owner_cannot_commit():
        # a without outbox worker: a process stopped inside a SQLite write transaction (the
        # worker claims every 200 ms) would block the shared file for everyone; this test is
        # about the lease, so a is stopped while idle.
        a = node(store, "a", REDIS_PORT, {"outbox_worker": {"enabled": False}})
        b = node(store, "b", REDIS_PORT)
        try:
            a.start()
            b.start()
            room = hu.room_name()
            hu.expect_ok(hu.create(a, room, owner=1), "create on a")
            hu.expect_ok(hu.join(a, room, 3000), "join on a")
            assert_not_owner(hu.join(b, room, 3001), addr(a), "b while a owns")
            os.kill(a.proc.pid, signal.SIGSTOP)
            try:
                took, _ = join_until_ok(b, room, 3001, timeout=TTL_MS / 1000 + 5)
                print(f"  [{store.name}] takeover from a paused owner: {took:.2f}s")
            finally:
                os.kill(a.proc.pid, signal.SIGCONT)
            # a woke up believing nothing happened: it must not commit
            for uid in (3002, 3003):
                assert_not_owner(hu.join(a, room, uid), addr(b), "paused owner after resume")
            hu.expect_ok(hu.join(b, room, 3004), "join on b")
            assert_linear(store, room, want_n=4)
            members = hu.members(hu.room_of(hu.expect_ok(hu.get_room(b, room), "GET")))
            assert sorted(members) == [3000, 3001, 3004], members
            assert stop_all(a, b) == [0, 0]
        finally:
            stop_all(a, b)

    def store_fences_paused_commit():
        a = node(store, "a", REDIS_PORT, {"outbox_worker": {"enabled": False}})
        b = node(store, "b", REDIS_PORT)
        try:
            a.start(env={"ROOMD_TEST_PRECOMMIT_DELAY_MS": "700"})
            b.start()
            room = hu.room_name()
            hu.expect_ok(hu.create(a, room, owner=1), "create on a")
            hu.expect_ok(hu.join(a, room, 4000), "join on a")
            token_a = store.fence_token(room)
            assert token_a > 0, token_a
            with ThreadPoolExecutor(1) as ex:
                inflight = ex.submit(hu.join, a, room, 4001)
                time.sleep(0.3)  # a checked its lease and now waits before its commit
                os.kill(a.proc.pid, signal.SIGSTOP)
                try:
                    # b takes the room over once a's lease ran out, and only reads it
                    t0 = time.time()
                    while True:
                        st, hd, js = hu.get_room(b, room)
                        if st == 200:
                            break
                        assert st == 503 and js["error"]["code"] == "not_owner", (st, js)
                        assert time.time() - t0 < TTL_MS / 1000 + 5, "no takeover"
                        time.sleep(0.05)
                    assert hu.room_of(js)["version"] == 2, js
                    token_b = store.fence_token(room)
                    assert token_b > token_a, (token_a, token_b)  # claimed by b's load
                    assert_linear(store, room, want_n=2)  # b committed nothing
                finally:
                    os.kill(a.proc.pid, signal.SIGCONT)
                res = inflight.result(timeout=30)
            # a's commit carried version 3 after 2 (it would fit) but the older token
            err = hu.expect_error(res, 503, "fenced", what="the paused owner's commit")
            assert "fenced" in err["message"], err
            assert_linear(store, room, want_n=2)
            hu.expect_ok(hu.join(b, room, 4002), "join on b")
            assert_not_owner(hu.join(a, room, 4003), addr(b), "a after it was fenced")
            assert_linear(store, room, want_n=3)
            members = hu.members(hu.room_of(hu.expect_ok(hu.get_room(b, room), "GET")))
            assert sorted(members) == [4000, 4002], members
            timing = [j for j in a.json_log("room_command_timing") if j["room_id"] == room]
            assert any(j["result"] == "fenced" for j in timing), timing
            assert stop_all(a, b) == [0, 0]
        finally:
            stop_all(a, b)

    def redis_down_and_back():
        d = os.path.join(TMP, f"redis-{store.name}")
        os.makedirs(d, exist_ok=True)
        port = free_port()
        rp = start_redis(port, d)
        a, b = node(store, "a", port), node(store, "b", port)
        # one node on the local lease and memory projection, its own SQLite, same Redis conf
        os.makedirs(os.path.join(d, "solo"), exist_ok=True)
        solo = Roomd({"redis": {"enabled": True, "addr": f"127.0.0.1:{port}",
                                "connect_timeout": "200ms", "command_timeout": "300ms"}},
                     tmp=os.path.join(d, "solo"))
        try:
            a.start()
            b.start()
            solo.start()
            room, quiet = hu.room_name(), hu.room_name("quiet")
            hu.expect_ok(hu.create(a, room, owner=1), "create on a")
            hu.expect_ok(hu.join(a, room, 1), "join on a")
            hu.expect_ok(hu.create(b, quiet, owner=2), "create quiet on b")
            hu.expect_ok(hu.join(b, quiet, 77), "join quiet on b")
            solo_room = hu.room_name("solo")
            hu.expect_ok(hu.create(solo, solo_room), "solo create")
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
            hu.expect_error(b.http("GET", "/v1/rooms"), 503, "unavailable")
            # a single node on the local lease does not need Redis
            for u in range(5):
                hu.expect_ok(hu.join(solo, solo_room, 500 + u), "solo while redis is down")
            assert [r["room_id"] for r in rooms_page(solo)["rooms"]] == [solo_room]
            rp = start_redis(port, d)  # back, and empty
            join_until_ok(a, room, 200, timeout=10)
            n = assert_linear(store, room)
            assert n == 2 + committed + 1, (n, committed)
            # the projection caught up: the room written during and after the outage at its
            # latest version, the quiet room (untouched since Redis came back empty) rebuilt
            def caught_up():
                p = rooms_page(b)
                got = {r["room_id"]: r for r in (p or {}).get("rooms", [])}
                return got if room in got and got[room]["version"] == n and quiet in got else None
            got = wait_until(caught_up, timeout=15, what="projection catch-up")
            assert got[quiet]["online"] == 1 and got[quiet]["version"] == 2, got[quiet]
            st, _, js = b.http("GET", "/v1/users/77/presence")
            assert st == 200 and js["room_id"] == quiet, js
            assert_not_owner(hu.join(b, room, 53), addr(a), "b after the restart")
            logs = a.log_lines() + b.log_lines()
            assert any('"msg":"rebuilt from the store"' in line for line in logs), "no rebuild"
            assert stop_all(a, b, solo) == [0, 0, 0]
        finally:
            stop_all(a, b, solo)
            rp.kill()
            rp.wait()

    tests = [one_owner_in_parallel, kill_owner_takeover, paused_owner_cannot_commit,
             store_fences_paused_commit, redis_down_and_back]
    for t in tests:
        t.__name__ = f"{t.__name__}[{store.name}]"

    def cleanup():
        for k in ("a", "b"):
            if k in S:
                try:
                    S[k].stop()
                except Exception:  # noqa: BLE001
                    pass
    return tests, cleanup


# --- a private redis-server ---------------------------------------------------------------

def reachable(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return True
    except OSError:
        return False


if __name__ == "__main__":
    if listing():  # one ctest entry per store: each variant's nodes are shared by its scenarios
        print("mysql\nsqlite")
        sys.exit(0)
    want = sys.argv[1:] or ["mysql", "sqlite"]
    need("127.0.0.1", REDIS_PORT, "redis-server")
    stores, tests, cleanups = [], [], []
    try:
        for name in want:
            if name == "mysql":
                if not reachable(MYSQL_PORT):
                    if os.environ.get("ROOMD_REQUIRE_SERVERS", "") not in ("", "0"):
                        need("127.0.0.1", MYSQL_PORT, "mariadbd")  # fails
                    print(f"SKIP: the mysql variant: no mariadbd at 127.0.0.1:{MYSQL_PORT}")
                    continue
                st = MysqlStore()
            else:
                st = SqliteStore()
            stores.append(st)
            t, c = scenarios(st)
            tests += t
            cleanups.append(c)
        run(tests, fixture="variant")  # argv names the store variants
    finally:
        for c in cleanups:
            c()
        for st in stores:
            try:
                st.close()
            except Exception:  # noqa: BLE001
                pass
        shutil.rmtree(TMP, ignore_errors=True)
        keys = redis_cli(REDIS_PORT, "--scan", "--pattern", PREFIX + "*") or ""
        for k in keys.split():
            redis_cli(REDIS_PORT, "DEL", k)
