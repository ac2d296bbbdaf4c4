/* What mpi_rx.c offers mpi.c: receiving and in-order delivery. */
#ifndef NX_PROTO_MPI_RX_H
#define NX_PROTO_MPI_RX_H

#include "mpimod.h"

int mpimod_rx_init(struct mpimod *m);
/* Driver only: takes arrived FRAME messages, matches and completes
 * payloads, delivers (nothing new while finalizing); returns the events
 * handled. */
int mpimod_rx_progress(struct mpimod *m);
/* The watcher: whether a FRAME message waits in the head slot. */
int mpimod_rx_ready(struct mpimod *m);
/* Finalize: receives still in flight after the linger. */
void mpimod_rx_abandon(struct mpimod *m);
void mpimod_rx_fini(struct mpimod *m);

#endif /* NX_PROTO_MPI_RX_H */
