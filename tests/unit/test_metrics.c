/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_metrics.c: the metrics registry (src/metrics/metrics.c): command
 * counters by status, the cumulative latency histogram, collectors added and
 * removed, and concurrent recording from many threads.
 */
#include "helpers.h"

#include "metrics/metrics.h"
#include "room/command.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Value of the sample line starting with name (exact series), or -1. */
static double
sample(const char *text, const char *series)
{
    size_t n = strlen(series);
    const char *p = text;

    while ((p = strstr(p, series)) != NULL) {
        if ((p == text || p[-1] == '\n') && p[n] == ' ')
            return strtod(p + n + 1, NULL);
        p += n;
    }
    return -1;
}

static void
test_counters_and_histogram(void **state)
{
    (void)state;
    metrics_command_names(room_cmd_names(), CMD_COUNT_);
    metrics_reset();
    metrics_command_observe(CMD_JOIN_ROOM, 200, 300);     /* 0.3 ms */
    metrics_command_observe(CMD_JOIN_ROOM, 200, 4000);    /* 4 ms */
    metrics_command_observe(CMD_JOIN_ROOM, 409, 9000000); /* 9 s: +Inf only */
    metrics_command_observe(CMD_SEND_GIFT, 402, 1000);
    metrics_command_observe(-1, 200, 1);            /* dropped */
    metrics_command_observe(CMD_JOIN_ROOM, 999, 1); /* dropped */

    char *t = metrics_render();
    assert_non_null(t);
    assert_true(sample(t, "roomd_commands_total{command=\"JoinRoom\",status=\"200\"}") == 2);
    assert_true(sample(t, "roomd_commands_total{command=\"JoinRoom\",status=\"409\"}") == 1);
    assert_true(sample(t, "roomd_commands_total{command=\"SendGift\",status=\"402\"}") == 1);
    assert_true(sample(t, "roomd_commands_total{command=\"LeaveRoom\",status=\"200\"}") == -1);
    const char *b = "roomd_command_duration_seconds_bucket{command=\"JoinRoom\",le=";
    char series[160];
    snprintf(series, sizeof(series), "%s\"0.0005\"}", b);
    assert_true(sample(t, series) == 1);
    snprintf(series, sizeof(series), "%s\"0.005\"}", b);
    assert_true(sample(t, series) == 2);
    snprintf(series, sizeof(series), "%s\"5\"}", b);
    assert_true(sample(t, series) == 2);
    snprintf(series, sizeof(series), "%s\"+Inf\"}", b);
    assert_true(sample(t, series) == 3);
    assert_true(sample(t, "roomd_command_duration_seconds_count{command=\"JoinRoom\"}") == 3);
    double sum = sample(t, "roomd_command_duration_seconds_sum{command=\"JoinRoom\"}");
    assert_true(sum > 9.004 && sum < 9.005);
    assert_non_null(strstr(t, "# TYPE roomd_command_duration_seconds histogram\n"));
    free(t);
}

static void
collector(void *arg, struct metrics_text *t)
{
    metrics_printf(t, "roomd_test_gauge %d\n", *(int *)arg);
}

static void
test_collectors(void **state)
{
    int v = 42;
    char *t;

    (void)state;
    assert_int_equal(metrics_add_collector(collector, &v), 0);
    t = metrics_render();
    assert_true(sample(t, "roomd_test_gauge") == 42);
    free(t);
    metrics_remove_collector(collector, &v);
    t = metrics_render();
    assert_true(sample(t, "roomd_test_gauge") == -1);
    free(t);
}

static void *
hammer(void *arg)
{
    (void)arg;
    for (int i = 0; i < 10000; i++)
        metrics_command_observe(CMD_MIC_UP, 200, i);
    return NULL;
}

static void
test_concurrent_observe(void **state)
{
    pthread_t th[8];

    (void)state;
    metrics_command_names(room_cmd_names(), CMD_COUNT_);
    metrics_reset();
    for (int i = 0; i < 8; i++)
        pthread_create(&th[i], NULL, hammer, NULL);
    for (int i = 0; i < 8; i++)
        pthread_join(th[i], NULL);
    char *t = metrics_render();
    assert_true(sample(t, "roomd_commands_total{command=\"MicUp\",status=\"200\"}") == 80000);
    assert_true(sample(t, "roomd_command_duration_seconds_count{command=\"MicUp\"}") == 80000);
    free(t);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counters_and_histogram),
        cmocka_unit_test(test_collectors),
        cmocka_unit_test(test_concurrent_observe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
