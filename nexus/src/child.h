/* The child side of process contexts (child.c): what nx_init and nx_finalize
 * call. */
#ifndef NXI_CHILD_H
#define NXI_CHILD_H

/* Opens the channel to this process's creator, if a launcher started it,
 * and starts watching it. */
int nxi_child_init(void);
void nxi_child_finalize(void);

/* Under an MPI launcher no launcher of ours hands the ranks NX_KEY, so each
 * drew a key of its own, and modules that check keys (tcp, ofi) would
 * refuse every other rank. When a module knows the job this process
 * belongs to, the ranks gather their keys and all take rank 0's (as
 * nx_attach adopts the key of the computation it joins). Collective over
 * the job: every rank's nx_init calls it. Returns 0 (also without a job),
 * or the module's error. */
int nxi_job_key(void);

#endif /* NXI_CHILD_H */
