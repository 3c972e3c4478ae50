/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cases.c: one test function per run (helpers.h th_run_group). The program's
 * argv is read by a constructor (glibc passes argc/argv to it), so the test
 * programs keep main(void).
 */
#include "helpers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int listing;        /* --list */
static const char *wanted; /* the one id to run, or NULL: all */
static int matched;

static void
check_matched(void)
{
    if (wanted != NULL && !matched) {
        fprintf(stderr, "no test named \"%s\" (--list prints the names)\n", wanted);
        _exit(1);
    }
}

__attribute__((constructor)) static void
read_args(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--list") == 0)
        listing = 1;
    else if (argc > 1)
        wanted = argv[1];
    atexit(check_matched);
}

int
th_listing(void)
{
    return listing;
}

/* "name", or "group.name" for a group other than "tests", into buf. */
static const char *
case_id(const char *group, const char *name, char *buf, size_t len)
{
    if (strcmp(group, "tests") == 0)
        snprintf(buf, len, "%s", name);
    else
        snprintf(buf, len, "%s.%s", group, name);
    return buf;
}

int
th_run_group(const char *group, const struct CMUnitTest *tests, size_t n, CMFixtureFunction setup,
             CMFixtureFunction teardown)
{
    char id[256];

    if (listing) {
        for (size_t i = 0; i < n; i++)
            printf("%s\n", case_id(group, tests[i].name, id, sizeof(id)));
        fflush(stdout);
        return 0;
    }
    if (wanted == NULL)
        return _cmocka_run_group_tests(group, tests, n, setup, teardown);
    for (size_t i = 0; i < n; i++)
        if (strcmp(case_id(group, tests[i].name, id, sizeof(id)), wanted) == 0) {
            matched = 1;
            return _cmocka_run_group_tests(group, &tests[i], 1, setup, teardown);
        }
    return 0;
}
