/* SPDX-License-Identifier: Apache-2.0 */
/*
 * driver.h: the lookup behind every "<area>.driver" config key (lease,
 * projection, wallet, the admin store): which of a fixed list of names the
 * configured one is, with the error that names the key when it is none.
 */
#ifndef ROOMD_DRIVER_H
#define ROOMD_DRIVER_H

#include <stddef.h>

/* Returns the index of name in names (a NULL-terminated list), or -1 after
 * writing "<key>: unknown driver \"<name>\" (<a>|<b>..)" into err. name may
 * be NULL (then it is unknown). Owns nothing; reads only its arguments.
 * Thread: any. Never blocks. */
int driver_pick(const char *key, const char *name, const char *const *names, char *err,
                size_t errlen);

#endif
