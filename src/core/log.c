/* log.c: logfmt and JSON line logger (see log.h). */
#include "core/log.h"
#include "core/secret.h"

#include "core/clock.h"
#include "core/err.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int log_fd = 2;
static enum log_level log_min = LOG_INFO;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

int
log_open(const char *path, enum log_level min)
{
    log_min = min;
    if (path == NULL || *path == '\0')
        return 0;
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return ROOMD_EIO;
    log_fd = fd;
    return 0;
}

void
log_close(void)
{
    if (log_fd > 2)
        close(log_fd);
    log_fd = 2;
}

int
log_level_parse(const char *s)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(s, level_names[i]) == 0)
            return i;
    return -1;
}

static void
write_line(char *buf, size_t len)
{
    ssize_t n;

    while (len > 0) {
        n = write(log_fd, buf, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;
        buf += n;
        len -= (size_t)n;
    }
}

void
log_msg(enum log_level lvl, const char *mod, const char *msg, const char *fmt, ...)
{
    char buf[2048], line[2048 + 64];
    char ts[32];
    size_t len;
    va_list ap;

    if (lvl < log_min)
        return;
    clock_format_utc(clock_wall_ms(), ts, sizeof(ts));
    len = (size_t)snprintf(buf, sizeof(buf), "ts=%s level=%s mod=%s msg=\"%s\"", ts,
                           level_names[lvl], mod, msg);
    if (len < sizeof(buf) && fmt != NULL) {
        buf[len++] = ' ';
        va_start(ap, fmt);
        int n = vsnprintf(buf + len, sizeof(buf) - len, fmt, ap);
        va_end(ap);
        if (n > 0)
            len += (size_t)n;
    }
    if (len >= sizeof(buf) - 1)
        len = sizeof(buf) - 2;
    buf[len] = '\0';
    len = secret_redact(buf, line, sizeof(line) - 1); /* no password or token in a log line */
    line[len++] = '\n';
    write_line(line, len);
}

void
log_json_line(const char *json)
{
    size_t n = strlen(json);
    char *buf = malloc(n + 1);

    if (buf == NULL)
        return;
    memcpy(buf, json, n);
    buf[n] = '\n';
    write_line(buf, n + 1);
    free(buf);
}

void
fatalx(const char *fmt, ...)
{
    va_list ap;

    char buf[2048], line[2048];

    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    secret_redact(buf, line, sizeof(line));
    fprintf(stderr, "roomd: %s\n", line);
    exit(1);
}
