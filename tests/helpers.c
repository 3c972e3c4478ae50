/* helpers.c: shared test setup (see helpers.h). */
#include "helpers.h"

#include "conf/conf.h"
#include "core/xmalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *
th_tmpdir(void)
{
    const char *base = getenv("TMPDIR");
    char *tmpl = xasprintf("%s/roomd-test-XXXXXX", base && *base ? base : "/tmp");

    if (mkdtemp(tmpl) == NULL) {
        perror("mkdtemp");
        abort();
    }
    return tmpl;
}

static void
set_str(char **dst, char *v)
{
    free(*dst);
    *dst = v;
}

struct conf *
th_conf_sqlite(const char *dir)
{
    struct conf *c = xcalloc(1, sizeof(*c));

    conf_defaults(c);
    set_str(&c->store.driver, xstrdup("sqlite"));
    set_str(&c->store.sqlite.path, xasprintf("%s/roomd.db", dir));
    set_str(&c->outbox_worker.log_sink_path, xasprintf("%s/events.jsonl", dir));
    return c;
}

int
th_env_port(const char *name, int dflt)
{
    const char *v = getenv(name);

    return v && *v ? atoi(v) : dflt;
}

void
th_skip_or_fail(const char *why)
{
    const char *req = getenv("ROOMD_REQUIRE_SERVERS");

    if (req && *req && strcmp(req, "0") != 0) {
        fprintf(stderr, "FAIL: required server missing: %s\n", why);
        exit(1);
    }
    fprintf(stderr, "SKIP: %s\n", why);
    exit(77);
}

struct conf *
th_conf_mysql(const char *dir)
{
    struct conf *c = th_conf_sqlite(dir);

    set_str(&c->store.driver, xstrdup("mysql"));
    set_str(&c->store.mysql.host, xstrdup("127.0.0.1"));
    c->store.mysql.port = th_env_port("ROOMD_MYSQL_PORT", 3417);
    set_str(&c->store.mysql.user, xstrdup("root"));
    set_str(&c->store.mysql.password, xstrdup(""));
    set_str(&c->store.mysql.database, xstrdup("roomd_test"));
    return c;
}
