/* SPDX-License-Identifier: Apache-2.0 */
/*
 * group_commit.h: group commit in front of store_save. Callers queue a
 * mutation and block; one of them (a leader, on its own thread: no
 * committer thread) takes what is queued (up to max_batch) and commits it in
 * ONE transaction, so N rooms' commands cost one fsync. Up to the store's
 * save_writers leaders commit at once (SQLite 1; MySQL
 * store.mysql.batches_in_flight), each its own batch. Each mutation still
 * succeeds or fails alone (savepoints in store_save).
 */
#ifndef ROOMD_GROUP_COMMIT_H
#define ROOMD_GROUP_COMMIT_H

#include <stddef.h>
#include <stdint.h>

struct store;
struct mutation;
struct group_commit;

/* Sets up the queue (store borrowed; its save_writers read once). Returns 0
 * and *out. Thread: main. */
int group_commit_open(struct group_commit **out, struct store *store, int max_batch);
/* Refuses new submits (ROOMD_EUNAVAIL), waits for the batches in flight,
 * frees. NULL is a no-op. Thread: main; blocks until the last commit ends. */
void group_commit_close(struct group_commit *gc);

/*
 * Commits m (borrowed until return) together with whatever else is queued:
 * on this thread when fewer than save_writers commits are running (this
 * caller leads the batch), else in a batch after the running ones. Blocks until its transaction
 * ended. Returns m->rc: 0, ROOMD_EREUSED,
 * ROOMD_EEXIST, ROOMD_EFENCED, or the batch's failure (EUNAVAIL, EIO).
 * Thread: any.
 */
int group_commit_submit(struct group_commit *gc, struct mutation *m);

/* Batches committed and mutations in them so far (bench, metrics). */
void group_commit_stats(struct group_commit *gc, uint64_t *batches, uint64_t *mutations);

#endif
