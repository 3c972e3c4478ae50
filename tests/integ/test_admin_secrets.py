# SPDX-License-Identifier: Apache-2.0
"""test_admin_secrets: secrets that cannot be guessed (issue 25, docs/auth.md "Secrets"):

- an admin token or HS256 secret shorter than 32 bytes: `--check-config` fails naming the key
  (and the length, never the value), and roomd refuses to start the same way;
- failed admin authentications are slowed per address: after each failure in a row the
  address waits admin.auth_backoff x 2^(n-1) (here 200 ms, up to 10 s) and its requests in that
  wait answer 429 rate_limited with Retry-After, unchecked (the right token too); a success
  forgets it; counted in roomd_admin_auth_failures_total / roomd_admin_auth_throttled_total;
  gRPC's RoomInternalService the same (RESOURCE_EXHAUSTED);
- loopback is decided on the parsed address: auth.mode none on "127.example.com:8080" is
  refused, on "127.0.0.2" and "[::1]" accepted.

Run: python3 tests/integ/test_admin_secrets.py (ROOMD_BUILD_DIR=build-asan)"""
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from roomd_test import ROOMD, Roomd, base_config, free_port, merge, run  # noqa: E402

TOKEN = "admin-secret-" + os.urandom(16).hex()
JWT = "jwt-secret-" + os.urandom(16).hex()


def check(cfg, env, start=False):
    tmp = tempfile.mkdtemp(prefix="secrets-")
    path = os.path.join(tmp, "c.yaml")
    full = merge(base_config(tmp, free_port()), cfg)
    if full.get("auth", {}).get("mode") == "jwt":
        full["room"]["gift_catalog"] = "required"  # off is refused under jwt
    with open(path, "w") as f:
        json.dump(full, f)
    p = subprocess.run([ROOMD, "--check-config", path], capture_output=True, text=True,
                       timeout=20, env=dict(os.environ, **env))
    if not start:
        return p.returncode, p.stdout + p.stderr, None, None
    s = subprocess.run([ROOMD, "-c", path], capture_output=True, text=True, timeout=20,
                       env=dict(os.environ, **env))  # refused at start: exits at once
    return p.returncode, p.stdout + p.stderr, s.returncode, s.stderr


def test_short_secrets_refused():
    adm = {"admin": {"token_env": "T_ADMIN"}}
    rc, out, src, serr = check(adm, {"T_ADMIN": "short-token"}, start=True)
    assert rc == 1 and "admin.token_env" in out and "11 bytes" in out, out
    assert "short-token" not in out
    assert src != 0 and "admin.token_env" in serr and "32 bytes" in serr, serr
    jwt = {"auth": {"mode": "jwt", "jwt": {"hs256_secret_env": "T_JWT"}}}
    rc, out, src, serr = check(jwt, {"T_JWT": "abc"}, start=True)
    assert rc == 1 and "auth.jwt.hs256_secret_env" in out and "3 bytes" in out, out
    assert src != 0 and "auth.jwt.hs256_secret_env" in serr, serr
    rc, out, _, _ = check(merge(adm, jwt), {"T_ADMIN": TOKEN, "T_JWT": JWT})
    assert rc == 0, out


def test_loopback_parsed():
    for listen, ok in (("127.example.com:18080", False), ("127.0.0.2:18080", True),
                       ("[::1]:18080", True), ("10.0.0.1:18080", False)):
        rc, out, _, _ = check({"http": {"listen": listen}}, {})
        assert (rc == 0) == ok, (listen, rc, out)
        if not ok:
            assert "auth.mode" in out, out


def admin_get(rd, token):
    st, hd, js = rd.http("GET", "/metrics", port=rd.admin_port,
                         headers={"Authorization": f"Bearer {token}"} if token else {})
    return st, hd


def test_failed_admin_auth_slowed():
    rd = Roomd({"admin": {"token_env": "T_ADMIN", "auth_backoff": "200ms"}})
    rd.start(env={"T_ADMIN": TOKEN})
    try:
        codes = []
        t0 = time.time()
        while time.time() - t0 < 2.0:  # a guesser without pause: a few checks, the rest 429
            codes.append(admin_get(rd, "guess-" + os.urandom(8).hex())[0])
        checked, throttled = codes.count(401), codes.count(429)
        assert set(codes) <= {401, 429}, set(codes)
        # waits 200, 400, 800 ms ... after each failure: at most 4 checks in 2 s (1.4 s of waits)
        assert 2 <= checked <= 4, codes
        assert throttled > 10, codes
        st, hd = admin_get(rd, TOKEN)  # the right token is not even checked while waiting
        assert st == 429 and int(hd["Retry-After"]) >= 1, (st, hd)
        time.sleep(int(hd["Retry-After"]) + 0.1)
        st, _ = admin_get(rd, TOKEN)
        assert st == 200, st
        st, _ = admin_get(rd, TOKEN)  # a success forgot the address
        assert st == 200, st
        st, _, m = rd.http("GET", "/metrics", port=rd.admin_port,
                           headers={"Authorization": f"Bearer {TOKEN}"})
        assert f"roomd_admin_auth_failures_total {checked}\n" in m, m
        assert f"roomd_admin_auth_throttled_total {throttled + 1}\n" in m, m
        assert TOKEN not in open(rd.log_path).read()
    finally:
        rd.stop()


if __name__ == "__main__":
    run([test_short_secrets_refused, test_loopback_parsed, test_failed_admin_auth_slowed])
