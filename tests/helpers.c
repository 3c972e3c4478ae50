/* SPDX-License-Identifier: Apache-2.0 */
/* helpers.c: shared test setup (see helpers.h). */
#include "helpers.h"

#include "conf/conf.h"
#include "core/xmalloc.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

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
    /* the unit tests name their gifts' prices (test_room_service sets it
     * back to required for the catalog's own tests) */
    set_str(&c->room.gift_catalog, xstrdup("off"));
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
    /* _exit: the atexit check of cases.c would turn a skipped single test
     * ("no test named" when its group never ran) into a failure */
    fflush(NULL);
    _exit(77);
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

int
th_free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

int
th_port_open(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM, 0), ok;

    if (fd < 0)
        return 0;
    ok = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    close(fd);
    return ok;
}

int
th_start_redis(int port, const char *dir)
{
    char portstr[16];
    pid_t pid;

    snprintf(portstr, sizeof(portstr), "%d", port);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (freopen("/dev/null", "w", stdout) == NULL)
            _exit(126);
        execlp("redis-server", "redis-server", "--port", portstr, "--bind", "127.0.0.1", "--dir",
               dir, "--save", "", "--appendonly", "no", (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 100 && !th_port_open(port); i++)
        usleep(50 * 1000);
    assert_true(th_port_open(port));
    return pid;
}

void
th_kill(int pid)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}
