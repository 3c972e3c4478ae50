# SPDX-License-Identifier: Apache-2.0
"""test_http_auth: auth.mode jwt and the admin listener against a real roomd.

The endpoint x caller matrix: every route of the public and the admin listener called with
no token, a malformed one, an expired one, a bad signature, another app's, a user acting as
another uid, a user as itself, a service token (scope room:service), the admin token on the
public listener and a user token on the admin listener. Each refusal asserts its status
(401 + WWW-Authenticate, or 403) and that the room, its outbox events and the wallet did not
change; the refusals are counted by reason in /metrics; the log never holds a token or a
secret. Then ES256 and RS256 keys (and the HS256-with-the-public-key confusion), and
auth.mode none refused off loopback. Last, a key rotation on SIGHUP: a token of the
rotated-out key (cached before) is refused from then on, and a key file that no longer loads
keeps the key in use."""
import atexit
import os
import signal
import subprocess
import time

import http_util as hu
import jwt_util as jw
from roomd_test import ROOMD, Roomd, run, wait_until

SECRET = "test-secret-" + os.urandom(16).hex()
ADMIN = "admin-token-" + os.urandom(12).hex()
READER = "reader-token-" + os.urandom(12).hex()  # admin.tokens: role read
ONCALL = "oncall-token-" + os.urandom(12).hex()  # admin.tokens: role operate, from a file
TIM_CB = "tim-callback-token-" + os.urandom(8).hex()  # POST /callbacks/tim: Tencent's Sign
ENV = {"ROOMD_TEST_JWT": SECRET, "ROOMD_TEST_ADMIN": ADMIN, "ROOMD_TEST_READER": READER,
       "ROOMD_TEST_TIM_CB": TIM_CB}

_rd = None


def shared():
    global _rd
    if _rd is None:
        _rd = Roomd({"auth": {"mode": "jwt", "jwt": {"hs256_secret_env": "ROOMD_TEST_JWT"}},
                     "tencent_im": {"callback": {"enabled": True,
                                                 "token_env": "ROOMD_TEST_TIM_CB"}},
                     "admin": {"token_env": "ROOMD_TEST_ADMIN"}})
        oncall_file = os.path.join(_rd.tmp, "oncall.token")
        with open(oncall_file, "w") as f:
            f.write(ONCALL + "\n")
        os.chmod(oncall_file, 0o600)
        _rd.cfg["admin"]["tokens"] = [
            {"name": "reader", "role": "read", "token_env": "ROOMD_TEST_READER"},
            {"name": "oncall", "role": "operate", "token_file": oncall_file}]
        import json
        with open(_rd.cfg_path, "w") as f:
            json.dump(_rd.cfg, f)
        _rd.admin_token = ADMIN
        _rd.start(env=ENV)
        atexit.register(_rd.stop)
        # room.gift_catalog is required under jwt: the matrix's gift at its catalog price
        hu.expect_ok(hu.put_gift(_rd, "rose", 10), "the catalog's rose")
    return _rd


def tok(uid, app="hyapp", **kw):
    return jw.bearer(jw.hs256(SECRET, jw.claims(uid, app, **kw)))


def service():
    return tok(1, scope="profile room:service")


def callers(uid):
    """(name, headers, want status) of every refused caller acting as uid."""
    return [
        ("no token", {}, 401),
        ("malformed", {"Authorization": "Bearer not-a-jwt"}, 401),
        ("basic scheme", {"Authorization": "Basic dXNlcjpwYXNz"}, 401),
        ("expired", tok(uid, ttl=-3600), 401),
        ("bad signature", jw.bearer(jw.hs256("another-secret-" + "x" * 32, jw.claims(uid))), 401),
        ("alg none", jw.bearer(jw.hs256(SECRET, jw.claims(uid)).rsplit(".", 1)[0]
                                .replace(jw.b64(b'{"alg": "HS256", "typ": "JWT"}'),
                                         jw.b64(b'{"alg": "none", "typ": "JWT"}')) + "."), 401),
        # the token's app acts in that app; naming another app in X-App-Code is refused
        ("other app", dict(tok(uid, app="otherapp"), **{"X-App-Code": "hyapp"}), 403),
        ("other uid", tok(uid + 1000), 403),
        ("admin token on public", jw.bearer(ADMIN), 401),
    ]


def state(rd, rid, uids):
    """What a refused request must not change: the room, its delivered events, wallets."""
    st, _, js = rd.http("GET", f"/v1/rooms/{rid}", headers=service())
    assert st == 200, (st, js)
    bal = [rd.http("GET", f"/v1/wallet/{u}", headers=service())[2]["balance"] for u in uids]
    return hu.room_of(js)["version"], len(hu.room_events(rd, rid)), bal


def expect_refused(res, want, what):
    st, hd, js = res
    assert st == want, f"{what}: want {want}, got {st} {js}"
    assert js["error"]["code"] == ("unauthenticated" if want == 401 else "forbidden"), js
    if want == 401:
        assert hd.get("WWW-Authenticate", "").startswith("Bearer"), (what, hd)


def commands(rid, owner, uid):
    """(name, path, body, acting uid) of every public write command of room rid."""
    return [
        ("join", f"/v1/rooms/{rid}/join", {"uid": uid}, uid),
        ("mic up", f"/v1/rooms/{rid}/mic/up", {"uid": uid}, uid),
        ("mic down", f"/v1/rooms/{rid}/mic/down", {"uid": uid}, uid),
        # no command: no command_id (with_cid); it writes nothing (the state check below)
        ("heartbeat", f"/v1/rooms/{rid}/heartbeat", {"uid": uid}, uid),
        ("gift", f"/v1/rooms/{rid}/gifts", {"uid": uid, "to_uid": owner, "gift_id": "rose",
                                            "count": 1, "unit_price": 10}, uid),
        ("leave", f"/v1/rooms/{rid}/leave", {"uid": uid}, uid),
        ("kick", f"/v1/rooms/{rid}/kick", {"operator_uid": owner, "uid": uid}, owner),
        ("close", f"/v1/rooms/{rid}/close", {"operator_uid": owner}, owner),
    ]


def with_cid(path, body):
    """body with a fresh command_id, except for a heartbeat (no command: none)."""
    return body if path.endswith("/heartbeat") else dict(body, command_id=hu.cid())


def run_matrix(rd, as_service):
    owner, uid = (501, 502) if not as_service else (601, 602)
    rid = hu.room_name("auth")
    create = ("create", "/v1/rooms", {"room_id": rid, "owner_uid": owner, "title": "t"}, owner)
    # create refused by every caller: no room appears
    for name, h, want in callers(owner):
        expect_refused(rd.post(create[1], dict(create[2], command_id=hu.cid()), headers=h), want,
                       f"create / {name}")
    st, _, _ = rd.http("GET", f"/v1/rooms/{rid}", headers=service())
    assert st == 404, "a refused create made the room"
    made = 0  # events the accepted commands committed: delivered before each "before"
    for path, body, h in ((create[1], create[2], service() if as_service else tok(owner)),
                          (f"/v1/rooms/{rid}/join", {"uid": owner}, tok(owner))):
        made += len(hu.expect_ok(rd.post(path, dict(body, command_id=hu.cid()), headers=h),
                                 f"{path} (create, then the gift's receiver joins)")["events"])
    for name, path, body, acting in commands(rid, owner, uid):
        hu.wait_events(rd, rid, made)  # else a late delivery passes for a refusal's
        before = state(rd, rid, (owner, uid))
        for cname, h, want in callers(acting):
            expect_refused(rd.post(path, with_cid(path, body), headers=h), want,
                           f"{name} / {cname}")
        time.sleep(0.3)  # > poll_interval: a row, had one been written, is delivered
        assert state(rd, rid, (owner, uid)) == before, f"{name}: a refusal changed something"
        if name == "kick":  # the target must be in the room to be kicked
            made += len(hu.expect_ok(rd.post(f"/v1/rooms/{rid}/join",
                                             {"command_id": hu.cid(), "uid": uid},
                                             headers=tok(uid)), "rejoin before kick")["events"])
        h = service() if as_service else tok(acting)
        made += len(hu.expect_ok(rd.post(path, with_cid(path, body), headers=h),
                                 f"{name} as {'service' if as_service else 'itself'}")
                    .get("events", []))


def test_commands_matrix_user_itself():
    run_matrix(shared(), as_service=False)


def test_commands_matrix_service():
    run_matrix(shared(), as_service=True)


def test_reads_matrix():
    rd = shared()
    rid = hu.room_name("read")
    hu.expect_ok(rd.post("/v1/rooms", {"command_id": hu.cid(), "room_id": rid, "owner_uid": 7,
                                       "title": "t"}, headers=tok(7)))
    hu.expect_ok(rd.post(f"/v1/rooms/{rid}/join", {"command_id": hu.cid(), "uid": 8},
                         headers=tok(8)))
    # any valid token of the app reads rooms; presence and balance: the user or a service
    for path, per_user in ((f"/v1/rooms/{rid}", False), ("/v1/rooms?limit=5", False),
                           ("/v1/users/8/presence", True), ("/v1/wallet/8", True),
                           ("/v1/gifts", False), (f"/v1/rooms/{rid}/events?after_seq=0", False)):
        for cname, h, want in callers(8):
            if cname == "other uid" and not per_user:
                hu.expect_ok(rd.http("GET", path, headers=h), f"{path} / any user of the app")
                continue
            expect_refused(rd.http("GET", path, headers=h), want, f"{path} / {cname}")
        hu.expect_ok(rd.http("GET", path, headers=tok(8)), f"{path} / itself")
        hu.expect_ok(rd.http("GET", path, headers=service()), f"{path} / service")
    # X-App-Code must equal the token's app; absent, the token's app wins
    expect_refused(rd.http("GET", f"/v1/rooms/{rid}", headers=dict(tok(8), **{
        "X-App-Code": "otherapp"})), 403, "X-App-Code of another app")
    st, _, js = rd.http("GET", f"/v1/rooms/{rid}", headers=tok(8, app="otherapp"))
    assert st == 404, (st, js)  # otherapp has no such room
    st, _, js = rd.http("GET", "/v1/wallet/8", headers=tok(8, app="app2"))
    assert st == 200 and js["app_code"] == "app2", (st, js)


def test_service_name_sub():
    """A service token may carry its service's name as sub (sub "gateway"): it acts for any
    uid of its app and the log names it; a user token's sub must be its uid."""
    rd = shared()
    gw = jw.bearer(jw.hs256(SECRET, jw.claims("gateway", "hyapp", scope="room:service")))
    rid = hu.room_name("svc")
    hu.expect_ok(rd.post("/v1/rooms", {"command_id": hu.cid(), "room_id": rid, "owner_uid": 41,
                                       "title": "t"}, headers=gw), "create by the gateway")
    hu.expect_ok(rd.post(f"/v1/rooms/{rid}/join", {"command_id": hu.cid(), "uid": 42},
                         headers=gw), "join for 42")
    hu.expect_ok(rd.http("GET", "/v1/wallet/42", headers=gw), "a per-user read")
    lines = [x for x in rd.log_lines() if "service command" in x and "gateway" in x]
    assert any(rid in x for x in lines), lines[-3:]
    for name, sub, scope in (("user token, named sub", "gateway", None),
                             ("service, bad name", "gate way", "room:service"),
                             ("service, empty sub", "", "room:service")):
        h = jw.bearer(jw.hs256(SECRET, jw.claims(sub, "hyapp", scope=scope)))
        st, _, js = rd.post(f"/v1/rooms/{rid}/join", {"command_id": hu.cid(), "uid": 43},
                            headers=h)
        assert st == 401, (name, st, js)


def test_admin_listener():
    rd = shared()
    user = tok(5)
    admin_paths = [("GET", "/metrics", None), ("GET", "/readyz", None),
                   ("POST", "/v1/wallet/topup", {"command_id": hu.cid(), "uid": 5, "amount": 3}),
                   ("POST", "/internal/v1/rooms/nosuch/rocket/launch",
                    {"command_id": "~rl-nosuch-1-1", "rocket_id": "nosuch-1-1", "level": 1,
                     "launch_at_ms": 5}),
                   # the admin API (docs/admin.md): every route, the replay as a real one
                   ("GET", "/admin/v1/outbox/summary", None),
                   ("GET", "/admin/v1/outbox?status=failed", None),
                   ("GET", "/admin/v1/outbox/01a22a3a-4b8f-7424-b66d-e3f93b482f0d", None),
                   ("POST", "/admin/v1/outbox/replay", {"filter": {"status": "failed"}}),
                   ("GET", "/admin/v1/audit", None), ("GET", "/admin/v1/audit/1", None),
                   ("GET", "/admin/v1/dlq", None), ("GET", "/admin/v1/dlq/1", None),
                   ("POST", "/admin/v1/dlq/1/replay", {}),
                   ("POST", "/admin/v1/dlq/1/discard", {}),
                   ("POST", "/admin/v1/dlq/purge", {"group": "hyapp-room-im-bridge"}),
                   ("POST", "/admin/v1/dlq/replay", {"filter": {"group": "g"}}),
                   ("POST", "/admin/v1/dlq/discard", {"filter": {"group": "g"}}),
                   # the cluster's nodes view (admin/nodes.h)
                   ("GET", "/admin/v1/nodes", None), ("GET", "/admin/v1/node", None),
                   # the gift catalog's writes (reads: test_reads_matrix)
                   ("POST", "/v1/gifts", {"gift_id": "rose", "unit_price": 1})]
    bal = rd.http("GET", "/v1/wallet/5", headers=user)[2]["balance"]
    catalog = rd.http("GET", "/v1/gifts", headers=user)[2]
    for method, path, body in admin_paths:
        for name, h in (("no token", {"Authorization": ""}), ("user token", user),
                        ("wrong token", jw.bearer(ADMIN + "x"))):
            st, hd, js = rd.admin(method, path, body, headers=h)
            assert st == 401 and hd.get("WWW-Authenticate", "").startswith("Bearer"), \
                (path, name, st, js)
        # the public listener does not serve them, whoever asks
        if path != "/readyz":
            for h in (service(), jw.bearer(ADMIN), {}):
                st, _, js = rd.http(method, path, body, headers=h)
                assert st == 404, (path, st, js)
    assert rd.http("GET", "/v1/wallet/5", headers=user)[2]["balance"] == bal, "refused top-up"
    assert rd.http("GET", "/v1/gifts", headers=user)[2] == catalog, "a refused gift change"
    # no refused admin call left an audit entry; the admin token reaches each admin route
    js = hu.expect_ok(rd.admin("GET", "/admin/v1/audit"))
    assert js["audits"] == [], js
    for method, path, body in admin_paths[4:-1]:
        st, _, js = rd.admin(method, path, body)
        assert st in (200, 404), (path, st, js)  # 404: no such row / audit / dead letter
    # the console's files need no token (they hold no data); the public listener has none
    st, hd, page = rd.admin("GET", "/console/", headers={"Authorization": ""})
    assert st == 200 and hd["Content-Type"].startswith("text/html"), (st, hd)
    assert rd.http("GET", "/console/")[0] == 404
    js = hu.expect_ok(hu.put_gift(rd, "tulip", 7), "the admin token changes the catalog")
    assert js["unit_price"] == 7 and js["version"] == 1, js
    js = hu.expect_ok(rd.admin_post("/v1/wallet/topup", {"command_id": hu.cid(), "uid": 5,
                                                         "amount": 3}))
    assert js["balance"] == bal + 3, js
    st, _, js = rd.admin_post("/internal/v1/rooms/nosuch/rocket/launch",
                              {"command_id": "~rl-nosuch-1-1", "rocket_id": "nosuch-1-1",
                               "level": 1, "launch_at_ms": 5})
    assert st == 404, (st, js)  # authorized: the room is what is missing
    # readiness: public one word (no token), admin the details
    st, _, js = rd.http("GET", "/readyz")
    assert st == 200 and js == {"status": "ready"}, js
    js = hu.expect_ok(rd.admin("GET", "/readyz"))
    assert js["status"] == "ready" and "outbox" in js, js
    st, _, js = rd.http("GET", "/healthz")
    assert st == 200, js


ADMIN_WRITES = [("POST", "/v1/wallet/topup", {"command_id": "named-topup-1", "uid": 5, "amount": 3}),
                ("POST", "/admin/v1/outbox/replay", {"filter": {"status": "failed"}}),
                ("POST", "/admin/v1/dlq/1/replay", {}),
                ("POST", "/admin/v1/dlq/1/discard", {}),
                ("POST", "/admin/v1/dlq/purge", {"group": "g"}),
                ("POST", "/admin/v1/dlq/replay", {"filter": {"group": "g"}}),
                ("POST", "/admin/v1/dlq/discard", {"filter": {"group": "g"}}),
                ("POST", "/v1/gifts", {"gift_id": "rose", "unit_price": 1}),
                ("POST", "/internal/v1/rooms/nosuch/rocket/launch",
                 {"command_id": "~rl-nosuch-1-2", "rocket_id": "nosuch-1-2", "level": 1,
                  "launch_at_ms": 5})]


def test_named_admin_tokens():
    """admin.tokens: a read-only token reads every admin route and gets 403 (read_only) on
    every write (replay, DLQ replay, top-up, internal launch), nothing changed; an operate
    token writes, and the audit and the admin log line name it; the single token still works."""
    rd = shared()
    reader, oncall = jw.bearer(READER), jw.bearer(ONCALL)
    user = tok(5)
    bal = rd.http("GET", "/v1/wallet/5", headers=user)[2]["balance"]
    audits = len(hu.expect_ok(rd.admin("GET", "/admin/v1/audit"))["audits"])
    for path in ("/metrics", "/readyz", "/admin/v1/outbox/summary", "/admin/v1/audit",
                 "/admin/v1/outbox?status=failed", "/admin/v1/nodes", "/admin/v1/node"):
        st, _, js = rd.admin("GET", path, headers=reader)
        assert st == 200, (path, st, js)
    for method, path, body in ADMIN_WRITES:
        st, _, js = rd.admin(method, path, body, headers=reader)
        assert st == 403 and js["error"]["code"] == "forbidden", (path, st, js)
        assert "read_only" in js["error"]["message"], js
    assert rd.http("GET", "/v1/wallet/5", headers=user)[2]["balance"] == bal, "read-only top-up"
    assert len(hu.expect_ok(rd.admin("GET", "/admin/v1/audit"))["audits"]) == audits
    m = hu.metrics(rd)
    k = 'roomd_auth_refused_total{listener="admin",status="403",reason="read_only"}'
    assert m.get(k, 0) == len(ADMIN_WRITES), (k, m.get(k))
    # the operate token writes; the audit and the log line name it
    js = hu.expect_ok(rd.admin_post("/admin/v1/outbox/replay", {"filter": {"status": "failed"}},
                                    headers=oncall))
    got = hu.expect_ok(rd.admin("GET", f"/admin/v1/audit/{js['audit_id']}", headers=reader))
    assert got["actor"] == "oncall", got
    js = hu.expect_ok(rd.admin_post("/v1/wallet/topup", {"command_id": hu.cid(), "uid": 5,
                                                         "amount": 2}, headers=oncall))
    assert js["balance"] == bal + 2, js
    calls = [j for j in rd.json_log("admin call") if j.get("caller") == "oncall"]
    assert {c["path"] for c in calls} >= {"/admin/v1/outbox/replay", "/v1/wallet/topup"}, calls
    # the single admin token keeps working and is named "admin"
    js = hu.expect_ok(rd.admin_post("/admin/v1/outbox/replay", {"filter": {"status": "failed"}}))
    got = hu.expect_ok(rd.admin("GET", f"/admin/v1/audit/{js['audit_id']}"))
    assert got["actor"] == "admin", got
    text = "\n".join(rd.log_lines()) + rd.stderr_text()
    assert READER not in text and ONCALL not in text, "a named admin token is in the log"


def test_refusals_counted_and_never_logged():
    rd = shared()
    m = hu.metrics(rd)
    for reason in ("missing", "malformed", "expired", "bad_signature"):
        k = f'roomd_auth_refused_total{{listener="public",status="401",reason="{reason}"}}'
        assert m.get(k, 0) > 0, (k, {x: v for x, v in m.items() if "auth" in x})
    for reason in ("other_app", "other_uid"):
        k = f'roomd_auth_refused_total{{listener="public",status="403",reason="{reason}"}}'
        assert m.get(k, 0) > 0, k
    k = 'roomd_auth_refused_total{listener="admin",status="401",reason="bad_admin_token"}'
    assert m.get(k, 0) > 0, k
    text = "\n".join(rd.log_lines()) + rd.stderr_text()
    sample = tok(5)["Authorization"].split()[1]
    for secret in (SECRET, ADMIN, sample.split(".")[2]):
        assert secret not in text, "a secret or a token signature is in the log"


def test_public_key_algs():
    import tempfile
    for alg, key, sign in (("ES256", jw.es256_key(), jw.es256), ("RS256", jw.rs256_key(),
                                                                  jw.rs256)):
        d = tempfile.mkdtemp(prefix="roomd-auth-")
        pem = os.path.join(d, "pub.pem")
        with open(pem, "wb") as f:
            f.write(jw.public_pem(key))
        rd = Roomd({"auth": {"mode": "jwt", "jwt": {"public_key_file": pem, "issuer": "gw",
                                                    "audience": "roomd"}}}, tmp=d).start()
        try:
            good = jw.bearer(sign(key, jw.claims(9, iss="gw", aud=["x", "roomd"])))
            hu.expect_ok(rd.http("GET", "/v1/wallet/9", headers=good), alg)
            for name, h in (
                    ("other issuer", jw.bearer(sign(key, jw.claims(9, iss="evil", aud="roomd")))),
                    ("other audience", jw.bearer(sign(key, jw.claims(9, iss="gw", aud="x")))),
                    ("not yet valid", jw.bearer(sign(key, jw.claims(9, iss="gw", aud="roomd",
                                                                    nbf=int(time.time()) + 600)))),
                    ("HS256 keyed with the public key",
                     jw.bearer(jw.hs256(jw.public_pem(key), jw.claims(9, iss="gw", aud="roomd"))))):
                st, hd, js = rd.http("GET", "/v1/wallet/9", headers=h)
                assert st == 401, (alg, name, st, js)
        finally:
            rd.stop()


def test_key_rotation_on_sighup():
    import tempfile
    d = tempfile.mkdtemp(prefix="roomd-auth-")
    pem = os.path.join(d, "pub.pem")
    old, new = jw.es256_key(), jw.es256_key()
    with open(pem, "wb") as f:
        f.write(jw.public_pem(old))
    rd = Roomd({"auth": {"mode": "jwt", "jwt": {"public_key_file": pem}}}, tmp=d).start()
    try:
        old_tok = jw.bearer(jw.es256(old, jw.claims(9)))
        new_tok = jw.bearer(jw.es256(new, jw.claims(9)))
        for _ in range(3):  # verified once, then the cache's
            hu.expect_ok(rd.http("GET", "/v1/wallet/9", headers=old_tok), "old key")
        _, _, metrics = rd.http("GET", "/metrics", port=rd.admin_port)
        assert 'roomd_auth_token_cache_total{result="hit"} 2' in str(metrics), metrics
        with open(pem + ".new", "wb") as f:
            f.write(jw.public_pem(new))
        os.replace(pem + ".new", pem)
        rd.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: rd.http("GET", "/v1/wallet/9", headers=new_tok)[0] == 200,
                   timeout=10, what="the new key in use after SIGHUP")
        st, _, js = rd.http("GET", "/v1/wallet/9", headers=old_tok)
        assert st == 401, ("a token of the rotated-out key", st, js)
        # a key file that no longer loads: the key in use stays
        with open(pem, "w") as f:
            f.write("not a key")
        rd.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "auth key not reloaded" in open(rd.log_path).read(), timeout=10,
                   what="the refused reload logged")
        hu.expect_ok(rd.http("GET", "/v1/wallet/9", headers=new_tok), "new key kept")
        assert rd.stop() == 0
    finally:
        rd.stop()


def test_none_refused_off_loopback():
    import json as _json
    import tempfile
    d = tempfile.mkdtemp(prefix="roomd-auth-")
    for over, key in (({"http": {"listen": "0.0.0.0:18080"}}, "auth.mode"),
                      ({"admin": {"listen": "0.0.0.0:18081"}}, "auth.mode"),
                      ({"auth": {"mode": "jwt"}, "admin": {"listen": "0.0.0.0:18081"},
                        "http": {"listen": "0.0.0.0:18080"}}, "auth.jwt.hs256_secret_env")):
        rd = Roomd(over, tmp=d)
        p = subprocess.run([ROOMD, "--check-config", rd.cfg_path], capture_output=True,
                           text=True, timeout=20)
        assert p.returncode == 1 and key in p.stderr + p.stdout, (over, p.stdout, p.stderr)
    # jwt without its secret variable: start-up refused naming the key, no secret text
    rd = Roomd({"auth": {"mode": "jwt", "jwt": {"hs256_secret_env": "ROOMD_TEST_UNSET"}}}, tmp=d)
    p = subprocess.run([ROOMD, "-c", rd.cfg_path], capture_output=True, text=True, timeout=20)
    assert p.returncode != 0 and "auth.jwt.hs256_secret_env" in p.stderr, p.stderr
    _json.dumps(over)


def test_tim_callback_callers():
    """POST /callbacks/tim takes Tencent's signature, never a JWT: every caller of the matrix
    (and a valid user or service token) is refused 401 without it, and changes nothing; with
    it, the callback is answered whoever else the headers name."""
    import hashlib
    rd = shared()
    rid = hu.room_name("tim")
    hu.expect_ok(rd.post("/v1/rooms", {"command_id": hu.cid(), "room_id": rid, "owner_uid": 61,
                                       "title": "t"}, headers=service()))
    hu.expect_ok(rd.post(f"/v1/rooms/{rid}/join", {"command_id": hu.cid(), "uid": 62},
                         headers=service()))
    before = state(rd, rid, (62,))
    body = {"CallbackCommand": "State.StateChange",
            "Info": {"Action": "Logout", "To_Account": "62"}}
    t = str(int(time.time()))
    good = "?RequestTime=" + t + "&Sign=" + hashlib.sha256((TIM_CB + t).encode()).hexdigest()
    for cname, h, _ in callers(62) + [("itself", tok(62), 0), ("service", service(), 0)]:
        for q in ("", "?RequestTime=" + t + "&Sign=" + "0" * 64):
            st, _, js = rd.post("/callbacks/tim" + q, body, headers=h)
            assert st == 401 and js["error"]["code"] == "unauthenticated", (cname, q, st, js)
    assert state(rd, rid, (62,)) == before, "a refused callback changed something"
    # the signed one, under any of those headers (room.member_idle_timeout is 0 here: the
    # Logout changes no clock that runs, the answer is IM's OK)
    for cname, h, _ in callers(62)[:3]:
        js = hu.expect_ok(rd.post("/callbacks/tim" + good, body, headers=h), cname)
        assert js == {"ActionStatus": "OK", "ErrorCode": 0, "ErrorInfo": ""}, js
    assert TIM_CB not in "\n".join(rd.log_lines())


def test_zz_stop():
    assert shared().stop() == 0


if __name__ == "__main__":
    run([test_commands_matrix_user_itself, test_commands_matrix_service, test_reads_matrix,
         test_service_name_sub,
         test_admin_listener, test_named_admin_tokens, test_refusals_counted_and_never_logged,
         test_public_key_algs,
         test_key_rotation_on_sighup, test_none_refused_off_loopback,
         test_tim_callback_callers, test_zz_stop],
        fixture="shared_roomd")
