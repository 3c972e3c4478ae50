#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# grpc_ab.sh BUILD_DIR STORE [ROOMD...]: gRPC beside HTTP on the same roomd, by cost
# (issue 32: gRPC >= 0.9x HTTP at 64 clients). For each ROOMD (default $BUILD_DIR/roomd;
# several for an A/B, run back to back, the list repeated BENCH_ROUNDS (1) times) it starts
# roomd (STORE sqlite: a fresh file, synchronous=FULL; mysql: a fresh database on the
# mariadbd at 127.0.0.1:$ROOMD_MYSQL_PORT), publish_mode mq when nats answers on
# $ROOMD_NATS_PORT (else direct), grpc.workers 64, then drives it with bench_commands http
# and then grpc at 64 clients over BENCH_ROOMS (256) rooms for BENCH_SECONDS (10) each, and
# counts, after the first second (room creation), `perf stat -e task-clock,context-switches`
# of roomd and the task-clock of the load generator. One line per pass:
#   ab ROOMD PROTO rate=N/s p50=Pms p99=Qms err=E roomd_us=R cs=C client_us=L load=1-minute load average
# then per ROOMD the ratio gRPC/HTTP of the rates. Figures, not assertions.
# CLIENT_POLL=poll runs the load generator with GRPC_POLL_STRATEGY=poll (each client thread
# polls its own connection; an experiment, not what run.sh does).
set -eu
build=${1:?usage: grpc_ab.sh BUILD_DIR sqlite|mysql [ROOMD...]}
kind=${2:?usage: grpc_ab.sh BUILD_DIR sqlite|mysql [ROOMD...]}
shift 2
[ $# -gt 0 ] || set -- "$build/roomd"
secs=${BENCH_SECONDS:-10}
rooms=${BENCH_ROOMS:-256}
rounds=${BENCH_ROUNDS:-1}
nats_port=${ROOMD_NATS_PORT:-4333}
mysql_port=${ROOMD_MYSQL_PORT:-3417}
tmp=$(mktemp -d /tmp/roomd-grpcab-XXXXXX)
pid=
dbs=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; drop_streams; for d in $dbs; do mariadb --no-defaults -h127.0.0.1 -P"$mysql_port" -uroot -e "DROP DATABASE IF EXISTS $d" 2>/dev/null; done; rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"
mode=direct
answers "$nats_port" && mode=mq

# pass NAME PROTO ADDR SPEC: one 64-client load with the counters; prints its "ab" line.
pass() {
    env ${CLIENT_POLL:+GRPC_POLL_STRATEGY=$CLIENT_POLL} "$build/bench_commands" "$2" "$3" 64 "$rooms" "$secs" "$4" >"$tmp/load" &
    load=$!
    sleep 1
    w=$((secs - 2))
    perf stat -e task-clock -p "$load" -x, -o "$tmp/stat-client" -- sleep "$w" &
    cstat=$!
    perf stat -e task-clock,context-switches -p "$pid" -x, -o "$tmp/stat" -- sleep "$w"
    wait "$cstat"
    wait "$load"
    la=$(cut -d' ' -f1 /proc/loadavg)
    rate=$(sed -n 's/.* rate=\([0-9]*\).*/\1/p' "$tmp/load" | head -1)
    p50=$(sed -n "s/.* p50=\([0-9.]*\)ms.*/\1/p" "$tmp/load" | head -1)
    p99=$(sed -n "s/.* p99=\([0-9.]*\)ms.*/\1/p" "$tmp/load" | head -1)
    err=$(sed -n "s/.* err=\([0-9]*\) .*/\1/p" "$tmp/load" | head -1)
    awk -F, -v rate="$rate" -v w="$w" -v name="$1" -v proto="$2" -v la="$la" -v p50="$p50" -v p99="$p99" -v err="$err" -v cf="$tmp/stat-client" '
        BEGIN { while ((getline l < cf) > 0) { split(l, f, ","); if (f[3] == "task-clock") ccpu = f[1] } }
        $3 == "task-clock" { cpu = $1 }
        $3 == "context-switches" { cs = $1 }
        END { n = rate * w
              printf "ab %s %-4s rate=%d/s p50=%sms p99=%sms err=%s roomd_us=%.1f cs=%.2f client_us=%.1f load=%s\n", name, proto, rate, p50, p99, err, cpu * 1000 / n, cs / n, ccpu * 1000 / n, la }' "$tmp/stat"
}

i=0
r=0
while [ $r -lt "$rounds" ]; do
    for bin in "$@"; do
        i=$((i + 1))
        case $kind in
        sqlite) st="{driver: sqlite, sqlite: {path: \"$tmp/p$i.db\", synchronous: full}}"; spec="$tmp/p$i.db" ;;
        mysql)  db="roomd_grpcab_$$_$i"; dbs="$dbs $db"
                mariadb --no-defaults -h127.0.0.1 -P"$mysql_port" -uroot -e "CREATE DATABASE $db CHARACTER SET utf8mb4"
                st="{driver: mysql, mysql: {host: 127.0.0.1, port: $mysql_port, user: root, database: $db, pool_size: 8}}"
                spec="mysql://root@127.0.0.1:$mysql_port/$db" ;;
        *) echo "store: sqlite or mysql" >&2; exit 2 ;;
        esac
        # start_roomd sets grpc.listen for $build/roomd only: point $build at bin's directory
        tools=$build
        build=$(dirname "$bin")
        start_roomd "ab$i" "$st" $mode "$build/roomd"
        build=$tools
        name=$(dirname "$bin" | sed 's|.*/||')
        pass "$name" http "http://127.0.0.1:$port" "$spec" | tee -a "$tmp/ab"
        pass "$name" grpc "127.0.0.1:$grpc_port" "$spec" | tee -a "$tmp/ab"
        stop_roomd
    done
    r=$((r + 1))
done
awk '$1 == "ab" { split($4, a, "="); v = a[2] + 0; if ($3 == "http") h[$2] += v; else g[$2] += v }
     END { for (k in h) printf "ab %s grpc/http=%.2f\n", k, g[k] / h[k] }' "$tmp/ab"
