# SPDX-License-Identifier: Apache-2.0
"""test_presence: presence expiry (docs/room.md, Presence) against real roomd processes.

1. One node, room.member_idle_timeout 3s: 50 members, 10 of which stop heartbeating (4 of
   them on mic seats), one more never heartbeats but keeps sending commands of its own.
   Exactly the 10 leave after the timeout: one LeaveRoom each in the command log under the
   reserved id "~il-<uid>-..", one RoomUserLeft (reason "idle") each in the outbox and at
   the sink, their seats freed; the 40 and the commander stay for another timeout period.
   Heartbeats write nothing to the store (the room's version and its log do not move over
   200 of them); bad input is refused (400/404/409) and changes nothing.
2. Two nodes on one SQLite file and one Redis (lease.driver redis, forwarding on): the 40
   heartbeat through both nodes (the non-owner forwards); a member logged out by a signed IM
   callback sent to the non-owner leaves at once (the owner checks the forwarded signature);
   the owner is killed with SIGKILL
   halfway through the silent members' timeout; the other node takes the room over (its
   idle clocks start at takeover, so nobody leaves at once) and the 10 still leave exactly
   once, the 40 stay.
3. Tencent IM's State.StateChange callback (POST /callbacks/tim, under auth.mode jwt): refused
   (401) without Tencent's signature whatever JWT the caller sends, with a wrong one, a stale
   RequestTime or another SdkAppid, changing nothing; signed, a Login keeps a member that sends
   no heartbeat, a Logout makes a member leave at the sweeper's next pass (reason idle, once),
   a Disconnect changes nothing, another command is acknowledged and ignored.

Run: python3 tests/integ/test_presence.py (PYTHONPATH=tests, ROOMD_BUILD_DIR=build)."""
import hashlib
import os
import sqlite3
import sys
import tempfile
import threading
import time
import uuid

sys.path.insert(0, os.path.dirname(__file__))
import http_util as hu  # noqa: E402
from roomd_test import Roomd, env_port, need, run, wait_until  # noqa: E402

REDIS_PORT = env_port("ROOMD_REDIS_PORT", 6390)
TIMEOUT_S = 3
ACTIVE = list(range(110, 150))  # 40 members that heartbeat
SILENT = list(range(100, 110))  # 10 that stop
COMMANDER = 150  # never heartbeats, sends a command of its own now and then
LOGOUT = 160  # two nodes: logged out by an IM callback to the node that does not own the room


def q(db, sql, args=()):
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


def heartbeat(rd, room, uid):
    return rd.post(f"/v1/rooms/{room}/heartbeat", {"uid": uid})


class Beater(threading.Thread):
    """Heartbeats uids every period through the nodes in turn until stop(); counts answers."""

    def __init__(self, nodes, room, uids, period=0.5, commander=None):
        super().__init__(daemon=True)
        self.nodes, self.room, self.uids, self.period = nodes, room, uids, period
        self.commander = commander
        self.halt = threading.Event()
        self.status = {}

    def run(self):
        i = 0
        while not self.halt.is_set():
            for uid in self.uids:
                rd = self.nodes[i % len(self.nodes)]
                i += 1
                try:
                    st = heartbeat(rd, self.room, uid)[0]
                except OSError:
                    st = "down"
                self.status[st] = self.status.get(st, 0) + 1
            if self.commander is not None:
                # a refused command is a command of its own too (not on mic: 409)
                try:
                    hu.mic_down(self.nodes[-1], self.room, self.commander)
                except OSError:
                    pass
            self.halt.wait(self.period)

    def stop(self):
        self.halt.set()
        self.join(10)


def populate(rd, room, nodes_for_join=None):
    hu.expect_ok(hu.create(rd, room, owner=1), "create")
    for uid in SILENT + ACTIVE + [COMMANDER]:
        hu.expect_ok(hu.join(rd, room, uid), f"join {uid}")
    for seat, uid in enumerate(SILENT[:4] + ACTIVE[:4]):
        hu.expect_ok(hu.mic_up(rd, room, uid, seat=seat), f"mic up {uid}")


def idle_rows(db, room):
    """(command_id, command_type) of room's log rows under the idle-leave prefix."""
    return q(db, "SELECT command_id, command_type FROM room_command_log WHERE room_id = ? AND "
                 "command_id LIKE '~il-%'", (room,))


def check_left_once(db, room, sink_events=None, extra=()):
    want = sorted(SILENT + list(extra))
    rows = idle_rows(db, room)
    assert all(t == "LeaveRoom" for _, t in rows), rows
    uids = sorted(int(c.split("-")[1]) for c, _ in rows)
    assert uids == want, f"idle leaves in the log: {uids}"
    # the outbox: one RoomUserLeft per silent member, committed with its leave
    left = q(db, "SELECT command_id FROM room_outbox WHERE room_id = ? AND "
                 "event_type = 'RoomUserLeft'", (room,))
    assert sorted(int(c.split("-")[1]) for (c,) in left) == want, left
    mic = q(db, "SELECT command_id FROM room_outbox WHERE room_id = ? AND "
                "event_type = 'RoomMicChanged' AND command_id LIKE '~il-%'", (room,))
    assert sorted(int(c.split("-")[1]) for (c,) in mic) == SILENT[:4], mic
    if sink_events is not None:
        got = [e for e in sink_events if e["event_type"] == "RoomUserLeft"]
        assert sorted(e["payload"]["uid"] for e in got) == SILENT, got
        assert all(e["payload"]["reason"] == "idle" for e in got), got


def check_room(rd, room):
    js = hu.room_of(hu.expect_ok(hu.get_room(rd, room), "GET room"))
    assert sorted(hu.members(js)) == ACTIVE + [COMMANDER], sorted(hu.members(js))
    assert js["seats"][:4] == [0, 0, 0, 0], js["seats"]  # the silent ones' seats are free
    assert js["seats"][4:8] == ACTIVE[:4], js["seats"]
    return js


def test_fifty_members_ten_silent():
    rd = Roomd({"room": {"member_idle_timeout": f"{TIMEOUT_S}s"}}).start()
    db = rd.cfg["store"]["sqlite"]["path"]
    try:
        room = hu.room_name("pres")
        populate(rd, room)
        # bad input: refused, nothing changed
        v0 = hu.version(rd, room)
        hu.expect_error(heartbeat(rd, room, 999), 409, "not_member")
        hu.expect_error(heartbeat(rd, "nosuch-" + room, 110), 404, "not_found")
        hu.expect_error(rd.post(f"/v1/rooms/{room}/heartbeat", {"uid": 110, "seat": 1}), 400,
                        "invalid_argument", "seat")
        hu.expect_error(rd.post(f"/v1/rooms/{room}/heartbeat", {"uid": "110"}), 400,
                        "invalid_argument", "uid")
        hu.expect_error(rd.http("POST", f"/v1/rooms/{room}/heartbeat", raw="{"), 400,
                        "invalid_json")
        # heartbeats write nothing: version, log and outbox stay
        log0 = q(db, "SELECT count(*) FROM room_command_log")[0][0]
        obx0 = q(db, "SELECT count(*) FROM room_outbox")[0][0]
        for i in range(200):
            js = hu.expect_ok(heartbeat(rd, room, ACTIVE[i % 40]), "heartbeat")
        assert js == {"idle_timeout_ms": TIMEOUT_S * 1000, "room_id": room,
                      "uid": ACTIVE[199 % 40]}, js
        assert hu.version(rd, room) == v0
        assert q(db, "SELECT count(*) FROM room_command_log")[0][0] == log0
        assert q(db, "SELECT count(*) FROM room_outbox")[0][0] == obx0

        t0 = time.time()
        b = Beater([rd], room, ACTIVE, commander=COMMANDER)
        b.start()
        try:
            time.sleep(TIMEOUT_S - 1)
            assert idle_rows(db, room) == [], "left before the timeout"
            wait_until(lambda: len(idle_rows(db, room)) == len(SILENT), timeout=TIMEOUT_S + 6,
                       what="the 10 silent members' leaves")
            took = time.time() - t0
            time.sleep(TIMEOUT_S + 1)  # another full period: nobody else leaves
            check_room(rd, room)
        finally:
            b.stop()
        assert set(b.status) == {200}, b.status
        print(f"  10 silent members left {took:.1f}s after the heartbeats began "
              f"(timeout {TIMEOUT_S}s)")
        wait_until(lambda: len([e for e in hu.room_events(rd, room)
                                if e["event_type"] == "RoomUserLeft"]) >= 10, what="sink")
        check_left_once(db, room, hu.room_events(rd, room))
        m = hu.metrics(rd)
        assert m.get('roomd_idle_leaves_total{result="left"}') == len(SILENT), m
        assert m.get("roomd_heartbeats_total", 0) >= 200 + b.status[200], m
        # answered from memory: the turn only for the first, the lease renewals and the refusals
        assert m.get("roomd_heartbeats_slow_total", 0) < m["roomd_heartbeats_total"] / 10, m
        # a silent member is no member any more; it may join again
        hu.expect_error(heartbeat(rd, room, SILENT[0]), 409, "not_member")
        hu.expect_ok(hu.join(rd, room, SILENT[0]), "rejoin")
        hu.expect_ok(heartbeat(rd, room, SILENT[0]), "heartbeat after rejoin")
    finally:
        rd.stop()


def test_kill_owner_mid_timeout():
    need("127.0.0.1", REDIS_PORT, "redis")
    tmp = tempfile.mkdtemp(prefix="roomd-pres2-")
    db = os.path.join(tmp, "roomd.db")
    prefix = f"roomdpres:{os.getpid()}:{uuid.uuid4().hex[:6]}:"
    timeout_s = 4

    def node(name):
        d = os.path.join(tmp, name)
        os.makedirs(d)
        rd = Roomd({"app": {"node_id": f"node-{name}"},
                    "store": {"driver": "sqlite", "sqlite": {"path": db}},
                    "redis": {"enabled": True, "addr": f"127.0.0.1:{REDIS_PORT}",
                              "key_prefix": prefix, "connect_timeout": "200ms",
                              "command_timeout": "300ms"},
                    "lease": {"driver": "redis", "ttl": "1500ms", "renew_every": "300ms"},
                    "projection": {"driver": "redis"},
                    "cluster": {"forward": True, "forward_timeout": "2s"},
                    "room": {"member_idle_timeout": f"{timeout_s}s"},
                    "tencent_im": {"callback": {"enabled": True,
                                                "token_env": "PRES_CB_TOKEN"}}}, tmp=d)
        rd.cfg["http"]["advertise_addr"] = f"127.0.0.1:{rd.port}"
        import json
        with open(rd.cfg_path, "w") as f:
            json.dump(rd.cfg, f)
        return rd

    a, b = node("a"), node("b")
    a.start(env={"PRES_CB_TOKEN": CB_TOKEN})
    b.start(env={"PRES_CB_TOKEN": CB_TOKEN})
    beat = None
    try:
        room = hu.room_name("pres2")
        populate(a, room)
        beat = Beater([a, b], room, ACTIVE, period=0.4, commander=COMMANDER)
        beat.start()
        # IM says 160 logged out, to b, which does not own the room: the signed callback
        # goes to a, which checks it again and lets 160 go at once
        hu.expect_ok(hu.join(a, room, LOGOUT), "join 160")
        wait_until(lambda: (hu.expect_ok(b.http("GET", f"/v1/users/{LOGOUT}/presence"))
                            .get("room_id") == room), what="160 in b's projection")
        ok = hu.expect_ok(b.post(signed(sdk=0), state_change("Logout", LOGOUT)), "logout on b")
        assert ok["ActionStatus"] == "OK", ok
        wait_until(lambda: [c for c, _ in idle_rows(db, room) if c.startswith(f"~il-{LOGOUT}-")],
                   timeout=3, what="160's leave after the Logout forwarded to a")
        time.sleep(timeout_s / 2 - 1)  # the silent ones are halfway to their timeout
        assert [c for c, _ in idle_rows(db, room)] == [c for c, _ in idle_rows(db, room)
                                                       if c.startswith(f"~il-{LOGOUT}-")]
        a.kill()
        beat.nodes = [b]  # the gateway stops sending to the dead node
        t_kill = time.time()
        # b takes over (at the lease's TTL, on a heartbeat); its clocks start then, so the
        # silent ones leave one timeout after the takeover, not at once
        wait_until(lambda: heartbeat(b, room, ACTIVE[0])[0] == 200, timeout=10,
                   what="b's takeover")
        t_take = time.time()
        time.sleep(1)
        assert len(idle_rows(db, room)) == 1, "a takeover evicted members at once"
        wait_until(lambda: len(idle_rows(db, room)) >= len(SILENT) + 1, timeout=timeout_s + 8,
                   what="the 10 silent members' leaves on b")
        print(f"  takeover {t_take - t_kill:.1f}s after kill -9; leaves "
              f"{time.time() - t_take:.1f}s after the takeover (timeout {timeout_s}s)")
        time.sleep(timeout_s + 1)
        check_room(b, room)
        check_left_once(db, room, extra=[LOGOUT])
        beat.stop()
        ok = beat.status.get(200, 0)
        assert ok > 100 and set(beat.status) <= {200, 503, "down"}, beat.status
    finally:
        if beat is not None:
            beat.stop()
        for rd in (a, b):
            try:
                rd.stop()
            except Exception:  # noqa: BLE001 - a was killed
                pass


CB_TOKEN = "cb-token-" + os.urandom(8).hex()
SDK = 1400000001


def signed(t=None, token=CB_TOKEN, sdk=SDK, command="State.StateChange"):
    """The query IM appends with callback authentication on: Sign = sha256(token + RequestTime)."""
    t = str(int(time.time()) if t is None else t)
    sign = hashlib.sha256((token + t).encode()).hexdigest()
    return (f"/callbacks/tim?SdkAppid={sdk}&CallbackCommand={command}&contenttype=json"
            f"&ClientIP=1.2.3.4&OptPlatform=IOS&RequestTime={t}&Sign={sign}")


def state_change(action, uid):
    return {"CallbackCommand": "State.StateChange", "EventTime": int(time.time() * 1000),
            "Info": {"Action": action, "To_Account": str(uid), "Reason": "test"}}


def test_im_state_callback():
    import jwt_util as jw
    secret = "presence-jwt-" + "k" * 32
    rd = Roomd({"auth": {"mode": "jwt", "jwt": {"hs256_secret_env": "PRES_JWT"}},
                "room": {"member_idle_timeout": "4s"},
                "tencent_im": {"sdk_app_id": SDK,
                               "callback": {"enabled": True, "token_env": "PRES_CB_TOKEN"}}})
    rd.start(env={"PRES_JWT": secret, "PRES_CB_TOKEN": CB_TOKEN})
    db = rd.cfg["store"]["sqlite"]["path"]
    svc = jw.bearer(jw.hs256(secret, jw.claims(1, "hyapp", scope="room:service")))
    try:
        room = hu.room_name("pim")
        hu.expect_ok(rd.post("/v1/rooms", {"command_id": hu.cid(), "room_id": room,
                                           "owner_uid": 1, "title": "t"}, headers=svc))
        for uid in (5, 6, 7):
            hu.expect_ok(rd.post(f"/v1/rooms/{room}/join", {"command_id": hu.cid(), "uid": uid},
                                 headers=svc))
        v0 = hu.room_of(hu.expect_ok(rd.http("GET", f"/v1/rooms/{room}", headers=svc)))["version"]
        body = state_change("Logout", 6)
        user = jw.bearer(jw.hs256(secret, jw.claims(6, "hyapp")))
        # refused: no signature whoever calls (a JWT is no credential here), a wrong one, a
        # stale one, another app id
        for what, path, h in (("no query", "/callbacks/tim", {}),
                              ("user JWT, no sign", "/callbacks/tim?RequestTime=1", user),
                              ("service JWT, no sign", "/callbacks/tim", svc),
                              ("wrong token", signed(token="other"), {}),
                              ("stale", signed(t=int(time.time()) - 600), {}),
                              ("future", signed(t=int(time.time()) + 600), {}),
                              ("other SdkAppid", signed(sdk=SDK + 1), {})):
            hu.expect_error(rd.post(path, body, headers=h), 401, "unauthenticated", what=what)
        time.sleep(1.5)
        js = hu.room_of(hu.expect_ok(rd.http("GET", f"/v1/rooms/{room}", headers=svc)))
        assert js["version"] == v0 and 6 in hu.members(js), js  # nothing changed
        log = "\n".join(rd.log_lines())
        assert CB_TOKEN not in log, "the callback token reached the log"
        # signed: a bad body is 400; another command and a Disconnect are acknowledged only
        hu.expect_error(rd.post(signed(), {"CallbackCommand": "State.StateChange",
                                           "Info": {"Action": "Login", "To_Account": "x"}}),
                        400, "invalid_argument")
        ok = {"ActionStatus": "OK", "ErrorCode": 0, "ErrorInfo": ""}
        assert hu.expect_ok(rd.post(signed(command="C2C.CallbackAfterSendMsg"),
                                    {"CallbackCommand": "C2C.CallbackAfterSendMsg"})) == ok
        assert hu.expect_ok(rd.post(signed(), state_change("Disconnect", 7))) == ok
        assert hu.expect_ok(rd.post(signed(), state_change("Login", 999))) == ok  # in no room
        # Logout: 6 leaves at the sweeper's next pass, long before its timeout
        t0 = time.time()
        assert hu.expect_ok(rd.post(signed(), body)) == ok
        wait_until(lambda: [c for c, _ in idle_rows(db, room) if c.startswith("~il-6-")],
                   timeout=3, what="6's leave after its Logout")
        assert time.time() - t0 < 3, time.time() - t0
        # Login keeps 5 (no heartbeat of its own); 7 (Disconnect only) leaves at its timeout
        end = time.time() + 5
        while time.time() < end:
            assert hu.expect_ok(rd.post(signed(), state_change("Login", 5))) == ok
            time.sleep(0.8)
        wait_until(lambda: len(idle_rows(db, room)) == 2, timeout=5, what="7's idle leave")
        js = hu.room_of(hu.expect_ok(rd.http("GET", f"/v1/rooms/{room}", headers=svc)))
        assert hu.members(js) == [5], js
        # 4 events before (create, 3 joins) and one RoomUserLeft each since (5 stops its
        # Logins now, so it leaves too, a timeout later)
        left = [e for e in hu.wait_events(rd, room, 6) if e["event_type"] == "RoomUserLeft"]
        assert sorted(e["payload"]["uid"] for e in left if e["payload"]["uid"] != 5) == [6, 7], left
        assert [e["payload"]["uid"] for e in left].count(6) == 1, left
        assert all(e["payload"]["reason"] == "idle" for e in left), left
    finally:
        rd.stop()


run([test_fifty_members_ten_silent, test_kill_owner_mid_timeout, test_im_state_callback])
