#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# deps.sh: installs the Debian packages roomd builds and tests with (and the npm
# packages of the gRPC stand-in). Safe to run again: it only installs what is missing.
# Needs root (or sudo) on a Debian 12 machine.
set -eu
PKGS="build-essential cmake pkg-config python3 python3-cryptography curl ca-certificates openssl \
 libmicrohttpd-dev libjansson-dev libyaml-dev libprotobuf-c-dev protobuf-c-compiler libgrpc-dev \
 libcurl4-openssl-dev libssl-dev zlib1g-dev libmariadb-dev libhiredis-dev libnats-dev \
 libcmocka-dev libsqlite3-dev sqlite3 mariadb-server redis-server nats-server \
 libjwt-dev libsystemd-dev libgnutls28-dev clang libclang-rt-14-dev chromium prometheus"
# Node.js (gRPC stand-in): the machine image may ship its own node+npm, which conflicts with
# Debian's npm package; take Debian's only when there is none.
command -v npm >/dev/null 2>&1 || PKGS="$PKGS nodejs npm"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
if [ -n "$missing" ]; then
    echo "deps: installing$missing"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends $missing
fi
# Test tooling (tests only): the gRPC stand-in and client, the OpenAPI validator, playwright-core
# (the console test in headless Chromium); the versions pinned by tests/standins/package-lock.json.
here=$(cd "$(dirname "$0")/.." && pwd)
nm="$here/tests/standins/node_modules"
if [ -f "$here/tests/standins/package.json" ] && { [ ! -d "$nm/@grpc/grpc-js" ] ||
    [ ! -d "$nm/protobufjs" ] || [ ! -d "$nm/@seriousme/openapi-schema-validator" ] ||
    [ ! -d "$nm/playwright-core" ]; }; then
    (cd "$here/tests/standins" && npm ci --no-audit --no-fund --silent)
fi
exit 0
