# SPDX-License-Identifier: Apache-2.0
"""test_consumer_examples: the example consumers of docs/consumers.md, examples/consumer-go
(built with Debian's Go packages, GOPATH mode, no module download) and examples/consumer-node
(npm nats + protobufjs), against the real JetStream server with a real roomd (publish_mode
mq) producing. Both run at once, each as its own durable consumer (group) of the outbox
stream. Each sees every event of the run once, in room order (room_seq 1, 2, ... per room in
the order of its effects), with its payload decoded by event_type, across

  1. a crash between an effect and its ack (--crash-after 3: exit before the ack; JetStream
     redelivers that event after the ack wait, and the consumer's event_id dedupe drops it),
  2. events committed while the consumers are down (the backlog),
  3. a forced redelivery of the whole stream (the durable consumers deleted while down, so
     the restarted consumers get every event again): no second effect."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from roomd_test import BUILD, SOURCE, Roomd, need, run, wait_until  # noqa: E402
from bus_util import Nats, js_consumer_idle, js_consumer_info, js_delete_consumer  # noqa: E402
from test_bus_roomd import NATS_PORT, SHARED, Events, all_delivered, bus_cfg, cleanup, new_ns  # noqa: E402
from http_util import room_name  # noqa: E402

TMP = tempfile.mkdtemp(prefix="roomd-examples-")
GO_DIR = os.path.join(SOURCE, "examples", "consumer-go")
NODE_DIR = os.path.join(SOURCE, "examples", "consumer-node")


def build_go():
    out = os.path.join(TMP, "go")
    os.makedirs(out)
    # the Go build cache kept in the build tree: a second run does not compile nats.go again
    env = dict(os.environ, GOCACHE=os.path.join(os.path.abspath(BUILD), "gocache"))
    p = subprocess.run(["make", "-C", GO_DIR, f"OUT={out}"], capture_output=True, text=True,
                       timeout=600, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    return out


class Example:
    def __init__(self, name, argv, stream_ns):
        self.name, self.argv, self.proc = name, argv, None
        self.out = os.path.join(TMP, f"{name}.jsonl")
        self.log = os.path.join(TMP, f"{name}.log")
        self.durable = f"example-{name}"
        self.ns = stream_ns

    def start(self, *extra):
        flag = "--" if self.name == "node" else "-"
        wait = ["-ack-wait", "2s"] if self.name == "go" else ["--ack-wait-ms", "2000"]
        args = self.argv + [f"{flag}url", SHARED, f"{flag}namespace", self.ns, f"{flag}durable",
                            self.durable, f"{flag}out", self.out] + wait + list(extra)
        self.proc = subprocess.Popen(args, stdout=open(self.log, "ab"), stderr=subprocess.STDOUT)
        return self

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def effects(self):
        if not os.path.exists(self.out):
            return []
        with open(self.out) as f:
            return [json.loads(line) for line in f if line.strip()]

    def tail(self):
        with open(self.log, errors="replace") as f:
            return f.read()[-2000:]


def check(ex, events, rooms):
    eff = ex.effects()
    ids = [e["event_id"] for e in eff]
    assert len(ids) == len(set(ids)), f"{ex.name}: an event applied twice"
    assert sorted(ids) == sorted(events), \
        f"{ex.name}: {len(ids)} effects, {len(events)} events; missing " \
        f"{sorted(set(events) - set(ids))[:5]} extra {sorted(set(ids) - set(events))[:5]}"
    for room in rooms:
        seqs = [e["room_seq"] for e in eff if e["room_id"] == room]
        assert seqs == list(range(1, len(seqs) + 1)), f"{ex.name}: {room} out of order: {seqs}"
    gifts = [e for e in eff if e["event_type"] == "RoomGiftSent"]
    assert gifts and all(int(g["payload"]["total"]) == 30 and g["payload"]["gift_id"] == "rose"
                         for g in gifts), gifts
    joins = [e for e in eff if e["event_type"] == "RoomUserJoined"]
    assert joins and all(int(j["payload"]["uid"]) > 0 for j in joins), joins


def commands(r, rooms):
    ev = Events(r)
    for room in rooms:
        ev.room(room)
    for room in rooms:  # interleaved: the stream mixes the rooms
        ev.do(f"/v1/rooms/{room}/mic/up", {"uid": 5})
        ev.gift(room, 3, 10)
    return ev.ids()


def test_go_and_node_consumers():
    need("127.0.0.1", NATS_PORT, "nats-server (JetStream)")
    if not os.path.isdir(os.path.join(NODE_DIR, "node_modules", "nats")):
        raise AssertionError("examples/consumer-node/node_modules missing: make test-deps")
    go_out = build_go()
    ns = new_ns()
    stream = ns + "hyapp_room_outbox"
    tmp = os.path.join(TMP, "roomd")
    os.makedirs(tmp)
    cfg = bus_cfg(tmp, ns)
    r = Roomd(cfg, tmp=tmp).start()
    nc = Nats(NATS_PORT)
    exs = [Example("go", [os.path.join(go_out, "consumer-go"), "-proto-set",
                          os.path.join(go_out, "room_events.pb")], ns),
           Example("node", ["node", os.path.join(NODE_DIR, "consumer.js")], ns)]
    try:
        rooms = [room_name(), room_name()]
        events = commands(r, rooms)
        wait_until(lambda: all_delivered(r), timeout=30, what="outbox delivered to the stream")
        # 1. a crash after the 3rd effect, before its ack
        for ex in exs:
            ex.start("-crash-after" if ex.name == "go" else "--crash-after", "3")
        for ex in exs:
            try:
                rc = ex.proc.wait(60)
            except subprocess.TimeoutExpired:
                rc = None
            assert rc == 3, (ex.name, rc, ex.tail())
            assert len(ex.effects()) == 3, (ex.name, ex.effects())
        # 2. a backlog committed while they are down, then both run
        rooms.append(room_name())
        events += commands(r, rooms[2:])
        for ex in exs:
            ex.start()
        for ex in exs:
            try:
                wait_until(lambda: len(ex.effects()) >= len(events), timeout=60)
            except AssertionError:
                raise AssertionError(f"{ex.name}: {len(ex.effects())} of {len(events)} events "
                                     f"applied\n{ex.tail()}")
        wait_until(lambda: all(js_consumer_idle(nc, stream, ex.durable) for ex in exs),
                   timeout=30, what="both consumers acknowledged everything")
        for ex in exs:
            check(ex, events, rooms)
        # 3. forced redelivery: the cursors are deleted while the consumers are down
        for ex in exs:
            ex.stop()
            js_delete_consumer(nc, stream, ex.durable)
        for ex in exs:
            ex.start()
        wait_until(lambda: all(js_consumer_idle(nc, stream, ex.durable) for ex in exs),
                   timeout=60, what="the whole stream redelivered and acknowledged")
        time.sleep(0.5)
        for ex in exs:
            assert js_consumer_info(nc, stream, ex.durable)["delivered"]["stream_seq"] >= \
                len(events), ex.name
            check(ex, events, rooms)  # still once each: the redelivery had no effect
    finally:
        for ex in exs:
            ex.stop()
        nc.close()
        r.stop()
        cleanup(ns)
        shutil.rmtree(TMP, ignore_errors=True)


if __name__ == "__main__":
    run([test_go_and_node_consumers])
