# SPDX-License-Identifier: Apache-2.0
"""test_outbox_two_procs: two roomd processes on ONE SQLite file, each with the log sink
writing to its own file, many commands against both at once.

1. no crash: every room_outbox row ends delivered and the union of both sink files holds
   each event_id exactly once (no event is delivered by both processes).
2. kill -9 mid-flight: process A's log sink is a FIFO nobody reads, so A's worker blocks
   inside publish holding claimed rows, and the rows of A's later commands wait in A's
   hand-off queue (inserted already claimed by "node-a/h"); A is killed with SIGKILL; B
   reclaims all those rows once their lock expires and delivers them. Every event is
   delivered at least once; a duplicate is allowed only for a row A had claimed (its lock
   expired).

Run: python3 tests/integ/test_outbox_two_procs.py (PYTHONPATH=tests, ROOMD_BUILD_DIR=build)
"""
import json
import os
import sqlite3
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(__file__))
from roomd_test import Roomd, create_and_join, run, wait_until  # noqa: E402


def outbox_rows(db_path, cols="status, locked_by"):
    """{event_id: (cols...)} of every room_outbox row, read with the sqlite3 module."""
    con = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=10)
    try:
        rows = con.execute(f"SELECT event_id, {cols} FROM room_outbox").fetchall()
    finally:
        con.close()
    return {r[0]: tuple(r[1:]) for r in rows}


def events_path(rd):
    return rd.cfg["outbox_worker"]["log_sink"]["path"]


def all_delivered(db):
    rows = outbox_rows(db)
    return rows if rows and all(s == "delivered" for s, _ in rows.values()) else None


def sink_event_ids(path):
    """event_ids in a log sink file, in order (duplicates kept)."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                if line.strip():
                    out.append(json.loads(line)["event_id"])
    except FileNotFoundError:
        pass
    return out


def pair(tmp, extra=None, a_sink=None):
    """Two roomd processes sharing tmp/roomd.db; each its own port, node_id, sink file."""
    db = os.path.join(tmp, "roomd.db")
    procs = []
    for name in ("a", "b"):
        d = os.path.join(tmp, name)
        os.makedirs(d, exist_ok=True)
        sink = a_sink if (name == "a" and a_sink) else os.path.join(d, "events.jsonl")
        ov = {"app": {"node_id": f"node-{name}"},
              "store": {"sqlite": {"path": db}},
              "outbox_worker": {"log_sink": {"enabled": True, "path": sink}}}
        for k, v in (extra or {}).items():
            ov.setdefault(k, {}).update(v)
        procs.append(Roomd(ov, tmp=d))
    return db, procs


def drive(rd, rooms, joins, tag):
    """Creates rooms on rd and joins users to them; returns the number of 200 answers."""
    return create_and_join(rd.post, rooms, joins, tag)


def drive_both(procs, rooms, joins, threads=4):
    with ThreadPoolExecutor(max_workers=threads * len(procs)) as ex:
        futs = [ex.submit(drive, rd, rooms, joins, f"{i}{t}")
                for i, rd in enumerate(procs) for t in range(threads)]
        return sum(f.result() for f in futs)


def test_no_double_delivery():
    tmp = tempfile.mkdtemp(prefix="roomd-2p-")
    cfg = {"outbox_worker": {"workers": 2, "batch_size": 20, "poll_interval": "20ms"}}
    db, (a, b) = pair(tmp, cfg)
    # A backlog both workers compete for: commands through a third process whose
    # outbox worker is off, on the same file.
    os.makedirs(os.path.join(tmp, "c"))
    c = Roomd({"store": {"sqlite": {"path": db}}, "outbox_worker": {"enabled": False}},
              tmp=os.path.join(tmp, "c"))
    c.start()
    backlog = drive_both([c], rooms=5, joins=10)
    c.stop()
    assert all(s == "pending" for s, _ in outbox_rows(db).values())
    a.start(wait=False)
    b.start(wait=False)
    a.wait_ready()
    b.wait_ready()
    try:
        t0 = time.time()
        n = drive_both((a, b), rooms=5, joins=6)
        print(f"# backlog of {backlog} commands, then {n} commands against two processes "
              f"in {time.time() - t0:.2f}s")
        rows = wait_until(lambda: all_delivered(db), timeout=30, what="every row delivered")
        ea, eb = sink_event_ids(events_path(a)), sink_event_ids(events_path(b))
        union = ea + eb
        assert len(union) == len(set(union)), "an event was delivered twice: " + \
            str([e for e in set(union) if union.count(e) > 1][:5])
        assert set(union) == set(rows), (len(set(union)), len(rows))
        assert len(ea) > 0 and len(eb) > 0, (len(ea), len(eb))  # both processes worked
        print(f"# {len(rows)} events: {len(ea)} delivered by A, {len(eb)} by B, none twice")
    finally:
        a.stop()
        b.stop()


def test_kill9_midflight():
    tmp = tempfile.mkdtemp(prefix="roomd-2pk-")
    fifo = os.path.join(tmp, "a-sink.fifo")
    os.mkfifo(fifo)
    # Keep a reader open (so A's open of the FIFO does not block) that never reads:
    # once the pipe buffer is full, A's worker blocks inside publish with rows claimed.
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    lock_ms = 2000
    # ordering none: every row of A's commands is handed off (with per_room a room
    # with undelivered rows sends its next rows to the ordered claim)
    cfg = {"outbox_worker": {"workers": 1, "batch_size": 50, "poll_interval": "100ms",
                             "lock_timeout": f"{lock_ms}ms", "publish_timeout": "500ms",
                             "ordering": "none"}}
    db, (a, b) = pair(tmp, cfg, a_sink=fifo)
    a.start()
    try:
        # Commands on A only, concurrently so batches fill: its worker claims them and
        # blocks on the full pipe.
        drive_both([a], rooms=10, joins=15)

        def a_holds():
            return [e for e, (st, lb) in outbox_rows(db).items()
                    if st == "delivering" and (lb or "").startswith("node-a/")]
        wait_until(a_holds, timeout=15, what="A holding claimed rows")
        time.sleep(0.3)  # let A block on the full pipe
        a.kill()
        # what A managed to write into the pipe before blocking
        written = b""
        while True:
            try:
                chunk = os.read(reader, 1 << 16)
            except BlockingIOError:
                break
            if not chunk:
                break
            written += chunk
        os.close(reader)
        ea = [json.loads(l)["event_id"] for l in written.decode(errors="replace").split("\n")
              if l.startswith("{") and l.endswith("}")]
        # the rows A held when it died, with their lock expiry
        held_by = {e: (lb, lu) for e, (st, lb, lu) in
                   outbox_rows(db, "status, locked_by, lock_until_ms").items()
                   if st == "delivering" and (lb or "").startswith("node-a/")}
        held = {e: lu for e, (lb, lu) in held_by.items()}
        handed = {e for e, (lb, _) in held_by.items() if lb == "node-a/h"}
        assert held, "A held no claimed rows at the kill"
        assert handed, "no handed-off row was in flight at the kill"
        assert not any(st == "pending" for st, _ in outbox_rows(db).values()), \
            "a row of A's commands was not handed off"

        b.start()
        rows = wait_until(lambda: all_delivered(db), timeout=30,
                          what="every row delivered after the kill")
        eb = sink_event_ids(events_path(b))
        union = ea + eb
        assert set(union) >= set(rows), "an event was never delivered"
        # B delivered each row A held, and only after A's lock on it expired
        assert set(held) <= set(eb), "a row claimed by the killed process was not reclaimed"
        done = outbox_rows(db, "delivered_at_ms")
        for e, lock_until in held.items():
            assert done[e][0] >= lock_until, (e, done[e], lock_until)
        dups = {e for e in set(union) if union.count(e) > 1}
        assert dups <= set(held), "a duplicate for a row whose lock had not expired: " + \
            str(list(dups - set(held))[:5])
        assert len(eb) == len(set(eb)), "B delivered an event twice"
        assert set(handed) <= set(eb), "a handed-off row of the killed process was lost"
        print(f"# {len(rows)} events; A held {len(held)} claimed rows at kill -9 "
              f"({len(handed)} handed off at insert, locked_by node-a/h) and had "
              f"written {len(ea)}; B delivered {len(eb)}, {len(dups)} of them again "
              f"(only rows whose lock expired)")
    finally:
        a.stop()
        b.stop()

if __name__ == "__main__":
    run([test_no_double_delivery, test_kill9_midflight])
