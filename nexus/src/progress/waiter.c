/* Threads that wait in nexus calls (condition variables, contended mutexes,
 * joins): the stages the thread module calls, which let a waiting thread drive
 * progress itself or hand it over before it sleeps. */
#include <sched.h>
#include <unistd.h>

#include "progress/progress.h"
#include "rsr/dispatch.h"
#include "base/driver.h"
#include "engine/engine.h"
#include "rsr/fiber.h"
#include "threads/nxi_thread.h"
#include "nxu_time.h"

/* A poll-mode waiter sleeps in slices this long: one eventfd write wakes
 * only one of several threads asleep in epoll. */
#define WAITER_SLEEP_MS 2

static int hook_wait(const uint32_t *word, uint32_t old,
                     const struct timespec *abstime) {
  if (!nxi_ready() || atomic_load(&nxi_eng.stopping))
    return NX_EAGAIN;
  /* A threaded handler on a stack of its own parks (timed waits excepted:
   * nothing would end them); its thread goes on. A thread on its own
   * stack (the common wait) is told apart inline. */
  if (abstime == NULL && nxi_fiber_cur != NULL &&
      nxi_fiber_park(word, old) == 0)
    return 0;
  if (nxi_eng_me.waiting++ == 0) {
    nxi_eng_me.wait_word = word;
    nxi_eng_me.wait_old = old;
  }
  /* When the wait (or its idle stretch) began; 0: not read yet. The clock
   * is read at the first check, 64 rounds in: a reply that comes sooner
   * (most do) costs no clock read. */
  uint64_t start = 0;
  /* Spin, yield, then sleep: what each phase buys is measured by
   * bench/bench_spin.c (engine.h, docs/performance.md). */
  uint64_t budget = nxi_eng.spin_ns + NXI_YIELD_US * 1000ull;
  int r = NX_EAGAIN;
  int spun_out = 0;  /* past the spin phase: drive even beside a handler */
  int past_pure = 0; /* spun NXI_SPIN_PURE_NS since the last work */
  /* Counted among the engine's waiters (the primary defers to them) from
   * the second round on: a wait that its first poll ends (an in-process
   * reply, most often) pays no locked add and sub for it. */
  int counted = 0;
  for (unsigned i = 1;; i++) {
    if (__atomic_load_n(word, __ATOMIC_ACQUIRE) != old) {
      r = 0;
      break;
    }
    if (i == 2) {
      atomic_fetch_add(&nxi_eng.waiters, 1);
      counted = 1;
    }
    if (!nxi_ready() ||
        atomic_load_explicit(&nxi_eng.stopping, memory_order_relaxed)) {
      r = NX_EAGAIN; /* starting or stopping: just sleep */
      break;
    }
    int ps = atomic_load_explicit(&nxi_eng.primary_state, memory_order_relaxed);
    int drives =
        nxi_driving() || nxi_rt.poll_mode ||
        (ps != NXI_PRIMARY_SPIN && (ps != NXI_PRIMARY_RUNNING || spun_out));
    int n = 0;
    if (drives) {
      unsigned gen;
      if (nxi_drive_begin(&gen)) {
        n = nxi_poll_once(gen);
        nxi_drive_end(gen);
        if (n > 0) {
          /* Work came: the wait is busy, not idle. */
          start = 0;
          spun_out = past_pure = 0;
        }
      }
    }
    int queued =
        atomic_load_explicit(&nxi_eng.tq_len, memory_order_relaxed) > 0;
    if (n > 0 && !queued)
      continue; /* poll again at once */
    /* Yield rather than spin when a threaded handler is queued for a
     * runtime thread, and after NXI_SPIN_PURE_NS of spinning whoever
     * drives. What this thread waits for may need this CPU: the primary
     * when it drives (mpirun binds each rank, waiter and primary alike, to
     * one core, and two unbound processes with two busy threads each share
     * two cores here; spinning beside it, the waiter kept it off the CPU
     * until the spin phase ended: 8 B threaded RSR over mpi 117 us, with
     * the yields 10 us; docs/performance.md), or, when this thread
     * drives, the sender in another process on an oversubscribed machine
     * (pvm_bcast among 8 tasks on 2 cores over ucx: 810-930 us while a
     * driving waiter only paused, 160-180 us with the yield; a round trip
     * between two processes with a core each, which waits less than
     * NXI_SPIN_PURE_NS or finds nobody to yield to, was not slower). */
    int yield = queued || past_pure;
    if (!yield && (i & 63) != 0) {
      nxi_cpu_relax();
      continue;
    }
    if (abstime != NULL && nxu_realtime_past(abstime)) {
      r = NX_ETIMEDOUT;
      break;
    }
    uint64_t now = nxu_now_ns();
    if (start == 0)
      start = now;
    uint64_t waited = now - start;
    past_pure = waited >= NXI_SPIN_PURE_NS;
    if (waited < nxi_eng.spin_ns) {
      if (yield)
        sched_yield();
      continue;
    }
    spun_out = 1;
    if (waited < budget) {
      sched_yield();
      continue;
    }
    if (!nxi_rt.poll_mode || nxi_driving()) {
      /* Sleep in the kernel; the primary (or a new one) drives. It may be
       * asleep in epoll, so arm the modules' fds first: what arrives then
       * wakes it. */
      if (nxi_poll_before_sleep() > 0) {
        start = 0;
        spun_out = past_pure = 0;
        continue;
      }
      break;
    }
    /* Poll mode: nobody else drives, so sleep in epoll and come back;
     * nx_cond_signal wakes us through the eventfd. */
    if (nxi_poll_before_sleep() > 0) {
      start = 0;
      continue;
    }
    nxi_engine_sleep(WAITER_SLEEP_MS, word, old);
  }
  nxi_eng_me.waiting--;
  if (counted)
    atomic_fetch_sub(&nxi_eng.waiters, 1);
  return r;
}

/* A thread is about to sleep in the kernel: if it drives progress, it lets
 * go; if it is the primary (a threaded handler blocking), another thread
 * becomes primary and this one keeps running the handler. Not from inside
 * a module's progress (an error callback run by send_done or by an answer
 * taken where it is delivered, that waits for a nexus mutex): another
 * driver would enter that module's progress while this one is still in
 * it, so this one sleeps holding the driver's role. */
static void hook_block(void) {
  if (nxi_eng_me.polling)
    return;
  nxi_drive_lose();
  if (nxi_eng_me.primary) {
    nxi_eng_me.primary = 0;
    nxi_promote();
  }
}

static void hook_unblock(void) {}

static void hook_signal(const uint32_t *word, int n) {
  nxi_fiber_wake(word, n);
  /* Only poll-mode waiters sleep in epoll for a condition variable; the
   * primary's sleep does not care about the program's own signals. */
  if (atomic_load(&nxi_eng.word_sleepers) > 0) {
    uint64_t one = 1;
    ssize_t w = write(nxi_eng.evfd, &one, sizeof(one));
    (void)w;
  }
}

/* nx_thread_exit: a lazy threaded handler on its own stack ends there
 * (fiber.c), and a new-thread handler's thread may end (dispatch.c ends
 * the handler as it unwinds). Any other handler runs on a thread that is
 * not its own (a non-threaded one on the driver or on a thread waiting in
 * nx_cond_wait, a threaded one under NX_THREADED=thread): ending that
 * thread would stop progress or the program's wait, so it goes on. */
static int hook_exit(void) {
  nxi_fiber_exit(); /* on a handler's own stack: does not return */
  if (nxi_eng_me.handlers == 0 ||
      (nxi_eng_me.handler_thread && nxi_eng_me.handlers == 1))
    return 0;
  static atomic_int said;
  if (!atomic_exchange(&said, 1))
    nxi_log(0, NULL,
            "nx_thread_exit called in a handler that runs on a thread not its "
            "own (a non-threaded handler, or a threaded one under "
            "NX_THREADED=thread): the thread goes on and the call returns; "
            "return from the handler instead (said once)");
  return 1;
}

static const struct nxi_thread_stages stages = {
    .wait = hook_wait,
    .block = hook_block,
    .unblock = hook_unblock,
    .signal = hook_signal,
    .can_park = nxi_fiber_can_park,
    .park = nxi_fiber_park,
    .exit_handler = hook_exit,
};

void nxi_waiter_stages_install(void) { nxi_thread_stages_set(&stages); }

void nxi_waiter_stages_remove(void) { nxi_thread_stages_set(NULL); }
