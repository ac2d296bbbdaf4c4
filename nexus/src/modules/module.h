/* The protocol module loader's view of the loaded modules: what the descriptor
 * lists, the engine, the launcher and nxinfo ask of it. */
#ifndef NXI_MODULE_H
#define NXI_MODULE_H

#include "base/rt.h"

struct nxi_module {
  char name[NX_PROTO_NAME_MAX + 1];
  char path[512];
  int loaded;
  int error;
  char reason[256];
  int order; /* position in NX_PROTOCOLS, or by cost */
  void *dl_handle;
  const struct nx_protocol_ops *ops;
  const struct nx_launch_ops *launch; /* NULL: it starts no processes */
  void *state;
  struct nx_desc_buf desc;
  int wait_fd; /* -1: none; the engine watches the others */
  /* The poll policy (dispatch.c), kept by the driver: */
  atomic_int sent;       /* an RSR went out through it (dispatch.c clears it) */
  uint64_t poll_ns;      /* what a poll that finds nothing costs (averaged) */
  uint64_t hot_until;    /* polled every round until then */
  uint64_t next_poll;    /* after that (cold), not polled before then */
  uint64_t poll_ns_init; /* poll_ns as measured at nx_init (nx_module_info) */
  int joining; /* left to load after nx_init (nxi_modules_join_next) */
};

/* Finds, validates and initialises the modules (NX_PROTOCOLS, or every
 * one found), handing each `api`. Returns 0; a module that fails is kept
 * with its reason (nxi_module_explain). */
/* With `defer` (a process context whose creator takes late modules,
 * child.c), the slow modules of the default set (ucx, mpi) are not loaded
 * now but left to nxi_modules_join_next, when tcp loaded. */
int nxi_modules_load(const struct nx_core_api *api, int defer);
void nxi_modules_unload(void);
/* Loads the next module left to join: 1 and the module in *out when it
 * loaded (nxi_module_publish then puts it among the loaded ones), 0 when
 * it failed (said as at nx_init, and kept with its reason), -1 when none
 * is left. One thread calls it, and it has ended before
 * nxi_modules_unload. */
int nxi_modules_join_next(struct nxi_module **out);
/* A module that joined goes at the end of the loaded ones, with what an
 * idle poll of it costs (the driver's starting point). Every module that
 * joined must be published: nxi_modules_unload finalizes those. */
void nxi_module_publish(struct nxi_module *m, uint64_t poll_ns);
/* How many modules are left to join. */
int nxi_modules_joining(void);
/* The loaded modules: in order of preference those nx_init loaded, then
 * those that joined since. The count grows after its entry is written;
 * written otherwise at nx_init and nx_finalize only. Inline: the driver
 * asks every poll round. */
extern struct nxi_module *nxi_loaded[NXI_MAX_MODULES];
extern _Atomic int nxi_nloaded;
static inline int nxi_module_count_loaded(void) {
  return atomic_load_explicit(&nxi_nloaded, memory_order_acquire);
}
/* The i-th loaded module, in order of preference. */
static inline struct nxi_module *nxi_module_loaded(int i) {
  return nxi_loaded[i];
}
/* A loaded module's index in nxi_loaded (its number in a trace). */
static inline uint8_t nxi_module_index(const struct nxi_module *m) {
  return (uint8_t)m->order;
}
int nxi_module_count_all(void);
void nxi_module_explain(int i); /* logs why module i was skipped */
/* The loaded module whose name begins `spec` ("mpi:host=a" -> mpi), if it
 * starts processes; NULL otherwise. */
struct nxi_module *nxi_module_launcher(const char *spec);

#endif /* NXI_MODULE_H */
