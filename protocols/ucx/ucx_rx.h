/* What ucx_rx.c offers the rest of the ucx module: the active-message
 * handler and the clean-up of receives at finalize. */
#ifndef NX_PROTO_UCX_RX_H
#define NX_PROTO_UCX_RX_H

#include "ucx.h"

ucs_status_t ucx_am_recv(void *arg, const void *header, size_t header_length,
                         void *data, size_t length,
                         const ucp_am_recv_param_t *param);
/* Gives back an eager payload the core took without a copy (frame_wrap's
 * release): takes the lock. */
void ucx_data_release(void *arg, void *data);
/* Lock held: the rendezvous fetches UCX still holds (finalize). */
unsigned ucx_rx_pending(struct ucx *u);
/* Lock held: takes the fetches still in progress from UCX, and drops the
 * frames waiting behind them that arrived whole (finalize). */
void ucx_rx_cancel_all(struct ucx *u);
/* After the worker is gone: frees frames still waiting (finalize). */
void ucx_rx_free_all(struct ucx *u);

#endif /* NX_PROTO_UCX_RX_H */
