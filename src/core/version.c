/* SPDX-License-Identifier: Apache-2.0 */
/* version.c: the build's version and commit (version.h). */
#include "core/version.h"

#ifndef ROOMD_VERSION
#define ROOMD_VERSION "0.0.0"
#endif
#ifndef ROOMD_COMMIT
#define ROOMD_COMMIT "unknown"
#endif

const char roomd_version[] = ROOMD_VERSION;
const char roomd_commit[] = ROOMD_COMMIT;
