# SPDX-License-Identifier: Apache-2.0
"""test_room_events: exact catch-up, GET /v1/rooms/{id}/events?after_seq=N&limit=M (issue 30),
against a real roomd.
- a client reading from after_seq 0 in pages while commands run gets every event once, in
  room_seq order 1, 2, ... without a gap, equal (event ids, in order) to what the log sink
  (the stream) delivered; on SQLite and on MariaDB;
- once retention purged the delivered rows: 410 events_purged naming the oldest available seq;
  reading on from the room's latest seq works;
- bad input: 400 naming after_seq / limit; an unknown room 404.
Run: python3 tests/integ/test_room_events.py (ROOMD_BUILD_DIR=build-asan)."""
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import http_util as hu  # noqa: E402
import roomd_test as rt  # noqa: E402


def page(rd, rid, after, limit=20):
    return hu.expect_ok(rd.http("GET", f"/v1/rooms/{rid}/events?after_seq={after}&limit={limit}"),
                        "events")


def commands(rd, rid, n, done, errors):
    """n commands on rid: per ten, 4 joins (100..103), a gift (100 -> 1), 4 leaves
    (100..103), then 104 joins (even tens) or leaves (odd)."""
    try:
        for i in range(n):
            k = i % 10
            if k < 4:
                hu.expect_ok(hu.join(rd, rid, 100 + k), "join")
            elif k == 4:
                hu.expect_ok(hu.gift(rd, rid, 100, 1, unit_price=1), "gift")
            elif k < 9:
                hu.expect_ok(hu.leave(rd, rid, 95 + k), "leave")
            elif (i // 10) % 2 == 0:
                hu.expect_ok(hu.join(rd, rid, 104), "join")
            else:
                hu.expect_ok(hu.leave(rd, rid, 104), "leave")
    except Exception as e:  # noqa: BLE001 (reported by the test)
        errors.append(repr(e))
    finally:
        done.set()


def catch_up_while_running(overrides=None):
    rd = rt.Roomd(overrides or {}).start()
    try:
        rid = hu.room_name("ev")
        hu.expect_ok(hu.create(rd, rid, owner=1), "create")
        hu.expect_ok(hu.join(rd, rid, 1), "owner joins")
        done, errors = threading.Event(), []
        t = threading.Thread(target=commands, args=(rd, rid, 120, done, errors))
        t.start()
        seen, after = [], 0
        while True:
            js = page(rd, rid, after)
            for e in js["events"]:
                seen.append((e["room_seq"], e["event_id"]))
            after = js["next_after_seq"]
            if done.is_set() and not js["more"] and after == js["latest_seq"]:
                js = page(rd, rid, after)  # nothing committed since
                if not js["events"]:
                    break
            time.sleep(0.01)
        t.join()
        assert not errors, errors
        seqs = [s for s, _ in seen]
        assert seqs == list(range(1, len(seqs) + 1)), seqs[:20]  # once each, in order, no gap
        stream = hu.wait_events(rd, rid, len(seen), timeout=20)
        by_seq = sorted((e["room_seq"], e["event_id"]) for e in stream)
        assert by_seq == seen, (len(by_seq), len(seen))
        assert js["latest_seq"] == len(seen), js
        # 1 create + 1 join + 120 commands; a leave of an unseated member is one event
        assert len(seen) >= 122, len(seen)
    finally:
        rd.stop()


def test_catch_up_sqlite():
    catch_up_while_running()


def test_catch_up_mariadb():
    import test_wallet_money as wm  # its private database on the test server
    catch_up_while_running(wm.mysql_store())


def test_purged_and_bad_input():
    rd = rt.Roomd({"store": {"retention": {"delivered_max_age": "1s",
                                           "purge_interval": "200ms"}}}).start()
    try:
        rid = hu.room_name("ep")
        hu.expect_ok(hu.create(rd, rid, owner=1), "create")
        for uid in (2, 3, 4):
            hu.expect_ok(hu.join(rd, rid, uid), "join")
        js = page(rd, rid, 0)
        assert [e["room_seq"] for e in js["events"]] == [1, 2, 3, 4], js
        assert [e["event_type"] for e in js["events"]][1:] == ["RoomUserJoined"] * 3, js
        js = page(rd, rid, 2, limit=1)
        assert [e["room_seq"] for e in js["events"]] == [3] and js["more"], js

        def gone():  # every row purged (a part purged already answers 410, naming the first)
            st, _, b = rd.http("GET", f"/v1/rooms/{rid}/events?after_seq=0")
            return b if st == 410 and b["error"]["oldest_available_seq"] == 5 else None
        b = rt.wait_until(gone, timeout=20, what="the delivered rows purged")
        assert b["error"]["code"] == "events_purged", b
        assert b["error"]["oldest_available_seq"] == 5 and b["error"]["latest_seq"] == 4, b
        # from the room's latest seq (GET /v1/rooms/{id} after a 410) it reads on
        hu.expect_ok(hu.join(rd, rid, 5), "join")
        js = page(rd, rid, 4)
        assert [e["room_seq"] for e in js["events"]] == [5], js
        for q, field in (("after_seq=-1", "after_seq"), ("after_seq=x", "after_seq"),
                         ("limit=0", "limit"), ("limit=1001", "limit")):
            hu.expect_error(rd.http("GET", f"/v1/rooms/{rid}/events?{q}"), 400, "invalid_argument",
                            field)
        hu.expect_error(rd.http("GET", "/v1/rooms/never-made/events"), 404, "not_found")
    finally:
        rd.stop()


if __name__ == "__main__":
    rt.run([test_catch_up_sqlite, test_catch_up_mariadb, test_purged_and_bad_input])
