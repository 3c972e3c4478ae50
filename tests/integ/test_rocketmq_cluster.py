"""test_rocketmq_cluster: the production topology of test_cluster (3 roomd nodes, MySQL store,
Redis lease and projection, forwarding, mq mode, the rocket-open group in every node) on the
rocketmq driver against one RocketMQ stand-in (never a real broker):

1. rockets: 20 rooms owned by the 3 nodes; every rocket launches within 1 s of launch_at_ms
   (wake-ups as timer messages, the rocket-open group rebalanced over the 3 nodes' members).
2. kill -9 of a node under load: no acknowledged command lost, the dead node's rooms taken
   over, its rockets launched by the other nodes' group members (its queues rebalanced).
3. every event once at the broker: each outbox row delivered, each event_id once in the topic.

Run: python3 tests/integ/test_rocketmq_cluster.py (PYTHONPATH=tests, ROOMD_BUILD_DIR=build)"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "standins"))
from roomd_test import listing, need, run, wait_until  # noqa: E402
from cluster_util import MYSQL_PORT, REDIS_PORT, Cluster, mysql_q  # noqa: E402
from rocketmq_util import RocketStandin  # noqa: E402
from test_cluster import all_delivered, kill_node_under_load, rockets_on_time  # noqa: E402
from test_rocketmq_roomd import ROCKET, TOPIC, messages_by_key  # noqa: E402

TMP = tempfile.mkdtemp(prefix="roomd-rmq-cluster-")


class RmqCluster(Cluster):
    """Cluster with the stand-in instead of the NATS cluster."""

    def __init__(self, tmp, b):
        super().__init__(tmp, extra={"rocketmq": {"driver": "rocketmq",
                                                  "name_servers": b.name_servers,
                                                  "namespace": ""}})
        self.b = b

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
        self.nodes[0].start()
        for r in self.nodes[1:]:
            r.start()
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


def every_event_once(cl):
    wait_until(lambda: all_delivered(cl), timeout=30, what="every row delivered")
    ids = {e for (e,) in cl.mysql("SELECT event_id FROM room_outbox")}
    got = messages_by_key(cl.b, TOPIC)  # asserts each key once
    assert set(got) == ids, (len(got), len(ids))
    print(f"  {len(ids)} events, each once on {TOPIC}")


TESTS = [rockets_on_time, kill_node_under_load, every_event_once]


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
    cl = RmqCluster(TMP, b)
    try:
        b.start()
        cl.start()
        run([bound(cl, f) for f in TESTS], fixture="topology")
    finally:
        cl.stop()
        b.stop()


if __name__ == "__main__":
    main()
