/* The progress engine's lifecycle: setting it up at nx_init, starting the
 * progress thread, and stopping every runtime thread at nx_finalize. */
#include "rsr/dispatch.h"
#include "progress/progress.h"

#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "buffers/frame.h"
#include "contexts/context.h"
#include "base/driver.h"
#include "engine/engine.h"
#include "rsr/fiber.h"
#include "modules/module.h"
#include "threads/nxi_thread.h"
#include "nxu_time.h"

static const struct nxi_engine_stages engine_stages = {
    .pool_main = nxi_pool_main,
};

/* What the driver lets go of with its queue not empty (driver.h). */
static void spill(struct nxi_qnode *first, struct nxi_qnode *last) {
  nxi_mpscq_push_chain(&nxi_eng.recvq, first, last);
  nxi_progress_wake();
}
static const struct nxi_drive_stages drive_stages = {.spill = spill};

int nxi_progress_init(void) {
  memset(&nxi_eng, 0, sizeof(nxi_eng));
  nxi_mpscq_init(&nxi_eng.recvq);
  nxi_mpscq_init(&nxi_eng.ctlq);
  nxi_eng.spin_ns = (uint64_t)nxi_rt.spin_us * 1000u;
  pthread_mutex_init(&nxi_eng.tq_lock, NULL);
  pthread_mutex_init(&nxi_eng.pool_lock, NULL);
  nxi_eng.epfd = epoll_create1(EPOLL_CLOEXEC);
  nxi_eng.evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (nxi_eng.epfd < 0 || nxi_eng.evfd < 0 ||
      nxi_engine_watch(nxi_eng.evfd) < 0) {
    if (nxi_eng.epfd >= 0)
      close(nxi_eng.epfd);
    if (nxi_eng.evfd >= 0)
      close(nxi_eng.evfd);
    return NX_ENOMEM;
  }
  atomic_store(&nxi_eng.primary_state, NXI_PRIMARY_SLEEP);
  nxi_engine_stages_set(&engine_stages);
  nxi_drive_stages_set(&drive_stages);
  nxi_waiter_stages_install();
  return 0;
}

/* What an idle poll of `m` costs: the least of a few, as the policy's
 * starting point (it keeps averaging cold polls) and for nxinfo. What a
 * poll finds here is delivered as any other. */
static uint64_t poll_cost(struct nxi_module *m) {
  if (m->ops->progress == NULL)
    return 0; /* never polled */
  unsigned gen = nxi_driver_lock();
  uint64_t best = UINT64_MAX;
  for (int i = 0; i < 16; i++) {
    uint64_t t0 = nxu_now_ns();
    m->ops->progress(m->state, NULL);
    uint64_t t = nxu_now_ns() - t0;
    if (t < best)
      best = t;
  }
  nxi_driver_unlock(gen);
  return best;
}

int nxi_progress_watch_module(struct nxi_module *m, uint64_t *poll_ns) {
  *poll_ns = poll_cost(m);
  if (m->wait_fd >= 0 && nxi_engine_watch(m->wait_fd) < 0) {
    nxi_log(0, m->name, "cannot watch its wait fd");
    return NX_EIO;
  }
  return 0;
}

int nxi_progress_watch_modules(void) {
  int n = nxi_module_count_loaded();
  for (int i = 0; i < n; i++) {
    struct nxi_module *m = nxi_module_loaded(i);
    uint64_t ns;
    int r = nxi_progress_watch_module(m, &ns);
    if (r < 0)
      return r;
    m->poll_ns = m->poll_ns_init = ns;
  }
  return 0;
}

void nxi_progress_start(void) {
  if (!nxi_rt.poll_mode)
    nxi_rthread_spawn(nxi_pool_main, &nxi_eng);
}

static int undelivered(void) {
  return nxi_queued() || atomic_load(&nxi_eng.tq_len) > 0;
}

/* Whether nothing is left to run, as seen holding the driver lock: a
 * thread that drives may have taken an RSR off the queues and be running
 * its handler, which may send more (to the driver's queue, spilled as it
 * lets go); the queues alone would look empty meanwhile. 1: nothing left;
 * 0: something; -1: the lock was not to be had before `deadline`. */
static int drained(uint64_t deadline) {
  unsigned gen;
  while (!nxi_drive_begin(&gen)) {
    if (nxu_now_ns() >= deadline)
      return -1;
    sched_yield();
  }
  int none = !undelivered();
  nxi_drive_end(gen);
  return none;
}

int nxi_progress_drain(unsigned ms) {
  uint64_t deadline = nxu_now_ns() + (uint64_t)ms * 1000000u;
  /* The progress thread (or a pooled one, for threaded handlers) may be the
   * one running them: helping is enough, and harmless when it is busy. */
  for (;;) {
    while (undelivered() && nxu_now_ns() < deadline)
      nxi_progress_help();
    int d = drained(deadline);
    if (d == 1)
      return 0;
    if (d < 0 || nxu_now_ns() >= deadline)
      break;
  }
  /* Counted for the report by a walk of the queues, which only the driver
   * may make; a driver that keeps the lock (a handler that never returns)
   * leaves "at least one". */
  int left = atomic_load(&nxi_eng.tq_len);
  unsigned gen;
  if (nxi_drive_begin(&gen)) {
    left += nxi_mpscq_count(&nxi_eng.recvq) + nxi_mpscq_count(&nxi_eng.ctlq);
    for (struct nxi_qnode *q = atomic_load(&nxi_drive_q.head); q != NULL;
         q = atomic_load(&q->next))
      left++;
    nxi_drive_end(gen);
  } else if (nxi_queued()) {
    left++;
  }
  return left;
}

/* Stops the runtime threads. Returns the number still running handlers
 * after a grace period (they are blocked in program code). */
static int stop_threads(void) {
  atomic_store(&nxi_eng.stopping, 1);
  uint64_t deadline = nxu_now_ns() + 2000000000ull;
  long slice_ns = 20000;
  while (atomic_load(&nxi_eng.live) > 0 && nxu_now_ns() < deadline) {
    uint64_t one = 1;
    ssize_t w = write(nxi_eng.evfd, &one, sizeof(one));
    (void)w;
    __atomic_fetch_add(&nxi_eng.pool_word, 1, __ATOMIC_SEQ_CST);
    nxi_futex_wake(&nxi_eng.pool_word, 1 << 30);
    /* Threads that only slept end within microseconds: look again soon,
     * then less often (up to 1 ms) for one that runs a handler. */
    struct timespec ts = {0, slice_ns};
    nanosleep(&ts, NULL);
    slice_ns = slice_ns < 500000 ? slice_ns * 2 : 1000000;
  }
  return atomic_load(&nxi_eng.live);
}

int nxi_progress_finalize(void) {
  int left = stop_threads();
  nxi_rthread_reap(); /* those that ended; any left run program code */
  nxi_waiter_stages_remove();
  int parked = nxi_fiber_fini();
  if (left > 0 || parked > 0) {
    /* They run program code and may touch their contexts and buffers at
     * any time (a parked handler when the program wakes it): leave
     * everything they can reach in place. */
    nxi_log(0, NULL,
            "%d handler thread(s) and %d parked threaded handler(s) still "
            "blocked at nx_finalize; their contexts are left allocated",
            left, parked);
    return left + parked;
  }
  /* Drop what was never dispatched. */
  unsigned gen;
  if (nxi_drive_begin(&gen)) {
    struct nxi_qnode *q;
    int dropped = 0;
    while ((q = nxi_mpscq_pop(&nxi_eng.recvq)) != NULL ||
           (q = nxi_mpscq_pop(&nxi_eng.ctlq)) != NULL ||
           (q = nxi_drive_q_take()) != NULL) {
      struct nx_buffer *b = NXI_CONTAINER_OF(q, struct nx_buffer, qnode);
      dropped += !(b->hflags & NXI_FRAME_F_CTL);
      nxi_buffer_handler_done(b);
    }
    nxi_drive_end(gen);
    /* Sent after the drain by a threaded handler still running then. */
    if (dropped > 0)
      nxi_log(0, NULL,
              "nx_finalize: %d RSR(s) sent while the runtime stopped dropped",
              dropped);
  }
  nxi_drive_stages_set(NULL);
  struct nx_buffer *b;
  while ((b = nxi_tq_pop()) != NULL) {
    nxi_context_put(b->ctx);
    nxi_buffer_handler_done(b);
  }
  close(nxi_eng.epfd);
  close(nxi_eng.evfd);
  return 0;
}
