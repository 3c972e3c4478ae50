/* SPDX-License-Identifier: Apache-2.0 */
/* health.c: the /readyz verdict of this node (health.h). */
#include "cluster/health.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

void
node_health_add(struct node_health *h, const char *name, bool needed, health_check_fn fn, void *arg)
{
    if (h->n >= HEALTH_MAX_CHECKS)
        return;
    h->checks[h->n].name = name;
    h->checks[h->n].needed = needed;
    h->checks[h->n].fn = fn;
    h->checks[h->n].arg = arg;
    h->n++;
}

static json_t *
down(const char *why)
{
    char text[320];

    snprintf(text, sizeof(text), "down: %s", why);
    return json_string(text);
}

int
node_health_eval(const struct node_health *h, const char *store_why, char **json)
{
    json_t *checks = json_object(), *o;
    bool unready = store_why != NULL, degraded = false;

    json_object_set_new(checks, "store", store_why ? down(store_why) : json_string("ok"));
    for (int i = 0; h != NULL && i < h->n; i++) {
        char why[256] = "";
        int rc = h->checks[i].fn(h->checks[i].arg, why, sizeof(why));
        json_object_set_new(checks, h->checks[i].name, rc == 0 ? json_string("ok") : down(why));
        if (rc != 0 && h->checks[i].needed)
            unready = true;
        else if (rc != 0)
            degraded = true;
    }
    o = json_pack("{s:s, s:o}", "status",
                  unready ? "unavailable" : (degraded ? "degraded" : "ready"), "checks", checks);
    *json = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    if (*json == NULL)
        abort();
    return unready ? 503 : 200;
}
