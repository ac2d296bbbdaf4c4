/* What ucx_rx.c offers the rest of the ucx module: the active-message
 * handler and the clean-up of receives at finalize. */
#ifndef NX_PROTO_UCX_RX_H
#define NX_PROTO_UCX_RX_H

#include "ucx.h"

ucs_status_t ucx_am_recv(void *arg, const void *header, size_t header_length,
                         void *data, size_t length,
                         const ucp_am_recv_param_t *param);
/* Lock held: takes the fetches still in progress from UCX (finalize). */
void ucx_rx_cancel_all(struct ucx *u);
/* After the worker is gone: frees frames still waiting (finalize). */
void ucx_rx_free_all(struct ucx *u);

#endif /* NX_PROTO_UCX_RX_H */
