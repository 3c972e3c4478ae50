/* SPDX-License-Identifier: Apache-2.0 */
/* uuid.c: UUIDv7 generation (see uuid.h). */
#include "core/uuid.h"

#include "core/hex.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

/*
 * Random bytes come from getrandom, drawn 250 at a time (25 ids) into a
 * buffer of the calling thread instead of one syscall per id: bytes are
 * never handed out twice, since each thread takes them from its own draw.
 * A fork copies the forking thread's buffer into the child, so the child
 * drops it (fork_child) and draws its own: without that, parent and child
 * would hand out the same bytes.
 */
#define UUID_RANDOM_BYTES 10
#define UUID_POOL_BYTES (25 * UUID_RANDOM_BYTES) /* <= 256: getrandom returns it whole */

struct random_pool {
    uint8_t b[UUID_POOL_BYTES];
    size_t used; /* bytes handed out; UUID_POOL_BYTES = empty */
};

static _Thread_local struct random_pool pool = {.used = UUID_POOL_BYTES};
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* In the child after fork (its only thread is the one that forked). */
static void
fork_child(void)
{
    pool.used = UUID_POOL_BYTES;
}

static void
atfork_register(void)
{
    if (pthread_atfork(NULL, NULL, fork_child) != 0)
        abort();
}

/* Refills the calling thread's pool. getrandom (flags 0) of <= 256 bytes
 * returns them whole once the kernel's pool is seeded (it waits for that at
 * boot only); anything else leaves no source of unique ids, so abort. */
static void
refill(void)
{
    ssize_t n;

    pthread_once(&atfork_once, atfork_register);
    do
        n = getrandom(pool.b, sizeof(pool.b), 0);
    while (n < 0 && errno == EINTR);
    if (n != (ssize_t)sizeof(pool.b))
        abort();
    pool.used = 0;
}

void
uuid_v7(int64_t now_ms, char out[UUID_STR_LEN])
{
    static const size_t group[] = {4, 2, 2, 2, 6}; /* bytes: 8-4-4-4-12 digits */
    uint8_t b[16];
    uint64_t ms = (uint64_t)now_ms;
    size_t at = 0, j = 0;

    if (pool.used + UUID_RANDOM_BYTES > sizeof(pool.b))
        refill();
    memcpy(b + 6, pool.b + pool.used, UUID_RANDOM_BYTES);
    pool.used += UUID_RANDOM_BYTES;
    for (int i = 0; i < 6; i++)
        b[i] = (uint8_t)(ms >> (40 - 8 * i));
    b[6] = (uint8_t)(0x70 | (b[6] & 0x0f));
    b[8] = (uint8_t)(0x80 | (b[8] & 0x3f));
    for (size_t g = 0; g < 5; g++) {
        if (g > 0)
            out[j++] = '-';
        hex_lower(b + at, group[g], out + j);
        at += group[g];
        j += 2 * group[g];
    }
}
