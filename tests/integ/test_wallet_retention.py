# SPDX-License-Identifier: Apache-2.0
"""test_wallet_retention: money stays exact after the command log purge (issue 25,
docs/wallet.md "After the idempotency window").

A gift commits and is paid; its command log row is purged (store.retention.command_log_max_age
1s in this config); then its command_id is sent again:
- identically: 410 command_id_expired, nothing committed, nothing charged;
- to another room and receiver, or by another sender: 409 idempotency_key_reused;
on SQLite and MariaDB with the embedded ledger (the debit row records the gift it pays) and
with the remote wallet stand-in (its Try answers replay with state "confirmed"). The room's
gift total and every balance stay exact, `roomctl wallet audit` passes (the purged gift's debit
is no offence), and an audit fed a gift without its own debit (a second SendGift under the
purged command_id, written into the log directly, as the old bug committed it) fails.

Run: python3 tests/integ/test_wallet_retention.py (ROOMD_BUILD_DIR=build-asan; the MariaDB case
needs scripts/servers.sh and ROOMD_MYSQL_PORT)."""
import os
import sqlite3
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "standins"))
sys.path.insert(0, os.path.join(HERE, ".."))
import roomd_test as rt  # noqa: E402
import test_wallet_money as wm  # noqa: E402
from standins import WalletStandin  # noqa: E402

RETENTION = {"store": {"retention": {"command_log_max_age": "1s", "purge_interval": "200ms"}},
             "room": {"snapshot_every_n": 2, "snapshots_keep": 1}}
CID = "ret-gift-1"


class Db:
    """The store's tables, read and written directly (SQLite file or the MariaDB database)."""

    def __init__(self, r):
        self.r = r
        self.my = r.cfg["store"]["driver"] == "mysql"

    def q(self, sql, args=()):
        if self.my:
            for a in args:
                sql = sql.replace("?", "'" + str(a).replace("\\", "\\\\").replace("'", "''") + "'", 1)
            return [tuple(row) for row in wm.mysql(sql, self.r.cfg["store"]["mysql"]["database"])]
        db = sqlite3.connect(self.r.cfg["store"]["sqlite"]["path"], timeout=10)
        try:
            rows = [tuple(str(v) for v in row) for row in db.execute(sql, args)]
            db.commit()
            return rows
        finally:
            db.close()


def gift_total(r, rid):
    st, _, js = r.http("GET", f"/v1/rooms/{rid}")
    assert st == 200, js
    room = js.get("room", js)
    return int(room["gift_total"])


def purge_then_resend(r, balance, remote=None):
    """The scenario on a running roomd r; balance() reads uid 5's balance."""
    db = Db(r)
    wm.setup_rooms(r, ["ra", "rb"])
    st, _, js = r.post("/v1/rooms/rb/join", {"command_id": "ret-j7", "uid": 7})
    assert st == 200, js
    before = balance()
    st, _, js = wm.gift(r, "ra", CID, 2, 50)
    assert st == 200, js
    if remote is not None:
        rt.wait_until(lambda: wm.settled(remote), timeout=20, what="the gift's hold confirmed")
    assert balance() == before - 100, (balance(), before)
    (request,) = db.q("SELECT request FROM room_command_log WHERE command_id = ?", (CID,))[0]
    ta, tb = gift_total(r, "ra"), gift_total(r, "rb")
    # later commands in ra: snapshots past the gift's version, so its log row can be purged
    for uid in range(20, 24):
        st, _, js = r.post("/v1/rooms/ra/join", {"command_id": f"ret-j{uid}", "uid": uid})
        assert st == 200, js
    rt.wait_until(lambda: not db.q("SELECT 1 FROM room_command_log WHERE command_id = ?", (CID,)),
                  timeout=20, step=0.2, what="the gift's command log row purged")

    st, hd, js = wm.gift(r, "ra", CID, 2, 50)  # identical
    assert st == 410 and js["error"]["code"] == "command_id_expired", (st, js)
    assert "Idempotent-Replay" not in hd, hd
    st, _, js = wm.gift(r, "rb", CID, 2, 50, to=7)  # another room and receiver
    assert st == 409 and js["error"]["code"] == "idempotency_key_reused", (st, js)
    st, _, js = wm.gift(r, "ra", CID, 3, 50)  # another amount
    assert st == 409 and js["error"]["code"] == "idempotency_key_reused", (st, js)
    st, _, js = wm.gift(r, "ra", CID, 2, 50, uid=6, to=5)  # another sender (its own balance)
    assert st == 409 and js["error"]["code"] == "idempotency_key_reused", (st, js)
    assert not db.q("SELECT 1 FROM room_command_log WHERE command_id = ?", (CID,))
    assert balance() == before - 100, (balance(), before)
    assert (gift_total(r, "ra"), gift_total(r, "rb")) == (ta, tb)
    # a new command_id still pays and commits
    st, _, js = wm.gift(r, "ra", "ret-gift-2", 1, 10)
    assert st == 200, js
    assert balance() == before - 110
    if remote is not None:
        rt.wait_until(lambda: wm.settled(remote), timeout=20, what="holds settled")
        time.sleep(2.1)  # every hold older than wallet.reconcile_after for the audit
    return db, request


def audit_fed_unpaid_gift(r, db, request):
    out = wm.audit_ok(r)
    assert "1 of purged gifts" in out, out
    # the old bug: a second SendGift under the purged command_id, in another room, no debit
    forged = request.replace('"room_id":"ra"', '"room_id":"rb"')
    assert forged != request, request
    db.q("INSERT INTO room_command_log (app_code, room_id, version, command_id, command_type,"
         " request, response, created_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
         (wm.APP, "rb", 1000, CID, "SendGift", forged, "{}", int(time.time() * 1000)))
    rc, out = wm.roomctl(r, "wallet", "audit")
    assert rc == 1 and CID in out and "without its own debit" in out, (rc, out)


def test_embedded_sqlite():
    r = rt.Roomd(RETENTION).start()
    try:
        db, request = purge_then_resend(r, lambda: wm.embedded_balance(r))
        audit_fed_unpaid_gift(r, db, request)
    finally:
        r.stop()


def test_embedded_mariadb():
    r = rt.Roomd(rt.merge(wm.mysql_store(), RETENTION)).start()
    try:
        db, request = purge_then_resend(r, lambda: wm.embedded_balance(r))
        audit_fed_unpaid_gift(r, db, request)
    finally:
        r.stop()


def test_remote_wallet():
    tmp = tempfile.mkdtemp(prefix="wallet-ret-")
    w = WalletStandin(tmp, initial=wm.INITIAL).start()
    r = wm.start(rt.Roomd(rt.merge({"wallet": w.conf()}, RETENTION), tmp=tmp), remote=True)
    try:
        purge_then_resend(r, lambda: w.balance(wm.APP, 5), remote=w)
        confirmed = sum(int(h["amount"]) for h in w.holds("confirmed"))
        assert confirmed == 110, confirmed  # charged once per gift that committed
        wm.audit_ok(r)
    finally:
        r.stop()
        w.stop()


if __name__ == "__main__":
    rt.run([test_embedded_sqlite, test_embedded_mariadb, test_remote_wallet])
