/* SPDX-License-Identifier: Apache-2.0 */
/* daemon.c: process start-up, the service manager and the signal wait (see daemon.h). */
#include "core/daemon.h"

#include "core/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <unistd.h>

void
daemon_start(const char *log_file, const char *log_level, sigset_t *sigs)
{
    int lvl = log_level_parse(log_level);

    if (log_open(log_file, lvl < 0 ? LOG_INFO : (enum log_level)lvl) != 0)
        fatalx("app.log_file: cannot open %s", log_file);
    sigemptyset(sigs);
    sigaddset(sigs, SIGINT);
    sigaddset(sigs, SIGTERM);
    sigaddset(sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
}

void
daemon_ready(const char *status)
{
    sd_notifyf(0, "READY=1\nSTATUS=%s\nMAINPID=%lu", status, (unsigned long)getpid());
}

/* Waits up to ms for one of sigs; returns the signal or 0 on timeout. */
static int
wait_signal(const sigset_t *sigs, long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    int sig;

    do
        sig = sigtimedwait(sigs, NULL, ms < 0 ? NULL : &ts);
    while (sig < 0 && errno == EINTR);
    return sig < 0 ? 0 : sig;
}

int
daemon_sleep(const sigset_t *sigs, long ms)
{
    struct timespec start, now;

    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        long left =
            ms - ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000L);
        if (left <= 0)
            return 0;
        int sig = wait_signal(sigs, left);
        if (sig == SIGINT || sig == SIGTERM)
            return sig;
        if (sig == 0)
            return 0;
    }
}

int
daemon_wait(const sigset_t *sigs, daemon_reload_fn reload, void *arg)
{
    uint64_t wd_us = 0;
    long tick_ms = -1; /* no watchdog: wait without a timeout */
    int sig;

    if (sd_watchdog_enabled(0, &wd_us) > 0 && wd_us > 0)
        tick_ms = (long)(wd_us / 2000); /* ping twice per WatchdogSec */
    for (;;) {
        if (tick_ms >= 0)
            sd_notify(0, "WATCHDOG=1");
        sig = wait_signal(sigs, tick_ms);
        if (sig == SIGINT || sig == SIGTERM)
            break;
        if (sig == SIGHUP) {
            sd_notify(0, "RELOADING=1");
            log_info("main", "reloading", "signal=%d", sig);
            if (reload != NULL)
                reload(arg);
            sd_notify(0, "READY=1");
        }
    }
    sd_notify(0, "STOPPING=1");
    log_info("main", "stopping", "signal=%d", sig);
    return sig;
}
