/* SPDX-License-Identifier: Apache-2.0 */
/*
 * conf.c: YAML -> struct conf (conf.h), driven by the key table of keys.c:
 * conf_defaults() applies the defaults of its rows, conf_free() frees the
 * strings, the walker stores each YAML key into its row's field, and
 * conf_load()/conf_load_buffer() parse a file or buffer, walk it and hand the
 * result to validate.c. Errors read "FILE:LINE:COL: key.path: problem"
 * (libyaml marks are 0-based; printed 1-based).
 */
#include "conf/conf.h"
#include "conf/internal.h"

#include "core/err.h"
#include "core/xmalloc.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <yaml.h>

/* True when path names a mapping that holds table keys ("store", "store.sqlite"). */
static int
is_section(const char *path)
{
    size_t n = strlen(path);

    for (size_t i = 0; i < conf_nkeys; i++)
        if (strncmp(conf_keys[i].path, path, n) == 0 && conf_keys[i].path[n] == '.')
            return 1;
    return 0;
}

/* ==== Defaults ==== */

/* Applies a row's default text; lists are written "a, b, c". A default that
 * does not parse is a bug in conf_keys[]: abort. */
static void
set_default(struct conf *c, const struct key *k)
{
    if (k->type != K_STRLIST && k->type != K_INT64LIST) {
        if (conf_set_scalar(c, k, k->def) != 0)
            abort();
        return;
    }
    conf_list_clear(c, k);
    for (const char *p = k->def; *p != '\0';) {
        size_t n = strcspn(p, ",");
        char item[64];
        if (n >= sizeof(item) || *(int *)((char *)c + k->aux) >= conf_list_max(k))
            abort();
        memcpy(item, p, n);
        item[n] = '\0';
        if (conf_list_append(c, k, item) != 0)
            abort();
        p += n;
        p += strspn(p, ", ");
    }
}

void
conf_defaults(struct conf *c)
{
    memset(c, 0, sizeof(*c));
    c->path = xstrdup("");
    for (size_t i = 0; i < conf_nkeys; i++)
        set_default(c, &conf_keys[i]);
}

void
conf_free(struct conf *c)
{
    if (c == NULL)
        return;
    for (size_t i = 0; i < conf_nkeys; i++) {
        if (conf_keys[i].type == K_STR)
            free(*(char **)((char *)c + conf_keys[i].off));
        else if (conf_keys[i].type == K_STRLIST)
            conf_list_clear(c, &conf_keys[i]);
    }
    free(c->path);
    free(c);
}

/* ==== The walker ==== */

struct loader {
    const char *file;
    yaml_document_t *doc;
    struct conf *c;
    struct conf_mark marks[CONF_MAX_KEYS];
    char *err;
    size_t errlen;
};

static int fail_at(struct loader *ld, const yaml_node_t *n, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int
fail_at(struct loader *ld, const yaml_node_t *n, const char *path, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    snprintf(ld->err, ld->errlen, "%s:%zu:%zu: %s: %s", ld->file, n->start_mark.line + 1,
             n->start_mark.column + 1, path, msg);
    return ROOMD_EINVAL;
}

static const char *
scalar(const yaml_node_t *n)
{
    return (const char *)n->data.scalar.value;
}

/* A plain "~", "null" or empty scalar. */
static int
is_null(const yaml_node_t *n)
{
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return 0;
    const char *s = scalar(n);
    return *s == '\0' || strcmp(s, "~") == 0 || strcmp(s, "null") == 0;
}

/* What a value of k's type looks like, for errors ("an integer"). */
static const char *
type_name(const struct key *k, char *buf, size_t len)
{
    char names[128];

    switch (k->type) {
    case K_STR:
        return "a string";
    case K_BOOL:
        return "true or false";
    case K_INT:
    case K_INT64:
        return "an integer";
    case K_DUR:
        return "a duration like 500ms, 3s, 5m";
    case K_STRLIST:
        return "a list of strings";
    case K_INT64LIST:
        return "a list of integers";
    case K_CHOICE:
        snprintf(buf, len, "one of %s", conf_join_names(k->names, names, sizeof(names)));
        return buf;
    case K_SYNC:
        return "one of full, normal";
    }
    return "?";
}

/* A mapping entry of a string list (admin.tokens) as "key=value key=value":
 * scalar keys and values without spaces, '=' or quotes. */
static int
flatten(struct loader *ld, const yaml_node_t *e, const char *path, char *out, size_t outlen)
{
    size_t len = 0;

    out[0] = '\0';
    for (yaml_node_pair_t *p = e->data.mapping.pairs.start; p < e->data.mapping.pairs.top; p++) {
        yaml_node_t *kn = yaml_document_get_node(ld->doc, p->key);
        yaml_node_t *vn = yaml_document_get_node(ld->doc, p->value);
        if (kn->type != YAML_SCALAR_NODE || vn->type != YAML_SCALAR_NODE)
            return fail_at(ld, e, path, "an entry's keys and values must be scalars");
        const char *kv[2] = {scalar(kn), scalar(vn)};
        for (int i = 0; i < 2; i++)
            if (*kv[i] == '\0' || strpbrk(kv[i], " \t=\"'") != NULL)
                return fail_at(ld, i ? vn : kn, path, "\"%s\": no spaces, '=' or quotes here",
                               kv[i]);
        len += (size_t)snprintf(out + len, len < outlen ? outlen - len : 0, "%s%s=%s",
                                len ? " " : "", kv[0], kv[1]);
        if (len >= outlen)
            return fail_at(ld, e, path, "entry too long");
    }
    return 0;
}

static int
set_list(struct loader *ld, const struct key *k, const yaml_node_t *n, const char *path)
{
    char tn[160];
    int i = 0;

    if (is_null(n))
        n = NULL; /* "key:" alone is an empty list */
    else if (n->type != YAML_SEQUENCE_NODE)
        return fail_at(ld, n, path, "expected %s", type_name(k, tn, sizeof(tn)));
    conf_list_clear(ld->c, k);
    if (n == NULL)
        return 0;
    for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top;
         it++, i++) {
        yaml_node_t *e = yaml_document_get_node(ld->doc, *it);
        if (i >= conf_list_max(k))
            return fail_at(ld, e, path, "too many entries (at most %d)", conf_list_max(k));
        char flat[1024];
        if (e->type == YAML_MAPPING_NODE && k->type == K_STRLIST) {
            if (flatten(ld, e, path, flat, sizeof(flat)) != 0)
                return ROOMD_EINVAL;
            if (conf_list_append(ld->c, k, flat) != 0)
                return fail_at(ld, e, path, "cannot store the entry");
            continue;
        }
        if (e->type != YAML_SCALAR_NODE)
            return fail_at(ld, e, path, "expected %s", type_name(k, tn, sizeof(tn)));
        if (conf_list_append(ld->c, k, scalar(e)) != 0)
            return fail_at(ld, e, path, "expected an integer, got \"%s\"", scalar(e));
    }
    return 0;
}

static int
set_value(struct loader *ld, const struct key *k, const yaml_node_t *n, const char *path)
{
    char tn[160];

    if (k->type == K_STRLIST || k->type == K_INT64LIST)
        return set_list(ld, k, n, path);
    if (n->type != YAML_SCALAR_NODE)
        return fail_at(ld, n, path, "expected %s", type_name(k, tn, sizeof(tn)));
    if (conf_set_scalar(ld->c, k, k->type == K_STR && is_null(n) ? "" : scalar(n)) == 0)
        return 0;
    return fail_at(ld, n, path, "expected %s, got \"%s\"", type_name(k, tn, sizeof(tn)), scalar(n));
}

/* Walks mapping n whose dotted path is prefix ("" for the root). */
static int
walk(struct loader *ld, const yaml_node_t *n, const char *prefix)
{
    char path[256];
    int rc;

    if (n->type != YAML_MAPPING_NODE) {
        if (*prefix == '\0')
            return fail_at(ld, n, "(top level)", "expected a mapping of sections");
        return fail_at(ld, n, prefix, "expected a mapping");
    }
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *kn = yaml_document_get_node(ld->doc, p->key);
        yaml_node_t *vn = yaml_document_get_node(ld->doc, p->value);
        if (kn->type != YAML_SCALAR_NODE)
            return fail_at(ld, kn, *prefix ? prefix : "(top level)", "keys must be scalars");
        snprintf(path, sizeof(path), "%s%s%s", prefix, *prefix ? "." : "", scalar(kn));
        int idx = conf_key_index(path);
        if (idx >= 0) {
            if (ld->marks[idx].set)
                return fail_at(ld, kn, path, "duplicate key");
            ld->marks[idx].set = 1;
            ld->marks[idx].line = vn->start_mark.line;
            ld->marks[idx].col = vn->start_mark.column;
            if ((rc = set_value(ld, &conf_keys[idx], vn, path)) != 0)
                return rc;
        } else if (is_section(path)) {
            if (is_null(vn))
                continue; /* "section:" with nothing under it */
            if ((rc = walk(ld, vn, path)) != 0)
                return rc;
        } else {
            return fail_at(ld, kn, path, "unknown key");
        }
    }
    return 0;
}

/* ==== Loading ==== */

/* Parses the YAML that parser reads, under the name name. See conf_load. */
static int
load_parsed(const char *name, yaml_parser_t *parser, struct conf **out, char *err, size_t errlen)
{
    struct conf *c = xcalloc(1, sizeof(*c));
    struct loader *ld = xcalloc(1, sizeof(*ld));
    yaml_document_t doc;
    int doc_ok = 0, rc = ROOMD_EINVAL;

    conf_defaults(c);
    free(c->path);
    c->path = xstrdup(name);
    if (!yaml_parser_load(parser, &doc)) {
        const char *what = parser->problem ? parser->problem : "invalid YAML";
        if (parser->context)
            snprintf(err, errlen, "%s:%zu:%zu: syntax error: %s %s", name,
                     parser->problem_mark.line + 1, parser->problem_mark.column + 1,
                     parser->context, what);
        else
            snprintf(err, errlen, "%s:%zu:%zu: syntax error: %s", name,
                     parser->problem_mark.line + 1, parser->problem_mark.column + 1, what);
        goto out;
    }
    doc_ok = 1;

    ld->file = name;
    ld->doc = &doc;
    ld->c = c;
    ld->err = err;
    ld->errlen = errlen;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root != NULL && !is_null(root) && (rc = walk(ld, root, "")) != 0)
        goto out;

    if ((rc = conf_validate_at(c, name, ld->marks, err, errlen)) != 0)
        goto out;
    if (conf_empty(c->app.node_id)) {
        char host[256] = "";
        if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0')
            strcpy(host, "roomd");
        free(c->app.node_id);
        c->app.node_id = xasprintf("%s-%ld", host, (long)getpid());
    }
    rc = 0;
    *out = c;
    c = NULL;
out:
    if (doc_ok)
        yaml_document_delete(&doc);
    free(ld);
    conf_free(c);
    return rc;
}

int
conf_load(const char *path, struct conf **out, char *err, size_t errlen)
{
    yaml_parser_t parser;
    FILE *f;
    int rc;

    *out = NULL;
    if ((f = fopen(path, "rb")) == NULL) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return ROOMD_EINVAL;
    }
    if (!yaml_parser_initialize(&parser)) {
        snprintf(err, errlen, "%s: cannot initialize the YAML parser", path);
        fclose(f);
        return ROOMD_EINVAL;
    }
    yaml_parser_set_input_file(&parser, f);
    rc = load_parsed(path, &parser, out, err, errlen);
    yaml_parser_delete(&parser);
    fclose(f);
    return rc;
}

int
conf_load_buffer(const char *name, const char *buf, size_t len, struct conf **out, char *err,
                 size_t errlen)
{
    yaml_parser_t parser;
    int rc;

    *out = NULL;
    if (!yaml_parser_initialize(&parser)) {
        snprintf(err, errlen, "%s: cannot initialize the YAML parser", name);
        return ROOMD_EINVAL;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)buf, len);
    rc = load_parsed(name, &parser, out, err, errlen);
    yaml_parser_delete(&parser);
    return rc;
}
