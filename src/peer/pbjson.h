/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pbjson.h: protobuf <-> JSON by field name, driven by protobuf-c
 * descriptors, so the gRPC server (rpc/server.c) speaks the JSON the room
 * handlers parse and answer without one line per message. A proto field's
 * name is its JSON key (proto/room_service.proto).
 *   pbjson_from_message: a request (or event payload) message -> JSON object
 *                        (scalars only)
 *   pbjson_to_wire:      an answer's JSON -> the packed bytes of a message
 * Thread: any (pure functions); nothing blocks.
 */
#ifndef ROOMD_PEER_PBJSON_H
#define ROOMD_PEER_PBJSON_H

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct json_t;

/*
 * The fields of m as a new JSON object (the caller json_decref's it). A field
 * holding its proto3 zero value (0, "", false) is left out, as absent, unless
 * keep_zero (then every field is put in: an event payload's JSON); a oneof
 * member is put in when it is the one set, zero or not. Supports the scalar
 * types (int32/64, uint32/64, an enum as its number, bool, float, double,
 * string); a field of another type (bytes, message, repeated) is left out.
 */
struct json_t *pbjson_from_message(const ProtobufCMessage *m, bool keep_zero);

/*
 * Encodes JSON object j as a message of descriptor d in the protobuf wire
 * format: a key naming a field of d gives that field (a nested object for a
 * message field, an array for a repeated one); other keys and nulls are
 * skipped (the JSON may carry more than the proto). Returns the bytes
 * (malloc'd, the caller frees) and *len; never NULL (j not an object gives
 * the empty message).
 */
uint8_t *pbjson_to_wire(const struct json_t *j, const ProtobufCMessageDescriptor *d, size_t *len);

#endif
