/* What mpi_tx.c offers mpi.c: the send path and send completion. */
#ifndef NX_PROTO_MPI_TX_H
#define NX_PROTO_MPI_TX_H

#include "mpimod.h"

int mpimod_tx_init(struct mpimod *m);
int mpimod_send_frame(struct mpimod *m, struct mpimod_peer *p,
                      nx_frame_t *frame);
/* Driver only: completes finished sends; returns how many frames. */
int mpimod_tx_progress(struct mpimod *m);
/* Finalize: what is still in flight after the linger. */
void mpimod_tx_abandon(struct mpimod *m);
void mpimod_tx_fini(struct mpimod *m);

#endif /* NX_PROTO_MPI_TX_H */
