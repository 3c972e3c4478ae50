# SPDX-License-Identifier: Apache-2.0
"""test_http_tls: http.tls.* and admin.tls.* through libmicrohttpd's GnuTLS: a self-signed
certificate (openssl CLI) on both listeners; HTTPS answers, plain HTTP to the TLS port does
not, and a certificate without its key is refused at start naming the key."""
import json
import os
import ssl
import subprocess
import tempfile
import http.client

import http_util as hu
from roomd_test import ROOMD, Roomd, run, wait_until


def self_signed(d, subj="/CN=127.0.0.1"):
    """A self-signed P-256 certificate (also usable as a CA: it signs, test_cluster_tls.py)
    in d; returns (cert, key)."""
    cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "1", "-subj", subj], check=True, capture_output=True)
    return cert, key


def https(port, method, path, cert, body=None, headers=None):
    ctx = ssl.create_default_context(cafile=cert)
    ctx.check_hostname = False
    c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
    r = c.getresponse()
    text = r.read().decode()
    c.close()
    return r.status, json.loads(text) if text.startswith("{") else text


def healthz(rd, cert):
    """(status, json) of GET /healthz over HTTPS, or None while roomd is not up yet."""
    assert rd.proc.poll() is None, rd.stderr_text()
    try:
        return https(rd.port, "GET", "/healthz", cert)
    except OSError:
        return None


def test_tls_both_listeners():
    d = tempfile.mkdtemp(prefix="roomd-tls-")
    cert, key = self_signed(d)
    tls = {"tls": {"cert_file": cert, "key_file": key}}
    rd = Roomd({"http": dict(tls), "admin": dict(tls)}, tmp=d)
    rd.start(wait=False)
    try:
        st, js = wait_until(lambda: healthz(rd, cert), timeout=20, what="HTTPS /healthz")
        assert st == 200 and js["status"] == "ok", js
        rid = hu.room_name("tls")
        st, js = https(rd.port, "POST", "/v1/rooms", cert,
                       {"command_id": hu.cid(), "room_id": rid, "owner_uid": 1, "title": "t"})
        assert st == 201 and js["room_id"] == rid, (st, js)
        st, text = https(rd.admin_port, "GET", "/metrics", cert)
        assert st == 200 and "roomd_commands_total" in text
        try:  # plain HTTP on the TLS port gets no HTTP answer
            st, _, _ = rd.http("GET", "/healthz", timeout=2)
            assert st != 200, "plain HTTP answered on a TLS listener"
        except (OSError, http.client.HTTPException):
            pass
    finally:
        rd.stop()


def test_cert_without_key_refused():
    d = tempfile.mkdtemp(prefix="roomd-tls-")
    cert, _ = self_signed(d)
    rd = Roomd({"http": {"tls": {"cert_file": cert}}}, tmp=d)
    p = subprocess.run([ROOMD, "--check-config", rd.cfg_path], capture_output=True, text=True,
                       timeout=20)
    assert p.returncode == 1 and "http.tls.key_file" in p.stdout + p.stderr, p.stderr


if __name__ == "__main__":
    run([test_tls_both_listeners, test_cert_without_key_refused])
