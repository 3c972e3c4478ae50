/* SPDX-License-Identifier: Apache-2.0 */
/*
 * value.c: the text of one value -> its field in struct conf, by the row's
 * type (conf/internal.h): durations, booleans, integers, enums, lists. Used
 * for the defaults of conf_keys[] and for the values of a YAML file alike.
 */
#include "conf/internal.h"

#include "core/xmalloc.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* names joined by ", " into buf ("direct, mq, dual"); returns buf. */
const char *
conf_join_names(const char *const *names, char *buf, size_t len)
{
    size_t used = 0;

    buf[0] = '\0';
    for (; *names != NULL && used < len; names++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s", used ? ", " : "", *names);
    return buf;
}

int
conf_name_index(const char *const *names, const char *s)
{
    for (int i = 0; s != NULL && names[i] != NULL; i++)
        if (strcmp(s, names[i]) == 0)
            return i;
    return -1;
}

int
conf_count_names(const char *const *names)
{
    int n = 0;

    while (names[n] != NULL)
        n++;
    return n;
}

/* ==== Scalars ==== */

int
conf_parse_duration(const char *s, int64_t *out_ms)
{
    int64_t total = 0;
    const char *p = s;

    if (s == NULL || *s == '\0')
        return -1;
    if (strcmp(s, "0") == 0) {
        *out_ms = 0;
        return 0;
    }
    while (*p != '\0') {
        if (*p < '0' || *p > '9')
            return -1;
        int64_t n = 0;
        while (*p >= '0' && *p <= '9') {
            if (n > (INT64_MAX - 9) / 10)
                return -1;
            n = n * 10 + (*p++ - '0');
        }
        int64_t unit;
        if (strncmp(p, "ms", 2) == 0) {
            unit = 1;
            p += 2;
        } else if (*p == 's') {
            unit = 1000;
            p++;
        } else if (*p == 'm') {
            unit = 60000;
            p++;
        } else if (*p == 'h') {
            unit = 3600000;
            p++;
        } else {
            return -1;
        }
        if (n > (INT64_MAX - total) / unit)
            return -1;
        total += n * unit;
    }
    *out_ms = total;
    return 0;
}

static int
parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"true", "yes", "on"};
    static const char *const no[] = {"false", "no", "off"};

    for (size_t i = 0; i < 3; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = true;
            return 0;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = false;
            return 0;
        }
    }
    return -1;
}

static int
parse_int64(const char *s, int64_t *out)
{
    char *end;

    if (*s == '\0')
        return -1;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0')
        return -1;
    *out = v;
    return 0;
}

static void
set_str(char **dst, const char *v)
{
    free(*dst);
    *dst = xstrdup(v);
}

/* Stores scalar text s into row k of c (not the list types). Returns 0 or -1
 * when s is not of k's type. */
int
conf_set_scalar(struct conf *c, const struct key *k, const char *s)
{
    void *dst = (char *)c + k->off;
    int64_t v;
    bool b;
    int i;

    switch (k->type) {
    case K_STR:
        set_str(dst, s);
        return 0;
    case K_BOOL:
        if (parse_bool(s, &b) != 0)
            return -1;
        *(bool *)dst = b;
        return 0;
    case K_INT:
        if (parse_int64(s, &v) != 0 || v < INT_MIN || v > INT_MAX)
            return -1;
        *(int *)dst = (int)v;
        return 0;
    case K_INT64:
    case K_DUR:
        if ((k->type == K_DUR ? conf_parse_duration(s, &v) : parse_int64(s, &v)) != 0)
            return -1;
        *(int64_t *)dst = v;
        return 0;
    case K_CHOICE:
        if ((i = conf_name_index(k->names, s)) < 0)
            return -1;
        *(int *)dst = i;
        return 0;
    case K_SYNC:
        if (strcmp(s, "full") != 0 && strcmp(s, "normal") != 0)
            return -1;
        *(bool *)dst = strcmp(s, "full") == 0;
        return 0;
    case K_STRLIST:
    case K_INT64LIST:
        break;
    }
    return -1;
}

int
conf_list_max(const struct key *k)
{
    return k->type == K_STRLIST ? CONF_MAX_LIST : CONF_MAX_ROCKET_LEVELS;
}

/* Empties list row k of c. */
void
conf_list_clear(struct conf *c, const struct key *k)
{
    int *count = (int *)((char *)c + k->aux);

    if (k->type == K_STRLIST)
        for (int j = 0; j < *count; j++) {
            free(((char **)((char *)c + k->off))[j]);
            ((char **)((char *)c + k->off))[j] = NULL;
        }
    *count = 0;
}

/* Appends entry s to list row k of c; returns 0, or -1 when s is not an
 * integer of an integer list. The caller checks conf_list_max(). */
int
conf_list_append(struct conf *c, const struct key *k, const char *s)
{
    int *count = (int *)((char *)c + k->aux);

    if (k->type == K_STRLIST)
        ((char **)((char *)c + k->off))[*count] = xstrdup(s);
    else if (parse_int64(s, &((int64_t *)((char *)c + k->off))[*count]) != 0)
        return -1;
    (*count)++;
    return 0;
}
