# SPDX-License-Identifier: Apache-2.0
"""catchup.py BUILD: the catch-up read rate (issue 30), on SQLite.

One room gets BENCH_CATCHUP_EVENTS (default 20,000) events (joins and leaves over HTTP, 16
clients across the members: the room commits them one after the other), then clients read
them back from after_seq 0 with GET /v1/rooms/{id}/events?after_seq=N&limit=1000, page after
page, for BENCH_SECONDS (10) each: 1 reader, then 8. Prints, in the same run:
  catchup write events_per_s=W   (the rate the room committed them: the baseline)
  catchup read1 events_per_s=R1  catchup read8 events_per_s=R8
Figures, not assertions. Every page is checked to continue the previous one (no gap)."""
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import http.client

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from roomd_test import free_port  # noqa: E402

build = sys.argv[1] if len(sys.argv) > 1 else "build"
events = int(os.environ.get("BENCH_CATCHUP_EVENTS", "20000"))
secs = float(os.environ.get("BENCH_SECONDS", "10"))
tmp = tempfile.mkdtemp(prefix="roomd-bench-catchup-")
port, admin = free_port(), free_port()
cfg = os.path.join(tmp, "catchup.yaml")
with open(cfg, "w") as f:
    json.dump({"app": {"log_file": os.path.join(tmp, "roomd.log"), "log_level": "warn"},
               "http": {"listen": f"127.0.0.1:{port}", "max_connections_per_ip": 0},
               "admin": {"listen": f"127.0.0.1:{admin}"},
               "store": {"driver": "sqlite", "sqlite": {"path": os.path.join(tmp, "c.db")}},
               "room": {"max_creates_per_minute": 0},
               "outbox_worker": {"log_sink": {"path": os.path.join(tmp, "events.jsonl")}}}, f)


def req(c, method, path, body=None):
    c.request(method, path, body=json.dumps(body) if body is not None else None,
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    return r.status, json.loads(data) if data else None


proc = subprocess.Popen([os.path.join(build, "roomd"), "-c", cfg])
try:
    for _ in range(200):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            if req(c, "GET", "/healthz")[0] == 200:
                break
        except OSError:
            time.sleep(0.05)
    else:
        raise SystemExit("roomd did not start")
    rid = "catchup-room"
    st, js = req(c, "POST", "/v1/rooms", {"command_id": "c-create", "room_id": rid,
                                          "owner_uid": 1, "title": "catch-up"})
    assert st in (200, 201), js
    per = (events - 1 + 15) // 16

    def writer(w):
        cw = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        uid = 1000 + w
        for i in range(per):
            op = "join" if i % 2 == 0 else "leave"
            st, js = req(cw, "POST", f"/v1/rooms/{rid}/{op}",
                         {"command_id": f"c-{w}-{i}", "uid": uid})
            assert st in (200, 201), js
    t0 = time.time()
    ws = [threading.Thread(target=writer, args=(w,)) for w in range(16)]
    for t in ws:
        t.start()
    for t in ws:
        t.join()
    wrote = time.time() - t0
    st, js = req(c, "GET", f"/v1/rooms/{rid}/events?after_seq=0&limit=1")
    latest = js["latest_seq"]
    print(f"catchup write events={latest} seconds={wrote:.2f} events_per_s={latest / wrote:.0f}")

    def reader(out):
        cr = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        n, after, end = 0, 0, time.time() + secs
        while time.time() < end:
            st, js = req(cr, "GET", f"/v1/rooms/{rid}/events?after_seq={after}&limit=1000")
            assert st == 200, js
            evs = js["events"]
            assert not evs or evs[0]["room_seq"] == after + 1, (after, evs[0]["room_seq"])
            n += len(evs)
            after = js["next_after_seq"] if js["more"] else 0  # caught up: from the start again
        out.append(n)
    for k in (1, 8):
        got = []
        ts = [threading.Thread(target=reader, args=(got,)) for _ in range(k)]
        t0 = time.time()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        el = time.time() - t0
        print(f"catchup read{k} readers={k} events={sum(got)} seconds={el:.2f} "
              f"events_per_s={sum(got) / el:.0f}")
finally:
    proc.terminate()
    proc.wait(timeout=30)
