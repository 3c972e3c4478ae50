# SPDX-License-Identifier: Apache-2.0
"""test_rocketmq_dlq: the consumer groups' dead letters on the rocketmq driver (issue 27), against
the RocketMQ stand-in (never a real broker), with a namespace ("t9": the topics are
%DLQ%t9%<group>, %RETRY%t9%<group>).

The IM bridge group (in roomd, SQLite inbox) dead-letters four joins while IM answers 502: each
goes 2 x %RETRY% then to %DLQ% (send-back with delay level -1). Then, with IM healthy:
- the admin API (GET /admin/v1/dlq) and `roomctl dlq list` list the three (driver rocketmq,
  group, event_id, reason max_reconsume), `roomctl dlq show` decodes one;
- a replay through the admin API sends it to %RETRY%<group> (KEYS, TAGS, RETRY_TOPIC kept), the
  group handles it (inbox done, IM called), it is no longer listed, a second replay is 404,
  the audit names it;
- `roomctl dlq replay SEQ` replays the second the same way;
- `roomctl dlq discard --group G --dry-run` matches the third and changes nothing; without
  --dry-run it is discarded: not listed, its key stays dead in the inbox (discarded by roomctl),
  IM never called for it; audited dlq_discard_all;
- the %DLQ% topic itself still holds the three messages (RocketMQ cannot delete one): the
  audit entries settle them;
- the console's dead-letter view lists the fourth and its replay button replays it (when
  chromium and playwright are installed, as in test_dlq_cluster.py).

Run: python3 tests/integ/test_rocketmq_dlq.py (PYTHONPATH=tests, ROOMD_BUILD_DIR=build)"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "standins"))
from roomd_test import Roomd, listing, run, wait_until  # noqa: E402
from bus_util import envelope  # noqa: E402
from http_util import room_name  # noqa: E402
from roomctl_util import ctl, ctl_json  # noqa: E402
from rocketmq_util import RocketStandin, alions_available  # noqa: E402
from test_bus_roomd import Events, db_rows, group_db  # noqa: E402
import test_dlq_cluster  # noqa: E402
from test_dlq_cluster import TOKEN, console_replay  # noqa: E402

try:  # its module-level temporary directory, unused here
    os.rmdir(test_dlq_cluster.TMP)
except OSError:
    pass
from test_rocketmq_roomd import TOPIC, rmq_cfg  # noqa: E402

G_IM = "hyapp-room-im-bridge"
NS = "t9"


def test_dlq_list_show_replay_discard_on_rocketmq():
    from standins import ImStandin, TEST_SECRET
    with tempfile.TemporaryDirectory() as tmp:
        b = RocketStandin(tmp, topics=[f"{NS}%{TOPIC}"]).start()
        im = ImStandin(tmp).start()
        os.environ["ROOMD_TEST_ADMIN"] = TOKEN
        cfg = rmq_cfg(b, ns=NS, extra={
            "tencent_im": im.conf(timeout="1s"),
            "admin": {"token_env": "ROOMD_TEST_ADMIN"},
            "rocketmq": {"consumer_store_dir": os.path.join(tmp, "consumers"),
                         "consumer_retry_delays_ms": [200, 400],
                         "room_outbox": {"consumer_max_reconsume_times": 2,
                                         "tencent_im_consumer_enabled": True}}})
        r = Roomd(cfg, tmp=tmp)
        r.admin_token = TOKEN
        r.start(env={"TIM_TEST_SECRET": TEST_SECRET})
        dlq_t, retry_t = f"%DLQ%{NS}%{G_IM}", f"%RETRY%{NS}%{G_IM}"
        db = group_db(tmp, G_IM)

        def inbox(key):  # [(state, last_error)], [("", "")] while absent (forgotten)
            return db_rows(db, f"SELECT state, last_error FROM inbox WHERE key = '{key}'") \
                or [("", "")]

        def topic(t):
            return b.stats([t])["messages"].get(t, [])
        try:
            room = room_name()
            ev = Events(r)
            ev.do("/v1/rooms", {"room_id": room, "owner_uid": 1, "title": "dlq"})
            wait_until(lambda: os.path.exists(db) and db_rows(db, "SELECT state FROM inbox")
                       == [("done",)], timeout=30, what="create bridged")
            im.control(http_status={"api": "*", "status": 502, "count": 100000})
            for uid in (5, 6, 7, 8):
                ev.do(f"/v1/rooms/{room}/join", {"uid": uid})
            failing = ev.ids()[1:]
            wait_until(lambda: len(topic(dlq_t)) == 4, timeout=60, what="four in %DLQ%")
            wait_until(lambda: all(inbox(k)[0][0] == "dead" for k in failing),
                       timeout=10, what="the inbox rows dead")
            im.control(reset=True)

            # list: the admin API and roomctl
            st, _, js = r.admin("GET", "/admin/v1/dlq")
            assert st == 200, (st, js)
            msgs = js["messages"]
            assert js["driver"] == "rocketmq", js
            assert [m["event_id"] for m in msgs] == failing, msgs
            assert all(m["group"] == G_IM and m["dead_reason"] == "max_reconsume" and
                       m["event_type"] == "RoomUserJoined" and m["deliveries"] >= 2
                       for m in msgs), msgs
            assert len({m["seq"] for m in msgs}) == 4
            cfgp = r.cfg_path
            assert [m["seq"] for m in ctl_json(cfgp, "dlq", "list")["messages"]] == \
                [m["seq"] for m in msgs]
            assert ctl_json(cfgp, "dlq", "list", "--group", "nobody")["messages"] == []
            st, _, page = r.admin("GET", "/admin/v1/dlq?limit=1")
            assert [m["seq"] for m in page["messages"]] == [msgs[0]["seq"]], page
            st, _, page = r.admin("GET", f"/admin/v1/dlq?after={page['next_after']}&limit=5")
            assert page["next_after"] is None, page
            assert [m["seq"] for m in page["messages"]] == [m["seq"] for m in msgs[1:]], page
            shown = ctl_json(cfgp, "dlq", "show", str(msgs[0]["seq"]))
            assert shown["event"]["event_id"] == failing[0], shown

            # replay one through the admin API
            calls = len(im.calls())
            st, _, res = r.admin("POST", f"/admin/v1/dlq/{msgs[0]['seq']}/replay", {})
            assert st == 200 and res["replayed"] is True and res["audit_id"] > 0, (st, res)
            wait_until(lambda: inbox(failing[0])[0][0] == "done", timeout=20,
                       what="the group handled the replayed message")
            assert len(im.calls()) > calls, "IM got the replayed event's call"
            again = [m for m in topic(retry_t) if m["props"]["KEYS"] == failing[0]]
            assert len(again) == 3, again  # 2 reconsumes + the replay
            assert again[-1]["props"]["TAGS"] == "RoomUserJoined", again[-1]
            assert again[-1]["props"]["RETRY_TOPIC"] == f"{NS}%{TOPIC}", again[-1]
            assert envelope(again[-1]["body"])["event_id"] == failing[0]
            left = ctl_json(cfgp, "dlq", "list")["messages"]
            assert [m["event_id"] for m in left] == failing[1:], left
            st, _, js = r.admin("POST", f"/admin/v1/dlq/{msgs[0]['seq']}/replay", {})
            assert st == 404, (st, js)
            audit = ctl_json(cfgp, "audit", "list")["audits"][0]
            assert audit["action"] == "dlq_replay" and audit["filter"]["seq"] == msgs[0]["seq"]

            # replay the second with roomctl
            res = ctl_json(cfgp, "dlq", "replay", str(msgs[1]["seq"]))
            assert res["replayed"] is True, res
            wait_until(lambda: inbox(failing[1])[0][0] == "done", timeout=20,
                       what="the second replayed and handled")

            # bulk discard of the third: dry run, then for real
            calls = len(im.calls())
            sel = ["--group", G_IM, "--created-before", str(msgs[3]["stored_at_ms"])]
            res = ctl_json(cfgp, "dlq", "discard", *sel, "--dry-run")
            assert res["matched"] == 1 and res["done"] == 0, res
            assert [m["event_id"] for m in ctl_json(cfgp, "dlq", "list")["messages"]] == \
                failing[2:]
            res = ctl_json(cfgp, "dlq", "discard", *sel, "--reason", "max_reconsume")
            assert res["matched"] == 1 and res["done"] == 1 and res["failed"] == 0, res
            assert [m["event_id"] for m in ctl_json(cfgp, "dlq", "list")["messages"]] == \
                failing[3:]
            state, why = inbox(failing[2])[0]
            assert state == "dead" and "discarded by roomctl" in why, (state, why)
            audit = ctl_json(cfgp, "audit", "list")["audits"][0]
            assert audit["action"] == "dlq_discard_all" and audit["count"] == 1, audit
            rc, out, err = ctl(cfgp, "dlq", "discard", str(msgs[2]["seq"]))
            assert rc == 1 and "404" in err, (rc, out, err)
            assert len(im.calls()) == calls, "a discarded event never reached IM"
            # RocketMQ keeps the messages; the audits settle them
            assert len(topic(dlq_t)) == 4

            # the console: the fourth listed, replayed with its button
            out = console_replay(r, msgs[3]["seq"], 1)
            if out is not None:
                assert out["dlq_shown"] == [msgs[3]["seq"]] and out["dlq_left"] == [], out
                assert out["audit"]["action"] == "dlq_replay", out
                wait_until(lambda: inbox(failing[3])[0][0] == "done", timeout=20,
                           what="the console's replay handled")
                print("  console: the %DLQ% dead letter replayed with its button")
        except BaseException:
            print(r.stderr_text())
            raise
        finally:
            r.stop()
            im.stop()
            b.stop()


if __name__ == "__main__":
    if not listing() and not alions_available():
        print("FAIL: ali-ons not installed in tests/standins (npm ci there)")
        sys.exit(1)
    run([test_dlq_list_show_replay_discard_on_rocketmq])
