/* SPDX-License-Identifier: Apache-2.0 */
/* projection.c: picks the projection backend named by projection.driver
 * (projection_memory.c, projection_redis.c) and rebuilds one from a source
 * of room states. Read projection.h first. */
#include "projection/projection.h"

#include "conf/conf.h"
#include "core/driver.h"
#include "core/err.h"
#include "core/log.h"

int projection_memory_open(struct projection **out, const struct conf *conf, char *err,
                           size_t errlen);
int projection_redis_open(struct projection **out, const struct conf *conf, char *err,
                          size_t errlen);

int
projection_open(struct projection **out, const struct conf *conf, char *err, size_t errlen)
{
    static const char *const drivers[] = {"memory", "redis", NULL};
    int d = driver_pick("projection.driver", conf->projection.driver, drivers, err, errlen);

    *out = NULL;
    if (d < 0)
        return ROOMD_EINVAL;
    return d == 0 ? projection_memory_open(out, conf, err, errlen)
                  : projection_redis_open(out, conf, err, errlen);
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
