/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lease.h: which node owns a room's cell. lease_local.c (one node: always
 * granted, token 0) and lease_redis.c (SET NX PX with a fencing token, renewed
 * while the cell lives). The token travels in struct mutation and the store
 * refuses a commit carrying a token older than the room's, so an owner whose
 * lease expired can never commit.
 *
 * Threads: any, concurrently. acquire/release block on Redis (bounded by
 * redis.command_timeout).
 */
#ifndef ROOMD_LEASE_H
#define ROOMD_LEASE_H

#include <stddef.h>
#include <stdint.h>

struct conf;
struct lease;

struct lease_ops {
    /* Ensures this node holds the lease of (app, room_id), taking or renewing
     * it. Returns 0 and *token (monotonic per room), ROOMD_ENOTOWNER with the
     * owner's advertised addresses in owner[ownerlen] ("<public> <admin>":
     * http.advertise_addr, admin.advertise_addr; only "<public>" from a node
     * that does not advertise its admin listener), or ROOMD_EUNAVAIL. */
    int (*acquire)(struct lease *l, const char *app, const char *room_id, int64_t *token,
                   char *owner, size_t ownerlen);
    /* Gives the lease up (cell evicted, shutdown). Best effort. */
    void (*release)(struct lease *l, const char *app, const char *room_id, int64_t token);
    void (*close)(struct lease *l);
    /* Optional (NULL = always): 0 when leases can be taken now, else
     * ROOMD_EUNAVAIL with why filled. Blocks up to redis.command_timeout. */
    int (*ready)(struct lease *l, char *why, size_t whylen);
    /* Optional (NULL = not tracked): the leases this node holds, names
     * "<app>:<room>" sorted, the first max of them in *names (malloc'd
     * array of malloc'd strings, lease_names_free), *n of them; returns the
     * total held. From memory: never blocks but on a mutex. */
    size_t (*held)(struct lease *l, size_t max, char ***names, size_t *n);
    /* Optional (NULL = no membership): the nodes the lease store knows
     * (lease_members). Blocks up to redis.command_timeout per round trip. */
    int (*members)(struct lease *l, char **json);
};

struct lease {
    const struct lease_ops *ops;
};

/* Opens the lease named by conf->lease.driver. Returns 0 and *out, or an error. */
int lease_open(struct lease **out, const struct conf *conf, char *err, size_t errlen);
void lease_close(struct lease *l);
/* 0 when this node can take leases now (local: always; redis: Redis answers
 * a PING), else ROOMD_EUNAVAIL with why. Thread: any; blocks up to
 * redis.command_timeout. Matches node_health's check (cluster/health.h). */
int lease_ready(void *l, char *why, size_t whylen);

/* This node's held leases (lease_ops.held; local: 0, nothing listed).
 * Thread: any; never blocks but on a mutex. */
size_t lease_held(struct lease *l, size_t max, char ***names, size_t *n);
void lease_names_free(char **names, size_t n);

/*
 * The cluster's nodes as the lease store knows them (lease_redis.c: every
 * node writes a heartbeat <prefix>node:<node_id> with the lease ttl, and
 * its entry in the hash <prefix>nodes, each renew_every). Returns 0 and
 * *json, a malloc'd JSON array of {"node_id", "instance", "public_addr",
 * "admin_addr", "version", "commit", "started_ms", "seen_ms", "alive"}
 * (alive: its heartbeat has not expired; an entry not seen for a day is
 * dropped), or ROOMD_EUNAVAIL (Redis down), or ROOMD_ENOTFOUND (local lease:
 * no membership). Thread: any; blocks on Redis.
 */
int lease_members(struct lease *l, char **json);

#endif
