/* SPDX-License-Identifier: Apache-2.0 */
/*
 * version.h: what this build is, for `--version`, the start-up log line and
 * roomd_build_info. Set by CMake (project VERSION, `git describe` at
 * configure time) on version.c alone, so a new commit rebuilds one file.
 */
#ifndef ROOMD_VERSION_H
#define ROOMD_VERSION_H

/* "0.1.0" (the release tag or the VERSION file; "0.1.0-3-gabc1234" after the tag,
 * cmake/version.cmake); static strings, any thread. */
extern const char roomd_version[];
/* Short commit id ("e12ba69", "-dirty" when the tree had changes), or "unknown". */
extern const char roomd_commit[];

#endif
