/* Starting and stopping the progress engine (progress.c): what nx_init and
 * nx_finalize call. */
#ifndef NXI_PROGRESS_H
#define NXI_PROGRESS_H

#include <stdint.h>

/* Sets up the engine (epoll, eventfd, stages); no thread yet. */
int nxi_progress_init(void);
/* Watches the loaded modules' wait fds in the engine's epoll. */
int nxi_progress_watch_modules(void);
/* The same for one module (one that joined after nx_init, before it is
 * published), and what an idle poll of it costs, in *poll_ns. */
struct nxi_module;
int nxi_progress_watch_module(struct nxi_module *m, uint64_t *poll_ns);
/* Starts the progress thread (unless NX_PROGRESS=poll). */
void nxi_progress_start(void);
/* Runs the RSRs already delivered to this process (queued, not yet run) and
 * those they send in turn, for at most `ms` milliseconds: nx_finalize's
 * promise that what was sent to a context of this process is handled.
 * Returns the number still queued at the deadline (dropped later). */
int nxi_progress_drain(unsigned ms);
/* Stops the runtime threads and drops undelivered RSRs. Returns the number
 * of handler threads still blocked in program code (nothing is freed then). */
int nxi_progress_finalize(void);

/* primary.c: the progress thread and the pool's threads. */
void *nxi_pool_main(void *self);
/* Makes another runtime thread primary (this one blocks in a handler). */
void nxi_promote(void);

/* waiter.c: the stages the thread module calls
 * (threads/nxi_thread.h), registered at nxi_progress_init. */
void nxi_waiter_stages_install(void);
void nxi_waiter_stages_remove(void);

#endif /* NXI_PROGRESS_H */
