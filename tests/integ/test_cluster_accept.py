# SPDX-License-Identifier: Apache-2.0
"""test_cluster_accept: the seed's acceptance rows (验收) on three nodes (issue 26): the
production topology of cluster_util (3 roomd nodes, MariaDB, Redis lease, a 3-server NATS
JetStream cluster) in publish_mode dual, with the IM stand-in and the activity stand-in
shared by the nodes; commands go to every node in turn.

- IM down: every command succeeds; the rows stay retryable with no attempt counted (never
  failed); IM back: delivered, one IM message each.
- activity down: the same with the activity service.
- MQ down (all three NATS servers): commands succeed, rows retryable; MQ back: delivered.
- poison: IM hangs on one event's content only: it reaches failed after max_retry_count, and
  its room's later event is delivered.
(The rocket row on three nodes: test_cluster.rockets_on_time.)

Run: python3 tests/integ/test_cluster_accept.py (PYTHONPATH=tests, ROOMD_BUILD_DIR=build)
"""
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "standins"))
import http_util as hu  # noqa: E402
from cluster_util import MYSQL_PORT, REDIS_PORT, Cluster  # noqa: E402
from roomd_test import listing, need, run, wait_until  # noqa: E402
from standins import ActivityStandin, ImStandin, TEST_SECRET  # noqa: E402

TMP = tempfile.mkdtemp(prefix="roomd-clacc-")
ENV = {"TIM_TEST_SECRET": TEST_SECRET}
MAX_RETRY = 4
CTX = {}


def rows(cl, room=None):
    where = f" WHERE room_id = '{room}'" if room else ""
    out = cl.mysql("SELECT event_id, room_id, event_type, status, retry_count, sinks_done"
                   f" FROM room_outbox{where} ORDER BY id")
    return [{"event_id": e, "room_id": r, "event_type": t, "status": s, "retry_count": int(n),
             "sinks_done": int(d)} for e, r, t, s, n, d in out]


def post(cl, k, path, body):
    st, _, js = cl.nodes[k % len(cl.nodes)].post(path, dict(body, command_id=hu.cid("acc")))
    assert st in (200, 201), (path, st, js)
    return js


def commands(cl, room):
    post(cl, 0, "/v1/rooms", {"room_id": room, "owner_uid": 7, "title": "acc"})
    for u in range(1, 4):
        post(cl, u, f"/v1/rooms/{room}/join", {"uid": 100 + u})


def delivered(cl, room):
    rs = rows(cl, room)
    return rs and all(x["status"] == "delivered" for x in rs) and rs


def outage_row(cl, room, stop, start, what):
    stop()
    try:
        commands(cl, room)
        time.sleep(2.5)  # several retry rounds with IM / activity / MQ down
        rs = rows(cl, room)
        assert len(rs) == 4, rs
        for x in rs:
            assert x["status"] in ("retryable", "pending", "delivering"), (what, x)
            assert x["retry_count"] == 0, (what, "an outage costs no attempt", x)
        # the workers met the outage (else the rows merely waited and this proves nothing)
        assert any(x["status"] == "retryable" for x in rs), (what, "no row retryable", rs)
    finally:
        start()
    return wait_until(lambda: delivered(cl, room), timeout=40, what=f"delivered after {what}")


def test_im_down():
    cl, im = CTX["cl"], CTX["im"]
    rs = outage_row(cl, "acc-im", im.stop, im.start, "IM down")
    for x in rs:
        assert len(im.messages(x["event_id"])) == 1, x


def test_activity_down():
    cl, act = CTX["cl"], CTX["act"]
    rs = outage_row(cl, "acc-act", act.stop, act.start, "activity down")
    got = {c["event_id"] for c in act.calls()}
    assert {x["event_id"] for x in rs} <= got


def test_mq_down():
    cl = CTX["cl"]

    def down():
        for n in (1, 2, 3):
            cl.nats.kill(n)

    def up():
        for n in (1, 2, 3):
            cl.nats.restart(n)
        cl.nats.wait_jetstream()
    outage_row(cl, "acc-mq", down, up, "MQ down")


def test_poison():
    cl, im = CTX["cl"], CTX["im"]
    post(cl, 0, "/v1/rooms", {"room_id": "acc-p", "owner_uid": 7, "title": "acc"})
    wait_until(lambda: delivered(cl, "acc-p"), timeout=20, what="RoomCreated delivered")
    im.control(slow={"api": "send_group_msg", "ms": 1500, "count": 1000, "match": "4242"})
    try:
        post(cl, 1, "/v1/rooms/acc-p/join", {"uid": 4242})
        post(cl, 2, "/v1/rooms/acc-p/join", {"uid": 77})

        def settled():
            js = [x for x in rows(cl, "acc-p") if x["event_type"] == "RoomUserJoined"]
            return len(js) == 2 and js[0]["status"] == "failed" and \
                js[1]["status"] == "delivered" and js
        js = wait_until(settled, timeout=60, what="the poison failed, the next delivered")
        assert js[0]["retry_count"] == MAX_RETRY, js[0]
    finally:
        im.control(reset=True)


TESTS = [test_im_down, test_activity_down, test_mq_down, test_poison]


def main():
    if listing():
        run(TESTS, fixture="topology")
    need("127.0.0.1", MYSQL_PORT, "mariadbd (scripts/servers.sh)")
    need("127.0.0.1", REDIS_PORT, "redis-server (scripts/servers.sh)")
    if not ActivityStandin.available():
        print("FAIL: node + @grpc/grpc-js missing (scripts/deps.sh installs them)")
        sys.exit(1)
    im = ImStandin(TMP).start()
    act = ActivityStandin(TMP).start()
    cl = Cluster(TMP, extra={
        "tencent_im": im.conf(timeout="400ms"), "activity": act.conf(),
        "outbox_worker": {"publish_mode": "dual", "max_retry_count": MAX_RETRY,
                          "publish_timeout": "1s", "lock_timeout": "10s",
                          "initial_backoff": "100ms", "max_backoff": "300ms",
                          "circuit_failures": 3, "circuit_probe_every": "500ms"}})
    try:
        os.environ.update(ENV)  # the nodes read the IM secret from their environment
        cl.start()
        CTX.update(cl=cl, im=im, act=act)
        run(TESTS, fixture="topology")
    finally:
        cl.stop()
        im.stop()
        act.stop()


if __name__ == "__main__":
    main()
