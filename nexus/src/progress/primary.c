/* The progress thread (the primary) and the pool of runtime threads that take
 * its role over, or run queued threaded handlers. */
#include <sched.h>
#include <time.h>

#include "progress/progress.h"
#include "rsr/dispatch.h"
#include "base/driver.h"
#include "engine/engine.h"
#include "threads/nxi_thread.h"
#include "nxu_time.h"

#define MAX_IDLE_THREADS 4
#define SLEEP_MS 100
/* After a waiter was seen, the primary keeps out of its way this long: the
 * waiter is usually between two waits of a round-trip loop. */
#define DEFER_NS 10000
/* While deferring, the primary spins this long, then yields, then sleeps
 * in slices of DEFER_SLEEP_MS: the waiter drives, and on a machine with
 * few cores a spinning primary would take a core its peers need.
 * bench/bench_spin.c's delayed echo shows what the slices cost: this
 * thread starts one 1 ms into a wait, 45 us before the waiter gives up
 * and sleeps on its futex (waiter.c), and nothing wakes it, so a reply
 * 1.05 to 2 ms into the wait waits for the slice to end (its 1.5 ms row:
 * 2,002 us over the delay, against 111 us at 5 ms; docs/performance.md).
 * In a one-off build (load 3.7) slices of 0 ms took 157 us over a 1.5 ms
 * delay against 1,037 us, but made 8 B round trips over tcp 1.44x
 * (pinned) and 1.91x (unpinned) slower: the slices pay, their start does
 * not. DEFER_SPIN_NS against 0, in that build: 0.90-1.03x in every row,
 * not shown to pay; kept as found. */
#define DEFER_SPIN_NS 5000
#define DEFER_SLEEP_MS 1

/* The primary drives, except while another thread waits in
 * nx_cond_wait and no threaded handler ran lately: then the waiter drives
 * alone (its reply needs no hand-off between cores) and the primary only
 * watches for threaded handlers, which application threads never run. */
static void primary_loop(void) {
  uint64_t last_work = nxu_now_ns();
  uint64_t last_threaded = 0;
  uint64_t last_waiter = 0;
  uint64_t defer_since = 0;
  uint64_t t = last_work;
  unsigned rounds = 0;
  while (nxi_eng_me.primary && !atomic_load(&nxi_eng.stopping)) {
    struct nx_buffer *job = nxi_tq_pop();
    if (job != NULL) {
      nxi_engine_set_state(NXI_PRIMARY_RUNNING);
      nxi_run_queued(job);
      if (!nxi_eng_me.primary)
        break; /* it blocked: another thread is primary now */
      /* Stay in front: what a threaded handler sends is usually answered
       * by another threaded handler, best run here too. */
      nxi_engine_set_state(NXI_PRIMARY_SPIN);
      t = last_work = last_threaded = nxu_now_ns();
      continue;
    }
    /* The clock every fourth round (and after every sleep): its read
     * (20-25 ns here) was an eighth of a busy primary's time, and its
     * decisions are about microseconds and more. `t` is never older than
     * the last_* times taken from it or set with it, so the differences
     * below do not wrap. */
    if ((++rounds & 3) == 0)
      t = nxu_now_ns();
    if (atomic_load_explicit(&nxi_eng.waiters, memory_order_relaxed) > 0)
      last_waiter = t;
    if (t - last_waiter < DEFER_NS && t - last_threaded > nxi_eng.spin_ns) {
      nxi_engine_set_state(NXI_PRIMARY_DEFER);
      last_work = t;
      if (defer_since == 0)
        defer_since = t;
      uint64_t deferred = t - defer_since;
      if (deferred < DEFER_SPIN_NS) {
        /* Look at the shared counters rarely: the waiter writes them. */
        for (int i = 0; i < 16; i++)
          nxi_cpu_relax();
      } else if (deferred < DEFER_SPIN_NS + NXI_YIELD_US * 1000ull) {
        sched_yield();
      } else {
        /* Nobody wakes this sleep: it ends by itself, so the waiter's path
         * carries no system call. */
        struct timespec ts = {0, DEFER_SLEEP_MS * 1000000L};
        nanosleep(&ts, NULL);
        t = nxu_now_ns();
      }
      continue;
    }
    defer_since = 0;
    unsigned gen;
    int n = 0;
    if (nxi_drive_begin(&gen)) {
      n = nxi_poll_once(gen);
      nxi_drive_end(gen);
    }
    if (n > 0)
      last_work = t;
    if (!nxi_eng_me.primary)
      break; /* a handler blocked on this thread: another is primary now */
    uint64_t idle = t - last_work;
    if (idle < nxi_eng.spin_ns) {
      nxi_engine_set_state(NXI_PRIMARY_SPIN);
      if (idle < NXI_SPIN_PURE_NS)
        nxi_cpu_relax();
      else
        sched_yield();
    } else if (idle < nxi_eng.spin_ns + NXI_YIELD_US * 1000ull) {
      nxi_engine_set_state(NXI_PRIMARY_YIELD);
      sched_yield();
    } else if (nxi_poll_before_sleep() > 0) {
      t = last_work = nxu_now_ns();
    } else {
      nxi_engine_set_state(NXI_PRIMARY_SLEEP);
      nxi_engine_sleep(SLEEP_MS, NULL, 0);
      t = nxu_now_ns();
    }
  }
}

/* Waits for work as an idle pooled thread: spins a while first (waking a
 * sleeping thread costs tens of microseconds, more than most handlers),
 * then sleeps on the pool's futex. Returns 0 to look for work again, -1 to
 * end the thread. */
static int pool_wait(void) {
  atomic_fetch_add(&nxi_eng.spinners, 1);
  uint64_t until = nxu_now_ns() + nxi_eng.spin_ns;
  int found = 0;
  for (unsigned i = 1; !found; i++) {
    found = atomic_load_explicit(&nxi_eng.tq_len, memory_order_relaxed) > 0 ||
            atomic_load_explicit(&nxi_eng.want_primary, memory_order_relaxed) ||
            atomic_load_explicit(&nxi_eng.stopping, memory_order_relaxed);
    if ((i & 63) == 0 && nxu_now_ns() >= until)
      break;
    nxi_cpu_relax();
  }
  atomic_fetch_sub(&nxi_eng.spinners, 1);
  if (found)
    return 0;
  pthread_mutex_lock(&nxi_eng.pool_lock);
  if (nxi_eng.idle >= MAX_IDLE_THREADS || atomic_load(&nxi_eng.stopping)) {
    pthread_mutex_unlock(&nxi_eng.pool_lock);
    /* A push may have skipped the wake-up because we were spinning. */
    if (atomic_load(&nxi_eng.tq_len) > 0 && !atomic_load(&nxi_eng.stopping))
      return 0;
    return -1;
  }
  nxi_eng.idle++;
  uint32_t w = __atomic_load_n(&nxi_eng.pool_word, __ATOMIC_SEQ_CST);
  pthread_mutex_unlock(&nxi_eng.pool_lock);
  if (atomic_load(&nxi_eng.want_primary) == 0 &&
      atomic_load(&nxi_eng.tq_len) == 0)
    nxi_futex_wait(&nxi_eng.pool_word, w, NULL);
  pthread_mutex_lock(&nxi_eng.pool_lock);
  nxi_eng.idle--;
  pthread_mutex_unlock(&nxi_eng.pool_lock);
  return 0;
}

/* A runtime thread: the primary when started with the engine as its
 * argument, else a pooled thread that runs queued threaded handlers and
 * becomes primary when asked. */
void *nxi_pool_main(void *self) {
  if (nxi_rthread_arg(self) == &nxi_eng)
    nxi_eng_me.primary = 1;
  while (!atomic_load(&nxi_eng.stopping)) {
    if (nxi_eng_me.primary) {
      primary_loop();
      continue;
    }
    int one = 1;
    if (atomic_compare_exchange_strong(&nxi_eng.want_primary, &one, 0)) {
      nxi_eng_me.primary = 1;
      continue;
    }
    struct nx_buffer *job = nxi_tq_pop();
    if (job != NULL) {
      nxi_run_queued(job);
      continue;
    }
    if (pool_wait() < 0)
      break;
  }
  return nxi_rthread_end(self);
}

void nxi_promote(void) {
  pthread_mutex_lock(&nxi_eng.pool_lock);
  atomic_store(&nxi_eng.want_primary, 1);
  nxi_pool_kick_locked();
  pthread_mutex_unlock(&nxi_eng.pool_lock);
}
