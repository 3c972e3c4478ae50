/* SPDX-License-Identifier: Apache-2.0 */
/*
 * thread.h: one owner for a background thread's lifecycle (the shape of
 * Redis src/bio.c and libuv src/threadpool.c): start, a stop flag, a wake
 * on a CLOCK_MONOTONIC condition, a timed wait, join. A struct bg_thread
 * may run one thread (bg_thread_start) or a pool of them sharing the flag,
 * the mutex and the condition (bg_thread_init + bg_thread_spawn each).
 *
 * The mutex guards the stop flag and the wake count; an owner may guard its
 * own state with it too (the rocket timer's heap, the outbox's queue) and
 * then wait with bg_thread_wait_locked. The stop flag is atomic, so a loop
 * may poll bg_thread_stopping() without the mutex.
 *
 * Thread: bg_thread_init/start/spawn/stop from the owner's thread (main);
 * the rest from any thread.
 */
#ifndef ROOMD_THREAD_H
#define ROOMD_THREAD_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct bg_thread {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_MONOTONIC */
    atomic_bool stop;
    uint64_t wakes;  /* bg_thread_wake calls not yet seen by a wait (under mu) */
    pthread_t *tids; /* the threads spawned */
    size_t n, cap;
    bool inited;
};

/* Initializes t (mutex, monotonic condition, flag down); no thread yet.
 * Never fails. */
void bg_thread_init(struct bg_thread *t);

/* Starts one more thread running fn(arg) on t (after bg_thread_init).
 * Returns 0 or ROOMD_EINTERNAL (no thread started; the ones before keep
 * running until bg_thread_stop). */
int bg_thread_spawn(struct bg_thread *t, void *(*fn)(void *), void *arg);

/* bg_thread_init + bg_thread_spawn. Returns 0, or ROOMD_EINTERNAL after
 * undoing the init (t may be freed at once). */
int bg_thread_start(struct bg_thread *t, void *(*fn)(void *), void *arg);

/* For an owner allocated with malloc whose only resources yet are itself and
 * its struct bg_thread t: bg_thread_start(t, fn, owner). Returns owner, or
 * NULL after freeing owner (no thread started). Lets an _open/_start end in
 * `*out = bg_thread_start_owner(..); return *out ? 0 : code;`. Thread: the
 * owner's (main); never blocks. */
void *bg_thread_start_owner(struct bg_thread *t, void *(*fn)(void *), void *owner);

/* The matching close: bg_thread_stop(t) (blocks until the thread returns),
 * then free(owner). The caller frees what else the owner holds first, and
 * skips the call when owner is NULL. Thread: the owner's (main). */
void bg_thread_stop_free(struct bg_thread *t, void *owner);

/* Raises the stop flag, wakes every waiter, joins every thread spawned and
 * destroys the mutex and condition. Blocks until the threads return. A t
 * never initialized (zeroed) is a no-op; calling it twice is one. */
void bg_thread_stop(struct bg_thread *t);

/* Raises the stop flag and wakes every waiter, without joining (for an owner
 * that must do work between asking its threads to stop and joining them).
 * Thread: any; never blocks but on the mutex. */
void bg_thread_request_stop(struct bg_thread *t);

/* True once bg_thread_stop (or _request_stop) began. Lock-free. */
bool bg_thread_stopping(const struct bg_thread *t);

/* Wakes one waiter (a wait that starts later returns at once: the wake is
 * counted, not lost). Thread: any; never blocks but on the mutex. */
void bg_thread_wake(struct bg_thread *t);

/* Waits up to ms (<= 0: none) or until a wake or the stop. Returns true when
 * stopping. Called without t->mu held. Blocks up to ms. */
bool bg_thread_sleep(struct bg_thread *t, int64_t ms);

/* The same with t->mu held by the caller (kept held on return): waits up to
 * ms or until a wake, a signal on t->cv or the stop. Returns true when
 * stopping. */
bool bg_thread_wait_locked(struct bg_thread *t, int64_t ms);

#endif
