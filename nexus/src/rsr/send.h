/* Sending a frame over its descriptor list's route (rsr.c): for nx_rsr_send,
 * and for a gateway passing a received frame on (gateway.c). */
#ifndef NXI_SEND_H
#define NXI_SEND_H

#include "buffers/buf.h"

/* Seals `b` (its `dl` names the destination) and hands it to the route's
 * module, falling back to the next candidate when a route's send fails.
 * Returns 0, or the error, having freed `b`. `forwarding`: a frame this
 * gateway passes on; it goes over a direct route only. */
int nxi_route_send(struct nx_buffer *b, unsigned flags, int forwarding);
/* Sends again an ordered RSR that its module could not deliver
 * (nxi_ledger_resend), without waiting: NX_EAGAIN keeps `b` for a later
 * try; any other error frees it. */
int nxi_route_resend(struct nx_buffer *b);

/* A sent frame's module is done with it (send_done, or a send that
 * answered NX_PROTOCOL_SENT): frees it, or reports its loss (`status`
 * < 0) or has reliability send it again (stages.h). */
void nxi_send_done(struct nx_buffer *b, int status);

#endif /* NXI_SEND_H */
