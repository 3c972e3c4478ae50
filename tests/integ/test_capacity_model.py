# SPDX-License-Identifier: Apache-2.0
"""test_capacity_model: scripts/capacity_model.py (docs/scale.md) runs, and its invariants hold:
each planned shard keeps up with its share in the simulation with a p99 under 50 ms, the shard
count grows with the rate, and a shard offered more than its commit bound queues (its p99 ten
times the planned ones) without committing past the bound."""
import os
import subprocess
import sys

from roomd_test import SOURCE, run


def test_model_check():
    p = subprocess.run([sys.executable, os.path.join(SOURCE, "scripts", "capacity_model.py"),
                        "--check", "--seconds", "1"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "check: ok" in p.stdout, p.stdout
    assert "| 1,000,000 |" in p.stdout, p.stdout


if __name__ == "__main__":
    run([test_model_check])
