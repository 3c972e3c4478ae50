#!/bin/sh
# run.sh BUILD_DIR: the command-path benchmark of issue 2. Starts roomd on a fresh SQLite
# file (synchronous=FULL, log sink on, 2 outbox workers), drives it over HTTP at
# concurrency 1 and 64, stops it, then measures the raw one-transaction-per-command
# rate of the same rows into the same file at concurrency 64. Figures, not assertions.
set -eu
build=${1:-build}
secs=${BENCH_SECONDS:-10}
rooms=${BENCH_ROOMS:-256}
tmp=$(mktemp -d /tmp/roomd-bench-XXXXXX)
port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
cat >"$tmp/bench.yaml" <<YAML
app: {log_file: "$tmp/roomd.log", log_level: warn}
http: {listen: "127.0.0.1:$port", max_connections: 1024}
store: {driver: sqlite, sqlite: {path: "$tmp/bench.db", synchronous: full}}
room: {snapshot_every_n: 50}
wallet: {initial_balance: 1000000000}
outbox_worker: {publish_mode: direct, workers: 2, poll_interval: 1s, batch_size: 100,
  log_sink: {enabled: true, path: "$tmp/events.jsonl"}}
YAML
"$build/roomd" -c "$tmp/bench.yaml" &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for i in $(seq 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
echo "== roomd over HTTP ($rooms rooms, ${secs}s each)"
"$build/bench_commands" http "http://127.0.0.1:$port" 1 "$rooms" "$secs" "$tmp/bench.db"
"$build/bench_commands" http "http://127.0.0.1:$port" 64 "$rooms" "$secs" "$tmp/bench.db"
kill $pid; wait $pid 2>/dev/null || true
trap - EXIT
echo "== raw baseline: same rows, one transaction per command, same SQLite file"
"$build/bench_commands" raw "$tmp/bench.db" 64 "$secs"
rm -rf "$tmp"
