# SPDX-License-Identifier: Apache-2.0
"""log_row.py BUILD [BASELINE_BUILD]: bytes per command-log row in a 150-member room (issue 11).

Starts BUILD/roomd on a fresh SQLite file, creates a room, joins 150 users, then runs 100
more commands in that room (mic up/down pairs of members, joins of new users) and reads the
command log of those 100 commands back from the file: the mean bytes of request, response
and the whole row (every column's length). With BASELINE_BUILD (e.g. a build of an older
version) its roomd runs the same commands first, on its own file: the baseline of this run.
Prints one "log_row" line per roomd:
  log_row <label> request=R response=A row_bytes=T
"""
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
import http.client

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from roomd_test import free_port  # noqa: E402

MEMBERS = 150
MEASURED = 100


def start(binary, tmp, tag):
    port, admin = free_port(), free_port()
    db = os.path.join(tmp, f"{tag}.db")
    cfg = os.path.join(tmp, f"{tag}.yaml")
    with open(cfg, "w") as f:
        json.dump({"app": {"log_file": os.path.join(tmp, f"{tag}.log"), "log_level": "warn"},
                   "http": {"listen": f"127.0.0.1:{port}", "max_connections_per_ip": 0},
                   "admin": {"listen": f"127.0.0.1:{admin}"},
                   "store": {"driver": "sqlite", "sqlite": {"path": db}},
                   "room": {"max_members": 1000},
                   "outbox_worker": {"log_sink": {"path": os.path.join(tmp, f"{tag}.jsonl")}}},
                  f)
    p = subprocess.Popen([binary, "-c", cfg])
    for _ in range(200):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/healthz")
            if c.getresponse().status == 200:
                return p, port, db
        except OSError:
            time.sleep(0.05)
    p.terminate()
    raise SystemExit(f"{binary} did not start")


def measure(build, tmp, tag):
    p, port, db = start(os.path.join(build, "roomd"), tmp, tag)
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        h = {"Content-Type": "application/json"}

        def post(path, body):
            c.request("POST", path, json.dumps(body), h)
            r = c.getresponse()
            text = r.read()
            assert r.status in (200, 201), (path, r.status, text)

        post("/v1/rooms", {"command_id": "cr", "room_id": "big", "owner_uid": 1,
                           "title": "a 150-member room"})
        for u in range(MEMBERS):
            post("/v1/rooms/big/join", {"command_id": f"j{u}", "uid": 1000 + u})
        first = MEMBERS + 2  # the version of the first measured command
        for k in range(MEASURED // 4):
            uid = 1000 + k
            post("/v1/rooms/big/mic/up", {"command_id": f"mu{k}", "uid": uid, "seat": 0})
            post("/v1/rooms/big/mic/down", {"command_id": f"md{k}", "uid": uid})
            post("/v1/rooms/big/join", {"command_id": f"jx{k}", "uid": 5000 + k})
            post("/v1/rooms/big/leave", {"command_id": f"lx{k}", "uid": 5000 + k})
    finally:
        p.terminate()
        p.wait()
    con = sqlite3.connect(db)
    req, resp, row, n = con.execute(
        "SELECT avg(length(request)), avg(length(response)),"
        " avg(length(app_code) + length(room_id) + 8 + length(command_id)"
        " + length(command_type) + length(request) + length(response) + 8), count(*)"
        " FROM room_command_log WHERE room_id = 'big' AND version >= ?", (first,)).fetchone()
    con.close()
    assert n == MEASURED, n
    print(f"log_row {tag} request={req:.0f} response={resp:.0f} row_bytes={row:.0f}"
          f" ({n} commands in a {MEMBERS}+-member room)")


tmp = tempfile.mkdtemp(prefix="roomd-bench-logrow-")
if len(sys.argv) > 2:
    measure(sys.argv[2], tmp, "baseline")
measure(sys.argv[1] if len(sys.argv) > 1 else "build", tmp, "now")
