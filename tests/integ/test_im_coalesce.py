# SPDX-License-Identifier: Apache-2.0
"""test_im_coalesce.py: IM that keeps up (issue 30) and IM's rate limit as an outage (issue 29),
against the Tencent IM stand-in (tests/standins/im_standin.py) enforcing Tencent's limits.

1. 500 joins in 5 s in one Public room, 48 leaves, 3 mic changes and 10 gifts in between, the stand-in enforcing 40 msgs/s
   per group (10023 above it) and 200 calls/s per API: the direct IM sink coalesces the
   lagging group's state messages (tencent_im.coalesce_after, default 2 s), so IM's view of
   the room (its member list, the member count of the last message) equals the room's within
   3 s of the last join; every gift has its own message; every join is in exactly one message
   (its own or a RoomStateCoalesced covering its room_seq); the group's messages are in
   room_seq order; roomd_im_coalesced_total > 0; 0 failed rows.
2. The stand-in answering IM's group frequency limit (10023) to every send_group_msg, then
   HTTP 429 to every call, each for longer than max_retry_count x max_backoff: no attempt is
   counted (retry_count 0 throughout), 0 failed rows, all delivered once IM admits again.
   Then 10023 starting in the middle of a batch, after IM answered its first row: the rest of
   the batch is throttled, retry_count 0 for every row, the IM circuit never opens.
3. The IM bridge consumer group (publish_mode mq, JetStream) through the same 10023 answers,
   longer than consumer_max_reconsume_times x its retry delays: 0 dead letters, every event
   done in the group's inbox with 0 failures, each join's message in IM.
"""
import collections
import json
import os
import sqlite3
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "standins"))
import roomd_test as rt  # noqa: E402
import http_util as hu  # noqa: E402
from standins import ImStandin, TEST_SECRET  # noqa: E402

ENV = {"TIM_TEST_SECRET": TEST_SECRET}
rows = hu.outbox_rows
all_delivered = hu.outbox_all_delivered
cmd = hu.post_ok


def group_messages(im, group):
    """The group's messages as IM stored them, in IM's MsgSeq order, their Data decoded."""
    ms = [m for m in im.messages() if m["GroupId"] == group and m["Data"]]
    ms.sort(key=lambda m: m["MsgSeq"])
    return [dict(m, data=json.loads(m["Data"])) for m in ms]


def last_member_count(msgs):
    for m in reversed(msgs):
        p = m["data"].get("payload", {})
        if "member_count" in p:
            return p["member_count"]
    return None


def test_500_joins_coalesced():
    tmp = tempfile.mkdtemp(prefix="im-coalesce-")
    im = ImStandin(tmp).start()
    im.control(limits={"per_api": 200, "per_group": 40})
    r = rt.Roomd({"tencent_im": im.conf(group_type="Public"),
                  "outbox_worker": {"max_retry_count": 3, "initial_backoff": "100ms",
                                    "max_backoff": "500ms"}}, tmp=tmp).start(env=ENV)
    room, group = "big", "hyapp_big"
    try:
        cmd(r, "/v1/rooms", {"room_id": room, "owner_uid": 7, "title": "big"})
        cmd(r, f"/v1/rooms/{room}/join", {"uid": 7})
        cmd(r, f"/v1/rooms/{room}/join", {"uid": 8})
        rt.wait_until(lambda: all_delivered(r), timeout=20, what="the room's start delivered")
        n, threads, errs = 500, 8, []
        t0 = time.time()

        def joiner(k):
            mine = []
            for i in range(k, n, threads):
                delay = t0 + i * 5.0 / n - time.time()  # 100 joins/s for 5 s
                if delay > 0:
                    time.sleep(delay)
                st, _, js = r.post(f"/v1/rooms/{room}/join",
                                   {"command_id": f"j{i}", "uid": 1000 + i})
                if st != 200:
                    errs.append((st, js))
                mine.append(1000 + i)
                if len(mine) % 10 == 0:  # now and then one of this thread's joins leaves
                    st, _, js = r.post(f"/v1/rooms/{room}/leave",
                                       {"command_id": f"l{i}", "uid": mine[-5]})
                    if st != 200:
                        errs.append((st, js))
                if k == 0 and len(mine) in (3, 20, 40):  # and a mic goes up
                    st, _, js = r.post(f"/v1/rooms/{room}/mic/up",
                                       {"command_id": f"m{i}", "uid": mine[-1]})
                    if st != 200:
                        errs.append((st, js))

        def gifter():
            for g in range(10):
                delay = t0 + 0.25 + g * 0.5 - time.time()
                if delay > 0:
                    time.sleep(delay)
                st, _, js = r.post(f"/v1/rooms/{room}/gifts",
                                   {"command_id": f"g{g}", "uid": 8, "to_uid": 7,
                                    "gift_id": "rose", "count": 1, "unit_price": 10})
                if st != 200:
                    errs.append((st, js))
        ts = [threading.Thread(target=joiner, args=(k,)) for k in range(threads)]
        ts.append(threading.Thread(target=gifter))
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        t_end = time.time()
        assert not errs, errs[:3]
        print(f"  {n} joins and 10 gifts sent in {t_end - t0:.1f}s")
        got = hu.room_of(hu.expect_ok(hu.get_room(r, room), "GET room"))
        want = sorted(str(u) for u in hu.members(got))
        leaves = n // threads // 10 * threads
        assert len(want) == n + 2 - leaves, (len(want), leaves)

        def im_view_equal():
            g = im.state_now()["groups"][group]
            return sorted(g["members"]) == want and \
                last_member_count(group_messages(im, group)) == len(want)
        try:
            rt.wait_until(im_view_equal, timeout=30, step=0.1,
                          what="IM's view equals the room's")
        except AssertionError:
            g = im.state_now()["groups"][group]
            st = collections.Counter((x["status"], x["retry_count"]) for x in rows(r))
            print(f"  IM members {len(g['members'])} (room {len(want)}), last member count "
                  f"{last_member_count(group_messages(im, group))}; rows {dict(st)}; "
                  f"errors {[x['last_error'] for x in rows(r) if x['last_error']][:3]}")
            raise
        caught_up = time.time() - t_end
        print(f"  IM's view (members, last member count) equal to the room's "
              f"{caught_up:.2f}s after the last command")
        rt.wait_until(lambda: all_delivered(r), timeout=30, what="all rows delivered")
        rs = rows(r)
        assert not [x for x in rs if x["status"] == "failed"], "0 failed rows"
        msgs = group_messages(im, group)
        by_id = collections.Counter(m["data"]["event_id"] for m in msgs)
        coalesced = [m["data"] for m in msgs if m["data"]["event_type"] == "RoomStateCoalesced"]
        # every gift: its own message, once
        gifts = [x for x in rs if x["event_type"] == "RoomGiftSent"]
        assert len(gifts) == 10
        for x in gifts:
            own = [m for m in msgs if m["data"]["event_id"] == x["event_id"]]
            assert len(own) == 1 and own[0]["data"]["event_type"] == "RoomGiftSent", (x, own)
        # every join in exactly one message: its own or a coalesced one covering its room_seq
        joins = [x for x in rs if x["event_type"] == "RoomUserJoined" and x["room_id"] == room]
        for x in joins:
            own = [m for m in msgs if m["data"]["event_id"] == x["event_id"]
                   and m["data"]["event_type"] == "RoomUserJoined"]
            cover = [c for c in coalesced
                     if c["coalesced"]["from_seq"] <= x["room_seq"] <= c["coalesced"]["to_seq"]]
            assert len(own) + len(cover) == 1, (x, own, cover)
        # the group's messages in room_seq order (a coalesced one at its last event)
        seqs = [m["data"]["room_seq"] for m in msgs]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), seqs[:50]
        assert max(by_id.values()) == 1, by_id.most_common(3)
        for c in coalesced:
            assert c["coalesced"]["count"] >= 2 and "RoomGiftSent" not in \
                c["coalesced"]["event_types"], c["coalesced"]
        m = hu.metrics(r)
        n_coalesced = m.get('roomd_im_coalesced_total{event_type="RoomUserJoined"}', 0)
        assert n_coalesced > 0, "nothing was coalesced (else this test proves nothing)"
        assert n_coalesced == sum(c["coalesced"]["event_types"].get("RoomUserJoined", 0)
                                  for c in coalesced), (n_coalesced, len(coalesced))
        kinds = collections.Counter()
        for c in coalesced:
            kinds.update(c["coalesced"]["event_types"])
        print(f"  coalesced: {dict(kinds)}")
        sends = im.calls("send_group_msg")
        refused = [c for c in sends if c.get("code") == 10023]
        print(f"  {len(rs)} rows delivered, 0 failed; {len(msgs)} group messages, "
              f"{len(coalesced)} of them coalesced covering {int(n_coalesced)} joins; "
              f"{len(refused)} of {len(sends)} sends refused by the 40/s group limit")
        assert caught_up <= 3.0, f"IM caught up {caught_up:.2f}s after the end (want <= 3 s)"
        assert r.stop() == 0, "roomd exits cleanly (no sanitizer report)"
    finally:
        r.stop()
        im.stop()


def rate_limited_run(script, what):
    """One room (AVChatRoom); IM answers `script` for 3 s (> max_retry_count 2 x max_backoff
    200 ms) while 5 joins and a gift go on: no attempt counted, nothing failed, all delivered
    after, one message each."""
    tmp = tempfile.mkdtemp(prefix="im-limited-")
    im = ImStandin(tmp).start()
    r = rt.Roomd({"tencent_im": im.conf(timeout="1s"),
                  "outbox_worker": {"max_retry_count": 2, "initial_backoff": "100ms",
                                    "max_backoff": "200ms", "publish_timeout": "1s",
                                    "lock_timeout": "5s", "circuit_failures": 2,
                                    "circuit_probe_every": "300ms"}}, tmp=tmp).start(env=ENV)
    try:
        cmd(r, "/v1/rooms", {"room_id": "lim", "owner_uid": 7, "title": "limited"})
        cmd(r, "/v1/rooms/lim/join", {"uid": 7})
        rt.wait_until(lambda: all_delivered(r), timeout=20, what="the room's start delivered")
        im.control(**script)
        t0 = time.time()
        for u in range(20, 25):
            cmd(r, "/v1/rooms/lim/join", {"uid": u})
        cmd(r, "/v1/rooms/lim/gifts", {"uid": 20, "to_uid": 7, "gift_id": "rose", "count": 1,
                                       "unit_price": 10})
        seen = set()
        while time.time() < t0 + 2.8:
            for x in rows(r):
                assert x["status"] != "failed" and x["retry_count"] == 0, x
                if x["status"] == "retryable":
                    seen.add(x["event_id"])
                    assert any(w in (x["last_error"] or "") for w in (
                        "rate limit", "rate-limits", "circuit open", "held")), x
            time.sleep(0.1)
        assert seen, "no row met the rate limit (else this test proves nothing)"
        rt.wait_until(lambda: all_delivered(r), timeout=30, what="all delivered after it")
        for x in rows(r):
            assert x["retry_count"] == 0, x
            assert len(im.messages(x["event_id"])) == 1, x
        limited = hu.metrics(r).get("roomd_tim_rate_limited_total", 0)
        assert limited > 0, limited
        print(f"  {what}: {len(seen)} rows waited out IM's rate limit, 0 attempts counted, "
              f"0 failed ({int(limited)} rate-limit answers)")
        assert r.stop() == 0, "roomd exits cleanly (no sanitizer report)"
    finally:
        r.stop()
        im.stop()


def sent_with(im, text):
    """The send_group_msg calls IM got (on arrival) whose body contains text."""
    return [c for c in im.calls("send_group_msg") if text in json.dumps(c.get("body"))]


def rate_limit_mid_batch():
    """IM's rate limit starting in the middle of a batch, after IM answered its first row: the
    batch's other rows are throttled (sink.h ROOMD_ELIMIT), not the poison rule's "no answer
    while the sink answers other calls", so retry_count stays 0 for every row, nothing fails,
    and the IM circuit never opens though the limit outlasts circuit_failures calls.
    One worker thread: a slow first join (room mb0) holds it while the joins of mb1..mb5 are
    committed, so they are taken as one batch; mb1's join is answered slowly, and the rate
    limit (10023 to every send for 5 s, longer than publish_timeout 3 s, so the batch's
    deadline passes waiting it out) begins while that answer is on its way."""
    tmp = tempfile.mkdtemp(prefix="im-limited-mid-")
    im = ImStandin(tmp).start()
    r = rt.Roomd({"tencent_im": im.conf(timeout="2s"),
                  "outbox_worker": {"workers": 1, "max_retry_count": 2,
                                    "initial_backoff": "100ms", "max_backoff": "200ms",
                                    "publish_timeout": "3s", "lock_timeout": "10s",
                                    "circuit_failures": 2, "circuit_probe_every": "300ms"}},
                 tmp=tmp).start(env=ENV)
    try:
        for k in range(6):
            cmd(r, "/v1/rooms", {"room_id": f"mb{k}", "owner_uid": 7, "title": "mid-batch"})
        rt.wait_until(lambda: all_delivered(r), timeout=20, what="the rooms' start delivered")
        im.control(slow={"api": "send_group_msg", "match": "770000", "ms": 1200, "count": 1})
        im.control(slow={"api": "send_group_msg", "match": "770001", "ms": 1500, "count": 1})
        cmd(r, "/v1/rooms/mb0/join", {"uid": 770000})
        rt.wait_until(lambda: sent_with(im, "770000"), timeout=10, what="mb0's join sent")
        for k in range(1, 6):
            cmd(r, f"/v1/rooms/mb{k}/join", {"uid": 770000 + k})
        rt.wait_until(lambda: sent_with(im, "770001"), timeout=10,
                      what="the batch's first row (mb1's join) sent")
        im.control(fail={"api": "send_group_msg", "code": 10023, "info": "group freq",
                         "for_ms": 5000})
        t0 = time.time()
        seen = set()
        while time.time() < t0 + 5.5:
            for x in rows(r):
                assert x["status"] != "failed" and x["retry_count"] == 0, x
                if x["status"] == "retryable":
                    seen.add(x["event_id"])
                    assert "rate limit" in (x["last_error"] or ""), x
            time.sleep(0.1)
        assert seen, "no row met the rate limit (else this test proves nothing)"
        joins = [x for x in rows(r) if x["event_type"] == "RoomUserJoined"]
        first = [x for x in joins if x["room_id"] == "mb1"]
        assert first and first[0]["event_id"] not in seen, \
            ("mb1's join was answered before the limit (else the limit did not start mid-batch)",
             first)
        rt.wait_until(lambda: all_delivered(r), timeout=30, what="all delivered after it")
        for x in rows(r):
            assert x["retry_count"] == 0, x
            assert len(im.messages(x["event_id"])) == 1, x
        m = hu.metrics(r)
        assert m.get('roomd_outbox_sink_circuit_opened_total{sink="tim"}', 0) == 0, m
        assert m.get('roomd_outbox_attempts_total{sink="tim",outcome="throttled"}', 0) > 0, m
        print(f"  rate limit mid-batch: {len(seen)} rows throttled after IM answered the "
              f"batch's first, 0 attempts counted, circuit never opened")
        assert r.stop() == 0, "roomd exits cleanly (no sanitizer report)"
    finally:
        r.stop()
        im.stop()


def test_rate_limit_costs_no_attempt():
    rate_limited_run({"fail": {"api": "send_group_msg", "code": 10023, "info": "group freq",
                               "for_ms": 3000}}, "10023 to send_group_msg")
    rate_limited_run({"http_status": {"api": "*", "status": 429, "for_ms": 3000}},
                     "HTTP 429 to every call")
    rate_limit_mid_batch()


def test_bridge_rate_limit_no_dead_letter():
    from test_bus_roomd import (G_IM, NATS_PORT, Events, bus_cfg, cleanup, db_rows,  # noqa
                                group_db, new_ns)
    from bus_util import Nats, js_all, js_consumer_idle
    rt.need("127.0.0.1", NATS_PORT, "nats-server")
    tmp, ns = tempfile.mkdtemp(prefix="im-bridge-limited-"), new_ns()
    im = ImStandin(tmp).start()
    r = rt.Roomd(bus_cfg(tmp, ns, extra={
        "tencent_im": im.conf(timeout="1s"),
        # an event's IM budget: max(publish_timeout, tencent_im.timeout) = 1 s, so 4 s of
        # 10023 would be 3 failures (> 2 reconsumes: a dead letter) if they counted
        "outbox_worker": {"publish_timeout": "1s", "lock_timeout": "5s"},
        "rocketmq": {"consumer_circuit_probe_every": "300ms",
                     "room_outbox": {"tencent_im_consumer_enabled": True}}}), tmp=tmp)
    r.start(env=ENV)
    nc = Nats(NATS_PORT)
    try:
        room = f"bl{os.getpid()}"
        ev = Events(r)
        ev.do("/v1/rooms", {"room_id": room, "owner_uid": 1, "title": "limited"})
        db = group_db(tmp, G_IM)
        rt.wait_until(lambda: os.path.exists(db) and js_consumer_idle(
            nc, ns + "hyapp_room_outbox", G_IM), timeout=30, what="create bridged")
        # 4 s of 10023: far longer than 2 reconsumes x (200 + 400 ms)
        im.control(fail={"api": "send_group_msg", "code": 10023, "for_ms": 4000})
        for u in range(5, 9):
            ev.do(f"/v1/rooms/{room}/join", {"uid": u})
        time.sleep(4.5)
        rt.wait_until(lambda: db_rows(db, "SELECT state, COUNT(*) FROM inbox GROUP BY state")
                      == [("done", len(ev.ids()))], timeout=30, what="every event done")
        assert db_rows(db, "SELECT COUNT(*) FROM inbox WHERE failures > 0") == [(0,)], \
            db_rows(db, "SELECT key, failures, last_error FROM inbox")
        assert js_all(nc, ns + "hyapp_dlq") == [], "no dead letter"
        for eid in ev.ids():
            assert len(im.messages(eid)) == 1, eid
        refused = [c for c in im.calls("send_group_msg") if c.get("code") == 10023]
        assert refused, "IM refused nothing (else this test proves nothing)"
        print(f"  IM bridge: {len(refused)} sends refused by 10023 for 4 s, 0 failures "
              f"counted, 0 dead letters")
        assert r.stop() == 0, "roomd exits cleanly (no sanitizer report)"
    finally:
        nc.close()
        r.stop()
        im.stop()
        cleanup(ns)


if __name__ == "__main__":
    rt.run([test_500_joins_coalesced, test_rate_limit_costs_no_attempt,
            test_bridge_rate_limit_no_dead_letter])
