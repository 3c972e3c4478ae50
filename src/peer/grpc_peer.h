/* SPDX-License-Identifier: Apache-2.0 */
/*
 * grpc_peer.h: one gRPC channel to a peer and unary calls on it, over gRPC
 * core (DEPENDENCIES.md §5). Shared by the activity sink
 * (publish/sink_activity.c) and the remote wallet (wallet/wallet_grpc.c).
 * Messages are opaque bytes here: callers pack and unpack them (protobuf-c).
 */
#ifndef ROOMD_PEER_GRPC_PEER_H
#define ROOMD_PEER_GRPC_PEER_H

#include <stddef.h>
#include <stdint.h>

struct grpc_peer;

/* gRPC status codes roomd tells apart (grpc_status_code values). */
#define GRPC_PEER_OK 0
#define GRPC_PEER_INVALID_ARGUMENT 3
#define GRPC_PEER_DEADLINE_EXCEEDED 4
#define GRPC_PEER_NOT_FOUND 5
#define GRPC_PEER_ALREADY_EXISTS 6
#define GRPC_PEER_FAILED_PRECONDITION 9
#define GRPC_PEER_ABORTED 10
#define GRPC_PEER_OUT_OF_RANGE 11
#define GRPC_PEER_UNAVAILABLE 14

/* The result of one unary call. */
struct grpc_reply {
    int status;        /* gRPC status code (GRPC_PEER_*), or -1 when the call never started */
    char details[256]; /* the peer's status details (or why the call never started) */
    uint8_t *body;     /* the response message when status is OK, malloc'd (free it), else NULL */
    size_t len;
};

/*
 * Opens one insecure channel to target ("host:port", connecting lazily and
 * reconnecting as gRPC does, every <= 1 s) and a watcher thread that keeps
 * its I/O moving between calls, so calls fail fast while the peer is down
 * and succeed as soon as it is back. who names the peer in log lines.
 * Returns 0 and *out, or ROOMD_EINVAL (empty target) / ROOMD_EINTERNAL (no
 * thread) with err. Thread: main; never fork() after it (gRPC forbids it).
 */
int grpc_peer_open(struct grpc_peer **out, const char *target, const char *who, char *err,
                   size_t errlen);

/*
 * Calls method ("/pkg.Service/Method") with the packed request req[0..len)
 * and waits for its end, at most until deadline_mono_ms (clock_mono_ms()).
 * Fills *r (free r->body). Returns 0 when the call ended with a status (see
 * r->status), or when it could not start ROOMD_EUNAVAIL (the deadline had
 * passed: no answer) or ROOMD_ERETRY (gRPC refused the batch), with
 * r->details. Thread: any, concurrently. Blocks.
 */
int grpc_peer_call(struct grpc_peer *p, const char *method, const uint8_t *req, size_t len,
                   int64_t deadline_mono_ms, struct grpc_reply *r);

/* The status' name ("UNAVAILABLE"), static; "?" when unknown. */
const char *grpc_peer_status_name(int status);

/* Closes the channel and joins the watcher. No call may be in flight.
 * grpc_peer_close(NULL) is a no-op. Thread: main. */
void grpc_peer_close(struct grpc_peer *p);

#endif
