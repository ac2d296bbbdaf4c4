/* How a process learns the computation it belongs to (its bootstrap):
 * nxrun's or its creator's control channel (child.c), a module that knows
 * the job (the mpi module's job_peers), or a PMIx server (boot_pmix.c,
 * when built with PMIx; boot_nopmix.c otherwise). docs/design.md,
 * "Bootstraps". */
#ifndef NXI_BOOT_H
#define NXI_BOOT_H

#include <stddef.h>
#include <stdint.h>

/* In nx_init, after the modules are loaded and before anything uses the
 * key: a process without a launcher's channel whose modules know no job
 * joins the PMIx server it runs under, if any, and the job's processes all
 * take rank 0's key. Collective over the job. Returns 0, or an error for
 * which nx_init fails. */
int nxi_boot_init(void);

/* In nx_init, once the channel to a creator is open (nxi_child_init
 * returned 1): the process is a process context, whatever else it runs
 * under. */
void nxi_boot_child(void);

/* In nx_finalize: done with the bootstrap (PMIx itself stays initialized
 * until the process exits, boot_pmix.c). */
void nxi_boot_finalize(void);

/* Gathers every member's `mine` through the job's bootstrap (PMIx, or the
 * module that knows the job): `*all` holds the contributions in rank
 * order (`*lens` their lengths, `*count` of them, `*rank` this process's).
 * Collective over the job. NX_ENOENT when this process is in no job. */
int nxi_boot_gather(const void *mine, size_t len, void **all, size_t **lens,
                    int *count, int *rank);

/* The backend's side (boot_pmix.c or boot_nopmix.c). pmix_join: 1 when
 * this process runs under a PMIx server and joined it, 0 when it does
 * not (a plain process: no PMIx call at all), negative when joining
 * failed; a later call in the same process returns 1 at once.
 * pmix_key: every process takes rank 0's `key`. pmix_leave: called by
 * nx_finalize; PMIx_Finalize itself runs at exit. */
int nxi_pmix_join(void);
int nxi_pmix_key(uint8_t *key, size_t len);
int nxi_pmix_gather(const void *mine, size_t len, void **all, size_t **lens,
                    int *count, int *rank);
void nxi_pmix_leave(void);
/* Starts `exe` with `argv` (NULL-ended) and the variables `env`
 * ("NAME=value", NULL-ended) as one process of a new job of the PMIx
 * server this process joined (PMIx_Spawn), on `host` if not NULL, in this
 * process's working directory. Returns 0 once the server started it, or
 * NX_ENOTSUP (no PMIx server joined, or nexus built without PMIx) or the
 * server's error. */
int nxi_pmix_spawn(const char *exe, char *const argv[], char *const env[],
                   const char *host);

/* Whether this process joined a PMIx server in its bootstrap ("pmix"). */
int nxi_boot_pmix(void);

/* nx_context_peers found no job. In task 0 of a Slurm step of several
 * tasks that no PMIx server serves (srun without --mpi=pmix), says once
 * how to start it. */
void nxi_boot_no_job(void);

#endif /* NXI_BOOT_H */
