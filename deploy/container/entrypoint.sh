#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# entrypoint.sh: roomd in a container (deploy/container/Containerfile). The config is a volume,
# $ROOMD_CONFIG (default /etc/roomd/roomd.yaml, read-only); the values that differ per node come
# from the environment and are written into a copy (/tmp/roomd.yaml) that roomd reads:
#   ROOMD_NODE_ID          -> app.node_id                        (unset: the file's)
#   ROOMD_ADVERTISE_HOST   -> the host of http.advertise_addr and
#                             admin.advertise_addr, port kept     (unset: the file's)
# The secrets come from the environment too (compose env_file / --env-file): the variables the
# config's *_env keys name (deploy/roomd.env.example).
#   entrypoint.sh [roomd]              serve (the default)
#   entrypoint.sh roomd_consumer ARGS  consumer groups (-g activity,notice)
#   entrypoint.sh roomctl ARGS         the operator CLI on the same config
#   entrypoint.sh check                roomd --check-config on it
#   entrypoint.sh render               print the config roomd would read
set -eu
src=${ROOMD_CONFIG:-/etc/roomd/roomd.yaml}
cfg=${ROOMD_RENDERED:-/tmp/roomd.yaml}

render() {
    node=${ROOMD_NODE_ID:-}
    host=${ROOMD_ADVERTISE_HOST:-}
    case "$node$host" in *[!A-Za-z0-9._-]*)
        echo "entrypoint: ROOMD_NODE_ID and ROOMD_ADVERTISE_HOST take [A-Za-z0-9._-] only" >&2
        exit 2 ;;
    esac
    sed -e "${node:+s|^\(  node_id: \)\"[^\"]*\"|\1\"$node\"|}" \
        -e "${host:+s|^\(  advertise_addr: \)\"[^\":]*:|\1\"$host:|}" "$src"
}

cmd=${1:-roomd}
[ $# -eq 0 ] || shift
case "$cmd" in
render) render ;;
check) render >"$cfg" && exec roomd --check-config "$cfg" ;;
roomd) render >"$cfg" && exec roomd -c "$cfg" "$@" ;;
roomd_consumer | roomctl) render >"$cfg" && exec "$cmd" -c "$cfg" "$@" ;;
*) exec "$cmd" "$@" ;;
esac
