# SPDX-License-Identifier: Apache-2.0
"""test_http_conventions: the HTTP conventions clients expect, against a real roomd process:
Idempotency-Key as the command_id (a body command_id that differs is 400), CreateRoom 201 with
Location, HEAD on every GET route, writes refused without Content-Type: application/json (415),
the error body {"error":{...}} throughout.

Run: python3 tests/integ/test_http_conventions.py (PYTHONPATH=tests, ROOMD_BUILD_DIR=build)
"""
import atexit
import http.client
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
import http_util as hu  # noqa: E402
from roomd_test import ROOMD, Roomd, run  # noqa: E402

RD = None


def shared():
    global RD
    if RD is None:
        RD = Roomd()
        atexit.register(RD.stop)
        RD.start()
    return RD


def raw(rd, method, path, body=None, headers=None, port=None):
    """One request with exactly these headers (no default Content-Type)."""
    c = http.client.HTTPConnection("127.0.0.1", port or rd.port, timeout=30)
    c.request(method, path, body=body, headers=headers or {})
    r = c.getresponse()
    data = r.read()
    hd = dict(r.getheaders())
    c.close()
    try:
        js = json.loads(data) if data else None
    except ValueError:
        js = data
    return r.status, hd, js, data


def is_error(js, code=None):
    assert isinstance(js, dict) and isinstance(js.get("error"), dict), js
    assert isinstance(js["error"].get("code"), str) and isinstance(js["error"].get("message"), str)
    if code:
        assert js["error"]["code"] == code, js


def test_create_is_201_with_location():
    rd = shared()
    rid = hu.room_name("hc")
    st, hd, js = rd.post("/v1/rooms", {"command_id": hu.cid(), "room_id": rid, "owner_uid": 1,
                                       "title": "t"})
    assert st == 201, (st, js)
    assert hd.get("Location") == f"/v1/rooms/{rid}", hd
    assert js["room_id"] == rid and js["version"] == 1, js
    st, _, room = rd.http("GET", hd["Location"])
    assert st == 200 and room["room_id"] == rid, room
    # a generated room_id: Location names it
    st, hd, js = rd.post("/v1/rooms", {"command_id": hu.cid(), "owner_uid": 1, "title": "t"})
    assert st == 201 and hd.get("Location") == f"/v1/rooms/{js['room_id']}", (st, hd, js)
    # the replay is the first answer again: 201, Location, Idempotent-Replay
    body = {"command_id": hu.cid(), "room_id": hu.room_name("hc"), "owner_uid": 1, "title": "t"}
    st1, hd1, js1 = rd.post("/v1/rooms", body)
    st2, hd2, js2 = rd.post("/v1/rooms", body)
    assert (st1, st2) == (201, 201) and hd2.get("Idempotent-Replay") == "true", (st2, hd2)
    assert hd2.get("Location") == hd1.get("Location") and js2 == js1
    # other commands stay 200, a refused create is not 201
    st, hd, _ = rd.post(f"/v1/rooms/{rid}/join", {"command_id": hu.cid(), "uid": 2})
    assert st == 200 and "Location" not in hd, (st, hd)
    hu.expect_error(rd.post("/v1/rooms", {"command_id": hu.cid(), "room_id": rid,
                                          "owner_uid": 1, "title": "t"}), 409, "room_exists")


def test_idempotency_key_header():
    rd = shared()
    rid = hu.room_name("hc")
    key = hu.cid("key")
    # the header alone is the command_id
    st, hd, js = rd.post("/v1/rooms", {"room_id": rid, "owner_uid": 1, "title": "t"},
                         headers={"Idempotency-Key": key})
    assert st == 201, (st, js)
    # the same key again, with or without the same command_id in the body: a replay
    for body in ({"room_id": rid, "owner_uid": 1, "title": "t"},
                 {"command_id": key, "room_id": rid, "owner_uid": 1, "title": "t"}):
        st, hd, js2 = rd.post("/v1/rooms", body, headers={"Idempotency-Key": key})
        assert st == 201 and hd.get("Idempotent-Replay") == "true" and js2 == js, (st, hd, js2)
    # a body command_id first sent without the header replays under the header
    c = hu.cid()
    st, _, first = rd.post(f"/v1/rooms/{rid}/join", {"command_id": c, "uid": 5})
    assert st == 200
    st, hd, again = rd.post(f"/v1/rooms/{rid}/join", {"uid": 5}, headers={"Idempotency-Key": c})
    assert st == 200 and hd.get("Idempotent-Replay") == "true" and again == first, (st, hd)
    v = hu.version(rd, rid)
    # a body command_id that differs from the header: 400 naming command_id, nothing done
    hu.expect_error(rd.post(f"/v1/rooms/{rid}/join", {"command_id": "other", "uid": 6},
                            headers={"Idempotency-Key": hu.cid()}), 400, "invalid_argument",
                    "command_id")
    # a key that cannot be a command_id: 400 naming command_id
    hu.expect_error(rd.post(f"/v1/rooms/{rid}/join", {"uid": 6},
                            headers={"Idempotency-Key": "not an id!"}), 400, "invalid_argument",
                    "command_id")
    # the key with another request: 409 idempotency_key_reused
    hu.expect_error(rd.post(f"/v1/rooms/{rid}/join", {"uid": 7}, headers={"Idempotency-Key": c}),
                    409, "idempotency_key_reused")
    assert hu.version(rd, rid) == v


def routes():
    """[(method, pattern, port to reach it on)] of roomd --print-routes."""
    out = subprocess.run([ROOMD, "--print-routes"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    rd = shared()
    res = []
    for line in out.stdout.splitlines():
        m, p, on = line.split(" ")
        res.append((m, p, rd.port if "public" in on.split(",") else rd.admin_port))
    return res


def concrete(pattern, rid):
    return pattern.replace("{room_id}", rid).replace("{uid}", "2")


def test_head_on_every_get():
    rd = shared()
    rid = hu.room_name("hc")
    hu.expect_ok(rd.post("/v1/rooms", {"command_id": hu.cid(), "room_id": rid, "owner_uid": 1,
                                       "title": "t"}), "create", 201)
    table = routes()
    gets = [(p, port) for m, p, port in table if m == "GET"]
    assert gets and all(("HEAD", p, port) in table for p, port in gets), table
    for p, port in gets:
        path = concrete(p, rid)
        gst, ghd, _, gdata = raw(rd, "GET", path, port=port)
        hst, hhd, _, hdata = raw(rd, "HEAD", path, port=port)
        assert hst == gst, (path, hst, gst)
        assert hdata == b"", (path, hdata)
        assert hhd.get("Content-Type") == ghd.get("Content-Type"), (path, hhd, ghd)
        if p != "/metrics":  # the exposition changes between two requests
            assert hhd.get("Content-Length") == str(len(gdata)), (path, hhd, len(gdata))
    # HEAD of a room that does not exist: the GET's 404, no body
    st, _, _, data = raw(rd, "HEAD", "/v1/rooms/never-created")
    assert st == 404 and data == b"", (st, data)
    # a path without GET is not a HEAD path either; Allow lists HEAD beside GET
    st, hd, _, _ = raw(rd, "HEAD", f"/v1/rooms/{rid}/join")
    assert st == 405 and "HEAD" not in hd.get("Allow", ""), (st, hd)
    st, hd, js, _ = raw(rd, "DELETE", f"/v1/rooms/{rid}")
    assert st == 405 and hd.get("Allow") == "GET, HEAD", (st, hd)
    is_error(js, "method_not_allowed")


def test_writes_need_json_content_type():
    rd = shared()
    rid = hu.room_name("hc")
    hu.expect_ok(rd.post("/v1/rooms", {"command_id": hu.cid(), "room_id": rid, "owner_uid": 1,
                                       "title": "t"}), "create", 201)
    v = hu.version(rd, rid)
    # POST /callbacks/tim is not served (404) while tencent_im.callback is off, as here; on,
    # test_presence.test_im_state_callback drives it
    posts = [(concrete(p, rid), port) for m, p, port in routes()
             if m == "POST" and p != "/callbacks/tim"]
    assert posts
    body = json.dumps({"command_id": hu.cid(), "uid": 9})
    for path, port in posts:
        for headers in ({}, {"Content-Type": "text/plain"},
                        {"Content-Type": "application/x-www-form-urlencoded"},
                        {"Content-Type": "application/jsonx"}):
            st, _, js, _ = raw(rd, "POST", path, body, headers, port=port)
            assert st == 415, (path, headers, st, js)
            is_error(js, "unsupported_media_type")
    assert hu.version(rd, rid) == v
    # parameters and case do not matter
    for ct in ("application/json; charset=utf-8", "Application/JSON"):
        st, _, js, _ = raw(rd, "POST", f"/v1/rooms/{rid}/join",
                           json.dumps({"command_id": hu.cid(), "uid": 9}), {"Content-Type": ct})
        assert st in (200, 409), (ct, st, js)  # 409 already_member the second time
    assert hu.version(rd, rid) == v + 1
    # reads need no Content-Type
    st, _, _, _ = raw(rd, "GET", f"/v1/rooms/{rid}")
    assert st == 200


TESTS = [test_create_is_201_with_location, test_idempotency_key_header, test_head_on_every_get,
         test_writes_need_json_content_type]

if __name__ == "__main__":
    run(TESTS, fixture="http_conventions")
