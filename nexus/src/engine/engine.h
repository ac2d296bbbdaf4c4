/* The progress engine's shared state, between its files: engine.c (waking and
 * sleeping), rthread.c (runtime threads), dispatch.c (running what arrived),
 * primary.c (the progress thread and the pool), waiter.c (threads waiting in
 * nexus) and progress.c (start and stop). */
#ifndef NXI_ENGINE_H
#define NXI_ENGINE_H

#include <pthread.h>

#include "buffers/buf.h"
#include "base/driver.h"
#include "base/mpscq.h"
#include "base/rt.h"

/* Driving progress means polling every module and running the handlers of
 * the frames that arrived; one thread at a time does it, the holder of the
 * driver lock (driver.h). Drivers are:
 *  - the progress thread ("primary", unless NX_PROGRESS=poll), which spins,
 *    then yields, then sleeps in epoll on the modules' wait fds;
 *  - a thread waiting in nx_cond_wait while the primary is not spinning
 *    (so a waiting thread delivers its own reply, with no thread hand-off);
 *  - a caller of nx_poll;
 *  - a sender whose module queue is full (nx_rsr_send helps it drain).
 * Non-threaded handlers run on the driver. Threaded handlers run on stacks
 * of their own (fiber.h), started by the driver when it is a runtime thread
 * or a thread waiting in nexus, and queued for a runtime thread otherwise
 * (a caller of nx_poll, a sender): one that parks lets its thread go on,
 * and a runtime thread resumes it from the queue. One that blocks in the
 * kernel keeps its thread; on the primary, a pooled thread takes the
 * primary role over.
 *
 * Without fcontext (or with NX_THREADED=thread) threaded handlers run on
 * runtime threads only, and only at the bottom of their stack: on the
 * primary itself, which hands the primary role to a pooled thread if the
 * handler blocks (the handler then keeps the thread). Neither an
 * application thread nor a thread already inside a handler runs one, so a
 * handler that blocks never holds up code that might be what wakes it. */

/* What the primary is doing; waiting threads drive unless it is SPIN. */
enum {
  NXI_PRIMARY_SPIN,   /* driving, busy-polling */
  NXI_PRIMARY_DEFER,  /* leaving progress to a waiting application thread */
  NXI_PRIMARY_YIELD,  /* driving, yielding the CPU between polls */
  NXI_PRIMARY_SLEEP,  /* asleep in epoll */
  NXI_PRIMARY_RUNNING /* running a handler */
};

/* The primary's spin phase busy-polls this long after work, then yields
 * between polls for the rest of NX_SPIN_US; a waiter that does not drive
 * spins this long before it yields. A yield with no other thread to run
 * returns at once; with one (the peer process on the same core, or this
 * process's other busy thread under mpirun's binding) it lets that thread
 * run instead of holding the core for the whole spin phase.
 * bench/bench_spin.c times the spin phase: 8 B round trips with
 * NX_SPIN_US=0, 50 and 1000 in one run (docs/performance.md, "What the
 * clever pieces buy"; 2026-11-26, load 2.3). Without it they were 2.05x
 * slower over tcp between two pinned processes (eight repeats at loads
 * 1.7 to 10: 1.10-1.86x in six, 0.80x and 0.94x in two), the same
 * threaded in process (1.04x) and unpinned (1.01x; unpinned processes did
 * better without it in seven repeats: 0.33-0.67x); in process
 * non-threaded the repeats scattered (0.51-5.9x). 1000 us was
 * slower everywhere but in process threaded (0.74x). The yields after
 * the first 2 us pay, the 2 us of pauses before them were not shown to:
 * in a one-off build (docs/performance.md; load 3.7) pauses only were
 * 1.05-1.30x slower (unpinned tcp 1.30x), yields at once 0.94-1.02x of
 * the default in every row. Kept as found. */
#define NXI_SPIN_PURE_NS 2000
/* After the spin phase, threads yield this long before they sleep.
 * bench/bench_spin.c's delayed echo over tcp: a reply that came while
 * yielding cost 32 us over its delay, one that came after it, asleep,
 * 1,106 us; a one-off build without the yield phase took 965 us over a
 * 200 us delay, against 24 us with it (load 3.7). The price: a waiting
 * process keeps a CPU for the wait (229 us per 200 us round trip). */
#define NXI_YIELD_US 1000

/* The poll policy (dispatch.c, docs/design.md "Polling the modules"): a
 * module that delivered something, or through which an RSR went out, in
 * the last NXI_HOT_NS is polled every round; another ("cold") only once per
 * NXI_POLL_SHARE times what its polls cost, but no sooner than
 * NXI_COLD_MIN_NS (a cold poll is timed: two clock reads) and at least
 * every NXI_COLD_MAX_NS. Idle modules whose poll is a system call then
 * take a few percent of a spinning thread's time. */
#define NXI_HOT_NS 10000000ull
#define NXI_POLL_SHARE 64u
#define NXI_COLD_MIN_NS 20000ull
#define NXI_COLD_MAX_NS 50000ull

/* Fields written by one side and read by the other sit on lines of their
 * own, so that a spinning reader does not slow the writer down. */
struct nxi_engine {
  _Alignas(NXI_CACHELINE) atomic_int sleepers;
  atomic_int word_sleepers; /* poll-mode waiters asleep in epoll */
  atomic_int wake_pending;
  _Alignas(NXI_CACHELINE) atomic_int primary_state;
  _Alignas(NXI_CACHELINE) atomic_int waiters; /* past their first turn */
  _Alignas(NXI_CACHELINE) atomic_int stopping;
  atomic_int poll_all; /* the next round polls every module */
  struct nxi_mpscq recvq;
  /* The runtime's own messages (confirmations, ledger.h), dispatched
   * before the RSRs queued ahead of them: an answer does not wait behind a
   * backlog. */
  struct nxi_mpscq ctlq;
  int epfd;
  int evfd;
  uint64_t spin_ns;
  /* Threaded handlers waiting for a runtime thread. */
  pthread_mutex_t tq_lock;
  struct nxi_qnode *tq_head, *tq_tail;
  atomic_int tq_len;
  /* The pool of runtime threads (what a new one runs: struct
   * nxi_engine_stages). */
  pthread_mutex_t pool_lock;
  uint32_t pool_word; /* futex idle threads sleep on */
  int idle;
  atomic_int spinners; /* pooled threads spinning for work before sleeping */
  atomic_int live;
  atomic_int want_primary;
};

extern struct nxi_engine nxi_eng;

/* Per-thread engine state. */
struct nxi_engine_tls {
  int runtime;  /* a runtime thread (progress or pool) */
  int primary;  /* the progress thread */
  int handlers; /* handlers running on this thread (nesting depth) */
  /* A thread of its own for one NX_HANDLER_NEW_THREAD handler (dispatch.c):
   * nx_thread_exit in that handler may end it. */
  int handler_thread;
  int waiting; /* inside the wait stage (waiter.c) */
  /* The outermost wait's word and the value it waits to change (waiter.c):
   * a lazy handler it starts may carry its polling on (fiber.c). */
  const uint32_t *wait_word;
  uint32_t wait_old;
  /* Inside a module's progress (dispatch.c): a wait must not give the
   * driver's role away, nor a handler park (waiter.c, fiber.c). */
  int polling;
};

extern NXI_TLS struct nxi_engine_tls nxi_eng_me;

/* engine.c: sleeping in epoll and waking sleepers. */
void nxi_progress_wake_sleeper(void);
/* Wakes a thread asleep in epoll, if any: a load when none sleeps (every
 * RSR queued asks). */
static inline void nxi_progress_wake(void) {
  if (atomic_load(&nxi_eng.sleepers) != 0)
    nxi_progress_wake_sleeper();
}
/* Puts a received buffer on the receive queue, behind what is there, and
 * wakes a driver (any thread): dispatch.c's queue, and an ordered RSR
 * whose turn came (order.c). Inline: once per RSR. */
static inline void nxi_requeue(struct nx_buffer *b) {
  nxi_mpscq_push(&nxi_eng.recvq, &b->qnode);
  nxi_progress_wake();
}
/* An RSR sent to a context of this process (rsr.c): on the driver's own
 * queue when the sender holds the driver lock (a handler's reply: no
 * locked operation, no wake-up), else as nxi_requeue. Only for frames that
 * need no order against others: a module's frames take nxi_requeue (a
 * fence must come behind what arrived before it). */
static inline void nxi_requeue_local(struct nx_buffer *b) {
  if (nxi_driving())
    nxi_drive_q_put(&b->qnode);
  else
    nxi_requeue(b);
}
/* Whether either receive queue or the driver's own (driver.h) holds
 * something not yet dispatched, from any thread (nxi_mpscq_empty): a queue of
 * its own is read by no counter of pushes, whose locked add every queued RSR
 * paid. */
static inline int nxi_queued(void) {
  return !nxi_mpscq_empty(&nxi_eng.recvq) || !nxi_mpscq_empty(&nxi_eng.ctlq) ||
         nxi_drive_q_any();
}
/* Sleeps in epoll until a module fd, the eventfd, or the timeout. A
 * waiter passes the word it waits on (NULL otherwise). */
void nxi_engine_sleep(int timeout_ms, const uint32_t *word, uint32_t old);
int nxi_engine_watch(int fd);
void nxi_engine_set_state(int state);

/* rthread.c: runtime threads. A thread runs fn(self), whose argument
 * nxi_rthread_arg(self) gives, and ends with return nxi_rthread_end(self). */
int nxi_rthread_spawn(void *(*fn)(void *self), void *arg);
void *nxi_rthread_arg(void *self);
void *nxi_rthread_end(void *self);
/* Joins the runtime threads that have ended. */
void nxi_rthread_reap(void);
/* The engine's stage (docs/design.md, "Stages"): what a pooled runtime
 * thread runs (progress/primary.c registers it at nx_init). */
struct nxi_engine_stages {
  void *(*pool_main)(void *self);
};
void nxi_engine_stages_set(const struct nxi_engine_stages *s);
/* Wakes an idle pooled thread, or starts one running the pool_main stage.
 * Pool lock held. */
void nxi_pool_kick_locked(void);

/* tq.c: the thread queue, which runtime threads take jobs from. */
void nxi_tq_push(struct nx_buffer *b);
struct nx_buffer *nxi_tq_pop(void);

#endif /* NXI_ENGINE_H */
