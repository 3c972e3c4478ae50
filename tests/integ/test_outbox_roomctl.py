# SPDX-License-Identifier: Apache-2.0
"""test_outbox_roomctl: the dead-letter path end to end with a real roomd and roomctl.

roomd's log sink writes to /dev/full, so every write fails (ENOSPC) and the events of real
commands go retryable, then failed at max_retry_count. roomctl then lists the failed rows,
shows one with its decoded JSON, and after roomd restarts with a working sink, replays it:
the same event_id is delivered. Replaying a delivered or unknown event is refused. Also
`wallet topup` / `wallet balance`, and argument errors.

Run: python3 tests/integ/test_outbox_roomctl.py (PYTHONPATH=tests, ROOMD_BUILD_DIR=build)
"""
import json
import os
import subprocess
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(__file__))
from roomd_test import BUILD, Roomd, run, wait_until  # noqa: E402

ROOMCTL = os.path.join(BUILD, "roomctl")


def roomctl(cfg_path, *args):
    p = subprocess.run([ROOMCTL, "-c", cfg_path, *args], capture_output=True, text=True,
                       timeout=30)
    return p.returncode, p.stdout, p.stderr


def list_rows(cfg_path, *args):
    """roomctl outbox list -> [{id, event_id, status, retries, event_type}]"""
    rc, out, err = roomctl(cfg_path, "outbox", "list", *args)
    assert rc == 0, (rc, out, err)
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["ID", "EVENT_ID", "STATUS"], lines[0]
    rows = []
    for l in lines[1:]:
        if l.startswith("#"):
            continue
        f = l.split()
        rows.append({"id": int(f[0]), "event_id": f[1], "status": f[2], "retries": int(f[3]),
                     "event_type": f[4], "line": l})
    return rows


def counts(cfg_path):
    rc, out, err = roomctl(cfg_path, "outbox", "counts")
    assert rc == 0, (rc, out, err)
    return {l.split()[0]: l.split()[1] for l in out.splitlines()}


def test_dead_letter_list_show_replay():
    tmp_cfg = {"outbox_worker": {"max_retry_count": 2, "initial_backoff": "50ms",
                                 "max_backoff": "100ms", "poll_interval": "50ms",
                                 "log_sink": {"enabled": True, "path": "/dev/full"}}}
    rd = Roomd(tmp_cfg)
    rd.start()
    rid = f"ctl-{uuid.uuid4().hex[:8]}"
    st, _, js = rd.post("/v1/rooms", {"command_id": f"c-{rid}", "room_id": rid,
                                      "owner_uid": 7, "title": "dead letters"})
    assert st == 201, (st, js)
    st, _, js = rd.post(f"/v1/rooms/{rid}/join", {"command_id": f"j-{rid}", "uid": 42})
    assert st == 200, (st, js)

    wait_until(lambda: len(list_rows(rd.cfg_path, "--status", "failed")) >= 2, timeout=20,
               what="both events failed")
    failed = list_rows(rd.cfg_path, "--status", "failed")
    types = {r["event_type"] for r in failed}
    assert {"RoomCreated", "RoomUserJoined"} <= types, failed
    assert all(r["retries"] == 2 for r in failed), failed
    assert all("No space left" in r["line"] for r in failed), failed
    # one log line per attempt, no flood while the rows sit failed
    time.sleep(0.5)
    log = "\n".join(l for l in rd.log_lines() if '"mod":"outbox"' in l)
    for r in failed:
        assert log.count(r["event_id"]) == 2, (r["event_id"], log.count(r["event_id"]))
    c = counts(rd.cfg_path)
    assert int(c["failed"]) >= 2 and c["delivered"] == "0", c
    rd.stop()

    # show: the row and its decoded event
    joined = next(r for r in failed if r["event_type"] == "RoomUserJoined")
    rc, out, err = roomctl(rd.cfg_path, "outbox", "show", joined["event_id"])
    assert rc == 0, (rc, out, err)
    assert "status         failed" in out, out
    assert "retry_count    2" in out, out
    body = out[out.index("{"):]
    ev = json.loads(body)
    assert ev["event_id"] == joined["event_id"] and ev["room_id"] == rid, ev
    assert ev["event_type"] == "RoomUserJoined" and ev["payload"]["uid"] == 42, ev
    assert ev["command_id"] == f"j-{rid}", ev

    # --after / --limit page through the rows by id
    first = list_rows(rd.cfg_path, "--limit", "1")
    assert len(first) == 1
    rest = list_rows(rd.cfg_path, "--after", str(first[0]["id"]))
    assert all(r["id"] > first[0]["id"] for r in rest) and rest, rest

    # restart with a working sink; replay one event: same event_id, delivered once
    rd.cfg["outbox_worker"]["log_sink"]["path"] = os.path.join(rd.tmp, "events.jsonl")
    with open(rd.cfg_path, "w") as f:
        json.dump(rd.cfg, f)
    rd.start()
    time.sleep(0.3)
    assert rd.events() == []  # failed rows are never retried automatically
    rc, out, err = roomctl(rd.cfg_path, "outbox", "replay", joined["event_id"])
    assert rc == 0 and "replayed" in out, (rc, out, err)
    wait_until(lambda: [e for e in rd.events() if e["event_id"] == joined["event_id"]],
               timeout=10, what="replayed event delivered")
    evs = rd.events()
    assert [e["event_id"] for e in evs] == [joined["event_id"]], evs
    assert evs[0]["payload"]["uid"] == 42, evs
    rows = {r["event_id"]: r for r in list_rows(rd.cfg_path)}
    assert rows[joined["event_id"]]["status"] == "delivered", rows

    # refused: replaying a delivered event, an unknown event
    rc, out, err = roomctl(rd.cfg_path, "outbox", "replay", joined["event_id"])
    assert rc == 1 and "not failed" in err, (rc, out, err)
    rc, out, err = roomctl(rd.cfg_path, "outbox", "replay", str(uuid.uuid4()))
    assert rc == 1 and "no event" in err, (rc, out, err)
    rd.stop()


def test_wallet_and_usage():
    rd = Roomd()
    cfg = rd.cfg_path
    ref = f"t-{uuid.uuid4().hex[:8]}"
    initial = rd.cfg["wallet"]["initial_balance"]
    rc, out, err = roomctl(cfg, "wallet", "topup", "77", "250", ref)
    assert rc == 0 and int(out) == initial + 250, (rc, out, err)
    rc, out, err = roomctl(cfg, "wallet", "topup", "77", "250", ref)  # same ref: once
    assert rc == 0 and int(out) == initial + 250, (rc, out, err)
    rc, out, err = roomctl(cfg, "wallet", "balance", "77")
    assert rc == 0 and int(out) == initial + 250, (rc, out, err)
    rc, out, err = roomctl(cfg, "wallet", "balance", "77", "--app", "other")
    assert rc == 0 and int(out) == initial, (rc, out, err)
    # usage errors exit 2 and say why
    assert roomctl(cfg, "wallet", "balance", "x")[0] == 2
    assert roomctl(cfg, "wallet", "topup", "77", "-5", "r")[0] == 2
    assert roomctl(cfg, "outbox", "list", "--status", "nope")[0] == 2
    assert roomctl(cfg, "outbox", "list", "--bogus", "1")[0] == 2
    assert roomctl(cfg, "outbox", "show")[0] == 2
    rc, _, err = roomctl(cfg, "frobnicate")
    assert rc == 2 and "unknown command" in err, err
    assert roomctl(cfg, "migrate")[0] == 0


if __name__ == "__main__":
    run([test_dead_letter_list_show_replay, test_wallet_and_usage])
