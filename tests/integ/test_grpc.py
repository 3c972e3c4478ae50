# SPDX-License-Identifier: Apache-2.0
"""test_grpc: the gRPC API (docs/grpc.md, proto/room_service.proto) against a real roomd
process serving HTTP and gRPC, called by a real gRPC client (tests/standins/grpc_client.js on
@grpc/grpc-js, a separate process). Every RPC's happy path, each status code with its details
(google.rpc.ErrorInfo / BadRequest), idempotent replay across the two transports, the
idempotency-key and x-app-code metadata, a deadline that passes while a command commits, and
the endpoint x caller matrix of test_http_auth over every RPC (the same refused callers, each
refusal changing nothing; each RPC allowed to its own user or a service token, LaunchRocket to
the admin token only).

Run: python3 tests/integ/test_grpc.py (PYTHONPATH=tests, ROOMD_BUILD_DIR=build)
"""
import atexit
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import http_util as hu  # noqa: E402
import jwt_util as jw  # noqa: E402
from roomd_test import (SOURCE, Roomd, env_port, free_port, listing, run,  # noqa: E402
                        wait_until)

CLIENT = os.path.join(SOURCE, "tests", "standins", "grpc_client.js")
NODE_MODULES = os.path.join(SOURCE, "tests", "standins", "node_modules")

# gRPC status codes
OK, INVALID_ARGUMENT, DEADLINE_EXCEEDED, NOT_FOUND, ALREADY_EXISTS = 0, 3, 4, 5, 6
RESOURCE_EXHAUSTED, FAILED_PRECONDITION, ABORTED, UNIMPLEMENTED, UNAVAILABLE = 8, 9, 10, 12, 14
PERMISSION_DENIED, UNAUTHENTICATED = 7, 16
REDIS_PORT = env_port("ROOMD_REDIS_PORT", 6390)

RD = None


def grpc_roomd(env=None, overrides=None, tmp=None):
    gport = free_port()
    rd = Roomd(dict({"grpc": {"listen": f"127.0.0.1:{gport}", "workers": 8}}, **(overrides or {})),
               tmp=tmp)
    rd.grpc_port = gport
    rd.start(env=env)
    return rd


def shared():
    global RD
    if RD is None:
        RD = grpc_roomd()
        atexit.register(RD.stop)
    return RD


def calls(rd, batch):
    """Makes the calls of batch (grpc_client.js input) in order; returns their results."""
    out = subprocess.run(["node", CLIENT, "--target", f"127.0.0.1:{rd.grpc_port}"],
                         input=json.dumps(batch).encode(), capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr.decode()
    return json.loads(out.stdout)


def call(rd, method, request, metadata=None, service="RoomService", deadline_ms=10000):
    return calls(rd, [{"service": service, "method": method, "request": request,
                       "metadata": metadata or {}, "deadline_ms": deadline_ms}])[0]


def ok(res, what=""):
    assert res["code"] == OK, f"{what}: want OK, got {res['code']} {res['details']}"
    return res["response"]


def refused(res, code, reason=None, field=None, http_status=None, what=""):
    """Asserts a refusal: the status code, and the details trailer saying the same."""
    assert res["code"] == code, f"{what}: want {code}, got {res['code']} {res['details']}"
    assert res["details"], f"{what}: no status message"
    assert res["status_code"] == code, f"{what}: details say {res['status_code']}"
    info = res["error_info"]
    assert info and info["domain"] == "roomd", f"{what}: {res}"
    if reason:
        assert info["reason"] == reason, f"{what}: reason {info['reason']}, want {reason}"
    if http_status:
        assert info["metadata"]["http_status"] == str(http_status), f"{what}: {info}"
    if field:
        assert info["metadata"].get("field") == field, f"{what}: {info}"
        fv = res["bad_request"]["field_violations"]
        assert fv and fv[0]["field"] == field and fv[0]["description"], f"{what}: {fv}"
    return info


def new_room(rd, owner=1, metadata=None):
    rid = hu.room_name("g")
    js = ok(call(rd, "CreateRoom", {"command_id": hu.cid(), "room_id": rid, "owner_uid": owner,
                                    "title": "gRPC room"}, metadata), "create")
    return rid, js


# --- happy paths ---------------------------------------------------------------------------

def test_every_rpc():
    rd = shared()
    rid = hu.room_name("g")
    res = calls(rd, [
        {"method": "CreateRoom", "request": {"command_id": hu.cid(), "room_id": rid,
                                             "owner_uid": 1, "title": "Friday"}},
        {"method": "JoinRoom", "request": {"command_id": hu.cid(), "room_id": rid, "uid": 2}},
        {"method": "JoinRoom", "request": {"command_id": hu.cid(), "room_id": rid, "uid": 3}},
        {"method": "MicUp", "request": {"command_id": hu.cid(), "room_id": rid, "uid": 2,
                                        "seat": 0}},
        {"method": "MicUp", "request": {"command_id": hu.cid(), "room_id": rid, "uid": 3}},
        {"method": "MicDown", "request": {"command_id": hu.cid(), "room_id": rid, "uid": 3}},
        {"method": "SendGift", "request": {"command_id": hu.cid(), "room_id": rid, "uid": 3,
                                           "to_uid": 2, "gift_id": "rose", "count": 2,
                                           "unit_price": 15}},
        {"method": "KickUser", "request": {"command_id": hu.cid(), "room_id": rid,
                                           "operator_uid": 1, "uid": 3, "reason": "spam"}},
        {"method": "GetPresence", "request": {"uid": 2}},
        {"method": "LeaveRoom", "request": {"command_id": hu.cid(), "room_id": rid, "uid": 2}},
        {"method": "GetPresence", "request": {"uid": 2}},
        {"method": "GetRoom", "request": {"room_id": rid}},
        {"method": "ListRooms", "request": {"limit": 100}},
        {"method": "CloseRoom", "request": {"command_id": hu.cid(), "room_id": rid,
                                            "operator_uid": 1}},
    ])
    for i, r in enumerate(res):
        ok(r, f"call {i}")
    create, join2, _, mic0, mic_free, _, gift, kick, pres, leave, pres2, room, lst, close = \
        [r["response"] for r in res]
    assert create["room_id"] == rid and create["version"] == 1, create
    assert [e["event_type"] for e in create["events"]] == ["RoomCreated"], create
    assert create["room"]["title"] == "Friday" and create["room"]["status"] == "open", create
    # a command's answer is the room's summary: member_count, no member or ban list
    assert join2["version"] == 2 and join2["room"]["member_count"] == 1, join2
    assert not join2["room"].get("members"), join2
    assert mic0["room"]["seats"][0] == 2, mic0
    assert mic_free["room"]["seats"][1] == 3, mic_free  # no seat: the first free one
    assert gift["room"]["gift_total"] == 30, gift
    assert kick["room"]["member_count"] == 1 and not kick["room"].get("bans"), kick
    assert pres["uid"] == 2 and pres["room_id"] == rid and pres["since_ms"] > 0, pres
    assert pres2.get("room_id", "") == "", pres2  # in no room: the field stays empty
    assert leave["room"].get("member_count", 0) == 0, leave
    assert room["room_id"] == rid and room["version"] == leave["version"], room
    assert room["bans"][0]["uid"] == 3 and not room.get("members"), room  # GetRoom: the lists
    assert rid in [r["room_id"] for r in lst["rooms"]], lst
    assert close["room"]["status"] == "closed", close
    # the same state over HTTP: one room service behind both transports
    st, _, js = hu.get_room(rd, rid)
    assert st == 200 and js["version"] == close["version"], js


def test_list_rooms_pages():
    rd = shared()
    app = "gpages"
    md = {"x-app-code": app}
    for _ in range(3):
        new_room(rd, metadata=md)
    p1 = ok(call(rd, "ListRooms", {"limit": 2}, md))
    assert len(p1["rooms"]) == 2 and p1["next_cursor"] == 2, p1
    p2 = ok(call(rd, "ListRooms", {"cursor": p1["next_cursor"], "limit": 2}, md))
    assert len(p2["rooms"]) == 1 and "next_cursor" not in p2, p2  # last page: absent
    refused(call(rd, "ListRooms", {"limit": 101}, md), INVALID_ARGUMENT, "invalid_argument",
            field="limit")


def test_launch_rocket_internal_service():
    rd = shared()
    rid, _ = new_room(rd)
    ok(call(rd, "JoinRoom", {"command_id": hu.cid(), "room_id": rid, "uid": 9}))
    # energy 1000 ignites the rocket (threshold of the test config)
    gift = ok(call(rd, "SendGift", {"command_id": hu.cid(), "room_id": rid, "uid": 9,
                                    "to_uid": 9, "gift_id": "rose", "count": 10,
                                    "unit_price": 100}))
    rocket = gift["room"]["rocket"]
    assert rocket["status"] == "ignited", rocket
    # not a RoomService method
    req = {"command_id": "~rl-" + rocket["rocket_id"], "room_id": rid,
           "rocket_id": rocket["rocket_id"], "level": rocket["level"],
           "launch_at_ms": rocket["launch_at_ms"]}
    assert call(rd, "LaunchRocket", req)["code"] != OK
    # a wake-up of a rocket of this room that is not the ignited one is stale: OK, launched
    # false with the reason, nothing changed
    stale_id = f"{rid}-{rocket['utc_day']}-9"
    stale = dict(req, command_id="~rl-" + stale_id, rocket_id=stale_id, level=9)
    js = ok(call(rd, "LaunchRocket", stale, service="RoomInternalService"))
    assert js.get("launched", False) is False and js["reason"], js
    # its command_id must be the launch's reserved one (~rl-<rocket_id>)
    refused(call(rd, "LaunchRocket", dict(req, command_id=hu.cid()), service="RoomInternalService"),
            INVALID_ARGUMENT, field="command_id")
    # at launch_at_ms, with the reserved id: it launches, or it replays the answer of roomd's own
    # timer that got there first
    time.sleep(max(0.0, rocket["launch_at_ms"] / 1000.0 - time.time()) + 0.05)
    js = ok(call(rd, "LaunchRocket", req, service="RoomInternalService"))
    assert js["launched"] is True and js["room"]["rocket"]["status"] != "ignited", js
    assert "RoomRocketLaunched" in [e["event_type"] for e in js["events"]], js
    # whoever sent it, the rocket launched once
    launches = [e for e in hu.wait_events(rd, rid, 5) if e["event_type"] == "RoomRocketLaunched"]
    time.sleep(0.3)
    assert len(launches) == 1, launches


# --- refusals: each status code ------------------------------------------------------------

def test_invalid_argument_names_the_field():
    rd = shared()
    rid, _ = new_room(rd)
    cases = [
        ("JoinRoom", {"command_id": hu.cid(), "room_id": rid}, "uid"),  # 0 = absent
        ("JoinRoom", {"command_id": hu.cid(), "room_id": rid, "uid": -4}, "uid"),
        ("JoinRoom", {"room_id": rid, "uid": 4}, "command_id"),
        ("JoinRoom", {"command_id": "bad id!", "room_id": rid, "uid": 4}, "command_id"),
        ("JoinRoom", {"command_id": hu.cid(), "uid": 4}, "room_id"),
        ("JoinRoom", {"command_id": hu.cid(), "room_id": "no/such", "uid": 4}, "room_id"),
        ("MicUp", {"command_id": hu.cid(), "room_id": rid, "uid": 4, "seat": 99}, "seat"),
        ("SendGift", {"command_id": hu.cid(), "room_id": rid, "uid": 4, "to_uid": 5,
                      "gift_id": "rose", "count": 1}, "unit_price"),
        ("CreateRoom", {"command_id": hu.cid(), "owner_uid": 1}, "title"),
        ("GetPresence", {}, "uid"),
        ("GetRoom", {}, "room_id"),
    ]
    res = calls(rd, [{"method": m, "request": r} for m, r, _ in cases])
    for (m, r, field), got in zip(cases, res):
        refused(got, INVALID_ARGUMENT, field=field, http_status=400, what=f"{m} {r}")
    # bytes that are no message of the method: INVALID_ARGUMENT "body"
    res = calls(rd, [{"path": "/roomd.v1.RoomService/JoinRoom", "raw_hex": "0aff"}])
    refused(res[0], INVALID_ARGUMENT, field="body")
    # an invalid x-app-code, one too long, an idempotency-key too long for a command_id
    res = calls(rd, [
        {"method": "GetRoom", "request": {"room_id": rid}, "metadata": {"x-app-code": "Bad App"}},
        {"method": "GetRoom", "request": {"room_id": rid}, "metadata": {"x-app-code": "a" * 100}},
        {"method": "JoinRoom", "request": {"room_id": rid, "uid": 4},
         "metadata": {"idempotency-key": "k" * 100}},
    ])
    refused(res[0], INVALID_ARGUMENT, field="X-App-Code")
    refused(res[1], INVALID_ARGUMENT, field="X-App-Code")
    refused(res[2], INVALID_ARGUMENT, field="command_id")  # the key is the command_id


def test_not_found_and_unimplemented():
    rd = shared()
    refused(call(rd, "GetRoom", {"room_id": "never-created"}), NOT_FOUND, "not_found",
            http_status=404)
    refused(call(rd, "JoinRoom", {"command_id": hu.cid(), "room_id": "never-created", "uid": 1}),
            NOT_FOUND, "not_found")
    res = calls(rd, [{"path": "/roomd.v1.RoomService/Nope", "raw_hex": ""}])
    assert res[0]["code"] == UNIMPLEMENTED, res


def test_state_conflicts():
    rd = shared()
    rid, _ = new_room(rd)
    ok(call(rd, "JoinRoom", {"command_id": hu.cid(), "room_id": rid, "uid": 2}))
    ok(call(rd, "JoinRoom", {"command_id": hu.cid(), "room_id": rid, "uid": 3}))
    ok(call(rd, "MicUp", {"command_id": hu.cid(), "room_id": rid, "uid": 2, "seat": 0}))
    v = hu.version(rd, rid)
    refused(call(rd, "MicUp", {"command_id": hu.cid(), "room_id": rid, "uid": 3, "seat": 0}),
            FAILED_PRECONDITION, "seat_taken", http_status=409)
    refused(call(rd, "LeaveRoom", {"command_id": hu.cid(), "room_id": rid, "uid": 44}),
            FAILED_PRECONDITION, "not_member")
    refused(call(rd, "CreateRoom", {"command_id": hu.cid(), "room_id": rid, "owner_uid": 1,
                                    "title": "again"}), ALREADY_EXISTS, "room_exists")
    # a refused command changed nothing
    assert hu.version(rd, rid) == v


def test_insufficient_balance():
    rd = shared()
    rid, _ = new_room(rd)
    ok(call(rd, "JoinRoom", {"command_id": hu.cid(), "room_id": rid, "uid": 77}))
    v = hu.version(rd, rid)
    # 100000 is the test wallet's initial balance
    refused(call(rd, "SendGift", {"command_id": hu.cid(), "room_id": rid, "uid": 77, "to_uid": 77,
                                  "gift_id": "rose", "count": 9999, "unit_price": 1000}),
            FAILED_PRECONDITION, "insufficient_balance", http_status=402)
    assert hu.version(rd, rid) == v


def test_message_too_large():
    rd = shared()
    # field 4 (title) of CreateRoomRequest, 70000 bytes: above http.max_body_bytes (65536)
    n = 70000
    varint = bytes([(n & 0x7f) | 0x80, ((n >> 7) & 0x7f) | 0x80, n >> 14]).hex()
    res = calls(rd, [{"path": "/roomd.v1.RoomService/CreateRoom",
                      "raw_hex": "22" + varint + "61" * n}])
    assert res[0]["code"] == RESOURCE_EXHAUSTED, res[0]["code"]


def test_other_node_forwards_or_names_the_owner():
    # three nodes on one SQLite file and one Redis lease; the room's owner is a, the node that
    # created it. c (cluster.forward on, the default) forwards a gRPC command and read to a and
    # answers with a's answer; b (cluster.forward off) answers UNAVAILABLE naming a.
    import socket
    import tempfile
    try:
        socket.create_connection(("127.0.0.1", REDIS_PORT), timeout=2).close()
    except OSError:
        # without a Redis this one test is skipped (under make test the servers are required)
        assert os.environ.get("ROOMD_REQUIRE_SERVERS", "") in ("", "0"), \
            f"required server missing: redis-server at 127.0.0.1:{REDIS_PORT}"
        print(f"skip: no redis-server at 127.0.0.1:{REDIS_PORT}")
        return
    tmp = tempfile.mkdtemp(prefix="roomd-grpc3-")
    prefix = f"roomdtest:grpc:{os.getpid()}:{int(time.time() * 1000)}:"

    def node(name, forward):
        return grpc_roomd(overrides={
            "app": {"node_id": f"grpc-{name}"},
            "store": {"sqlite": {"path": os.path.join(tmp, "shared.db")}},
            "redis": {"enabled": True, "addr": f"127.0.0.1:{REDIS_PORT}", "key_prefix": prefix},
            "lease": {"driver": "redis", "ttl": "5s", "renew_every": "500ms"},
            "cluster": {"forward": forward},
        })
    a = node("a", True)
    b = node("b", False)
    c = node("c", True)
    try:
        rid, _ = new_room(a)
        v = hu.version(a, rid)
        cmd = {"command_id": hu.cid(), "room_id": rid, "uid": 3}
        res = call(b, "JoinRoom", cmd)
        info = refused(res, UNAVAILABLE, "not_owner", http_status=503)
        owner = f"127.0.0.1:{a.port}"  # http.advertise_addr is empty: a's http.listen
        assert info["metadata"].get("owner") == owner, info
        assert res["trailing"].get("x-room-owner") == owner, res["trailing"]
        assert hu.version(a, rid) == v
        # c forwards it to a: committed once, by a; the same command_id again replays
        js = ok(call(c, "JoinRoom", cmd))
        assert js["version"] == v + 1 and js["room"]["member_count"] == 1, js
        again = call(c, "JoinRoom", cmd)
        assert ok(again)["version"] == v + 1
        assert again["initial"].get("idempotent-replay") == "true", again["initial"]
        room = ok(call(c, "GetRoom", {"room_id": rid}))
        assert room["version"] == v + 1, room
        assert hu.version(a, rid) == v + 1
    finally:
        for n in (c, b, a):
            n.stop()


# --- idempotency ---------------------------------------------------------------------------

def test_replay_across_transports():
    rd = shared()
    rid, _ = new_room(rd)
    # first over HTTP, then over gRPC: the first answer again, marked a replay
    c1 = hu.cid()
    st, _, first = rd.post(f"/v1/rooms/{rid}/join", {"command_id": c1, "uid": 5})
    assert st == 200, first
    again = call(rd, "JoinRoom", {"command_id": c1, "room_id": rid, "uid": 5})
    js = ok(again)
    assert again["initial"].get("idempotent-replay") == "true", again["initial"]
    assert js["version"] == first["version"], (js, first)
    assert [e["event_id"] for e in js["events"]] == [e["event_id"] for e in first["events"]]
    # first over gRPC (the idempotency-key metadata as the command_id), then over HTTP
    c2 = hu.cid()
    res = calls(rd, [{"method": "JoinRoom", "request": {"room_id": rid, "uid": 6},
                      "metadata": {"idempotency-key": c2}}])
    first = ok(res[0])
    assert "idempotent-replay" not in res[0]["initial"], res[0]["initial"]
    st, hd, js = rd.post(f"/v1/rooms/{rid}/join", {"command_id": c2, "uid": 6})
    assert st == 200 and hd.get("Idempotent-Replay") == "true", (st, hd)
    assert js["version"] == first["version"] and js["events"][0]["event_id"] == \
        first["events"][0]["event_id"], (js, first)
    v = hu.version(rd, rid)
    # the key again with a command_id that differs: INVALID_ARGUMENT command_id
    refused(call(rd, "JoinRoom", {"command_id": "other", "room_id": rid, "uid": 6},
                 {"idempotency-key": c2}), INVALID_ARGUMENT, field="command_id")
    # the same key with another request: ABORTED idempotency_key_reused
    refused(call(rd, "JoinRoom", {"room_id": rid, "uid": 8}, {"idempotency-key": c2}), ABORTED,
            "idempotency_key_reused", http_status=409)
    assert hu.version(rd, rid) == v


def test_app_code_metadata():
    rd = shared()
    rid, _ = new_room(rd, metadata={"x-app-code": "gapp2"})
    ok(call(rd, "GetRoom", {"room_id": rid}, {"x-app-code": "gapp2"}))
    refused(call(rd, "GetRoom", {"room_id": rid}), NOT_FOUND)  # the default app has no such room
    st, _, _ = rd.http("GET", f"/v1/rooms/{rid}", headers={"X-App-Code": "gapp2"})
    assert st == 200


# --- deadlines -----------------------------------------------------------------------------

def test_deadline_exceeded_leaves_no_half_done_command():
    # every commit waits 1.5 s (test hook) while the client's deadline is 0.4 s
    rd = grpc_roomd(env={"ROOMD_TEST_PRECOMMIT_DELAY_MS": "1500"})
    try:
        rid = hu.room_name("g")
        ok(call(rd, "CreateRoom", {"command_id": hu.cid(), "room_id": rid, "owner_uid": 1,
                                   "title": "slow"}))
        c = hu.cid()
        res = call(rd, "JoinRoom", {"command_id": c, "room_id": rid, "uid": 2}, deadline_ms=400)
        assert res["code"] == DEADLINE_EXCEEDED, res
        # the command went on to commit as a whole; a retry with its command_id tells so
        retry = call(rd, "JoinRoom", {"command_id": c, "room_id": rid, "uid": 2})
        js = ok(retry)
        assert retry["initial"].get("idempotent-replay") == "true", retry["initial"]
        assert js["version"] == 2 and js["room"]["member_count"] == 1, js
        st, _, room = hu.get_room(rd, rid)
        assert st == 200 and room["version"] == 2, room
        # one join, one outbox event: nothing half done, nothing done twice
        events = wait_until(lambda: [e for e in rd.events() if e["room_id"] == rid
                                     and e["event_type"] == "RoomUserJoined"] or None,
                            what="the join's event")
        assert len(events) == 1, events
    finally:
        rd.stop()


def test_auth_refused_and_allowed():
    # auth.mode jwt: the authorization metadata is checked as HTTP's Authorization header
    secret, admin = "grpc-secret-" + os.urandom(16).hex(), "grpc-admin-" + os.urandom(16).hex()
    rd = grpc_roomd(env={"ROOMD_TEST_JWT": secret, "ROOMD_TEST_ADMIN": admin},
                    overrides={"auth": {"mode": "jwt", "jwt": {"hs256_secret_env": "ROOMD_TEST_JWT"}},
                               "admin": {"token_env": "ROOMD_TEST_ADMIN"}})
    try:
        def bearer(uid, app="hyapp", **kw):
            return {"authorization": "Bearer " + jw.hs256(secret, jw.claims(uid, app, **kw))}
        rid = hu.room_name("ga")
        create = {"command_id": hu.cid(), "room_id": rid, "owner_uid": 1, "title": "auth"}
        res = calls(rd, [
            {"method": "CreateRoom", "request": create},  # no token
            {"method": "CreateRoom", "request": create,
             "metadata": {"authorization": "Bearer not.a.jwt"}},
            {"method": "CreateRoom", "request": create,
             "metadata": {"authorization": "Bearer " + jw.hs256("other", jw.claims(1))}},
            {"method": "CreateRoom", "request": create,
             "metadata": bearer(1, ttl=-600)},  # expired
            {"method": "CreateRoom", "request": create, "metadata": bearer(2)},  # as uid 1
            {"method": "CreateRoom", "request": create,
             "metadata": dict(bearer(1, app="otherapp"), **{"x-app-code": "hyapp"})},
            {"method": "CreateRoom", "request": create, "metadata": bearer(1)},  # itself: OK
            {"method": "JoinRoom", "request": {"command_id": hu.cid(), "room_id": rid, "uid": 5},
             "metadata": bearer(9, scope="room:service")},  # a service token: any uid
            {"method": "GetRoom", "request": {"room_id": rid}, "metadata": bearer(5)},
            {"method": "GetRoom", "request": {"room_id": rid}},
        ])
        for r in res[0:4]:
            refused(r, UNAUTHENTICATED, "unauthenticated", http_status=401)
        for r in res[4:6]:
            refused(r, PERMISSION_DENIED, "forbidden", http_status=403)
        assert ok(res[6])["version"] == 1
        assert ok(res[7])["version"] == 2
        assert ok(res[8])["version"] == 2
        refused(res[9], UNAUTHENTICATED)
        # RoomInternalService takes the admin token, not a user's JWT
        launch = {"command_id": f"~rl-{rid}-1-9", "room_id": rid, "rocket_id": f"{rid}-1-9",
                  "level": 9, "launch_at_ms": 1}
        res = calls(rd, [
            {"service": "RoomInternalService", "method": "LaunchRocket", "request": launch,
             "metadata": bearer(1, scope="room:service")},
            {"service": "RoomInternalService", "method": "LaunchRocket", "request": launch,
             "metadata": {"authorization": "Bearer " + admin}},
        ])
        refused(res[0], UNAUTHENTICATED, "unauthenticated")
        assert ok(res[1]).get("launched", False) is False  # stale: nothing to launch
        # the token is never logged
        with open(rd.log_path) as f:
            assert secret not in f.read() and admin not in open(rd.log_path).read()
    finally:
        rd.stop()


def rpcs(rid, owner, uid):
    """(service, method, request, acting uid or None for a read of any user of the app) of
    every RPC on room rid, in an order in which each succeeds."""
    c = hu.cid
    return [
        ("RoomService", "JoinRoom", {"command_id": c(), "room_id": rid, "uid": uid}, uid),
        ("RoomService", "MicUp", {"command_id": c(), "room_id": rid, "uid": uid}, uid),
        ("RoomService", "MicDown", {"command_id": c(), "room_id": rid, "uid": uid}, uid),
        ("RoomService", "Heartbeat", {"room_id": rid, "uid": uid}, uid),
        ("RoomService", "SendGift", {"command_id": c(), "room_id": rid, "uid": uid,
                                     "to_uid": owner, "gift_id": "rose", "count": 1,
                                     "unit_price": 10}, uid),
        ("RoomService", "GetPresence", {"uid": uid}, uid),
        ("RoomService", "GetRoom", {"room_id": rid}, None),
        ("RoomService", "ListRooms", {"limit": 5}, None),
        ("RoomService", "LeaveRoom", {"command_id": c(), "room_id": rid, "uid": uid}, uid),
        ("RoomService", "KickUser", {"command_id": c(), "room_id": rid, "operator_uid": owner,
                                     "uid": uid, "reason": "x"}, owner),
        ("RoomService", "CloseRoom", {"command_id": c(), "room_id": rid, "operator_uid": owner},
         owner),
        ("RoomInternalService", "LaunchRocket", {"command_id": f"~rl-{rid}-1-9", "room_id": rid,
                                                 "rocket_id": f"{rid}-1-9", "level": 9,
                                                 "launch_at_ms": 1}, owner),
    ]


def test_auth_matrix_every_rpc():
    import test_http_auth as ha  # its callers, secret and admin token: one matrix, two transports
    rd = grpc_roomd(env=ha.ENV, overrides={
        "auth": {"mode": "jwt", "jwt": {"hs256_secret_env": "ROOMD_TEST_JWT"}},
        "admin": {"token_env": "ROOMD_TEST_ADMIN"}})
    try:
        def md(headers):
            return {k.lower(): v for k, v in headers.items()}
        owner, uid = 701, 702
        service = md(ha.service())
        rid = hu.room_name("gm")
        ok(call(rd, "CreateRoom", {"command_id": hu.cid(), "room_id": rid, "owner_uid": owner,
                                   "title": "t"}, md(ha.tok(owner))), "create")
        ok(call(rd, "JoinRoom", {"command_id": hu.cid(), "room_id": rid, "uid": owner},
                md(ha.tok(owner))), "owner joins")
        rd.admin_token = ha.ADMIN  # jwt: room.gift_catalog required, the rose at 10
        hu.expect_ok(hu.put_gift(rd, "rose", 10), "the catalog's rose")

        def state():
            room = ok(call(rd, "GetRoom", {"room_id": rid}, service), "state")
            bal = [rd.http("GET", f"/v1/wallet/{u}", headers=ha.service())[2]["balance"]
                   for u in (owner, uid)]
            return room["version"], bal
        before = state()
        batch, want = [], []
        # CreateRoom too: a refused create makes no room
        rid2 = hu.room_name("gm")
        todo = [("RoomService", "CreateRoom", {"command_id": hu.cid(), "room_id": rid2,
                                               "owner_uid": owner, "title": "t"}, owner)]
        for svc, method, req, acting in todo + rpcs(rid, owner, uid):
            for cname, h, status in ha.callers(acting or uid):
                if svc == "RoomInternalService":
                    if cname == "admin token on public":
                        continue  # its one allowed caller (below)
                    status = 401  # any JWT: the internal service takes the admin token only
                elif cname == "other uid" and acting is None:
                    continue  # a read of the room: any user of the app may
                batch.append({"service": svc, "method": method, "request": req,
                              "metadata": md(h)})
                want.append((f"{method} / {cname}", status))
            if svc == "RoomInternalService":
                for cname, h in (("service token", service), ("owner", md(ha.tok(owner)))):
                    batch.append({"service": svc, "method": method, "request": req,
                                  "metadata": h})
                    want.append((f"{method} / {cname}", 401))
        for r, (what, status) in zip(calls(rd, batch), want):
            refused(r, UNAUTHENTICATED if status == 401 else PERMISSION_DENIED,
                    "unauthenticated" if status == 401 else "forbidden", http_status=status,
                    what=what)
        assert len(want) >= 100, len(want)
        assert state() == before, "a refused call changed something"
        refused(call(rd, "GetRoom", {"room_id": rid2}, service), NOT_FOUND, what="refused create")
        # each RPC allowed: the user itself (the owner for its commands), then a service token
        for svc, method, req, acting in rpcs(rid, owner, uid):
            if method == "KickUser":  # the target must be in the room
                ok(call(rd, "JoinRoom", {"command_id": hu.cid(), "room_id": rid, "uid": uid},
                        md(ha.tok(uid))), "rejoin")
            h = {"authorization": "Bearer " + ha.ADMIN} if svc == "RoomInternalService" else \
                md(ha.tok(acting or uid))
            ok(call(rd, method, req, h, service=svc), f"{method} as itself")
            if method in ("GetPresence", "GetRoom", "ListRooms", "Heartbeat"):
                ok(call(rd, method, req, service, service=svc), f"{method} as a service")
    finally:
        rd.stop()


def test_metrics_count_grpc_calls():
    rd = shared()
    before = hu.metrics(rd)
    rid, _ = new_room(rd)
    refused(call(rd, "GetRoom", {"room_id": "never-created"}), NOT_FOUND)
    after = hu.metrics(rd)

    def delta(key):
        return after.get(key, 0) - before.get(key, 0)
    assert delta('roomd_grpc_calls_total{method="CreateRoom",code="OK"}') == 1, after
    assert delta('roomd_grpc_calls_total{method="GetRoom",code="NOT_FOUND"}') == 1, after
    # the command itself is counted with HTTP's, by the status HTTP would answer
    assert delta('roomd_commands_total{command="CreateRoom",status="201"}') == 1, after


def test_zz_stop_is_clean():
    rd = shared()
    assert rd.stop() == 0


TESTS = [test_every_rpc, test_list_rooms_pages, test_launch_rocket_internal_service,
         test_invalid_argument_names_the_field, test_not_found_and_unimplemented,
         test_state_conflicts, test_insufficient_balance, test_message_too_large,
         test_other_node_forwards_or_names_the_owner,
         test_replay_across_transports, test_app_code_metadata,
         test_deadline_exceeded_leaves_no_half_done_command, test_auth_refused_and_allowed,
         test_auth_matrix_every_rpc,
         test_metrics_count_grpc_calls,
         test_zz_stop_is_clean]

if __name__ == "__main__":
    if not listing() and (shutil.which("node") is None or
                          not os.path.isdir(os.path.join(NODE_MODULES, "@grpc", "grpc-js"))):
        if os.environ.get("CI", "") not in ("", "0", "false"):
            print("FAIL: node + @grpc/grpc-js missing (scripts/deps.sh installs them)")
            sys.exit(1)
        print("SKIP: node + @grpc/grpc-js missing (scripts/deps.sh installs them)")
        sys.exit(77)
    run(TESTS, fixture="grpc_api")
