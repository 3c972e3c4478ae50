/*
 * outbox.h: the OUTBOX PATH. A pool of worker threads that claim
 * room_outbox rows (store_outbox_claim), build each event's envelope, publish
 * it to the sinks of the publish mode, and record delivered / retryable
 * (exponential backoff with jitter) / failed (dead letter at
 * max_retry_count), fenced by locked_by. Workers are woken right after each
 * commit (outbox_wake); poll_interval is only the idle fallback.
 *
 * Read worker.c top-down for the loop, event.c for envelope/JSON building.
 */
#ifndef ROOMD_OUTBOX_H
#define ROOMD_OUTBOX_H

#include <stddef.h>
#include <stdint.h>

struct conf_outbox;
struct store;
struct sink;
struct outbox_row;

struct outbox;

/*
 * Starts cfg->workers threads delivering to sinks[0..nsinks) (the worker
 * takes ownership of the sinks and closes them in outbox_close, also when
 * outbox_open fails). node_id prefixes locked_by ("<node_id>/w<n>"; "" =
 * "<hostname>-<pid>"). Also starts the retention purge of delivered rows
 * (outbox/retention.h) with the settings of the same conf's store section:
 * cfg must therefore be the outbox_worker member of a struct conf, which
 * must outlive the outbox. Returns 0 and *out, or an error. Thread: main.
 */
int outbox_open(struct outbox **out, const struct conf_outbox *cfg, struct store *store,
                const char *node_id, struct sink **sinks, size_t nsinks);

/* Wakes idle workers now (a commit just wrote rows). Thread: any; never blocks. */
void outbox_wake(struct outbox *ob);

/* Stops the workers after their current batch and joins them. Rows they
 * had claimed but not completed are reclaimed after their lock expires.
 * outbox_close(NULL) is a no-op. Thread: main. */
void outbox_close(struct outbox *ob);

/* Builds the envelope and JSON of row. *envelope and *json are malloc'd
 * (caller frees). Returns 0 or ROOMD_EINVAL when the payload does not decode
 * as its event_type (a poison event). Thread: any. */
int outbox_event_build(const struct outbox_row *row, uint8_t **envelope, size_t *envelope_len,
                       char **json);

#endif
