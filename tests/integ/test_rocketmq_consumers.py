# SPDX-License-Identifier: Apache-2.0
"""test_rocketmq_consumers: the consumer groups inside roomd on the rocketmq driver, against
the RocketMQ stand-in (never a real broker).

1. activity group: clustering consumption with broker offsets: gifts are counted once; roomd
   restarted (offsets committed to the broker, the inbox deduplicating): later gifts counted,
   nothing twice; every event's key done in the group's inbox.
2. IM bridge with IM failing: each failing event goes through %RETRY%hyapp-room-im-bridge
   (send-back with a delay level) and, after consumer_max_reconsume_times failures, to
   %DLQ%hyapp-room-im-bridge; the inbox says dead; room_outbox is untouched.
3. rocket-open: roomd's own group on hyapp_room_rocket_launch launches the rocket within 1 s of
   launch_at_ms (the timer message, then the group's short wait); a wake-up ali-ons produces
   for a rocket the room never had is consumed, refused by the Room Cell (permanent) and
   dead-lettered to %DLQ%hyapp-room-rocket-open; nothing else launches.
4. tools/roomd_consumer runs a group on the rocketmq driver.
5. IM outage (issue 29's rule on this driver, consume/verdict.c): the IM stand-in down ~8 s,
   more than 10 times max_reconsume x the retry delays: /readyz degraded naming IM and
   roomd_dependency_up{dependency="im"} 0 during it; after it every event done, 0 failures in
   the inbox, no send-back to %RETRY% (the queue was suspended and retried locally), nothing in
   %DLQ%, retried{reason="failure"} 0 and {reason="outage"} > 0, lag 0. Then a poison event
   (IM answers 502) still goes 2 x %RETRY% then %DLQ% (reason max_reconsume).

Run: python3 tests/integ/test_rocketmq_consumers.py (PYTHONPATH=tests, ROOMD_BUILD_DIR=build)"""
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "standins"))
from roomd_test import Roomd, listing, run, wait_until  # noqa: E402
from bus_util import envelope, pb_encode, pb_fields  # noqa: E402
from http_util import room_name  # noqa: E402
from rocketmq_util import RocketStandin, alions_available, alions_produce  # noqa: E402
from test_bus_roomd import (Events, db_rows, group_db, ignite, outbox,  # noqa: E402
                            start_consumer, stop_proc, totals)
from test_rocketmq_roomd import ROCKET, TOPIC, messages_by_key, rmq_cfg  # noqa: E402

G_IM, G_ACT, G_ROCKET = "hyapp-room-im-bridge", "hyapp-activity-room-outbox", \
    "hyapp-room-rocket-open"


def group_extra(tmp, extra):
    base = {"rocketmq": {"consumer_store_dir": os.path.join(tmp, "consumers"),
                         "consumer_retry_delays_ms": [200, 400],
                         "room_outbox": {"consumer_max_reconsume_times": 2}}}
    for k, v in extra.items():
        base.setdefault(k, {})
        for kk, vv in v.items():
            if isinstance(vv, dict) and isinstance(base[k].get(kk), dict):
                base[k][kk].update(vv)
            else:
                base[k][kk] = vv
    return base


def test_activity_group_offsets_and_restart():
    with tempfile.TemporaryDirectory() as tmp:
        b = RocketStandin(tmp, topics=[TOPIC]).start()
        cfg = rmq_cfg(b, extra=group_extra(tmp, {
            "rocketmq": {"room_outbox": {"activity_consumer_enabled": True}}}))
        r = Roomd(cfg, tmp=tmp)
        try:
            r.start()
            room = room_name()
            ev = Events(r).room(room)
            for i in range(4):
                ev.gift(room, i + 1, 10)
            db = group_db(tmp, G_ACT)
            wait_until(lambda: os.path.exists(db) and totals(db) == [(10, 100)], timeout=30,
                       what="activity counted the gifts")
            r.stop()
            offs = {k: v for k, v in b.stats()["offsets"].items() if k.startswith(G_ACT + "@")}
            assert sum(v for k, v in offs.items() if f"@{TOPIC}@" in k) == len(ev.ids()), offs
            r.start()
            ev.gift(room, 5, 10)
            wait_until(lambda: totals(db) == [(15, 150)], timeout=30,
                       what="the gift after the restart, nothing twice")
            wait_until(lambda: sorted(k for (k,) in db_rows(
                db, "SELECT key FROM inbox WHERE state = 'done'")) == sorted(ev.ids()),
                timeout=20, what="every key done")
            time.sleep(1.0)
            assert totals(db) == [(15, 150)]
        finally:
            r.stop()
            b.stop()


def test_im_bridge_retry_then_dlq():
    from standins import ImStandin, TEST_SECRET
    with tempfile.TemporaryDirectory() as tmp:
        b = RocketStandin(tmp, topics=[TOPIC]).start()
        im = ImStandin(tmp).start()
        cfg = rmq_cfg(b, extra=group_extra(tmp, {
            "tencent_im": im.conf(timeout="1s"),
            "rocketmq": {"room_outbox": {"tencent_im_consumer_enabled": True}}}))
        r = Roomd(cfg, tmp=tmp)
        r.start(env={"TIM_TEST_SECRET": TEST_SECRET})
        try:
            room = room_name()
            ev = Events(r)
            ev.do("/v1/rooms", {"room_id": room, "owner_uid": 1, "title": "dlq"})
            db = group_db(tmp, G_IM)
            wait_until(lambda: os.path.exists(db) and db_rows(
                db, "SELECT state FROM inbox") == [("done",)], timeout=30, what="create bridged")
            im.control(http_status={"api": "*", "status": 502, "count": 100000})
            ev.do(f"/v1/rooms/{room}/join", {"uid": 5})
            ev.do(f"/v1/rooms/{room}/join", {"uid": 6})
            failing = ev.ids()[1:]
            dlq_topic, retry_topic = f"%DLQ%{G_IM}", f"%RETRY%{G_IM}"
            dlq = wait_until(lambda: (lambda m: m if len(m) == 2 else None)(
                b.stats([dlq_topic])["messages"][dlq_topic]), timeout=60, what="dead letters")
            assert sorted(m["props"]["KEYS"] for m in dlq) == sorted(failing), dlq
            assert all(envelope(m["body"])["event_id"] == m["props"]["KEYS"] for m in dlq)
            assert all(m["props"]["RETRY_TOPIC"] == TOPIC for m in dlq), dlq
            retried = b.stats([retry_topic])["messages"][retry_topic]
            per_key = {}
            for m in retried:
                per_key[m["props"]["KEYS"]] = per_key.get(m["props"]["KEYS"], 0) + 1
            assert per_key == {k: 2 for k in failing}, per_key  # 1 + 2 reconsumes, then DLQ
            want = {"done": 1, "dead": 2}
            wait_until(lambda: dict(db_rows(db, "SELECT state, COUNT(*) FROM inbox GROUP BY "
                                        "state")) == want, timeout=10, what=f"inbox {want}")
            assert all(v[0] == "delivered" and v[1] == 0 for v in outbox(r).values())
        finally:
            r.stop()
            im.stop()
            b.stop()


def test_rocket_open_group_on_time():
    with tempfile.TemporaryDirectory() as tmp:
        b = RocketStandin(tmp, topics=[TOPIC, ROCKET]).start()
        cfg = rmq_cfg(b, extra=group_extra(tmp, {
            "rocketmq": {"rocket_launch": {"enabled": True}},
            "room": {"rocket": {"thresholds": [100, 5000], "countdown": "3s"}}}))
        r = Roomd(cfg, tmp=tmp)
        try:
            r.start()
            room = room_name()
            launch_at, rocket_id, level = ignite(Events(r), room)

            def launched():
                return [envelope(m["body"]) for m in messages_by_key(b, TOPIC).values()
                        if m["props"]["TAGS"] == "RoomRocketLaunched"]
            got = wait_until(launched, timeout=20, what="launched by the group")
            assert len(got) == 1 and got[0]["room_id"] == room, got
            late = pb_fields(got[0]["payload"]).get(3, 0) - launch_at
            print(f"  launched {late} ms after launch_at_ms")
            assert 0 <= late <= 1000, late
            # a stale wake-up from another producer (ali-ons): consumed, nothing launched
            stale = pb_encode([(1, "hyapp"), (2, room), (3, "rk-none"), (4, 1),
                               (5, int(time.time() * 1000) - 1000), (6, "c-none")])
            rc, _, err = alions_produce(b.name_servers, ROCKET, [
                {"tags": "wakeup", "keys": ["rocket-hyapp-x-none"], "body": stale}])
            assert rc == 0, err
            db = group_db(tmp, G_ROCKET)
            # its rocket_id is no rocket of the room: LaunchRocket refuses it (permanent),
            # so the group dead-letters it to %DLQ%, as RocketMQ would
            key = "rocket-hyapp-%s-rk-none" % room
            wait_until(lambda: db_rows(db, f"SELECT state FROM inbox WHERE key = '{key}'")
                       == [("dead",)], timeout=20, what="the foreign wake-up consumed")
            dlq = b.stats([f"%DLQ%{G_ROCKET}"])["messages"][f"%DLQ%{G_ROCKET}"]
            assert [pb_fields(m["body"])[3] for m in dlq] == [b"rk-none"], dlq
            time.sleep(0.5)
            assert len(launched()) == 1
        finally:
            r.stop()
            b.stop()


def test_roomd_consumer_tool_on_rocketmq():
    """tools/roomd_consumer runs the activity group on the rocketmq driver too."""
    with tempfile.TemporaryDirectory() as tmp:
        b = RocketStandin(tmp, topics=[TOPIC]).start()
        r = Roomd(rmq_cfg(b, extra=group_extra(tmp, {})), tmp=tmp)
        cons = None
        try:
            r.start()
            cons = start_consumer(r, "activity")
            room = room_name()
            ev = Events(r).room(room)
            ev.gift(room, 2, 10)
            db = group_db(tmp, G_ACT)
            wait_until(lambda: os.path.exists(db) and totals(db) == [(2, 20)], timeout=30,
                       what="roomd_consumer counted the gift")
        finally:
            stop_proc(cons)
            r.stop()
            b.stop()


def test_im_outage_costs_no_reconsume_then_poison_dead():
    import http_util as hu
    from standins import ImStandin, TEST_SECRET
    with tempfile.TemporaryDirectory() as tmp:
        b = RocketStandin(tmp, topics=[TOPIC]).start()
        im = ImStandin(tmp).start()
        cfg = rmq_cfg(b, extra=group_extra(tmp, {
            "tencent_im": im.conf(timeout="1s"),
            "rocketmq": {"consumer_circuit_failures": 2, "consumer_circuit_probe_every": "500ms",
                         "room_outbox": {"tencent_im_consumer_enabled": True}}}))
        r = Roomd(cfg, tmp=tmp)
        r.start(env={"TIM_TEST_SECRET": TEST_SECRET})
        dlq_topic, retry_topic = f"%DLQ%{G_IM}", f"%RETRY%{G_IM}"

        def m(name):
            return hu.metrics(r).get(name)

        def states():
            return dict(db_rows(db, "SELECT state, COUNT(*) FROM inbox GROUP BY state"))

        def topic_msgs(t):
            return b.stats([t])["messages"].get(t, [])
        try:
            room = room_name()
            ev = Events(r)
            ev.do("/v1/rooms", {"room_id": room, "owner_uid": 1, "title": "outage"})
            db = group_db(tmp, G_IM)
            wait_until(lambda: os.path.exists(db) and states() == {"done": 1}, timeout=30,
                       what="create bridged")
            assert m('roomd_dependency_up{dependency="im"}') == 1
            t0 = time.time()
            im.stop()
            for uid in range(10, 16):
                ev.do(f"/v1/rooms/{room}/join", {"uid": uid})

            def degraded():
                st, _, js = r.admin("GET", "/readyz")
                c = (js or {}).get("checks", {}).get("consumers", "")
                return (st == 200 and js.get("status") == "degraded" and "im unreachable" in c
                        and m('roomd_dependency_up{dependency="im"}') == 0)
            wait_until(degraded, timeout=20, step=0.3, what="degraded naming IM")
            time.sleep(max(0.0, 8.0 - (time.time() - t0)))
            assert degraded()
            assert states().get("dead", 0) == 0 and topic_msgs(dlq_topic) == []
            outage_s = time.time() - t0
            im.start()
            n = len(ev.ids())
            wait_until(lambda: states() == {"done": n}, timeout=60, step=0.3,
                       what="every event done after the outage")
            fails = db_rows(db, "SELECT key, failures, last_error FROM inbox WHERE failures > 0")
            assert fails == [], fails
            assert topic_msgs(retry_topic) == [], "the outage sent messages back to %RETRY%"
            assert topic_msgs(dlq_topic) == []
            assert m(f'roomd_consumer_retried_total{{group="{G_IM}",reason="failure"}}') == 0
            outages = m(f'roomd_consumer_retried_total{{group="{G_IM}",reason="outage"}}')
            skipped = m(f'roomd_consumer_retried_total{{group="{G_IM}",reason="circuit_open"}}')
            assert outages > 0
            assert m(f'roomd_consumer_circuit_opened_total{{group="{G_IM}"}}') >= 1
            assert sum(m(f'roomd_consumer_dead_letters_total{{group="{G_IM}",reason="{w}"}}')
                       for w in ("permanent", "max_reconsume", "undecodable", "no_verdict")) == 0
            wait_until(lambda: m('roomd_dependency_up{dependency="im"}') == 1 and
                       r.admin("GET", "/readyz")[2].get("status") == "ready", timeout=20,
                       what="ready again")
            wait_until(lambda: m(f'roomd_consumer_lag{{group="{G_IM}"}}') == 0 and
                       m(f'roomd_consumer_oldest_unacked_age_seconds{{group="{G_IM}"}}') == 0,
                       timeout=20, what="lag 0")
            print(f"  outage {outage_s:.1f} s (reconsumes allowed: 2 x 200/400 ms): {n} events "
                  f"done, {outages:.0f} outage retries, {skipped:.0f} skipped by the open "
                  f"circuit, 0 send-backs, 0 dead letters")
            # a poison event while IM answers: the event's failure, counted, then %DLQ%
            im.control(http_status={"api": "*", "status": 502, "count": 100000})
            ev.do(f"/v1/rooms/{room}/join", {"uid": 99})
            poison = ev.ids()[-1]
            dlq = wait_until(lambda: topic_msgs(dlq_topic) or None, timeout=30, what="poison DLQ")
            im.control(reset=True)
            assert [x["props"]["KEYS"] for x in dlq] == [poison], dlq
            assert [x["props"]["KEYS"] for x in topic_msgs(retry_topic)] == [poison] * 2
            wait_until(lambda: m(f'roomd_consumer_dead_letters_total{{group="{G_IM}",'
                                 f'reason="max_reconsume"}}') == 1, timeout=10,
                       what="the dead letter counted")
            assert m(f'roomd_consumer_retried_total{{group="{G_IM}",reason="failure"}}') == 2
            wait_until(lambda: m(f'roomd_consumer_dlq_messages{{group="{G_IM}"}}') == 1,
                       timeout=15, what="the %DLQ% gauge")
        finally:
            r.stop()
            im.stop()
            b.stop()


if __name__ == "__main__":
    if not listing() and not alions_available():
        print("FAIL: ali-ons not installed in tests/standins (npm ci there)")
        sys.exit(1)
    run([test_activity_group_offsets_and_restart, test_im_bridge_retry_then_dlq,
         test_rocket_open_group_on_time, test_roomd_consumer_tool_on_rocketmq,
         test_im_outage_costs_no_reconsume_then_poison_dead])
