/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tree.h: the comparator of a tsearch(3) tree keyed by a name: the held
 * leases (lease_redis.c) and the parked projection updates
 * (projection_redis.c).
 */
#ifndef ROOMD_TREE_H
#define ROOMD_TREE_H

/* Orders two entries by name: each a struct whose first member is its
 * NUL-terminated char * name (the probe of a tfind too). Returns strcmp's
 * answer. Owns nothing. Thread: any. Never blocks. */
int tree_name_cmp(const void *a, const void *b);

#endif
