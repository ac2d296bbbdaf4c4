/* What mpi_peer.c offers every file of the mpi module. */
#ifndef NX_PROTO_MPI_PEER_H
#define NX_PROTO_MPI_PEER_H

#include "mpimod.h"

int mpimod_status_to_nx(int mpi_error);
/* Marks a peer dead (no more sends) and reports it once. */
void mpimod_peer_fail(struct mpimod *m, struct mpimod_peer *p, const char *why);
/* The peer for `rank` if connect made one, else NULL. */
struct mpimod_peer *mpimod_peer_find(struct mpimod *m, int rank);

#endif /* NX_PROTO_MPI_PEER_H */
