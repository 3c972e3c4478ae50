# SPDX-License-Identifier: Apache-2.0
"""roomd_test: what the Python integration tests share.

Roomd(cfg_overrides) writes a config (JSON is YAML) into a fresh temp dir, starts the
built roomd binary as a process on a free port (and its admin listener on another), waits
for /healthz, and offers http(method, path, body) -> (status, headers, json) on the public
listener and admin(method, path, body) on the admin one. stop() sends SIGTERM; kill() SIGKILL.
Test servers (scripts/servers.sh) are reached through ROOMD_*_PORT variables; need()
skips (exit 77) or, under make test (ROOMD_REQUIRE_SERVERS=1), fails when one is down.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import http.client
import ssl

BUILD = os.environ.get("ROOMD_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "build"))
SOURCE = os.environ.get("ROOMD_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))
ROOMD = os.path.join(BUILD, "roomd")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "standins"))
from standins import free_port  # noqa: E402  (one picker: a port is never handed out twice)


def env_port(name, dflt):
    return int(os.environ.get(name, dflt))


def listing():
    """True under `test_x.py --list` (ctest asks for the names): no server is needed."""
    return sys.argv[1:2] == ["--list"]


def mysql_query(sql, db=None):
    """Runs sql with the mariadb client on the suite's mariadbd (ROOMD_MYSQL_PORT, default
    3417) as root; returns the rows as lists of strings."""
    cmd = ["mariadb", "--no-defaults", "-h127.0.0.1", f"-P{env_port('ROOMD_MYSQL_PORT', 3417)}",
           "-uroot", "-N", "-B", "-e", sql] + ([db] if db else [])
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(f"mariadb: {sql}: {out.stderr.strip()}")
    return [line.split("\t") for line in out.stdout.splitlines()]


def need(host, port, what):
    if listing():
        return
    try:
        socket.create_connection((host, port), timeout=2).close()
    except OSError:
        if os.environ.get("ROOMD_REQUIRE_SERVERS", "") not in ("", "0"):
            print(f"FAIL: required server missing: {what} at {host}:{port}")
            sys.exit(1)
        print(f"SKIP: {what} not reachable at {host}:{port}")
        sys.exit(77)


def merge(dst, src):
    for k, v in src.items():
        if isinstance(v, dict) and isinstance(dst.get(k), dict):
            merge(dst[k], v)
        else:
            dst[k] = v
    return dst


def base_config(tmp, port, admin_port=None):
    """A test config: SQLite in tmp, short timers, log sink on, the admin listener on
    admin_port (a free port when None), auth.mode none (every listener is loopback)."""
    return {
        "app": {"default_app_code": "hyapp", "node_id": f"test-{port}",
                "log_file": os.path.join(tmp, "roomd.log"), "log_level": "info"},
        "http": {"listen": f"127.0.0.1:{port}", "max_body_bytes": 65536},
        "admin": {"listen": f"127.0.0.1:{admin_port or free_port()}",
                  "auth_backoff": "0"},  # the auth matrices send bad tokens in a row (on in
                                         # test_admin_secrets.py)
        "store": {"driver": "sqlite",
                  "sqlite": {"path": os.path.join(tmp, "roomd.db"), "synchronous": "full"}},
        "room": {"snapshot_every_n": 5, "idle_evict_after": "10m", "seat_count": 8,
                 "max_creates_per_minute": 0,  # tests create many rooms per owner
                 # gifts name their price (auth.mode none); under jwt Roomd makes it
                 # required and a test seeds the catalog (http_util.put_gift)
                 "gift_catalog": "off",
                 "rocket": {"thresholds": [1000, 5000], "countdown": "2s"},
                 # members do not heartbeat in most tests: presence expiry off
                 # (test_presence.py turns it on, short)
                 "member_idle_timeout": "0"},
        "wallet": {"driver": "embedded", "initial_balance": 100000, "allow_topup": True},
        "outbox_worker": {"enabled": True, "publish_mode": "direct", "poll_interval": "200ms",
                          "batch_size": 100, "publish_timeout": "2s", "max_retry_count": 3,
                          "initial_backoff": "100ms", "max_backoff": "1s", "workers": 2,
                          "lock_timeout": "5s", "log_sink": {"enabled": True,
                          "path": os.path.join(tmp, "events.jsonl")}},
    }


class Roomd:
    def __init__(self, overrides=None, tmp=None, port=None, binary=None):
        self.tmp = tmp or tempfile.mkdtemp(prefix="roomd-it-")
        self.port = port or free_port()
        self.cfg = merge(base_config(self.tmp, self.port), overrides or {})
        if (self.cfg.get("auth", {}).get("mode") == "jwt"
                and "gift_catalog" not in (overrides or {}).get("room", {})):
            self.cfg["room"]["gift_catalog"] = "required"  # off is refused under jwt
        self.admin_port = int(self.cfg["admin"]["listen"].rpartition(":")[2])
        self.admin_token = None  # set it when the config names admin.token_env/_file
        self.tls_ca = None  # set it to a CA file: http() then speaks https to a TLS listener
        self.cfg_path = os.path.join(self.tmp, f"roomd-{self.port}.yaml")
        with open(self.cfg_path, "w") as f:
            json.dump(self.cfg, f, indent=1)
        self.binary = binary or ROOMD
        self.proc = None
        self.log_path = self.cfg["app"]["log_file"]

    def start(self, wait=True, env=None):
        e = dict(os.environ)
        e.update(env or {})
        self.stderr = open(os.path.join(self.tmp, f"stderr-{self.port}.txt"), "ab")
        self.proc = subprocess.Popen([self.binary, "-c", self.cfg_path],
                                     stdout=self.stderr, stderr=self.stderr, env=e)
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout=20):
        end = time.time() + timeout
        while time.time() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"roomd exited {self.proc.returncode}: {self.stderr_text()}")
            try:
                st, _, _ = self.http("GET", "/healthz")
                if st == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("roomd did not become healthy")

    def stderr_text(self):
        with open(os.path.join(self.tmp, f"stderr-{self.port}.txt"), "rb") as f:
            return f.read().decode(errors="replace")[-4000:]

    def _tls_context(self, port):
        """With self.tls_ca set and TLS on the listener on port (http.tls / admin.tls): an ssl
        context verifying it against tls_ca; else None (plain HTTP)."""
        part = self.cfg["admin"] if port == self.admin_port else self.cfg["http"]
        if not self.tls_ca or not part.get("tls", {}).get("cert_file"):
            return None
        return ssl.create_default_context(cafile=self.tls_ca)  # the name checked too

    def http(self, method, path, body=None, headers=None, raw=None, timeout=30, port=None):
        port = port or self.port
        ctx = self._tls_context(port)
        if ctx is not None:
            c = http.client.HTTPSConnection("127.0.0.1", port, timeout=timeout, context=ctx)
        else:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        text = r.read().decode()
        c.close()
        try:
            js = json.loads(text) if text else None
        except ValueError:
            js = text
        return r.status, dict(r.getheaders()), js

    def post(self, path, body, **kw):
        return self.http("POST", path, body, **kw)

    def admin(self, method, path, body=None, headers=None, **kw):
        """A request to the admin listener (/internal/v1/..., /metrics, top-up, readiness),
        with "Authorization: Bearer <admin_token>" when self.admin_token is set and headers
        carry no Authorization of their own."""
        h = dict(headers or {})
        if self.admin_token and "Authorization" not in h:
            h["Authorization"] = f"Bearer {self.admin_token}"
        return self.http(method, path, body, headers=h, port=self.admin_port, **kw)

    def admin_post(self, path, body, **kw):
        return self.admin("POST", path, body, **kw)

    def log_lines(self):
        try:
            with open(self.log_path) as f:
                return f.read().splitlines()
        except FileNotFoundError:
            return []

    def json_log(self, kind):
        out = []
        for line in self.log_lines():
            if line.startswith("{"):
                try:
                    j = json.loads(line)
                except ValueError:
                    continue
                if j.get("msg") == kind or j.get("event") == kind:
                    out.append(j)
        return out

    def events(self):
        p = self.cfg["outbox_worker"]["log_sink"]["path"]
        try:
            with open(p) as f:
                return [json.loads(l) for l in f if l.strip()]
        except FileNotFoundError:
            return []

    def stop(self, sig=signal.SIGTERM, timeout=20):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise RuntimeError("roomd did not stop on SIGTERM")
        rc = self.proc.returncode if self.proc else None
        self.proc = None
        return rc

    def kill(self):
        return self.stop(signal.SIGKILL)


def create_and_join(post, rooms, joins, tag):
    """Creates `rooms` rooms and joins `joins` users to each through post(path, body) ->
    (status, headers, json), asserting 200 each time: one outbox event per command.
    Returns the number of commands sent."""
    import uuid
    ids = [f"{tag}-{uuid.uuid4().hex[:10]}" for _ in range(rooms)]
    for rid in ids:
        st, _, js = post("/v1/rooms", {"command_id": f"c-{rid}", "room_id": rid,
                                       "owner_uid": 1, "title": "t"})
        assert st == 201, (st, js)
    for u in range(joins):
        for rid in ids:
            st, _, js = post(f"/v1/rooms/{rid}/join", {"command_id": f"j-{rid}-{u}", "uid": 100 + u})
            assert st == 200, (st, js)
    return rooms * (1 + joins)


def redis_cli(port, *args):
    """redis-cli -p port args...: its output stripped, or None when it failed."""
    r = subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True, text=True,
                       timeout=10)
    return r.stdout.strip() if r.returncode == 0 else None


def start_redis(port, d):
    """A private redis-server on 127.0.0.1:port (data dir d, no persistence), once it PONGs."""
    p = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                          "--dir", d, "--save", "", "--appendonly", "no"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until(lambda: redis_cli(port, "PING") == "PONG", timeout=10, what="redis-server")
    return p


def wait_until(fn, timeout=10, step=0.05, what="condition"):
    end = time.time() + timeout
    last = None
    while time.time() < end:
        last = fn()
        if last:
            return last
        time.sleep(step)
    raise AssertionError(f"timed out waiting for {what} (last={last!r})")


def run(tests, fixture=None):
    """Runs test functions in order; prints a summary; exits non-zero on failure.

    `--list` prints the names (one ctest entry each) and runs nothing; names on
    the command line run just those. A program whose tests share one expensive
    set-up (a roomd process started once) passes fixture="name": it is listed
    as that one name and always runs every test."""
    if listing():
        print("\n".join([fixture] if fixture else [t.__name__ for t in tests]))
        sys.exit(0)
    wanted = [a for a in sys.argv[1:] if a != fixture]
    if wanted and not fixture:
        by_name = {t.__name__: t for t in tests}
        unknown = [w for w in wanted if w not in by_name]
        if unknown:
            print(f"FAIL: no test named {', '.join(unknown)} (--list prints the names)")
            sys.exit(1)
        tests = [by_name[w] for w in wanted]
    failed = 0
    for t in tests:
        name = t.__name__
        t0 = time.time()
        try:
            t()
            print(f"ok   {name} ({time.time() - t0:.2f}s)", flush=True)
        except Exception as e:  # noqa: BLE001 - report every failure
            failed += 1
            import traceback
            traceback.print_exc()
            print(f"FAIL {name}: {e}", flush=True)
    print(f"{len(tests) - failed}/{len(tests)} passed")
    sys.exit(1 if failed else 0)
