# SPDX-License-Identifier: Apache-2.0
"""test_log_flood: logs cannot be used as a weapon (issue 25, docs/ops.md "Log volume"). A client
floods roomd with connections refused at http.max_connections_per_ip for 10 s; warn and error
records are rate-limited per kind (at most 100 per kind per 5 s, then one "log lines
suppressed" record per kind with the count), so the log grows by fewer than 1,000 lines
(the issue's bound of 3,000 lines for a 30 s flood, in proportion), and the suppressed count is
reported (the flood was real: far more refusals than lines). The service still answers.

Run: python3 tests/integ/test_log_flood.py (ROOMD_BUILD_DIR=build-asan)"""
import json
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from roomd_test import Roomd, run, wait_until  # noqa: E402

FLOOD_S = 10
MAX_LINES = 1000  # 3,000 per 30 s


def lines(rd):
    with open(rd.log_path, "rb") as f:
        return f.read().splitlines()


def test_refused_connection_flood():
    rd = Roomd({"http": {"max_connections_per_ip": 4}}).start()
    held = []
    try:
        for _ in range(4):  # the address's every slot taken
            s = socket.create_connection(("127.0.0.1", rd.port))
            held.append(s)
        before = len(lines(rd))
        stop = time.time() + FLOOD_S
        tries = [0] * 4

        def flood(k):
            while time.time() < stop:
                try:
                    c = socket.create_connection(("127.0.0.1", rd.port), timeout=2)
                    c.close()
                except OSError:
                    pass
                tries[k] += 1

        ts = [threading.Thread(target=flood, args=(k,)) for k in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        for s in held:
            s.close()
        # the suppressed counts are written within an interval after the flood
        wait_until(lambda: any(b"log lines suppressed" in ln for ln in lines(rd)[before:]),
                   timeout=15, what="the suppressed count logged")
        time.sleep(6)  # the last interval's count too
        new = lines(rd)[before:]
        suppressed = sum(json.loads(ln).get("suppressed", 0) for ln in new
                         if b"log lines suppressed" in ln)
        assert len(new) < MAX_LINES, (len(new), sum(tries))
        assert sum(tries) > 5 * len(new), (sum(tries), len(new))  # a real flood
        assert suppressed > 0, suppressed
        st, _, _ = rd.http("GET", "/healthz")
        assert st == 200
    finally:
        for s in held:
            s.close()
        rd.stop()


if __name__ == "__main__":
    run([test_refused_connection_flood])
