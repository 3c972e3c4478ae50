# SPDX-License-Identifier: Apache-2.0
"""cluster_util: the production topology on one machine, for tests/integ/test_cluster.py.

Cluster(tmp) starts, all on 127.0.0.1 and on ports picked at run time:
- a 3-server nats-server cluster with JetStream (scripts/nats_cluster.sh; R3 streams);
- a fresh MariaDB database on the suite's mariadbd (ROOMD_MYSQL_PORT) and a fresh key prefix on
  the suite's redis-server (ROOMD_REDIS_PORT), both from scripts/servers.sh;
- three roomd nodes sharing them: Redis lease, Redis projection, cluster.forward on, publish_mode
  mq with the rocket wake-ups, the rocket-open group in every node.
mysql(sql) queries the database; nats(i) opens a bus_util.Nats to server i (1..3).
"""
import os
import subprocess
import time
import uuid

from roomd_test import Roomd, env_port, free_port, merge, mysql_query as mysql_q, wait_until
from bus_util import Nats

SOURCE = os.path.join(os.path.dirname(__file__), "..", "..")
NATS_CLUSTER = os.path.join(SOURCE, "scripts", "nats_cluster.sh")
MYSQL_PORT = env_port("ROOMD_MYSQL_PORT", 3417)
REDIS_PORT = env_port("ROOMD_REDIS_PORT", 6390)
TTL_MS = 1500


class NatsCluster:
    def __init__(self, tmp):
        self.dir = os.path.join(tmp, "nats")
        self.ports = [free_port() for _ in range(3)]
        self.routes = [free_port() for _ in range(3)]

    def _sh(self, *args):
        env = dict(os.environ)
        env["ROOMD_NATS_CLUSTER_PORTS"] = " ".join(str(p) for p in self.ports + self.routes)
        subprocess.run([NATS_CLUSTER, *args], check=True, env=env, timeout=60,
                       stdout=subprocess.DEVNULL)

    def urls(self):
        return [f"nats://127.0.0.1:{p}" for p in self.ports]

    def start(self):
        self._sh("start", self.dir)
        self.wait_jetstream()
        return self

    def wait_jetstream(self, timeout=30):
        """Waits until JetStream is usable: the meta group elected a leader."""
        wait_until(self._js_ready, timeout=timeout, step=0.2, what="JetStream cluster leader")

    def _js_ready(self):
        try:
            nc = Nats(self.ports[0])
            try:
                _, _, data = nc.request("$JS.API.INFO", b"", timeout=2)
                return b'"error"' not in data
            finally:
                nc.close()
        except (OSError, RuntimeError):
            return False

    def kill(self, n):
        self._sh("kill", self.dir, str(n))

    def restart(self, n):
        self._sh("restart", self.dir, str(n))

    def stop(self):
        self._sh("stop", self.dir)


class Cluster:
    def __init__(self, tmp, nodes=3, extra=None, node_extra=None, tls_ca=None):
        self.tmp = tmp
        self.db = f"roomd_cluster_{os.getpid()}_{uuid.uuid4().hex[:6]}"
        self.prefix = f"roomdcl:{os.getpid()}:{uuid.uuid4().hex[:6]}:"
        self.ns = f"cl{uuid.uuid4().hex[:6]}_"
        self.nats = NatsCluster(tmp)
        self.extra = extra or {}
        self.node_extra = node_extra or (lambda i: {})
        self.n = nodes
        self.tls_ca = tls_ca  # the CA the test's requests verify TLS listeners with
        self.nodes = []

    def node_cfg(self, i):
        d = os.path.join(self.tmp, f"node{i}")
        os.makedirs(d, exist_ok=True)
        cfg = {
            "app": {"node_id": f"node{i}"},
            "store": {"driver": "mysql", "mysql": {
                "host": "127.0.0.1", "port": MYSQL_PORT, "user": "root", "password": "",
                "database": self.db, "pool_size": 8, "connect_timeout": "1s",
                "read_timeout": "3s", "write_timeout": "3s", "deadlock_retries": 3}},
            "redis": {"enabled": True, "addr": f"127.0.0.1:{REDIS_PORT}",
                      "key_prefix": self.prefix, "connect_timeout": "200ms",
                      "command_timeout": "300ms"},
            "lease": {"driver": "redis", "ttl": f"{TTL_MS}ms", "renew_every": "300ms"},
            "projection": {"driver": "redis"},
            "cluster": {"forward": True, "forward_timeout": "5s"},
            "room": {"rocket": {"thresholds": [100, 100000], "countdown": "3s"}},
            "rocketmq": {
                "enabled": True, "name_servers": self.nats.urls(), "namespace": self.ns,
                "send_timeout": "1s", "retry": 1, "stream_replicas": 3,
                "consumer_store_dir": os.path.join(d, "consumers"),
                "consumer_retry_delays_ms": [200, 400], "consumer_ack_wait": "2s",
                "room_outbox": {"enabled": True, "consumer_max_reconsume_times": 2},
                "rocket_launch": {"enabled": True, "consumer_max_reconsume_times": 2}},
            "outbox_worker": {"publish_mode": "mq", "max_retry_count": 30,
                              "initial_backoff": "100ms", "max_backoff": "500ms",
                              "log_sink": {"enabled": False}},
        }
        merge(cfg, self.extra)
        merge(cfg, self.node_extra(i))
        return cfg, d

    def start(self):
        mysql_q(f"CREATE DATABASE {self.db} CHARACTER SET utf8mb4")
        self.nats.start()
        for i in range(self.n):
            cfg, d = self.node_cfg(i)
            r = Roomd(cfg, tmp=d)
            r.tls_ca = self.tls_ca
            r.cfg["http"]["advertise_addr"] = f"127.0.0.1:{r.port}"
            import json
            with open(r.cfg_path, "w") as f:
                json.dump(r.cfg, f, indent=1)
            self.nodes.append(r)
        # the first node creates the schema and the streams; then the others
        self.nodes[0].start()
        for r in self.nodes[1:]:
            r.start()
        return self

    def mysql(self, sql):
        return mysql_q(sql, self.db)

    def nc(self, i=0):
        return Nats(self.nats.ports[i])

    def owner_of(self, room):
        """The index of the node the room's lease names, or None."""
        out = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(REDIS_PORT), "GET",
                              f"{self.prefix}lease:hyapp:{room}"], capture_output=True,
                             text=True, timeout=10).stdout.strip()
        addr = out.split()[2] if out else ""  # "<token> <instance> <public> <admin>"
        for i, r in enumerate(self.nodes):
            if r.proc is not None and addr == f"127.0.0.1:{r.port}":
                return i
        return None

    def stop(self):
        for r in self.nodes:
            try:
                r.stop(timeout=20)
            except Exception:  # noqa: BLE001 - keep stopping the others
                if r.proc:
                    r.proc.kill()
        try:
            self.nats.stop()
        except Exception:  # noqa: BLE001
            pass
        time.sleep(0.3)
        try:
            mysql_q(f"DROP DATABASE IF EXISTS {self.db}")
        except RuntimeError:
            pass
