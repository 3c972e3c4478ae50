#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# profile.sh BUILD_DIR STORE CLIENTS [record]: roomd's cost per command, from the kernel's
# counters rather than the wall clock (which a shared machine makes noisy). Starts roomd
# (STORE sqlite: a fresh file, synchronous=FULL; mysql: a fresh database on the mariadbd at
# 127.0.0.1:$ROOMD_MYSQL_PORT), publish_mode mq when nats answers on $ROOMD_NATS_PORT (else
# direct), drives it with bench_commands http at CLIENTS for BENCH_SECONDS (10) over
# BENCH_ROOMS (256) rooms under `perf stat -e task-clock,context-switches` and prints roomd's
# CPU time and context switches per command beside the client's rate and latencies.
# "record": `perf record -g` (cpu-clock) the load instead and print the top of the report;
# "switches": the same with the sched:sched_switch tracepoint (where roomd's threads sleep).
# On mysql it also prints the server's statements and CPU time per command (Questions, perf
# stat of the mariadbd listening on the port); on both, the outbox
# rows handed off at commit against claimed (/metrics). PROFILE_ROOMD picks
# another roomd binary (an A/B run of two builds with the same bench tools); PROFILE_EVENTS
# replaces perf stat's events (task-clock,context-switches; any other event, e.g.
# raw_syscalls:sys_enter or syscalls:sys_enter_futex, is printed per command too); PROFILE_KEEP=FILE
# keeps the perf.data of a record run for further `perf report -i FILE`.
set -eu
build=${1:?usage: profile.sh BUILD_DIR sqlite|mysql CLIENTS [record]}
store=${2:?usage: profile.sh BUILD_DIR sqlite|mysql CLIENTS [record]}
clients=${3:?usage: profile.sh BUILD_DIR sqlite|mysql CLIENTS [record]}
record=${4:-}
kind=$store # lib.sh start_roomd sets $store (its YAML)
secs=${BENCH_SECONDS:-10}
rooms=${BENCH_ROOMS:-256}
nats_port=${ROOMD_NATS_PORT:-4333}
mysql_port=${ROOMD_MYSQL_PORT:-3417}
tmp=$(mktemp -d /tmp/roomd-profile-XXXXXX)
db="roomd_prof_$$"
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; drop_streams; [ "$kind" = mysql ] && mariadb --no-defaults -h127.0.0.1 -P"$mysql_port" -uroot -e "DROP DATABASE IF EXISTS $db" 2>/dev/null; rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"
# the server's statement counter (SHOW GLOBAL STATUS Questions: every statement a client sent,
# a prepared statement's execution included)
questions() { mariadb --no-defaults -h127.0.0.1 -P"$mysql_port" -uroot -N -B -e "SHOW GLOBAL STATUS LIKE 'Questions'" | cut -f2; }

case $store in
sqlite) st="{driver: sqlite, sqlite: {path: \"$tmp/p.db\", synchronous: full}}"; spec="$tmp/p.db" ;;
mysql)  mariadb --no-defaults -h127.0.0.1 -P"$mysql_port" -uroot -e "CREATE DATABASE $db CHARACTER SET utf8mb4"
        st="{driver: mysql, mysql: {host: 127.0.0.1, port: $mysql_port, user: root, database: $db, pool_size: 8}}"
        spec="mysql://root@127.0.0.1:$mysql_port/$db" ;;
*) echo "store: sqlite or mysql" >&2; exit 2 ;;
esac
mode=direct
answers "$nats_port" && mode=mq
start_roomd prof "$st" $mode "${PROFILE_ROOMD:-$build/roomd}"

# the rooms are created (untimed) before the load: wait for that, then count the load only
"$build/bench_commands" http "http://127.0.0.1:$port" "$clients" "$rooms" "$secs" "$spec" >"$tmp/load" &
load=$!
while ! curl -sf "http://127.0.0.1:$port/v1/rooms/bench-$((rooms - 1))" >/dev/null 2>&1; do
    kill -0 $load 2>/dev/null || { echo "bench_commands ended early:" >&2; cat "$tmp/load" >&2; exit 1; }
    sleep 0.05
done
if [ -n "$record" ]; then
    event=cpu-clock
    [ "$record" = switches ] && event=sched:sched_switch
    perf record ${PERF_RECORD_OPTS:--g} -e "$event" -p "$pid" -o "$tmp/perf.data" -- sleep "$((secs - 1))" 2>/dev/null
    [ -n "${PROFILE_KEEP:-}" ] && cp "$tmp/perf.data" "$PROFILE_KEEP"
else
    srv= srvstat=
    if [ "$kind" = mysql ]; then
        q0=$(questions)
        # the server's own CPU over the same window (its work per command)
        srv=$(port_pid "$mysql_port")
        if [ -n "$srv" ]; then
            perf stat -e task-clock -p "$srv" -x, -o "$tmp/stat-srv" -- sleep "$((secs - 1))" &
            srvstat=$!
        fi
    fi
    perf stat -e ${PROFILE_EVENTS:-task-clock,context-switches} -p "$pid" -x, -o "$tmp/stat" -- sleep "$((secs - 1))"
    [ -n "$srvstat" ] && wait "$srvstat"
    [ "$kind" = mysql ] && q1=$(questions)
fi
wait $load
cat "$tmp/load"
# the outbox's rows over the whole run: handed off at commit against claimed (issue 13)
curl -sf "http://127.0.0.1:$admin_port/metrics" 2>/dev/null | awk '
    $1 == "roomd_outbox_handoff_rows_total" { h = $2 } $1 == "roomd_outbox_claimed_rows_total" { c = $2 }
    $1 == "roomd_outbox_order_busy_total" { b = $2 } $1 == "roomd_outbox_order_affine_total" { a = $2 }
    $1 == "roomd_outbox_order_held_total" { held = $2 }
    $1 == "roomd_group_commit_batches_total" { gb = $2 } $1 == "roomd_group_commit_mutations_total" { gm = $2 }
    $1 == "roomd_outbox_batches_total" { nb = $2 } $1 == "roomd_outbox_completions_total" { nc = $2 }
    END { if (h + c > 0) printf "outbox rows: %d handed off, %d claimed (%.0f%% handed off); commits: %d to the claim (room busy), %d behind their own rows; %d held\n", h, c, 100 * h / (h + c), b, a, held
          if (gb > 0) printf "group commit: %d batches, %.1f mutations each\n", gb, gm / gb
          if (nb > 0) printf "outbox batches: %d, %.1f rows each; completion transactions: %d\n", nb, (h + c) / nb, nc }' || true
ops=$(sed -n 's/.* ops=\([0-9]*\) .*/\1/p' "$tmp/load" | head -1)
if [ -n "$record" ]; then
    perf report -i "$tmp/perf.data" ${PERF_SORT:---no-children --sort dso,symbol} --stdio ${PERF_REPORT_OPTS:-} 2>/dev/null | grep -v '^#' | grep -v '^$' | head -${PERF_LINES:-60}
else
    # perf ran secs-1 of the secs seconds: scale the commands to its window
    awk -F, -v ops="$ops" -v secs="$secs" '
        $3 == "task-clock" { cpu = $1 }            # ms
        $3 == "context-switches" { cs = $1 }
        $3 != "task-clock" && $3 != "context-switches" && $3 != "" { other[$3] = $1 }
        END { n = ops * (secs - 1) / secs
              printf "roomd per command: %.0f us CPU, %.1f context switches (%d commands in the window)\n", cpu * 1000 / n, cs / n, n
              for (e in other) printf "roomd per command: %.2f %s\n", other[e] / n, e }' "$tmp/stat"
    if [ "$kind" = mysql ]; then
        awk -v q0="$q0" -v q1="$q1" -v ops="$ops" -v secs="$secs" 'BEGIN {
            n = ops * (secs - 1) / secs
            printf "MariaDB statements per command: %.2f (Questions, the whole server, in the window)\n", (q1 - q0) / n }'
        if [ -n "$srv" ]; then
            awk -F, -v ops="$ops" -v secs="$secs" '
                $3 == "task-clock" { printf "mariadbd per command: %.0f us CPU\n", $1 * 1000 / (ops * (secs - 1) / secs) }' "$tmp/stat-srv"
        fi
    fi
fi
