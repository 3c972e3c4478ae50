#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# deps.sh [build|test]: installs the Debian packages roomd builds with (`make deps`: build,
# the default) or builds and tests with (`make test-deps`: test, plus the npm packages of the
# test tooling). Safe to run again: it only installs what is missing. Needs root (or sudo) on a
# Debian 12 machine. Never called by `make install`.
# PKGS: the packages of a build and the tests; TEST_ONLY: those (of PKGS or not) only the tests,
# fuzzers, packaging and example checks need, left out of a build (`deps.sh build`).
set -eu
mode=${1:-build}
case "$mode" in build | test) ;; *) echo "usage: $0 [build|test]" >&2; exit 2 ;; esac
PKGS="build-essential cmake pkg-config python3 python3-cryptography curl ca-certificates openssl \
 libmicrohttpd-dev libjansson-dev libyaml-dev libprotobuf-c-dev protobuf-c-compiler libgrpc-dev \
 libcurl4-openssl-dev libssl-dev zlib1g-dev libmariadb-dev libhiredis-dev libnats-dev \
 libcmocka-dev libsqlite3-dev sqlite3 mariadb-server galera-4 rsync redis-server redis-sentinel nats-server \
 libjwt-dev libsystemd-dev libgnutls28-dev clang libclang-rt-14-dev chromium prometheus"
TEST_ONLY="mariadb-server galera-4 rsync redis-server redis-sentinel nats-server libcmocka-dev clang libclang-rt-14-dev chromium \
 prometheus debhelper lintian fakeroot strace golang-go golang-github-nats-io-go-nats-dev golang-google-protobuf-dev \
 protobuf-compiler"
if [ "$mode" = build ]; then
    keep=""
    for p in $PKGS; do
        case " $TEST_ONLY " in *" $p "*) ;; *) keep="$keep $p" ;; esac
    done
    PKGS=$keep
else
    PKGS="$PKGS $TEST_ONLY"
    # Node.js (stand-ins, example consumer): the machine image may ship its own node+npm, which
    # conflicts with Debian's npm package; take Debian's only when there is none.
    command -v npm >/dev/null 2>&1 || PKGS="$PKGS nodejs npm"
fi
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
# one apt (npm) at a time on a machine several checkouts share: /tmp/apt.lock, /tmp/npm.lock
locked() {
    l=$1
    shift
    if command -v flock >/dev/null 2>&1; then flock "$l" "$@"; else "$@"; fi
}
if [ -n "$missing" ]; then
    echo "deps: installing$missing"
    locked /tmp/apt.lock $SUDO apt-get update -q
    locked /tmp/apt.lock $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        --no-install-recommends $missing
fi
[ "$mode" = test ] || exit 0
# Test tooling (tests only): the gRPC stand-in and client, the OpenAPI validator, playwright-core
# (the console test in headless Chromium), ali-ons (the RocketMQ client checking the stand-in); the versions pinned by tests/standins/package-lock.json.
here=$(cd "$(dirname "$0")/.." && pwd)
nm="$here/tests/standins/node_modules"
if [ -f "$here/tests/standins/package.json" ] && { [ ! -d "$nm/@grpc/grpc-js" ] ||
    [ ! -d "$nm/protobufjs" ] || [ ! -d "$nm/@seriousme/openapi-schema-validator" ] ||
    [ ! -d "$nm/playwright-core" ] || [ ! -d "$nm/ali-ons" ]; }; then
    (cd "$here/tests/standins" && locked /tmp/npm.lock npm ci --no-audit --no-fund --silent)
fi
# the Node example consumer (examples/consumer-node, run by test_consumer_examples)
ex="$here/examples/consumer-node"
if [ -f "$ex/package-lock.json" ] && { [ ! -d "$ex/node_modules/nats" ] || [ ! -d "$ex/node_modules/protobufjs" ]; }; then
    (cd "$ex" && locked /tmp/npm.lock npm ci --no-audit --no-fund --silent)
fi
exit 0
