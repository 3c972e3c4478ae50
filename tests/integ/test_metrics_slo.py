# SPDX-License-Identifier: Apache-2.0
"""test_metrics_slo: the SLO metrics of a real roomd on GET /metrics.

Every delivered row lands in roomd_outbox_delivery_seconds{sink} (handed off or claimed),
every sink call in roomd_outbox_attempts_total{sink,outcome}; a sink that keeps failing
(the log sink on /dev/full) grows roomd_outbox_dead_letters_total{sink} and its
roomd_outbox_sink_oldest_undelivered_seconds while its rows are retryable; the IM stand-in
going down turns roomd_dependency_up{dependency="im"} to 0 and back to 1; roomd_build_info
and the standard process_* metrics are there. The exposition parses (promtool check
metrics when promtool is installed)."""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "standins"))
from roomd_test import Roomd, run, wait_until  # noqa: E402
from standins import ImStandin, TEST_SECRET  # noqa: E402

TMP = tempfile.mkdtemp(prefix="roomd-slo-")
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$')


def scrape(rd):
    st, _, text = rd.admin("GET", "/metrics")
    assert st == 200, st
    return text


def samples(text):
    """{(name, labels-string): value} of the exposition text."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, f"bad exposition line: {line!r}"
        out[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return out


def val(text, name, labels=""):
    return samples(text).get((name, labels))


def cmd(rd, path, body):
    st, _, js = rd.post(path, dict(body, command_id=f"c-{uuid.uuid4().hex[:12]}"))
    assert st == (201 if path == "/v1/rooms" else 200), (path, st, js)  # CreateRoom: 201


def test_delivery_attempts_build_and_process():
    rd = Roomd(tmp=tempfile.mkdtemp(dir=TMP)).start()
    try:
        cmd(rd, "/v1/rooms", {"room_id": "m1", "owner_uid": 1, "title": "t"})
        for u in range(2, 6):
            cmd(rd, "/v1/rooms/m1/join", {"uid": u})
        wait_until(lambda: val(scrape(rd), "roomd_outbox_delivery_seconds_count",
                               '{sink="log"}') == 5, what="5 rows delivered by the log sink")
        text = scrape(rd)
        assert val(text, "roomd_outbox_attempts_total", '{sink="log",outcome="ok"}') == 5
        assert val(text, "roomd_outbox_attempts_total", '{sink="log",outcome="retry"}') == 0
        assert val(text, "roomd_outbox_dead_letters_total", '{sink="log"}') == 0
        assert val(text, "roomd_outbox_sink_up", '{sink="log"}') == 1
        assert val(text, "roomd_outbox_sink_oldest_undelivered_seconds",
                   '{scope="store",sink="log"}') == 0
        # buckets from 1 ms to 10 min, cumulative; a local delivery is well under 10 min
        assert val(text, "roomd_outbox_delivery_seconds_bucket", '{sink="log",le="0.001"}') \
            is not None
        assert val(text, "roomd_outbox_delivery_seconds_bucket", '{sink="log",le="600"}') == 5
        assert val(text, "roomd_dependency_up", '{dependency="store"}') == 1
        build = [k for k in samples(text) if k[0] == "roomd_build_info"]
        assert len(build) == 1 and re.match(  # X.Y.Z, or git describe's X.Y.Z-N-gC[-dirty] past a tag
            r'\{version="\d+\.\d+\.\d+(-\d+-g[0-9a-f]+)?(-dirty)?",commit="[^"]+"\}$',
                                            build[0][1]), build
        for name in ("process_cpu_seconds_total", "process_resident_memory_bytes",
                     "process_open_fds", "process_max_fds", "process_start_time_seconds",
                     "process_virtual_memory_bytes"):
            assert val(text, name) is not None, name
        assert val(text, "process_resident_memory_bytes") > 1e6
        assert abs(val(text, "process_start_time_seconds") - time.time()) < 120
        assert val(text, "process_open_fds") >= 5
        promtool = shutil.which("promtool")
        if promtool:
            p = subprocess.run([promtool, "check", "metrics"], input=text, text=True,
                               capture_output=True)
            # lint findings (naming advice) are fine; a parse error is not
            assert "error while linting" not in p.stdout + p.stderr, p.stdout + p.stderr
    finally:
        assert rd.stop() == 0


def test_dead_letters_and_retryable_age():
    rd = Roomd(tmp=tempfile.mkdtemp(dir=TMP), overrides={"outbox_worker": {
        "max_retry_count": 3, "initial_backoff": "1500ms", "max_backoff": "1500ms",
        "log_sink": {"path": "/dev/full"}}}).start()
    try:
        cmd(rd, "/v1/rooms", {"room_id": "m2", "owner_uid": 1, "title": "t"})
        # while the row is retryable the sink's oldest undelivered age grows
        # (from the readiness cache, refreshed every second)
        wait_until(lambda: (val(scrape(rd), "roomd_outbox_sink_oldest_undelivered_seconds",
                                '{scope="store",sink="log"}') or 0) > 0.2,
                   what="age of a retryable row")
        wait_until(lambda: val(scrape(rd), "roomd_outbox_dead_letters_total",
                               '{sink="log"}') == 1, timeout=20, what="one dead letter")
        text = scrape(rd)
        assert val(text, "roomd_outbox_attempts_total", '{sink="log",outcome="retry"}') == 3
        assert val(text, "roomd_outbox_sink_up", '{sink="log"}') == 0
        assert val(text, "roomd_outbox_delivery_seconds_count", '{sink="log"}') == 0
        # a dead letter is no longer undelivered-and-claimable: the age is back to 0
        wait_until(lambda: val(scrape(rd), "roomd_outbox_sink_oldest_undelivered_seconds",
                               '{scope="store",sink="log"}') == 0, what="age back to 0")
        assert val(scrape(rd), "roomd_outbox_rows", '{scope="store",status="failed"}') == 1
    finally:
        assert rd.stop() == 0


def test_im_dependency_up_down():
    tmp = tempfile.mkdtemp(dir=TMP)
    im = ImStandin(tmp).start()
    rd = Roomd({"tencent_im": im.conf(timeout="1s"), "outbox_worker": {
        "max_retry_count": 20, "initial_backoff": "100ms", "max_backoff": "200ms"}}, tmp=tmp)
    rd.start(env={"TIM_TEST_SECRET": TEST_SECRET})
    try:
        cmd(rd, "/v1/rooms", {"room_id": "m3", "owner_uid": 1, "title": "t"})
        wait_until(lambda: val(scrape(rd), "roomd_outbox_delivery_seconds_count",
                               '{sink="tim"}') == 1, what="IM delivered")
        assert val(scrape(rd), "roomd_dependency_up", '{dependency="im"}') == 1
        im.stop()
        cmd(rd, "/v1/rooms/m3/join", {"uid": 9})
        wait_until(lambda: val(scrape(rd), "roomd_dependency_up", '{dependency="im"}') == 0,
                   what="im down")
        text = scrape(rd)
        assert val(text, "roomd_outbox_attempts_total", '{sink="tim",outcome="unavailable"}') + \
            val(text, "roomd_outbox_attempts_total", '{sink="tim",outcome="retry"}') >= 1, text
        im.start()
        wait_until(lambda: val(scrape(rd), "roomd_dependency_up", '{dependency="im"}') == 1,
                   timeout=20, what="im up again")
        wait_until(lambda: val(scrape(rd), "roomd_outbox_delivery_seconds_count",
                               '{sink="tim"}') == 2, what="the join delivered after IM came back")
    finally:
        rd.stop()
        im.stop()


if __name__ == "__main__":
    run([test_delivery_attempts_build_and_process, test_dead_letters_and_retryable_age,
         test_im_dependency_up_down])
