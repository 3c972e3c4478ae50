/* SPDX-License-Identifier: Apache-2.0 */
/*
 * conf/internal.h: what the files of src/conf share (not for other modules):
 * the row of the key table, the table itself (keys.c), the YAML positions the
 * loader (conf.c) hands to the validation (validate.c), and the value helpers
 * of value.c. Everything here is pure: any thread, no blocking.
 */
#ifndef ROOMD_CONF_INTERNAL_H
#define ROOMD_CONF_INTERNAL_H

#include "conf/conf.h"

#include <stddef.h>
#include <stdint.h>

#define CONF_MAX_KEYS 256 /* rows conf_keys[] may hold (a test checks) */

enum ktype {
    K_STR,       /* char * */
    K_BOOL,      /* bool */
    K_INT,       /* int */
    K_INT64,     /* int64_t */
    K_DUR,       /* int64_t milliseconds, written "500ms", "3s", "5m", "1h" */
    K_STRLIST,   /* char *[CONF_MAX_LIST] + int count at aux */
    K_INT64LIST, /* int64_t[CONF_MAX_ROCKET_LEVELS] + int count at aux */
    K_CHOICE,    /* an enum stored as int: the index of the value in names */
    K_SYNC,      /* bool synchronous_full: full|normal */
};

/* A row's single-key rule. */
enum check {
    CK_NONE,
    CK_GT,           /* value > lo */
    CK_GE,           /* value >= lo */
    CK_RANGE,        /* lo <= value <= hi */
    CK_NONEMPTY,     /* string not empty */
    CK_ONE_OF,       /* string (or K_CHOICE index) one of names */
    CK_HOSTPORT,     /* "host:port", port 1..65535 */
    CK_HOSTPORT_OPT, /* empty or "host:port" */
};

struct key {
    const char *path;
    enum ktype type;
    size_t off;
    size_t aux;      /* list count offset */
    const char *def; /* default as written in YAML; lists "a, b" */
    enum check check;
    int64_t lo, hi;
    const char *const *names; /* CK_ONE_OF and K_CHOICE */
    const char *when;         /* rule only when "key" is true or "key=value" */
    const char *note;         /* appended to the rule's message */
    const char *doc;
};

/* The key table (keys.c): one row per key, in the documented order. */
extern const struct key conf_keys[];
extern const size_t conf_nkeys;

/* keys.c: index of the row whose path is path, or -1. */
int conf_key_index(const char *path);

/* Where a key's value stood in the YAML, by row index. */
struct conf_mark {
    int set;
    size_t line, col; /* 0-based, as libyaml gives them */
};

/* validate.c: checks c's rules (each row's, then those that span keys);
 * returns 0, or ROOMD_EINVAL with the first failure in err, prefixed
 * "FILE:LINE:COL: " (file and marks[] set; marks may be NULL) or "FILE: "
 * (file set) or nothing. */
int conf_validate_at(const struct conf *c, const char *file, const struct conf_mark *marks,
                     char *err, size_t errlen);

/* A NULL or empty string. */
static inline int
conf_empty(const char *s)
{
    return s == NULL || *s == '\0';
}

/* value.c: stores scalar text s into row k of c (not the list types);
 * returns 0, or -1 when s is not a value of k's type. */
int conf_set_scalar(struct conf *c, const struct key *k, const char *s);

/* Entries a list row holds at most. */
int conf_list_max(const struct key *k);

/* Empties list row k of c (frees its strings). */
void conf_list_clear(struct conf *c, const struct key *k);

/* Appends s to list row k of c; returns 0, or -1 when s is not an integer of
 * an integer list. The caller checks conf_list_max(). */
int conf_list_append(struct conf *c, const struct key *k, const char *s);

/* names (NULL-terminated) joined by ", " into buf; returns buf. */
const char *conf_join_names(const char *const *names, char *buf, size_t len);

/* Index of s in names, or -1. */
int conf_name_index(const char *const *names, const char *s);

/* How many names before the NULL. */
int conf_count_names(const char *const *names);

#endif
