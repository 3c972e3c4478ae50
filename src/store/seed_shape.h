/* SPDX-License-Identifier: Apache-2.0 */
/*
 * seed_shape.h: what both backends' adoption of seed-shaped tables shares
 * (docs/migrate.md; mysql/schema.c and sqlite/schema.c adopt_table).
 */
#ifndef ROOMD_STORE_SEED_SHAPE_H
#define ROOMD_STORE_SEED_SHAPE_H

#include <stdbool.h>
#include <stddef.h>

/* Whether the first len bytes of name are a column roomd's tables have (any
 * case): a seed table's other columns must be nullable or have a default,
 * since roomd's INSERTs never write them. Pure; any thread. */
bool store_known_column(const char *name, size_t len);

#endif
