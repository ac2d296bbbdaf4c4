/* Running what arrived (dispatch.c): polling the modules, looking up each
 * RSR's context and handler, running it here or queueing it for a runtime
 * thread. */
#ifndef NXI_DISPATCH_H
#define NXI_DISPATCH_H

#include "buffers/buf.h"

void nxi_run(struct nx_buffer *b);
/* Calls b's handler between its BEGIN and END in the trace (traced.c,
 * base/trace.h): where a handler is called, under nxi_tracing(). A
 * threaded one that blocked may end on another thread (NXT_F_MOVED). */
struct nx_context;
void nxi_run_traced(struct nx_buffer *b, struct nx_context *ctx);
/* Runs a job from the thread queue on a runtime thread: resumes a parked
 * handler, or starts a threaded one on a stack of its own. */
void nxi_run_queued(struct nx_buffer *b);
/* One round: poll every module, then run up to a batch of arrived RSRs.
 * Stops early once the driver lock was given away: by a handler, a loss
 * report or a fallback's callback that blocked. */
int nxi_poll_once(unsigned gen);
/* One round that polls every module, cold ones too, if the driver lock is
 * free: what a thread does before it sleeps in epoll, so that it sleeps
 * only when no module has work and every wait fd is armed. Returns the
 * events handled. */
int nxi_poll_before_sleep(void);
/* Hands a complete received buffer to the dispatcher (any thread). */
void nxi_deliver(struct nx_buffer *b);
/* Drives progress once if no other thread does, else yields the CPU. */
void nxi_progress_help(void);
/* Reports an RSR lost at this end (nxi_drop: the error callback) from the
 * driver's next poll round: for a caller that must not run program code
 * (a module's receive path, its lock held). Any thread. */
void nxi_drop_later(int err, uint64_t context, uint32_t handler);

#endif /* NXI_DISPATCH_H */
