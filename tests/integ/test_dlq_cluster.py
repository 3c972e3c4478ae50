# SPDX-License-Identifier: Apache-2.0
"""test_dlq_cluster: consumer dead letters with the MySQL inbox on two roomd nodes sharing one
MariaDB database (cluster_util: Redis lease, a 3-server NATS cluster), the production shape
(rocketmq.consumer_inbox auto -> mysql, docs/admin.md "Consumer dead letters").

The IM bridge group runs in both nodes; while the IM stand-in answers 502 four joins become
dead letters (consumer_inbox rows dead). With IM healthy again, each operation is done on a
node that need not be the one that dead-lettered the message, and none of them touches a
SQLite file:
- `roomctl -c node1.json dlq replay` (in-process admin on node 1's config): the key is
  forgotten, the group (on either node) handles it again: done, IM called;
- the console of node 0, its replay button: the same, the row leaves the table, the audit's
  newest entry is the dlq_replay;
- the console of node 1 with the named token "oncall", its discard button: dismissed, the
  dead letter stays; accepted, the row leaves the table, the dead letter is gone from the
  stream (404 on both nodes), the key stays dead naming "oncall", the audit's newest entry is
  the dlq_discard by "oncall", IM is not called;
- POST /admin/v1/dlq/purge {"group"} on node 0: the last one discarded likewise.
No node has a SQLite inbox file of the group."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "standins"))
import http_util as hu  # noqa: E402
from cluster_util import MYSQL_PORT, REDIS_PORT, Cluster  # noqa: E402
from roomctl_util import ctl_json  # noqa: E402
from roomd_test import BUILD, listing, need, run, wait_until  # noqa: E402
from standins import ImStandin, TEST_SECRET  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TMP = tempfile.mkdtemp(prefix="roomd-dlq-cluster-")
G_IM = "hyapp-room-im-bridge"
TOKEN = "dlq-admin-" + uuid.uuid4().hex
ONCALL = "dlq-oncall-" + uuid.uuid4().hex  # admin.tokens: "oncall", role operate


def inbox(cl, key):
    rows = cl.mysql("SELECT state, last_error FROM consumer_inbox"
                    f" WHERE group_name = '{G_IM}' AND event_id = '{key}'")
    return tuple(rows[0]) if rows else ("absent", "")


def dlq(rd):
    st, _, js = rd.admin("GET", f"/admin/v1/dlq?group={G_IM}")
    assert st == 200, (st, js)
    return js["messages"]


def console_replay(rd, seq, expect, mode="dlq", token=TOKEN):
    """The console of rd: its replay button on dead letter seq (console_test.js, dlq mode;
    dlq-discard: its discard button, dismissed once, then accepted); None when the browser is
    missing (the rest of the test still runs)."""
    if not (os.path.exists("/usr/bin/chromium") and shutil.which("node") and os.path.isdir(
            os.path.join(HERE, "..", "standins", "node_modules", "playwright-core"))):
        assert os.environ.get("ROOMD_REQUIRE_SERVERS", "") in ("", "0"), \
            "chromium, node or playwright-core missing (scripts/deps.sh)"
        return None
    shot = os.path.join(BUILD, "artifacts", f"console-{mode}.png")
    os.makedirs(os.path.dirname(shot), exist_ok=True)
    p = subprocess.run(["node", os.path.join(HERE, "console_test.js")], capture_output=True,
                       text=True, timeout=180, env=dict(
                           os.environ, CONSOLE_URL=f"http://127.0.0.1:{rd.admin_port}/console/",
                           CONSOLE_TOKEN=token, CONSOLE_MODE=mode, CONSOLE_SEQ=str(seq),
                           CONSOLE_EXPECT=str(expect), CONSOLE_SCREENSHOT=shot))
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def replay_discard_purge(cl, im):
    n0, n1 = cl.nodes
    room = hu.room_name("dlqc")
    st, _, js = hu.create(n0, room)
    assert st == 201, (st, js)
    wait_until(lambda: cl.mysql(f"SELECT COUNT(*) FROM consumer_inbox WHERE group_name = '{G_IM}'"
                                " AND state = 'done'") == [["1"]], timeout=30,
               what="the create handled by the IM bridge")
    im.control(http_status={"api": "*", "status": 502, "count": 100000})
    for k in range(4):
        st, _, js = hu.join(n1 if k % 2 else n0, room, 50 + k)
        assert st == 200, (st, js)
    msgs = wait_until(lambda: (lambda m: m if len(m) == 4 else None)(dlq(n1)), timeout=60,
                      what="four dead letters")
    keys = [m["event_id"] for m in msgs]
    wait_until(lambda: all(inbox(cl, k)[0] == "dead" for k in keys), timeout=10,
               what="the shared inbox rows dead")
    assert dlq(n0) == msgs, "both nodes see the same dead letters"
    im.control(reset=True)

    # replay through roomctl on node 1's config (in-process admin, the MySQL inbox)
    calls = len(im.calls())
    res = ctl_json(n1.cfg_path, "dlq", "replay", str(msgs[0]["seq"]))
    assert res["replayed"] is True and res["inbox"] == "dead", res
    wait_until(lambda: inbox(cl, keys[0])[0] == "done", timeout=30,
               what="the replayed message handled by the group")
    assert len(im.calls()) > calls, "IM got the replayed join"

    # replay through node 0's console
    seen = console_replay(n0, msgs[1]["seq"], 3)
    if seen is None:
        st, _, js = n0.admin("POST", f"/admin/v1/dlq/{msgs[1]['seq']}/replay", {})
        assert st == 200 and js["replayed"] is True, (st, js)
    else:
        assert seen["dlq_shown"] == [m["seq"] for m in msgs[1:]], seen
        assert seen["dlq_left"] == [m["seq"] for m in msgs[2:]], seen
        assert seen["audit"]["action"] == "dlq_replay" and seen["audit"]["count"] == 1, seen
        assert seen["audit"]["filter"] == {"group": G_IM, "seq": msgs[1]["seq"]}, seen
        assert seen["page_errors"] == [], seen
    wait_until(lambda: inbox(cl, keys[1])[0] == "done", timeout=30,
               what="the console's replay handled by the group")

    # discard through node 1's console with the named "oncall" token (the button asks first:
    # dismissed nothing goes), purge on node 0: the keys stay dead, IM is not called for them
    calls = len(im.calls())
    seq2 = msgs[2]["seq"]
    seen = console_replay(n1, seq2, 2, mode="dlq-discard", token=ONCALL)
    if seen is None:
        st, _, js = n1.admin("POST", f"/admin/v1/dlq/{seq2}/discard", {},
                             headers={"Authorization": f"Bearer {ONCALL}"})
        assert st == 200 and js["discarded"] is True and js["inbox"] == "dead", (st, js)
    else:
        assert seen["page_errors"] == [], seen
        assert seen["dlq_shown"] == [m["seq"] for m in msgs[2:]], seen
        assert str(seq2) in seen["dismissed_prompt"] and G_IM in seen["dismissed_prompt"], seen
        assert seen["after_dismiss"] == {"row": True, "api": 200}, seen  # dismissed: kept
        assert seen["dlq_left"] == [msgs[3]["seq"]], seen
        a = seen["audit"]
        assert a["action"] == "dlq_discard" and a["token"] == "oncall" and a["count"] == 1, a
        assert a["filter"] == {"group": G_IM, "seq": seq2}, a
        assert seen["status_line"] == f"dead letter {seq2} discarded", seen
    # gone from the stream for both nodes; the key stays dead naming who discarded it
    for r in (n0, n1):
        st, _, js = r.admin("GET", f"/admin/v1/dlq/{seq2}")
        assert st == 404, (st, js)
    state, why = inbox(cl, keys[2])
    assert state == "dead" and f"dead letter {seq2} discarded by oncall" in why, (state, why)
    st, _, js = n0.admin("GET", "/admin/v1/audit?limit=1")
    assert js["audits"][0]["action"] == "dlq_discard" and \
        js["audits"][0]["actor"] == "oncall", js
    # the last one: a bulk discard's dry run by filter first (nothing changes), then the purge,
    # both with the named token: the audit names its owner
    oncall = {"Authorization": f"Bearer {ONCALL}"}
    st, _, js = n0.admin("POST", "/admin/v1/dlq/discard", {"filter": {"group": G_IM},
                                                            "dry_run": True}, headers=oncall)
    assert st == 200 and js["dry_run"] is True and js["matched"] == 1 and js["done"] == 0, js
    assert [m["seq"] for m in dlq(n0)] == [msgs[3]["seq"]], "a dry run discarded something"
    st, _, js = n0.admin("POST", "/admin/v1/dlq/purge", {"group": G_IM}, headers=oncall)
    assert st == 200 and js["discarded"] == 1 and js["skipped"] == 0, (st, js)
    state, why = inbox(cl, keys[3])
    assert state == "dead" and "discarded by" in why, (state, why)
    assert dlq(n0) == [] and dlq(n1) == []
    st, _, js = n1.admin("POST", f"/admin/v1/dlq/{msgs[3]['seq']}/discard", {})
    assert st == 404, (st, js)
    st, _, js = n1.admin("GET", "/admin/v1/audit?limit=4")
    assert [a["action"] for a in js["audits"]] == ["dlq_purge", "dlq_discard", "dlq_replay",
                                                   "dlq_replay"], js
    assert [a["actor"] for a in js["audits"][:2]] == ["oncall", "oncall"], js
    assert len(im.calls()) == calls, "a discarded join never reached IM"
    for r in cl.nodes:
        assert not os.path.exists(os.path.join(r.tmp, "consumers", f"{G_IM}.db")), r.tmp


def main():
    if listing():
        run([], fixture="topology")
    need("127.0.0.1", MYSQL_PORT, "mariadbd (scripts/servers.sh)")
    need("127.0.0.1", REDIS_PORT, "redis-server (scripts/servers.sh)")
    os.environ["TIM_TEST_SECRET"] = TEST_SECRET
    os.environ["ROOMD_TEST_ADMIN"] = TOKEN
    os.environ["ROOMD_TEST_ONCALL"] = ONCALL
    im = ImStandin(TMP).start()
    extra = {
        "tencent_im": im.conf(timeout="1s"),
        "admin": {"token_env": "ROOMD_TEST_ADMIN",
                  "tokens": [{"name": "oncall", "role": "operate",
                              "token_env": "ROOMD_TEST_ONCALL"}]},
        "rocketmq": {"room_outbox": {"tencent_im_consumer_enabled": True}},
    }
    cl = Cluster(TMP, nodes=2, extra=extra)
    try:
        cl.start()
        for r in cl.nodes:
            r.admin_token = TOKEN

        def dlq_replay_discard_purge_two_nodes():
            replay_discard_purge(cl, im)
        run([dlq_replay_discard_purge_two_nodes], fixture="topology")
    finally:
        cl.stop()
        im.stop()


if __name__ == "__main__":
    main()
