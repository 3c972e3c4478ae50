#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# galera.sh start|stop|kill|restart|pause|resume|wait|port DIR [N]: a 3-node MariaDB Galera
# cluster on 127.0.0.1 for the HA tests (tests/integ/test_ha.py). Each node has its own datadir
# (mariadb-install-db --user=mysql: the rsync SST refuses root-owned files) and runs as mysql.
#   start DIR        needs ROOMD_GALERA_PORTS="m1 m2 m3 g1 g2 g3 i1 i2 i3 s1 s2 s3": the nodes'
#                    SQL ports, gmcast (group) ports, IST and SST receive ports (kept in
#                    DIR/ports for the other commands). Node 1 bootstraps (gcomm://), 2 and 3
#                    join it (SST); waits until wsrep_cluster_size is 3 and every node Synced.
#   stop DIR         stops every node (SIGTERM; SIGKILL after 20 s)
#   kill DIR N       kill -9 node N (1..3)
#   restart DIR N    starts node N again on its own data (joins the others: IST)
#   pause DIR N      SIGSTOP node N (the others evict it after the evs timeouts, ~3 s)
#   resume DIR N     SIGCONT node N
#   wait DIR [SIZE [S]] waits (S seconds, default 120) until SIZE (default 3) nodes are Synced;
#                    with SIZE 3 a node that exited while (re)joining is started again
#   port DIR N       prints node N's SQL port
# Short group timeouts so a lost node is evicted in seconds (evs.* below). Root has no
# password on 127.0.0.1; the database roomd_test is created on start.
set -eu
cmd=${1:?usage: galera.sh start|stop|kill|restart|pause|resume|wait DIR [N]}
dir=${2:?usage: galera.sh CMD DIR [N]}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
PROVIDER=${ROOMD_GALERA_PROVIDER:-/usr/lib/galera/libgalera_smm.so}

ports() { # sets m1..s3 from DIR/ports
    read -r m1 m2 m3 g1 g2 g3 i1 i2 i3 s1 s2 s3 <"$dir/ports"
}

sqlport() { ports; eval echo "\$m$1"; }

q() { # port sql: one value, or nothing when the node does not answer
    mariadb --no-defaults -h127.0.0.1 -P"$1" -uroot -N -B --connect-timeout=2 -e "$2" 2>/dev/null || true
}

start_node() { # n bootstrap(0|1)
    n=$1
    ports
    eval mp=\$m$n gp=\$g$n ip=\$i$n sp=\$s$n
    nd="$dir/n$n"
    if [ ! -d "$nd/data/mysql" ]; then
        mkdir -p "$nd/data"
        chown -R mysql:mysql "$nd"
        mariadb-install-db --no-defaults --user=mysql --datadir="$nd/data" \
            --auth-root-authentication-method=normal --skip-test-db >"$nd/install.log" 2>&1 ||
            { echo "mariadb-install-db failed (the mysql user must reach $nd):" >&2
              tail -5 "$nd/install.log" >&2; exit 1; }
    fi
    chown -R mysql:mysql "$nd"
    peers="gcomm://127.0.0.1:$g1,127.0.0.1:$g2,127.0.0.1:$g3"
    [ "$2" = 1 ] && peers="gcomm://"
    opts="gmcast.listen_addr=tcp://127.0.0.1:$gp;ist.recv_addr=127.0.0.1:$ip"
    opts="$opts;evs.keepalive_period=PT0.5S;evs.suspect_timeout=PT2S;evs.inactive_timeout=PT3S"
    opts="$opts;evs.inactive_check_period=PT0.5S;evs.install_timeout=PT3S;gcache.size=64M"
    opts="$opts;gmcast.peer_timeout=PT2S;pc.wait_prim_timeout=PT10S"
    args=(--no-defaults --user=mysql --datadir="$nd/data" --port="$mp"
        --bind-address=127.0.0.1 --socket="$nd/mysqld.sock" --pid-file="$nd/mysqld.pid"
        --log-error="$nd/error.log" --skip-name-resolve --max-connections=300
        --innodb-buffer-pool-size=32M --innodb-log-file-size=16M
        --innodb-flush-log-at-trx-commit=1 --binlog-format=ROW --innodb-autoinc-lock-mode=2
        --wsrep-on=ON --wsrep-provider="$PROVIDER" --wsrep-cluster-name=roomd_test
        --wsrep-cluster-address="$peers" --wsrep-node-name="n$n"
        --wsrep-node-address=127.0.0.1 --wsrep-provider-options="$opts"
        --wsrep-sst-method=rsync --wsrep-sst-receive-address="127.0.0.1:$sp")
    if [ "$2" = 0 ] && [ -f "$nd/data/grastate.dat" ]; then
        # after a crash grastate.dat says seqno -1: recover the position from InnoDB (as
        # galera_recovery does) so the node asks for an IST instead of a full SST
        rm -f "$nd/recover.log"
        mariadbd "${args[@]}" --wsrep-recover --log-error="$nd/recover.log" >/dev/null 2>&1 || true
        pos=$(sed -n 's/.*WSREP: Recovered position: //p' "$nd/recover.log" | tail -1)
        [ -n "$pos" ] && args+=(--wsrep-start-position="$pos")
    fi
    mariadbd "${args[@]}" </dev/null >/dev/null 2>&1 &
    echo $! >"$nd/launch.pid"
}

synced() { # port: true when the node is Synced and in the primary component
    [ "$(q "$1" "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE
        VARIABLE_NAME='wsrep_local_state_comment'")" = Synced ]
}

size_of() { # port
    q "$1" "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE
        VARIABLE_NAME='wsrep_cluster_size'"
}

wait_cluster() { # size seconds
    ports
    want=$1 end=$((SECONDS + $2))
    while :; do
        ok=0
        for p in $m1 $m2 $m3; do
            synced "$p" && [ "$(size_of "$p")" = "$want" ] && ok=$((ok + 1))
        done
        [ $ok -ge "$want" ] && return 0
        [ $SECONDS -ge $end ] && { echo "galera: not $want Synced nodes after $2 s" >&2; return 1; }
        sleep 0.25
    done
}

pid_of() { # n
    cat "$dir/n$1/mysqld.pid" 2>/dev/null || cat "$dir/n$1/launch.pid"
}

wait_all() { # seconds: waits until the 3 nodes are Synced; a node that exited while joining
    # (its state transfer failed to start: "Failed to prepare for 'rsync' SST", seen on a busy
    # machine, its rsync daemon dead at once) is started again, up to 3 times each
    local deadline=$((SECONDS + $1)) n t tries1=0 tries2=0 tries3=0
    until wait_cluster 3 5 2>/dev/null; do
        for n in 1 2 3; do
            kill -0 "$(pid_of $n)" 2>/dev/null && continue
            eval t=\$tries$n
            [ "$t" -ge 3 ] && continue
            eval tries$n=$((t + 1))
            echo "galera node $n exited while joining: started again" >&2
            rm -f "$dir/n$n/mysqld.pid"
            start_node "$n" 0
        done
        if [ $SECONDS -ge $deadline ]; then wait_cluster 3 1; return 1; fi
    done
    return 0
}

case "$cmd" in
start)
    echo "${ROOMD_GALERA_PORTS:?set ROOMD_GALERA_PORTS (12 ports)}" >"$dir/ports"
    chmod 755 "$dir"
    ports
    start_node 1 1
    i=0
    until synced "$m1"; do
        i=$((i + 1)); [ $i -gt 240 ] && { echo "galera node 1 did not start" >&2; tail -n 10 "$dir/n1/error.log" >&2; exit 1; }
        sleep 0.25
    done
    start_node 2 0
    start_node 3 0
    wait_all 180 || { tail -n 20 "$dir"/n*/error.log >&2; exit 1; }
    q "$m1" "CREATE DATABASE IF NOT EXISTS roomd_test CHARACTER SET utf8mb4"
    echo "galera: 127.0.0.1:$m1,$m2,$m3 Synced (data in $dir)" ;;
stop)
    for n in 1 2 3; do
        p=$(pid_of $n 2>/dev/null) || continue
        kill -CONT "$p" 2>/dev/null || true
        kill "$p" 2>/dev/null || true
    done
    for n in 1 2 3; do
        p=$(pid_of $n 2>/dev/null) || continue
        i=0
        while kill -0 "$p" 2>/dev/null; do
            i=$((i + 1)); [ $i -gt 80 ] && { kill -9 "$p" 2>/dev/null || true; break; }
            sleep 0.25
        done
    done ;;
kill)
    p=$(pid_of "${3:?N}")
    kill -9 "$p"
    while kill -0 "$p" 2>/dev/null; do sleep 0.05; done ;;
restart)
    n=${3:?N}
    rm -f "$dir/n$n/mysqld.pid"
    start_node "$n" 0 ;;
pause) kill -STOP "$(pid_of "${3:?N}")" ;;
resume) kill -CONT "$(pid_of "${3:?N}")" ;;
wait) # all 3 wanted: a node that exited while rejoining is started again (wait_all)
    if [ "${3:-3}" = 3 ]; then wait_all "${4:-120}"; else wait_cluster "${3:-3}" "${4:-120}"; fi ;;
port) sqlport "${3:?N}" ;;
*) echo "usage: galera.sh start|stop|kill|restart|pause|resume|wait|port DIR [N]" >&2; exit 2 ;;
esac
