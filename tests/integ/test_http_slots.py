# SPDX-License-Identifier: Apache-2.0
"""test_http_slots: idle sockets cannot starve real clients (issue 25, docs/http.md "Limits
against hostile clients"). With http.max_connections 1024 and 64 per address, 1,024 idle
sockets from 16 addresses (127.0.0.1-16), reopened as soon as roomd shuts one: a client from
another address (127.0.0.200), a new connection per request, gets >= 95% of its answers (a
connection past the limit evicts the oldest idle one of the address holding the most). The
admin listener the same against 64 idle sockets from one address (admin.max_connections_per_ip
16): an operator from another address gets >= 95%.

Run: python3 tests/integ/test_http_slots.py (ROOMD_BUILD_DIR=build-asan)"""
import http.client
import os
import resource
import re
import selectors
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from roomd_test import Roomd, run  # noqa: E402


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max(soft, min(hard, 8192))
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


class Hoarder:
    """Holds n idle sockets from source address src to port, reopening each one roomd shuts."""

    def __init__(self, src, port, n):
        self.src, self.port, self.n = src, port, n
        self.socks, self.stop = [], False
        self.sel = selectors.DefaultSelector()  # epoll: descriptors past 1024
        self.t = threading.Thread(target=self.loop, daemon=True)

    def open_one(self):
        s = socket.socket()
        s.bind((self.src, 0))
        s.settimeout(2)
        try:
            s.connect(("127.0.0.1", self.port))
            s.setblocking(False)
            self.socks.append(s)
            self.sel.register(s, selectors.EVENT_READ)
        except OSError:
            s.close()

    def loop(self):
        while not self.stop:
            while len(self.socks) < self.n and not self.stop:
                self.open_one()
            r = [k.fileobj for k, _ in self.sel.select(0.05)] if self.socks else []
            for s in r:  # readable: shut by roomd (EOF) or refused
                try:
                    data = s.recv(4096)
                except OSError:
                    data = b""
                if not data:
                    self.sel.unregister(s)
                    self.socks.remove(s)
                    s.close()

    def start(self):
        for _ in range(self.n):
            self.open_one()
        self.t.start()
        return self

    def close(self):
        self.stop = True
        self.t.join(5)
        for s in self.socks:
            s.close()


def answers(port, src, n, path="/healthz", headers=None):
    got = 0
    for _ in range(n):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=3, source_address=(src, 0))
        try:
            c.request("GET", path, headers=headers or {})
            if c.getresponse().status == 200:
                got += 1
        except OSError:
            pass
        finally:
            c.close()
    return got


def test_public_listener():
    raise_nofile()
    rd = Roomd({"http": {"max_connections": 1024, "max_connections_per_ip": 64}}).start()
    hs = []
    try:
        hs = [Hoarder(f"127.0.0.{i}", rd.port, 64).start() for i in range(1, 17)]
        time.sleep(1.0)
        held = sum(len(h.socks) for h in hs)
        assert held >= 1000, held
        got = answers(rd.port, "127.0.0.200", 80)
        assert got >= 76, f"{got} of 80 answered with {held} idle sockets held"
        st, _, text = rd.http("GET", "/metrics", port=rd.admin_port)
        ev = re.search(r'roomd_http_evicted_total\{listener="public"\} (\d+)', text)
        assert ev and int(ev.group(1)) >= 76, text[:300]  # each answer took an idle slot
    finally:
        for h in hs:
            h.close()
        rd.stop()


def test_admin_listener():
    raise_nofile()
    rd = Roomd({"admin": {"max_connections": 64, "max_connections_per_ip": 16}}).start()
    h = None
    try:
        h = Hoarder("127.0.0.1", rd.admin_port, 64).start()
        time.sleep(1.0)
        got = answers(rd.admin_port, "127.0.0.2", 60, path="/readyz")
        assert got >= 57, f"{got} of 60 answered"
    finally:
        if h:
            h.close()
        rd.stop()


if __name__ == "__main__":
    run([test_public_listener, test_admin_listener])
