/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sink_log.c: the log sink. Appends each event's JSON as one line to a file
 * (O_APPEND, one write(2) per line under a mutex), so a local run shows what
 * was delivered. Read publish/sink.h for the interface.
 */
#include "publish/sink.h"

#include "core/err.h"
#include "core/xmalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct sink_log {
    struct sink super;
    int fd;
    pthread_mutex_t mu;
    char *path;
};

static int
publish_line(struct sink *s, const struct outbox_event *ev, int64_t deadline_mono_ms, char *err,
             size_t errlen)
{
    struct sink_log *sl = (struct sink_log *)s;
    size_t len = strlen(ev->json);
    char *line = xmalloc(len + 1);
    size_t off = 0;
    int rc = 0;

    memcpy(line, ev->json, len);
    line[len++] = '\n';
    pthread_mutex_lock(&sl->mu);
    while (off < len) {
        ssize_t n = write(sl->fd, line + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            snprintf(err, errlen, "log sink: write %s: %s", sl->path,
                     n < 0 ? strerror(errno) : "short write");
            rc = ROOMD_ERETRY;
            break;
        }
        off += (size_t)n;
    }
    pthread_mutex_unlock(&sl->mu);
    free(line);
    return rc;
}

static void
close_sink(struct sink *s)
{
    struct sink_log *sl = (struct sink_log *)s;

    close(sl->fd);
    pthread_mutex_destroy(&sl->mu);
    free(sl->path);
    free(sl);
}

int
sink_log_reopen(struct sink *s, char *err, size_t errlen)
{
    struct sink_log *sl = (struct sink_log *)s;
    int fd = open(sl->path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);

    if (fd < 0) {
        snprintf(err, errlen, "cannot open %s: %s", sl->path, strerror(errno));
        return ROOMD_EIO;
    }
    /* same descriptor number, new file: a publish running now writes whole
     * lines to one of the two */
    pthread_mutex_lock(&sl->mu);
    int rc = dup3(fd, sl->fd, O_CLOEXEC) < 0 ? ROOMD_EIO : 0;
    pthread_mutex_unlock(&sl->mu);
    close(fd);
    if (rc != 0)
        snprintf(err, errlen, "reopen %s: %s", sl->path, strerror(errno));
    return rc;
}

int
sink_log_open(struct sink **out, const char *path, char *err, size_t errlen)
{
    struct sink_log *sl;
    int fd;

    *out = NULL;
    fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return ROOMD_EIO;
    }
    sl = xcalloc(1, sizeof(*sl));
    sink_init(&sl->super, "log", SINK_BIT_LOG, NULL, publish_line, close_sink, false);
    sl->fd = fd;
    sl->path = xstrdup(path);
    pthread_mutex_init(&sl->mu, NULL);
    *out = &sl->super;
    return 0;
}
