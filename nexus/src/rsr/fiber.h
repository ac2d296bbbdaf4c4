/* Lazy threaded handlers (fiber.c; docs/design.md "Threaded handlers"): a
 * threaded handler starts on the thread that received its RSR, on a stack of
 * its own; it parks, and the thread goes on, when it waits on a nexus
 * condition variable or a contended nexus mutex. */
#ifndef NXI_FIBER_H
#define NXI_FIBER_H

#include <stddef.h>
#include <stdint.h>

#include "base/rt.h"

struct nx_buffer;
struct nxi_fiber;

/* The fiber running on this thread, NULL on the thread's own stack (and
 * always without fcontext). Read inline only where no switch came before
 * in the calling function (fiber.c says why): a wait's first test of
 * whether it could park at all (waiter.c). */
extern NXI_TLS struct nxi_fiber *nxi_fiber_cur;

/* Sets the pool up (nx_init): `on` 0 keeps threaded handlers on runtime
 * threads, as without fcontext. Returns 0. */
int nxi_fiber_init(int on, size_t stack_size);
/* Frees the pooled stacks (nx_finalize). Returns the number of handlers
 * still parked, waiting to be resumed or running; their stacks are left in
 * place. */
int nxi_fiber_fini(void);
/* Whether threaded handlers run on stacks of their own. */
int nxi_fiber_enabled(void);

/* Runs `b`'s handler on a pooled stack until it returns or parks. Returns
 * 0, or NX_ENOMEM when no stack could be had (the caller runs it the
 * old way). Counts it in this thread's lazy_started (rt.h). */
int nxi_fiber_start(struct nx_buffer *b);
/* The same for a threaded handler dispatched by a thread's polling: on a
 * stack that carries that polling on (fiber.c, fiber_carry) the handler is
 * called there, without a switch; started from the outermost loop of a
 * runtime thread or a waiting thread, the new stack carries its polling on
 * once the handler returned, calling `drain` (the dispatcher's: runs what
 * is queued while this thread drives at the generation given, returns how
 * many ran). `drain` is called only before this returns: a handler that
 * parks ends the carrying. */
int nxi_fiber_dispatch(struct nx_buffer *b, int (*drain)(unsigned gen));
/* Resumes a parked handler made runnable (`b->fiber`) until it returns or
 * parks again. */
void nxi_fiber_resume(struct nxi_fiber *f);

/* Called by a thread about to wait for `*word` to differ from `old`: on a
 * stack of its own that holds no nexus mutex, the handler parks until
 * nxi_fiber_wake names the word (returns 0, maybe spuriously: callers
 * re-check); anywhere else returns NX_EAGAIN at once. */
int nxi_fiber_park(const uint32_t *word, uint32_t old);
/* Whether the caller could park (it runs a handler on its own stack and
 * holds no nexus mutex). */
int nxi_fiber_can_park(void);
/* nx_thread_exit on a handler's own stack: ends the handler (its RSR is
 * done, the stack is freed) and does not return. Elsewhere, or from a
 * handler nxi_run runs inside that one, returns. */
void nxi_fiber_exit(void);
/* Makes up to `n` handlers parked on `word` runnable. */
void nxi_fiber_wake(const uint32_t *word, int n);

/* Whether the caller runs inside a handler of any kind: one run by
 * nxi_run (counted in nxi_eng_me.handlers) or a lazy threaded handler on
 * its own stack (which that count does not see: it may resume on another
 * thread). For the calls a handler may not make (nx_flush,
 * nx_gateway_use, docs/design.md section 2). */
int nxi_in_handler(void);

#endif /* NXI_FIBER_H */
