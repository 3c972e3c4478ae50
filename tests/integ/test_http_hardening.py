# SPDX-License-Identifier: Apache-2.0
"""test_http_hardening: the listener against a hostile client, on a real roomd.

Request smuggling (two Content-Lengths, a non-numeric one, Content-Length with
Transfer-Encoding: 400 and nothing executed), slowloris (one header byte every 0.3 s: cut
within http.header_timeout while another client keeps being served; on a keep-alive connection
within header_timeout of the next request's first byte), a slow body (cut
within http.body_timeout), a connection flood of the public listener while the operator
still reaches the admin listener, the per-IP connection limit, room ids "." and "..", and
the path percent-decoded exactly once (before routing and auth)."""
import json
import os
import socket
import time

import http_util as hu
from roomd_test import Roomd, run


def start(over=None):
    return Roomd(over or {}).start()


def raw(rd, data, timeout=5):
    return hu.raw_exchange(rd.port, data, timeout)


def status_of(resp):
    line = resp.split(b"\r\n", 1)[0]
    return int(line.split()[1]) if line.startswith(b"HTTP/") else None


def test_smuggling_refused():
    rd = start()
    try:
        rid = hu.room_name("smug")
        body = json.dumps({"command_id": hu.cid(), "room_id": rid, "owner_uid": 1,
                           "title": "t"}).encode()
        n = len(body)
        cases = {
            "two Content-Lengths": b"Content-Length: %d\r\nContent-Length: %d\r\n" % (n, n + 5),
            "same Content-Length twice": b"Content-Length: %d\r\nContent-Length: %d\r\n" % (n, n),
            "Content-Length not a number": b"Content-Length: +%d\r\n" % n,
            "Content-Length with Transfer-Encoding":
                b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n" % n,
            # libmicrohttpd decodes "chunked" alone: this one waited for the body timeout
            "Transfer-Encoding identity, chunked": b"Transfer-Encoding: identity, chunked\r\n",
        }
        for what, framing in cases.items():
            req = (b"POST /v1/rooms HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
                   framing + b"\r\n" + body)
            t0 = time.time()
            got = raw(rd, req)
            assert status_of(got) == 400, (what, got[:200])
            assert time.time() - t0 < 3, (what, "answered late")
            if what != "Content-Length not a number":  # libmicrohttpd's own 400: see docs/http.md
                assert got.count(b"HTTP/1.1 ") == 1, (what, got[:400])  # one header block
        st, _, js = rd.http("GET", f"/v1/rooms/{rid}")
        assert st == 404, ("a smuggled create executed", js)
        m = hu.metrics(rd)
        # (libmicrohttpd itself refuses some shapes before roomd sees the headers)
        assert m['roomd_http_framing_refused_total{listener="public"}'] >= 1, m
    finally:
        rd.stop()


def test_slowloris_cut_others_served():
    rd = start({"http": {"header_timeout": "1s"}})
    try:
        s = socket.create_connection(("127.0.0.1", rd.port), timeout=10)
        t0 = time.time()
        closed_at = None
        for ch in b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100:
            try:
                s.send(bytes([ch]))
            except OSError:
                closed_at = time.time()
                break
            # meanwhile another client is served at once
            st, _, _ = rd.http("GET", "/healthz", timeout=2)
            assert st == 200
            s.settimeout(0.3)
            try:
                if s.recv(1024) == b"":
                    closed_at = time.time()
                    break
            except socket.timeout:
                pass
            except OSError:
                closed_at = time.time()
                break
        s.close()
        assert closed_at is not None, "the slow client was never cut"
        assert closed_at - t0 < 3.0, f"cut after {closed_at - t0:.1f}s (header_timeout 1s)"
        m = hu.metrics(rd)
        assert m['roomd_http_cut_total{listener="public",phase="header"}'] >= 1
    finally:
        rd.stop()


def test_keepalive_slowloris_cut_from_first_byte():
    """After one answer on a keep-alive connection, a byte every 200 ms of the next request:
    cut within http.header_timeout + 1 s of its first byte (not request_timeout +
    header_timeout from the answer, not kept alive by each byte); a real client is answered
    all along."""
    rd = start({"http": {"header_timeout": "1s", "request_timeout": "20s"}})
    try:
        s = socket.create_connection(("127.0.0.1", rd.port), timeout=10)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        got = b""
        while b"\r\n\r\n" not in got or not got.rstrip().endswith(b"}"):
            got += s.recv(4096)
        assert status_of(got) == 200, got
        time.sleep(1.5)  # idle longer than header_timeout: the idle wait is request_timeout
        t0 = time.time()
        closed_at = None
        s.settimeout(0.2)
        for ch in b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100:
            try:
                s.send(bytes([ch]))
                if s.recv(1024) == b"":
                    closed_at = time.time()
                    break
            except socket.timeout:
                pass
            except OSError:
                closed_at = time.time()
                break
            st, _, _ = rd.http("GET", "/healthz", timeout=2)  # another client, at once
            assert st == 200
            if time.time() - t0 > 10:
                break
        s.close()
        assert closed_at is not None, "the slow keep-alive client was not cut within 10 s"
        assert closed_at - t0 < 2.0, f"cut {closed_at - t0:.1f}s after its first byte"
    finally:
        rd.stop()


def test_slow_body_cut():
    rd = start({"http": {"body_timeout": "1s"}})
    try:
        s = socket.create_connection(("127.0.0.1", rd.port), timeout=10)
        s.sendall(b"POST /v1/rooms HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 500\r\n\r\n{")
        t0 = time.time()
        s.settimeout(5)
        got = b""
        try:
            while True:
                b = s.recv(1024)
                if not b:
                    break
                got += b
        except (socket.timeout, OSError):
            pass
        assert time.time() - t0 < 3.0, "a slow body was not cut within body_timeout"
        s.close()
        m = hu.metrics(rd)
        assert m['roomd_http_cut_total{listener="public",phase="body"}'] >= 1
    finally:
        rd.stop()


def hold(rd, n):
    """n keep-alive connections to rd's public listener, each answered once (so roomd has
    surely accepted and counts it), left idle for the caller to close."""
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", rd.port), timeout=10)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        got = b""
        while b'{"status":"ok"}' not in got:
            b = s.recv(4096)
            assert b, "a held connection was closed before its answer"
            got += b
        socks.append(s)
    return socks


def served(rd):
    """True when a new client gets an answer from the public listener within 1 s."""
    try:
        return rd.http("GET", "/healthz", timeout=1)[0] == 200
    except OSError:
        return False


def test_flood_admin_still_reachable():
    rd = start({"http": {"max_connections": 8, "max_connections_per_ip": 0,
                         "header_timeout": "30s"}})
    socks = []
    try:
        socks = hold(rd, 8)
        # the public listener is at its limit (idle sockets no longer starve it: fair eviction,
        # tests/integ/test_http_slots.py); the admin listener is apart from it anyway
        st, _, js = rd.admin("GET", "/readyz", timeout=5)
        assert st == 200 and js["status"] == "ready", (st, js)
        st, _, _ = rd.admin("GET", "/metrics", timeout=5)
        assert st == 200
    finally:
        for s in socks:
            s.close()
        rd.stop()


def test_per_ip_limit():
    rd = start({"http": {"max_connections_per_ip": 3}})
    socks = []
    try:
        # the harness's own start-up probes may still be counted for a moment after they
        # closed (the accept callback counts the listener's connections): hold 3 once they go
        for i in range(20):
            try:
                socks = hold(rd, 3)
                break
            except (ConnectionResetError, AssertionError):
                if i == 19:
                    raise
                time.sleep(0.2)
        assert not served(rd), "a 4th connection of one address was served"
        for s in socks:
            s.close()
        socks = []
        time.sleep(0.3)
        assert rd.http("GET", "/healthz")[0] == 200
    finally:
        for s in socks:
            s.close()
        rd.stop()


def test_dot_room_ids_and_decoding_once():
    rd = start()
    try:
        for rid in (".", ".."):
            hu.expect_error(rd.post("/v1/rooms", {"command_id": hu.cid(), "room_id": rid,
                                                  "owner_uid": 1, "title": "t"}), 400,
                            field="room_id", what=f"create {rid!r}")
        for path in ("/v1/rooms/./join", "/v1/rooms/../join", "/v1/rooms/%2e%2e/join",
                     "/v1/rooms/%2E/join", "/v1/rooms/r1%00/join", "/v1/rooms/r1%zz/join",
                     "/internal/../v1/rooms/x/join"):
            st, _, js = rd.post(path, {"command_id": hu.cid(), "uid": 2})
            assert st == 400, (path, st, js)
        rid = hu.room_name("dec")
        hu.expect_ok(hu.create(rd, rid))
        # %72 is "r"-free: decode once -> the room; %25 decodes to "%" once and stops there
        enc = "".join(f"%{ord(c):02x}" for c in rid)
        js = hu.expect_ok(rd.http("GET", f"/v1/rooms/{enc}"), "percent-encoded room id")
        assert hu.room_of(js)["room_id"] == rid
        st, _, js = rd.http("GET", f"/v1/rooms/{rid.replace('-', '%252d', 1)}")
        assert st == 400, ("decoded twice?", st, js)
        # an encoded admin path is still not served on the public listener
        st, _, js = rd.http("GET", "/%6detrics")
        assert st == 404, (st, js)
    finally:
        rd.stop()


def test_create_rate_limited_429():
    rd = start({"room": {"max_creates_per_minute": 3}})
    try:
        made = [hu.room_name("rl") for _ in range(4)]
        for rid in made[:3]:
            hu.expect_ok(hu.create(rd, rid, owner=77))
        st, hd, js = hu.create(rd, made[3], owner=77)
        assert st == 429 and js["error"]["code"] == "rate_limited", (st, js)
        assert 1 <= int(hd["Retry-After"]) <= 60, hd
        assert rd.http("GET", f"/v1/rooms/{made[3]}")[0] == 404, "a refused create made a room"
        hu.expect_ok(hu.create(rd, hu.room_name("rl"), owner=78))  # another owner: its own count
    finally:
        rd.stop()


def test_secrets_redacted_in_logs():
    from roomd_test import free_port
    pw = "pw-" + os.urandom(6).hex()
    rd = Roomd({"rocketmq": {"enabled": True,
                             "name_servers": [f"nats://roomd:{pw}@127.0.0.1:{free_port()}"]},
                "redis": {"password": "redis-" + pw}})
    rd.start()
    try:
        time.sleep(0.5)
        hu.expect_ok(rd.http("GET", "/healthz"))
        text = "\n".join(rd.log_lines()) + rd.stderr_text()
        assert "nats://roomd:***@" in text, text[-2000:]  # the URL is logged, masked
        st, _, metrics = rd.admin("GET", "/metrics")
        st2, _, ready = rd.admin("GET", "/readyz")
        for where, t in (("log", text), ("metrics", str(metrics)), ("readyz", str(ready))):
            assert pw not in t, f"the password is in the {where}"
    finally:
        rd.stop()


if __name__ == "__main__":
    run([test_smuggling_refused, test_slowloris_cut_others_served,
         test_keepalive_slowloris_cut_from_first_byte, test_slow_body_cut,
         test_flood_admin_still_reachable, test_per_ip_limit, test_dot_room_ids_and_decoding_once,
         test_create_rate_limited_429, test_secrets_redacted_in_logs])
