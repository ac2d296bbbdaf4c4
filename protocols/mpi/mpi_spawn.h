/* What mpi_spawn.c offers mpi.c: the launcher table's spawning slots
 * (docs/mpi.md, "Spawning"). */
#ifndef NX_PROTO_MPI_SPAWN_H
#define NX_PROTO_MPI_SPAWN_H

#include "mpimod.h"

int mpimod_node_spec(void *state, const char *spec, char *why, size_t why_len);
int mpimod_spawn(void *state, const char *spec, uint32_t node, const char *exe,
                 char *const argv[], const char *const env[], int timeout_ms,
                 void **ctl);
int mpimod_ctl_send(void *state, void *ctl, const void *msg, size_t len);
long mpimod_ctl_recv(void *state, void *ctl, void *buf, size_t cap,
                     int timeout_ms);
void mpimod_ctl_close(void *state, void *ctl, unsigned flags);
int mpimod_ctl_parent(void *state, void **ctl);
/* Init, once MPI is up: keeps the intercommunicator to a spawning parent. */
void mpimod_spawn_attach(struct mpimod *m);

#endif /* NX_PROTO_MPI_SPAWN_H */
