/* The lowest layer of the mpi module, which every other file may call:
 * MPI's error codes as nexus codes, and finding and failing a peer. */
#include "mpi_peer.h"

int mpimod_status_to_nx(int mpi_error) {
  int cls = MPI_ERR_OTHER;
  if (mpi_error == MPI_SUCCESS)
    return 0;
  if (MPI_Error_class(mpi_error, &cls) != MPI_SUCCESS)
    return NX_EIO;
  switch (cls) {
  case MPI_SUCCESS: return 0;
  case MPI_ERR_NO_MEM: return NX_ENOMEM;
  case MPI_ERR_BUFFER:
  case MPI_ERR_COUNT:
  case MPI_ERR_TYPE:
  case MPI_ERR_TAG:
  case MPI_ERR_COMM:
  case MPI_ERR_RANK:
  case MPI_ERR_ROOT:
  case MPI_ERR_GROUP:
  case MPI_ERR_ARG:
  case MPI_ERR_REQUEST: return NX_EINVAL;
  case MPI_ERR_TRUNCATE: return NX_EMSGSIZE;
  case MPI_ERR_PENDING:
  case MPI_ERR_SPAWN: return NX_EAGAIN; /* no slot for it, say */
  case MPI_ERR_UNSUPPORTED_OPERATION: return NX_ENOTSUP;
  default: return NX_EIO;
  }
}

struct mpimod_peer *mpimod_peer_find(struct mpimod *m, int rank) {
  if (rank < 0 || rank >= m->size)
    return NULL;
  pthread_mutex_lock(&m->peers_lock);
  struct mpimod_peer *p = m->peers[rank];
  pthread_mutex_unlock(&m->peers_lock);
  return p;
}

void mpimod_peer_fail(struct mpimod *m, struct mpimod_peer *p,
                      const char *why) {
  nxu_lock(&p->lock);
  p->dead = 1;
  nxu_unlock(&p->lock);
  if (atomic_exchange(&p->reported, 1) || m->finalizing)
    return;
  MPIMOD_LOG(m, 1, "rank %d: %s", p->rank, why);
  m->core->peer_failed(&p->base, NX_EPEERDEAD);
}
