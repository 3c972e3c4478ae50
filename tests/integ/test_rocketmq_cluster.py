# SPDX-License-Identifier: Apache-2.0
"""test_rocketmq_cluster: the production topology of test_cluster (3 roomd nodes, MySQL store,
Redis lease and projection, forwarding, mq mode, the rocket-open group in every node) on the
rocketmq driver against one RocketMQ stand-in (never a real broker):

1. rockets: 20 rooms owned by the 3 nodes; every rocket launches within 1 s of launch_at_ms
   (wake-ups as timer messages, the rocket-open group rebalanced over the 3 nodes' members).
2. kill -9 of a node under load: no acknowledged command lost, the dead node's rooms taken
   over, its rockets launched by the other nodes' group members (its queues rebalanced).
3. the IM bridge group in every node: a room's events reach IM in commit order (room_seq)
   across a kill -9 of the broker (its data dir kept) with commands meanwhile, each once.
4. no event lost or doubled in effect: each outbox row delivered and its event at the broker
   (at least once: RocketMQ does not deduplicate a resend), no IM message twice.

Run: python3 tests/integ/test_rocketmq_cluster.py (PYTHONPATH=tests, ROOMD_BUILD_DIR=build)"""
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "standins"))
from roomd_test import listing, need, run, wait_until  # noqa: E402
from cluster_util import MYSQL_PORT, REDIS_PORT, Cluster, mysql_q  # noqa: E402
from rocketmq_util import RocketStandin  # noqa: E402
from standins import ImStandin, TEST_SECRET  # noqa: E402
import http_util as hu  # noqa: E402
from test_cluster import all_delivered, kill_node_under_load, rockets_on_time  # noqa: E402
from test_rocketmq_roomd import ROCKET, TOPIC  # noqa: E402

TMP = tempfile.mkdtemp(prefix="roomd-rmq-cluster-")


class RmqCluster(Cluster):
    """Cluster with the stand-in instead of the NATS cluster."""

    def __init__(self, tmp, b, im):
        super().__init__(tmp, extra={"rocketmq": {"driver": "rocketmq",
                                                  "name_servers": b.name_servers,
                                                  "namespace": "",
                                                  "room_outbox": {
                                                      "tencent_im_consumer_enabled": True}},
                                     "tencent_im": im.conf()})
        self.b, self.im = b, im

    def start(self):
        mysql_q(f"CREATE DATABASE {self.db} CHARACTER SET utf8mb4")
        import json
        from roomd_test import Roomd
        for i in range(self.n):
            cfg, d = self.node_cfg(i)
            r = Roomd(cfg, tmp=d)
            r.cfg["http"]["advertise_addr"] = f"127.0.0.1:{r.port}"
            with open(r.cfg_path, "w") as f:
                json.dump(r.cfg, f, indent=1)
            self.nodes.append(r)
        env = {"TIM_TEST_SECRET": TEST_SECRET}
        self.nodes[0].start(env=env)
        for r in self.nodes[1:]:
            r.start(env=env)
        return self

    def stop(self):
        for r in self.nodes:
            try:
                r.stop(timeout=20)
            except Exception:  # noqa: BLE001 - keep stopping the others
                if r.proc:
                    r.proc.kill()
        try:
            mysql_q(f"DROP DATABASE IF EXISTS {self.db}")
        except RuntimeError:
            pass


def im_order_across_broker_restart(cl):
    room = hu.room_name("imo")
    live = [r for r in cl.nodes if r.proc is not None]
    assert hu.create(live[0], room)[0] == 201

    def cmds(k0, n):
        for k in range(k0, k0 + n):
            rd = live[k % len(live)]
            st = (hu.join if k % 2 == 0 else hu.leave)(rd, room, 500 + k // 2)[0]
            assert st == 200, st
    cmds(0, 10)
    cl.b.kill()
    cmds(10, 6)
    time.sleep(0.5)
    cl.b.start()
    cmds(16, 6)
    seq = {e: int(s) for e, s in cl.mysql(
        f"SELECT event_id, room_seq FROM room_outbox WHERE room_id = '{room}'")}

    def arrived():
        out = []
        for m in cl.im.messages():
            if not m.get("Data"):
                continue
            eid = json.loads(m["Data"]).get("event_id")
            if eid in seq:
                out.append(seq[eid])
        return out
    got = wait_until(lambda: (lambda a: a if len(set(a)) == len(seq) else None)(arrived()),
                     timeout=60, step=0.3, what="every event of the room at IM")
    assert len(got) == len(set(got)), f"an event twice at IM: {got}"
    assert got == sorted(got), f"out of commit order at IM: {got}"
    print(f"  {len(got)} events of one room at IM in room_seq order across a broker kill -9")


def every_event_once_in_effect(cl):
    """RocketMQ has no broker-side dedupe: a send whose answer was lost (a node killed
    between SEND_OK and marking the row, the broker killed mid-send) is sent again, so an
    event may be on the topic twice; consumers deduplicate by event_id. Every event is
    there at least once, and no IM effect is doubled."""
    wait_until(lambda: all_delivered(cl), timeout=30, what="every row delivered")
    ids = {e for (e,) in cl.mysql("SELECT event_id FROM room_outbox")}
    keys = [m["props"]["KEYS"] for m in cl.b.stats([TOPIC])["messages"][TOPIC]]
    assert set(keys) == ids, (len(set(keys)), len(ids))
    seen = [json.loads(m["Data"]).get("event_id") for m in cl.im.messages() if m.get("Data")]
    assert len(seen) == len(set(seen)), "an IM message twice"
    print(f"  {len(ids)} events on {TOPIC} ({len(keys) - len(set(keys))} sent twice), "
          f"{len(seen)} IM messages, none twice")


TESTS = [rockets_on_time, kill_node_under_load, im_order_across_broker_restart,
         every_event_once_in_effect]


def bound(cl, f):
    def t():
        f(cl)
    t.__name__ = f.__name__
    return t


def main():
    if listing():
        run(TESTS, fixture="topology")
    need("127.0.0.1", MYSQL_PORT, "mariadbd (scripts/servers.sh)")
    need("127.0.0.1", REDIS_PORT, "redis-server (scripts/servers.sh)")
    b = RocketStandin(TMP, topics=[TOPIC, ROCKET])
    im = ImStandin(TMP)
    cl = RmqCluster(TMP, b, im)
    try:
        b.start()
        im.start()
        cl.start()
        run([bound(cl, f) for f in TESTS], fixture="topology")
    finally:
        cl.stop()
        b.stop()
        im.stop()


if __name__ == "__main__":
    main()
