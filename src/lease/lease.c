/* SPDX-License-Identifier: Apache-2.0 */
/* lease.c: picks the lease backend named by lease.driver (see lease.h). */
#include "lease/lease.h"

#include "conf/conf.h"
#include "core/driver.h"
#include "core/err.h"

#include <stdlib.h>

int lease_local_open(struct lease **out, const struct conf *conf, char *err, size_t errlen);
int lease_redis_open(struct lease **out, const struct conf *conf, char *err, size_t errlen);

int
lease_open(struct lease **out, const struct conf *conf, char *err, size_t errlen)
{
    static const char *const drivers[] = {"local", "redis", NULL};
    static int (*const open[])(struct lease **, const struct conf *, char *,
                               size_t) = {lease_local_open, lease_redis_open};
    int d = driver_pick("lease.driver", conf->lease.driver, drivers, err, errlen);

    *out = NULL;
    return d < 0 ? ROOMD_EINVAL : open[d](out, conf, err, errlen);
}

void
lease_close(struct lease *l)
{
    if (l != NULL)
        l->ops->close(l);
}

int
lease_ready(void *arg, char *why, size_t whylen)
{
    struct lease *l = arg;

    return l->ops->ready != NULL ? l->ops->ready(l, why, whylen) : 0;
}

size_t
lease_held(struct lease *l, size_t max, char ***names, size_t *n)
{
    *names = NULL;
    *n = 0;
    return l != NULL && l->ops->held != NULL ? l->ops->held(l, max, names, n) : 0;
}

void
lease_names_free(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

int
lease_members(struct lease *l, char **json)
{
    *json = NULL;
    return l != NULL && l->ops->members != NULL ? l->ops->members(l, json) : ROOMD_ENOTFOUND;
}
