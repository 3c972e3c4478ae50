/* SPDX-License-Identifier: Apache-2.0 */
/*
 * retention.h: purges delivered room_outbox rows older than
 * store.retention_delivered_ms and room_command_log rows older than
 * store.retention_command_log_ms that no replay needs
 * (store_command_log_purge), in bounded batches of store.purge_batch every
 * store.purge_interval (short transactions, so commands and claims go on).
 * outbox_open() starts it and outbox_close() stops it; read retention.c.
 */
#ifndef ROOMD_OUTBOX_RETENTION_H
#define ROOMD_OUTBOX_RETENTION_H

#include <stddef.h>
#include <stdint.h>

struct conf_store;
struct store;
struct retention;

/*
 * Starts the purge thread. Borrows cs and store, which must outlive it.
 * When cs->retention_delivered_ms and cs->retention_command_log_ms are both
 * 0 (keep forever) no thread starts and *out is NULL. Returns 0, or ROOMD_EINTERNAL when the thread
 * cannot start. Thread: main.
 */
int retention_open(struct retention **out, const struct conf_store *cs, struct store *store);

/* Stops and joins the purge thread (after its current batch). NULL is a
 * no-op. Thread: main. */
void retention_close(struct retention *r);

/*
 * One purge pass: deletes delivered rows with delivered_at_ms < before_ms in
 * batches of batch rows (one short transaction each) until a batch comes back
 * short or max_batches ran. *purged gets the total. Returns 0 or the store's
 * error (EUNAVAIL). Thread: any; blocks on the store.
 */
int retention_purge(struct store *store, int64_t before_ms, int batch, int max_batches,
                    size_t *purged);

/* The same pass over the command log: rows created before before_ms that no
 * replay needs (store_command_log_purge). Thread: any; blocks on the store. */
int retention_purge_command_log(struct store *store, int64_t before_ms, int batch, int max_batches,
                                size_t *purged);

#endif
