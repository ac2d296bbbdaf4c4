/* Gateways (gateway.c): forwarding RSRs for member processes. */
#ifndef NXI_GATEWAY_H
#define NXI_GATEWAY_H

#include "base/rt.h"

/* Forgets the members, the gateways joined, and stops forwarding: before
 * the routes go (nx_finalize). */
void nxi_gateway_finalize(void);

#endif /* NXI_GATEWAY_H */
