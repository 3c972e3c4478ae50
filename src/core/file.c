/* SPDX-License-Identifier: Apache-2.0 */
/* file.c: file_read_text (file.h). */
#include "core/file.h"

#include "core/xmalloc.h"

#include <stdio.h>

char *
file_read_text(const char *key, const char *file, size_t max, size_t *len, char *err, size_t errlen)
{
    FILE *f = fopen(file, "r");
    char *buf;

    *len = 0;
    if (f == NULL) {
        snprintf(err, errlen, "%s: cannot open %s", key, file);
        return NULL;
    }
    buf = xmalloc(max);
    *len = fread(buf, 1, max - 1, f);
    fclose(f);
    buf[*len] = '\0';
    return buf;
}
