/* SPDX-License-Identifier: Apache-2.0 */
/*
 * admin/nodes.h: the cluster's nodes for operators (docs/admin.md "Nodes"):
 *
 *   GET /admin/v1/node?rooms=N    this node: readiness (its admin /readyz),
 *                                 version, the room leases it holds (count,
 *                                 the first N names, default 100, 0..1000)
 *   GET /admin/v1/nodes?rooms=N   every node the lease store knows
 *                                 (lease_members): this one from memory,
 *                                 each live peer asked for its
 *                                 /admin/v1/node over the node-to-node
 *                                 channel (cluster/forward.h, the admin
 *                                 token), a peer without a heartbeat shown
 *                                 "missing", one that does not answer
 *                                 "unreachable"
 *
 * Each node's "state": ready | degraded | not_ready (from its readiness,
 * "reasons" the checks that are not ok) | unreachable | missing | unknown
 * (cluster.forward off: peers not asked). Thread: any; blocks on Redis and
 * the peers (at most cluster.forward_timeout, capped at 2 s, all peers in
 * parallel).
 */
#ifndef ROOMD_ADMIN_NODES_H
#define ROOMD_ADMIN_NODES_H

#include "admin/admin.h"

struct conf;
struct lease;
struct cluster_forward;
struct room_service;
struct admin_nodes;

/* This node's readiness as its admin /readyz answers: returns the HTTP
 * status and *json (malloc'd, the caller frees). Thread: any; never blocks
 * on the store (the readiness cache). */
typedef int (*admin_ready_fn)(void *arg, char **json);

/* Opens the nodes view over borrowed handles that must outlive it: lease
 * (the membership and this node's leases), fwd (NULL: peers are not asked),
 * rooms (NULL: no cell count), ready/arg (this node's readiness). Returns
 * the handle (admin_nodes_close). Thread: main; does not block. */
struct admin_nodes *admin_nodes_open(const struct conf *conf, struct lease *lease,
                                     struct cluster_forward *fwd, struct room_service *rooms,
                                     admin_ready_fn ready, void *arg);
void admin_nodes_close(struct admin_nodes *n);

/* Gives a the nodes view (borrowed; NULL: the two routes answer 404).
 * Thread: main, before serving. */
void admin_set_nodes(struct admin *a, struct admin_nodes *n);

/* GET /admin/v1/node, /admin/v1/nodes into r (query key rooms). n may be
 * NULL (404). Thread: any; blocks as said above. */
void admin_nodes_self(struct admin_nodes *n, admin_lookup_fn q, void *ctx, struct admin_reply *r);
void admin_nodes_list(struct admin_nodes *n, admin_lookup_fn q, void *ctx, struct admin_reply *r);

#endif
