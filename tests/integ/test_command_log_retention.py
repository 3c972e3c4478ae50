# SPDX-License-Identifier: Apache-2.0
"""The command log purge (store.retention.command_log_max_age, docs/store.md) in a running roomd
on SQLite: rows past the age and at or below the room's oldest kept snapshot are deleted, the
room loads the same after a restart, a purged command_id counts as a new command and a kept one
still replays."""
import os
import sqlite3
import sys

sys.path.insert(0, os.path.dirname(__file__))
import http_util as hu  # noqa: E402
from roomd_test import Roomd, run, wait_until  # noqa: E402

CFG = {"store": {"retention": {"command_log_max_age": "1s", "purge_interval": "200ms"}},
       "room": {"snapshot_every_n": 5, "snapshots_keep": 1}}


def log_versions(rd, room):
    db = sqlite3.connect(rd.cfg["store"]["sqlite"]["path"], timeout=10)
    try:
        return [v for (v,) in db.execute("SELECT version FROM room_command_log WHERE room_id = ?"
                                          " ORDER BY version", (room,))]
    finally:
        db.close()


def snapshot_versions(rd, room):
    db = sqlite3.connect(rd.cfg["store"]["sqlite"]["path"], timeout=10)
    try:
        return [v for (v,) in db.execute("SELECT version FROM room_snapshots WHERE room_id = ?",
                                          (room,))]
    finally:
        db.close()


def test_purge_keeps_replay():
    rd = Roomd(CFG).start()
    try:
        room = hu.room_name("ret")
        hu.expect_ok(hu.create(rd, room))
        ids = {}
        for uid in range(10, 22):  # versions 2..13: snapshots at 5, 10 (only the newest kept)
            ids[uid] = hu.cid("join")
            hu.expect_ok(hu.join(rd, room, uid, command_id=ids[uid]))
        before = hu.room_of(hu.get_room(rd, room)[2])
        oldest_snap = min(snapshot_versions(rd, room))
        assert oldest_snap == 10, snapshot_versions(rd, room)
        wait_until(lambda: log_versions(rd, room) == list(range(oldest_snap + 1, 14)),
                   timeout=15, step=0.2, what="log rows up to the oldest snapshot purged")
        assert any("purged command log rows" in ln for ln in rd.log_lines())
        rd.stop()
        rd.start()
        after = hu.room_of(hu.get_room(rd, room)[2])
        assert after == before, (before, after)
        # kept: a repeat; purged: past the idempotency window, a new command
        st, hd, _ = hu.join(rd, room, 21, command_id=ids[21])
        assert st == 200 and hd.get("Idempotent-Replay") == "true", (st, hd)
        hu.expect_ok(hu.leave(rd, room, 10))
        st, hd, js = hu.join(rd, room, 10, command_id=ids[10])
        assert st == 200 and hd.get("Idempotent-Replay") != "true", (st, hd, js)
        assert 10 in hu.members(hu.room_of(hu.expect_ok(hu.get_room(rd, room)))), js
    finally:
        rd.stop()


if __name__ == "__main__":
    run([test_purge_keeps_replay])
