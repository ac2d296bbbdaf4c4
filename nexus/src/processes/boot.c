/* The bootstrap: which of nxrun's channel, a creator's channel, a module
 * that knows the job (mpi) or a PMIx server tells this process the
 * computation it belongs to, decided once per outermost nx_init. */
#include "processes/boot.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "modules/module.h"
#include "base/rt.h"

enum boot { BOOT_NONE, BOOT_NXRUN, BOOT_CREATOR, BOOT_MPI, BOOT_PMIX };

static const char *const boot_names[] = {[BOOT_NONE] = "none",
                                         [BOOT_NXRUN] = "nxrun",
                                         [BOOT_CREATOR] = "creator",
                                         [BOOT_MPI] = "mpi",
                                         [BOOT_PMIX] = "pmix"};

static enum boot boot;
static int pmix_joined;

/* Gathers every member's `mine`, in rank order, through the first module
 * that knows a job this process belongs to (mpirun's ranks): the
 * launcher table's job_peers. NX_ENOENT without one. */
static int job_gather(const void *mine, size_t len, void **all, size_t **lens,
                      int *count, int *rank) {
  int nmods = nxi_module_count_loaded();
  for (int i = 0; i < nmods; i++) {
    struct nxi_module *m = nxi_module_loaded(i);
    if (m->launch == NULL || m->launch->job_peers == NULL)
      continue;
    int r = m->launch->job_peers(m->state, mine, len, all, lens, count, rank);
    if (r != NX_ENOENT)
      return r;
  }
  return NX_ENOENT;
}

/* Under an MPI launcher no launcher of ours hands the ranks NX_KEY, so each
 * drew a key of its own, and modules that check keys (tcp, ofi) would
 * refuse every other rank. When a module knows the job this process
 * belongs to, the ranks gather their keys and all take rank 0's (as
 * nx_attach adopts the key of the computation it joins). Collective over
 * the job. Returns 1 (the ranks agreed), 0 (no module knows a job), or the
 * module's error. */
static int job_key(void) {
  void *all = NULL;
  size_t *lens = NULL;
  int n = 0, rank = -1;
  int r = job_gather(nxi_rt.key, NX_KEY_SIZE, &all, &lens, &n, &rank);
  if (r == NX_ENOENT)
    return 0; /* no job: the key stays NX_KEY's, or this process's own */
  if (r == 0) {
    if (n >= 1 && lens[0] == NX_KEY_SIZE)
      memcpy(nxi_rt.key, all, NX_KEY_SIZE);
    else
      r = NX_EPROTO;
    free(all);
    free(lens);
  }
  return r == 0 ? 1 : r;
}

int nxi_boot_init(void) {
  boot = BOOT_NONE;
  pmix_joined = 0;
  /* A module that knows the job (the mpi module under mpirun) wins: its
   * exchange is the one every rank of an MPI job takes part in, also a
   * rank that runs no nexus (tests/conformance/conf_rogue.c). */
  int r = job_key();
  if (r < 0)
    return r;
  if (r > 0) {
    boot = BOOT_MPI;
    return 0;
  }
  /* A launcher's socket: nxrun (which hands out ranks) or nx_context_create.
   * Its children inherit the PMIx variables of a process that runs under
   * a PMIx server, and must not join it as that process. */
  const char *fd = getenv("NX_CTL_FD");
  const char *tcp = getenv("NX_CTL_TCP"); /* a creator's, through PMIx */
  if ((fd != NULL && fd[0] != '\0') || (tcp != NULL && tcp[0] != '\0')) {
    const char *rank = getenv("NX_RANK");
    boot = rank != NULL && rank[0] != '\0' ? BOOT_NXRUN : BOOT_CREATOR;
    return 0;
  }
  r = nxi_pmix_join();
  if (r <= 0)
    return 0; /* no PMIx server (or joining failed, logged): no job */
  pmix_joined = 1;
  boot = BOOT_PMIX;
  r = nxi_pmix_key(nxi_rt.key, NX_KEY_SIZE);
  if (r < 0) {
    nxi_pmix_leave();
    pmix_joined = 0;
    boot = BOOT_NONE;
  }
  return r;
}

void nxi_boot_child(void) {
  if (boot != BOOT_NXRUN)
    boot = BOOT_CREATOR;
}

void nxi_boot_finalize(void) {
  if (pmix_joined)
    nxi_pmix_leave();
  pmix_joined = 0;
  boot = BOOT_NONE;
}

int nxi_boot_gather(const void *mine, size_t len, void **all, size_t **lens,
                    int *count, int *rank) {
  if (boot == BOOT_PMIX)
    return nxi_pmix_gather(mine, len, all, lens, count, rank);
  return job_gather(mine, len, all, lens, count, rank);
}

int nxi_boot_pmix(void) { return boot == BOOT_PMIX; }

void nxi_boot_no_job(void) {
  static atomic_int said;
  const char *step = getenv("SLURM_STEP_ID");
  const char *n = getenv("SLURM_STEP_NUM_TASKS");
  const char *id = getenv("SLURM_PROCID");
  const char *ns = getenv("PMIX_NAMESPACE");
  /* With PMIx's variables a server was there: its own failure is logged
   * (boot_pmix.c). */
  if (step == NULL || n == NULL || strtol(n, NULL, 10) < 2 ||
      (id != NULL && strcmp(id, "0") != 0) || (ns != NULL && ns[0] != '\0') ||
      atomic_exchange(&said, 1))
    return;
  nxi_log(0, NULL,
          "no job: this process is task 0 of the %s tasks of Slurm step %s, "
          "which no PMIx server serves, so every task runs alone; start the "
          "step with srun --mpi=pmix (srun --mpi=list shows whether this "
          "Slurm has it; docs/pmix.md)",
          n, step);
}

const char *nx_bootstrap(void) { return nxi_ready() ? boot_names[boot] : NULL; }
