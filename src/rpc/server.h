/* SPDX-License-Identifier: Apache-2.0 */
/*
 * server.h: the gRPC API (docs/grpc.md) on gRPC core, beside HTTP. Each RPC
 * of proto/room_service.proto is the HTTP route of the same name: the server
 * turns the request message into that route's JSON body (peer/pbjson.h) and
 * metadata into its headers, runs it through the one router (http/router.h:
 * the same validation, idempotency, room service and metrics), and turns the
 * answer into the reply message or a gRPC status with details. A pool of
 * grpc.workers threads, each with its own completion queue, serves calls;
 * a call blocks its thread as a command blocks an HTTP connection thread.
 */
#ifndef ROOMD_RPC_SERVER_H
#define ROOMD_RPC_SERVER_H

#include <stddef.h>

struct conf;
struct http_deps;
struct rpc_server;

/*
 * Binds conf->grpc.listen (a listening socket: connections wait in the
 * backlog); starts no thread and serves nothing yet. conf is borrowed and
 * must outlive the server. Returns 0 and *out (the caller's:
 * rpc_server_close), or ROOMD_EUNAVAIL with err naming the key and address
 * ("grpc.listen 127.0.0.1:9090: cannot bind"). An empty grpc.listen returns
 * 0 with *out = NULL (gRPC off). Thread: main; does not block.
 */
int rpc_server_bind(struct rpc_server **out, const struct conf *conf, char *err, size_t errlen);

/*
 * Starts serving the bound server s: grpc.workers threads. d is borrowed and
 * must outlive the server. s NULL (gRPC off) returns 0. Returns 0, or
 * ROOMD_EINTERNAL with err; on error the caller still closes s. Thread:
 * main; does not block.
 */
int rpc_server_start(struct rpc_server *s, const struct http_deps *d, char *err, size_t errlen);

/* Turns off Abseil's mutex deadlock detector (a debug aid that Debian's
 * Abseil leaves on: the lock-order graph on every gRPC core lock) when the
 * loaded Abseil has the setter; else does nothing. Process-wide; call before
 * gRPC is busy. Thread: any; does not block. */
void rpc_absl_deadlock_detection_off(void);

/* Stops accepting, lets calls in flight finish (up to 5 s, then cancels
 * them), joins the workers and frees. NULL is a no-op. Thread: main; blocks. */
void rpc_server_close(struct rpc_server *s);

#endif
