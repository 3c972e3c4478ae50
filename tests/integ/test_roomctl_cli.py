# SPDX-License-Identifier: Apache-2.0
"""test_roomctl_cli: roomctl's conventions (issue 29, docs/admin.md "roomctl"): `COMMAND --help`
exits 0 with the command's usage on stdout for every command `roomctl --help` lists; --json on
every command it can run here (before or after the command) prints JSON; no log line on
stderr unless --verbose, also in direct MySQL mode (the store's "mysql migration applied"
lines); the documented exit codes (0 done, 1 failed, 2 usage)."""
import json
import os
import re
import subprocess
import tempfile
import uuid

from roomd_test import env_port, mysql_query, need, run
from roomctl_util import ROOMCTL

TMP = tempfile.mkdtemp(prefix="roomd-roomctl-cli-")
MYSQL_PORT = env_port("ROOMD_MYSQL_PORT", 3417)


def rc_of(*args, cfg=None):
    cmd = [ROOMCTL] + (["-c", cfg] if cfg else []) + list(args)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def command_words():
    rc, out, _ = rc_of("--help")
    assert rc == 0, out
    words = []
    for line in out.split("commands:\n", 1)[1].splitlines():
        m = re.match(r"  ([a-z]+(?: [a-z]+)?)\b", line)
        if m and not line.startswith("  COMMAND"):
            words.append(m.group(1).split())
    assert len(words) >= 10, words
    return words


def test_help_on_every_command():
    for w in command_words():
        for flag in ("--help", "-h"):
            rc, out, err = rc_of(*w, flag)
            assert rc == 0, (w, rc, out, err)
            assert out.startswith("usage: roomctl [global options] " + " ".join(w)), (w, out)
            assert err == "", (w, err)
    rc, _, err = rc_of("outbox", "list", "--nosuch")
    assert rc == 2 and "bad option --nosuch" in err, (rc, err)
    rc, _, err = rc_of("nosuch")
    assert rc == 2 and "unknown command" in err, (rc, err)


def mysql_cfg():
    db = f"roomd_ctl_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    mysql_query(f"CREATE DATABASE {db} CHARACTER SET utf8mb4")
    path = os.path.join(TMP, "mysql.yaml")
    with open(path, "w") as f:
        json.dump({"store": {"driver": "mysql", "mysql": {
            "host": "127.0.0.1", "port": MYSQL_PORT, "user": "root", "password": "",
            "database": db}}, "wallet": {"allow_topup": True}}, f)
    return path, db


def test_json_everywhere_and_quiet_stderr():
    need("127.0.0.1", MYSQL_PORT, "mariadbd (scripts/servers.sh)")
    cfg, db = mysql_cfg()
    try:
        # the first command migrates the new database: log lines, but only with --verbose
        rc, out, err = rc_of("--verbose", "--json", "migrate", cfg=cfg)
        assert rc == 0 and json.loads(out) == {"up_to_date": True, "driver": "mysql"}, (out, err)
        assert '"mysql migration applied"' in err, err
        for args in (["--json", "migrate"], ["migrate", "--json"],
                     ["--json", "wallet", "topup", "7", "25", "ref-1"],
                     ["wallet", "balance", "7", "--json"],
                     ["--json", "wallet", "audit"],
                     ["--json", "outbox", "summary"],
                     ["--json", "outbox", "list"],
                     ["--json", "audit", "list"]):
            rc, out, err = rc_of(*args, cfg=cfg)
            assert rc == 0, (args, rc, out, err)
            assert err == "", (args, err)
            json.loads(out)
        rc, out, _ = rc_of("--json", "wallet", "balance", "7", cfg=cfg)
        js = json.loads(out)
        assert js["uid"] == 7 and js["balance"] >= 25, js
        js = json.loads(rc_of("--json", "wallet", "audit", cfg=cfg)[1])
        assert js["ok"] is True and js["offences"] == 0, js
        # plain output stays what people read
        rc, out, err = rc_of("wallet", "balance", "7", cfg=cfg)
        assert rc == 0 and out.strip().isdigit() and err == "", (out, err)
        # failures: 1, with one line of its own on stderr (not a log line)
        rc, out, err = rc_of("--json", "outbox", "show", "nosuch", cfg=cfg)
        assert rc == 1 and not err.startswith("{"), (rc, out, err)
        rc, _, err = rc_of("migrate", cfg=os.path.join(TMP, "missing.yaml"))
        assert rc == 1 and "config" in err and not err.startswith("{"), (rc, err)
        rc, _, err = rc_of("wallet", "topup", "7", "-3", "r", cfg=cfg)
        assert rc == 2 and "AMOUNT" in err, (rc, err)
    finally:
        mysql_query(f"DROP DATABASE IF EXISTS {db}")


if __name__ == "__main__":
    run([test_help_on_every_command, test_json_everywhere_and_quiet_stderr])
