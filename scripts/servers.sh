#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# servers.sh start|stop|env DIR: the real servers the tests talk to, on 127.0.0.1 and
# non-default ports, with their data under DIR (the build tree). Started once per
# `make test`, stopped afterwards. apt never starts them (policy-rc.d), so we do.
#   mariadbd      127.0.0.1:${ROOMD_MYSQL_PORT:-3417}  user root, no password, db roomd_test
#   redis-server  127.0.0.1:${ROOMD_REDIS_PORT:-6390}
#   nats-server   127.0.0.1:${ROOMD_NATS_PORT:-4333} with JetStream
set -eu
cmd=${1:?usage: servers.sh start|stop|env DIR}
dir=${2:?usage: servers.sh start|stop|env DIR}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
MYSQL_PORT=${ROOMD_MYSQL_PORT:-3417}
REDIS_PORT=${ROOMD_REDIS_PORT:-6390}
NATS_PORT=${ROOMD_NATS_PORT:-4333}

wait_port() { # port seconds
    i=0
    while ! (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null; do
        i=$((i + 1)); [ $i -gt $(($2 * 10)) ] && return 1; sleep 0.1
    done
}

start() {
    if [ ! -d "$dir/mysql/data/mysql" ]; then
        mkdir -p "$dir/mysql/data"
        mariadb-install-db --no-defaults --datadir="$dir/mysql/data" \
            --auth-root-authentication-method=normal --skip-test-db >"$dir/mysql/install.log" 2>&1
    fi
    if ! wait_port "$MYSQL_PORT" 0; then
        mariadbd --no-defaults --datadir="$dir/mysql/data" --port="$MYSQL_PORT" \
            --bind-address=127.0.0.1 --socket="$dir/mysql/mysqld.sock" --user=root \
            --pid-file="$dir/mysql/mysqld.pid" --innodb-flush-log-at-trx-commit=1 \
            --max-connections=500 --log-error="$dir/mysql/error.log" </dev/null >/dev/null 2>&1 &
        wait_port "$MYSQL_PORT" 60 || { echo "mariadbd did not start" >&2; cat "$dir/mysql/error.log" >&2; exit 1; }
    fi
    mariadb --no-defaults -h127.0.0.1 -P"$MYSQL_PORT" -uroot \
        -e "CREATE DATABASE IF NOT EXISTS roomd_test CHARACTER SET utf8mb4" 
    if ! wait_port "$REDIS_PORT" 0; then
        mkdir -p "$dir/redis"
        redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$dir/redis" --save "" \
            --appendonly no --daemonize yes --pidfile "$dir/redis/redis.pid" \
            --logfile "$dir/redis/redis.log" </dev/null >/dev/null 2>&1
        wait_port "$REDIS_PORT" 20 || { echo "redis did not start" >&2; exit 1; }
    fi
    if ! wait_port "$NATS_PORT" 0; then
        mkdir -p "$dir/nats"
        nats-server -js -a 127.0.0.1 -p "$NATS_PORT" -sd "$dir/nats/js" \
            -P "$dir/nats/nats.pid" -l "$dir/nats/nats.log" </dev/null >/dev/null 2>&1 &
        wait_port "$NATS_PORT" 20 || { echo "nats did not start" >&2; exit 1; }
    fi
    echo "servers: mariadb :$MYSQL_PORT redis :$REDIS_PORT nats :$NATS_PORT (data in $dir)"
}

stop() {
    for f in "$dir/mysql/mysqld.pid" "$dir/redis/redis.pid" "$dir/nats/nats.pid"; do
        [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
    done
    sleep 1
}

case "$cmd" in
start) start ;;
stop) stop ;;
env)
    echo "ROOMD_MYSQL_PORT=$MYSQL_PORT ROOMD_REDIS_PORT=$REDIS_PORT ROOMD_NATS_PORT=$NATS_PORT" ;;
*) echo "usage: servers.sh start|stop|env DIR" >&2; exit 2 ;;
esac
