# SPDX-License-Identifier: Apache-2.0
"""standins.py: start, stop and script the stand-ins from Python tests.

ImStandin: im_standin.py (HTTPS, a self-signed cert made here with the openssl CLI).
ActivityStandin: activity_standin.js (gRPC on node; needs node_modules, see scripts/deps.sh).
Both run as separate processes on free ports; stop() makes the peer "down" (connection
refused) and start() brings it back with its recorded state.
"""
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import time
import http.client

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("ROOMD_SOURCE_DIR", os.path.join(HERE, "..", ".."))

# The doc's demo key (tencent-im-rest.md §2); a test secret, never a real one.
TEST_SECRET = "5bd2850fff3ecb11d7c805251c51ee463a25727bddc2385f3fa8bfee1bb93b5e"
TEST_APPID = 1400000000


_handed_ports = set()


def free_port():
    """A port free now, never one this process handed out before (the kernel may give
    the same ephemeral port to two binds in a row once the first socket is closed)."""
    while True:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        p = s.getsockname()[1]
        s.close()
        if p not in _handed_ports:
            _handed_ports.add(p)
            return p


def wait_port(port, proc, timeout=15):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"stand-in exited {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"stand-in did not listen on {port}")


def make_cert(tmp):
    """Self-signed cert for 127.0.0.1 (openssl CLI). Returns (cert, key)."""
    cert, key = os.path.join(tmp, "im-cert.pem"), os.path.join(tmp, "im-key.pem")
    if not os.path.exists(cert):
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                        key, "-out", cert, "-days", "2", "-subj", "/CN=127.0.0.1",
                        "-addext", "subjectAltName=IP:127.0.0.1"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return cert, key


class ImStandin:
    def __init__(self, tmp, admin="administrator", sdkappid=TEST_APPID, secret=TEST_SECRET):
        self.tmp, self.admin, self.sdkappid, self.secret = tmp, admin, sdkappid, secret
        self.port = free_port()
        self.cert, self.key = make_cert(tmp)
        self.state = os.path.join(tmp, f"im-state-{self.port}.json")
        self.proc = None

    def conf(self, group_type="AVChatRoom", timeout="3500ms", secret_env="TIM_TEST_SECRET"):
        """The tencent_im config section pointing at this stand-in."""
        return {"enabled": True, "base_url": f"https://127.0.0.1:{self.port}",
                "sdk_app_id": self.sdkappid, "admin_identifier": self.admin,
                "secret_key_env": secret_env, "secret_key_file": "", "usersig_ttl": "24h",
                "group_type": group_type, "ca_file": self.cert, "timeout": timeout}

    def start(self):
        env = dict(os.environ, IM_STANDIN_SECRET=self.secret)
        self.log = open(os.path.join(self.tmp, f"im-standin-{self.port}.log"), "ab")
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "im_standin.py"), "--port", str(self.port),
             "--cert", self.cert, "--key", self.key, "--sdkappid", str(self.sdkappid),
             "--admin", self.admin, "--state", self.state],
            stdout=self.log, stderr=self.log, env=env)
        wait_port(self.port, self.proc)
        return self

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.proc = None

    def _req(self, method, path, body=None):
        ctx = ssl.create_default_context(cafile=self.cert)
        c = http.client.HTTPSConnection("127.0.0.1", self.port, context=ctx, timeout=10)
        c.request(method, path, body=json.dumps(body) if body is not None else None,
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        c.close()
        return json.loads(data)

    def calls(self, api=None):
        cs = self._req("GET", "/_calls")
        return [c for c in cs if api is None or c["api"] == api]

    def state_now(self):
        return self._req("GET", "/_state")

    def messages(self, event_id=None):
        ms = self.state_now()["messages"]
        if event_id is None:
            return ms
        return [m for m in ms if m["Data"] and json.loads(m["Data"]).get("event_id") == event_id]

    def control(self, **kw):
        return self._req("POST", "/_control", kw)


class NodeGrpcStandin:
    """A stand-in that is a Node @grpc/grpc-js server plus a JSON control port: the start,
    stop and control calls the activity and wallet stand-ins share."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.port, self.cport = free_port(), free_port()
        self.proc = None

    @staticmethod
    def available():
        return shutil.which("node") is not None and \
            os.path.isdir(os.path.join(HERE, "node_modules", "@grpc", "grpc-js"))

    def _spawn(self, script, *args):
        name = script.replace("_standin.js", "")
        self.log = open(os.path.join(self.tmp, f"{name}-standin-{self.port}.log"), "ab")
        self.proc = subprocess.Popen(
            ["node", os.path.join(HERE, script), "--port", str(self.port),
             "--control-port", str(self.cport), "--proto-dir", os.path.join(SOURCE, "proto"),
             *args],
            stdout=self.log, stderr=self.log)
        wait_port(self.port, self.proc)
        wait_port(self.cport, self.proc)
        return self

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.proc = None

    def _req(self, method, path, body=None):
        c = http.client.HTTPConnection("127.0.0.1", self.cport, timeout=10)
        c.request(method, path, body=json.dumps(body) if body is not None else None)
        r = c.getresponse()
        data = r.read()
        c.close()
        return json.loads(data)


class ActivityStandin(NodeGrpcStandin):
    def __init__(self, tmp):
        super().__init__(tmp)
        self.record = os.path.join(tmp, f"activity-calls-{self.port}.jsonl")

    def conf(self):
        return {"enabled": True, "target": f"127.0.0.1:{self.port}"}

    def start(self):
        return self._spawn("activity_standin.js", "--record", self.record)

    def calls(self):
        if self.proc is None:  # stopped: read what it recorded
            try:
                with open(self.record) as f:
                    return [json.loads(l) for l in f if l.strip()]
            except FileNotFoundError:
                return []
        return self._req("GET", "/calls")

    def fail(self, code, count=1, details="scripted"):
        return self._req("POST", "/fail", {"code": code, "count": count, "details": details})

    def slow(self, ms, count=1):
        return self._req("POST", "/slow", {"ms": ms, "count": count})


class WalletStandin(NodeGrpcStandin):
    """The wallet service stand-in (wallet_standin.js): real gRPC, a durable ledger file."""

    def __init__(self, tmp, initial=100000):
        super().__init__(tmp)
        self.ledger = os.path.join(tmp, f"wallet-ledger-{self.port}.jsonl")
        self.initial = initial

    def conf(self, reconcile_after="2s"):
        return {"driver": "grpc", "grpc": {"target": f"127.0.0.1:{self.port}", "timeout": "500ms"},
                "reconcile_after": reconcile_after}

    def start(self):
        return self._spawn("wallet_standin.js", "--ledger", self.ledger,
                           "--initial", str(self.initial))

    def state(self):
        return self._req("GET", "/state")

    def balance(self, app, uid):
        return int(self.state()["balances"].get(f"{app}/{uid}", self.initial))

    def holds(self, state=None):
        return [h for h in self.state()["holds"] if state is None or h["state"] == state]

    def fail(self, method, code, count=1):
        return self._req("POST", "/fail", {"method": method, "code": code, "count": count})
