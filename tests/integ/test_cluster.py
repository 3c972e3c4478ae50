# SPDX-License-Identifier: Apache-2.0
"""The production topology (issue 12, docs/cluster.md): three roomd nodes on one MariaDB
database and one Redis, a 3-server nats-server cluster with JetStream and R3 streams, all on
127.0.0.1 (ports picked at run time; mariadbd and redis-server from scripts/servers.sh, the
nats cluster from scripts/nats_cluster.sh).

1. round robin: commands for one room sent to all three nodes in turn (and in parallel):
   every answer 200 (non-owners forward to the owner), one linear history.
2. rockets: 20 rockets in rooms owned by different nodes, 3 s countdown: each launches within
   1 s of launch_at_ms, whichever node's rocket-open consumer got the wake-up.
3. kill -9 of one roomd node under load: its rooms move to the others, rockets due meanwhile
   launch within lease.ttl + 1 s, no acknowledged command is lost.
4. kill -9 of one nats-server under mq load: no acknowledged command lost, no event failed,
   the stream holds one message per outbox row.
5. readiness: all nats-servers down -> every node "degraded" (200, commands succeed), ready
   again and the backlog delivered after; a node without its lease Redis -> 503.
"""
import os
import random
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
import http_util as hu  # noqa: E402
from bus_util import js_stream_count  # noqa: E402
from cluster_util import MYSQL_PORT, REDIS_PORT, TTL_MS, Cluster  # noqa: E402
from roomd_test import Roomd, free_port, listing, need, run, wait_until  # noqa: E402

TMP = tempfile.mkdtemp(prefix="roomd-cluster-")


def ok(res, what=""):
    st, _, js = res
    assert st in (200, 201), f"{what}: {st} {js}"  # CreateRoom: 201
    return js


def log_of(cl, room):
    rows = cl.mysql(f"SELECT version, command_id FROM room_command_log WHERE room_id = '{room}'"
                    " ORDER BY id")
    return [(int(v), c) for v, c in rows]


def assert_linear(cl, room, answered):
    log = log_of(cl, room)
    assert [v for v, _ in log] == list(range(1, len(log) + 1)), log
    ids = [c for _, c in log]
    assert len(ids) == len(set(ids)), "a command applied twice"
    missing = set(answered) - set(ids)
    assert not missing, f"acknowledged but not in the log: {sorted(missing)[:5]}"
    return log


def launches(cl):
    """{room_id: created_at_ms of its LaunchRocket}."""
    rows = cl.mysql("SELECT room_id, created_at_ms FROM room_command_log"
                    " WHERE command_type = 'LaunchRocket'")
    return {r: int(t) for r, t in rows}


def ignite(rd, room):
    """Ignites room's rocket (threshold 100); returns launch_at_ms."""
    ok(hu.join(rd, room, 5), "join")
    ok(hu.join(rd, room, 6), "join")
    js = ok(hu.gift(rd, room, 5, 6, count=10, unit_price=10), "gift")
    rk = js["room"]["rocket"]
    assert rk["status"] == "ignited", rk
    return rk["launch_at_ms"]


def outbox_status(cl):
    return {s: int(n) for s, n in cl.mysql("SELECT status, COUNT(*) FROM room_outbox"
                                           " GROUP BY status")}


def all_delivered(cl):
    st = outbox_status(cl)
    return st if st and set(st) == {"delivered"} else None


# ---- 1 ----

def round_robin_one_history(cl):
    room = hu.room_name("rr")
    ok(hu.create(cl.nodes[0], room), "create")
    answered, repeated = [], None
    for i in range(24):
        rd = cl.nodes[i % 3]
        c = hu.cid("rr")
        body = {"command_id": c, "uid": 100 + i // 2}
        verb = "join" if i % 2 == 0 else "leave"
        res = rd.post(f"/v1/rooms/{room}/{verb}", body)
        ok(res, f"{verb} on node{i % 3}")
        answered.append(c)
        # a repeat through another node answers from the log, unchanged
        if i == 5:
            repeated = c
            st, hd, _ = cl.nodes[(i + 1) % 3].post(f"/v1/rooms/{room}/{verb}", body)
            assert st == 200 and hd.get("Idempotent-Replay") == "true", (st, hd)
    errs = []

    def burst(k):
        for j in range(8):
            c = hu.cid("par")
            res = cl.nodes[(k + j) % 3].post(f"/v1/rooms/{room}/join",
                                             {"command_id": c, "uid": 1000 + k * 10 + j})
            if res[0] != 200:
                errs.append(res)
            else:
                answered.append(c)
    ts = [threading.Thread(target=burst, args=(k,)) for k in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errs, errs[:3]
    log = assert_linear(cl, room, answered)
    assert len(log) == 1 + 24 + 24, len(log)
    # the GET through a non-owner shows the owner's state
    owner = cl.owner_of(room)
    other = cl.nodes[(owner + 1) % 3]
    js = ok(hu.get_room(other, room), "get via non-owner")
    assert js["version"] == len(log), js
    fw = [j for j in other.json_log("room_command_timing") if j.get("result") == "forwarded"]
    assert fw and all(j["forward_ms"] > 0 for j in fw), fw[:2]
    # one line per command across the cluster besides the non-owner's, marked forwarded
    # (issue 26): sums over lines with forwarded false count each command once
    assert all(j["forwarded"] is True for j in fw), fw[:2]
    own = [j for j in cl.nodes[owner].json_log("room_command_timing") if j["room_id"] == room]
    assert own and all(j["forwarded"] is False for j in own), own[:2]
    # and exactly one forwarded-false line per command over the three nodes (the repeat
    # through another node is a second call of its command: its replay has a line too)
    per = {}
    for n in cl.nodes:
        for j in n.json_log("room_command_timing"):
            if j.get("room_id") == room and j.get("forwarded") is False:
                per[j["command_id"]] = per.get(j["command_id"], 0) + 1
    twice = {c: per.get(c, 0) for c in answered if c != repeated and per.get(c, 0) != 1}
    assert not twice, f"commands without exactly one unforwarded line: {list(twice.items())[:3]}"
    print(f"  {len(log)} commands, one history; forward_ms (node{(owner + 1) % 3}) "
          f"median {sorted(j['forward_ms'] for j in fw)[len(fw) // 2]:.2f}")


# ---- 2 ----

def rockets_on_time(cl):
    rooms = {}
    for k in range(20):
        rd = cl.nodes[k % 3]
        room = hu.room_name("rk")
        ok(hu.create(rd, room), "create")  # the creating node owns it
        rooms[room] = rd
    owners = {cl.owner_of(r) for r in rooms}
    assert owners == {0, 1, 2}, owners
    due = {room: ignite(rd, room) for room, rd in rooms.items()}
    last = max(due.values())
    wait_until(lambda: len(set(launches(cl)) & set(due)) == len(due),
               timeout=(last / 1000 - time.time()) + 15, step=0.2, what="every rocket launched")
    got = launches(cl)
    late = sorted(got[r] - due[r] for r in due)
    print(f"  20 rockets: late ms min {late[0]} median {late[10]} max {late[-1]}")
    assert late[0] >= 0 and late[-1] <= 1000, late


# ---- 3 ----

class Load:
    """Sends joins to rooms through random live nodes; keeps the acknowledged command_ids."""

    def __init__(self, cl, rooms, nodes):
        self.cl, self.rooms, self.nodes = cl, rooms, nodes
        self.acked, self.stop, self.sent = [], threading.Event(), 0
        self.t = threading.Thread(target=self.loop)

    def loop(self):
        uid = 10000
        while not self.stop.is_set():
            uid += 1
            room = random.choice(self.rooms)
            rd = random.choice(self.nodes)
            c = hu.cid("ld")
            try:
                st, _, _ = rd.post(f"/v1/rooms/{room}/join", {"command_id": c, "uid": uid},
                                   timeout=10)
            except OSError:
                continue
            self.sent += 1
            if st == 200:
                self.acked.append(c)
            else:
                time.sleep(0.05)

    def __enter__(self):
        self.t.start()
        return self

    def __exit__(self, *a):
        self.stop.set()
        self.t.join()


def kill_node_under_load(cl):
    victim = cl.nodes[2]
    rooms = []
    for k in range(6):
        room = hu.room_name("kn")
        ok(hu.create(cl.nodes[k % 3], room), "create")
        rooms.append(room)
    mine = [r for r in rooms if cl.owner_of(r) == 2]
    assert mine, "node2 owns none of the rooms"
    # rockets in the victim's rooms, due shortly after it dies
    due = {r: ignite(victim, r) for r in mine}
    with Load(cl, rooms, cl.nodes[:2]) as load:
        # die 0.5 s before the first rocket is due: its lease outlives it by up to lease.ttl
        time.sleep(max(0.0, min(due.values()) / 1000 - time.time() - 0.5))
        victim.kill()
        killed_at = time.time() * 1000
        time.sleep(TTL_MS / 1000 + 2.5)
    assert load.acked, "no command acknowledged under load"
    acked = set(load.acked)
    logged = {c for (c,) in cl.mysql("SELECT command_id FROM room_command_log")}
    assert acked <= logged, f"lost: {sorted(acked - logged)[:5]}"
    for r in rooms:
        log = log_of(cl, r)
        assert [v for v, _ in log] == list(range(1, len(log) + 1)), (r, log)
        owner = cl.owner_of(r)
        assert owner in (0, 1), (r, owner)
    got = wait_until(lambda: (lambda g: g if set(mine) <= set(g) else None)(launches(cl)),
                     timeout=15, step=0.2, what="rockets of the dead node launched")
    late = {r: got[r] - due[r] for r in mine}
    print(f"  {load.sent} sent, {len(acked)} acknowledged, none lost; rockets late ms {late} "
          f"(killed {int(min(due.values()) - killed_at)} ms before the first was due, lease.ttl {TTL_MS})")
    assert all(0 <= v <= TTL_MS + 1000 for v in late.values()), late


# ---- 4 ----

def kill_nats_server_under_load(cl):
    rooms = []
    for k in range(6):
        room = hu.room_name("kb")
        ok(hu.create(cl.nodes[k % 2], room), "create")
        rooms.append(room)
    with Load(cl, rooms, cl.nodes[:2]) as load:
        time.sleep(1.0)
        cl.nats.kill(1)
        time.sleep(3.0)
    assert load.acked
    acked = set(load.acked)
    logged = {c for (c,) in cl.mysql("SELECT command_id FROM room_command_log")}
    assert acked <= logged, f"lost: {sorted(acked - logged)[:5]}"
    st = wait_until(lambda: all_delivered(cl), timeout=30, step=0.3, what="every row delivered")
    rows = int(cl.mysql("SELECT COUNT(*) FROM room_outbox")[0][0])
    nc = cl.nc(1)
    try:
        n = js_stream_count(nc, cl.ns + "hyapp_room_outbox")
    finally:
        nc.close()
    print(f"  {load.sent} sent, {len(acked)} acknowledged; outbox {st}; stream {n} messages")
    assert n == rows, (n, rows)
    cl.nats.restart(1)


# ---- 5 ----

def readiness(cl):
    """/readyz per node: the broker down is "degraded" (200, commands succeed); a node whose
    lease Redis is unreachable cannot serve commands (503)."""
    for n in (1, 2, 3):
        cl.nats.kill(n)
    try:
        def degraded(rd):
            st, _, js = rd.admin("GET", "/readyz")
            return st == 200 and js["status"] == "degraded" and \
                js["checks"]["broker"].startswith("down") and js
        for rd in cl.nodes[:2]:
            js = wait_until(lambda: degraded(rd), timeout=15, what="degraded while nats is down")
            assert js["checks"]["lease"] == "ok" and js["checks"]["store"] == "ok", js
        room = hu.room_name("rd")
        ok(hu.create(cl.nodes[0], room), "a command with the broker down")
    finally:
        for n in (1, 2, 3):
            cl.nats.restart(n)
    # the broker is back once its cluster elected a leader (time of its own on a loaded
    # machine); from then on each node has 30 s to say so
    cl.nats.wait_jetstream(timeout=60)
    for i, rd in enumerate(cl.nodes[:2]):
        try:
            wait_until(lambda: rd.http("GET", "/readyz")[2]["status"] == "ready", timeout=30,
                       step=0.3, what=f"node{i} ready again")
        except AssertionError as e:  # which check stayed down
            raise AssertionError(f"{e}: {rd.admin('GET', '/readyz')[2]}") from None
    wait_until(lambda: all_delivered(cl), timeout=30, step=0.3, what="backlog delivered")

    # a node whose lease Redis cannot be reached: 503
    cfg, d = cl.node_cfg(9)
    cfg["redis"]["addr"] = f"127.0.0.1:{free_port()}"
    cfg["rocketmq"]["enabled"] = False
    cfg["rocketmq"]["room_outbox"]["enabled"] = False
    cfg["rocketmq"]["rocket_launch"]["enabled"] = False
    cfg["outbox_worker"]["publish_mode"] = "direct"
    cfg["projection"]["driver"] = "memory"
    r = Roomd(cfg, tmp=d).start()
    try:
        # the readiness cache answers "starting" (no checks) until its first check ran
        st, _, js = wait_until(lambda: (lambda a: a if "checks" in a[2] else None)(
            r.admin("GET", "/readyz")), timeout=10, what="the first readiness check")
        assert st == 503 and js["status"] == "unavailable", (st, js)
        assert js["checks"]["lease"].startswith("down") and js["checks"]["store"] == "ok", js
        st, _, _ = hu.create(r, hu.room_name("nr"))
        assert st == 503, st
    finally:
        r.stop()


TESTS = [round_robin_one_history, rockets_on_time, kill_node_under_load,
         kill_nats_server_under_load, readiness]


def bound(cl, f):
    def t():
        f(cl)
    t.__name__ = f.__name__
    return t


def main():
    if listing():  # one ctest entry: the topology is started once for all of them
        run(TESTS, fixture="topology")
    need("127.0.0.1", MYSQL_PORT, "mariadbd (scripts/servers.sh)")
    need("127.0.0.1", REDIS_PORT, "redis-server (scripts/servers.sh)")
    cl = Cluster(TMP)
    try:
        cl.start()
        run([bound(cl, f) for f in TESTS], fixture="topology")
    finally:
        cl.stop()


if __name__ == "__main__":
    main()
