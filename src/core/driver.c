/* SPDX-License-Identifier: Apache-2.0 */
/* driver.c: the "<area>.driver" lookup (see driver.h). */
#include "core/driver.h"

#include <stdio.h>
#include <string.h>

int
driver_pick(const char *key, const char *name, const char *const *names, char *err, size_t errlen)
{
    char list[128] = "";
    size_t used = 0;

    for (int i = 0; name != NULL && names[i] != NULL; i++)
        if (strcmp(name, names[i]) == 0)
            return i;
    for (int i = 0; names[i] != NULL && used < sizeof list; i++)
        used +=
            (size_t)snprintf(list + used, sizeof list - used, "%s%s", i > 0 ? "|" : "", names[i]);
    snprintf(err, errlen, "%s: unknown driver \"%s\" (%s)", key, name != NULL ? name : "", list);
    return -1;
}
