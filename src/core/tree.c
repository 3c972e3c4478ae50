/* SPDX-License-Identifier: Apache-2.0 */
/* tree.c: the name comparator of tree.h. */
#include "core/tree.h"

#include <string.h>

int
tree_name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}
