# SPDX-License-Identifier: Apache-2.0
"""test_owner_limit.py: room.max_rooms_per_owner over HTTP (issue 11).

SQLite: the owner's creates past the limit answer 429 too_many_rooms with Retry-After, change
nothing (no room, no command log row, no outbox row); a closed room frees its slot; other
owners and other apps count apart. MariaDB: two roomd processes on one database take
concurrent creates of one owner at the limit: never more than the limit commit (the count runs
in the create's commit, under the owner's lock row), the refused ones wrote nothing.
"""
import os
import sqlite3
import tempfile
import threading
import uuid

import http_util as hu
from roomd_test import Roomd, env_port, merge, mysql_query, need, run

MYSQL_PORT = env_port("ROOMD_MYSQL_PORT", 3417)
LIMIT = 2


def refused_too_many(st, hd, js):
    assert st == 429 and js["error"]["code"] == "too_many_rooms", (st, js)
    assert hd.get("Retry-After") == "60", hd
    assert "room.max_rooms_per_owner (2)" in js["error"]["message"], js


def test_sqlite_limit():
    rd = Roomd({"room": {"max_rooms_per_owner": LIMIT, "max_creates_per_minute": 0}}).start()
    try:
        db = rd.cfg["store"]["sqlite"]["path"]
        a, b = hu.room_name("ol"), hu.room_name("ol")
        hu.expect_ok(hu.create(rd, a, owner=88))
        hu.expect_ok(hu.create(rd, b, owner=88))
        con = sqlite3.connect(db)
        outbox = con.execute("SELECT count(*) FROM room_outbox").fetchone()[0]
        c = hu.room_name("ol")
        st, hd, js = hu.create(rd, c, owner=88, command_id=f"cmd-{c}")
        refused_too_many(st, hd, js)
        assert rd.http("GET", f"/v1/rooms/{c}")[0] == 404, "a refused create made a room"
        assert con.execute("SELECT count(*) FROM room_outbox").fetchone()[0] == outbox
        assert con.execute("SELECT count(*) FROM room_command_log WHERE command_id = ?",
                           (f"cmd-{c}",)).fetchone()[0] == 0
        assert con.execute("SELECT count(*) FROM rooms WHERE owner_uid = 88").fetchone()[0] == 2
        con.close()
        # the same command_id again is no replay: it was never logged, and is still refused
        refused_too_many(*hu.create(rd, c, owner=88, command_id=f"cmd-{c}"))
        hu.expect_ok(hu.create(rd, hu.room_name("ol"), owner=89))  # another owner
        hu.expect_ok(hu.create(rd, hu.room_name("ol"), owner=88, app="other"))  # another app
        hu.expect_ok(hu.close(rd, a, 88))
        hu.expect_ok(hu.create(rd, c, owner=88, command_id=f"cmd-{c}"))  # a slot freed
    finally:
        rd.stop()


def test_mysql_two_nodes_concurrent():
    need("127.0.0.1", MYSQL_PORT, "mariadb")
    db = f"roomd_ol{os.getpid()}_{uuid.uuid4().hex[:6]}"
    mysql_query(f"CREATE DATABASE {db} CHARACTER SET utf8mb4")
    tmp = tempfile.mkdtemp(prefix="roomd-ol-")
    nodes = []
    try:
        for name in ("a", "b"):
            d = os.path.join(tmp, name)
            os.makedirs(d)
            nodes.append(Roomd(merge(
                {"store": {"driver": "mysql",
                           "mysql": {"host": "127.0.0.1", "port": MYSQL_PORT, "user": "root",
                                     "password": "", "database": db, "deadlock_retries": 5}}},
                {"app": {"node_id": f"node-{name}"},
                 "room": {"max_rooms_per_owner": LIMIT, "max_creates_per_minute": 0}}),
                tmp=d))
        for rd in nodes:
            rd.start()
        for rnd in range(3):
            owner = 700 + rnd
            rooms = [f"oc-{rnd}-{i}-{uuid.uuid4().hex[:4]}" for i in range(8)]
            got = {}
            go = threading.Barrier(len(rooms))

            def one(i):
                c = hu.conn(nodes[i % 2])
                go.wait()
                st, _, js = hu.request(c, "POST", "/v1/rooms",
                                       {"command_id": f"c-{rooms[i]}", "room_id": rooms[i],
                                        "owner_uid": owner, "title": "t"})
                got[rooms[i]] = (st, js)
                c.close()

            ts = [threading.Thread(target=one, args=(i,)) for i in range(len(rooms))]
            [t.start() for t in ts]
            [t.join() for t in ts]
            ok = [r for r, (st, _) in got.items() if st == 201]  # CreateRoom: 201 Created
            for r, (st, js) in got.items():
                assert st in (201, 429, 503), (r, st, js)
                if st == 429:
                    assert js["error"]["code"] == "too_many_rooms", js
            assert len(ok) <= LIMIT, got
            if all(st != 503 for st, _ in got.values()):
                assert len(ok) == LIMIT, got
            stored = mysql_query(f"SELECT room_id FROM rooms WHERE owner_uid = {owner}", db)
            assert sorted(r for (r,) in stored) == sorted(ok), (stored, ok)
            rows = mysql_query("SELECT DISTINCT room_id FROM room_outbox WHERE room_id LIKE"
                               f" 'oc-{rnd}-%'", db)
            assert sorted(r for (r,) in rows) == sorted(ok), (rows, ok)
            logged = mysql_query("SELECT room_id FROM room_command_log WHERE room_id LIKE"
                                 f" 'oc-{rnd}-%'", db)
            assert sorted(r for (r,) in logged) == sorted(ok), (logged, ok)
        for rd in nodes:
            assert rd.stop() == 0, rd.stderr_text()
    finally:
        for rd in nodes:
            rd.stop()
        mysql_query(f"DROP DATABASE IF EXISTS {db}")


if __name__ == "__main__":
    run([test_sqlite_limit, test_mysql_two_nodes_concurrent])
