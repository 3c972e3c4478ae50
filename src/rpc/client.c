/*
 * client.c: rpc_unary (client.h). Each call has its own completion queue
 * and one batch: send metadata, message and close, receive metadata, message
 * and status. The call's deadline ends the batch, so no other timer is needed.
 */
#include "rpc/client.h"

#include "core/xmalloc.h"

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *
rpc_status_name(grpc_status_code st)
{
    static const char *const names[] = {"OK",
                                        "CANCELLED",
                                        "UNKNOWN",
                                        "INVALID_ARGUMENT",
                                        "DEADLINE_EXCEEDED",
                                        "NOT_FOUND",
                                        "ALREADY_EXISTS",
                                        "PERMISSION_DENIED",
                                        "RESOURCE_EXHAUSTED",
                                        "FAILED_PRECONDITION",
                                        "ABORTED",
                                        "OUT_OF_RANGE",
                                        "UNIMPLEMENTED",
                                        "INTERNAL",
                                        "UNAVAILABLE",
                                        "DATA_LOSS",
                                        "UNAUTHENTICATED"};
    if ((int)st >= 0 && (size_t)st < sizeof(names) / sizeof(names[0]))
        return names[st];
    return "?";
}

uint8_t *
rpc_buffer_copy(grpc_byte_buffer *bb, size_t *len)
{
    grpc_byte_buffer_reader rd;
    grpc_slice all;
    uint8_t *out;

    grpc_byte_buffer_reader_init(&rd, bb);
    all = grpc_byte_buffer_reader_readall(&rd);
    grpc_byte_buffer_reader_destroy(&rd);
    *len = GRPC_SLICE_LENGTH(all);
    out = xmalloc(*len + 1);
    memcpy(out, GRPC_SLICE_START_PTR(all), *len);
    grpc_slice_unref(all);
    return out;
}

grpc_status_code
rpc_unary(grpc_channel *ch, const char *method, const void *req, size_t len, grpc_metadata *md,
          size_t nmd, int64_t timeout_ms, uint8_t **resp, size_t *resp_len, char *details,
          size_t dlen)
{
    gpr_timespec deadline =
        gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(timeout_ms, GPR_TIMESPAN));
    grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
    grpc_call *call =
        grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                                 grpc_slice_from_static_string(method), NULL, deadline, NULL);
    grpc_slice payload = grpc_slice_from_copied_buffer(req, len), status_details;
    grpc_byte_buffer *out = grpc_raw_byte_buffer_create(&payload, 1), *in = NULL;
    grpc_metadata_array md_initial, md_trailing;
    grpc_status_code st = GRPC_STATUS_UNKNOWN;
    grpc_call_error ce;
    grpc_op ops[6];

    grpc_slice_unref(payload);
    status_details = grpc_empty_slice();
    grpc_metadata_array_init(&md_initial);
    grpc_metadata_array_init(&md_trailing);
    if (resp != NULL) {
        *resp = NULL;
        *resp_len = 0;
    }
    details[0] = '\0';

    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = nmd;
    ops[0].data.send_initial_metadata.metadata = md;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = out;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &md_initial;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &in;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &md_trailing;
    ops[5].data.recv_status_on_client.status = &st;
    ops[5].data.recv_status_on_client.status_details = &status_details;

    ce = grpc_call_start_batch(call, ops, 6, ops, NULL);
    if (ce == GRPC_CALL_OK) {
        /* the call's deadline ends the batch; no other tag is on this CQ */
        grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        char *text = grpc_slice_to_c_string(status_details);
        snprintf(details, dlen, "%s", text);
        gpr_free(text);
        if (in != NULL && resp != NULL && st == GRPC_STATUS_OK)
            *resp = rpc_buffer_copy(in, resp_len);
    } else {
        snprintf(details, dlen, "grpc_call_start_batch failed (%d)", (int)ce);
        st = GRPC_STATUS_UNKNOWN;
    }

    grpc_call_unref(call);
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
           GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(cq);
    grpc_slice_unref(status_details);
    grpc_metadata_array_destroy(&md_initial);
    grpc_metadata_array_destroy(&md_trailing);
    grpc_byte_buffer_destroy(out);
    if (in != NULL)
        grpc_byte_buffer_destroy(in);
    return st;
}
