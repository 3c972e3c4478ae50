/* lease.c: picks the lease backend named by lease.driver (see lease.h). */
#include "lease/lease.h"

#include "conf/conf.h"
#include "core/err.h"

#include <stdio.h>
#include <string.h>

int lease_local_open(struct lease **out);
int lease_redis_open(struct lease **out, const struct conf *conf, char *err, size_t errlen);

int
lease_open(struct lease **out, const struct conf *conf, char *err, size_t errlen)
{
    *out = NULL;
    if (strcmp(conf->lease.driver, "local") == 0)
        return lease_local_open(out);
    if (strcmp(conf->lease.driver, "redis") == 0)
        return lease_redis_open(out, conf, err, errlen);
    snprintf(err, errlen, "lease.driver: unknown driver \"%s\" (local|redis)", conf->lease.driver);
    return ROOMD_EINVAL;
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
