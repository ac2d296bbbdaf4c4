/* Nodes and process contexts: OS processes started on nodes, the launcher's
 * bootstrap, and their lifecycle. */
#ifndef NEXUS_PROCESS_H
#define NEXUS_PROCESS_H

#include "export.h"

#include "gp.h"
#include "runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Acquires `count` nodes described by `spec` into nodes[0..count-1].
 * "localhost" (or "local") gives nodes on this host, where process
 * contexts are started with fork/exec. "mpi", "mpi:host=a,b",
 * "mpi:hostfile=PATH" or "mpi:add-hostfile=PATH" (at most 63 characters)
 * give nodes whose process contexts the mpi module starts with Open MPI's
 * MPI_Comm_spawn, placed by Open MPI's launchers (with host=, node i gets
 * host i modulo their number); such a node's `host` is the spec. Returns
 * 0; NX_EINVAL (a malformed spec); NX_ENOTSUP (no loaded module starts
 * processes for that spec, e.g. the mpi module left out by NX_PROTOCOLS:
 * the reason is logged); NX_ENOTINIT (a module spec before nx_init). NULL
 * `spec`, NULL `nodes` with count > 0, a negative count and a spec longer
 * than 63 characters are NX_EINVAL too. */
NX_EXTERN int nx_nodes_acquire(const char *spec, int count, nx_node_t *nodes);

/* Gives a node back. Returns 0 or NX_EINVAL. */
NX_EXTERN int nx_node_release(nx_node_t *node);

/* Starts `exe` (searched in PATH if it has no '/') with `argv` (NULL-ended;
 * argv[0] is the program name, may be NULL for just `exe`) as a new process
 * context on `node`. The program calls nx_init, registers its handlers and
 * calls nx_context_ready (or nx_context_serve); only then is `*gp` written,
 * naming the new process's initial context. A child forked here with the
 * default modules is ready once local and tcp are up; ucx and mpi join it
 * after, and routes to it move to ucx then (docs/design.md, "Modules that
 * join late"). Waits at most NX_CREATE_TIMEOUT
 * seconds (default 30). On a "pmix" node the PMIx server this process
 * joined spawns it (docs/pmix.md: the program must be on this host; a
 * child that never connects back is NX_ETIMEDOUT). On an "mpi" node the mpi
 * module spawns the program (docs/mpi.md: its environment is what Open MPI
 * gives it plus NX_KEY; a missing program is found only without host/hostfile,
 * a child that dies early is reported only by NX_ETIMEDOUT). Returns 0;
 * NX_EINVAL; NX_ENOTSUP (a node that is neither local nor a loaded module's);
 * NX_ENOENT (the program could not be started); NX_EPEERDEAD (it ended
 * before it was ready, or said something malformed); NX_ETIMEDOUT;
 * NX_EAGAIN (no process, socket or thread to be had); NX_EIO (its control
 * channel failed); NX_ENOMEM; NX_ENOTINIT; NX_EBUSY (called from an error
 * callback that runs on the thread watching process contexts, which cannot
 * wait for itself); on a "pmix" node NX_EUNREACH (this host has no IPv4
 * address up for the child to connect back to); or the error of the module
 * or PMIx server that starts it. */
NX_EXTERN int nx_context_create(const nx_node_t *node, const char *exe,
                                char *const argv[], nx_gp_t *gp);

/* Attributes of a new process context for nx_context_create_attr; all
 * zero gives what nx_context_create does. */
typedef struct nx_context_attr {
  /* "NAME=value" entries (NULL-ended), or NULL: set in the child's
   * environment, over the variables it would get otherwise. NX_KEY,
   * NX_CTL_FD, NX_CTL_TCP and NX_CTL_LATE are nexus's own (NX_EINVAL). */
  char *const *env;
  unsigned flags; /* NX_CREATE_* */
  int timeout_ms; /* how long to wait for it; 0: NX_CREATE_TIMEOUT */
} nx_context_attr_t;

/* The child's environment is `env` alone (plus what nexus gives it), not
 * a copy of the creator's. Local nodes only: a launcher's node ("mpi")
 * gives its processes its own environment (NX_ENOTSUP). */
#define NX_CREATE_ENV_ONLY 1u

/* nexus does not print the child's end when it exits with a non-zero
 * status or is killed by a signal (it does at NX_DEBUG=1): for a creator
 * that reports its children's ends itself (nexus-pvm: pvm_notify). The
 * end is still noticed as ever: the child's routes fail and error
 * callbacks hear NX_EPEERDEAD. */
#define NX_CREATE_QUIET_END 2u

/* nx_context_create with attributes (`attr` may be NULL). Besides its
 * codes: NX_EINVAL for an unknown flag, a negative timeout, or an env
 * entry without '=' (or with a newline: launchers pass them a line each)
 * or naming NX_KEY, NX_CTL_FD or NX_CTL_TCP; NX_ENOTSUP for
 * NX_CREATE_ENV_ONLY on a launcher's node ("mpi", "pmix"). */
NX_EXTERN int nx_context_create_attr(const nx_node_t *node, const char *exe,
                                     char *const argv[],
                                     const nx_context_attr_t *attr,
                                     nx_gp_t *gp);

/* In a program started as a process context (by nx_context_create, on
 * any kind of node, or nxrun): its initial context is initialised; the
 * creator gets its gp now.
 * Idempotent. Returns 0, NX_ENOENT (this process was not started that way),
 * NX_EPEERDEAD (the creator is gone), NX_EIO (the control channel failed),
 * NX_ENOMEM, NX_ENOTINIT, or the error of the module whose channel it is. */
NX_EXTERN int nx_context_ready(void);

/* nx_context_ready, then serves RSRs until the creator destroys this
 * context (returns 0) or goes away (returns NX_EPEERDEAD). The program then
 * calls nx_finalize and exits. Returns NX_ENOENT when this process was not
 * started as a process context, and nx_context_ready's other codes. */
NX_EXTERN int nx_context_serve(void);

/* The computation's initial contexts, for a program started by nxrun:
 * `*gps` gets a malloc'ed array of `*count` gps, one per process in rank
 * order (this process's own included); release each gp and free the
 * array. In a context made by nx_context_create, the one peer is the
 * creator. In a program started by an MPI launcher (mpirun) instead, the
 * MPI module gives the job's ranks (collective: every rank must call it).
 * Calls nx_context_ready first; waits until every peer is ready.
 * `*rank` (may be NULL) gets this process's index, -1 in a context made by
 * nx_context_create. Returns 0, NX_EINVAL, NX_ENOENT (not started by a
 * launcher, and in no job), NX_EPEERDEAD (the launcher is gone), NX_EPROTO
 * or NX_ERANGE (a malformed peer list), NX_ENOMEM, NX_ENOTINIT,
 * nx_context_ready's codes, or in a job the error of its exchange (the
 * mpi module's or PMIx's). */
NX_EXTERN int nx_context_peers(nx_gp_t **gps, int *count, int *rank);

/* Makes this computation accept attachments: programs started separately,
 * here or on another host, join it with nx_attach. `*url` gets
 * "nexus://HOST:PORT/KEY" (KEY: the computation's key, 32 hex digits),
 * valid until nx_finalize. Listens on 127.0.0.1, or on NX_ATTACH_LISTEN
 * ("addr", "addr:port" or "[v6addr]:port"). A connection that does not
 * present the key is refused and counted (drop_bad_frame). Calling it again
 * returns the same URL. Returns 0, NX_EINVAL, NX_EBUSY (address in use),
 * NX_EIO, NX_EAGAIN (no thread for the process layer's loop, or it cannot
 * watch the socket) or NX_ENOTINIT. */
NX_EXTERN int nx_attach_listen(const char **url);

/* Joins the computation listening at `url` and writes a gp to its
 * listening context into `*gp`. This process adopts that computation's key
 * (its protocol modules present it from now on), so RSRs flow both ways.
 * Returns 0; NX_EINVAL (malformed URL); NX_EUNREACH (nothing listens
 * there, or no connection within 5 s); NX_EACCES (the listener's proof does not
 * match the URL's key, or it refused ours); NX_EPROTO (a malformed answer, or
 * the listener closed in the handshake: an older nexus); NX_ERANGE (a truncated
 * descriptor list in its answer); NX_ECONNRESET (it closed while sending its
 * answer); NX_ETIMEDOUT (5 s per step); NX_EIO; NX_ENOMEM; NX_ENOTINIT. */
NX_EXTERN int nx_attach(const char *url, nx_gp_t *gp);

#ifdef __cplusplus
}
#endif

#endif /* NEXUS_PROCESS_H */
