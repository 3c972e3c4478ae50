# SPDX-License-Identifier: Apache-2.0
"""test_console: roomd's web console in headless Chromium (tests/integ/console_test.js,
playwright-core driving Debian's /usr/bin/chromium), against a real roomd.

roomd first runs with its log sink on /dev/full, so the events of three rooms become dead
letters; restarted with a working sink (dead letters stay failed), the console is opened on
the admin listener: without the token the API refuses, with it the overview loads; the page
filters the failed rows of one room, opens one in full, replays them behind the dry-run
confirmation (the dialog shows the count), and the audit shows the admin token, the filter,
the count and the ids. Then: exactly those rows end delivered (each once in the log sink,
same event_ids), the other rooms' stay failed, and the audit API agrees. The screenshot is
kept as an artefact (build dir: artifacts/console.png)."""
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import uuid

sys.path.insert(0, os.path.dirname(__file__))
from roomd_test import BUILD, Roomd, listing, run, wait_until  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TOKEN = "console-admin-" + uuid.uuid4().hex
ENV = {"ROOMD_TEST_ADMIN": TOKEN}


def need_browser():
    if listing():
        return
    ok = os.path.exists("/usr/bin/chromium") and os.path.isdir(
        os.path.join(HERE, "..", "standins", "node_modules", "playwright-core")) and \
        shutil.which("node")
    if not ok:
        if os.environ.get("ROOMD_REQUIRE_SERVERS", "") not in ("", "0"):
            print("FAIL: chromium, node or playwright-core missing (scripts/deps.sh)")
            sys.exit(1)
        print("SKIP: chromium, node or playwright-core missing")
        sys.exit(77)


def statuses(rd):
    st, _, js = rd.admin("GET", "/admin/v1/outbox?limit=500")
    assert st == 200, (st, js)
    return {r["event_id"]: (r["room_id"], r["status"]) for r in js["rows"]}


def test_console_filter_replay_audit():
    need_browser()
    rd = Roomd({"admin": {"token_env": "ROOMD_TEST_ADMIN"},
                "outbox_worker": {"max_retry_count": 1, "poll_interval": "50ms",
                                  "log_sink": {"enabled": True, "path": "/dev/full"}}})
    rd.admin_token = TOKEN
    rd.start(env=ENV)
    rooms = [f"cons-{i}-{uuid.uuid4().hex[:4]}" for i in range(3)]
    for rid in rooms:
        st, _, js = rd.post("/v1/rooms", {"command_id": f"c-{rid}", "room_id": rid,
                                          "owner_uid": 1, "title": "console"})
        assert st == 201, (st, js)
        for u in range(2):
            st, _, js = rd.post(f"/v1/rooms/{rid}/join", {"command_id": f"j-{rid}-{u}",
                                                          "uid": 10 + u})
            assert st == 200, (st, js)
    wait_until(lambda: all(s == "failed" for _, s in statuses(rd).values())
               and len(statuses(rd)) == 9, timeout=20, what="9 dead letters")
    rd.stop()
    rd.cfg["outbox_worker"]["log_sink"]["path"] = os.path.join(rd.tmp, "events.jsonl")
    with open(rd.cfg_path, "w") as f:
        json.dump(rd.cfg, f)
    rd.start(env=ENV)
    target = rooms[1]
    before = statuses(rd)
    want = sorted(e for e, (room, _) in before.items() if room == target)
    assert len(want) == 3

    shot_dir = os.path.join(BUILD, "artifacts")
    os.makedirs(shot_dir, exist_ok=True)
    shot = os.path.join(shot_dir, "console.png")
    if os.path.exists(shot):
        os.remove(shot)
    p = subprocess.run(["node", os.path.join(HERE, "console_test.js")], capture_output=True,
                       text=True, timeout=180, env=dict(
                           os.environ, CONSOLE_URL=f"http://127.0.0.1:{rd.admin_port}/console/",
                           CONSOLE_TOKEN=TOKEN, CONSOLE_ROOM=target, CONSOLE_EXPECT="3",
                           CONSOLE_SCREENSHOT=shot))
    assert p.returncode == 0, p.stdout + p.stderr
    seen = json.loads(p.stdout.strip().splitlines()[-1])
    assert seen["failed_shown"] == 9, seen
    assert seen["rows"] == 3 and seen["rooms_ok"], seen
    assert seen["detail_status"] == "failed" and seen["detail_event_id"] in want, seen
    # the row view's room_seq is the store's (one row shape: store.h STORE_OUTBOX_COLS)
    con = sqlite3.connect(f"file:{rd.cfg['store']['sqlite']['path']}?mode=ro", uri=True, timeout=10)
    (seq,), = con.execute("SELECT room_seq FROM room_outbox WHERE event_id = ?",
                          (seen["detail_event_id"],)).fetchall()
    con.close()
    assert seq >= 1 and seen["detail_room_seq"] == seq, (seq, seen)
    assert seen["confirm_count"] == 3 and seen["confirm_sample"] == 3, seen
    assert seen["result"].startswith("replayed 3 rows"), seen
    a = seen["audit"]
    assert a["token"] == "admin" and a["action"] == "replay" and a["count"] == 3, a
    assert a["filter"] == {"status": "failed", "room_id": target} and a["state"] == "done", a
    assert sorted(seen["audit_ids"]) == want, seen
    assert seen["page_errors"] == [], seen
    assert os.path.getsize(shot) > 10000, "screenshot saved"

    # exactly those rows end delivered, once each, under their event_ids
    wait_until(lambda: all(statuses(rd)[e][1] == "delivered" for e in want), timeout=20,
               what="the replayed rows delivered")
    assert sorted(e["event_id"] for e in rd.events()) == want
    after = statuses(rd)
    assert all(s == "failed" for e, (room, s) in after.items() if room != target), after
    st, _, js = rd.admin("GET", f"/admin/v1/audit/{a['id']}")
    assert st == 200 and sorted(r["event_id"] for r in js["rows"]) == want, js
    assert rd.stop() == 0


def test_console_views():
    """The on-call views (issue 29) at 1280 and 360 px: a roomd in mq mode on the suite's
    nats-server with the activity consumer group; the consumer-groups view lists the group
    (lag 0), the node view the readiness checks and the nodes table this node (the local
    lease), the four charts draw from the browser's polling, "updated N s ago" ticks, the nav
    names every view, the outbox rows, the audit, the dead letters and the gifts show what the
    test made, and neither the page nor any section is wider than the viewport."""
    need_browser()
    from bus_util import Nats, js_delete_stream
    from roomd_test import env_port
    ns = f"cons{os.getpid()}_"
    port = env_port("ROOMD_NATS_PORT", 4231)
    rd = Roomd({"admin": {"token_env": "ROOMD_TEST_ADMIN"},
                "rocketmq": {"enabled": True, "name_servers": [f"nats://127.0.0.1:{port}"],
                             "namespace": ns, "room_outbox": {"enabled": True,
                                                              "activity_consumer_enabled": True},
                             "rocket_launch": {"enabled": False}},
                "outbox_worker": {"publish_mode": "mq"}})
    rd.cfg["rocketmq"]["consumer_store_dir"] = os.path.join(rd.tmp, "consumers")
    with open(rd.cfg_path, "w") as f:
        json.dump(rd.cfg, f)
    rd.admin_token = TOKEN
    rd.start(env=ENV)
    try:
        st, _, js = rd.post("/v1/rooms", {"command_id": "cv-1", "room_id": "cv-1", "owner_uid": 1,
                                          "title": "views"})
        assert st == 201, js
        # an audit entry (a replay of no failed row) and a gift, for those views
        st, _, js = rd.admin_post("/admin/v1/outbox/replay", {"filter": {"status": "failed"}})
        assert st == 200 and js["replayed"] == 0, js
        st, _, js = rd.admin_post("/v1/gifts", {"gift_id": "views-rose", "unit_price": 5})
        assert st == 200, js
        shot = os.path.join(BUILD, "artifacts", "console-views.png")
        os.makedirs(os.path.dirname(shot), exist_ok=True)
        p = subprocess.run(["node", os.path.join(HERE, "console_test.js")], capture_output=True,
                           text=True, timeout=180, env=dict(
                               os.environ, CONSOLE_URL=f"http://127.0.0.1:{rd.admin_port}/console/",
                               CONSOLE_TOKEN=TOKEN, CONSOLE_MODE="views",
                               CONSOLE_GROUP="hyapp-activity-room-outbox",
                               CONSOLE_SCREENSHOT=shot))
        assert p.returncode == 0, p.stdout + p.stderr
        seen = json.loads(p.stdout.strip().splitlines()[-1])
        assert seen["page_errors"] == [], seen
        for width in ("1280", "360"):
            w = seen["widths"][width]
            assert w["overflow"] <= 0, (width, w)
            assert {"charts", "consumer groups", "nodes", "dead letters", "audit", "gifts"} <= \
                set(w["nav"]), w
            assert w["group_cells"][0] == "hyapp-activity-room-outbox", w
            assert w["group_cells"][1] == "0", w  # lag
            assert w["node"] == "ready" and "store" in w["checks"] and "consumers" in w["checks"], w
            assert w["lag_now"] == "0" and w["backlog_now"] != "-", w
            assert w["status_rows"] >= 1, w
            assert w["sections_right"] <= 0.5, (width, w["sections_right"])
            assert "RoomCreated" in w["rows"], w["rows"]  # the outbox rows of any status
            assert w["audit_first"][1] == "admin" and w["audit_first"][3] == "replay", w
            assert w["dlq_rows"] == 0 and "error" not in w["dlq_note"].lower(), w
            assert w["gifts"] == ["views-rose"] and w["gift_note"] == "", w
            # the nodes view: this node alone under the local lease, ready, no leases tracked
            assert [n["node"] for n in w["nodes"]] == [rd.cfg["app"]["node_id"]], w["nodes"]
            n = w["nodes"][0]
            assert n["state"] == "ready" and n["cells"][0].endswith("(this node)"), n
            assert n["cells"][3] == "-" and n["cells"][6] == rd.cfg["admin"]["listen"], n
        assert os.path.getsize(shot.replace(".png", "-360.png")) > 5000
    finally:
        assert rd.stop() == 0
        try:
            nc = Nats(port)
            for s in ("hyapp_room_outbox", "hyapp_dlq"):
                js_delete_stream(nc, ns + s)
            nc.close()
        except OSError:
            pass


if __name__ == "__main__":
    run([test_console_filter_replay_audit, test_console_views])
