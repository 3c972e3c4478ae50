# SPDX-License-Identifier: Apache-2.0
"""roomctl_util: running the built roomctl from a test (test_roomctl_admin, test_dlq_admin)."""
import json
import os
import subprocess

from roomd_test import BUILD

ROOMCTL = os.path.join(BUILD, "roomctl")


def ctl(cfg, *args):
    """roomctl -c cfg args... -> (exit status, stdout, stderr)."""
    p = subprocess.run([ROOMCTL, "-c", cfg, *args], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def ctl_json(cfg, *args):
    """roomctl -c cfg --json args..., which must succeed -> the parsed JSON."""
    rc, out, err = ctl(cfg, "--json", *args)
    assert rc == 0, (args, rc, out, err)
    return json.loads(out)
