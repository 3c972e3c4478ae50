/*
 * daemon.h: what a roomd process (roomd, roomd_consumer) does first and
 * last around serving: the log, the stop signals, waiting for them.
 * Read src/main.c for the order of everything in between.
 */
#ifndef ROOMD_DAEMON_H
#define ROOMD_DAEMON_H

#include <signal.h>

/*
 * Opens the log (log_open with log_file and log_level; fatalx when it
 * cannot), blocks SIGINT and SIGTERM in this thread and so in every thread
 * started afterwards (*stop holds them for daemon_wait), and ignores SIGPIPE.
 * Thread: main, before any other thread starts. Never blocks.
 */
void daemon_start(const char *log_file, const char *log_level, sigset_t *stop);

/* Waits for a signal of stop, logs "stopping" and returns the signal.
 * Thread: main. Blocks until the signal. */
int daemon_wait(const sigset_t *stop);

#endif
