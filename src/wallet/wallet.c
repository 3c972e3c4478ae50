/*
 * wallet.c: picks the wallet implementation named by wallet.driver. Only
 * "embedded" (wallet_embedded.c, the ledger in the store) exists so far; a
 * remote wallet service would be another file and another name here.
 */
#include "wallet/wallet.h"

#include "conf/conf.h"
#include "core/err.h"
#include "wallet/wallet_embedded.h"

#include <string.h>

int
wallet_open(struct wallet **out, const struct conf_wallet *cfg, struct store *store)
{
    *out = NULL;
    if (cfg->driver != NULL && strcmp(cfg->driver, "embedded") == 0)
        return wallet_embedded_open(out, cfg, store);
    return ROOMD_EINVAL;
}

void
wallet_close(struct wallet *w)
{
    if (w != NULL)
        w->ops->close(w);
}
