#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""capacity_model.py [--rates 10000,100000,1000000] [--seconds S] [--seed N]: the capacity model
of docs/scale.md, and a simulation of it.

The model: a command costs roomd CPU (HTTP, JSON, apply, group commit) on the node that owns its
room, and database CPU plus a share of a group-commit transaction on the store cluster (shard)
that holds the room. Costs are the measured ones of bench/README.md (2 vCPU EPYC, MariaDB 10.11,
64 clients; see MEASURED). For a target rate it gives the roomd nodes, the store shards (3-node
Galera clusters) and the bytes written per second, then SIMULATES one shard at its share of the
load: commands arrive (Poisson) on its rooms, a room's commands are serialized (a cell waits for
its commit), each batch is one transaction of up to GROUP_MAX commands whose time is the commit
latency (fsync + one Galera round trip) plus its database CPU on the writer node, with
BATCHES_IN_FLIGHT leaders at once (src/store/group_commit.c). The simulation reports the
throughput reached, the batch size and the p50/p99 of the commit wait, so the shard count the
model picks can be checked against queueing, not only against averages.

Prints one table row per rate. Pure Python, no dependency; `--check` asserts the model's
invariants (used by tests/integ/test_capacity_model.py).
"""
import argparse
import heapq
import math
import random
import sys

# Measured (bench/README.md: issue 13 rounds, 64 clients, MariaDB; the ranges are the rounds').
MEASURED = {
    "roomd_cpu_ms": 0.26,        # roomd CPU per command: 212-304 us
    "db_cpu_ms_small_batch": 0.38,  # mariadbd CPU per command at ~20 commands/batch: 336-489 us
    "db_cpu_ms_big_batch": 0.07,    # store-only bench_mysql group, ~37/batch: 67-101 us
    "statements_per_cmd": 0.75,  # 0.68-0.81 at 64 clients
    "log_row_bytes": 589,        # command-log row, 150-member room (issue 11)
    "outbox_row_bytes": 450,     # estimate: ids, payload ~200 B, indexes
}
# Assumptions of the production shape (docs/scale.md says why).
NODE_CORES = 8            # a roomd node
DB_CORES = 16             # the Galera writer node of a shard
TARGET_UTIL = 0.6         # plan to 60% of the cores (headroom for a failover: +50% load)
COMMIT_MS = 2.0           # fsync (~1 ms on NVMe) + one Galera certification round trip (LAN)
GROUP_MAX = 64            # store.group_commit_max
BATCHES_IN_FLIGHT = 3     # store.mysql.batches_in_flight on a database host of its own
ROOMS_PER_SHARD = 20000   # active rooms of one shard in the simulation


def db_cpu_ms(batch):
    """Database CPU per command for a batch of this size: a fixed cost per transaction
    (COMMIT, round trips) spread over the batch, plus a per-row cost, fitted to the two
    measured points (20 -> 0.38 ms, 37 -> 0.07 ms is store-only; use the roomd one as the
    upper bound and the store-only as the row cost)."""
    row = MEASURED["db_cpu_ms_big_batch"]
    fixed = (MEASURED["db_cpu_ms_small_batch"] - row) * 20  # ms per transaction
    return row + fixed / max(batch, 1)


def shard_capacity():
    """Commands/s one shard sustains at TARGET_UTIL: the smaller of its CPU bound (full
    batches) and its commit bound (BATCHES_IN_FLIGHT batches of GROUP_MAX per commit)."""
    cpu = DB_CORES * TARGET_UTIL * 1000.0 / db_cpu_ms(GROUP_MAX)
    commit = BATCHES_IN_FLIGHT * GROUP_MAX * 1000.0 / (COMMIT_MS + GROUP_MAX * db_cpu_ms(GROUP_MAX)
                                                       / DB_CORES)
    return min(cpu, commit * TARGET_UTIL), cpu, commit


def plan(rate):
    node_cap = NODE_CORES * TARGET_UTIL * 1000.0 / MEASURED["roomd_cpu_ms"]
    cap, _, _ = shard_capacity()
    shards = max(1, math.ceil(rate / cap))
    return {
        "rate": rate,
        "roomd_nodes": max(2, math.ceil(rate / node_cap)),
        "shards": shards,
        "db_servers": shards * 3,
        "per_shard": rate / shards,
        "statements_s": rate * MEASURED["statements_per_cmd"],
        "write_mb_s": rate * (MEASURED["log_row_bytes"] + MEASURED["outbox_row_bytes"]) / 1e6,
    }


def simulate(rate, seconds, seed):
    """One shard's group commit at `rate` commands/s for `seconds` (simulated). Returns
    (throughput, mean batch, p50 ms, p99 ms) of the time from arrival to commit."""
    rng = random.Random(seed)
    t, arrivals = 0.0, []
    while t < seconds:
        t += rng.expovariate(rate)
        arrivals.append((t, rng.randrange(ROOMS_PER_SHARD)))
    room_busy = {}      # room -> time its last command commits (a cell is serialized)
    queue = []          # heap of (ready_time, arrival_time): commands ready to join a batch
    for at, room in arrivals:
        ready = max(at, room_busy.get(room, 0.0))
        room_busy[room] = ready  # refined below when its batch commits
        heapq.heappush(queue, (ready, at, room))
    leaders = [0.0] * BATCHES_IN_FLIGHT   # when each in-flight slot is free
    waits, batches, done = [], [], 0
    while queue:
        slot = min(range(BATCHES_IN_FLIGHT), key=lambda i: leaders[i])
        start = max(leaders[slot], queue[0][0])
        batch = []
        while queue and queue[0][0] <= start and len(batch) < GROUP_MAX:
            batch.append(heapq.heappop(queue))
        n = len(batch)
        commit = start + (COMMIT_MS + n * db_cpu_ms(n) / DB_CORES) / 1000.0
        leaders[slot] = commit
        for _, at, room in batch:
            waits.append(commit - at)
            room_busy[room] = max(room_busy[room], commit)
        batches.append(n)
        done = max(done, commit)
    waits.sort()
    return (len(waits) / done, sum(batches) / len(batches), waits[len(waits) // 2] * 1000,
            waits[int(len(waits) * 0.99)] * 1000)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rates", default="10000,100000,1000000")
    ap.add_argument("--seconds", type=float, default=2.0, help="simulated seconds per shard")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--check", action="store_true", help="assert the model's invariants")
    a = ap.parse_args()
    cap, cpu, commit = shard_capacity()
    print(f"# one shard: {cap:,.0f} commands/s planned (CPU bound {cpu:,.0f}/s at "
          f"{TARGET_UTIL:.0%} of {DB_CORES} cores, commit bound {commit:,.0f}/s); one roomd node "
          f"{NODE_CORES * TARGET_UTIL * 1000 / MEASURED['roomd_cpu_ms']:,.0f}/s")
    print("| commands/s | roomd nodes | shards (3 Galera each) | DB servers | per shard | "
          "statements/s | log+outbox MB/s | simulated shard: cmd/s, batch, p50, p99 |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    rows = []
    for rate in (int(r) for r in a.rates.split(",")):
        p = plan(rate)
        thr, batch, p50, p99 = simulate(p["per_shard"], a.seconds, a.seed)
        rows.append((p, thr, batch, p50, p99))
        print(f"| {rate:,} | {p['roomd_nodes']} | {p['shards']} | {p['db_servers']} | "
              f"{p['per_shard']:,.0f} | {p['statements_s']:,.0f} | {p['write_mb_s']:.1f} | "
              f"{thr:,.0f}/s, {batch:.1f}, {p50:.1f} ms, {p99:.1f} ms |")
    # past its commit bound one shard queues: the simulation at 1.2x that bound
    over = simulate(commit * 1.2, a.seconds / 2, a.seed)
    print(f"# one shard at 1.2x its commit bound ({commit * 1.2:,.0f}/s offered): {over[0]:,.0f}/s, "
          f"batch {over[1]:.1f}, p50 {over[2]:.1f} ms, p99 {over[3]:.1f} ms")
    if a.check:
        for (p, thr, batch, p50, p99) in rows:
            assert abs(thr - p["per_shard"]) / p["per_shard"] < 0.1, (p, thr)  # keeps up
            assert p99 < 50, (p, p99)                                           # no queue
            assert p["per_shard"] <= cap * 1.0001
        assert [r[0]["shards"] for r in rows] == sorted(r[0]["shards"] for r in rows)
        assert over[3] > 10 * max(r[4] for r in rows), "an overloaded shard must queue"
        assert over[0] < commit * 1.05, "no shard commits past its commit bound"
        print("check: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
