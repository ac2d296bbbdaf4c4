/* Contexts (address spaces with their own handler table and data) and handler
 * registration. */
#ifndef NEXUS_CONTEXT_H
#define NEXUS_CONTEXT_H

#include "export.h"

#include <stddef.h>
#include <stdint.h>

#include "buffer.h"
#include "gp.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nx_context nx_context_t;

/* Handler ids are derived from handler names (see nx_handler_id), so
 * executables agree on them without registering in the same order. */
typedef uint32_t nx_handler_id_t;

/* A handler runs in the context the RSR's gp names, with the gp's address
 * and the RSR's buffer. The runtime releases `buf` when the handler returns
 * unless the handler retained it (nx_buffer_retain). */
typedef void (*nx_handler_fn)(nx_context_t *ctx, void *address,
                              nx_buffer_t *buf);

/* Compiler-supplied context initialisation. Runs once, in the new context,
 * before the creator gets a gp to it; 0 (or any non-negative value) means
 * success, a negative return aborts creation. */
typedef int (*nx_context_init_fn)(nx_context_t *ctx, void *arg);

enum nx_handler_kind {
  /* Runs on the thread that drives progress; must not block. */
  NX_HANDLER_NONTHREADED = 0,
  /* May block. With NX_THREADED=lazy (the default, where built with
   * Boost.Context) it starts on a stack of its own, on the thread that
   * receives its RSR (the progress thread, or a thread waiting in
   * nx_cond_wait); when it waits on a nexus condition variable or a
   * contended nexus mutex (holding no other nexus mutex) it parks and that
   * thread goes on; a runtime thread resumes it, maybe another OS thread
   * (docs/design.md, "Where handlers run"). With NX_THREADED=thread it
   * runs on a runtime thread, never on an application thread: on the
   * progress thread when it is free (which hands progress to a pooled
   * thread only if the handler blocks), else on a pooled thread (the pool
   * grows when every pooled thread is blocked). */
  NX_HANDLER_THREADED = 1,
  /* May block. Always runs on a newly created thread (the Nexus paper's
   * "new thread" variant; kept to measure its cost). */
  NX_HANDLER_NEW_THREAD = 2
};

/* The wire id of a handler name: a 32-bit FNV-1a hash, never 0. Pure; a
 * compiler may compute it ahead of time. */
NX_EXTERN nx_handler_id_t nx_handler_id(const char *name);

/* Creates an in-process context: it shares this process's memory but has
 * its own handler table and data. `init(ctx, arg)` runs in the calling
 * thread with the new context current; `*gp` is written only after init
 * returned (>= 0), and names the context's data pointer (nx_context_set_data).
 * Returns 0, NX_EINVAL, NX_ENOMEM, NX_ENOTINIT, or init's negative result. */
NX_EXTERN int nx_context_create_local(nx_context_init_fn init, void *arg,
                                      nx_gp_t *gp);

/* Destroys the context `gp` names. An in-process context: RSRs that arrive
 * for it later are dropped and counted (NX_ENOCONTEXT); the call returns at
 * once, and handlers already dispatched to it (running, or queued for a
 * thread) still run, its handler table and data valid until they end. A process
 * context this process made with nx_context_create: it is asked to end (its
 * nx_context_serve returns) and the call returns; a child forked on this
 * host is then reaped in the background, or given 5 s, then sent SIGTERM
 * and, 2 s later, SIGKILL (nx_finalize waits for it), while one a module or
 * PMIx started is waited for here. RSRs to it then fail with NX_ENOCONTEXT.
 * Returns 0,
 * NX_EINVAL, NX_ENOCONTEXT (unknown, already destroyed, or another process's
 * context that this process did not create), NX_EBUSY (the process's initial
 * context) or NX_ENOTINIT. */
NX_EXTERN int nx_context_destroy(const nx_gp_t *gp);

/* The current context of the calling thread: inside a handler or init the
 * context it runs in, otherwise the process's initial context. NULL before
 * nx_init. */
NX_EXTERN nx_context_t *nx_context_self(void);

/* The context's id (unique in the computation). */
NX_EXTERN uint64_t nx_context_id(const nx_context_t *ctx);

/* The context's compiler-defined data pointer (NULL for a NULL `ctx`), and
 * setting it: nx_context_set_data returns 0 or NX_EINVAL (`ctx` NULL). */
NX_EXTERN void *nx_context_data(const nx_context_t *ctx);
NX_EXTERN int nx_context_set_data(nx_context_t *ctx, void *data);

/* Registers `fn` under `name` in `ctx`. Registering the same name again
 * replaces the function and kind. Returns 0; NX_EINVAL (NULL `ctx`, `name`
 * or `fn`, empty name, bad kind); NX_ECOLLISION when another name in this
 * context hashes to the same id; NX_ENOMEM. `*id` (may be NULL) receives
 * the handler's id. */
NX_EXTERN int nx_handler_register(nx_context_t *ctx, const char *name,
                                  nx_handler_fn fn, int kind,
                                  nx_handler_id_t *id);

/* Receive placement (docs/design.md, "Receive placement"). An RSR whose
 * payload ends with an array of at least NX_PLACE_MIN bytes (put last,
 * copied or by reference) carries the marks that let the receiver name
 * where those bytes go before they are fetched: the array's elements, the
 * "tail". When such a frame arrives for a handler that has a placement
 * callback, and the module that receives it places (every module that
 * reaches other processes; not local, which hands the sender's buffer
 * over: docs/design.md, "Receive placement"), the callback is asked once its
 * leading bytes are in: `lead` holds the values before the tail, readable with
 * nx_get_* from the start (the tail itself is not in it: its get gives
 * NX_ERANGE); `tail_bytes` is the length of the tail's elements. To place them,
 * the callback writes where to `*where` and returns 1; the module then writes
 * the tail there (at most `tail_bytes` bytes from where->addr), and the handler
 * runs with the buffer as always: its get of the tail (nx_get_*_array with
 * where->addr itself costs no copy, with other memory one copy;
 * nx_get_*_array_ptr gives where->addr) converts the byte order where the
 * elements are, if the sender's differs. Returning 0 declines, a negative
 * NX_E* code says it failed, and where->len < tail_bytes (or a NULL
 * where->addr) refuses the memory: in all three cases nothing is written
 * there and the tail arrives in the runtime's memory as without a
 * callback (nx_buffer_placement says which happened).
 *
 * The callback runs on the thread that receives the frame, possibly inside
 * a protocol module's receive path with its lock held, before the handler
 * and possibly before the handlers of RSRs that arrived earlier. It may
 * read `lead` (nx_get_*, nx_buffer_*) and its own data; it must not block
 * or call other nexus functions (send, lock, wait). Memory it names must
 * stay valid until the handler ran; if the frame is lost after it was
 * placed (its sender died midway), the error callback hears of it with
 * NX_EPEERDEAD, the context and the handler, from the progress driver. */
#define NX_PLACE_MIN 8192u

typedef struct nx_place {
  void *addr; /* where the tail's elements go */
  size_t len; /* bytes there, at least tail_bytes */
} nx_place_t;

typedef int (*nx_place_fn)(nx_context_t *ctx, void *address, nx_buffer_t *lead,
                           size_t tail_bytes, nx_place_t *where);

/* Sets the placement callback of the handler registered under `name` in
 * `ctx` (NULL `fn` removes it); registering the handler again keeps it.
 * Returns 0; NX_EINVAL (NULL `ctx` or `name`); NX_ENOHANDLER (no handler
 * of that name in `ctx`); NX_ENOMEM. */
NX_EXTERN int nx_handler_set_place(nx_context_t *ctx, const char *name,
                                   nx_place_fn fn);

#ifdef __cplusplus
}
#endif

#endif /* NEXUS_CONTEXT_H */
