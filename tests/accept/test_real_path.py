# SPDX-License-Identifier: Apache-2.0
"""test_real_path: the seed's acceptance row "real path" (真实链路): create / join / mic /
sendGift / leave over HTTP against a real roomd each log exactly one room_command_timing JSON
line carrying every field of ARCHITECTURE §9 with the right types, and the log sink receives
each command's events (event_id, room_version, command_id as answered).

Run: python3 tests/accept/test_real_path.py (PYTHONPATH=tests, ROOMD_BUILD_DIR=build)
"""
import os
import re
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integ"))
import http_util as hu  # noqa: E402
from roomd_test import Roomd, run, wait_until  # noqa: E402

MS_FIELDS = ["total_ms", "idempotency_ms", "lease_ms", "wallet_debit_ms", "save_mutation_ms",
             "snapshot_ms", "projection_ms", "activity_ms", "tencent_im_ms"]
STR_FIELDS = ["command", "app_code", "room_id", "command_id", "result"]
BOOL_FIELDS = ["activity_async_outbox", "tencent_im_async_outbox"]
UUID7 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def timing_lines(rd, command_id):
    return [j for j in rd.json_log("room_command_timing") if j.get("command_id") == command_id]


def check_timing(rd, command, command_id, room_id, ok=True):
    """Exactly one room_command_timing line for command_id, every §9 field, right types."""
    lines = wait_until(lambda: timing_lines(rd, command_id), timeout=5,
                       what=f"room_command_timing of {command}")
    time.sleep(0.05)
    lines = timing_lines(rd, command_id)
    assert len(lines) == 1, f"{command}: want exactly one timing line, got {lines}"
    t = lines[0]
    for f in STR_FIELDS:
        assert isinstance(t.get(f), str) and t[f], f"{command}: {f} missing or not a string: {t}"
    for f in MS_FIELDS:
        assert f in t and number(t[f]) and t[f] >= 0, f"{command}: {f} not a number >= 0: {t}"
    for f in BOOL_FIELDS:
        assert isinstance(t.get(f), bool), f"{command}: {f} missing or not a bool: {t}"
    assert t["command"] == command, t
    assert t["app_code"] == "hyapp" and t["room_id"] == room_id, t
    assert t["activity_ms"] == 0, f"activity_ms is always 0: {t}"
    assert t["tencent_im_ms"] == 0, f"IM is disabled here, tencent_im_ms must be 0: {t}"
    if command != "SendGift":
        assert t["wallet_debit_ms"] == 0, f"{command} debits nothing: {t}"
    parts = sum(t[f] for f in MS_FIELDS if f != "total_ms")
    assert t["total_ms"] + 1 >= parts, f"stages exceed the total: {t}"
    if not ok:
        assert t["activity_async_outbox"] is False and t["tencent_im_async_outbox"] is False, \
            f"a refused {command} writes no outbox row: {t}"
    return t


def test_real_path():
    rd = Roomd().start()
    try:
        rid = hu.room_name("real")
        steps = []  # (command name, command_id, answer)

        def step(name, fn, **kw):
            c = hu.cid(name)
            js = hu.expect_ok(fn(command_id=c, **kw), name)
            steps.append((name, c, js))
            return js

        step("CreateRoom", lambda **kw: hu.create(rd, rid, owner=1, title="real path", **kw))
        step("JoinRoom", lambda **kw: hu.join(rd, rid, 2, **kw))
        step("JoinRoom", lambda **kw: hu.join(rd, rid, 3, **kw))
        step("MicUp", lambda **kw: hu.mic_up(rd, rid, 2, seat=1, **kw))
        step("SendGift", lambda **kw: hu.gift(rd, rid, 3, 2, count=2, unit_price=15, **kw))
        step("MicDown", lambda **kw: hu.mic_down(rd, rid, 2, **kw))
        step("LeaveRoom", lambda **kw: hu.leave(rd, rid, 3, **kw))

        ok_results = set()
        for i, (name, c, js) in enumerate(steps):
            assert js["version"] == i + 1, (name, js)
            t = check_timing(rd, name, c, rid)
            ok_results.add(t["result"])
        assert len(ok_results) == 1, f"successful commands disagree on result: {ok_results}"

        # a refused command logs one line too, with another result
        refused = hu.cid("refused")
        hu.expect_error(hu.leave(rd, rid, 999, command_id=refused), 409)
        t = check_timing(rd, "LeaveRoom", refused, rid, ok=False)
        assert t["result"] not in ok_results, t

        # the log sink received every event, each tied to its command and version
        evs = hu.wait_events(rd, rid, len(steps))
        by_cid = {}
        for e in evs:
            assert UUID7.match(e["event_id"]), e
            assert e["app_code"] == "hyapp" and e["room_id"] == rid, e
            by_cid.setdefault(e["command_id"], []).append(e)
        assert len({e["event_id"] for e in evs}) == len(evs), "duplicate event_id"
        want = {"CreateRoom": "RoomCreated", "JoinRoom": "RoomUserJoined",
                "MicUp": "RoomMicChanged", "MicDown": "RoomMicChanged",
                "SendGift": "RoomGiftSent", "LeaveRoom": "RoomUserLeft"}
        for name, c, js in steps:
            got = by_cid.get(c, [])
            assert [e["event_type"] for e in got] == [want[name]], (name, got)
            assert got[0]["room_version"] == js["version"], (name, got[0], js["version"])
            assert number(got[0]["occurred_at_ms"]) and got[0]["occurred_at_ms"] > 0, got[0]
            assert isinstance(got[0].get("payload"), dict), got[0]
        assert refused not in by_cid, "a refused command produced an event"
    finally:
        assert rd.stop() == 0


if __name__ == "__main__":
    run([test_real_path])
