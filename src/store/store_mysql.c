/* store_mysql.c: MySQL/MariaDB backend. Placeholder until the MySQL issue lands:
 * opening it fails with a clear message. */
#include "store/store.h"

#include "core/err.h"

#include <stdio.h>

static int
my_open(struct store **out, const struct conf_store *cs, char *err, size_t errlen)
{
    (void)cs;
    *out = NULL;
    snprintf(err, errlen, "store.driver: mysql backend not built yet");
    return ROOMD_EINVAL;
}

const struct store_ops store_mysql_ops = {.name = "mysql", .open = my_open};
