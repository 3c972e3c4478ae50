/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wallet.c: picks the wallet implementation named by wallet.driver
 * ("embedded": wallet_embedded.c, the ledger in the store; "grpc":
 * wallet_grpc.c, a remote wallet service), and the request digest both
 * bind a gift's key to.
 */
#include "wallet/wallet.h"

#include "conf/conf.h"
#include "core/driver.h"
#include "core/err.h"
#include "core/hex.h"
#include "wallet/wallet_embedded.h"
#include "wallet/wallet_grpc.h"

#include <jansson.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int
wallet_open(struct wallet **out, const struct conf_wallet *cfg, struct store *store, char *err,
            size_t errlen)
{
    static const char *const drivers[] = {"embedded", "grpc", NULL};
    int d = driver_pick("wallet.driver", cfg->driver, drivers, err, errlen);

    *out = NULL;
    if (d < 0)
        return ROOMD_EINVAL;
    return d == 0 ? wallet_embedded_open(out, cfg, store) : wallet_grpc_open(out, cfg, err, errlen);
}

void
wallet_close(struct wallet *w)
{
    if (w != NULL && w->ops->close != NULL)
        w->ops->close(w);
    free(w);
}

/* SHA-256, fetched once for the process (an EVP_MD is shareable between
 * threads; EVP_sha256() inside EVP_Digest would fetch it on every call). */
static EVP_MD *sha256_md;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;

static void
sha256_fetch(void)
{
    if ((sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL)) == NULL)
        abort(); /* the default provider is always there */
}

void
wallet_request_digest(const char *request, char out[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    char *canon = NULL;
    const char *text = request;
    json_t *o;

    /* a logged request may carry the room's "rules" and the gift's
     * "catalog" price (room_logged_request) */
    if ((strstr(request, "\"rules\":") != NULL || strstr(request, "\"catalog\":") != NULL) &&
        (o = json_loads(request, 0, NULL)) != NULL) {
        json_object_del(o, "rules");
        json_object_del(o, "catalog");
        canon = json_dumps(o, JSON_SORT_KEYS | JSON_COMPACT);
        json_decref(o);
        if (canon == NULL)
            abort();
        text = canon;
    }
    pthread_once(&sha256_once, sha256_fetch);
    if (EVP_Digest(text, strlen(text), md, &len, sha256_md, NULL) != 1 || len != 32)
        abort();
    free(canon);
    hex_lower(md, 32, out);
}

void
wallet_gift_init(struct wallet_gift *g, const char *app, const char *room_id,
                 const char *command_id, int64_t uid, int64_t amount, const char *request)
{
    memset(g, 0, sizeof(*g));
    g->app = app;
    g->room_id = room_id;
    g->command_id = command_id;
    g->uid = uid;
    g->amount = amount;
    wallet_request_digest(request, g->digest);
}
