/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rocket_timer.h: private to src/room. The in-process rocket launch timer
 * used while no broker carries the delayed wake-up: a thread and a min-heap
 * by launch_at_ms. At launch_at_ms it sends LaunchRocket (command_id =
 * the ignition's launch_command_id) through room_service_execute; a stale
 * or repeated wake-up is harmless (the cell re-validates).
 */
#ifndef ROOMD_ROOM_ROCKET_TIMER_H
#define ROOMD_ROOM_ROCKET_TIMER_H

#include <stddef.h>
#include <stdint.h>

struct room_service;
struct rocket_timer;

/* Starts the thread. svc is borrowed. Thread: main. */
int rocket_timer_open(struct rocket_timer **out, struct room_service *svc);
/* Stops and joins the thread (waiting for a launch in progress); pending
 * wake-ups are dropped (rebuilt from the store at the next open). NULL is a
 * no-op. */
void rocket_timer_close(struct rocket_timer *t);
/* Schedules a wake-up. Thread: any; never blocks on I/O. */
void rocket_timer_schedule(struct rocket_timer *t, const char *app, const char *room_id,
                           const char *rocket_id, int level, int64_t launch_at_ms);
/* Wake-ups waiting (tests). */
size_t rocket_timer_pending(struct rocket_timer *t);

#endif
