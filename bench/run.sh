#!/bin/sh
# run.sh BUILD_DIR: the command-path benchmark of issue 2 (bench/README.md). Starts roomd on a
# fresh SQLite file (synchronous=FULL, 2 outbox workers), drives it over HTTP at concurrency 1
# and 64 and over gRPC at 64 (the same mix through the same room service), stops it, then
# measures the raw one-transaction-per-command rate of the same rows
# into the same file at concurrency 64. Two passes: publish_mode direct (log sink), then, when
# nats-server answers on 127.0.0.1:$ROOMD_NATS_PORT (4333), publish_mode mq (JetStream, the
# outbox hand-off relaying every event); then the direct pass again with auth.mode jwt, HS256
# and ES256 (issue 11: commands/s with JWT verification on vs off); then bench/readyz.py
# (/readyz at BENCH_OUTBOX_ROWS outbox rows). Figures, not assertions.
set -eu
build=${1:-build}
secs=${BENCH_SECONDS:-10}
rooms=${BENCH_ROOMS:-256}
nats_port=${ROOMD_NATS_PORT:-4333}
tmp=$(mktemp -d /tmp/roomd-bench-XXXXXX)
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; rm -rf "$tmp"' EXIT

# roomd MODE [ROOMD [MIX]]: writes the config, starts ROOMD (default $build/roomd) on a fresh
# file, drives it at concurrency 1 and 64 with bench_commands (MIX "gifts": SendGift only), stops it.
run_roomd() {
    mode=$1
    bin=${2:-$build/roomd}
    mix=${3:-}
    port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
    gport=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
    admin_port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
    db="$tmp/bench-$mode$mix-$(basename "$(dirname "$bin")").db"
    rm -f "$db"*
    auth=""
    token=""
    case $mode in
    jwt-*)  token=$(python3 "$(dirname "$0")/jwt_setup.py" "${mode#jwt-}" "$tmp")
            auth=$(cat "$tmp/auth.yaml") ;;
    esac
    case $mode in
    direct|jwt-*) sink="outbox_worker: {publish_mode: direct, workers: 2, poll_interval: 1s, batch_size: 100,
  log_sink: {enabled: true, path: \"$tmp/events.jsonl\"}}"
            broker="" ;;
    mq)     sink="outbox_worker: {publish_mode: mq, workers: 2, poll_interval: 1s, batch_size: 100}"
            broker="rocketmq: {enabled: true, name_servers: [\"nats://127.0.0.1:$nats_port\"],
  namespace: \"bench_$$_\", stream_max_age: 5m, room_outbox: {enabled: true}}" ;;
    esac
    cat >"$tmp/bench-$mode.yaml" <<YAML
app: {log_file: "$tmp/roomd-$mode.log", log_level: warn}
http: {listen: "127.0.0.1:$port", max_connections: 1024}
grpc: {listen: "127.0.0.1:$gport", workers: 64}
admin: {listen: "127.0.0.1:$admin_port"}
store: {driver: sqlite, sqlite: {path: "$db", synchronous: full}}
room: {snapshot_every_n: 50, max_creates_per_minute: 0}
wallet: {initial_balance: 1000000000}
$sink
$broker
$auth
YAML
    "$bin" -c "$tmp/bench-$mode.yaml" &
    pid=$!
    for i in $(seq 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
    echo "== $bin over HTTP, then gRPC, $mode ${mix:+(mix $mix) }($rooms rooms, ${secs}s each)"
    BENCH_MIX=$mix ROOMD_BENCH_TOKEN=$token "$build/bench_commands" http "http://127.0.0.1:$port" 1 "$rooms" "$secs" "$db"
    BENCH_MIX=$mix ROOMD_BENCH_TOKEN=$token "$build/bench_commands" http "http://127.0.0.1:$port" 64 "$rooms" "$secs" "$db"
    # gRPC beside it (docs/grpc.md); without a token only (the gRPC load sends no metadata)
    [ -n "$token" ] || BENCH_MIX=$mix "$build/bench_commands" grpc "127.0.0.1:$gport" 64 "$rooms" "$secs" "$db"
    kill $pid; wait $pid 2>/dev/null || true
    pid=
}

# the gift path alone (issue 10): SendGift only, paid from the embedded wallet; with
# BENCH_BASELINE=DIR (a build of the version to compare with) its roomd runs first, same run
if [ -n "${BENCH_BASELINE:-}" ]; then
    run_roomd direct "$BENCH_BASELINE/roomd" gifts
fi
run_roomd direct "$build/roomd" gifts
run_roomd direct
if python3 -c "import socket,sys; socket.create_connection(('127.0.0.1', $nats_port), 1)" 2>/dev/null; then
    run_roomd mq
else
    echo "== (no nats-server on 127.0.0.1:$nats_port: the mq pass is skipped)"
fi
# issue 11: the same direct pass with JWT verification on every request (a service token)
run_roomd jwt-HS256
run_roomd jwt-ES256
echo "== raw baseline: same rows, one transaction per command, same SQLite file"
"$build/bench_commands" raw "$tmp/bench-direct-$(basename "$build").db" 64 "$secs"
python3 "$(dirname "$0")/readyz.py" "$build"
