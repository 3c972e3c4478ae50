# SPDX-License-Identifier: Apache-2.0
"""test_roomctl_admin: roomctl's operator commands against a real roomd's store.

roomd's log sink writes to /dev/full, so real commands leave failed rows. roomctl then
summarizes and lists them by filter (table and --json), dry-runs a bulk replay (count and
sample, nothing changed), replays by filter with a progress bar on a terminal (rows/s,
ETA), and the audit shows who replayed what; after a restart with a working sink every
replayed event is delivered once. Inspection never creates a store: a mistyped SQLite
path fails with exit 1 and no file. Bad options and values exit 2."""
import json
import os
import pty
import select
import subprocess
import sys
import uuid

sys.path.insert(0, os.path.dirname(__file__))
from roomd_test import Roomd, run, wait_until  # noqa: E402
from roomctl_util import ROOMCTL, ctl, ctl_json  # noqa: E402

def ctl_tty(cfg, *args):
    """roomctl with its stdout on a pseudo-terminal; returns (rc, output)."""
    master, slave = pty.openpty()
    p = subprocess.Popen([ROOMCTL, "-c", cfg, *args], stdout=slave, stderr=subprocess.PIPE)
    os.close(slave)
    out = b""
    while True:
        r, _, _ = select.select([master], [], [], 30)
        if not r:
            break
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    p.wait(30)
    os.close(master)
    return p.returncode, out.decode(errors="replace")


def failing_roomd():
    rd = Roomd({"outbox_worker": {"max_retry_count": 1, "initial_backoff": "50ms",
                                  "max_backoff": "50ms", "poll_interval": "50ms",
                                  "log_sink": {"enabled": True, "path": "/dev/full"}}})
    return rd.start()


def make_failed(rd, rooms, joins):
    for i in range(rooms):
        rid = f"bulk{i}"
        st, _, js = rd.post("/v1/rooms", {"command_id": f"c-{rid}-{uuid.uuid4().hex[:6]}",
                                          "room_id": rid, "owner_uid": 7, "title": "t"})
        assert st == 201, (st, js)
        for u in range(joins):
            st, _, js = rd.post(f"/v1/rooms/{rid}/join",
                                {"command_id": f"j-{rid}-{u}", "uid": 100 + u})
            assert st == 200, (st, js)
    total = rooms * (1 + joins)
    wait_until(lambda: ctl_json(rd.cfg_path, "outbox", "summary")["by_status"]["failed"]
               == total, timeout=30, what=f"{total} failed rows")
    return total


def test_inspection_never_creates():
    rd = Roomd()  # never started: its SQLite file does not exist
    path = rd.cfg["store"]["sqlite"]["path"]
    for args in (["outbox", "summary"], ["outbox", "counts"], ["outbox", "list"],
                 ["outbox", "show", str(uuid.uuid4())], ["audit", "list"],
                 ["outbox", "replay", "--status", "failed", "--dry-run"],
                 ["wallet", "balance", "5"]):
        rc, out, err = ctl(rd.cfg_path, *args)
        assert rc == 1 and "does not exist" in err, (args, rc, out, err)
        assert not os.path.exists(path), f"{args} created {path}"


def test_filter_dry_run_replay_audit_progress():
    rd = failing_roomd()
    total = make_failed(rd, 30, 2)
    cfg = rd.cfg_path
    s = ctl_json(cfg, "outbox", "summary")
    assert s["sinks"]["log"]["failed"] == total, s
    rc, out, err = ctl(cfg, "outbox", "summary")
    assert rc == 0 and f"failed      {total}" in out and "SINK" in out, out

    joins = ctl_json(cfg, "outbox", "list", "--status", "failed", "--event-type",
                     "RoomUserJoined", "--limit", "500")["rows"]
    assert len(joins) == 60 and all(r["event_type"] == "RoomUserJoined" for r in joins)
    one = ctl_json(cfg, "outbox", "list", "--room", "bulk3", "--sink", "log")["rows"]
    assert len(one) == 3, one
    rc, out, err = ctl(cfg, "outbox", "list", "--error", "No space left", "--limit", "2")
    assert rc == 0 and out.splitlines()[0].split()[:3] == ["ID", "EVENT_ID", "STATUS"], out
    assert "# more: --after" in out, out
    shown = ctl_json(cfg, "outbox", "show", one[0]["event_id"])
    assert shown["sinks"]["log"] == "failed" and shown["event"]["room_id"] == "bulk3", shown

    dry = ctl_json(cfg, "outbox", "replay", "--event-type", "RoomCreated", "--dry-run",
                   "--sample", "3")
    assert dry["count"] == 30 and len(dry["sample"]) == 3, dry
    assert ctl_json(cfg, "outbox", "summary")["by_status"]["failed"] == total  # unchanged
    rd.stop()

    # a bulk replay on a terminal shows its progress, in chunks of 7
    rc, out = ctl_tty(cfg, "outbox", "replay", "--status", "failed", "--chunk", "7")
    assert rc == 0, out
    assert "rows/s" in out and "ETA" in out and f"{total}/{total} rows" in out, out
    assert f"replayed {total} rows" in out, out
    audits = ctl_json(cfg, "audit", "list")["audits"]
    assert audits[0]["actor"] == "roomctl" and audits[0]["count"] == total, audits
    assert audits[0]["state"] == "done" and audits[0]["filter"] == {"status": "failed"}
    detail = ctl_json(cfg, "audit", "show", str(audits[0]["id"]), "--limit", "5000")
    assert len(detail["rows"]) == total and len({r["id"] for r in detail["rows"]}) == total
    rc, out, err = ctl(cfg, "audit", "list")
    assert rc == 0 and "roomctl" in out and '{"status":"failed"}' in out, out

    # a working sink delivers each replayed event once, under its own event_id
    rd.cfg["outbox_worker"]["log_sink"]["path"] = os.path.join(rd.tmp, "events.jsonl")
    with open(rd.cfg_path, "w") as f:
        json.dump(rd.cfg, f)
    rd.start()
    wait_until(lambda: len(rd.events()) >= total, timeout=30, what="replayed events delivered")
    ids = [e["event_id"] for e in rd.events()]
    assert len(ids) == total and len(set(ids)) == total
    assert {r["event_id"] for r in detail["rows"]} == set(ids)
    rd.stop()


def test_usage_and_bad_values():
    rd = failing_roomd()
    make_failed(rd, 1, 0)
    cfg = rd.cfg_path
    for args in (["outbox", "list", "--status", "nope"], ["outbox", "list", "--sink", "fax"],
                 ["outbox", "list", "--limit", "0"], ["outbox", "list", "--bogus", "1"],
                 ["outbox", "replay"], ["outbox", "replay", "--status", "pending"],
                 ["outbox", "replay", "--created-after", "yesterday", "--dry-run"],
                 ["audit", "show", "x"], ["outbox", "show"]):
        rc, out, err = ctl(cfg, *args)
        assert rc == 2, (args, rc, out, err)
    rc, out, err = ctl(cfg, "--json", "outbox", "list", "--sink", "fax")
    assert rc == 2 and json.loads(out)["error"]["field"] == "sink", (out, err)
    rc, out, err = ctl(cfg, "--help")
    assert rc == 0 and "exit status" in out and err == "", (rc, out, err)
    rd.stop()


if __name__ == "__main__":
    run([test_inspection_never_creates, test_filter_dry_run_replay_audit_progress,
         test_usage_and_bad_values])
