/* projection.c: picks the projection backend named by projection.driver
 * (projection_memory.c, projection_redis.c) and rebuilds one from a source
 * of room states. Read projection.h first. */
#include "projection/projection.h"

#include "conf/conf.h"
#include "core/err.h"
#include "core/log.h"

#include <stdio.h>
#include <string.h>

int projection_memory_open(struct projection **out, const struct conf *conf, char *err,
                           size_t errlen);
int projection_redis_open(struct projection **out, const struct conf *conf, char *err,
                          size_t errlen);

int
projection_open(struct projection **out, const struct conf *conf, char *err, size_t errlen)
{
    *out = NULL;
    if (strcmp(conf->projection.driver, "memory") == 0)
        return projection_memory_open(out, conf, err, errlen);
    if (strcmp(conf->projection.driver, "redis") == 0)
        return projection_redis_open(out, conf, err, errlen);
    snprintf(err, errlen, "projection.driver: unknown driver \"%s\" (memory|redis)",
             conf->projection.driver);
    return ROOMD_EINVAL;
}

void
projection_close(struct projection *p)
{
    if (p != NULL)
        p->ops->close(p);
}

int
projection_rebuild(struct projection *p, const char *app, projection_next_fn next, void *arg)
{
    const struct proj_room *r = NULL;
    size_t n = 0;
    int rc;

    if ((rc = p->ops->clear(p, app)) != 0)
        return rc;
    while ((rc = next(arg, &r)) == 1) {
        if ((rc = p->ops->update(p, r)) != 0)
            return rc;
        n++;
    }
    if (rc == 0)
        log_info("projection", "rebuilt", "app=%s rooms=%zu", app, n);
    return rc;
}
