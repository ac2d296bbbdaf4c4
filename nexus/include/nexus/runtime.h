/* Runtime lifecycle, nodes, progress, counters and error reporting. */
#ifndef NEXUS_RUNTIME_H
#define NEXUS_RUNTIME_H

#include "export.h"

#include <stdint.h>

#include "context.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Starts the runtime in this process: loads the protocol modules
 * (NX_PROTOCOLS, NX_PROTO_PATH), creates the initial context and, unless
 * NX_PROGRESS=poll, the progress thread. `argc`/`argv` may be NULL.
 * Calls nest: each nx_init needs one nx_finalize.
 * Returns 0, NX_ENOMEM, NX_EUNREACH (no protocol module loaded; the reasons
 * are printed), NX_EINVAL (a malformed setting, or NX_PROTOCOLS naming a
 * module that is not there; the reason is printed), NX_EIO (no random
 * bytes for the process identity or key, or a module's wait fd cannot be
 * watched), NX_EAGAIN (no thread to watch the creator's control channel),
 * NX_EBUSY (an earlier nx_finalize had to leave blocked handler threads
 * running, or called from an error callback), or the error of agreeing on
 * the job's key (a rank of an MPI job or a PMIx server's process: the
 * module's or PMIx's code, NX_EPROTO for a malformed key). */
NX_EXTERN int nx_init(int *argc, char ***argv);

/* Stops the runtime. First it delivers: RSRs sent to contexts of this
 * process run, and every RSR nx_rsr_send accepted for another process is
 * handled there (as nx_flush), both within NX_FINALIZE_MS milliseconds
 * (default 60000). RSRs it could not confirm handled by then are reported
 * to the error callback one by one with NX_ETIMEDOUT (they may still run:
 * the peer was slow, or a fallback lost them) and the call returns
 * NX_ETIMEDOUT. Then it ends the process contexts it created, stops its
 * threads, destroys the contexts and finalizes the modules. If handler
 * threads are still blocked in program code after a two-second grace
 * period, they are left running, nothing they might use is freed, and
 * NX_EBUSY is returned (the runtime is stopped all the same). Not from a
 * handler: there the call that would stop the runtime does nothing and
 * returns NX_EBUSY (one that matches a nested nx_init only counts down,
 * as anywhere). From an error callback it returns NX_EBUSY, as nx_init
 * does. Returns 0, NX_ETIMEDOUT, NX_EBUSY or NX_ENOTINIT. */
NX_EXTERN int nx_finalize(void);

/* The version of the library the program runs with ("0.1.0"), which may
 * differ from NX_VERSION_STRING, the headers' it was compiled with. Needs
 * no nx_init. */
NX_EXTERN const char *nx_version(void);

/* How this process learned the computation it belongs to, its bootstrap
 * (docs/design.md, "Bootstraps"): "nxrun" (started by nxrun), "creator"
 * (a process context of nx_context_create), "mpi" (a rank of an MPI job
 * the mpi module knows), "pmix" (a process a PMIx server started:
 * mpirun, srun --mpi=pmix, prterun) or "none" (started by hand). Decided
 * by the outermost nx_init; NULL before nx_init. */
NX_EXTERN const char *nx_bootstrap(void);

/* A node: a processing resource (here, a host). */
typedef struct nx_node {
  uint32_t id;
  char host[64];
} nx_node_t;

/* Writes the node this process runs on. Returns 0, NX_EINVAL or NX_ENOTINIT. */
NX_EXTERN int nx_node_self(nx_node_t *node);

/* Drives progress once without blocking: polls the modules whose turn it
 * is (every module that carried traffic in the last 10 ms; an idle one at
 * most 50 us apart, less often the more its poll costs: docs/design.md,
 * "Polling the modules") and runs the handlers that are due (threaded ones
 * are handed to runtime threads). Needed with NX_PROGRESS=poll, and worth
 * calling in any loop that polls for what a handler brings without waiting
 * in nx_cond_wait (else delivery waits for a runtime thread to get a core
 * from the loop: milliseconds when every core is busy).
 * Returns how much was done (module events plus RSRs dispatched, dropped
 * ones included; 0 when nothing was due or another thread is driving: a 0
 * does not mean that an idle module has nothing), or NX_ENOTINIT. */
NX_EXTERN int nx_poll(void);

/* Counters of this process, for tools and tests. */
typedef struct nx_stats {
  uint64_t rsr_sent;        /* RSRs accepted by nx_rsr_send */
  uint64_t rsr_handled;     /* RSRs dispatched to their handler */
  uint64_t drop_no_handler; /* RSRs for a handler the context lacks */
  uint64_t drop_no_context; /* RSRs for an unknown or destroyed context */
  uint64_t drop_bad_frame;  /* malformed frames from a peer */
  uint64_t threads_created; /* runtime threads started: the progress
                               thread, pool growth, new-thread handlers */
  uint64_t rsr_failed;      /* accepted RSRs lost with their peer */
  uint64_t peers_failed;    /* peer processes found dead */
  uint64_t lazy_started;    /* threaded handlers started on a stack of
                               their own (NX_THREADED=lazy) */
  uint64_t lazy_parked;     /* times such a handler parked in a wait */
  uint64_t rsr_forwarded;   /* RSRs this gateway passed on to another
                               process (nx_gateway_enable) */
  uint64_t route_fallbacks; /* routes replaced by the next candidate after
                               their module failed (docs/design.md 6) */
  uint64_t rsr_placed;      /* RSRs whose trailing array a module wrote
                               where a placement callback said
                               (nx_handler_set_place) */
} nx_stats_t;

/* Writes the current counters. Returns 0, NX_EINVAL or NX_ENOTINIT. */
NX_EXTERN int nx_stats_get(nx_stats_t *stats);

/* Called for every RSR the runtime drops or loses, with the reason, the
 * destination context id and the handler id, on the thread that finds it:
 * for a drop at dispatch the thread that drives progress at the time (a
 * runtime thread, or an application thread waiting in nexus); for a loss
 * the one that learns of it (docs/design.md section 9 lists them). It must
 * not block. Reasons: NX_ENOHANDLER, NX_ENOCONTEXT (dropped here); for an
 * RSR nx_rsr_send accepted that is lost, the code its process was lost
 * with (NX_EPEERDEAD; NX_ENOCONTEXT for a process context this process
 * destroyed; or a module's code), its module's send status, NX_ETIMEDOUT
 * (not confirmed by nx_finalize) or NX_EFINALIZED. When a peer process
 * dies or is destroyed, it is called once more with the code it was lost
 * with (NX_EPEERDEAD unless a module or a destroy gave another), handler 0
 * and a context id whose low 32 bits are 0: that names every context of
 * the dead process (all share its high 32 bits). A program waiting for
 * replies from it signals its waiters from here. */
typedef void (*nx_error_cb)(int err, uint64_t context, uint32_t handler,
                            void *arg);

/* Installs `cb` as the program's callback, replacing the one installed
 * before with this call (NULL removes it). Callbacks added with
 * nx_error_cb_add stay; when none is installed at all, the default is one
 * line on stderr for each of the first few drops. Returns 0, NX_ENOTINIT,
 * or NX_EBUSY when called from inside an error callback. */
NX_EXTERN int nx_error_cb_set(nx_error_cb cb, void *arg);

/* Adds `cb` beside the callbacks already installed, for libraries and
 * frontends that must not replace the program's: every installed callback
 * is called for each report, nx_error_cb_set's first, then these in the
 * order they were added. Returns a handle (> 0) for nx_error_cb_remove, or
 * NX_ENOTINIT, NX_EINVAL (cb NULL), NX_ENOMEM (15 added already), NX_EBUSY
 * (called from inside an error callback). */
NX_EXTERN int nx_error_cb_add(nx_error_cb cb, void *arg);

/* Removes the callback that nx_error_cb_add returned `handle` for. When it
 * returns, no call of that callback is running on another thread (so its
 * `arg` may be freed); from inside an error callback it returns at once
 * and the calls running finish. Returns 0, NX_ENOTINIT, or NX_ENOENT (no
 * such handle, or removed already). Handles end with nx_finalize. */
NX_EXTERN int nx_error_cb_remove(int handle);

/* What the loader did with one protocol module (for nxinfo and tests). */
typedef struct nx_module_info {
  char name[16];
  char path[512];   /* the shared object, or "" if none was found */
  int loaded;       /* 1 if loaded and initialised */
  int error;        /* why not: an NX_E* code (0 when loaded) */
  char reason[256]; /* why not, in words */
  int cost;         /* default cost (lower is preferred) */
  int rank;         /* position in the preference order (0 first) */
  unsigned wire_version;
  char backend[128];    /* backend library and version, if known */
  char descriptor[256]; /* this process's descriptor, printable */
  unsigned poll_ns;     /* what a poll that finds nothing cost at nx_init (ns):
                           idle modules are polled less often the more it is */
} nx_module_info_t;

/* Number of modules the loader considered (found or asked for), or
 * NX_ENOTINIT. */
NX_EXTERN int nx_module_count(void);

/* Writes what happened to module `index` (0 <= index < nx_module_count()).
 * Returns 0, NX_EINVAL or NX_ENOTINIT. */
NX_EXTERN int nx_module_info(int index, nx_module_info_t *info);

#ifdef __cplusplus
}
#endif

#endif /* NEXUS_RUNTIME_H */
