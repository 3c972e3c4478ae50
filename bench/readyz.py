# SPDX-License-Identifier: Apache-2.0
"""readyz.py BUILD: /readyz and /metrics against a big outbox (issue 11), on SQLite.

Fills a fresh store with BENCH_OUTBOX_ROWS (default 3,000,000) delivered outbox rows, then
prints, in the same run:
  - the baseline: the two queries the old /readyz and /metrics ran on every request
    (count by status, oldest undelivered), timed directly on the same file;
  - /readyz latency now (served from the readiness cache; p50/p99 of 2,000 requests);
  - JoinRoom latency alone and under a 16-client /readyz flood (the issue measured 2 ms ->
    543 ms median before the cache).
"""
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import http.client

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from roomd_test import free_port  # noqa: E402

build = sys.argv[1] if len(sys.argv) > 1 else "build"
rows = int(os.environ.get("BENCH_OUTBOX_ROWS", "3000000"))
tmp = tempfile.mkdtemp(prefix="roomd-bench-readyz-")
db = os.path.join(tmp, "readyz.db")


port, admin = free_port(), free_port()
cfg = os.path.join(tmp, "readyz.yaml")
with open(cfg, "w") as f:
    json.dump({"app": {"log_file": os.path.join(tmp, "roomd.log"), "log_level": "warn"},
               "http": {"listen": f"127.0.0.1:{port}", "max_connections_per_ip": 0},
               "admin": {"listen": f"127.0.0.1:{admin}"},
               "store": {"driver": "sqlite", "sqlite": {"path": db}},
               "wallet": {"initial_balance": 1000000},
               "room": {"max_creates_per_minute": 0},
               "outbox_worker": {"log_sink": {"path": os.path.join(tmp, "events.jsonl")}}}, f)


def start():
    p = subprocess.Popen([os.path.join(build, "roomd"), "-c", cfg])
    for _ in range(200):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/healthz")
            if c.getresponse().status == 200:
                return p
        except OSError:
            time.sleep(0.05)
    raise SystemExit("roomd did not start")


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * p))] * 1000


# 1. schema, then the rows (one INSERT ... SELECT from a recursive counter)
start().terminate()
time.sleep(1)
t0 = time.time()
con = sqlite3.connect(db)
now = int(time.time() * 1000)
con.execute("PRAGMA synchronous=OFF")
con.execute(f"""INSERT INTO room_outbox (event_id, app_code, room_id, room_version, command_id,
  event_type, payload, status, created_at_ms, updated_at_ms, delivered_at_ms)
  WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {rows})
  SELECT 'ev-' || i, 'hyapp', 'r' || (i % 1000), i, 'c' || i, 'RoomUserJoined', x'0801',
         'delivered', {now}, {now}, {now} FROM n""")
con.commit()
print(f"== /readyz at {rows:,} outbox rows (filled in {time.time() - t0:.0f}s)")

# 2. baseline: what every /readyz and /metrics request ran before
qs = ["SELECT status, count(*) FROM room_outbox GROUP BY status",
      "SELECT min(created_at_ms) FROM room_outbox WHERE due_at_ms IS NOT NULL"]
base = []
for _ in range(5):
    t = time.time()
    for q in qs:
        con.execute(q).fetchall()
    base.append(time.time() - t)
con.close()
print(f"baseline (old /readyz: the count queries per request): p50 {pct(base, .5):.1f} ms")

# 3. /readyz now
p = start()
try:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    for _ in range(600):  # the first count (~2 s at 3M rows) answers "starting" until done
        c.request("GET", "/readyz")
        r = c.getresponse()
        r.read()
        if r.status == 200:
            break
        time.sleep(0.05)
    lat = []
    for _ in range(2000):
        t = time.time()
        c.request("GET", "/readyz")
        r = c.getresponse()
        r.read()
        lat.append(time.time() - t)
        assert r.status == 200, r.status
    print(f"/readyz now (cache):  p50 {pct(lat, .5):.3f} ms  p99 {pct(lat, .99):.3f} ms")

    def joins(n, tag):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        h = {"Content-Type": "application/json"}
        c.request("POST", "/v1/rooms", json.dumps({"command_id": f"cr-{tag}", "room_id": tag,
                                                   "owner_uid": 1, "title": "t"}), h)
        c.getresponse().read()
        out = []
        for i in range(n):
            t = time.time()
            c.request("POST", f"/v1/rooms/{tag}/join",
                      json.dumps({"command_id": f"j-{tag}-{i}", "uid": 1000 + i}), h)
            r = c.getresponse()
            r.read()
            out.append(time.time() - t)
        return out

    alone = joins(200, "alone")
    stop = threading.Event()

    def flood():
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        while not stop.is_set():
            c.request("GET", "/readyz")
            c.getresponse().read()

    th = [threading.Thread(target=flood) for _ in range(16)]
    for t in th:
        t.start()
    time.sleep(0.5)
    flooded = joins(200, "flood")
    stop.set()
    for t in th:
        t.join()
    print(f"JoinRoom alone:              p50 {pct(alone, .5):.2f} ms  p99 {pct(alone, .99):.2f} ms")
    print(f"JoinRoom, 16-client /readyz flood: p50 {pct(flooded, .5):.2f} ms  "
          f"p99 {pct(flooded, .99):.2f} ms")
finally:
    p.terminate()
    p.wait()
