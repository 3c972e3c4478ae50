# SPDX-License-Identifier: Apache-2.0
"""test_direct_activity.py: a real roomd in publish_mode direct against the activity-service
gRPC stand-in (tests/standins/activity_standin.js, @grpc/grpc-js, a separate process).
The seed's acceptance row "activity down: commands succeed; rows retried; delivered after
recovery", the status mapping (INVALID_ARGUMENT permanent), and per-sink state: with IM and
activity both configured and activity down, a retry does not send to IM again."""
import os
import sqlite3
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "standins"))
import roomd_test as rt  # noqa: E402
import http_util as hu  # noqa: E402
from standins import ActivityStandin, ImStandin, TEST_SECRET  # noqa: E402

ENV = {"TIM_TEST_SECRET": TEST_SECRET}
rows = hu.outbox_rows
all_delivered = hu.outbox_all_delivered
cmd = hu.post_ok
SINK_TIM, SINK_ACTIVITY = 2, 4


def start(tmp, act, im=None, outbox=None):
    # ordering none: these tests look at each row's own outcome (per-room order, which
    # holds a room's later rows behind a retried one, is tested in test_outbox_worker)
    ob = {"max_retry_count": 12, "initial_backoff": "200ms", "max_backoff": "1s",
          "publish_timeout": "3s", "lock_timeout": "10s", "ordering": "none"}
    ob.update(outbox or {})
    cfg = {"activity": act.conf(), "outbox_worker": ob}
    if im is not None:
        cfg["tencent_im"] = im.conf()
    return rt.Roomd(cfg, tmp=tmp).start(env=ENV)


def test_happy_path():
    tmp = tempfile.mkdtemp(prefix="direct-act-")
    act = ActivityStandin(tmp).start()
    r = start(tmp, act)
    try:
        cmd(r, "/v1/rooms", {"room_id": "a1", "owner_uid": 1, "title": "t"})
        cmd(r, "/v1/rooms/a1/join", {"uid": 2})
        rt.wait_until(lambda: all_delivered(r), timeout=15, what="delivered")
        got = {c["event_id"]: c for c in act.calls()}
        for x in rows(r):
            assert x["sinks_done"] & SINK_ACTIVITY, x
            c = got[x["event_id"]]  # the packed envelope arrived and decoded
            assert c["event_type"] == x["event_type"] and c["room_id"] == "a1", c
            assert c["payload_len"] > 0
        assert r.stop() == 0, "roomd exits cleanly (no sanitizer report)"
    finally:
        r.stop()
        act.stop()


def test_down_then_recovered():
    tmp = tempfile.mkdtemp(prefix="direct-act-")
    act = ActivityStandin(tmp)  # not started
    r = start(tmp, act)
    try:
        t0 = time.time()
        cmd(r, "/v1/rooms", {"room_id": "a2", "owner_uid": 1, "title": "t"})
        cmd(r, "/v1/rooms/a2/join", {"uid": 2})
        assert time.time() - t0 < 2, "commands are not held by a down activity service"
        # an outage costs no attempt (issue 12): retryable, retry_count stays 0
        rt.wait_until(lambda: all(x["status"] == "retryable" and x["last_error"]
                                  for x in rows(r)), timeout=10, what="rows retried")
        time.sleep(1.5)  # several retries
        assert all(("activity UNAVAILABLE" in x["last_error"] or "circuit open" in x["last_error"])
                   and x["retry_count"] == 0 for x in rows(r)), rows(r)
        act.start()
        t1 = time.time()
        rt.wait_until(lambda: all_delivered(r), timeout=15, what="delivered after recovery")
        print(f"  delivered {time.time() - t1:.2f}s after the activity service came back")
        ids = {c["event_id"] for c in act.calls() if c["status"] == 0}
        assert ids == {x["event_id"] for x in rows(r)}
        # A restart of the service while roomd keeps its channel.
        act.stop()
        cmd(r, "/v1/rooms/a2/leave", {"uid": 2})
        rt.wait_until(lambda: any(x["status"] == "retryable" for x in rows(r)), timeout=10,
                      what="leave retryable")
        act.start()
        rt.wait_until(lambda: all_delivered(r), timeout=15, what="delivered after restart")
        assert r.stop() == 0, "roomd exits cleanly (no sanitizer report)"
    finally:
        r.stop()
        act.stop()


def test_invalid_argument_is_permanent():
    tmp = tempfile.mkdtemp(prefix="direct-act-")
    act = ActivityStandin(tmp).start()
    r = start(tmp, act)
    try:
        cmd(r, "/v1/rooms", {"room_id": "a3", "owner_uid": 1, "title": "t"})
        rt.wait_until(lambda: all_delivered(r), timeout=15, what="created delivered")
        act.fail(3, details="bad event")  # INVALID_ARGUMENT
        cmd(r, "/v1/rooms/a3/join", {"uid": 2})
        rt.wait_until(lambda: any(x["status"] == "failed" for x in rows(r)), timeout=15,
                      what="row failed")
        x = [x for x in rows(r) if x["event_type"] == "RoomUserJoined"][0]
        assert x["retry_count"] == 1 and "activity INVALID_ARGUMENT" in x["last_error"], x
        act.fail(6)  # ALREADY_EXISTS counts as delivered
        cmd(r, "/v1/rooms/a3/leave", {"uid": 2})
        rt.wait_until(lambda: [y["status"] for y in rows(r)
                               if y["event_type"] == "RoomUserLeft"] == ["delivered"],
                      timeout=15, what="ALREADY_EXISTS delivered")
        assert r.stop() == 0, "roomd exits cleanly (no sanitizer report)"
    finally:
        r.stop()
        act.stop()


def test_retry_skips_sinks_done():
    tmp = tempfile.mkdtemp(prefix="direct-act-")
    act = ActivityStandin(tmp)  # down
    im = ImStandin(tmp).start()
    r = start(tmp, act, im=im)
    try:
        cmd(r, "/v1/rooms", {"room_id": "a4", "owner_uid": 1, "title": "t"})
        cmd(r, "/v1/rooms/a4/join", {"uid": 2})
        rt.wait_until(lambda: all(x["last_error"] and x["sinks_done"] & SINK_TIM
                                  for x in rows(r)), timeout=15, what="IM done, activity failing")
        time.sleep(2.5)  # several retries (outages: no attempt counted)
        for x in rows(r):
            assert x["status"] == "retryable" and x["retry_count"] == 0, x
            assert x["sinks_done"] & SINK_TIM and not x["sinks_done"] & SINK_ACTIVITY, x
        # IM got each event once: the retries went to the activity sink only.
        sends = im.calls("send_group_msg")
        assert len(sends) == len(rows(r)), sends
        act.start()
        rt.wait_until(lambda: all_delivered(r), timeout=15, what="delivered")
        assert len(im.calls("send_group_msg")) == len(rows(r))
        assert r.stop() == 0, "roomd exits cleanly (no sanitizer report)"
    finally:
        r.stop()
        act.stop()
        im.stop()


def test_mq_activity_consumer_calls_service():
    """publish_mode mq (issue 26): the activity consumer group calls the activity-service's
    gRPC room event entry (the direct sink's call, the same stand-in) for every room fact,
    each event_id once; while the service is down room_outbox still goes delivered (the broker
    took the events) and the group's redeliveries reach the service once it is back."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bus_util import Nats, envelope, js_all, js_consumer_idle, js_delete_stream, js_publish
    nats_port = rt.env_port("ROOMD_NATS_PORT", 4333)
    rt.need("127.0.0.1", nats_port, "nats-server")
    tmp = tempfile.mkdtemp(prefix="mq-act-")
    act = ActivityStandin(tmp).start()
    port = rt.free_port()
    topic = f"mq_act_{port}"
    r = rt.Roomd({"activity": act.conf(),
                  "outbox_worker": {"publish_mode": "mq", "max_retry_count": 12,
                                    "initial_backoff": "200ms", "max_backoff": "1s"},
                  "rocketmq": {"enabled": True, "consumer_retry_delays_ms": [200],
                               "name_servers": [f"nats://127.0.0.1:{nats_port}"],
                               "room_outbox": {"enabled": True, "topic": topic,
                                               "activity_consumer_enabled": True}}},
                 tmp=tmp, port=port).start(env=ENV)
    try:
        cmd(r, "/v1/rooms", {"room_id": "m1", "owner_uid": 1, "title": "t"})
        cmd(r, "/v1/rooms/m1/join", {"uid": 2})
        rt.wait_until(lambda: all_delivered(r), timeout=15, what="rows in the broker")
        ids = {x["event_id"] for x in rows(r)}
        rt.wait_until(lambda: ids <= {c["event_id"] for c in act.calls()}, timeout=20,
                      what="the activity group called the service")
        for c in act.calls():
            assert c["room_id"] == "m1" and c["payload_len"] > 0, c
        # idempotent by event_id: the same event on the stream again (a second copy under
        # another Nats-Msg-Id, as a redelivery after a lost ack brings it) is settled by the
        # group's inbox without a second call to the service
        nc = Nats(nats_port)
        try:
            subj, hdrs, data = js_all(nc, topic)[0]
            dup = envelope(data)["event_id"]
            keep = {k: v for k, v in hdrs.items() if k != "Nats-Msg-Id" and k[0] != ":"}
            js_publish(nc, subj, data, msg_id=f"dup-{dup}", headers=keep)
            rt.wait_until(lambda: js_consumer_idle(nc, topic, "hyapp-activity-room-outbox"),
                          timeout=20, what="the copy consumed")
        finally:
            nc.close()
        calls = [c["event_id"] for c in act.calls()]
        assert all(calls.count(i) == 1 for i in ids), (dup, calls)
        act.stop()
        cmd(r, "/v1/rooms/m1/join", {"uid": 3})
        rt.wait_until(lambda: all_delivered(r), timeout=15, what="delivered = in the broker")
        late = {x["event_id"] for x in rows(r)} - ids
        act.start()
        rt.wait_until(lambda: late <= {c["event_id"] for c in act.calls()}, timeout=30,
                      what="redelivered to the service once it is back")
        assert r.stop() == 0, "roomd exits cleanly (no sanitizer report)"
    finally:
        r.stop()
        act.stop()
        nc = Nats(nats_port)
        js_delete_stream(nc, topic)
        nc.close()


if __name__ == "__main__":
    if not ActivityStandin.available():
        if os.environ.get("ROOMD_REQUIRE_SERVERS", "") not in ("", "0"):
            print("FAIL: node + @grpc/grpc-js missing (scripts/deps.sh installs them)")
            sys.exit(1)
        print("SKIP: node + @grpc/grpc-js missing (scripts/deps.sh installs them)")
        sys.exit(77)
    rt.run([test_happy_path, test_down_then_recovered, test_invalid_argument_is_permanent,
            test_retry_skips_sinks_done, test_mq_activity_consumer_calls_service])
