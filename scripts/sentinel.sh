#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# sentinel.sh start|stop|kill|restart|master DIR [N]: 3 redis-server (node 1 the master, 2 and
# 3 its replicas) and 3 redis-sentinel watching them as master "roomd", all on 127.0.0.1, for
# the HA tests (tests/integ/test_ha.py).
#   start DIR        needs ROOMD_SENTINEL_PORTS="r1 r2 r3 s1 s2 s3" (redis ports, sentinel
#                    ports; kept in DIR/ports); waits until both replicas are in sync and every
#                    sentinel knows the other two and both replicas
#   stop DIR         stops every server and sentinel (SIGKILL after 10 s), also those whose
#                    pid file is missing (by port)
#   kill DIR N       kill -9 redis N (1..3)
#   restart DIR N    starts redis N again (as a replica of the current master: the sentinels
#                    reconfigure it)
#   master DIR       prints the current master's port as sentinel 1 tells it
# Failover is quick on purpose: down-after 1000 ms, failover-timeout 5000 ms, quorum 2.
set -eu
cmd=${1:?usage: sentinel.sh start|stop|kill|restart|master DIR [N]}
dir=${2:?usage: sentinel.sh CMD DIR [N]}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
NAME=${ROOMD_SENTINEL_MASTER:-roomd}

ports() { read -r r1 r2 r3 s1 s2 s3 <"$dir/ports"; }

wait_port() { # port seconds
    i=0
    while ! (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null; do
        i=$((i + 1)); [ $i -gt $(($2 * 10)) ] && return 1; sleep 0.1
    done
}

start_redis() { # n [master_port]
    ports
    eval p=\$r$1
    mkdir -p "$dir/r$1"
    extra=()
    [ -n "${2:-}" ] && extra=(--replicaof 127.0.0.1 "$2")
    redis-server --port "$p" --bind 127.0.0.1 --dir "$dir/r$1" --save "" --appendonly no \
        --daemonize yes --pidfile "$dir/r$1/redis.pid" --logfile "$dir/r$1/redis.log" \
        "${extra[@]}" </dev/null >/dev/null 2>&1
    wait_port "$p" 20 || { echo "redis :$p did not start" >&2; exit 1; }
}

start_sentinel() { # n
    ports
    eval p=\$s$1
    mkdir -p "$dir/s$1"
    cat >"$dir/s$1/sentinel.conf" <<EOF
port $p
bind 127.0.0.1
daemonize yes
pidfile $dir/s$1/sentinel.pid
logfile $dir/s$1/sentinel.log
dir $dir/s$1
sentinel monitor $NAME 127.0.0.1 $r1 2
sentinel down-after-milliseconds $NAME 1000
sentinel failover-timeout $NAME 5000
sentinel parallel-syncs $NAME 2
EOF
    redis-sentinel "$dir/s$1/sentinel.conf" </dev/null >/dev/null 2>&1
    wait_port "$p" 20 || { echo "sentinel :$p did not start" >&2; exit 1; }
}

settled() { # both replicas online, every sentinel sees 2 replicas and 2 other sentinels
    [ "$(cli "$r1" info replication | grep -c 'state=online')" = 2 ] || return 1
    for s in $s1 $s2 $s3; do
        m=$(cli "$s" sentinel master "$NAME" | tr -d '\r')
        [ "$(echo "$m" | sed -n '/^num-other-sentinels$/{n;p}')" = 2 ] || return 1
        [ "$(echo "$m" | sed -n '/^num-slaves$/{n;p}')" = 2 ] || return 1
    done
}

cli() { redis-cli -h 127.0.0.1 -p "$1" "${@:2}" 2>/dev/null || true; }

case "$cmd" in
start)
    echo "${ROOMD_SENTINEL_PORTS:?set ROOMD_SENTINEL_PORTS (6 ports)}" >"$dir/ports"
    ports
    start_redis 1
    start_redis 2 "$r1"
    start_redis 3 "$r1"
    for n in 1 2 3; do start_sentinel $n; done
    end=$((SECONDS + 30))
    until settled; do
        [ $SECONDS -ge $end ] && { echo "sentinels did not settle" >&2; exit 1; }
        sleep 0.2
    done
    echo "redis: master 127.0.0.1:$r1, replicas :$r2 :$r3; sentinels :$s1 :$s2 :$s3 ($NAME)" ;;
stop)
    # every server and sentinel, even one whose pid file is gone (a failed start, a restart):
    # SIGTERM by pid file, SHUTDOWN NOSAVE by port, then SIGKILL what still runs after 10 s
    pids=()
    for f in "$dir"/s*/sentinel.pid "$dir"/r*/redis.pid; do
        [ -f "$f" ] || continue
        p=$(cat "$f" 2>/dev/null) || continue
        [ -n "$p" ] && kill "$p" 2>/dev/null && pids+=("$p")
    done
    if [ -f "$dir/ports" ]; then # only a process of DIR (the port may be another's by now)
        ports
        for p in $r1 $r2 $r3; do
            case "$(cli "$p" config get dir | tr -d '\r' | tail -1)" in
            "$dir"/r[123]) cli "$p" shutdown nosave >/dev/null ;;
            esac
        done
        for p in $s1 $s2 $s3; do
            case "$(cli "$p" info server | tr -d '\r' | sed -n 's/^config_file://p')" in
            "$dir"/s[123]/sentinel.conf) cli "$p" shutdown >/dev/null ;;
            esac
        done
    fi
    for p in "${pids[@]}"; do
        i=0
        while kill -0 "$p" 2>/dev/null; do
            i=$((i + 1)); [ $i -gt 100 ] && { kill -9 "$p" 2>/dev/null || true; break; }
            sleep 0.1
        done
    done ;;
kill)
    p=$(cat "$dir/r${3:?N}/redis.pid")
    kill -9 "$p"
    while kill -0 "$p" 2>/dev/null; do sleep 0.05; done ;;
restart)
    ports
    m=$(cli "$s1" sentinel get-master-addr-by-name "$NAME" | tail -1)
    start_redis "${3:?N}" "$m" ;;
master)
    ports
    cli "$s1" sentinel get-master-addr-by-name "$NAME" | tail -1 ;;
*) echo "usage: sentinel.sh start|stop|kill|restart|master DIR [N]" >&2; exit 2 ;;
esac
