# SPDX-License-Identifier: Apache-2.0
"""http_util: small helpers the HTTP command tests share (on top of roomd_test.Roomd).

Every helper talks to a real roomd over HTTP; nothing here fakes the server.
cid() makes unique command ids; the command helpers return (status, headers, json);
expect_ok / expect_error assert a status and return the body.
"""
import http.client
import itertools
import json
import os
import socket
import sqlite3
import time

_seq = itertools.count(1)
_run = os.urandom(3).hex()


def cid(tag="c"):
    """A fresh command_id (unique per test run)."""
    return f"{tag}-{_run}-{next(_seq)}"


def room_name(tag="r"):
    return f"{tag}-{_run}-{next(_seq)}"


def expect_ok(res, what="", status=None):
    """Asserts a success (status, or 200 / CreateRoom's 201 when None); returns the body."""
    st, hd, js = res
    want = (status,) if status else (200, 201)
    assert st in want, f"{what}: want {want}, got {st} {js}"
    return js


def expect_error(res, status, code=None, field=None, what=""):
    """Asserts an error answer of §6: status, {"error":{"code","message"}}, JSON type."""
    st, hd, js = res
    assert st == status, f"{what}: want {status}, got {st} {js}"
    assert hd.get("Content-Type", "").startswith("application/json"), f"{what}: {hd}"
    assert isinstance(js, dict) and isinstance(js.get("error"), dict), f"{what}: {js}"
    err = js["error"]
    assert isinstance(err.get("code"), str) and isinstance(err.get("message"), str), err
    if code is not None:
        assert err["code"] == code, f"{what}: want code {code}, got {err}"
    if field is not None:
        blob = err.get("field", "") + " " + err["message"]
        assert field in blob, f"{what}: error does not name {field!r}: {err}"
    return err


# --- commands (ARCHITECTURE §6) -------------------------------------------------------------

def create(rd, room_id=None, owner=1, title="room", command_id=None, app=None):
    body = {"command_id": command_id or cid("create"), "owner_uid": owner, "title": title}
    if room_id is not None:
        body["room_id"] = room_id
    return rd.post("/v1/rooms", body, headers=_app(app))


def cmd(rd, room_id, verb, app=None, command_id=None, **fields):
    body = {"command_id": command_id or cid(verb.replace("/", "_"))}
    body.update(fields)
    return rd.post(f"/v1/rooms/{room_id}/{verb}", body, headers=_app(app))


def join(rd, room_id, uid, **kw):
    return cmd(rd, room_id, "join", uid=uid, **kw)


def leave(rd, room_id, uid, **kw):
    return cmd(rd, room_id, "leave", uid=uid, **kw)


def mic_up(rd, room_id, uid, seat=None, **kw):
    if seat is not None:
        kw["seat"] = seat
    return cmd(rd, room_id, "mic/up", uid=uid, **kw)


def mic_down(rd, room_id, uid, **kw):
    return cmd(rd, room_id, "mic/down", uid=uid, **kw)


def gift(rd, room_id, uid, to_uid, count=1, unit_price=10, gift_id="rose", **kw):
    return cmd(rd, room_id, "gifts", uid=uid, to_uid=to_uid, gift_id=gift_id, count=count,
               unit_price=unit_price, **kw)


def put_gift(rd, gift_id="rose", unit_price=10, energy_per_unit=None, enabled=True, app=None,
             version=None):
    """Creates or changes a gift of the catalog (POST /v1/gifts, admin listener); returns
    (status, headers, json)."""
    body = {"gift_id": gift_id, "unit_price": unit_price, "enabled": enabled}
    if energy_per_unit is not None:
        body["energy_per_unit"] = energy_per_unit
    if version is not None:
        body["version"] = version
    return rd.admin_post("/v1/gifts", body, headers=_app(app))


def kick(rd, room_id, operator_uid, uid, **kw):
    return cmd(rd, room_id, "kick", operator_uid=operator_uid, uid=uid, **kw)


def close(rd, room_id, operator_uid, **kw):
    return cmd(rd, room_id, "close", operator_uid=operator_uid, **kw)


def launch(rd, room_id, body, app=None):
    return rd.admin_post(f"/internal/v1/rooms/{room_id}/rocket/launch", body, headers=_app(app))


def get_room(rd, room_id, app=None):
    return rd.http("GET", f"/v1/rooms/{room_id}", headers=_app(app))


def _app(app):
    return {"X-App-Code": app} if app else {}


# --- reading answers ---------------------------------------------------------------------------

def room_of(js):
    """The room object of a command answer or of GET /v1/rooms/{id}."""
    return js["room"] if isinstance(js.get("room"), dict) else js


def version(rd, room_id, app=None):
    return room_of(expect_ok(get_room(rd, room_id, app), "GET room"))["version"]


def members(room):
    return [m["uid"] if isinstance(m, dict) else m for m in room["members"]]


def seat_of(room, uid):
    for i, s in enumerate(room["seats"]):
        if (s.get("uid") if isinstance(s, dict) else s) == uid:
            return i
    return None


def event_types(js):
    out = []
    for e in js.get("events", []):
        out.append(e.get("event_type") or e.get("type") if isinstance(e, dict) else e)
    return out


def room_events(rd, room_id):
    """Events the log sink received for room_id."""
    return [e for e in rd.events() if e.get("room_id") == room_id]


def wait_events(rd, room_id, n, timeout=10):
    """Waits until the log sink holds at least n events of room_id; returns them."""
    end = time.time() + timeout
    while True:
        evs = room_events(rd, room_id)
        if len(evs) >= n or time.time() > end:
            return evs
        time.sleep(0.05)


def metrics(rd):
    st, hd, text = rd.admin("GET", "/metrics")
    assert st == 200, st
    assert hd.get("Content-Type", "").startswith("text/plain"), hd
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, val = line.rpartition(" ")
            out[name] = float(val)
    return out


def raw_exchange(port, data, timeout=5):
    """Sends raw bytes on a new socket and returns everything read until close/timeout."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(data)
    got = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            got += b
    except socket.timeout:
        pass
    s.close()
    return got


def conn(rd, timeout=30):
    """A keep-alive connection to rd."""
    return http.client.HTTPConnection("127.0.0.1", rd.port, timeout=timeout)


def request(c, method, path, body=None, headers=None):
    """One request on keep-alive connection c: (status, headers, json)."""
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
    r = c.getresponse()
    text = r.read().decode()
    try:
        js = json.loads(text) if text else None
    except ValueError:
        js = text
    return r.status, dict(r.getheaders()), js


OUTBOX_COLS = ("id, event_id, event_type, room_id, room_seq, status, retry_count, sinks_done, "
               "last_error")


def outbox_rows(rd):
    """The room_outbox rows of a roomd on SQLite (store.sqlite.path), in id order, as dicts."""
    db = sqlite3.connect(rd.cfg["store"]["sqlite"]["path"], timeout=10)
    db.row_factory = sqlite3.Row
    try:
        return [dict(x) for x in db.execute(f"SELECT {OUTBOX_COLS} FROM room_outbox ORDER BY id")]
    finally:
        db.close()


def outbox_all_delivered(rd):
    """True when the SQLite outbox has rows and every one is delivered."""
    rs = outbox_rows(rd)
    return bool(rs) and all(x["status"] == "delivered" for x in rs)


def post_ok(rd, path, body):
    """POSTs body with a fresh command_id; asserts 200 or 201 (CreateRoom) and returns the json."""
    st, _, js = rd.post(path, dict(body, command_id=cid("p")))
    assert st in (200, 201), (path, st, js)
    return js
