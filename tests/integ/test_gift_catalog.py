# SPDX-License-Identifier: Apache-2.0
"""test_gift_catalog: SendGift is priced by the gift catalog in the store (issue 30), against a
real roomd under auth.mode jwt (a user token acting as itself).
- the catalog's price 1000: a gift naming unit_price 1 is refused 409 price_changed (the
  catalog's price and version in the answer) and changes nothing: room, events, wallet;
  unknown and disabled gifts refused; a gift naming no price pays the catalog's, its rocket
  energy is count * energy_per_unit;
- a price change between two gifts: both log rows stand with the price each applied
  ("catalog" in the row), a retry of the first naming its old price is answered from the log,
  and a restart replaying the log gives the same room (SQLite and MariaDB);
- the remote wallet (wallet_standin.js) is held and charged the catalog's price;
- the catalog's admin API: conditional change (409 version_conflict, nothing written), field
  errors; `roomctl gifts` lists and sets it.
Run: python3 tests/integ/test_gift_catalog.py (ROOMD_BUILD_DIR=build-asan)."""
import os
import sqlite3
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "standins"))
sys.path.insert(0, os.path.join(HERE, ".."))
import http_util as hu  # noqa: E402
import jwt_util as jw  # noqa: E402
import roomd_test as rt  # noqa: E402
from standins import WalletStandin  # noqa: E402

SECRET = "gift-secret-" + os.urandom(16).hex()
ADMIN = "gift-admin-" + os.urandom(12).hex()
ENV = {"ROOMD_TEST_JWT": SECRET, "ROOMD_TEST_ADMIN": ADMIN}
INITIAL = 100000
ROOMCTL = os.path.join(rt.BUILD, "roomctl")


def tok(uid):
    return jw.bearer(jw.hs256(SECRET, jw.claims(uid, "hyapp")))


def roomd(overrides=None, tmp=None):
    ov = {"auth": {"mode": "jwt", "jwt": {"hs256_secret_env": "ROOMD_TEST_JWT"}},
          "admin": {"token_env": "ROOMD_TEST_ADMIN"},
          # the replay below goes through the log rows, not a snapshot
          "room": {"snapshot_every_n": 1000},
          "wallet": {"initial_balance": INITIAL}}
    rd = rt.Roomd(rt.merge(ov, overrides or {}), tmp=tmp)
    rd.admin_token = ADMIN
    return rd


def setup_room(rd, rid, sender=5, to=6):
    hu.expect_ok(rd.post("/v1/rooms", {"command_id": hu.cid(), "room_id": rid, "owner_uid": to,
                                       "title": "gifts"}, headers=tok(to)), "create")
    for uid in (to, sender):
        hu.expect_ok(rd.post(f"/v1/rooms/{rid}/join", {"command_id": hu.cid(), "uid": uid},
                             headers=tok(uid)), "join")


def send(rd, rid, cid=None, gift_id="ring", count=1, price=None, uid=5, to=6):
    body = {"command_id": cid or hu.cid(), "uid": uid, "to_uid": to, "gift_id": gift_id,
            "count": count}
    if price is not None:
        body["unit_price"] = price
    return rd.post(f"/v1/rooms/{rid}/gifts", body, headers=tok(uid))


def room(rd, rid):
    return hu.room_of(hu.expect_ok(rd.http("GET", f"/v1/rooms/{rid}", headers=tok(5)), "room"))


def balance(rd, uid):
    return hu.expect_ok(rd.http("GET", f"/v1/wallet/{uid}", headers=tok(uid)), "wallet")["balance"]


def snapshot(rd, rid):
    """What a refused gift must not change."""
    r = room(rd, rid)
    return r["version"], r["gift_total"], r["rocket"]["energy"], balance(rd, 5), \
        len(hu.room_events(rd, rid))


def test_price_from_catalog():
    rd = roomd().start(env=ENV)
    try:
        rid = hu.room_name("gc")
        setup_room(rd, rid)
        g = hu.expect_ok(hu.put_gift(rd, "ring", 1000, energy_per_unit=300), "ring at 1000")
        assert g["version"] == 1 and g["energy_per_unit"] == 300 and g["enabled"], g
        hu.expect_ok(hu.put_gift(rd, "old", 5, enabled=False), "a disabled gift")
        hu.wait_events(rd, rid, 3)
        before = snapshot(rd, rid)
        # the client names a price the catalog does not have: refused, nothing changed
        st, _, js = send(rd, rid, price=1)
        assert st == 409 and js["error"]["code"] == "price_changed", (st, js)
        assert js["error"]["unit_price"] == 1000 and js["error"]["catalog_version"] == 1, js
        for gift_id, status, code in (("nosuch", 404, "gift_not_found"),
                                      ("old", 409, "gift_disabled")):
            st, _, js = send(rd, rid, gift_id=gift_id)
            assert st == status and js["error"]["code"] == code, (gift_id, st, js)
        import time
        time.sleep(0.5)  # > poll_interval: an event, had one been written, is delivered
        assert snapshot(rd, rid) == before, "a refused gift changed something"
        # no price named: the catalog's; energy count * energy_per_unit, not the value
        js = hu.expect_ok(send(rd, rid, count=2), "gift at the catalog's price")
        r = hu.room_of(js)
        assert r["gift_total"] == before[1] + 2000, r
        assert r["rocket"]["energy"] == before[2] + 600, r
        assert balance(rd, 5) == before[3] - 2000
        # the price the client saw, named: the same
        hu.expect_ok(send(rd, rid, count=1, price=1000), "gift naming the catalog's price")
        assert balance(rd, 5) == before[3] - 3000
        # the gift event carries the price applied
        evs = hu.wait_events(rd, rid, before[4] + 2)
        gifts = [e for e in evs if e.get("event_type") == "RoomGiftSent"]
        assert len(gifts) == 2, gifts
        # every client reads the catalog; the public listener cannot change it
        js = hu.expect_ok(rd.http("GET", "/v1/gifts", headers=tok(5)), "catalog")
        assert js["catalog"] == "required", js
        assert [(x["gift_id"], x["unit_price"], x["enabled"]) for x in js["gifts"]] == \
            [("old", 5, False), ("ring", 1000, True)], js
        st, _, _ = rd.post("/v1/gifts", {"gift_id": "ring", "unit_price": 1}, headers=tok(5))
        assert st == 404
    finally:
        rd.stop()


def log_rows(rd, rid, mysql_db=None):
    sql = ("SELECT command_id, request FROM room_command_log WHERE room_id = '%s'"
           " AND command_type = 'SendGift' ORDER BY version" % rid)
    if mysql_db:
        import test_wallet_money as wm
        return [tuple(r) for r in wm.mysql(sql, mysql_db)]
    db = sqlite3.connect(rd.cfg["store"]["sqlite"]["path"])
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def price_change_replay(overrides=None, mysql_db=None):
    import json
    rd = roomd(overrides).start(env=ENV)
    try:
        rid = hu.room_name("gr")
        setup_room(rd, rid)
        hu.expect_ok(hu.put_gift(rd, "ring", 1000, energy_per_unit=100), "ring at 1000")
        first = hu.expect_ok(send(rd, rid, cid="g1-" + rid, count=1, price=1000), "g1")
        g = hu.expect_ok(hu.put_gift(rd, "ring", 2000, energy_per_unit=50, version=1), "at 2000")
        assert g["version"] == 2, g
        hu.expect_ok(send(rd, rid, cid="g2-" + rid, count=3), "g2 at the new price")
        # a retry of g1 naming its old price: the log's answer, not price_changed
        st, hd, js = send(rd, rid, cid="g1-" + rid, count=1, price=1000)
        assert st == 200 and hd.get("Idempotent-Replay") == "true" and js == first, (st, js)
        # both rows stand, each with the price it applied
        rows = log_rows(rd, rid, mysql_db)
        assert [r[0] for r in rows] == ["g1-" + rid, "g2-" + rid], rows
        cats = [json.loads(r[1])["catalog"] for r in rows]
        assert cats == [{"energy_per_unit": 100, "unit_price": 1000, "version": 1},
                        {"energy_per_unit": 50, "unit_price": 2000, "version": 2}], cats
        want = room(rd, rid)
        assert want["gift_total"] == 1000 + 6000, want
        assert want["rocket"]["energy"] == 100 + 150, want  # below the first threshold
        assert balance(rd, 5) == INITIAL - 7000
        # the money audit reads each gift's price from its row's "catalog"
        p = subprocess.run([ROOMCTL, "-c", rd.cfg_path, "wallet", "audit"], capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 0, p.stdout + p.stderr
        # the restart rebuilds the room from the log: the prices of the rows, not today's
        hu.expect_ok(hu.put_gift(rd, "ring", 7, energy_per_unit=7), "another price")
        rd.stop()
        rd.start(env=ENV)
        got = room(rd, rid)
        assert got == want, (got, want)
    finally:
        rd.stop()


def test_price_change_replay_sqlite():
    price_change_replay()


def test_price_change_replay_mariadb():
    import test_wallet_money as wm
    ov = wm.mysql_store()
    price_change_replay(ov, ov["store"]["mysql"]["database"])


def test_remote_wallet_pays_catalog_price():
    tmp = tempfile.mkdtemp(prefix="gift-remote-")
    w = WalletStandin(tmp, initial=INITIAL).start()
    rd = roomd({"wallet": w.conf()}, tmp=tmp).start(env=ENV)
    try:
        rid = hu.room_name("gw")
        setup_room(rd, rid)
        hu.expect_ok(hu.put_gift(rd, "ring", 300), "ring at 300")
        st, _, js = send(rd, rid, price=299)
        assert st == 409 and js["error"]["code"] == "price_changed", (st, js)
        assert w.holds() == [], w.holds()  # refused before the wallet's Try
        hu.expect_ok(send(rd, rid, count=2), "gift")
        rt.wait_until(lambda: [h["state"] for h in w.holds()] == ["confirmed"], timeout=20,
                      what="the hold confirmed")
        assert int(w.holds()[0]["amount"]) == 600, w.holds()
        assert w.balance("hyapp", 5) == INITIAL - 600
    finally:
        rd.stop()
        w.stop()


def test_admin_api_refusals():
    rd = roomd().start(env=ENV)
    try:
        hu.expect_ok(hu.put_gift(rd, "rose", 10, version=0), "new rose")
        for body, status, field_or_code in (
                ({"gift_id": "rose", "unit_price": 99, "version": 0}, 409, "version_conflict"),
                ({"gift_id": "rose", "unit_price": 0}, 400, "unit_price"),
                ({"gift_id": "rose", "unit_price": 5, "energy_per_unit": -1}, 400,
                 "energy_per_unit"),
                ({"gift_id": "ro se", "unit_price": 5}, 400, "gift_id"),
                ({"gift_id": "rose", "unit_price": 5, "enabled": "yes"}, 400, "enabled"),
                ({"gift_id": "rose", "unit_price": 5, "colour": "red"}, 400, "colour")):
            st, _, js = rd.admin_post("/v1/gifts", body)
            assert st == status, (body, st, js)
            assert field_or_code in (js["error"].get("field"), js["error"]["code"]), (body, js)
        js = hu.expect_ok(rd.http("GET", "/v1/gifts", headers=tok(1)), "catalog")
        assert [(g["unit_price"], g["version"]) for g in js["gifts"]] == [(10, 1)], js
        # roomctl gifts: set and list over the admin API
        env = dict(os.environ, ROOMD_ADMIN_TOKEN=ADMIN)
        url = f"http://127.0.0.1:{rd.admin_port}"
        p = subprocess.run([ROOMCTL, "--url", url, "gifts", "set", "tulip", "40", "4"], capture_output=True, text=True, env=env,
                           timeout=30)
        assert p.returncode == 0, p.stdout + p.stderr
        p = subprocess.run([ROOMCTL, "--url", url, "gifts", "list"], capture_output=True,
                           text=True, env=env, timeout=30)
        assert p.returncode == 0 and "tulip" in p.stdout and "40" in p.stdout, p.stdout + p.stderr
        p = subprocess.run([ROOMCTL, "--url", url, "gifts", "set", "tulip", "0"],
                           capture_output=True, text=True, env=env, timeout=30)
        assert p.returncode != 0 and "unit_price" in p.stdout + p.stderr, p.stdout + p.stderr
    finally:
        rd.stop()


if __name__ == "__main__":
    rt.run([test_price_from_catalog, test_price_change_replay_sqlite,
            test_price_change_replay_mariadb, test_remote_wallet_pays_catalog_price,
            test_admin_api_refusals])
