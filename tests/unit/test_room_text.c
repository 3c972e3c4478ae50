/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_room_text.c: the command path's text buffer (src/room/text.c):
 * text_printf writes the conversions the command path uses as printf does,
 * and the buffer grows past its first allocation.
 */
#include "helpers.h"

#include "room/text.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* text_printf and snprintf of the same format and values give the same text. */
static void
test_printf_as_printf(void **state)
{
    static const long long lls[] = {0, 1, -1, 9, 10, -10, 1700000000000LL, LLONG_MAX, LLONG_MIN};
    static const int ints[] = {0, 7, -7, INT_MAX, INT_MIN};
    static const size_t zus[] = {0, 1, 4096, SIZE_MAX};
    char want[256];

    for (size_t i = 0; i < sizeof(lls) / sizeof(lls[0]); i++) {
        struct text t = {0};
        char *got;

        text_printf(&t, "{\"a\":%lld,\"s\":\"%s\",\"d\":%d,\"z\":%zu}%%", lls[i], "x-y",
                    ints[i % 5], zus[i % 4]);
        got = text_take(&t);
        snprintf(want, sizeof(want), "{\"a\":%lld,\"s\":\"%s\",\"d\":%d,\"z\":%zu}%%", lls[i],
                 "x-y", ints[i % 5], zus[i % 4]);
        assert_string_equal(got, want);
        free(got);
    }
}

/* Pieces appended one after another, past the first 512 bytes: the text is
 * whole and NUL-terminated; nothing written gives "". */
static void
test_grows(void **state)
{
    struct text t = {0};
    char *got, want[8192];
    size_t n = 0;

    got = text_take(&t);
    assert_string_equal(got, "");
    free(got);
    for (int i = 0; i < 600; i++) {
        text_printf(&t, "%s%d", i ? "," : "[", i);
        n += (size_t)snprintf(want + n, sizeof(want) - n, "%s%d", i ? "," : "[", i);
    }
    text_puts(&t, "]");
    snprintf(want + n, sizeof(want) - n, "]");
    got = text_take(&t);
    assert_string_equal(got, want);
    assert_null(t.p);
    free(got);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_printf_as_printf),
        cmocka_unit_test(test_grows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
