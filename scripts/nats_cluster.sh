#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# nats_cluster.sh start|stop|kill|restart DIR [N]: a 3-server nats-server cluster with
# JetStream (R3 streams need three servers), all on 127.0.0.1, for the cluster tests.
#   start DIR           needs ROOMD_NATS_CLUSTER_PORTS="c1 c2 c3 r1 r2 r3": three client
#                       ports and three route ports (the tests pick free ones at run time)
#   stop DIR            stops every server of the cluster (SIGTERM; SIGKILL after 10 s)
#   kill DIR N          kill -9 server N (1..3)
#   restart DIR N       starts server N again with its own data
# Data and logs: DIR/nN/{js,nats.log,nats.pid,nats.conf}.
set -eu
cmd=${1:?usage: nats_cluster.sh start|stop|kill|restart DIR [N]}
dir=${2:?usage: nats_cluster.sh start|stop|kill|restart DIR [N]}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

wait_port() { # port seconds
    i=0
    while ! (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null; do
        i=$((i + 1)); [ $i -gt $(($2 * 10)) ] && return 1; sleep 0.1
    done
}

write_conf() { # n client route routes...
    n=$1 client=$2 route=$3; shift 3
    mkdir -p "$dir/n$n"
    {
        echo "server_name: n$n"
        echo "listen: 127.0.0.1:$client"
        echo "jetstream { store_dir: \"$dir/n$n/js\" }"
        echo "cluster {"
        echo "  name: roomd_test"
        echo "  listen: 127.0.0.1:$route"
        echo "  routes: ["
        for r in "$@"; do echo "    nats-route://127.0.0.1:$r"; done
        echo "  ]"
        echo "}"
    } >"$dir/n$n/nats.conf"
}

start_one() { # n
    n=$1
    nats-server -c "$dir/n$n/nats.conf" -P "$dir/n$n/nats.pid" -l "$dir/n$n/nats.log" \
        </dev/null >/dev/null 2>&1 &
}

client_port() { # n
    sed -n 's/^listen: 127.0.0.1://p' "$dir/n$1/nats.conf"
}

case "$cmd" in
start)
    read -r c1 c2 c3 r1 r2 r3 <<<"${ROOMD_NATS_CLUSTER_PORTS:?set ROOMD_NATS_CLUSTER_PORTS}"
    write_conf 1 "$c1" "$r1" "$r2" "$r3"
    write_conf 2 "$c2" "$r2" "$r1" "$r3"
    write_conf 3 "$c3" "$r3" "$r1" "$r2"
    for n in 1 2 3; do start_one $n; done
    for p in "$c1" "$c2" "$c3"; do
        wait_port "$p" 20 || { echo "nats-server :$p did not start" >&2; exit 1; }
    done
    echo "nats cluster: 127.0.0.1:$c1,$c2,$c3 (routes $r1,$r2,$r3; data in $dir)" ;;
stop)
    pids=""
    for n in 1 2 3; do
        f="$dir/n$n/nats.pid"
        [ -f "$f" ] && pids="$pids $(cat "$f")"
    done
    for p in $pids; do kill "$p" 2>/dev/null || true; done
    # JetStream shuts down within seconds; never leave a server behind
    for _ in $(seq 100); do
        alive=""
        for p in $pids; do kill -0 "$p" 2>/dev/null && alive="$alive $p"; done
        [ -z "$alive" ] && break
        sleep 0.1
    done
    for p in $alive; do kill -9 "$p" 2>/dev/null || true; done ;;
kill)
    n=${3:?kill DIR N}
    kill -9 "$(cat "$dir/n$n/nats.pid")" ;;
restart)
    n=${3:?restart DIR N}
    start_one "$n"
    wait_port "$(client_port "$n")" 20 || { echo "nats-server n$n did not start" >&2; exit 1; } ;;
*) echo "usage: nats_cluster.sh start|stop|kill|restart DIR [N]" >&2; exit 2 ;;
esac
