# SPDX-License-Identifier: Apache-2.0
"""test_jwks: auth.jwt.jwks_file (issue 30, Keys) against a real roomd, over HTTP and gRPC.
- a set of two keys (EC P-256 and RSA): tokens signed by either are accepted, each naming
  its key by kid; a kid not in the set, no kid, and a token of a key whose kid names another
  key are 401 (unknown_key / bad_signature), counted by reason;
- a rotation by rewriting the file (add key 3, an oct/HS256 key; remove key 1) while
  requests signed by key 2 are made throughout, on HTTP and on gRPC: not one of them is
  refused; key-3 tokens are accepted once the watcher saw the file, key-1 tokens refused from
  then on;
- a bad file (a key too short) keeps the set in use and logs an error naming that key, on
  the file watcher and on SIGHUP; --check-config refuses such a file naming the key and
  passes a good one.
Run: python3 tests/integ/test_jwks.py (ROOMD_BUILD_DIR=build-asan)."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
import http_util as hu  # noqa: E402
import jwt_util as jw  # noqa: E402
import test_grpc as tg  # noqa: E402
from roomd_test import ROOMD, Roomd, run, wait_until  # noqa: E402

K1, K2 = jw.es256_key(), jw.rs256_key()
K3 = "hs256-key-three-" + os.urandom(16).hex()  # an oct key


def write_set(path, keys, atomic=True):
    """Writes the JWKS of keys [(key, kid)]: by rename (atomic) or in place."""
    text = json.dumps({"keys": [jw.jwk(k, kid) for k, kid in keys]}, indent=1)
    if atomic:
        with open(path + ".tmp", "w") as f:
            f.write(text)
        os.replace(path + ".tmp", path)
    else:
        with open(path, "w") as f:
            f.write(text)


def tok(key, kid, uid=9):
    """A fresh token (its own jti: verified in full, never a cache hit)."""
    return jw.sign_kid(key, jw.claims(uid, jti=os.urandom(6).hex()), kid)


def http_ok(rd, token):
    return rd.http("GET", "/v1/wallet/9", headers=jw.bearer(token))[0]


def grpc_batch(rd, tokens, pause_ms=0):
    return tg.calls(rd, [{"method": "GetPresence", "request": {"uid": 9}, "pause_ms": pause_ms,
                          "metadata": {"authorization": "Bearer " + t}} for t in tokens])


def jwks_roomd(path, extra=None):
    rd = tg.grpc_roomd(overrides=dict({"auth": {"mode": "jwt", "jwt": {
        "jwks_file": path, "jwks_poll_interval": "100ms"}}}, **(extra or {})),
        tmp=os.path.dirname(path))
    return rd


def test_two_keys_and_unknown_kid():
    d = tempfile.mkdtemp(prefix="roomd-jwks-")
    path = os.path.join(d, "jwks.json")
    write_set(path, [(K1, "k1"), (K2, "k2")])
    rd = jwks_roomd(path)
    try:
        before = hu.metrics(rd)
        for key, kid in ((K1, "k1"), (K2, "k2")):
            assert http_ok(rd, tok(key, kid)) == 200, kid
        refused = [("unknown kid", tok(K1, "k9")), ("no kid", tok(K1, None)),
                   ("k1's kid on a key-2 token", tok(K2, "k1")),
                   ("k2's kid, signed by key 1", tok(K1, "k2"))]
        for what, t in refused:
            st, hd, js = rd.http("GET", "/v1/wallet/9", headers=jw.bearer(t))
            assert st == 401 and js["error"]["code"] == "unauthenticated", (what, st, js)
        res = grpc_batch(rd, [tok(K1, "k1"), tok(K2, "k2")] + [t for _, t in refused])
        assert [r["code"] for r in res] == [0, 0] + [tg.UNAUTHENTICATED] * len(refused), \
            [(r["code"], r["details"]) for r in res]
        after = hu.metrics(rd)
        key = 'roomd_auth_refused_total{listener="public",status="401",reason="unknown_key"}'
        # HTTP and gRPC: the unknown kid and the missing kid, twice each
        assert after.get(key, 0) - before.get(key, 0) == 4, (before.get(key), after.get(key))
        log = open(rd.log_path).read()
        assert K3 not in log and "BEGIN PUBLIC KEY" not in log
        assert rd.stop() == 0
    finally:
        rd.stop()


def test_rotation_by_file_change():
    d = tempfile.mkdtemp(prefix="roomd-jwks-")
    path = os.path.join(d, "jwks.json")
    write_set(path, [(K1, "k1"), (K2, "k2")])
    rd = jwks_roomd(path)
    try:
        stop, answers, errors = threading.Event(), [], []

        def poll():  # key-2 tokens over HTTP, every few ms, all through the rotation
            try:
                while not stop.is_set():
                    answers.append(http_ok(rd, tok(K2, "k2")))
                    time.sleep(0.005)
            except Exception as e:  # noqa: BLE001 (reported below)
                errors.append(repr(e))
        t = threading.Thread(target=poll)
        t.start()
        # gRPC too: 60 key-2 calls 25 ms apart on one connection, in flight meanwhile
        grpc_res = []
        g = threading.Thread(target=lambda: grpc_res.extend(
            grpc_batch(rd, [tok(K2, "k2") for _ in range(60)], pause_ms=25)))
        g.start()
        time.sleep(0.4)
        k1_before = tok(K1, "k1")
        assert http_ok(rd, k1_before) == 200
        # the rotation: key 3 added and key 1 removed, the file rewritten in place (the
        # watcher may read it half written: that read fails and keeps the set in use)
        write_set(path, [(K2, "k2"), (K3, "k3")], atomic=False)
        wait_until(lambda: http_ok(rd, tok(K3, "k3")) == 200, timeout=10,
                   what="key 3 accepted after the file changed")
        time.sleep(0.3)
        # and back, by rename this time: key 1 again, key 3 gone
        write_set(path, [(K1, "k1"), (K2, "k2")])
        wait_until(lambda: http_ok(rd, tok(K1, "k1")) == 200, timeout=10, what="key 1 back")
        assert http_ok(rd, tok(K3, "k3")) == 401
        write_set(path, [(K2, "k2"), (K3, "k3")])
        wait_until(lambda: http_ok(rd, tok(K3, "k3")) == 200, timeout=10, what="key 3 again")
        g.join(timeout=120)
        stop.set()
        t.join()
        assert not errors, errors
        refused = [a for a in answers if a != 200]
        assert len(answers) > 50 and not refused, (len(answers), refused[:5])
        assert len(grpc_res) == 60 and all(r["code"] == 0 for r in grpc_res), \
            [(r["code"], r["details"]) for r in grpc_res if r["code"] != 0]
        # key 1 is out: a key-1 token (the very one accepted before, once cached) is refused
        assert http_ok(rd, k1_before) == 401
        assert http_ok(rd, tok(K1, "k1")) == 401
        assert [r["code"] for r in grpc_batch(rd, [tok(K1, "k1"), tok(K3, "k3")])] == \
            [tg.UNAUTHENTICATED, 0]
        assert "JWKS reloaded" in open(rd.log_path).read()
        print(f"  {len(answers)} key-2 requests over HTTP and 60 over gRPC during the "
              f"rotation, none refused")
        assert rd.stop() == 0
    finally:
        rd.stop()


def test_bad_file_keeps_the_set():
    d = tempfile.mkdtemp(prefix="roomd-jwks-")
    path = os.path.join(d, "jwks.json")
    write_set(path, [(K1, "k1"), (K2, "k2")])
    rd = jwks_roomd(path)
    try:
        bad = {"keys": [jw.jwk(K2, "k2"), {"kty": "oct", "kid": "short-one", "k": jw.b64(b"x" * 8)}]}
        with open(path + ".tmp", "w") as f:
            json.dump(bad, f)
        os.replace(path + ".tmp", path)
        wait_until(lambda: "JWKS not reloaded" in open(rd.log_path).read(), timeout=10,
                   what="the refused reload logged")
        line = [ln for ln in open(rd.log_path) if "JWKS not reloaded" in ln][-1]
        assert 'short-one' in line and "keys[1]" in line, line
        assert jw.b64(b"x" * 8) not in line, line
        for key, kid in ((K1, "k1"), (K2, "k2")):
            assert http_ok(rd, tok(key, kid)) == 200, kid
        # SIGHUP with the bad file: the same
        rd.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "auth key not reloaded" in open(rd.log_path).read(), timeout=10,
                   what="SIGHUP's refused reload")
        assert http_ok(rd, tok(K1, "k1")) == 200
        assert rd.stop() == 0
    finally:
        rd.stop()


def test_sighup_only():
    # jwks_poll_interval 0: a file change is applied on SIGHUP alone
    d = tempfile.mkdtemp(prefix="roomd-jwks-")
    path = os.path.join(d, "jwks.json")
    write_set(path, [(K1, "k1")])
    rd = tg.grpc_roomd(overrides={"auth": {"mode": "jwt", "jwt": {
        "jwks_file": path, "jwks_poll_interval": "0s"}}}, tmp=d)
    try:
        write_set(path, [(K3, "k3")])
        time.sleep(1.5)
        assert http_ok(rd, tok(K1, "k1")) == 200 and http_ok(rd, tok(K3, "k3")) == 401
        rd.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: http_ok(rd, tok(K3, "k3")) == 200, timeout=10, what="SIGHUP reload")
        assert http_ok(rd, tok(K1, "k1")) == 401
        assert rd.stop() == 0
    finally:
        rd.stop()


def test_check_config():
    d = tempfile.mkdtemp(prefix="roomd-jwks-")
    path = os.path.join(d, "jwks.json")
    write_set(path, [(K1, "k1"), (K2, "k2"), (K3, "k3")])
    rd = Roomd({"auth": {"mode": "jwt", "jwt": {"jwks_file": path}}}, tmp=d)

    def check():
        return subprocess.run([ROOMD, "--check-config", rd.cfg_path], capture_output=True,
                              text=True, timeout=20)
    p = check()
    assert p.returncode == 0, p.stderr
    cases = [
        ({"keys": [jw.jwk(K1, "k1"), jw.jwk(K1, "k1")]}, "kid used twice"),
        ({"keys": [dict(jw.jwk(K1, "k1"), alg="RS256")]}, "alg does not match"),
        ({"keys": [{"kty": "EC", "crv": "P-256", "kid": "bad-point", "x": jw.b64(b"\1" * 32),
                    "y": jw.b64(b"\2" * 32)}]}, "bad-point"),
        ({"keys": [{"kty": "oct", "kid": "tiny", "k": jw.b64(b"abc")}]}, "tiny"),
        ({"keys": [dict(jw.jwk(K1, "k1"), kid="")]}, "kid must be"),
        ({"keys": [{"kty": "OKP", "kid": "ed", "crv": "Ed25519", "x": "AA"}]}, "kty must be"),
        ({"keys": []}, "no signing key"),
        ({"nokeys": 1}, "no \"keys\" array"),
    ]
    for doc, want in cases:
        with open(path, "w") as f:
            json.dump(doc, f)
        p = check()
        assert p.returncode == 1 and "auth.jwt.jwks_file" in p.stderr and want in p.stderr, \
            (doc, p.stderr)
    with open(path, "w") as f:
        f.write("{not json")
    p = check()
    assert p.returncode == 1 and "not JSON" in p.stderr, p.stderr
    # an encryption key beside a signing key is skipped, not refused
    with open(path, "w") as f:
        json.dump({"keys": [dict(jw.jwk(K2, "enc-1", alg=False), use="enc"),
                            jw.jwk(K1, "k1")]}, f)
    assert check().returncode == 0
    # one of the three key sources only
    rd2 = Roomd({"auth": {"mode": "jwt", "jwt": {"jwks_file": path,
                                                 "hs256_secret_env": "X"}}}, tmp=d)
    p = subprocess.run([ROOMD, "--check-config", rd2.cfg_path], capture_output=True, text=True,
                       timeout=20)
    assert p.returncode == 1 and "auth.jwt.jwks_file" in p.stderr, p.stderr


if __name__ == "__main__":
    run([test_two_keys_and_unknown_kid, test_rotation_by_file_change, test_bad_file_keeps_the_set,
         test_sighup_only, test_check_config])
