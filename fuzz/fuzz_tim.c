/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_tim.c: the IM client's answer parsing and the IM sink's decision. The
 * client's HTTP exchange (struct tim_exchange) is replaced by one that hands
 * out the answers of the input, so every IM call of an event parses what the
 * fuzzer wrote. Input: byte 0 picks the room event the IM sink delivers (an
 * envelope built by outbox_event_build, empty payload) and the plain calls
 * made after it; the rest is a list of answers separated by a line "--". An
 * answer is its body, after an optional first line "HTTP <status>" (else
 * 200); an answer "DOWN" is no answer (a transport failure). Calls after the
 * last answer get no answer. Every call must end in the sink's three
 * decisions (0 done, ROOMD_ERETRY/ROOMD_EUNAVAIL/ROOMD_ELIMIT retry, ROOMD_EPERM fail)
 * with a NUL-terminated reason that never holds the secret key (unless an
 * answer quoted it: the reason may repeat IM's ErrorInfo).
 */
#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/xmalloc.h"
#include "outbox/outbox.h"
#include "publish/tim_client.h"
#include "store/store.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_KEY "fuzz-im-secret-key-0123456789"
#define MAX_ANSWERS 32

static const char *const types[] = {
    "RoomCreated",        "RoomUserJoined",  "RoomUserLeft", "RoomMicChanged",
    "RoomGiftSent",       "RoomUserKicked",  "RoomClosed",   "RoomRocketIgnited",
    "RoomRocketLaunched", "RoomRocketReset",
};
#define NTYPES (sizeof(types) / sizeof(types[0]))

/* The answers of one input, handed out in order by fake_post. */
struct script {
    const char *part[MAX_ANSWERS];
    size_t len[MAX_ANSWERS];
    size_t n, next;
};

static struct tim_client *client;
static struct script script;
static uint8_t *envelopes[NTYPES];
static size_t envelope_lens[NTYPES];
static char *jsons[NTYPES];

static int
fake_post(void *arg, const char *url, const char *body, int64_t timeout_ms, long *status,
          char **resp, char *why, size_t whylen)
{
    struct script *s = arg;
    const char *p;
    size_t n;

    (void)url;
    (void)body;
    (void)timeout_ms;
    *resp = NULL;
    if (s->next >= s->n) {
        snprintf(why, whylen, "no answer left");
        return ROOMD_EUNAVAIL;
    }
    p = s->part[s->next];
    n = s->len[s->next];
    s->next++;
    if (n == 4 && memcmp(p, "DOWN", 4) == 0) {
        snprintf(why, whylen, "connection refused");
        return ROOMD_EUNAVAIL;
    }
    *status = 200;
    if (n >= 5 && memcmp(p, "HTTP ", 5) == 0) {
        const char *nl = memchr(p, '\n', n);
        *status = 0; /* the digits after "HTTP " (the input is not NUL-terminated) */
        for (size_t i = 5; i < n && i < 9 && p[i] >= '0' && p[i] <= '9'; i++)
            *status = *status * 10 + (p[i] - '0');
        n = nl ? n - (size_t)(nl + 1 - p) : 0;
        p = nl ? nl + 1 : p + n;
    }
    *resp = xmalloc(n + 1);
    memcpy(*resp, p, n);
    (*resp)[n] = '\0';
    return 0;
}

/* Splits data (the answers) on lines "--" into script. */
static void
split(const char *data, size_t size)
{
    const char *p = data, *end = data + size;

    memset(&script, 0, sizeof(script));
    while (script.n < MAX_ANSWERS) {
        const char *sep = NULL;

        for (const char *q = p; q + 4 <= end; q++)
            if (memcmp(q, "\n--\n", 4) == 0) {
                sep = q;
                break;
            }
        script.part[script.n] = p;
        script.len[script.n] = (size_t)((sep ? sep : end) - p);
        script.n++;
        if (sep == NULL)
            break;
        p = sep + 4;
    }
}

/* Whether the input itself holds the key (a reason may quote IM's ErrorInfo). */
static bool key_in_input;

/* The sink's decisions: anything else is a bug; so is the key in a reason
 * when no answer carried it. */
static void
check(int rc, const char *err, size_t errlen)
{
    if (rc != 0 && rc != ROOMD_ERETRY && rc != ROOMD_EPERM && rc != ROOMD_EUNAVAIL &&
        rc != ROOMD_ELIMIT && rc != ROOMD_ENOTFOUND)
        abort();
    if (memchr(err, '\0', errlen) == NULL || (!key_in_input && strstr(err, FUZZ_KEY) != NULL))
        abort();
}

static void
init(void)
{
    struct conf_tencent_im cfg;
    char err[256];

    setenv("ROOMD_FUZZ_TIM_KEY", FUZZ_KEY, 1);
    memset(&cfg, 0, sizeof(cfg));
    cfg.enabled = true;
    cfg.base_url = "https://console.tim.qq.com";
    cfg.sdk_app_id = 1400000000;
    cfg.admin_identifier = "administrator";
    cfg.secret_key_env = "ROOMD_FUZZ_TIM_KEY";
    cfg.group_type = "Public";
    cfg.timeout_ms = 5000;
    cfg.usersig_ttl_ms = 86400000;
    cfg.rate_limit_per_s = 0; /* no token bucket waits */
    cfg.group_rate_limit_per_s = 0;
    if (tim_client_open(&client, &cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "fuzz_tim: %s\n", err);
        abort();
    }
    tim_client_set_exchange(client, &(struct tim_exchange){.post = fake_post, .arg = &script});
    for (size_t i = 0; i < NTYPES; i++) {
        struct outbox_row row;

        memset(&row, 0, sizeof(row));
        strcpy(row.event_id, "01a22a3a-4b8f-7424-b66d-e3f93b482f0d");
        strcpy(row.app_code, "app");
        strcpy(row.room_id, "r1");
        strcpy(row.command_id, "c1");
        strcpy(row.event_type, types[i]);
        row.room_version = 2;
        row.created_at_ms = 1;
        if (outbox_event_build(&row, &envelopes[i], &envelope_lens[i], &jsons[i]) != 0)
            abort();
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256], type[32];
    int64_t deadline;
    int rc, code;
    size_t k;

    if (client == NULL)
        init();
    if (size < 1)
        return 0;
    k = data[0] % NTYPES;
    key_in_input = memmem(data, size, FUZZ_KEY, strlen(FUZZ_KEY)) != NULL;
    split((const char *)data + 1, size - 1);
    /* below the IM rate-limit pause (100 ms): an answer 60007 .. is not slept on */
    deadline = clock_mono_ms() + 50;

    /* the IM sink: one room event, all its IM calls */
    err[0] = '\0';
    rc = tim_client_deliver(client, envelopes[k], envelope_lens[k], jsons[k], deadline, err,
                            sizeof(err));
    check(rc, err, sizeof(err));
    /* the calls whose answers are read field by field */
    err[0] = '\0';
    rc = tim_group_type(client, "app_r1", type, sizeof(type), deadline, err, sizeof(err));
    check(rc, err, sizeof(err));
    err[0] = '\0';
    rc = tim_add_member(client, "app_r1", "2", deadline, &code, err, sizeof(err));
    check(rc, err, sizeof(err));
    err[0] = '\0';
    rc = tim_ensure_group(client, "app_r1", "Friday", deadline, err, sizeof(err));
    check(rc, err, sizeof(err));
    return 0;
}
