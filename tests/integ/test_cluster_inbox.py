# SPDX-License-Identifier: Apache-2.0
"""Consumer groups on several nodes (issue 12, docs/bus.md "Several nodes"): the three outbox
consumer groups (IM bridge, notice, activity) run in all three roomd nodes of the production
topology (cluster_util: one MariaDB database, one Redis, a 3-server nats-server cluster with R3
streams, all on 127.0.0.1, ports picked at run time) with their inboxes in the shared database
(rocketmq.consumer_inbox auto -> mysql).

Forced redeliveries: AckWait 1 s while the IM stand-in answers some group messages 1.6 s late
(JetStream redelivers them to another node while the first one is still in the effect), some
with HTTP 502 and some C2C sends with a retryable error (Nak, redelivered to any node); and one
node killed -9 mid-stream (its claims expire and are taken over). Afterwards every side effect
happened exactly once per event_id:
- IM group messages: one stored by the stand-in per event (after Tencent's Random dedupe, which
  the stand-in applies like IM does: a resend after a takeover is discarded there);
- C2C notices: one per RoomUserKicked, and one notice_delivery_events row, sent;
- activity figures: the per-room gift totals equal the committed SendGift commands exactly,
  one rocket launch row per launched rocket;
- consumer_inbox: every group has every event done, none dead.
"""
import json
import os
import random
import sys
import tempfile
import threading
import time
from collections import Counter

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "standins"))
import http_util as hu  # noqa: E402
from cluster_util import MYSQL_PORT, REDIS_PORT, Cluster  # noqa: E402
from roomd_test import listing, need, run, wait_until  # noqa: E402
from standins import ImStandin, TEST_SECRET  # noqa: E402

TMP = tempfile.mkdtemp(prefix="roomd-cluster-inbox-")
GROUPS = ["hyapp-room-im-bridge", "hyapp-notice-room-outbox", "hyapp-activity-room-outbox"]


def ok(res, what=""):
    st, _, js = res
    assert st in (200, 201), f"{what}: {st} {js}"  # CreateRoom: 201
    return js


class Load:
    """Joins, gifts and kicks in rooms through random live nodes, until stopped."""

    def __init__(self, cl, rooms):
        self.cl, self.rooms = cl, rooms
        self.members = {r: [] for r in rooms}
        self.stop, self.sent, self.acked = threading.Event(), 0, 0
        self.uid = 1000
        self.t = threading.Thread(target=self.loop)

    def live(self):
        return [r for r in self.cl.nodes if r.proc is not None]

    def step(self):
        room = random.choice(self.rooms)
        ms = self.members[room]
        rd = random.choice(self.live())
        op = random.random()
        if len(ms) < 2 or op < 0.45:
            self.uid += 1
            res, uid = hu.join(rd, room, self.uid), self.uid
            if res[0] == 200:
                ms.append(uid)
        elif op < 0.85:
            a, b = random.sample(ms, 2)
            res = hu.gift(rd, room, a, b, count=random.randint(1, 3), unit_price=10)
        else:
            uid = ms.pop(random.randrange(len(ms)))
            res = hu.kick(rd, room, 1, uid, reason="test")
            if res[0] != 200:
                ms.append(uid)
        self.sent += 1
        if res[0] == 200:
            self.acked += 1
        else:
            time.sleep(0.05)

    def loop(self):
        while not self.stop.is_set():
            try:
                self.step()
            except OSError:
                time.sleep(0.05)

    def run_for(self, script):
        """Runs the load while script() runs (the faults), then stops it."""
        self.t.start()
        try:
            script()
        finally:
            self.stop.set()
            self.t.join()


def settled(cl):
    """None until the outbox is delivered and every group has every event done."""
    st = {s: int(n) for s, n in cl.mysql("SELECT status, COUNT(*) FROM room_outbox"
                                         " GROUP BY status")}
    if set(st) != {"delivered"}:
        return None
    n = st["delivered"]
    done = {g: int(c) for g, c in cl.mysql(
        "SELECT group_name, COUNT(*) FROM consumer_inbox WHERE state = 'done' GROUP BY group_name")}
    return (n, done) if all(done.get(g, 0) == n for g in GROUPS) else None


def effects_once(cl, im):
    rooms = []
    for k in range(6):
        room = hu.room_name("ib")
        ok(hu.create(cl.nodes[k % 3], room), "create")  # the creating node owns it
        rooms.append(room)
    # redeliveries: slow answers past AckWait, 502s, retryable C2C failures
    im.control(slow={"api": "send_group_msg", "ms": 1600, "count": 6})

    def faults():
        time.sleep(1.5)
        im.control(http_status={"api": "send_group_msg", "status": 502, "count": 4})
        im.control(fail={"api": "sendmsg", "code": 20004, "count": 2})
        time.sleep(1.5)
        cl.nodes[2].kill()  # mid-stream: its claims in hand expire, others take them over
        time.sleep(4.0)
    load = Load(cl, rooms)
    load.run_for(faults)
    time.sleep(3.5)  # rockets ignited at the end launch (3 s countdown)
    n, done = wait_until(lambda: settled(cl), timeout=90, step=0.5,
                         what="every event delivered and done by every group")

    events = cl.mysql("SELECT event_id, event_type FROM room_outbox")
    assert len(events) == n
    dead = cl.mysql("SELECT group_name, event_id, last_error FROM consumer_inbox"
                    " WHERE state <> 'done' AND group_name IN ('" + "','".join(GROUPS) + "')")
    assert not dead, dead[:5]

    # IM group messages: one per event_id as IM stores them
    msgs = Counter()
    for m in im.messages():
        if m.get("Data"):
            msgs[json.loads(m["Data"]).get("event_id")] += 1
    missing = [e for e, t in events if msgs[e] == 0]
    twice = {e: c for e, c in msgs.items() if c > 1}
    assert not missing, f"no IM message for {len(missing)} events: {missing[:3]}"
    assert not twice, f"IM messages stored twice: {list(twice.items())[:3]}"
    calls = im.calls("send_group_msg")
    resent = sum(1 for c in calls if c["dup"])

    # C2C notices: one per kick, its notice row sent
    kicks = {e for e, t in events if t == "RoomUserKicked"}
    c2c = Counter(json.loads(m["Data"])["event_id"] for m in im.state_now()["c2c"] if m["Data"])
    assert kicks, "no kick in the load"
    assert set(c2c) == kicks, (len(set(c2c)), len(kicks))
    assert all(c == 1 for c in c2c.values()), c2c.most_common(3)
    rows = dict(cl.mysql("SELECT status, COUNT(*) FROM notice_delivery_events GROUP BY status"))
    assert rows == {"sent": str(len(kicks))}, rows

    # activity figures, per app and room, against the committed commands
    want = Counter()
    for room, req in cl.mysql("SELECT room_id, request FROM room_command_log"
                              " WHERE command_type = 'SendGift'"):
        want[room] += json.loads(req)["count"]
    got = {r: int(g) for r, g in cl.mysql("SELECT room_id, gifts FROM activity_room_totals"
                                          " WHERE app_code = 'hyapp'")}
    assert got == dict(want), (got, dict(want))
    launched = {r for (r,) in cl.mysql("SELECT room_id FROM room_outbox"
                                       " WHERE event_type = 'RoomRocketLaunched'")}
    launches = cl.mysql("SELECT room_id, rocket_id FROM activity_rocket_launches")
    assert {r for r, _ in launches} == launched and len(launches) == len(
        {(r, k) for r, k in launches}), launches

    failures = cl.mysql("SELECT group_name, SUM(failures) FROM consumer_inbox GROUP BY group_name")
    def logged(msg):
        return sum(len(r.json_log(msg)) for r in cl.nodes)
    takeovers, busy = logged("expired claim taken over"), logged("claimed by another node, later")
    print(f"  {load.sent} commands sent, {load.acked} acknowledged, {n} events; "
          f"IM: {len(calls)} send_group_msg calls, {resent} resends discarded by IM's Random, "
          f"{len(msgs)} messages stored; {len(kicks)} C2C notices; "
          f"{sum(want.values())} gifts in {len(want)} rooms, {len(launched)} rockets; "
          f"failures per group {dict(failures)}; redeliveries that found another node's claim "
          f"{busy}, claims taken over {takeovers}")


def main():
    if listing():
        run([], fixture="topology")
    need("127.0.0.1", MYSQL_PORT, "mariadbd (scripts/servers.sh)")
    need("127.0.0.1", REDIS_PORT, "redis-server (scripts/servers.sh)")
    os.environ["TIM_TEST_SECRET"] = TEST_SECRET
    im = ImStandin(TMP).start()
    extra = {
        "tencent_im": im.conf(timeout="3s"),
        "rocketmq": {
            "consumer_ack_wait": "1s", "consumer_retry_delays_ms": [200, 400],
            "room_outbox": {"consumer_max_reconsume_times": 8,
                            "tencent_im_consumer_enabled": True,
                            "notice_consumer_enabled": True,
                            "activity_consumer_enabled": True}},
    }
    cl = Cluster(TMP, extra=extra)
    try:
        cl.start()
        def effects_exactly_once():
            effects_once(cl, im)
        run([effects_exactly_once], fixture="topology")
    finally:
        cl.stop()
        im.stop()


if __name__ == "__main__":
    main()
