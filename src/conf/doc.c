/* SPDX-License-Identifier: Apache-2.0 */
/*
 * doc.c: the key reference of docs/conf.md, written from the key table
 * (`roomd --print-config-doc`; test_conf checks the checked-in doc matches).
 */
#include "conf/internal.h"

#include <stdio.h>

static const char *
doc_type(const struct key *k)
{
    static const char *const names[] = {
        [K_STR] = "string",
        [K_BOOL] = "bool",
        [K_INT] = "int",
        [K_INT64] = "int64",
        [K_DUR] = "duration",
        [K_STRLIST] = "list of strings",
        [K_INT64LIST] = "list of ints",
        [K_CHOICE] = "enum",
        [K_SYNC] = "enum",
    };
    return names[k->type];
}

/* The rule of row k as the doc shows it ("> 0 (when redis.enabled)"). */
static void
doc_rule(const struct key *k, char *buf, size_t len)
{
    char names[160];
    size_t n = 0;

    buf[0] = '\0';
    switch (k->check) {
    case CK_NONE:
        if (k->type == K_SYNC)
            snprintf(buf, len, "one of full, normal");
        return;
    case CK_GT:
        n = (size_t)snprintf(buf, len, "> %lld", (long long)k->lo);
        break;
    case CK_GE:
        n = (size_t)snprintf(buf, len, ">= %lld", (long long)k->lo);
        break;
    case CK_RANGE:
        n = (size_t)snprintf(buf, len, "%lld..%lld", (long long)k->lo, (long long)k->hi);
        break;
    case CK_NONEMPTY:
        n = (size_t)snprintf(buf, len, "not empty");
        break;
    case CK_ONE_OF:
        n = (size_t)snprintf(buf, len, "one of %s",
                             conf_join_names(k->names, names, sizeof(names)));
        break;
    case CK_HOSTPORT:
        n = (size_t)snprintf(buf, len, "host:port");
        break;
    case CK_HOSTPORT_OPT:
        n = (size_t)snprintf(buf, len, "host:port or empty");
        break;
    }
    if (k->when != NULL && n < len)
        snprintf(buf + n, len - n, " (when %s)", k->when);
}

void
conf_write_doc(FILE *out)
{
    char rule[256];

    fprintf(out, "%s\n", CONF_DOC_BEGIN);
    fprintf(out, "| key | type | default | rule | what |\n| --- | --- | --- | --- | --- |\n");
    for (size_t i = 0; i < conf_nkeys; i++) {
        const struct key *k = &conf_keys[i];
        int list = k->type == K_STRLIST || k->type == K_INT64LIST;
        doc_rule(k, rule, sizeof(rule));
        fprintf(out, "| `%s` | %s | `%s%s%s` | %s | %s |\n", k->path, doc_type(k),
                list ? "[" : (k->type == K_STR ? "\"" : ""), k->def,
                list ? "]" : (k->type == K_STR ? "\"" : ""), rule, k->doc);
    }
    fprintf(out, "%s\n", CONF_DOC_END);
}
