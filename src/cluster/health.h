/* SPDX-License-Identifier: Apache-2.0 */
/*
 * health.h: what GET /readyz says about this node (docs/cluster.md). main.c
 * adds one check per dependency: those the command path needs (the lease's
 * Redis under lease.driver redis) make the node unready (503) when down;
 * the others (the broker, Tencent IM, the activity service) only make it
 * "degraded" (200: commands still succeed, their events wait in the outbox).
 * The store is checked by the handler itself.
 */
#ifndef ROOMD_CLUSTER_HEALTH_H
#define ROOMD_CLUSTER_HEALTH_H

#include <stdbool.h>
#include <stddef.h>

#define HEALTH_MAX_CHECKS 8

/* One check: 0 when up, else an error with why (no secrets). Thread: any;
 * may block briefly (a PING). */
typedef int (*health_check_fn)(void *arg, char *why, size_t whylen);

struct node_health {
    struct {
        const char *name;   /* "lease", "broker", "tencent_im" (static) */
        bool needed;        /* down = this node cannot serve commands */
        health_check_fn fn; /* borrowed arg must outlive the health */
        void *arg;
    } checks[HEALTH_MAX_CHECKS];
    int n;
};

/* Adds a check (ignored beyond HEALTH_MAX_CHECKS). Thread: main, before serving. */
void node_health_add(struct node_health *h, const char *name, bool needed, health_check_fn fn,
                     void *arg);

/* Runs every check. Returns 200 (all up: "ready"; only optional ones down:
 * "degraded") or 503 (a needed one down: "unavailable"), with *json the
 * answer {"status":..,"checks":{name:"ok" | "down: why"}} (malloc'd, the
 * caller frees). store_why is the store's failure, NULL when it answered.
 * Thread: any; blocks as long as the checks. */
int node_health_eval(const struct node_health *h, const char *store_why, char **json);

#endif
