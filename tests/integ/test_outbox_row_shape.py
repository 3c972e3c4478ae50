# SPDX-License-Identifier: Apache-2.0
"""test_outbox_row_shape: one room_outbox row shape wherever a row is read or written
(STORE_OUTBOX_COLS / STORE_OUTBOX_COPY in src/store/store.h), on both backends.

roomd in dual mode (the JetStream bus sink and a log sink on /dev/full, max_retry_count 1):
a room and two joins give three events with room_seq 1, 2, 3, each published to the stream
and then failed (the log sink cannot write). For each event the room_seq is the same in the
store (the table itself), in `roomctl outbox show`, in the admin API's row view (the JSON the
console's row view shows) and in the stream's envelope. A repair replay then writes one new
row per failed one: its own event_id, command_id "repair:<original>", status pending, and the
original's app_code, room_id, room_version, event_type, payload and room_seq; the originals
stay failed. Run once on SQLite, once on a fresh MariaDB database."""
import os
import sqlite3
import sys
import tempfile
import uuid

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "standins"))
from roomd_test import Roomd, env_port, mysql_query, need, run, wait_until  # noqa: E402
from roomctl_util import ctl_json  # noqa: E402
from test_bus_roomd import NATS_PORT, bus_cfg, cleanup, new_ns  # noqa: E402
from bus_util import Nats, envelope, js_all  # noqa: E402
import http_util as hu  # noqa: E402

MYSQL_PORT = env_port("ROOMD_MYSQL_PORT", 3417)
COLS = "event_id, app_code, room_id, room_version, event_type, payload, room_seq, command_id," \
       " status"


class Store:
    """The room_outbox table read directly (not through roomd)."""

    def __init__(self, driver, tmp):
        self.driver, self.tmp = driver, tmp
        self.db = f"roomd_shape_{os.getpid()}_{uuid.uuid4().hex[:6]}"

    def conf(self):
        if self.driver == "sqlite":
            return {"driver": "sqlite", "sqlite": {"path": os.path.join(self.tmp, "roomd.db")}}
        mysql_query(f"CREATE DATABASE {self.db} CHARACTER SET utf8mb4")
        return {"driver": "mysql", "mysql": {"host": "127.0.0.1", "port": MYSQL_PORT,
                                             "user": "root", "password": "",
                                             "database": self.db, "pool_size": 4}}

    def rows(self):
        """event_id -> dict of COLS (payload as hex)."""
        names = [c.strip() for c in COLS.split(",")]
        if self.driver == "sqlite":
            con = sqlite3.connect(f"file:{os.path.join(self.tmp, 'roomd.db')}?mode=ro", uri=True,
                                  timeout=10)
            try:
                got = con.execute(f"SELECT {COLS.replace('payload', 'hex(payload)')}"
                                  " FROM room_outbox ORDER BY id").fetchall()
            finally:
                con.close()
        else:
            got = mysql_query(f"SELECT {COLS.replace('payload', 'hex(payload)')}"
                              " FROM room_outbox ORDER BY id", self.db)
        out = {}
        for r in got:
            d = dict(zip(names, r))
            d["room_version"], d["room_seq"] = int(d["room_version"]), int(d["room_seq"])
            d["payload"] = d["payload"].upper()
            out[d["event_id"]] = d
        return out

    def drop(self):
        if self.driver == "mysql":
            mysql_query(f"DROP DATABASE IF EXISTS {self.db}")


def shape(driver):
    need("127.0.0.1", NATS_PORT, "nats-server")
    if driver == "mysql":
        need("127.0.0.1", MYSQL_PORT, "mariadbd")
    tmp, ns = tempfile.mkdtemp(prefix=f"shape-{driver}-"), new_ns()
    store = Store(driver, tmp)
    cfg = bus_cfg(tmp, ns, extra={
        "store": store.conf(),
        "outbox_worker": {"publish_mode": "dual", "max_retry_count": 1,
                          "initial_backoff": "50ms", "max_backoff": "100ms",
                          "poll_interval": "50ms",
                          "log_sink": {"enabled": True, "path": "/dev/full"}}})
    r = Roomd(cfg, tmp=tmp)
    r.start()
    nc = Nats(NATS_PORT)
    try:
        room = hu.room_name("shape")
        st, _, js = hu.create(r, room)
        assert st == 201, (st, js)
        for uid in (5, 6):
            st, _, js = hu.join(r, room, uid)
            assert st == 200, (st, js)
        rows = wait_until(lambda: (lambda rs: rs if len(rs) == 3 and all(
            v["status"] == "failed" for v in rs.values()) else None)(store.rows()), timeout=30,
            what="three failed rows")
        assert sorted(v["room_seq"] for v in rows.values()) == [1, 2, 3], rows
        stream = wait_until(lambda: (lambda m: m if len(m) == 3 else None)(
            [envelope(d) for _, _, d in js_all(nc, ns + "hyapp_room_outbox")]), timeout=20,
            what="three events on the stream")
        on_stream = {e["event_id"]: e["room_seq"] for e in stream}
        for eid, row in rows.items():
            shown = ctl_json(r.cfg_path, "outbox", "show", eid)
            st, _, api = r.admin("GET", f"/admin/v1/outbox/{eid}")
            assert st == 200, (st, api)
            seqs = (row["room_seq"], shown["event"]["room_seq"], api["event"]["room_seq"],
                    on_stream[eid])
            assert len(set(seqs)) == 1, (eid, "store, outbox show, API, stream", seqs)

        # the repair: new rows, each a copy of its original with its own identity
        st, _, js = r.admin("POST", "/admin/v1/outbox/replay",
                            {"filter": {"room_id": room}, "repair": True})
        assert st == 200 and js["replayed"] == 3, (st, js)
        after = store.rows()
        new = {e: v for e, v in after.items() if e not in rows}
        assert len(new) == 3, after
        for eid, v in new.items():
            assert v["command_id"].startswith("repair:"), v
            orig = rows[v["command_id"][len("repair:"):]]
            for col in ("app_code", "room_id", "room_version", "event_type", "payload",
                        "room_seq"):
                assert v[col] == orig[col], (col, v, orig)
            assert v["status"] in ("pending", "delivering", "retryable", "failed"), v
        assert all(after[e]["status"] == "failed" for e in rows), after
        assert sorted(v["room_seq"] for v in new.values()) == [1, 2, 3]
    finally:
        nc.close()
        r.stop()
        cleanup(ns)
        store.drop()


def test_row_shape_sqlite():
    shape("sqlite")


def test_row_shape_mysql():
    shape("mysql")


if __name__ == "__main__":
    run([test_row_shape_sqlite, test_row_shape_mysql])
