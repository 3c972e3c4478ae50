# SPDX-License-Identifier: Apache-2.0
"""test_dual_sinks.py: publish_mode dual with ordering per_room, each sink's delivery
independent of the other's (issue 26; docs/outbox.md, "Per-room order, per sink"). A real
roomd (MariaDB, and SQLite) with the Tencent IM stand-in (tests/standins/im_standin.py) up
and a private nats-server (JetStream) as the broker, which is stopped for 10 s while
commands run in three rooms:

- IM's receive latency (the row's created_at_ms -> the stand-in's receive time) stays as
  it was with the broker up: p99 within 100 ms (or, on a machine so loaded that it was not
  within 100 ms before the outage either, within twice what it was then); a coupled sink
  would make IM wait for the broker's retries (circuit_probe_every, 1 s);
- IM gets every event once, in per-room order (room_seq ascending per group);
- no attempt is counted while the broker is down (retry_count 0 for every row);
- after the broker is back every row is delivered (log, IM and broker bits), none failed,
  and the broker's stream holds every event once (Nats-Msg-Id), in per-room order.

The figures (IM p50/p99 before and during the outage, the broker's catch-up) are printed.
Run: python3 tests/integ/test_dual_sinks.py (PYTHONPATH=tests, ROOMD_BUILD_DIR=build)
"""
import json
import os
import sqlite3
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "standins"))
import roomd_test as rt  # noqa: E402
import http_util as hu  # noqa: E402
from standins import ImStandin, TEST_SECRET  # noqa: E402
from bus_util import Nats, NatsServer, envelope, js_all  # noqa: E402

ENV = {"TIM_TEST_SECRET": TEST_SECRET}
cmd = hu.post_ok
MYSQL_PORT = rt.env_port("ROOMD_MYSQL_PORT", 3417)
ROOMS = ("ds1", "ds2", "ds3")
OUTAGE_S = 10.0
PACE_S = 0.05  # one command every 50 ms, round robin over the rooms (~7/s per room)
COLS = "id, event_id, event_type, room_id, room_seq, status, retry_count, sinks_done, " \
       "created_at_ms, last_error"
BITS = 1 | 2 | 8  # log, tim, bus (core/sink_bits.h)


class Sqlite:
    name = "sqlite"

    def __init__(self, tmp):
        self.path = os.path.join(tmp, "roomd.db")

    def cfg(self):
        return {"store": {"driver": "sqlite", "sqlite": {"path": self.path}}}

    def rows(self):
        db = sqlite3.connect(self.path, timeout=10)
        try:
            return [dict(zip([c.strip() for c in COLS.split(",")], x)) for x in
                    db.execute(f"SELECT {COLS} FROM room_outbox ORDER BY id")]
        finally:
            db.close()

    def close(self):
        pass


class Mysql:
    name = "mysql"

    def __init__(self, tmp):
        self.db = f"roomd_dual_{os.getpid()}_{uuid.uuid4().hex[:6]}"
        rt.mysql_query(f"CREATE DATABASE {self.db} CHARACTER SET utf8mb4")

    def cfg(self):
        return {"store": {"driver": "mysql", "mysql": {
            "host": "127.0.0.1", "port": MYSQL_PORT, "user": "root", "password": "",
            "database": self.db, "pool_size": 4, "connect_timeout": "2s"}}}

    def rows(self):
        names = [c.strip() for c in COLS.split(",")]
        out = []
        for x in rt.mysql_query(f"SELECT {COLS} FROM room_outbox ORDER BY id", self.db):
            d = dict(zip(names, x))
            for k in ("id", "room_seq", "retry_count", "sinks_done", "created_at_ms"):
                d[k] = int(d[k])
            out.append(d)
        return out

    def close(self):
        rt.mysql_query(f"DROP DATABASE IF EXISTS {self.db}")


def run_commands(r, seconds, uid0):
    """Joins in the rooms, round robin, one every PACE_S for seconds; returns the next uid."""
    uid, end = uid0, time.time() + seconds
    while time.time() < end:
        t = time.time()
        cmd(r, f"/v1/rooms/{ROOMS[uid % len(ROOMS)]}/join", {"uid": uid})
        uid += 1
        time.sleep(max(0.0, PACE_S - (time.time() - t)))
    return uid


def im_by_event(im):
    """event_id -> [the IM messages carrying it] (the stand-in's receive time in "t")."""
    out = {}
    for m in im.messages():
        if m.get("Data"):
            out.setdefault(json.loads(m["Data"]).get("event_id"), []).append(m)
    return out


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else float("nan")


def im_lags(store, im, t0, t1):
    """IM receive latency (s) of the rows created in [t0, t1) (wall clock)."""
    got, lags = im_by_event(im), []
    for x in store.rows():
        if x["event_type"] == "RoomUserJoined" and t0 * 1000 <= x["created_at_ms"] < t1 * 1000:
            ms = got.get(x["event_id"])
            assert ms, f"IM never received {x}"
            lags.append(ms[0]["t"] - x["created_at_ms"] / 1000.0)
    return lags


def dual_broker_down(store_kind):
    if store_kind is Mysql:
        rt.need("127.0.0.1", MYSQL_PORT, "mariadb")
    tmp = tempfile.mkdtemp(prefix="dual-sinks-")
    store = store_kind(tmp)
    im = ImStandin(tmp).start()
    srv = NatsServer(tmp).start()
    port = rt.free_port()
    topic = f"dual_sinks_{port}"
    cfg = rt.merge(store.cfg(), {
        "tencent_im": im.conf(),
        "outbox_worker": {"publish_mode": "dual", "ordering": "per_room", "max_retry_count": 5,
                          "initial_backoff": "100ms", "max_backoff": "500ms",
                          "publish_timeout": "2s", "lock_timeout": "10s",
                          "circuit_failures": 2, "circuit_probe_every": "1s"},
        "rocketmq": {"enabled": True, "name_servers": [srv.url()], "send_timeout": "1s",
                     "retry": 1, "consumer_store_dir": os.path.join(tmp, "consumers"),
                     "room_outbox": {"enabled": True, "topic": topic},
                     "rocket_launch": {"enabled": False}}})
    r = rt.Roomd(cfg, tmp=tmp, port=port).start(env=ENV)
    try:
        for room in ROOMS:
            cmd(r, "/v1/rooms", {"room_id": room, "owner_uid": 7, "title": "dual"})

        def settled():
            rs = store.rows()
            return rs and all(x["status"] == "delivered" for x in rs) and rs
        rt.wait_until(settled, timeout=30, what="the rooms' rows delivered")

        # the broker up: the IM latency as it is
        b0 = time.time()
        uid = run_commands(r, 3.0, 1000)
        b1 = time.time()
        rt.wait_until(settled, timeout=30, what="the warm-up rows delivered")
        base = im_lags(store, im, b0, b1)

        # the broker down for OUTAGE_S while the commands go on
        srv.stop()
        o0 = time.time()
        uid = run_commands(r, OUTAGE_S, uid)
        o1 = time.time()
        rt.wait_until(lambda: len(im_lags(store, im, o0, o1)) > 0 and all(
            im_by_event(im).get(x["event_id"]) for x in store.rows()),
            timeout=20, what="IM has every event while the broker is down")
        lags = im_lags(store, im, o0, o1)
        if os.environ.get("DUAL_SINKS_DEBUG"):
            got = im_by_event(im)
            for x in store.rows():
                if o0 * 1000 <= x["created_at_ms"] < o1 * 1000:
                    t = got[x["event_id"]][0]["t"]
                    print(f"{x['created_at_ms'] / 1000 - o0:6.2f} {x['room_id']} "
                          f"{x['room_seq']:4d} {(t - x['created_at_ms'] / 1000) * 1000:7.1f} ms")
        waiting = [x for x in store.rows() if x["status"] != "delivered"]
        assert waiting, "the broker was down: rows must wait for it (else this proves nothing)"
        assert all(x["sinks_done"] & 2 and not x["sinks_done"] & 8 for x in waiting), \
            [x for x in waiting if not (x["sinks_done"] & 2 and not x["sinks_done"] & 8)][:3]
        srv.start()
        back = time.time()

        def all_done():
            rs = store.rows()
            return rs and all(x["status"] == "delivered" for x in rs) and rs
        rs = rt.wait_until(all_done, timeout=60, step=0.2,
                           what="every row delivered after the broker is back")
        caught_up = time.time() - back
        p50b, p99b, p50, p99 = pct(base, .5), pct(base, .99), pct(lags, .5), pct(lags, .99)
        print(f"[{store.name}] IM receive latency: broker up p50 {p50b * 1000:.1f} ms p99 "
              f"{p99b * 1000:.1f} ms ({len(base)} events); broker down p50 {p50 * 1000:.1f} ms "
              f"p99 {p99 * 1000:.1f} ms max {max(lags) * 1000:.1f} ms ({len(lags)} events); "
              f"{len(waiting)} rows waited for the broker, all delivered {caught_up:.1f} s "
              f"after it was back", flush=True)
        limit = max(0.100, 2 * p99b)
        assert p99 <= limit, f"IM waited for the broker: p99 {p99 * 1000:.0f} ms " \
                             f"(limit {limit * 1000:.0f} ms)"

        # every row: every sink, no attempt counted, nothing failed
        assert all(x["sinks_done"] & BITS == BITS for x in rs), [x for x in rs if
                                                                 x["sinks_done"] & BITS != BITS]
        assert max(x["retry_count"] for x in rs) == 0, [x for x in rs if x["retry_count"]][:3]
        by_id = {x["event_id"]: x for x in rs}

        # IM: every event once, per-room order
        got = im_by_event(im)
        for x in rs:
            assert len(got.get(x["event_id"], [])) == 1, (x, got.get(x["event_id"]))
        for room in ROOMS:
            seqs = [json.loads(m["Data"])["room_seq"] for m in im.messages()
                    if m.get("Data") and json.loads(m["Data"]).get("room_id") == room]
            want = sorted(x["room_seq"] for x in rs if x["room_id"] == room)
            assert seqs == want, (room, "IM out of per-room order", seqs[:20], want[:20])

        # the broker: every event once, per-room order
        nc = Nats(srv.port)
        try:
            stream = js_all(nc, topic)
        finally:
            nc.close()
        ids = [h["Nats-Msg-Id"] for _, h, _ in stream]
        assert len(ids) == len(set(ids)), "an event twice in the stream"
        assert set(ids) == set(by_id), (len(ids), len(by_id))
        for room in ROOMS:
            seqs = [envelope(d)["room_seq"] for _, _, d in stream if envelope(d)["room_id"] == room]
            want = sorted(x["room_seq"] for x in rs if x["room_id"] == room)
            assert seqs == want, (room, "broker out of per-room order", seqs[:20], want[:20])
        assert r.stop() == 0, "roomd exits cleanly (no sanitizer report)"
    finally:
        r.stop()
        srv.stop()
        im.stop()
        store.close()


def test_dual_broker_down_mysql():
    dual_broker_down(Mysql)


def test_dual_broker_down_sqlite():
    dual_broker_down(Sqlite)


if __name__ == "__main__":
    rt.run([test_dual_broker_down_mysql, test_dual_broker_down_sqlite])
