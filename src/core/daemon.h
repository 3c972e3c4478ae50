/* SPDX-License-Identifier: Apache-2.0 */
/*
 * daemon.h: what a roomd process (roomd, roomd_consumer) does first and
 * last around serving: the log, the signals, the service manager.
 *   SIGINT, SIGTERM  stop (daemon_wait returns; the caller drains)
 *   SIGHUP           reload: the caller's reload function (reopen the log
 *                    files, apply the reloadable keys); never stops
 * With systemd (Type=notify) daemon_ready() sends READY=1 and daemon_wait
 * pings the watchdog (WatchdogSec) and says RELOADING=1 / STOPPING=1; without
 * NOTIFY_SOCKET these are no-ops. Read src/main.c for the order in between.
 */
#ifndef ROOMD_DAEMON_H
#define ROOMD_DAEMON_H

#include <signal.h>

/*
 * Opens the log (log_open with log_file and log_level; fatalx when it
 * cannot), blocks SIGINT, SIGTERM and SIGHUP in this thread and so in every
 * thread started afterwards (*sigs holds them for daemon_wait and
 * daemon_sleep), and ignores SIGPIPE.
 * Thread: main, before any other thread starts. Never blocks.
 */
void daemon_start(const char *log_file, const char *log_level, sigset_t *sigs);

/* Tells the service manager we serve (READY=1, status text). Call after the
 * listeners are bound and the store is migrated. Thread: main; never blocks. */
void daemon_ready(const char *status);

/* Sleeps up to ms milliseconds; returns the stop signal (SIGINT, SIGTERM)
 * when one came meanwhile (it stays consumed), else 0. A SIGHUP while
 * sleeping is dropped (nothing to reload yet). Thread: main, before serving
 * (e.g. waiting for the database). Blocks up to ms. */
int daemon_sleep(const sigset_t *sigs, long ms);

/* Called by daemon_wait on SIGHUP, in the main thread. */
typedef void (*daemon_reload_fn)(void *arg);

/* Serves: waits for a stop signal, logs "stopping" and returns the signal.
 * On SIGHUP calls reload(arg) (may be NULL) and keeps waiting; pings the
 * systemd watchdog when WatchdogSec is set. Thread: main. Blocks until a
 * stop signal. */
int daemon_wait(const sigset_t *sigs, daemon_reload_fn reload, void *arg);

#endif
