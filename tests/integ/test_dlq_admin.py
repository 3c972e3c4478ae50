# SPDX-License-Identifier: Apache-2.0
"""test_dlq_admin: the consumer groups' dead letters through roomctl, with the SQLite inbox on
one node (the MySQL inbox on two nodes: test_dlq_cluster.py).

The IM bridge group (in roomd) dead-letters four joins while the IM stand-in answers 502.
With IM healthy again, `roomctl dlq list` shows them (group, event_id, deliveries, reason),
`dlq show` decodes one, `dlq replay` sends one back into its group: the group handles it (its
inbox marks the key done, IM gets the group member), the dead letter leaves the DLQ, the
replay is audited, and replaying it again is refused (404). `dlq discard` deletes the second
one while its key stays dead in the inbox (with the reason); `dlq purge --group` discards the
other two. A config whose consumer_store_dir holds no inbox of the group (another machine's
view) is refused 409 and changes nothing. The other groups are not involved; the outbox is
untouched."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "standins"))
from roomd_test import need, run, wait_until  # noqa: E402
from roomctl_util import ctl, ctl_json  # noqa: E402
from test_bus_roomd import G_IM, NATS_PORT, db_rows, group_db, im_dead_letters  # noqa: E402


def inbox(tmp, key):
    return db_rows(group_db(tmp, G_IM), f"SELECT state, last_error FROM inbox WHERE key = '{key}'")


def test_dlq_list_show_replay_discard_purge():
    need("127.0.0.1", NATS_PORT, "nats-server")
    with im_dead_letters("dlq-admin-", joins=4) as (tmp, ns, r, nc, im, failing):
        cfg = r.cfg_path
        msgs = wait_until(lambda: (lambda m: m if len(m) == 4 else None)(
            ctl_json(cfg, "dlq", "list")["messages"]), timeout=40, what="four dead letters")
        assert {m["event_id"] for m in msgs} == set(failing), msgs
        assert all(m["group"] == G_IM and m["deliveries"] == 3 for m in msgs), msgs
        assert all(m["event_type"] == "RoomUserJoined" and m["reason"] for m in msgs), msgs
        rc, out, err = ctl(cfg, "dlq", "list", "--group", G_IM)
        assert rc == 0 and out.splitlines()[0].split()[:3] == ["SEQ", "GROUP", "EVENT_ID"], out
        assert ctl_json(cfg, "dlq", "list", "--group", "nobody")["messages"] == []
        wait_until(lambda: all(inbox(tmp, m["event_id"])[0][0] == "dead" for m in msgs),
                   timeout=10, what="the inbox rows dead")

        one = msgs[0]
        shown = ctl_json(cfg, "dlq", "show", str(one["seq"]))
        assert shown["event"]["event_id"] == one["event_id"], shown
        assert shown["event"]["payload"]["uid"] in (5, 6, 7, 8), shown

        # another machine's view: its consumer_store_dir holds no inbox of the group
        with open(cfg) as f:
            other = json.load(f)
        other["rocketmq"]["consumer_store_dir"] = os.path.join(tmp, "elsewhere")
        other_cfg = os.path.join(tmp, "other.json")
        with open(other_cfg, "w") as f:
            json.dump(other, f)
        for verb in ("replay", "discard"):
            rc, out, err = ctl(other_cfg, "dlq", verb, str(one["seq"]))
            assert rc == 1 and "409" in err and "not on this machine" in err, (verb, rc, err)
        assert not os.path.exists(os.path.join(tmp, "elsewhere", f"{G_IM}.db"))
        assert len(ctl_json(cfg, "dlq", "list")["messages"]) == 4

        im.control(reset=True)
        before = len(im.calls())
        res = ctl_json(cfg, "dlq", "replay", str(one["seq"]))
        assert res["replayed"] is True and res["audit_id"] > 0 and res["inbox"] == "dead", res
        key = one["event_id"]
        wait_until(lambda: (inbox(tmp, key) or [("", "")])[0][0] == "done", timeout=20,
                   what="the group handled the replayed message")
        assert len(im.calls()) > before, "IM got the replayed event's call"
        left = ctl_json(cfg, "dlq", "list")["messages"]
        assert [m["event_id"] for m in left] == [m["event_id"] for m in msgs[1:]], left
        rc, out, err = ctl(cfg, "dlq", "replay", str(one["seq"]))
        assert rc == 1 and "404" in err, (rc, out, err)
        audit = ctl_json(cfg, "audit", "list")["audits"][0]
        assert audit["action"] == "dlq_replay" and audit["filter"]["group"] == G_IM, audit
        assert audit["filter"]["seq"] == one["seq"] and audit["count"] == 1, audit
        rc, out, err = ctl(cfg, "dlq", "show", "x")
        assert rc == 2, (rc, out, err)

        # discard: the dead letter goes, its key stays dead (never handled)
        two = msgs[1]
        calls = len(im.calls())
        res = ctl_json(cfg, "dlq", "discard", str(two["seq"]))
        assert res["discarded"] is True and res["inbox"] == "dead", res
        state, why = inbox(tmp, two["event_id"])[0]
        assert state == "dead" and f"dead letter {two['seq']} discarded by roomctl" in why, why
        left = ctl_json(cfg, "dlq", "list")["messages"]
        assert [m["event_id"] for m in left] == [m["event_id"] for m in msgs[2:]], left
        audit = ctl_json(cfg, "audit", "list")["audits"][0]
        assert audit["action"] == "dlq_discard" and audit["count"] == 1, audit
        rc, out, err = ctl(cfg, "dlq", "discard", str(two["seq"]))
        assert rc == 1 and "404" in err, (rc, out, err)

        # purge: every dead letter of the group discarded, the keys dead
        rc, out, err = ctl(cfg, "dlq", "purge")
        assert rc == 2 and "--group" in err, (rc, err)
        res = ctl_json(cfg, "dlq", "purge", "--group", G_IM)
        assert res["discarded"] == 2 and res["skipped"] == 0, res
        assert ctl_json(cfg, "dlq", "list")["messages"] == []
        for m in msgs[2:]:
            state, why = inbox(tmp, m["event_id"])[0]
            assert state == "dead" and "discarded by roomctl" in why, (m, state, why)
        audit = ctl_json(cfg, "audit", "list")["audits"][0]
        assert audit["action"] == "dlq_purge" and audit["count"] == 2, audit
        assert audit["filter"] == {"group": G_IM}, audit
        assert ctl_json(cfg, "dlq", "purge", "--group", G_IM)["discarded"] == 0
        assert len(im.calls()) == calls, "a discarded event never reached IM"


def test_dlq_bulk_replay_discard_purge():
    """Bulk by filter (issue 29): a dry run first (matched, nothing changed), then the replay of
    both dead letters selected by group, event type and reason (the group handles them: inbox
    done); two more discarded by filter (deleted for good, the inbox keeps them dead); one more
    purged by group (purge without a group is a 400); each run one audit entry naming the
    caller with its rows; a read-only handle (dry run) changes nothing."""
    import time
    need("127.0.0.1", NATS_PORT, "nats-server")
    with im_dead_letters("dlq-bulk-") as (tmp, ns, r, nc, im, failing):
        cfg = r.cfg_path

        def dead(n):
            return wait_until(lambda: (lambda m: m if len(m) == n else None)(
                ctl_json(cfg, "dlq", "list")["messages"]), timeout=30, what=f"{n} dead letters")
        dead(2)
        sel = ["--group", G_IM, "--event-type", "RoomUserJoined", "--reason", "max_reconsume"]
        res = ctl_json(cfg, "dlq", "replay", *sel, "--dry-run")
        assert res["dry_run"] is True and res["matched"] == 2 and res["done"] == 0, res
        assert {m["event_id"] for m in res["sample"]} == set(failing), res
        assert "audit_id" not in res and len(dead(2)) == 2
        assert ctl_json(cfg, "dlq", "replay", "--event-type", "RoomCreated",
                        "--dry-run")["matched"] == 0
        rc, out, err = ctl(cfg, "dlq", "replay", "--reason", "max_reconsume", "--dry-run",
                           "--created-after", "x")
        assert rc == 2, (rc, out, err)
        im.control(reset=True)
        res = ctl_json(cfg, "dlq", "replay", *sel, "--chunk", "1")
        assert res["matched"] == 2 and res["done"] == 2 and res["failed"] == 0, res
        for key in failing:
            wait_until(lambda: db_rows(group_db(tmp, G_IM),
                                       f"SELECT state FROM inbox WHERE key = '{key}'")
                       == [("done",)], timeout=20, what="the group handled a replayed message")
        assert ctl_json(cfg, "dlq", "list")["messages"] == []
        audit = ctl_json(cfg, "audit", "list")["audits"][0]
        assert audit["action"] == "dlq_replay_all" and audit["actor"] == "roomctl", audit
        assert audit["count"] == 2 and audit["filter"]["event_type"] == "RoomUserJoined", audit

        # two more dead letters, discarded by filter
        im.control(http_status={"api": "*", "status": 502, "count": 100000})
        t0 = int(time.time() * 1000)
        st, _, js = r.post(f"/v1/rooms/{failing_room(r)}/join", {"command_id": "bulk-j7",
                                                                 "uid": 7})
        st2, _, _ = r.post(f"/v1/rooms/{failing_room(r)}/join", {"command_id": "bulk-j8",
                                                                 "uid": 8})
        assert st == 200 and st2 == 200, js
        two = dead(2)
        res = ctl_json(cfg, "dlq", "discard", "--group", G_IM, "--created-after", str(t0))
        assert res["matched"] == 2 and res["done"] == 2, res
        assert ctl_json(cfg, "dlq", "list")["messages"] == []
        for m in two:
            assert db_rows(group_db(tmp, G_IM), f"SELECT state FROM inbox WHERE key = "
                                                f"'{m['event_id']}'") == [("dead",)]
        top = ctl_json(cfg, "audit", "list")["audits"][0]
        assert top["action"] == "dlq_discard_all" and top["count"] == 2, top

        # one more, purged by group
        r.post(f"/v1/rooms/{failing_room(r)}/join", {"command_id": "bulk-j9", "uid": 9})
        dead(1)
        rc, out, err = ctl(cfg, "dlq", "purge")
        assert rc == 2 and "group" in err, (rc, out, err)
        res = ctl_json(cfg, "dlq", "purge", "--group", G_IM)
        assert ctl_json(cfg, "dlq", "list")["messages"] == [], res
        audit = ctl_json(cfg, "audit", "list")["audits"][0]
        assert audit["action"] == "dlq_purge" and audit["count"] == 1, audit


def failing_room(r):
    """The room of im_dead_letters (its only one)."""
    st, _, js = r.http("GET", "/v1/rooms")
    return js["rooms"][0]["room_id"]


if __name__ == "__main__":
    run([test_dlq_list_show_replay_discard_purge, test_dlq_bulk_replay_discard_purge])
