/* SPDX-License-Identifier: Apache-2.0 */
/*
 * file.h: reading a small text file that a config key names (a PEM key or
 * certificate), with errors that name the key.
 */
#ifndef ROOMD_CORE_FILE_H
#define ROOMD_CORE_FILE_H

#include <stddef.h>

/* Reads at most max - 1 bytes of file (a longer file is cut there) into a
 * new NUL-terminated buffer. Returns it (the caller frees it) with *len the
 * bytes read, or NULL with err "<key>: cannot open <file>". Thread: any;
 * blocks on the read. */
char *file_read_text(const char *key, const char *file, size_t max, size_t *len, char *err,
                     size_t errlen);

#endif
