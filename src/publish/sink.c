/* SPDX-License-Identifier: Apache-2.0 */
/* sink.c: the members every sink sets (sink_init, see sink.h). */
#include "publish/sink.h"

#include "store/store.h"

#include <stdlib.h>

bool
sink_accepts_carried(struct sink *s, const struct outbox_event *ev)
{
    return sink_bit_carries(s->bit, ev->row->event_type);
}

struct sink *
sink_init(struct sink *s, const char *name, uint32_t bit,
          bool (*accepts)(struct sink *, const struct outbox_event *),
          int (*publish)(struct sink *, const struct outbox_event *, int64_t, char *, size_t),
          void (*close)(struct sink *), bool no_json)
{
    s->name = name;
    s->bit = bit;
    s->accepts = accepts;
    s->publish = publish;
    s->close = close;
    s->no_json = no_json;
    return s;
}

void
sink_free(struct sink *s)
{
    free(s);
}
