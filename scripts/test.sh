#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# test.sh BUILD_DIR: starts the test servers once, runs every ctest entry, stops them.
# CI=true makes a test that cannot reach its server fail instead of skipping.
set -eu
build=${1:?usage: test.sh BUILD_DIR}
build=$(cd "$build" && pwd)
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/scripts/servers.sh" start "$build/servers"
trap '"$here/scripts/servers.sh" stop "$build/servers"' EXIT INT TERM
export ROOMD_MYSQL_PORT=${ROOMD_MYSQL_PORT:-3417} ROOMD_REDIS_PORT=${ROOMD_REDIS_PORT:-6390} \
       ROOMD_NATS_PORT=${ROOMD_NATS_PORT:-4333}
export ROOMD_REQUIRE_SERVERS=1
cd "$build"
ctest --output-on-failure -j2 ${CTEST_ARGS:-}
