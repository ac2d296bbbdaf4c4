/* The services the core gives protocol modules (struct nx_core_api). */
#ifndef NXI_SERVICES_H
#define NXI_SERVICES_H

#include "rt.h"

extern const struct nx_core_api nxi_core_api;

struct nx_buffer;
/* A sent frame's module is done with it (send_done, or a send that
 * answered NX_PROTOCOL_SENT): frees it, or reports its loss (`status`
 * < 0) or sends it again (ledger.h). */
void nxi_send_done(struct nx_buffer *b, int status);

#endif /* NXI_SERVICES_H */
