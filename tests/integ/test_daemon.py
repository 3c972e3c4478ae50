# SPDX-License-Identifier: Apache-2.0
"""test_daemon: the daemon conventions of a real roomd process.

--version/--help on stdout with exit 0; the log is JSON lines only and honours
app.log_level; SIGHUP reopens the log file and the log sink's file after a rotation and
reloads app.log_level (a broken config changes nothing), roomd keeps serving; systemd's
notify protocol (READY=1 once the port answers, WATCHDOG=1 pings, RELOADING=1, STOPPING=1)
on a NOTIFY_SOCKET the test binds; at start-up roomd waits for an unreachable MariaDB
(a TCP relay the test opens late in front of the real one) with a log line per attempt; a
listener whose port is taken (http.listen, admin.listen, grpc.listen) fails the start at once,
naming the key and the address, before any outbox worker claimed a row or reached the IM
stand-in.
"""
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid

sys.path.insert(0, os.path.dirname(__file__))
from roomd_test import (ROOMD, Roomd, env_port, free_port, listing, need, run,  # noqa: E402
                        wait_until)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "standins"))
from standins import ImStandin, TEST_SECRET  # noqa: E402

MYSQL_PORT = env_port("ROOMD_MYSQL_PORT", 3417)
TMP = tempfile.mkdtemp(prefix="roomd-daemon-")


def cmd(rd, path, body):
    body = dict(body, command_id=f"c-{uuid.uuid4().hex[:12]}")
    st, _, js = rd.post(path, body)
    assert st == (201 if path == "/v1/rooms" else 200), (path, st, js)  # CreateRoom: 201
    return js


def test_version_and_help():
    for args in (["--version"], ["-V"]):
        p = subprocess.run([ROOMD, *args], capture_output=True, text=True, timeout=10)
        assert p.returncode == 0 and p.stdout.startswith("roomd "), p
        assert "commit" in p.stdout and p.stderr == "", p
    p = subprocess.run([ROOMD, "--help"], capture_output=True, text=True, timeout=10)
    assert p.returncode == 0 and "usage: roomd" in p.stdout and p.stderr == "", p
    assert "--check-config" in p.stdout and "SIGHUP" in p.stdout, p.stdout
    p = subprocess.run([ROOMD, "--no-such-option"], capture_output=True, text=True, timeout=10)
    assert p.returncode == 2 and "usage: roomd" in p.stderr, p


def test_log_is_json_lines_and_honours_level():
    rd = Roomd(tmp=tempfile.mkdtemp(dir=TMP)).start()
    try:
        js = cmd(rd, "/v1/rooms", {"room_id": "lj1", "owner_uid": 1, "title": "a b=c \"q\""})
        assert js["room_id"] == "lj1"
        wait_until(lambda: rd.json_log("room_command_timing"), what="timing line")
    finally:
        assert rd.stop() == 0
    lines = rd.log_lines()
    assert len(lines) >= 3, lines
    for line in lines:
        j = json.loads(line)  # every line is one JSON object
        assert {"ts", "level", "mod", "msg"} <= set(j), j
    started = [json.loads(x) for x in lines if '"msg":"roomd started"' in x]
    assert started and started[0]["listen"] == f"127.0.0.1:{rd.port}", started

    quiet = Roomd(tmp=tempfile.mkdtemp(dir=TMP), overrides={"app": {"log_level": "error"}})
    quiet.start()
    try:
        cmd(quiet, "/v1/rooms", {"room_id": "lj2", "owner_uid": 1, "title": "t"})
    finally:
        assert quiet.stop() == 0
    assert quiet.log_lines() == [], quiet.log_lines()  # no timing line at level error


def test_sighup_reopens_and_reloads():
    rd = Roomd(tmp=tempfile.mkdtemp(dir=TMP)).start()
    try:
        cmd(rd, "/v1/rooms", {"room_id": "hup1", "owner_uid": 1, "title": "t"})
        events = rd.cfg["outbox_worker"]["log_sink"]["path"]
        wait_until(lambda: len(rd.events()) >= 1, what="first event in the log sink")
        # logrotate: move both files away, then SIGHUP
        os.rename(rd.log_path, rd.log_path + ".1")
        os.rename(events, events + ".1")
        rd.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: rd.json_log("reloaded"), what="reloaded line in the new file")
        assert rd.proc.poll() is None, "SIGHUP must not stop roomd"
        assert rd.json_log("reloaded")[0]["log_level"] == "info"
        cmd(rd, "/v1/rooms/hup1/join", {"uid": 2})
        wait_until(lambda: len(rd.events()) >= 1, what="event in the new log sink file")
        assert rd.events()[0]["event_type"] == "RoomUserJoined", rd.events()
        with open(events + ".1") as f:
            assert [json.loads(x)["event_type"] for x in f] == ["RoomCreated"]

        # app.log_level is reloadable: error hides the timing lines
        rd.cfg["app"]["log_level"] = "error"
        with open(rd.cfg_path, "w") as f:
            json.dump(rd.cfg, f)
        rd.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: len(rd.json_log("reloading")) == 1, what="second reload")
        time.sleep(0.3)
        before = len(rd.log_lines())
        timings = len(rd.json_log("room_command_timing"))
        cmd(rd, "/v1/rooms/hup1/join", {"uid": 3})
        time.sleep(0.3)
        assert len(rd.log_lines()) == before, rd.log_lines()[before:]

        # a config that no longer loads changes nothing and is logged at error
        with open(rd.cfg_path, "w") as f:
            f.write("outbox_worker:\n  batch_size: 0\n")
        rd.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: rd.json_log("reload refused: config error, nothing changed"),
                   what="reload refused line")
        refused = rd.json_log("reload refused: config error, nothing changed")[0]
        assert "outbox_worker.batch_size" in refused["err"], refused
        cmd(rd, "/v1/rooms/hup1/join", {"uid": 4})
        assert len(rd.json_log("room_command_timing")) == timings, "still at level error"
        assert rd.proc.poll() is None
    finally:
        assert rd.stop() == 0


class Notify:
    """The service manager's end of sd_notify: a unix datagram socket."""

    def __init__(self):
        self.path = os.path.join(tempfile.mkdtemp(dir=TMP), "notify")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(0.2)
        self.got = []

    def drain(self):
        while True:
            try:
                self.got.append(self.sock.recv(4096).decode())
            except socket.timeout:
                return self.got

    def has(self, word):
        return any(word in m.split("\n") for m in self.drain())


def test_systemd_notify_ready_watchdog_reload_stop():
    n = Notify()
    rd = Roomd(tmp=tempfile.mkdtemp(dir=TMP))
    rd.start(wait=False, env={"NOTIFY_SOCKET": n.path, "WATCHDOG_USEC": "400000"})
    try:
        wait_until(lambda: n.has("READY=1"), timeout=20, what="READY=1")
        # ready means bound and migrated: the port answers at once
        st, _, _ = rd.http("GET", "/healthz")
        assert st == 200
        ready = next(m for m in n.got if "READY=1" in m.split("\n"))
        assert f"MAINPID={rd.proc.pid}" in ready, ready
        count = sum(m == "WATCHDOG=1" for m in n.got)
        time.sleep(1.0)
        n.drain()
        pings = sum(m == "WATCHDOG=1" for m in n.got) - count
        assert pings >= 3, f"{pings} watchdog pings in 1 s with WatchdogSec=0.4s"
        rd.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: n.has("RELOADING=1"), what="RELOADING=1")
        rd.proc.send_signal(signal.SIGTERM)
        wait_until(lambda: n.has("STOPPING=1"), what="STOPPING=1")
    finally:
        assert rd.stop() == 0
    n.sock.close()


class Relay:
    """A TCP relay 127.0.0.1:port -> 127.0.0.1:target, opened when the test says so."""

    def __init__(self, target):
        self.port, self.target, self.srv = free_port(), target, None

    def open(self):
        self.srv = socket.socket()
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.srv.bind(("127.0.0.1", self.port))
        self.srv.listen(16)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                a, _ = self.srv.accept()
            except OSError:
                return
            b = socket.create_connection(("127.0.0.1", self.target))
            for x, y in ((a, b), (b, a)):
                threading.Thread(target=self._pipe, args=(x, y), daemon=True).start()

    @staticmethod
    def _pipe(x, y):
        try:
            while True:
                d = x.recv(65536)
                if not d:
                    break
                y.sendall(d)
        except OSError:
            pass
        finally:
            for s in (x, y):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        if self.srv:
            self.srv.close()


def mysql(sql):
    out = subprocess.run(["mariadb", "--no-defaults", "-h127.0.0.1", f"-P{MYSQL_PORT}", "-uroot",
                          "-N", "-B", "-e", sql], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def mysql_cfg(port, db, wait):
    return {"store": {"driver": "mysql", "mysql": {
        "host": "127.0.0.1", "port": port, "user": "root", "password": "", "database": db,
        "pool_size": 2, "connect_timeout": "1s", "startup_wait": wait}}}


def test_waits_for_the_database():
    need("127.0.0.1", MYSQL_PORT, "mariadb")
    db = f"roomd_daemon_{os.getpid()}"
    mysql(f"CREATE DATABASE IF NOT EXISTS {db}")
    relay = Relay(MYSQL_PORT)
    rd = Roomd(tmp=tempfile.mkdtemp(dir=TMP), overrides=mysql_cfg(relay.port, db, "30s"))
    try:
        rd.start(wait=False)
        wait_until(lambda: len(rd.json_log("waiting for the database")) >= 2, timeout=15,
                   what="two waiting lines")
        w = rd.json_log("waiting for the database")[0]
        assert w["level"] == "warn" and w["attempt"] == 1 and "retry_in_ms" in w, w
        assert str(relay.port) in w["err"], w
        assert rd.proc.poll() is None, "roomd must wait, not exit"
        try:
            rd.http("GET", "/healthz", timeout=1)
            raise AssertionError("port bound while the store is not open")
        except OSError:
            pass
        relay.open()
        rd.wait_ready(timeout=20)
        cmd(rd, "/v1/rooms", {"room_id": "dbw1", "owner_uid": 1, "title": "t"})
        assert rd.stop() == 0
    finally:
        rd.stop()
        relay.close()
        mysql(f"DROP DATABASE IF EXISTS {db}")

    # startup_wait 0: exits at once; a stop signal while waiting exits too
    rd = Roomd(tmp=tempfile.mkdtemp(dir=TMP), overrides=mysql_cfg(free_port(), db, "0s"))
    rd.start(wait=False)
    assert rd.proc.wait(20) == 1 and "store:" in rd.stderr_text(), rd.stderr_text()
    rd = Roomd(tmp=tempfile.mkdtemp(dir=TMP), overrides=mysql_cfg(free_port(), db, "60s"))
    rd.start(wait=False)
    wait_until(lambda: rd.json_log("waiting for the database"), what="waiting line")
    t0 = time.time()
    rd.proc.send_signal(signal.SIGTERM)
    assert rd.proc.wait(10) == 1 and time.time() - t0 < 5
    assert "stopped while waiting for the database" in rd.stderr_text(), rd.stderr_text()


def outbox_rows(db):
    c = sqlite3.connect(db, timeout=10)
    try:
        return c.execute("SELECT status, retry_count, sinks_done FROM room_outbox").fetchall()
    finally:
        c.close()


def test_port_in_use_fails_before_any_worker():
    tmp = tempfile.mkdtemp(dir=TMP)
    # pending rows: committed by a roomd whose outbox worker is off
    first = Roomd(tmp=tmp, overrides={"outbox_worker": {"enabled": False}}).start()
    try:
        cmd(first, "/v1/rooms", {"room_id": "busy1", "owner_uid": 1, "title": "t"})
        cmd(first, "/v1/rooms/busy1/join", {"uid": 2})
    finally:
        assert first.stop() == 0
    db = first.cfg["store"]["sqlite"]["path"]
    pending = outbox_rows(db)
    assert len(pending) == 2 and all(r == ("pending", 0, 0) for r in pending), pending
    im = ImStandin(tmp).start()
    try:
        for key in ("http.listen", "admin.listen", "grpc.listen"):
            taken = socket.socket()
            taken.bind(("127.0.0.1", 0))
            taken.listen(1)
            addr = f"127.0.0.1:{taken.getsockname()[1]}"
            section = key.split(".")[0]
            rd = Roomd(tmp=tempfile.mkdtemp(dir=TMP), port=(taken.getsockname()[1]
                                                          if key == "http.listen" else None),
                       overrides={section: {"listen": addr}, "tencent_im": im.conf(),
                                  "store": {"sqlite": {"path": db}},
                                  "outbox_worker": {"poll_interval": "50ms"}})
            if key != "grpc.listen":
                rd.cfg.setdefault("grpc", {})["listen"] = f"127.0.0.1:{free_port()}"
                with open(rd.cfg_path, "w") as f:
                    json.dump(rd.cfg, f)
            try:
                t0 = time.time()
                rd.start(wait=False, env={"TIM_TEST_SECRET": TEST_SECRET})
                rc = rd.proc.wait(10)
                assert rc != 0 and time.time() - t0 < 5, (key, rc)
                fatal = rd.json_log("fatal")
                assert fatal and key in fatal[0]["err"] and addr in fatal[0]["err"], \
                    (key, fatal, rd.log_lines())
                mods = {json.loads(x).get("mod") for x in rd.log_lines()}
                assert "outbox" not in mods and "consume" not in mods, (key, rd.log_lines())
                assert not rd.json_log("roomd started"), key
            finally:
                taken.close()
                rd.stop()
            # no worker claimed a row, no delivery reached the stand-in or the log sink
            assert outbox_rows(db) == pending, (key, outbox_rows(db))
            assert im.calls() == [], (key, im.calls())
            assert not os.path.exists(rd.cfg["outbox_worker"]["log_sink"]["path"]), key
    finally:
        im.stop()


if __name__ == "__main__":
    run([test_version_and_help, test_log_is_json_lines_and_honours_level,
         test_sighup_reopens_and_reloads, test_systemd_notify_ready_watchdog_reload_stop,
         test_waits_for_the_database, test_port_in_use_fails_before_any_worker])
