# SPDX-License-Identifier: Apache-2.0
"""test_http_projection: GET /v1/rooms (the ranked, paged room list) and
GET /v1/users/{uid}/presence against a real roomd on the default (memory) projection, the
validation of their parameters, 503 when a Redis projection cannot answer, and the rebuild of
the memory projection from the store after a restart.

Run: python3 tests/integ/test_http_projection.py (PYTHONPATH=tests, ROOMD_BUILD_DIR=build)
"""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import http_util as hu  # noqa: E402
from roomd_test import Roomd, free_port, run, wait_until  # noqa: E402

TMP = tempfile.mkdtemp(prefix="roomd-proj-")
RD = {}


def subdir(name):
    d = os.path.join(TMP, name)
    os.makedirs(d, exist_ok=True)
    return d


def shared():
    if "rd" not in RD:
        RD["rd"] = Roomd(tmp=subdir("shared")).start()
    return RD["rd"]


_apps = iter(range(1, 10000))


def new_app():
    """A fresh X-App-Code, so each test sees only its own rooms."""
    return f"p{os.getpid() % 10000}x{next(_apps)}"


def rooms(rd, app, query=""):
    st, hd, js = rd.http("GET", "/v1/rooms" + query, headers={"X-App-Code": app})
    assert st == 200, (st, js)
    assert hd.get("Content-Type", "").startswith("application/json"), hd
    assert set(js) == {"rooms", "next_cursor"}, js
    return js


def ids(page):
    return [r["room_id"] for r in page["rooms"]]


def presence(rd, app, uid):
    st, _, js = rd.http("GET", f"/v1/users/{uid}/presence", headers={"X-App-Code": app})
    assert st == 200, (st, js)
    assert js["uid"] == uid, js
    return js["room_id"]


def populate(rd, app):
    """Rooms with 3, 1, 2 and 0 members plus a closed one; returns their ids."""
    a, b, c, e, z = (hu.room_name(t) for t in ("a", "b", "c", "e", "z"))
    for rid in (a, b, c, e, z):
        hu.expect_ok(hu.create(rd, rid, owner=1, title=f"t-{rid}", app=app), "create")
    for rid, uids in ((a, [11, 12, 13]), (b, [21]), (c, [31, 32]), (z, [91])):
        for u in uids:
            hu.expect_ok(hu.join(rd, rid, u, app=app), "join")
    hu.expect_ok(hu.close(rd, z, 1, app=app), "close")
    return a, b, c, e, z


def test_list_ranked_and_paged():
    rd, app = shared(), new_app()
    a, b, c, e, z = populate(rd, app)
    page = rooms(rd, app)
    assert ids(page) == [a, c, b, e], page  # by online count; the closed room is not listed
    assert page["next_cursor"] is None, page
    first = page["rooms"][0]
    assert first["online"] == 3 and first["title"] == f"t-{a}" and first["owner_uid"] == 1, first
    assert first["version"] == 4, first  # create + 3 joins
    p1 = rooms(rd, app, "?limit=2")
    assert ids(p1) == [a, c] and p1["next_cursor"] == 2, p1
    p2 = rooms(rd, app, f"?cursor={p1['next_cursor']}&limit=2")
    assert ids(p2) == [b, e] and p2["next_cursor"] is None, p2
    assert ids(rooms(rd, app, "?cursor=4&limit=2")) == [], "past the end"
    assert ids(rooms(rd, app, "?cursor=&limit=")) == [a, c, b, e], "empty values: defaults"
    # another app sees none of them
    assert rooms(rd, new_app())["rooms"] == []


def test_gifts_break_online_ties():
    rd, app = shared(), new_app()
    x, y = hu.room_name("x"), hu.room_name("y")
    for rid in (x, y):
        hu.expect_ok(hu.create(rd, rid, owner=1, app=app), "create")
        hu.expect_ok(hu.join(rd, rid, 5, app=app), "join")
        hu.expect_ok(hu.join(rd, rid, 6, app=app), "join")
    hu.expect_ok(hu.gift(rd, x, 5, 6, count=3, unit_price=10, app=app), "gift")
    page = rooms(rd, app)
    # both have 2 online; x holds recent gifts (the gift was not its first projection)
    assert ids(page) == [x, y], page
    gx = page["rooms"][0]
    assert gx["recent_gifts"] == 30 and gx["gift_total"] == 30, gx


def test_presence_follows_joins_and_leaves():
    rd, app = shared(), new_app()
    r1, r2 = hu.room_name("p"), hu.room_name("q")
    for rid in (r1, r2):
        hu.expect_ok(hu.create(rd, rid, owner=1, app=app), "create")
    assert presence(rd, app, 700) is None
    hu.expect_ok(hu.join(rd, r1, 700, app=app), "join r1")
    assert presence(rd, app, 700) == r1
    st, _, js = rd.http("GET", "/v1/users/700/presence", headers={"X-App-Code": app})
    assert js.get("since_ms", 0) > 0, js
    hu.expect_ok(hu.join(rd, r2, 700, app=app), "join r2")
    assert presence(rd, app, 700) == r2  # the room joined last
    hu.expect_ok(hu.leave(rd, r1, 700, app=app), "leave r1")
    assert presence(rd, app, 700) == r2  # leaving the other room does not clear it
    hu.expect_ok(hu.leave(rd, r2, 700, app=app), "leave r2")
    assert presence(rd, app, 700) is None
    hu.expect_ok(hu.join(rd, r1, 701, app=app), "join")
    hu.expect_ok(hu.kick(rd, r1, 1, 701, app=app), "kick")
    assert presence(rd, app, 701) is None
    assert presence(rd, new_app(), 700) is None  # per app


def test_parameters_validated():
    rd = shared()
    for q, field in (("?cursor=-1", "cursor"), ("?cursor=abc", "cursor"), ("?cursor=1.5", "cursor"),
                     ("?cursor=99999999999999999999", "cursor"), ("?limit=0", "limit"),
                     ("?limit=101", "limit"), ("?limit=x", "limit"), ("?limit=+5", "limit"),
                     ("?cursor=0&limit=-3", "limit")):
        hu.expect_error(rd.http("GET", "/v1/rooms" + q), 400, "invalid_argument", field, what=q)
    for uid in ("0", "abc", "-4", "1x", "99999999999999999999", "007"):
        hu.expect_error(rd.http("GET", f"/v1/users/{uid}/presence"), 400, "invalid_argument",
                        "uid", what=uid)
    hu.expect_error(rd.http("GET", "/v1/rooms", headers={"X-App-Code": "BAD"}), 400,
                    field="X-App-Code")
    hu.expect_error(rd.http("DELETE", "/v1/rooms"), 405, "method_not_allowed")
    hu.expect_error(rd.http("POST", "/v1/users/5/presence", {}), 405, "method_not_allowed")
    hu.expect_ok(rd.http("GET", "/v1/rooms?limit=100&unknown=1"), "unknown args are ignored")


def test_redis_projection_unreachable_503():
    dead = free_port()  # nothing listens there
    rd = Roomd({"redis": {"enabled": True, "addr": f"127.0.0.1:{dead}",
                          "connect_timeout": "100ms", "command_timeout": "200ms"},
                "projection": {"driver": "redis"}}, tmp=subdir("dead"))
    rd.start()
    try:
        # commands still succeed: the projection is best effort
        rid = hu.room_name()
        hu.expect_ok(hu.create(rd, rid), "create with the projection down")
        st, hd, js = rd.http("GET", "/v1/rooms")
        hu.expect_error((st, hd, js), 503, "unavailable")
        assert hd.get("Retry-After") == "1", hd
        hu.expect_error(rd.http("GET", "/v1/users/3/presence"), 503, "unavailable")
    finally:
        assert rd.stop() == 0


def test_memory_projection_rebuilt_after_restart():
    d = subdir("restart")
    rd = Roomd(tmp=d)
    rd.start()
    app = new_app()
    a, b, c, e, z = populate(rd, app)
    hu.expect_ok(hu.gift(rd, b, 21, 21, count=2, unit_price=7, app=app), "gift")
    before = rooms(rd, app)
    assert rd.stop() == 0
    rd.start()
    try:
        # the memory projection starts empty and is rebuilt from the store in the background
        page = wait_until(lambda: (lambda p: p if ids(p) == ids(before) else None)(rooms(rd, app)),
                          timeout=10, what="rebuilt room list")
        for got, want in zip(page["rooms"], before["rooms"]):
            for k in ("room_id", "title", "owner_uid", "online", "gift_total", "version",
                      "updated_at_ms"):
                assert got[k] == want[k], (k, got, want)
        assert presence(rd, app, 12) == a and presence(rd, app, 31) == c
        assert presence(rd, app, 91) is None  # its room is closed
        assert any(j.get("apps") == 1 and j.get("rooms") == 4
                   for j in rd.json_log("rebuilt from the store")), "no rebuild logged"
        # live updates go on after the rebuild
        hu.expect_ok(hu.join(rd, e, 55, app=app), "join after restart")
        assert presence(rd, app, 55) == e
    finally:
        assert rd.stop() == 0


def test_zz_stop_is_clean():
    if "rd" in RD:
        assert RD["rd"].stop() == 0


if __name__ == "__main__":
    try:
        run([test_list_ranked_and_paged, test_gifts_break_online_ties,
             test_presence_follows_joins_and_leaves, test_parameters_validated,
             test_redis_projection_unreachable_503, test_memory_projection_rebuilt_after_restart,
             test_zz_stop_is_clean],
        fixture="shared_roomd")
    finally:
        for r in RD.values():
            try:
                r.stop()
            except Exception:  # noqa: BLE001
                pass
        shutil.rmtree(TMP, ignore_errors=True)
