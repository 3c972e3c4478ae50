# bench/lib.sh: what run.sh and profile.sh share (sourced; sh). Needs $tmp (a scratch
# directory), $build (the build directory) and $nats_port.
answers() { python3 -c "import socket; socket.create_connection(('127.0.0.1', $1), 1)" 2>/dev/null; }
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }

# roomd NAME STORE_YAML SINK: writes the config, starts roomd, waits for /healthz.
# SINK is direct or mq. Sets $port and $pid.
start_roomd() {
    name=$1 store=$2 mode=$3
    port=$(free_port)
    case $mode in
    direct) sink="outbox_worker: {publish_mode: direct, workers: 2, poll_interval: 1s, batch_size: 100,
  log_sink: {enabled: true, path: \"$tmp/events-$name.jsonl\"}}"
            broker="" ;;
    mq)     sink="outbox_worker: {publish_mode: mq, workers: 2, poll_interval: 1s, batch_size: 100}"
            broker="rocketmq: {enabled: true, name_servers: [\"nats://127.0.0.1:$nats_port\"],
  namespace: \"bench_$$_${name}_\", stream_max_age: 5m, room_outbox: {enabled: true}}" ;;
    esac
    cat >"$tmp/$name.yaml" <<YAML
app: {log_file: "$tmp/roomd-$name.log", log_level: warn}
http: {listen: "127.0.0.1:$port", max_connections: 1024}
store: $store
room: {snapshot_every_n: 50}
wallet: {initial_balance: 1000000000}
$sink
$broker
YAML
    "$build/roomd" -c "$tmp/$name.yaml" &
    pid=$!
    for i in $(seq 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && return 0; sleep 0.1; done
    echo "roomd ($name) did not start" >&2; cat "$tmp/roomd-$name.log" >&2; exit 1
}
stop_roomd() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=; }

