# SPDX-License-Identifier: Apache-2.0
# bench/lib.sh: what run.sh and profile.sh share (sourced; sh). Needs $tmp (a scratch
# directory), $build (the build directory) and $nats_port.
answers() { python3 -c "import socket; socket.create_connection(('127.0.0.1', $1), 1)" 2>/dev/null; }
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
# drop_streams: deletes this script's JetStream streams (start_roomd's namespaces bench_$$_*)
# on 127.0.0.1:$nats_port, if it answers. For an EXIT trap: never fails.
drop_streams() { answers "$nats_port" && python3 "$(dirname "$0")/drop_streams.py" "$nats_port" "bench_$$_" || true; }

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
    for i in $(seq 100); do
        if curl -sf "http://127.0.0.1:$port/healthz" >/dev/null; then
            # the gift catalog prices SendGift (room.gift_catalog required): the benches' rose at 1
            curl -sf -H 'Content-Type: application/json' "http://127.0.0.1:$admin_port/v1/gifts" \
                -d '{"gift_id":"rose","unit_price":1}' >/dev/null
            return 0
        fi
        sleep 0.1
    done
    echo "roomd ($name) did not start" >&2; cat "$tmp/roomd-$name.log" >&2; exit 1
}
stop_roomd() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=; }


# CPU accounting of a load (issue 13: on a 2-core machine the server, roomd, the broker and
# the load generator share the cores, so a rate is bounded by their CPU per command summed).
# port_pid PORT: the pid listening on 127.0.0.1:PORT, or "" (ss, iproute2).
port_pid() { ss -Hltnp "sport = :$1" 2>/dev/null | sed -n 's/.*pid=\([0-9]*\).*/\1/p' | head -1; }
# cpu_ticks "PID..": user + system clock ticks of the PIDs so far, summed (0 for "" or a process
# gone; the galera part passes its three nodes' mariadbd as one STORE_PID list).
cpu_ticks() {
    t=0
    for p in $1; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0))); done
    echo $t
}
# children_s FILE: CPU seconds of this shell's waited-for children, from `times >FILE` (its
# second line; run in this shell, as a command substitution's subshell has no such children).
children_s() { tail -1 "$1" | awk '{split($1, u, "m"); split($2, s, "m"); print u[1] * 60 + u[2] + s[1] * 60 + s[2]}'; }
# machine_ticks: "busy total" ticks of every core (/proc/stat; idle and iowait are not busy).
machine_ticks() { awk '$1 == "cpu" {t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t}' /proc/stat; }
# cpu_begin STORE_PIDS BROKER_PID / cpu_end FILE: around a foreground load against roomd ($pid);
# cpu_end appends to FILE (a bench_commands output, whose ops= it reads, plus $rooms creates)
#   cpu    per_command_us roomd=R store=S broker=B client=C all=A machine_busy=P% roomd_switches=X
# (S and B 0 when not running; C is the load generator's own CPU, waited for; X roomd's
# context switches per command, perf stat, left out without perf).
cpu_begin() {
    cpu_store=$1 cpu_broker=$2
    cpu_r0=$(cpu_ticks "$pid") cpu_s0=$(cpu_ticks "$cpu_store") cpu_b0=$(cpu_ticks "$cpu_broker")
    times >"$tmp/times"
    cpu_c0=$(children_s "$tmp/times") cpu_m0=$(machine_ticks)
    # roomd's context switches over the load (issue 32), when perf is there: perf stat on
    # its threads, the connection threads started later included (inherited)
    cpu_perf=
    rm -f "$tmp/cs-stat"
    if command -v perf >/dev/null 2>&1; then
        perf stat -e context-switches -p "$pid" -x, -o "$tmp/cs-stat" 2>/dev/null &
        cpu_perf=$!
    fi
}
cpu_end() {
    times >"$tmp/times"
    cs=-
    if [ -n "$cpu_perf" ]; then
        kill -INT "$cpu_perf" 2>/dev/null
        wait "$cpu_perf" 2>/dev/null || true
        cs=$(awk -F, '$3 == "context-switches" { print $1 }' "$tmp/cs-stat" 2>/dev/null)
        cs=${cs:--}
    fi
    ops=$(sed -n 's/.* ops=\([0-9]*\) .*/\1/p' "$1" | head -1)
    echo "$(cpu_ticks "$pid") $(cpu_ticks "$cpu_store") $(cpu_ticks "$cpu_broker") $(children_s "$tmp/times") $(machine_ticks)" |
        awk -v r0="$cpu_r0" -v s0="$cpu_s0" -v b0="$cpu_b0" -v c0="$cpu_c0" -v m0="$cpu_m0" \
            -v n="$((${ops:-0} + rooms))" -v hz="$(getconf CLK_TCK)" -v cs="$cs" '{
            split(m0, m, " "); t = 1e6 / hz / (n > 0 ? n : 1)
            r = ($1 - r0) * t; s = ($2 - s0) * t; b = ($3 - b0) * t; c = ($4 - c0) * 1e6 / (n > 0 ? n : 1)
            printf "cpu    per_command_us roomd=%.0f store=%.0f broker=%.0f client=%.0f all=%.0f machine_busy=%.0f%%",
                r, s, b, c, r + s + b + c, 100 * ($5 - m[1]) / ($6 - m[2])
            if (cs != "-") printf " roomd_switches=%.2f", cs / (n > 0 ? n : 1)
            printf "\n"
        }' | tee -a "$1"
}
