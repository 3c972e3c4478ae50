/* SPDX-License-Identifier: Apache-2.0 */
/*
 * forward.h: any node takes any command (docs/cluster.md). A node that does
 * not own a room sends the request, unchanged, to the owner named by the
 * room's lease (its http.advertise_addr) and returns the owner's answer as
 * its own. A keep-alive connection pool (libcurl handles, each keeping its
 * connections) serves every owner; the hop header FORWARD_HOP_HEADER marks a
 * forwarded request so it is forwarded at most once. The room service calls
 * cluster_forward_call through its room_forward_fn hook (room/service.h).
 */
#ifndef ROOMD_CLUSTER_FORWARD_H
#define ROOMD_CLUSTER_FORWARD_H

#include <stddef.h>
#include <stdint.h>

struct conf;
struct room_origin;
struct room_reply;
struct cluster_forward;

/* The hop header: its value is the forwarding node's node_id. A request that
 * carries it is served by the node it reached, never forwarded again. */
#define FORWARD_HOP_HEADER "X-Roomd-Forwarded-By"

/* Opens the forwarder with cluster.forward_timeout, the node's id (for the
 * hop header; node_id is copied), the admin token (admin.token_env /
 * admin.token_file, sent with internal commands) and TLS: requests go as
 * https:// to a listener kind whose tls.cert_file is set here (every node runs
 * the same listener config), the owner's certificate verified against
 * cluster.tls_ca_file ("" = the system store). Returns 0 and *out, or
 * ROOMD_EINVAL with err naming the key (never a secret; a CA file that cannot
 * be read or holds no PEM certificate names cluster.tls_ca_file). Thread:
 * main; reads the CA file. */
int cluster_forward_open(struct cluster_forward **out, const struct conf *c, const char *node_id,
                         char *err, size_t errlen);
/* Frees the pool. No call may be in flight. NULL is a no-op. Thread: main. */
void cluster_forward_close(struct cluster_forward *f);

/*
 * Sends the request o (borrowed) for app to the owner at public_addr
 * ("host:port"), or at admin_addr with the admin token when o->path is
 * /internal/v1/... and admin_addr is not "" (it is the owner's
 * admin.advertise_addr), and, on any HTTP answer, fills *reply with it: status, body,
 * Idempotent-Replay, X-Room-Owner. Returns 0 then, or ROOMD_EUNAVAIL when the
 * owner could not be reached, failed the TLS handshake (its certificate not
 * verified) or did not answer within cluster.forward_timeout (*reply
 * untouched; one warn line with the reason, never a header). Matches
 * room_forward_fn (arg = the forwarder). Thread: any; blocks up to cluster.forward_timeout.
 */
int cluster_forward_call(void *f, const char *public_addr, const char *admin_addr, const char *app,
                         const struct room_origin *o, struct room_reply *reply);

/*
 * GETs path (an admin route: "/admin/v1/node") from the node whose admin
 * listener is admin_addr ("host:port"), with this node's admin token and
 * the listener's TLS, and the calling thread's request ids (log_request_id),
 * as cluster_forward_call does; for the cluster's nodes view (admin/nodes.c). Returns 0 with
 * *status and *body (malloc'd, the caller frees) on any HTTP answer, or ROOMD_EUNAVAIL with why
 * filled (libcurl's reason, never a header). Not counted as forwarding. Thread: any; blocks up to
 * timeout_ms (<= 0: cluster.forward_timeout).
 */
int cluster_forward_admin_get(struct cluster_forward *f, const char *admin_addr, const char *path,
                              int64_t timeout_ms, int *status, char **body, char *why,
                              size_t whylen);

/* Requests forwarded and forwarding failures since open (metrics). */
void cluster_forward_counts(const struct cluster_forward *f, uint64_t *forwarded, uint64_t *failed);

#endif
