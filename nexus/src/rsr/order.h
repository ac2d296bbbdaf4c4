/* Ordered delivery (order.c; docs/design.md section 7, "Ordered delivery"):
 * the RSRs one context sends to one context with NX_RSR_ORDERED run there
 * one at a time, in the order of their sends, whatever the modules,
 * gateways and fallbacks between them do to the order of their frames.
 *
 * A stream is a pair (sending context, destination context). The sender
 * numbers the stream's RSRs (1, 2, ... wrapping past 0) in the frame
 * header's order field; the receiver admits the RSR numbered `next` once
 * the stream's previous RSR's handler has returned, and holds any other
 * until its turn. */
#ifndef NXI_ORDER_H
#define NXI_ORDER_H

#include <pthread.h>

#include "buffers/buf.h"

struct nxi_ostream;

/* Sending. The stream from `source` to `dest`, made on first use (NULL: no
 * memory). One send at a time: send_begin takes the stream's send lock
 * and returns the number of its next RSR, send_end lets it go, and the
 * next RSR gets the following number only if this one was `accepted`;
 * so numbers go out in the order they are taken, with no gap. */
struct nxi_ostream *nxi_order_stream(uint64_t source, uint64_t dest);
uint32_t nxi_order_send_begin(struct nxi_ostream *s);
void nxi_order_send_end(struct nxi_ostream *s, int accepted);

/* Receiving (dispatch.c, on the driver). Returns 1 when the received RSR
 * `b` (b->order != 0) may run now: b->ostream is then set, and
 * nxi_order_done must follow once its handler returned (or it was
 * dropped). Returns 0 when the stream holds it for later (it comes back
 * through the receive queue, admitted) or dropped it: a number the stream
 * passed already (skipped after a fence), which its sender reports as not
 * confirmed. */
int nxi_order_admit(struct nx_buffer *b);
void nxi_order_done(struct nx_buffer *b);
static inline void nxi_order_end(struct nx_buffer *b) {
  if (b->ostream != NULL)
    nxi_order_done(b);
}

/* Process `proc` fenced a failed route (confirm.c) or was lost (ledger.c):
 * its streams to this process stop waiting for the numbers that route
 * lost, and run what they hold, in order. */
void nxi_order_skip(uint32_t proc);

/* nx_finalize, once nothing is dispatched any more: the streams go, and
 * held RSRs are freed unrun (their senders hear of them as not
 * confirmed). The next nx_init starts with none. */
void nxi_order_finalize(void);

#endif /* NXI_ORDER_H */
