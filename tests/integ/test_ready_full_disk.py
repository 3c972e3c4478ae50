# SPDX-License-Identifier: Apache-2.0
"""test_ready_full_disk: readiness sees a store that refuses writes (issue 25, docs/http.md
"/readyz"). SQLite on a small tmpfs (needs root: mount -t tmpfs): ready; the disk filled up
(a filler file, then commands answer 503): /readyz 503 within 5 s (the ticker's write probe, and
the failed commits); the filler removed: ready again within 5 s and commands commit.

Run: python3 tests/integ/test_ready_full_disk.py (ROOMD_BUILD_DIR=build-asan)"""
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import http_util as hu  # noqa: E402
from roomd_test import Roomd, run, wait_until  # noqa: E402


def readyz(rd):
    return rd.http("GET", "/readyz")[0]


def test_full_tmpfs():
    tmp = tempfile.mkdtemp(prefix="ready-disk-")
    disk = os.path.join(tmp, "disk")
    os.makedirs(disk)
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", disk],
                       capture_output=True, text=True)
    assert p.returncode == 0, f"mount -t tmpfs failed (the full-disk case needs root): {p.stderr}"
    rd = None
    try:
        rd = Roomd({"store": {"sqlite": {"path": os.path.join(disk, "roomd.db")}}}, tmp=tmp).start()
        wait_until(lambda: readyz(rd) == 200, timeout=10, what="ready")
        room = hu.room_name("fd")
        hu.expect_ok(hu.create(rd, room))
        filler = os.path.join(disk, "filler")
        subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=64k"], capture_output=True)
        t0 = time.time()
        for uid in range(100, 110):  # commands now fail: 503, nothing committed
            st, _, js = hu.join(rd, room, uid)
            assert st in (200, 503), (st, js)
        wait_until(lambda: readyz(rd) == 503, timeout=5 - (time.time() - t0), step=0.1,
                   what="/readyz 503 on a full disk")
        st, _, js = rd.http("GET", "/readyz", port=rd.admin_port)
        assert st == 503 and "write" in str(js), js
        os.remove(filler)
        t1 = time.time()
        wait_until(lambda: readyz(rd) == 200, timeout=5, step=0.1, what="ready after space freed")
        assert time.time() - t1 < 5
        hu.expect_ok(hu.join(rd, room, 200))
    finally:
        if rd is not None:
            rd.stop()
        subprocess.run(["umount", disk])


if __name__ == "__main__":
    run([test_full_tmpfs])
