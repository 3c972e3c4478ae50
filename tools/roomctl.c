/*
 * roomctl.c: the operator CLI. Opens the store named by a roomd config
 * directly (roomd may be running) and runs one command from a table, as
 * OpenSMTPD's smtpctl does: outbox counts / list / show / replay (the dead
 * letter tools of the seed's 重试和死信), wallet balance / topup / audit, migrate.
 *
 *   roomctl -c configs/local.yaml outbox list --status failed
 */
#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/xmalloc.h"
#include "outbox/outbox.h"
#include "store/store.h"
#include "wallet/audit.h"
#include "wallet/wallet.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ctl {
    struct conf *conf;
    struct store *store;
};

struct ctl_cmd {
    const char *words[3]; /* the command's words, NULL-terminated */
    int nargs_min;        /* positional arguments after the words */
    int nargs_max;
    int (*run)(struct ctl *c, int argc, char **argv);
    const char *usage;
};

/* ==== helpers ==== */

static int
fail(const char *what, int rc)
{
    const char *detail = store_errmsg();

    fprintf(stderr, "roomctl: %s: %s%s%s\n", what, roomd_strerror(rc), *detail ? ": " : "", detail);
    return 1;
}

static int
parse_i64(const char *s, const char *name, int64_t *out)
{
    char *end;

    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0') {
        fprintf(stderr, "roomctl: %s: not an integer: \"%s\"\n", name, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* Finds "--name VALUE" among argv (removing nothing); NULL when absent. */
static const char *
opt_value(int argc, char **argv, const char *name)
{
    for (int i = 0; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return argv[i + 1];
    return NULL;
}

/* Collects the positional arguments of argv (skipping "--opt value" pairs). */
static int
positionals(int argc, char **argv, char **out, int max)
{
    int n = 0;

    for (int i = 0; i < argc; i++) {
        if (strncmp(argv[i], "--", 2) == 0) {
            i++;
            continue;
        }
        if (n < max)
            out[n] = argv[i];
        n++;
    }
    return n;
}

static void
fmt_time(int64_t ms, char *buf, size_t len)
{
    if (ms <= 0)
        strlcpy_(buf, "-", len);
    else
        clock_format_utc(ms, buf, len);
}

/* ==== outbox ==== */

static int
do_outbox_counts(struct ctl *c, int argc, char **argv)
{
    struct outbox_counts oc;
    char ts[32];
    int rc;

    if ((rc = store_outbox_counts(c->store, &oc)) != 0)
        return fail("outbox counts", rc);
    fmt_time(oc.oldest_undelivered_ms, ts, sizeof(ts));
    printf("pending     %" PRId64 "\ndelivering  %" PRId64 "\ndelivered   %" PRId64
           "\nretryable   %" PRId64 "\nfailed      %" PRId64 "\noldest_undelivered %s\n",
           oc.pending, oc.delivering, oc.delivered, oc.retryable, oc.failed, ts);
    return 0;
}

static int
do_outbox_list(struct ctl *c, int argc, char **argv)
{
    const char *st = opt_value(argc, argv, "--status");
    const char *after = opt_value(argc, argv, "--after");
    const char *limit = opt_value(argc, argv, "--limit");
    int64_t after_id = 0, lim = 100;
    int status = -1, rc;
    struct outbox_row *rows = NULL;
    size_t n = 0;

    if (st != NULL && (status = outbox_status_parse(st)) < 0) {
        fprintf(stderr,
                "roomctl: --status: unknown status \"%s\" "
                "(pending|delivering|delivered|retryable|failed)\n",
                st);
        return 2;
    }
    if ((after && parse_i64(after, "--after", &after_id) != 0) ||
        (limit && parse_i64(limit, "--limit", &lim) != 0))
        return 2;
    if (lim < 1 || lim > 100000) {
        fprintf(stderr, "roomctl: --limit: must be 1..100000\n");
        return 2;
    }
    if ((rc = store_outbox_list(c->store, status, after_id, (int)lim, &rows, &n)) != 0)
        return fail("outbox list", rc);
    printf("%-8s %-36s %-10s %-7s %-18s %-24s %-24s %s\n", "ID", "EVENT_ID", "STATUS", "RETRIES",
           "EVENT_TYPE", "ROOM@VERSION", "NEXT_RETRY", "LAST_ERROR");
    for (size_t i = 0; i < n; i++) {
        struct outbox_row *r = &rows[i];
        char next[32], room[160];
        fmt_time(r->status == OUTBOX_RETRYABLE ? r->next_retry_at_ms : 0, next, sizeof(next));
        snprintf(room, sizeof(room), "%s/%s@%" PRId64, r->app_code, r->room_id, r->room_version);
        printf("%-8" PRId64 " %-36s %-10s %-7d %-18s %-24s %-24s %s\n", r->id, r->event_id,
               outbox_status_name(r->status), r->retry_count, r->event_type, room, next,
               r->last_error ? r->last_error : "-");
    }
    if (n == (size_t)lim)
        printf("# more: --after %" PRId64 "\n", rows[n - 1].id);
    outbox_rows_free(rows, n);
    return 0;
}

static int
do_outbox_show(struct ctl *c, int argc, char **argv)
{
    struct outbox_row r;
    char created[32], next[32], lock[32], delivered[32];
    uint8_t *env = NULL;
    size_t envlen = 0;
    char *json = NULL;
    int rc;

    memset(&r, 0, sizeof(r));
    if ((rc = store_outbox_get(c->store, argv[0], &r)) != 0) {
        if (rc == ROOMD_ENOTFOUND) {
            fprintf(stderr, "roomctl: outbox show: no event %s\n", argv[0]);
            return 1;
        }
        return fail("outbox show", rc);
    }
    fmt_time(r.created_at_ms, created, sizeof(created));
    fmt_time(r.next_retry_at_ms, next, sizeof(next));
    fmt_time(r.lock_until_ms, lock, sizeof(lock));
    fmt_time(r.delivered_at_ms, delivered, sizeof(delivered));
    printf("id             %" PRId64 "\nevent_id       %s\nevent_type     %s\n"
           "app_code       %s\nroom_id        %s\nroom_version   %" PRId64 "\n"
           "command_id     %s\nstatus         %s\nretry_count    %d\nsinks_done     0x%x\n"
           "next_retry_at  %s\nlock_until     %s\nlocked_by      %s\ncreated_at     %s\n"
           "delivered_at   %s\nlast_error     %s\npayload_bytes  %zu\n",
           r.id, r.event_id, r.event_type, r.app_code, r.room_id, r.room_version, r.command_id,
           outbox_status_name(r.status), r.retry_count, (unsigned)r.sinks_done, next, lock,
           *r.locked_by ? r.locked_by : "-", created, delivered, r.last_error ? r.last_error : "-",
           r.payload_len);
    if (outbox_event_build(&r, &env, &envlen, &json) == 0) {
        json_t *j = json_loads(json, 0, NULL);
        char *pretty = j ? json_dumps(j, JSON_INDENT(2)) : NULL;
        printf("event (%zu envelope bytes):\n%s\n", envlen, pretty ? pretty : json);
        free(pretty);
        json_decref(j);
    } else {
        printf("event          <poison: the payload does not decode as %s>\n", r.event_type);
    }
    free(env);
    free(json);
    free(r.payload);
    free(r.last_error);
    return 0;
}

static int
do_outbox_replay(struct ctl *c, int argc, char **argv)
{
    int rc = store_outbox_replay(c->store, argv[0], clock_wall_ms());

    if (rc == ROOMD_ENOTFOUND) {
        fprintf(stderr, "roomctl: outbox replay: no event %s\n", argv[0]);
        return 1;
    }
    if (rc == ROOMD_ECONFLICT) {
        fprintf(stderr,
                "roomctl: outbox replay: event %s is not failed; only failed events "
                "are replayed\n",
                argv[0]);
        return 1;
    }
    if (rc != 0)
        return fail("outbox replay", rc);
    printf("replayed %s: failed -> pending (same event_id, retry_count 0)\n", argv[0]);
    return 0;
}

/* ==== wallet ==== */

static const char *
app_of(struct ctl *c, int argc, char **argv)
{
    const char *app = opt_value(argc, argv, "--app");

    return app ? app : c->conf->app.default_app_code;
}

static int
do_wallet_balance(struct ctl *c, int argc, char **argv)
{
    char *pos[1];
    int64_t uid, bal;
    int rc;

    positionals(argc, argv, pos, 1);
    if (parse_i64(pos[0], "UID", &uid) != 0)
        return 2;
    rc = store_wallet_balance(c->store, app_of(c, argc, argv), uid, c->conf->wallet.initial_balance,
                              &bal);
    if (rc != 0)
        return fail("wallet balance", rc);
    printf("%" PRId64 "\n", bal);
    return 0;
}

static int
do_wallet_topup(struct ctl *c, int argc, char **argv)
{
    char *pos[3];
    int64_t uid, amount, bal;
    int rc;

    positionals(argc, argv, pos, 3);
    if (parse_i64(pos[0], "UID", &uid) != 0 || parse_i64(pos[1], "AMOUNT", &amount) != 0)
        return 2;
    if (amount <= 0) {
        fprintf(stderr, "roomctl: AMOUNT: must be > 0\n");
        return 2;
    }
    rc = store_wallet_topup(c->store, app_of(c, argc, argv), uid, amount, pos[2],
                            c->conf->wallet.initial_balance, &bal);
    if (rc != 0)
        return fail("wallet topup", rc);
    printf("%" PRId64 "\n", bal);
    return 0;
}

/* The money invariant (wallet/audit.h): prints the offending command_ids,
 * exits 1 when it does not hold, 0 when it does. --app limits it to one app
 * (default: every app). With wallet.driver grpc it asks the wallet service
 * for holds older than wallet.reconcile_after. */
static int
do_wallet_audit(struct ctl *c, int argc, char **argv)
{
    const char *app = opt_value(argc, argv, "--app");
    struct wallet *w = NULL;
    size_t offences = 0;
    char err[512];
    int rc;

    if (strcmp(c->conf->wallet.driver, "grpc") == 0 &&
        wallet_open(&w, &c->conf->wallet, c->store, err, sizeof(err)) != 0) {
        fprintf(stderr, "roomctl: %s\n", err);
        return 2;
    }
    rc = wallet_audit(c->store, &c->conf->wallet, w, app != NULL ? app : "", stdout, &offences);
    wallet_close(w);
    if (rc != 0) {
        fail("wallet audit", rc);
        return 2; /* could not check: neither holds nor fails */
    }
    printf("%s: %zu offence%s\n", offences == 0 ? "ok" : "FAILED", offences,
           offences == 1 ? "" : "s");
    return offences == 0 ? 0 : 1;
}

static int
do_migrate(struct ctl *c, int argc, char **argv)
{
    printf("schema up to date (%s)\n", c->conf->store.driver);
    return 0;
}

/* ==== the command table ==== */

static const struct ctl_cmd commands[] = {
    {{"outbox", "counts"}, 0, 0, do_outbox_counts, "outbox counts"},
    {{"outbox", "list"},
     0,
     0,
     do_outbox_list,
     "outbox list [--status STATUS] [--after ID] [--limit N]"},
    {{"outbox", "show"}, 1, 1, do_outbox_show, "outbox show EVENT_ID"},
    {{"outbox", "replay"}, 1, 1, do_outbox_replay, "outbox replay EVENT_ID"},
    {{"wallet", "balance"}, 1, 1, do_wallet_balance, "wallet balance UID [--app APP]"},
    {{"wallet", "topup"}, 3, 3, do_wallet_topup, "wallet topup UID AMOUNT REF [--app APP]"},
    {{"wallet", "audit"}, 0, 0, do_wallet_audit, "wallet audit [--app APP]"},
    {{"migrate"}, 0, 0, do_migrate, "migrate"},
};
#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static void
usage(void)
{
    fprintf(stderr, "usage: roomctl -c CONFIG COMMAND\ncommands:\n");
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(stderr, "  %s\n", commands[i].usage);
    exit(2);
}

/* Returns the command whose words start argv, setting *nwords, or NULL. */
static const struct ctl_cmd *
match(int argc, char **argv, int *nwords)
{
    for (size_t i = 0; i < NCOMMANDS; i++) {
        int k = 0;
        while (k < 3 && commands[i].words[k] != NULL && k < argc &&
               strcmp(commands[i].words[k], argv[k]) == 0)
            k++;
        if (k < 3 && commands[i].words[k] == NULL) {
            *nwords = k;
            return &commands[i];
        }
    }
    return NULL;
}

/* Checks the options a command accepts and the count of its positionals. */
static int
check_args(const struct ctl_cmd *cmd, int argc, char **argv)
{
    static const char *const known[] = {"--status", "--after", "--limit", "--app"};
    char *pos[4];

    for (int i = 0; i < argc; i++) {
        if (strncmp(argv[i], "--", 2) != 0)
            continue;
        int ok = 0;
        for (size_t k = 0; k < sizeof(known) / sizeof(known[0]); k++)
            ok |= strcmp(argv[i], known[k]) == 0 && strstr(cmd->usage, known[k]) != NULL;
        if (!ok || i + 1 >= argc) {
            fprintf(stderr, "roomctl: %s: bad option %s\nusage: roomctl -c CONFIG %s\n",
                    cmd->words[0], argv[i], cmd->usage);
            return -1;
        }
        i++;
    }
    int n = positionals(argc, argv, pos, 4);
    if (n < cmd->nargs_min || n > cmd->nargs_max) {
        fprintf(stderr, "usage: roomctl -c CONFIG %s\n", cmd->usage);
        return -1;
    }
    return 0;
}

int
main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"config", required_argument, NULL, 'c'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *path = NULL;
    char err[1024];
    struct ctl c = {0};
    int ch, nwords = 0, rc;

    while ((ch = getopt_long(argc, argv, "+c:h", longopts, NULL)) != -1) {
        switch (ch) {
        case 'c':
            path = optarg;
            break;
        default:
            usage();
        }
    }
    argc -= optind;
    argv += optind;
    if (path == NULL || argc == 0)
        usage();
    const struct ctl_cmd *cmd = match(argc, argv, &nwords);
    if (cmd == NULL) {
        fprintf(stderr, "roomctl: unknown command \"%s\"\n", argv[0]);
        usage();
    }
    argc -= nwords;
    argv += nwords;
    if (check_args(cmd, argc, argv) != 0)
        return 2;

    if (conf_load(path, &c.conf, err, sizeof(err)) != 0) {
        fprintf(stderr, "roomctl: config: %s\n", err);
        return 1;
    }
    if ((rc = store_open(&c.store, &c.conf->store, err, sizeof(err))) != 0) {
        fprintf(stderr, "roomctl: store: %s\n", err);
        conf_free(c.conf);
        return 1;
    }
    rc = cmd->run(&c, argc, argv);
    store_close(c.store);
    conf_free(c.conf);
    return rc;
}
