# SPDX-License-Identifier: Apache-2.0
"""test_http_proxies: http.trusted_proxies (issue 25, docs/http.md "Behind a load balancer").

- requests through a trusted "proxy" (source address 127.0.0.2) are attributed to the
  right-most untrusted address of X-Forwarded-For: the admin authentication backoff (keyed
  on the client address) counts each client apart, trusted hops are skipped, and the proxy's
  own address is not throttled for its clients' failures;
- the same header from an untrusted address (127.0.0.3) is ignored: its clients share one count;
- a trusted proxy is exempt from the per-address connection cap; an untrusted address is not;
- a bad entry is a config error naming http.trusted_proxies.

Run: python3 tests/integ/test_http_proxies.py (ROOMD_BUILD_DIR=build-asan)"""
import http.client
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from roomd_test import ROOMD, Roomd, base_config, free_port, merge, run  # noqa: E402

TOKEN = "admin-secret-" + os.urandom(16).hex()


def get(port, source, path, token=None, xff=None, conn=None):
    """GET path on 127.0.0.1:port from source address; (status, connection)."""
    c = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=10,
                                           source_address=(source, 0))
    h = {}
    if token is not None:
        h["Authorization"] = f"Bearer {token}"
    if xff is not None:
        h["X-Forwarded-For"] = xff
    c.request("GET", path, headers=h)
    r = c.getresponse()
    r.read()
    if conn is None:
        c.close()
    return r.status, c


def start():
    rd = Roomd({"admin": {"token_env": "T_ADMIN", "auth_backoff": "10s"},
                "http": {"trusted_proxies": ["127.0.0.2/32", "::1"],
                         "max_connections_per_ip": 4}})
    return rd.start(env={"T_ADMIN": TOKEN})


def test_per_client_behind_trusted_proxy():
    rd = start()
    try:
        adm = rd.admin_port
        path = "/metrics"
        assert get(adm, "127.0.0.1", path, TOKEN)[0] == 200
        # client A fails once: A waits (429 unchecked), whatever comes before it in the list
        assert get(adm, "127.0.0.2", path, "bad", xff="10.0.0.1")[0] == 401
        assert get(adm, "127.0.0.2", path, TOKEN, xff="10.0.0.1")[0] == 429
        assert get(adm, "127.0.0.2", path, TOKEN, xff="192.0.2.1, 10.0.0.1")[0] == 429
        # a trusted hop (the proxy itself) on the right is skipped: still A
        assert get(adm, "127.0.0.2", path, TOKEN, xff="10.0.0.1, 127.0.0.2")[0] == 429
        # client B through the same proxy: its own count
        assert get(adm, "127.0.0.2", path, TOKEN, xff="10.0.0.2")[0] == 200
        assert get(adm, "127.0.0.2", path, TOKEN, xff="10.0.0.1, 10.0.0.3")[0] == 200
        # several X-Forwarded-For headers are one list: the right-most is A
        c = http.client.HTTPConnection("127.0.0.1", adm, timeout=10,
                                       source_address=("127.0.0.2", 0))
        c.putrequest("GET", path)
        c.putheader("Authorization", f"Bearer {TOKEN}")
        c.putheader("X-Forwarded-For", "10.0.0.2")
        c.putheader("X-Forwarded-For", "10.0.0.1")
        c.endheaders()
        r = c.getresponse()
        r.read()
        c.close()
        assert r.status == 429, r.status
        # the proxy's own requests (no header) are not throttled by A's failure
        assert get(adm, "127.0.0.2", path, TOKEN)[0] == 200
    finally:
        rd.stop()


def test_untrusted_header_ignored():
    rd = start()
    try:
        adm = rd.admin_port
        path = "/metrics"
        assert get(adm, "127.0.0.3", path, "bad", xff="10.0.0.1")[0] == 401
        # another "client" named by an untrusted peer: the same address, throttled
        assert get(adm, "127.0.0.3", path, TOKEN, xff="10.0.0.2")[0] == 429
        assert get(adm, "127.0.0.3", path, TOKEN)[0] == 429
        assert get(adm, "127.0.0.4", path, TOKEN)[0] == 200  # another address: its own
    finally:
        rd.stop()


def test_connection_cap_exempts_proxy():
    rd = start()
    conns = []
    try:
        for i in range(8):  # twice http.max_connections_per_ip, all held open (keep-alive)
            st, c = get(rd.port, "127.0.0.2", "/healthz", xff=f"10.0.1.{i}",
                        conn=http.client.HTTPConnection("127.0.0.1", rd.port, timeout=10,
                                                        source_address=("127.0.0.2", 0)))
            assert st == 200, (i, st)
            conns.append(c)
        refused = 0
        for i in range(6):  # an untrusted address: 4 in, then refused
            c = http.client.HTTPConnection("127.0.0.1", rd.port, timeout=5,
                                           source_address=("127.0.0.3", 0))
            conns.append(c)
            try:
                get(rd.port, "127.0.0.3", "/healthz", conn=c)
            except (OSError, http.client.HTTPException):
                refused += 1
        assert refused == 2, refused
        for c in conns[:8]:  # the proxy's connections all still answer
            assert get(rd.port, "127.0.0.2", "/healthz", conn=c)[0] == 200
    finally:
        for c in conns:
            c.close()
        rd.stop()


def test_bad_entry_names_the_key():
    tmp = tempfile.mkdtemp(prefix="proxies-")
    for bad in ("10.0.0.0/33", "not-an-address", "10.0.0.1/", "::1/129"):
        path = os.path.join(tmp, "c.yaml")
        with open(path, "w") as f:
            json.dump(merge(base_config(tmp, free_port()),
                            {"http": {"trusted_proxies": ["127.0.0.2", bad]}}), f)
        p = subprocess.run([ROOMD, "--check-config", path], capture_output=True, text=True,
                           timeout=20)
        assert p.returncode != 0, (bad, p.stdout, p.stderr)
        assert "http.trusted_proxies" in p.stdout + p.stderr and bad in p.stdout + p.stderr, \
            (bad, p.stdout + p.stderr)


if __name__ == "__main__":
    run([test_per_client_behind_trusted_proxy, test_untrusted_header_ignored,
         test_connection_cap_exempts_proxy, test_bad_entry_names_the_key])
