/* daemon.c: process start-up and the wait for a stop signal (see daemon.h). */
#include "core/daemon.h"

#include "core/log.h"

#include <pthread.h>

void
daemon_start(const char *log_file, const char *log_level, sigset_t *stop)
{
    if (log_open(log_file, log_level_parse(log_level)) != 0)
        fatalx("app.log_file: cannot open %s", log_file);
    sigemptyset(stop);
    sigaddset(stop, SIGINT);
    sigaddset(stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, stop, NULL);
    signal(SIGPIPE, SIG_IGN);
}

int
daemon_wait(const sigset_t *stop)
{
    int sig = 0;

    sigwait(stop, &sig);
    log_info("main", "stopping", "signal=%d", sig);
    return sig;
}
