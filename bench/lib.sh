# bench/lib.sh: what run.sh and profile.sh share (sourced; sh). Needs $tmp (a scratch
# directory), $build (the build directory) and $nats_port.
answers() { python3 -c "import socket; socket.create_connection(('127.0.0.1', $1), 1)" 2>/dev/null; }
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }

# roomd NAME STORE_YAML MODE [ROOMD]: writes the config, starts ROOMD ($build/roomd), waits
# for /healthz. MODE is direct (log sink), mq (JetStream), or jwt-HS256 / jwt-ES256 (direct
# with auth.mode jwt: bench/jwt_setup.py writes the auth section and $token gets a service
# token for ROOMD_BENCH_TOKEN). Sets $port, $grpc_port (grpc.listen; "" for another ROOMD),
# $pid and $token ("" without jwt).
start_roomd() {
    name=$1 store=$2 mode=$3 bin=${4:-$build/roomd}
    port=$(free_port)
    admin_port=$(free_port)
    # grpc.listen for this build's roomd only (a BENCH_BASELINE build may predate it)
    grpc_port=""
    grpc=""
    if [ "$bin" = "$build/roomd" ]; then
        grpc_port=$(free_port)
        grpc="grpc: {listen: \"127.0.0.1:$grpc_port\", workers: 64}"
    fi
    auth=""
    token=""
    case $mode in
    jwt-*)  token=$(python3 "$(dirname "$0")/jwt_setup.py" "${mode#jwt-}" "$tmp")
            auth=$(cat "$tmp/auth.yaml") ;;
    esac
    case $mode in
    direct|jwt-*) sink="outbox_worker: {publish_mode: direct, workers: 2, poll_interval: 1s, batch_size: 100,
  log_sink: {enabled: true, path: \"$tmp/events-$name.jsonl\"}}"
            broker="" ;;
    mq)     sink="outbox_worker: {publish_mode: mq, workers: 2, poll_interval: 1s, batch_size: 100}"
            broker="rocketmq: {enabled: true, name_servers: [\"nats://127.0.0.1:$nats_port\"],
  namespace: \"bench_$$_${name}_\", stream_max_age: 5m, room_outbox: {enabled: true}}" ;;
    esac
    cat >"$tmp/$name.yaml" <<YAML
app: {log_file: "$tmp/roomd-$name.log", log_level: warn}
http: {listen: "127.0.0.1:$port", max_connections: 1024, max_connections_per_ip: 0}
admin: {listen: "127.0.0.1:$admin_port"}
$grpc
store: $store
room: {snapshot_every_n: 50, max_creates_per_minute: 0, max_rooms_per_owner: 0}
wallet: {initial_balance: 1000000000}
$sink
$broker
$auth
YAML
    "$bin" -c "$tmp/$name.yaml" &
    pid=$!
    for i in $(seq 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && return 0; sleep 0.1; done
    echo "roomd ($name) did not start" >&2; cat "$tmp/roomd-$name.log" >&2; exit 1
}
stop_roomd() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=; }

