/* SPDX-License-Identifier: Apache-2.0 */
/*
 * remoting.h: RocketMQ's remoting protocol (design/rocketmq.md §1): one
 * command per TCP frame
 *   int32 total = 4 + H + B | int32 serializeType<<24 | H | header[H] | body[B]
 * the header JSON (what roomd sends; a response in the ROCKETMQ binary form
 * is decoded too), requests matched to responses by opaque, flag bit0 =
 * response, bit1 = oneway. One struct rmq_conn is one connection to a name
 * server or broker ("host:port") with a reader thread; any thread may
 * invoke on it at once.
 */
#ifndef ROOMD_RMQ_REMOTING_H
#define ROOMD_RMQ_REMOTING_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RMQ_FLAG_RESPONSE 1
#define RMQ_FLAG_ONEWAY 2

/* One command. ext is a JSON object of string values (extFields); body is
 * owned (malloc) or NULL. */
struct rmq_cmd {
    int code;
    int flag;
    int32_t opaque;
    int version;
    char *remark;
    json_t *ext;
    uint8_t *body;
    size_t body_len;
};

/* A new request with code and an empty ext (owned by the caller; free with
 * rmq_cmd_free). Thread: any. Never blocks. */
struct rmq_cmd *rmq_cmd_new(int code);
void rmq_cmd_free(struct rmq_cmd *c);
/* Sets ext field k to v (copied) / to a decimal integer. */
void rmq_cmd_set(struct rmq_cmd *c, const char *k, const char *v);
void rmq_cmd_set_int(struct rmq_cmd *c, const char *k, int64_t v);
/* The ext field k as a string (borrowed from c), or NULL. Numbers and
 * booleans a peer sent bare are given as NULL too: use rmq_cmd_int. */
const char *rmq_cmd_get(const struct rmq_cmd *c, const char *k);
/* The ext field k as an integer (a string or a bare number), or dflt. */
int64_t rmq_cmd_int(const struct rmq_cmd *c, const char *k, int64_t dflt);
/* Takes a copy of body as the command's body. */
void rmq_cmd_set_body(struct rmq_cmd *c, const void *body, size_t len);

/* The frame of c (JSON header) in *out (malloc, caller frees) and *len.
 * Thread: any. Never blocks. */
void rmq_cmd_encode(const struct rmq_cmd *c, uint8_t **out, size_t *len);
/* Decodes one frame without its leading length word (buf[0..len) = the
 * header word, header and body). Returns 0 and *out, or ROOMD_EINVAL with
 * err. Thread: any. Never blocks. */
int rmq_cmd_decode(const uint8_t *buf, size_t len, struct rmq_cmd **out, char *err, size_t errlen);

struct rmq_conn;

/* A request the peer sent us (a broker's NOTIFY_CONSUMER_IDS_CHANGED ...),
 * called on the connection's reader thread; cmd is borrowed. */
typedef void (*rmq_request_cb)(struct rmq_conn *c, const struct rmq_cmd *cmd, void *arg);

/*
 * Connects to addr ("host:port") within connect_timeout_ms and starts the
 * reader thread. on_request (may be NULL) gets the peer's requests.
 * Returns 0 and *out, or ROOMD_EUNAVAIL (refused, unreachable, timeout) /
 * ROOMD_EINVAL (bad address) with err. Thread: any. Blocks on the connect.
 */
int rmq_conn_open(struct rmq_conn **out, const char *addr, int64_t connect_timeout_ms,
                  rmq_request_cb on_request, void *arg, char *err, size_t errlen);

/*
 * Sends req (its opaque is set here) and waits for the response until
 * deadline_mono_ms. Returns 0 and *resp (the caller frees it), or
 * ROOMD_EUNAVAIL with err when the connection broke or no answer came in
 * time (the connection is then closed: a late answer never matches).
 * With oneway, sets flag bit1, waits for nothing and returns 0 (resp
 * untouched) once written. Thread: any. Blocks.
 */
int rmq_conn_invoke(struct rmq_conn *c, struct rmq_cmd *req, int64_t deadline_mono_ms, bool oneway,
                    struct rmq_cmd **resp, char *err, size_t errlen);

/* False once the connection broke or timed out. Thread: any. */
bool rmq_conn_alive(struct rmq_conn *c);
/* The address it was opened with (borrowed). */
const char *rmq_conn_addr(const struct rmq_conn *c);

/* Takes one more reference (each user of a shared connection holds one).
 * Thread: any. */
void rmq_conn_ref(struct rmq_conn *c);
/* Drops one reference; the last closes the socket, fails every waiting
 * invoke, joins the reader and frees c. Thread: any but the reader. Blocks
 * until the reader ended. NULL is a no-op. */
void rmq_conn_unref(struct rmq_conn *c);
/* Breaks the connection now (waiting invokes fail with ROOMD_EUNAVAIL);
 * c stays valid until its last unref. Thread: any. Never blocks. */
void rmq_conn_break(struct rmq_conn *c);

#endif
