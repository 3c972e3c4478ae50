# SPDX-License-Identifier: Apache-2.0
"""test_seed_rows: the seed's columns are the truth for every room_outbox row, whoever wrote
it (issue 26, docs/migrate.md), on both stores (SQLite, MariaDB).

1. rows of a second writer: inserted straight into room_outbox in each seed status, with and
   without roomd's columns (due_at_ms): pending, retryable past its next_retry_at_ms and
   delivering past its lock are delivered once; retryable not yet due and delivering under a
   live lock wait; published and failed are never sent, even with a due_at_ms. The summary
   (roomd_outbox_rows) and age gauge count the waiting rows.
2. a pre-existing table of the seed's shape (no roomd column: no due_at_ms, sinks_done,
   room_seq, delivered_at_ms) with 1,000 rows: roomd migrates it in place (rows kept, columns
   and indexes added) and delivers every due row exactly once, each room's rows in id order;
   its published and failed rows stay unsent.
3. a shape roomd cannot take (no payload column) is refused at start, naming the column.

Run: python3 tests/integ/test_seed_rows.py (PYTHONPATH=tests, ROOMD_BUILD_DIR=build)
"""
import os
import sqlite3
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(__file__))
import http_util as hu  # noqa: E402
from roomd_test import Roomd, env_port, listing, mysql_query, need, run, wait_until  # noqa: E402

MYSQL_PORT = env_port("ROOMD_MYSQL_PORT", 3417)
TMP = tempfile.mkdtemp(prefix="roomd-seedrows-")
COLS = ("event_id, app_code, room_id, room_version, command_id, event_type, payload, status,"
        " retry_count, next_retry_at_ms, lock_until_ms, locked_by, created_at_ms, updated_at_ms")


def now_ms():
    return int(time.time() * 1000)


class Sqlite:
    name = "sqlite"

    def __init__(self):
        self.path = os.path.join(tempfile.mkdtemp(dir=TMP), "roomd.db")

    def cfg(self):
        return {"store": {"driver": "sqlite", "sqlite": {"path": self.path}}}

    def execute(self, sql, args=()):
        con = sqlite3.connect(self.path, timeout=30)
        try:
            cur = con.execute(sql, args)
            rows = cur.fetchall()
            con.commit()
            return rows
        finally:
            con.close()

    def insert(self, rows, extra_cols=""):
        """rows: tuples in COLS order (payload as bytes), plus the extra_cols values."""
        cols = COLS + extra_cols
        marks = ",".join("?" * len(cols.split(",")))
        # roomd's own SQLite table has these NOT NULL (0 / '' = none)
        rows = [r[:9] + [r[9] or 0, r[10] or 0, r[11] or ""] + r[12:] for r in rows]
        con = sqlite3.connect(self.path, timeout=30)
        try:
            con.executemany(f"INSERT INTO room_outbox ({cols}) VALUES ({marks})", rows)
            con.commit()
        finally:
            con.close()

    def seed_tables(self, with_payload=True):
        payload = " payload BLOB NOT NULL," if with_payload else ""
        con = sqlite3.connect(self.path)
        con.executescript(
            "CREATE TABLE rooms (app_code TEXT NOT NULL, room_id TEXT NOT NULL,"
            " owner_uid INTEGER NOT NULL, title TEXT NOT NULL, status TEXT NOT NULL,"
            " version INTEGER NOT NULL, created_at_ms INTEGER NOT NULL,"
            " updated_at_ms INTEGER NOT NULL, PRIMARY KEY (app_code, room_id));"
            "CREATE TABLE room_command_log (id INTEGER PRIMARY KEY, app_code TEXT NOT NULL,"
            " room_id TEXT NOT NULL, version INTEGER NOT NULL, command_id TEXT NOT NULL,"
            " command_type TEXT NOT NULL, request TEXT NOT NULL, response TEXT NOT NULL,"
            " created_at_ms INTEGER NOT NULL, UNIQUE (app_code, command_id));"
            "CREATE TABLE room_outbox (id INTEGER PRIMARY KEY AUTOINCREMENT,"
            " event_id TEXT NOT NULL UNIQUE, app_code TEXT NOT NULL, room_id TEXT NOT NULL,"
            " room_version INTEGER NOT NULL, command_id TEXT NOT NULL, event_type TEXT NOT NULL,"
            f"{payload} status TEXT NOT NULL, retry_count INTEGER NOT NULL DEFAULT 0,"
            " next_retry_at_ms INTEGER, lock_until_ms INTEGER, locked_by TEXT,"
            " last_error TEXT, created_at_ms INTEGER NOT NULL, updated_at_ms INTEGER NOT NULL);"
            "CREATE INDEX idx_outbox_status ON room_outbox (status, next_retry_at_ms);")
        con.close()

    def close(self):
        pass


class Mysql:
    name = "mysql"

    def __init__(self):
        self.db = f"roomd_seed_{os.getpid()}_{uuid.uuid4().hex[:6]}"
        mysql_query(f"CREATE DATABASE {self.db} CHARACTER SET utf8mb4")

    def cfg(self):
        return {"store": {"driver": "mysql", "mysql": {
            "host": "127.0.0.1", "port": MYSQL_PORT, "user": "root", "password": "",
            "database": self.db, "pool_size": 4, "connect_timeout": "2s"}}}

    def execute(self, sql, args=()):
        assert not args
        return mysql_query(sql, self.db)

    @staticmethod
    def lit(v):
        if v is None:
            return "NULL"
        if isinstance(v, bytes):
            return "0x" + v.hex() if v else "''"
        if isinstance(v, int):
            return str(v)
        return "'" + str(v).replace("'", "''") + "'"

    def insert(self, rows, extra_cols=""):
        cols = COLS + extra_cols
        for i in range(0, len(rows), 200):
            values = ",".join("(" + ",".join(self.lit(v) for v in r) + ")"
                              for r in rows[i:i + 200])
            mysql_query(f"INSERT INTO room_outbox ({cols}) VALUES {values}", self.db)

    def seed_tables(self, with_payload=True):
        payload = " payload MEDIUMBLOB NOT NULL," if with_payload else ""
        mysql_query(
            "CREATE TABLE rooms (app_code VARCHAR(64) NOT NULL, room_id VARCHAR(64) NOT NULL,"
            " owner_uid BIGINT NOT NULL, title VARCHAR(255) NOT NULL, status VARCHAR(16) NOT NULL,"
            " version BIGINT NOT NULL, created_at_ms BIGINT NOT NULL,"
            " updated_at_ms BIGINT NOT NULL, PRIMARY KEY (app_code, room_id));"
            "CREATE TABLE room_command_log (id BIGINT AUTO_INCREMENT PRIMARY KEY,"
            " app_code VARCHAR(64) NOT NULL, room_id VARCHAR(64) NOT NULL, version BIGINT NOT NULL,"
            " command_id VARCHAR(64) NOT NULL, command_type VARCHAR(32) NOT NULL,"
            " request MEDIUMTEXT NOT NULL, response MEDIUMTEXT NOT NULL,"
            " created_at_ms BIGINT NOT NULL, UNIQUE KEY uk_cmd (app_code, command_id));"
            "CREATE TABLE room_outbox (id BIGINT AUTO_INCREMENT PRIMARY KEY,"
            " event_id VARCHAR(64) NOT NULL, app_code VARCHAR(64) NOT NULL,"
            " room_id VARCHAR(64) NOT NULL, room_version BIGINT NOT NULL,"
            " command_id VARCHAR(64) NOT NULL, event_type VARCHAR(64) NOT NULL,"
            f"{payload} status VARCHAR(16) NOT NULL, retry_count INT NOT NULL DEFAULT 0,"
            " next_retry_at_ms BIGINT NULL, lock_until_ms BIGINT NULL, locked_by VARCHAR(64) NULL,"
            " last_error TEXT NULL, created_at_ms BIGINT NOT NULL, updated_at_ms BIGINT NOT NULL,"
            " UNIQUE KEY uk_event (event_id), KEY idx_status_retry (status, next_retry_at_ms))",
            self.db)

    def close(self):
        mysql_query(f"DROP DATABASE IF EXISTS {self.db}")


_sample = []


def sample_event():
    """(event_type, payload bytes) of a RoomCreated row roomd wrote itself (a scratch roomd on
    SQLite): a payload that decodes, for the rows a second writer inserts."""
    if _sample:
        return _sample[0]
    st = Sqlite()
    rd = Roomd(st.cfg(), tmp=tempfile.mkdtemp(dir=TMP)).start()
    try:
        s, _, js = rd.post("/v1/rooms", {"command_id": "c-sample", "room_id": "sample",
                                         "owner_uid": 1, "title": "t"})
        assert s == 201, (s, js)
    finally:
        rd.stop()
    rows = st.execute("SELECT event_type, payload FROM room_outbox WHERE room_id = 'sample'")
    _sample.append((rows[0][0], bytes(rows[0][1])))
    return _sample[0]


def row(status, room, *, created=None, next_retry=None, lock_until=None, locked_by=None):
    etype, payload = sample_event()
    t = now_ms()
    return [str(uuid.uuid4()), "hyapp", room, 1, f"seed-{uuid.uuid4().hex[:12]}", etype,
            payload, status, 0, next_retry, lock_until, locked_by,
            created if created is not None else t - 1000, t - 1000]


def sent(rd):
    """{event_id: times} in rd's log sink."""
    out = {}
    for e in rd.events():
        out[e["event_id"]] = out.get(e["event_id"], 0) + 1
    return out


def statuses(st):
    return {r[0]: r[1] for r in st.execute("SELECT event_id, status FROM room_outbox")}


def second_writer(st):
    rd = Roomd(st.cfg(), tmp=tempfile.mkdtemp(dir=TMP)).start()
    try:
        t = now_ms()
        hour = 3600 * 1000
        old = t - 120 * 1000  # the waiting rows are two minutes old: the age gauge shows it
        plain = {  # no roomd column: the seed's writer
            "pending": row("pending", "w1"),
            "retryable_due": row("retryable", "w2", next_retry=t - 5000),
            "retryable_later": row("retryable", "w3", next_retry=t + hour, created=old),
            "delivering_expired": row("delivering", "w4", lock_until=t - 5000,
                                      locked_by="seed-host/worker-1"),
            "delivering_locked": row("delivering", "w5", lock_until=t + hour,
                                     locked_by="seed-host/worker-1", created=old),
            "published": row("published", "w6"),
            "failed": row("failed", "w7"),
        }
        st.insert([v for v in plain.values()])
        with_due = {  # with roomd's due_at_ms, as a writer copying roomd's rows might leave it
            "pending+due": row("pending", "w8") + [t - 1000],
            "published+due": row("published", "w9") + [t - 1000],
            "failed+due": row("failed", "w10") + [t - 1000],
            "retryable_later+due": row("retryable", "w11", next_retry=t + hour) + [t - 1000],
        }
        st.insert([v for v in with_due.values()], ", due_at_ms")
        ids = {k: v[0] for k, v in list(plain.items()) + list(with_due.items())}
        want_sent = ("pending", "retryable_due", "delivering_expired", "pending+due")
        wait_until(lambda: all(sent(rd).get(ids[k]) for k in want_sent), timeout=20,
                   what="the due rows of the second writer delivered")
        wait_until(lambda: all(statuses(st)[ids[k]] == "delivered" for k in want_sent),
                   timeout=10, what="their completions")
        time.sleep(1.5)  # claims and reconciles ran again meanwhile
        got, now = sent(rd), statuses(st)
        for k in want_sent:
            assert got[ids[k]] == 1, (k, got[ids[k]])
        for k, status in (("retryable_later", "retryable"), ("delivering_locked", "delivering"),
                          ("published", "published"), ("failed", "failed"),
                          ("published+due", "published"), ("failed+due", "failed"),
                          ("retryable_later+due", "retryable")):
            assert ids[k] not in got, f"{k} was sent"
            assert now[ids[k]] == status, (k, now[ids[k]])
        # the summary and the age gauge count the rows still waiting
        def gauges():
            m = hu.metrics(rd)
            return (m.get('roomd_outbox_rows{scope="store",status="retryable"}', 0) >= 2 and
                    m.get('roomd_outbox_rows{scope="store",status="delivering"}', 0) >= 1 and
                    m.get('roomd_outbox_oldest_undelivered_seconds{scope="store"}', 0) >= 100)
        wait_until(gauges, timeout=10, what="gauges counting the second writer's rows")
    finally:
        rd.stop()


def seed_table_1000(st):
    st.seed_tables()
    t = now_ms()
    rows, expect, kinds = [], [], ("pending",) * 14 + ("retryable",) * 4 + ("delivering",) * 2
    for i in range(1000):
        room = f"s{i % 50}"
        if i % 100 == 7:
            r = row("published", room)
        elif i % 100 == 8:
            r = row("failed", room)
        else:
            k = kinds[i % len(kinds)]
            r = row(k, room, next_retry=t - 1000 if k == "retryable" else None,
                    lock_until=t - 1000 if k == "delivering" else None,
                    locked_by="seed-host/worker-2" if k == "delivering" else None)
            expect.append(r[0])
        rows.append(r)
    st.insert(rows)
    rd = Roomd(st.cfg(), tmp=tempfile.mkdtemp(dir=TMP)).start()
    try:
        wait_until(lambda: len(sent(rd)) >= len(expect), timeout=60,
                   what=f"{len(expect)} rows of the seed's table delivered")
        time.sleep(1.0)
        got = sent(rd)
        assert set(got) == set(expect), (len(got), len(expect))
        assert all(n == 1 for n in got.values()), [k for k, n in got.items() if n > 1][:5]
        wait_until(lambda: sum(1 for s in statuses(st).values() if s == "delivered")
                   == len(expect), timeout=20, what="every due row delivered")
        now = statuses(st)
        assert len(now) == 1000  # every row kept
        assert sum(1 for s in now.values() if s == "published") == 10
        assert sum(1 for s in now.values() if s == "failed") == 10
        # each room's rows reached the sink in id order
        order = {r[0]: i for i, r in enumerate(rows)}
        by_room = {}
        for e in rd.events():
            by_room.setdefault(e["room_id"], []).append(order[e["event_id"]])
        for room, seq in by_room.items():
            assert seq == sorted(seq), (room, seq[:10])
        # the table now has roomd's columns and the commands work on the migrated tables
        st.execute("SELECT due_at_ms, sinks_done, room_seq, delivered_at_ms FROM room_outbox"
                   " LIMIT 1")
        s, _, js = rd.post("/v1/rooms", {"command_id": "c-after", "room_id": "after",
                                         "owner_uid": 1, "title": "t"})
        assert s == 201, (s, js)
    finally:
        rd.stop()


def refused_shape(st):
    st.seed_tables(with_payload=False)
    rd = Roomd(st.cfg(), tmp=tempfile.mkdtemp(dir=TMP))
    rd.start(wait=False)
    try:
        rd.proc.wait(30)
    except Exception:
        rd.kill()
        raise AssertionError("roomd started on a room_outbox without payload")
    text = rd.stderr_text() + "\n".join(rd.log_lines())
    assert rd.proc.returncode != 0
    assert "room_outbox has no column payload" in text, text[-2000:]
    rd.proc = None


def both(fn):
    for cls in (Sqlite, Mysql):
        st = cls()
        try:
            fn(st)
        except Exception as e:
            raise AssertionError(f"{cls.name}: {e}") from e
        finally:
            st.close()


def test_second_writer_rows():
    both(second_writer)


def test_seed_table_migrates_and_delivers():
    both(seed_table_1000)


def test_seed_shape_refused():
    both(refused_shape)


if __name__ == "__main__":
    if not listing():
        need("127.0.0.1", MYSQL_PORT, "mariadb")
    run([test_second_writer_rows, test_seed_table_migrates_and_delivers, test_seed_shape_refused])
