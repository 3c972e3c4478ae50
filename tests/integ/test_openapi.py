# SPDX-License-Identifier: Apache-2.0
"""test_openapi: docs/openapi.yaml is a valid OpenAPI 3.1 document (@seriousme/openapi-schema-
validator from npm, pinned by tests/standins/package-lock.json, run by
tests/standins/openapi_check.js), describes exactly the router's routes (roomd --print-routes),
and real answers of a roomd process, one or more per route, match the schemas it documents for
their route and status.

Run: python3 tests/integ/test_openapi.py (PYTHONPATH=tests, ROOMD_BUILD_DIR=build)
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
import http_util as hu  # noqa: E402
from roomd_test import ROOMD, SOURCE, Roomd, listing, run  # noqa: E402

DOC = os.path.join(SOURCE, "docs", "openapi.yaml")
CHECK = os.path.join(SOURCE, "tests", "standins", "openapi_check.js")
VALIDATOR = os.path.join(SOURCE, "tests", "standins", "node_modules", "@seriousme",
                         "openapi-schema-validator")


def check(doc, answers=None):
    cmd = ["node", CHECK, doc]
    if answers is not None:
        f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
        json.dump(answers, f)
        f.close()
        cmd += ["--answers", f.name]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_document_is_valid():
    res = check(DOC)
    assert res["valid"], res["errors"]
    # the validator does refuse a broken document (a response without its description)
    with open(DOC) as f:
        text = f.read()
    broken = text.replace("          description: One page.\n", "", 1)
    assert broken != text
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(broken)
    assert not check(f.name)["valid"], "a response without a description passed"


def test_paths_are_the_routers():
    out = subprocess.run([ROOMD, "--print-routes"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    routes = set(out.stdout.split("\n")) - {""}
    documented = set(check(DOC)["operations"])
    assert routes, "roomd printed no routes"
    assert routes == documented, \
        f"in the router only: {sorted(routes - documented)}; " \
        f"in the document only: {sorted(documented - routes)}"


def answer(rd, method, path, body=None, headers=None, raw=None, admin=False):
    send = rd.admin if admin else rd.http
    st, hd, js = send(method, path, body, headers=headers, raw=raw)
    ct = hd.get("Content-Type", "")
    return {"method": method, "path": path, "status": st, "content_type": ct, "body": js}


def admin_answers(rd, rid):
    """The admin API and console on the admin listener (docs/admin.md): every route, with
    a 200 where this roomd can give one (no broker here: the dlq routes answer 404)."""
    def adm(method, path, body=None, headers=None):
        return answer(rd, method, path, body, headers=headers, admin=True)
    a = [adm("GET", "/admin/v1/outbox/summary"),
         adm("GET", f"/admin/v1/outbox?room_id={rid}&limit=2"),
         adm("GET", "/admin/v1/outbox?status=lost"),  # 400 naming status
         adm("GET", "/admin/v1/outbox/no-such-event")]  # 404
    assert a[1]["status"] == 200 and a[1]["body"]["rows"], a[1]
    a.append(adm("GET", "/admin/v1/outbox/" + a[1]["body"]["rows"][0]["event_id"]))
    a.append(adm("POST", "/admin/v1/outbox/replay",
                 {"filter": {"room_id": rid}, "dry_run": True, "sample": 2}))
    done = adm("POST", "/admin/v1/outbox/replay", {"filter": {"room_id": rid}})  # 0 failed rows
    assert done["status"] == 200 and done["body"]["replayed"] == 0, done
    a.append(done)
    a.append(adm("POST", "/admin/v1/outbox/replay", {"filter": {"status": "pending"}}))  # 400
    a.append(adm("POST", "/admin/v1/outbox/replay", {"dry_run": True},
                 headers={"Content-Type": "text/plain"}))  # 415
    a.append(adm("GET", "/admin/v1/audit?limit=5"))
    a.append(adm("GET", f"/admin/v1/audit/{done['body']['audit_id']}"))
    a.append(adm("GET", "/admin/v1/audit/x"))  # 400 naming id
    a.append(adm("GET", "/admin/v1/audit/999999"))  # 404
    for path in ("/admin/v1/dlq", "/admin/v1/dlq/1"):
        a.append(adm("GET", path))  # 404: rocketmq.enabled is false
    a.append(adm("POST", "/admin/v1/dlq/1/replay", {}))
    a.append(adm("POST", "/admin/v1/dlq/1/discard", {}))
    a.append(adm("POST", "/admin/v1/dlq/purge", {"group": "hyapp-room-im-bridge"}))
    for action in ("replay", "discard"):  # 404: rocketmq.enabled is false
        a.append(adm("POST", f"/admin/v1/dlq/{action}", {"filter": {"group": "g"},
                                                          "dry_run": True}))
    # the nodes view: this node alone under the local lease; a bad ?rooms is a 400
    for path in ("/admin/v1/nodes", "/admin/v1/nodes?rooms=5", "/admin/v1/nodes?rooms=x",
                 "/admin/v1/node", "/admin/v1/node?rooms=-1"):
        a.append(adm("GET", path))
    for path in ("/console", "/console/", "/console/console.js", "/console/console.css",
                 "/console/nope.js"):
        a.append(adm("GET", path))
    return a


def test_real_answers_match_the_document():
    rd = Roomd({"room": {"gift_catalog": "required"}})
    rd.start()
    try:
        rid = hu.room_name("oa")
        a = []
        a.append(answer(rd, "POST", "/v1/gifts", {"gift_id": "rose", "unit_price": 5},
                        admin=True))
        a.append(answer(rd, "POST", "/v1/gifts", {"gift_id": "ring", "unit_price": 1000000,
                                                  "energy_per_unit": 10, "version": 0},
                        admin=True))
        a.append(answer(rd, "POST", "/v1/gifts", {"gift_id": "ring", "unit_price": 1,
                                                  "version": 0}, admin=True))  # 409
        a.append(answer(rd, "POST", "/v1/gifts", {"gift_id": "ring"}, admin=True))  # 400
        a.append(answer(rd, "GET", "/v1/gifts"))
        a.append(answer(rd, "POST", "/v1/rooms", {"command_id": hu.cid(), "room_id": rid,
                                                  "owner_uid": 1, "title": "OpenAPI"}))
        a.append(answer(rd, "POST", "/v1/rooms", {"command_id": hu.cid(), "room_id": rid,
                                                  "owner_uid": 1, "title": "again"}))  # 409
        for uid in (2, 3):
            a.append(answer(rd, "POST", f"/v1/rooms/{rid}/join",
                            {"command_id": hu.cid(), "uid": uid}))
        a.append(answer(rd, "POST", f"/v1/rooms/{rid}/mic/up",
                        {"command_id": hu.cid(), "uid": 2, "seat": 0}))
        a.append(answer(rd, "POST", f"/v1/rooms/{rid}/mic/up",
                        {"command_id": hu.cid(), "uid": 3, "seat": 0}))  # 409 seat_taken
        a.append(answer(rd, "POST", f"/v1/rooms/{rid}/mic/down", {"command_id": hu.cid(), "uid": 2}))
        a.append(answer(rd, "POST", f"/v1/rooms/{rid}/gifts",
                        {"command_id": hu.cid(), "uid": 3, "to_uid": 2, "gift_id": "rose",
                         "count": 1, "unit_price": 5}))
        a.append(answer(rd, "POST", f"/v1/rooms/{rid}/gifts",
                        {"command_id": hu.cid(), "uid": 3, "to_uid": 2, "gift_id": "rose",
                         "count": 1, "unit_price": 4}))  # 409 price_changed
        a.append(answer(rd, "POST", f"/v1/rooms/{rid}/gifts",
                        {"command_id": hu.cid(), "uid": 3, "to_uid": 2, "gift_id": "nope",
                         "count": 1}))  # 404 gift_not_found
        a.append(answer(rd, "POST", f"/v1/rooms/{rid}/gifts",
                        {"command_id": hu.cid(), "uid": 3, "to_uid": 2, "gift_id": "ring",
                         "count": 9999}))  # 402
        a.append(answer(rd, "POST", f"/v1/rooms/{rid}/kick",
                        {"command_id": hu.cid(), "operator_uid": 1, "uid": 3, "reason": "x"}))
        a.append(answer(rd, "POST", f"/internal/v1/rooms/{rid}/rocket/launch",
                        {"command_id": f"~rl-{rid}-1-9", "rocket_id": f"{rid}-1-9",
                         "level": 9, "launch_at_ms": 1}, admin=True))  # stale: 200 launched false
        a.append(answer(rd, "GET", "/v1/users/2/presence"))
        a.append(answer(rd, "POST", f"/v1/rooms/{rid}/heartbeat", {"uid": 2}))
        a.append(answer(rd, "POST", f"/v1/rooms/{rid}/heartbeat", {"uid": 99}))  # 409
        a.append(answer(rd, "POST", f"/v1/rooms/{rid}/heartbeat", {"uid": 0}))  # 400
        # tencent_im.callback.enabled is off here: 404 (test_presence signs real callbacks)
        a.append(answer(rd, "POST", "/callbacks/tim?RequestTime=1&Sign=" + "0" * 64,
                        {"CallbackCommand": "State.StateChange"}))
        a.append(answer(rd, "POST", f"/v1/rooms/{rid}/leave", {"command_id": hu.cid(), "uid": 2}))
        a.append(answer(rd, "GET", "/v1/users/2/presence"))  # room_id null
        a.append(answer(rd, "GET", f"/v1/rooms/{rid}"))
        a.append(answer(rd, "GET", "/v1/rooms/never-created"))  # 404
        a.append(answer(rd, "GET", f"/v1/rooms/{rid}/events?after_seq=1&limit=2"))
        a.append(answer(rd, "GET", f"/v1/rooms/{rid}/events?limit=0"))  # 400
        a.append(answer(rd, "GET", "/v1/rooms/never-created/events"))  # 404
        a.append(answer(rd, "GET", "/v1/rooms?limit=1"))
        a.append(answer(rd, "GET", "/v1/rooms?limit=0"))  # 400
        a.append(answer(rd, "POST", f"/v1/rooms/{rid}/close", {"command_id": hu.cid(),
                                                               "operator_uid": 1}))
        a.append(answer(rd, "POST", f"/v1/rooms/{rid}/join", {"command_id": hu.cid(), "uid": 4}))
        a.append(answer(rd, "POST", f"/v1/rooms/{rid}/join", raw="{not json"))  # 400 invalid_json
        a.append(answer(rd, "POST", f"/v1/rooms/{rid}/join", {"command_id": hu.cid(), "uid": 4},
                        headers={"Content-Type": "text/plain"}))  # 415
        a.append(answer(rd, "POST", f"/v1/rooms/{rid}/join",
                        raw="{" + " " * 70000 + "}"))  # 413
        a.append(answer(rd, "POST", "/v1/wallet/topup", {"command_id": hu.cid(), "uid": 3,
                                                         "amount": 10}, admin=True))
        a.append(answer(rd, "GET", "/v1/wallet/3"))
        a.append(answer(rd, "GET", "/v1/wallet/x"))  # 400
        for p in ("/healthz", "/readyz", "/v1/wallet/3"):
            a.append(answer(rd, "GET", p, admin=True))
        for p in ("/healthz", "/readyz"):
            a.append(answer(rd, "GET", p))
        a.append(answer(rd, "GET", "/metrics", admin=True))
        a += admin_answers(rd, rid)
    finally:
        rd.stop()
    res = check(DOC, a)
    assert res["valid"] and res["operations"], res["errors"]  # else no answer would be checked
    bad = [(a[r["i"]]["method"], a[r["i"]]["path"], a[r["i"]]["status"], r["errors"])
           for r in res["answers"] if not r["ok"]]
    assert not bad, bad
    # the answers cover every documented operation, and several statuses
    covered = set()
    for x in a:
        segs = x["path"].split("?")[0].split("/")
        for op in res["operations"]:
            m, p, _ = op.split(" ")
            ps = p.split("/")
            if m == x["method"] and len(ps) == len(segs) and \
                    all(s.startswith("{") or s == segs[i] for i, s in enumerate(ps)):
                covered.add(op)
    # (a HEAD answer has no body to check: test_http_conventions compares it with the GET's)
    wanted = {op for op in res["operations"] if not op.startswith("HEAD ")}
    assert covered == wanted, wanted - covered
    assert {x["status"] for x in a} >= {200, 201, 400, 402, 404, 409, 413, 415}, \
        {x["status"] for x in a}


TESTS = [test_document_is_valid, test_paths_are_the_routers, test_real_answers_match_the_document]

if __name__ == "__main__":
    if not listing() and (shutil.which("node") is None or not os.path.isdir(VALIDATOR)):
        if os.environ.get("CI", "") not in ("", "0", "false"):
            print("FAIL: node + @seriousme/openapi-schema-validator missing (scripts/deps.sh)")
            sys.exit(1)
        print("SKIP: node + @seriousme/openapi-schema-validator missing (scripts/deps.sh)")
        sys.exit(77)
    run(TESTS)
