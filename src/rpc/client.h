/*
 * client.h: one unary gRPC call over gRPC core, for the process' gRPC
 * clients (the activity sink, publish/sink_activity.c; the benchmark's gRPC
 * load, bench/bench_commands.c). The caller owns the channel.
 */
#ifndef ROOMD_RPC_CLIENT_H
#define ROOMD_RPC_CLIENT_H

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Calls method ("/pkg.Service/Method") on ch with the request bytes req (len;
 * borrowed) and the nmd metadata md (borrowed; NULL when nmd is 0), and waits for its status, at
 * most timeout_ms (the call's deadline). Returns the status: GRPC_STATUS_OK, the server's, or
 * DEADLINE_EXCEEDED / UNAVAILABLE from gRPC itself; details gets the status
 * message ("" when none; truncated to dlen). When resp is not NULL, *resp
 * receives the answer bytes (malloc'd, the caller frees; NULL when none) and
 * *resp_len their length. Thread: any (a completion queue per call); blocks.
 */
grpc_status_code rpc_unary(grpc_channel *ch, const char *method, const void *req, size_t len,
                           grpc_metadata *md, size_t nmd, int64_t timeout_ms, uint8_t **resp,
                           size_t *resp_len, char *details, size_t dlen);

/* The bytes of bb in one malloc'd buffer (the caller frees; bb stays the
 * caller's) and *len. Thread: any. */
uint8_t *rpc_buffer_copy(grpc_byte_buffer *bb, size_t *len);

/* "OK", "CANCELLED", ... "UNAUTHENTICATED"; "?" for another value. */
const char *rpc_status_name(grpc_status_code st);

#endif
