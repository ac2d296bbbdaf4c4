/* The progress engine: who drives the protocol modules and runs handlers, when threads spin, yield or sleep, and the runtime thread pool. */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "nxi_thread.h"

/* Driving progress means polling every module and running the handlers of
 * the frames that arrived; one thread at a time does it, the holder of the
 * driver lock. Drivers are:
 *  - the progress thread ("primary", unless NX_PROGRESS=poll), which spins,
 *    then yields, then sleeps in epoll on the modules' wait fds;
 *  - a thread waiting in nx_cond_wait while the primary is not spinning
 *    (so a waiting thread delivers its own reply, with no thread hand-off);
 *  - a caller of nx_poll;
 *  - a sender whose module queue is full (nx_rsr_send helps it drain).
 * Non-threaded handlers run on the driver. Threaded handlers run on runtime
 * threads only, and only at the bottom of their stack: on the primary
 * itself, which hands the primary role to a pooled thread if the handler
 * blocks (the handler then keeps the thread). Neither an application thread
 * nor a thread already inside a handler runs one, so a handler that blocks
 * never holds up code that might be what wakes it. */

/* What the primary is doing; waiting threads drive unless it is SPIN. */
enum {
  PRIMARY_SPIN,    /* driving, busy-polling */
  PRIMARY_DEFER,   /* leaving progress to a waiting application thread */
  PRIMARY_YIELD,   /* driving, yielding the CPU between polls */
  PRIMARY_SLEEP,   /* asleep in epoll */
  PRIMARY_RUNNING  /* running a handler */
};

#define BATCH 64
#define MAX_IDLE_THREADS 4
#define SLEEP_MS 100
/* A poll-mode waiter sleeps in slices this long: one eventfd write wakes
 * only one of several threads asleep in epoll. */
#define WAITER_SLEEP_MS 2
#define YIELD_US 1000
/* After a waiter was seen, the primary keeps out of its way this long: the
 * waiter is usually between two waits of a round-trip loop. */
#define DEFER_NS 10000
/* While deferring, the primary spins this long, then yields, then sleeps
 * in slices of DEFER_SLEEP_MS: the waiter drives, and on a machine with
 * few cores a spinning primary would take a core its peers need. */
#define DEFER_SPIN_NS 5000
/* The primary's spin phase busy-polls this long after work, then yields
 * between polls for the rest of NX_SPIN_US; a waiter that does not drive
 * spins this long before it yields. A yield with no other thread to run
 * returns at once; with one (the peer process on the same core, or this
 * process's other busy thread under mpirun's binding) it lets that thread
 * run instead of holding the core for the whole spin phase. */
#define SPIN_PURE_NS 2000
#define DEFER_SLEEP_MS 1

/* Fields written by one side and read by the other sit on lines of their
 * own, so that a spinning reader does not slow the writer down. */
struct engine {
  _Alignas(NXI_CACHELINE) atomic_int driver;
  _Alignas(NXI_CACHELINE) atomic_uint pushed; /* RSRs queued (producers) */
  _Alignas(NXI_CACHELINE) atomic_uint popped; /* RSRs taken (the driver) */
  _Alignas(NXI_CACHELINE) atomic_int sleepers;
  atomic_int word_sleepers; /* poll-mode waiters asleep in epoll */
  atomic_int wake_pending;
  _Alignas(NXI_CACHELINE) atomic_int primary_state;
  _Alignas(NXI_CACHELINE) atomic_int waiters;
  _Alignas(NXI_CACHELINE) atomic_int stopping;
  struct nxi_mpscq recvq;
  int epfd;
  int evfd;
  uint64_t spin_ns;
  /* Threaded handlers waiting for a runtime thread. */
  pthread_mutex_t tq_lock;
  struct nxi_qnode *tq_head, *tq_tail;
  atomic_int tq_len;
  /* The pool of runtime threads. */
  pthread_mutex_t pool_lock;
  uint32_t pool_word; /* futex idle threads sleep on */
  int idle;
  atomic_int spinners; /* pooled threads spinning for work before sleeping */
  atomic_int live;
  atomic_int want_primary;
};

static struct engine eng;

/* Per-thread driver state: `driving` counts nested holds of the driver lock;
 * `gen` changes when a blocking handler gives the lock away, which tells
 * every frame up the stack that it no longer holds it. */
static NXI_TLS struct {
  int runtime;   /* a runtime thread (progress or pool) */
  int primary;   /* the progress thread */
  int driving;   /* nested holds of the driver lock */
  unsigned gen;  /* bumped when a blocking handler gives the lock away */
  int handlers;  /* handlers running on this thread (nesting depth) */
} me;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int past(const struct timespec *abstime) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return ts.tv_sec > abstime->tv_sec ||
         (ts.tv_sec == abstime->tv_sec && ts.tv_nsec >= abstime->tv_nsec);
}

/* The MPSC queue. */

void nxi_mpscq_init(struct nxi_mpscq *q) {
  atomic_init(&q->stub.next, NULL);
  atomic_init(&q->head, &q->stub);
  q->tail = &q->stub;
}

void nxi_mpscq_push(struct nxi_mpscq *q, struct nxi_qnode *n) {
  atomic_store_explicit(&n->next, NULL, memory_order_relaxed);
  struct nxi_qnode *prev =
      atomic_exchange_explicit(&q->head, n, memory_order_acq_rel);
  atomic_store_explicit(&prev->next, n, memory_order_release);
}

/* Returns NULL when empty, or while a producer is between its two steps
 * (its item is counted in `pushed` only after the link is made). */
struct nxi_qnode *nxi_mpscq_pop(struct nxi_mpscq *q) {
  struct nxi_qnode *tail = q->tail;
  struct nxi_qnode *next = atomic_load_explicit(&tail->next, memory_order_acquire);
  if (tail == &q->stub) {
    if (next == NULL)
      return NULL;
    q->tail = next;
    tail = next;
    next = atomic_load_explicit(&next->next, memory_order_acquire);
  }
  if (next != NULL) {
    q->tail = next;
    return tail;
  }
  if (tail != atomic_load_explicit(&q->head, memory_order_acquire))
    return NULL;
  nxi_mpscq_push(q, &q->stub);
  next = atomic_load_explicit(&tail->next, memory_order_acquire);
  if (next != NULL) {
    q->tail = next;
    return tail;
  }
  return NULL;
}

/* The driver lock. */

static int drive_begin(unsigned *gen) {
  if (me.driving > 0) {
    me.driving++;
    *gen = me.gen;
    return 1;
  }
  int expected = 0;
  if (atomic_load_explicit(&eng.driver, memory_order_relaxed) != 0 ||
      !atomic_compare_exchange_strong_explicit(&eng.driver, &expected, 1,
                                               memory_order_acquire,
                                               memory_order_relaxed))
    return 0;
  me.driving = 1;
  *gen = me.gen;
  return 1;
}

static void drive_end(unsigned gen) {
  if (gen != me.gen || me.driving == 0)
    return; /* given away meanwhile */
  if (--me.driving == 0)
    atomic_store_explicit(&eng.driver, 0, memory_order_release);
}

/* Gives the lock away from inside a handler that is about to block. */
static void drive_lose(void) {
  if (me.driving == 0)
    return;
  me.driving = 0;
  me.gen++;
  atomic_store_explicit(&eng.driver, 0, memory_order_release);
}

unsigned nxi_driver_lock(void) {
  unsigned gen;
  for (unsigned i = 0; !drive_begin(&gen); i++) {
    if (i < 1000)
      nxi_cpu_relax();
    else
      sched_yield();
  }
  return gen;
}

void nxi_driver_unlock(unsigned gen) { drive_end(gen); }

/* Waking sleepers. */

void nxi_progress_wake(void) {
  if (atomic_load(&eng.sleepers) == 0)
    return;
  int expected = 0;
  if (atomic_compare_exchange_strong(&eng.wake_pending, &expected, 1)) {
    uint64_t one = 1;
    ssize_t w = write(eng.evfd, &one, sizeof(one));
    (void)w; /* EAGAIN: the counter is already non-zero */
  }
}

/* Sleeps in epoll until a module fd, the eventfd, or the timeout. A waiter
 * passes the word it waits on: announced in `word_sleepers` before the last
 * look at the word, so nx_cond_signal (which bumps the word first) either
 * is seen here or sees us and writes the eventfd. */
static void sleep_epoll(int timeout_ms, const uint32_t *word, uint32_t old) {
  atomic_fetch_add(&eng.sleepers, 1);
  if (word != NULL)
    atomic_fetch_add(&eng.word_sleepers, 1);
  if (atomic_load(&eng.pushed) == atomic_load(&eng.popped) &&
      atomic_load(&eng.tq_len) == 0 && !atomic_load(&eng.stopping) &&
      (word == NULL || __atomic_load_n(word, __ATOMIC_SEQ_CST) == old)) {
    struct epoll_event ev[8];
    int n = epoll_wait(eng.epfd, ev, 8, timeout_ms);
    for (int i = 0; i < n; i++) {
      if (ev[i].data.fd == eng.evfd) {
        uint64_t v;
        ssize_t r = read(eng.evfd, &v, sizeof(v));
        (void)r;
        atomic_store(&eng.wake_pending, 0);
      }
    }
  }
  if (word != NULL)
    atomic_fetch_sub(&eng.word_sleepers, 1);
  atomic_fetch_sub(&eng.sleepers, 1);
}

int nxi_progress_add_fd(int fd) {
  struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
  return epoll_ctl(eng.epfd, EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
}

static void set_state(int state) {
  if (atomic_load_explicit(&eng.primary_state, memory_order_relaxed) != state)
    atomic_store_explicit(&eng.primary_state, state, memory_order_relaxed);
}

/* Running handlers. */

static void run(struct nx_buffer *b) {
  struct nx_context *ctx = b->ctx;
  nx_context_t *old = nxi_context_swap(ctx);
  me.handlers++;
  b->fn(ctx, (void *)(uintptr_t)b->address, b);
  me.handlers--;
  nxi_context_swap(old);
  nxi_buffer_handler_done(b);
  nxi_context_put(ctx);
}

static void *thread_main(void *arg);

/* Runtime threads are joinable. One that ends puts its record on `ended`
 * as its last act, and the next spawn or nxi_progress_finalize joins it:
 * no runtime thread outlives nx_finalize half torn down (LeakSanitizer's
 * scan at exit crashes on a detached thread that is still exiting), and
 * no thread's resources wait for a join that never comes. Kept apart from
 * `eng`, which nxi_progress_init clears. */
struct rt_thread {
  pthread_t tid;
  void *arg;
  struct rt_thread *next;
};

static struct {
  pthread_mutex_t lock;
  struct rt_thread *ended;
} reaper = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Joins the runtime threads that have ended. */
static void reap(void) {
  pthread_mutex_lock(&reaper.lock);
  struct rt_thread *t = reaper.ended;
  reaper.ended = NULL;
  pthread_mutex_unlock(&reaper.lock);
  while (t != NULL) {
    struct rt_thread *next = t->next;
    pthread_join(t->tid, NULL);
    free(t);
    t = next;
  }
}

/* The last act of a runtime thread: from here on it touches nothing. */
static void *thread_end(struct rt_thread *self) {
  pthread_mutex_lock(&reaper.lock);
  self->next = reaper.ended;
  reaper.ended = self;
  pthread_mutex_unlock(&reaper.lock);
  atomic_fetch_sub(&eng.live, 1);
  return NULL;
}

/* Starts a runtime thread; `primary` makes it the progress thread. */
static int spawn(int primary, struct nx_buffer *job) {
  reap();
  struct rt_thread *t = malloc(sizeof(*t));
  if (t == NULL) {
    nxi_log(0, NULL, "cannot start a runtime thread: out of memory");
    return NX_ENOMEM;
  }
  t->arg = job != NULL ? (void *)job : primary ? (void *)&eng : NULL;
  atomic_fetch_add(&eng.live, 1);
  int r = pthread_create(&t->tid, NULL, thread_main, t);
  if (r != 0) {
    atomic_fetch_sub(&eng.live, 1);
    free(t);
    nxi_log(0, NULL, "cannot start a runtime thread: %s", strerror(r));
    return NX_EAGAIN;
  }
  atomic_fetch_add_explicit(&nxi_rt.threads_created, 1, memory_order_relaxed);
  return 0;
}

/* Wakes an idle pooled thread, or starts one. Pool lock held. */
static void pool_kick_locked(void) {
  if (eng.idle > 0) {
    __atomic_fetch_add(&eng.pool_word, 1, __ATOMIC_SEQ_CST);
    nxi_futex_wake(&eng.pool_word, 1);
  } else {
    spawn(0, NULL);
  }
}

static void tq_push(struct nx_buffer *b) {
  pthread_mutex_lock(&eng.tq_lock);
  atomic_store_explicit(&b->qnode.next, NULL, memory_order_relaxed);
  if (eng.tq_tail != NULL)
    atomic_store_explicit(&eng.tq_tail->next, &b->qnode, memory_order_relaxed);
  else
    eng.tq_head = &b->qnode;
  eng.tq_tail = &b->qnode;
  atomic_fetch_add(&eng.tq_len, 1);
  pthread_mutex_unlock(&eng.tq_lock);
  if (nxi_rt.poll_mode) {
    /* A spinning pooled thread will see tq_len; it checks tq_len again
     * after it stops spinning, so one of us always sees the other. */
    if (atomic_load(&eng.spinners) > 0)
      return;
    pthread_mutex_lock(&eng.pool_lock);
    pool_kick_locked();
    pthread_mutex_unlock(&eng.pool_lock);
  } else {
    nxi_progress_wake(); /* the primary runs it */
  }
}

static struct nx_buffer *tq_pop(void) {
  if (atomic_load_explicit(&eng.tq_len, memory_order_relaxed) == 0)
    return NULL;
  pthread_mutex_lock(&eng.tq_lock);
  struct nxi_qnode *n = eng.tq_head;
  if (n != NULL) {
    eng.tq_head = atomic_load_explicit(&n->next, memory_order_relaxed);
    if (eng.tq_head == NULL)
      eng.tq_tail = NULL;
    atomic_fetch_sub(&eng.tq_len, 1);
  }
  pthread_mutex_unlock(&eng.tq_lock);
  return n != NULL ? NXI_CONTAINER_OF(n, struct nx_buffer, qnode) : NULL;
}

static void dispatch(struct nx_buffer *b) {
  struct nx_context *ctx = nxi_context_get(b->context);
  if (ctx == NULL) {
    nxi_drop(NX_ENOCONTEXT, b->context, b->handler);
    nxi_buffer_handler_done(b);
    return;
  }
  const struct nxi_handler *h = nxi_handler_find(ctx, b->handler);
  if (h == NULL) {
    nxi_drop(NX_ENOHANDLER, b->context, b->handler);
    nxi_buffer_handler_done(b);
    nxi_context_put(ctx);
    return;
  }
  b->ctx = ctx;
  b->fn = h->fn;
  /* Under the driver lock: a plain store is enough. */
  atomic_store_explicit(
      &nxi_rt.rsr_handled,
      atomic_load_explicit(&nxi_rt.rsr_handled, memory_order_relaxed) + 1,
      memory_order_relaxed);
  switch (h->kind) {
  case NX_HANDLER_THREADED:
    /* Inline only on a runtime thread that runs no other handler: a
     * threaded handler that blocks must never sit on top of code (a waiting
     * application thread, or another handler) that might be what wakes it. */
    if (!me.runtime || me.handlers > 0) {
      tq_push(b);
      return;
    }
    break;
  case NX_HANDLER_NEW_THREAD:
    if (spawn(0, b) != 0)
      tq_push(b); /* no new thread to be had: a pooled one runs it */
    return;
  default:
    break;
  }
  if (me.primary)
    set_state(PRIMARY_RUNNING);
  run(b);
}

/* One round: poll every module, then run up to BATCH arrived RSRs. Stops
 * early if a handler blocked and gave the driver lock away. */
static int poll_once(unsigned gen) {
  int n = 0;
  int nmods = nxi_module_count_loaded();
  for (int i = 0; i < nmods; i++) {
    struct nxi_module *m = nxi_module_loaded(i);
    int r = m->ops->progress(m->state);
    if (r > 0)
      n += r;
  }
  for (int i = 0; i < BATCH && me.gen == gen; i++) {
    struct nxi_qnode *q = nxi_mpscq_pop(&eng.recvq);
    if (q == NULL)
      break;
    /* Only the driver writes `popped`: a plain store, no locked op. */
    atomic_store_explicit(
        &eng.popped,
        atomic_load_explicit(&eng.popped, memory_order_relaxed) + 1,
        memory_order_release);
    dispatch(NXI_CONTAINER_OF(q, struct nx_buffer, qnode));
    n++;
  }
  return n;
}

void nxi_deliver(struct nx_buffer *b) {
  nxi_mpscq_push(&eng.recvq, &b->qnode);
  atomic_fetch_add(&eng.pushed, 1);
  nxi_progress_wake();
}

void nxi_progress_help(void) {
  unsigned gen;
  if (drive_begin(&gen)) {
    int n = poll_once(gen);
    drive_end(gen);
    if (n > 0)
      return;
  }
  sched_yield();
}

int nx_poll(void) {
  if (!nxi_ready())
    return NX_ENOTINIT;
  unsigned gen;
  if (!drive_begin(&gen))
    return 0;
  int n = poll_once(gen);
  drive_end(gen);
  return n;
}

/* The runtime threads. */

/* The primary drives, except while another thread waits in
 * nx_cond_wait and no threaded handler ran lately: then the waiter drives
 * alone (its reply needs no hand-off between cores) and the primary only
 * watches for threaded handlers, which application threads never run. */
static void primary_loop(void) {
  uint64_t last_work = now_ns();
  uint64_t last_threaded = 0;
  uint64_t last_waiter = 0;
  uint64_t defer_since = 0;
  while (me.primary && !atomic_load(&eng.stopping)) {
    struct nx_buffer *job = tq_pop();
    if (job != NULL) {
      set_state(PRIMARY_RUNNING);
      run(job);
      if (!me.primary)
        break; /* it blocked: another thread is primary now */
      /* Stay in front: what a threaded handler sends is usually answered
       * by another threaded handler, best run here too. */
      set_state(PRIMARY_SPIN);
      last_work = last_threaded = now_ns();
      continue;
    }
    uint64_t t = now_ns();
    if (atomic_load_explicit(&eng.waiters, memory_order_relaxed) > 0)
      last_waiter = t;
    if (t - last_waiter < DEFER_NS && t - last_threaded > eng.spin_ns) {
      set_state(PRIMARY_DEFER);
      last_work = t;
      if (defer_since == 0)
        defer_since = t;
      uint64_t deferred = t - defer_since;
      if (deferred < DEFER_SPIN_NS) {
        /* Look at the shared counters rarely: the waiter writes them. */
        for (int i = 0; i < 16; i++)
          nxi_cpu_relax();
      } else if (deferred < DEFER_SPIN_NS + YIELD_US * 1000ull) {
        sched_yield();
      } else {
        /* Nobody wakes this sleep: it ends by itself, so the waiter's path
         * carries no system call. */
        struct timespec ts = {0, DEFER_SLEEP_MS * 1000000L};
        nanosleep(&ts, NULL);
      }
      continue;
    }
    defer_since = 0;
    unsigned gen;
    int n = 0;
    if (drive_begin(&gen)) {
      n = poll_once(gen);
      drive_end(gen);
    }
    if (n > 0)
      last_work = t;
    if (!me.primary)
      break; /* a handler blocked on this thread: another is primary now */
    uint64_t idle = t - last_work;
    if (idle < eng.spin_ns) {
      set_state(PRIMARY_SPIN);
      if (idle < SPIN_PURE_NS)
        nxi_cpu_relax();
      else
        sched_yield();
    } else if (idle < eng.spin_ns + YIELD_US * 1000ull) {
      set_state(PRIMARY_YIELD);
      sched_yield();
    } else {
      set_state(PRIMARY_SLEEP);
      sleep_epoll(SLEEP_MS, NULL, 0);
    }
  }
}

static void *thread_main(void *self) {
  void *arg = ((struct rt_thread *)self)->arg;
  me.runtime = 1;
  if (arg == &eng) {
    me.primary = 1;
  } else if (arg != NULL) {
    run(arg); /* a NX_HANDLER_NEW_THREAD handler */
    return thread_end(self);
  }
  while (!atomic_load(&eng.stopping)) {
    if (me.primary) {
      primary_loop();
      continue;
    }
    int one = 1;
    if (atomic_compare_exchange_strong(&eng.want_primary, &one, 0)) {
      me.primary = 1;
      continue;
    }
    struct nx_buffer *job = tq_pop();
    if (job != NULL) {
      run(job);
      continue;
    }
    /* Spin a while before sleeping: waking a sleeping thread costs tens of
     * microseconds, more than most handlers. */
    atomic_fetch_add(&eng.spinners, 1);
    uint64_t until = now_ns() + eng.spin_ns;
    int found = 0;
    for (unsigned i = 1; !found; i++) {
      found = atomic_load_explicit(&eng.tq_len, memory_order_relaxed) > 0 ||
              atomic_load_explicit(&eng.want_primary, memory_order_relaxed) ||
              atomic_load_explicit(&eng.stopping, memory_order_relaxed);
      if ((i & 63) == 0 && now_ns() >= until)
        break;
      nxi_cpu_relax();
    }
    atomic_fetch_sub(&eng.spinners, 1);
    if (found)
      continue;
    pthread_mutex_lock(&eng.pool_lock);
    if (eng.idle >= MAX_IDLE_THREADS || atomic_load(&eng.stopping)) {
      pthread_mutex_unlock(&eng.pool_lock);
      /* A push may have skipped the wake-up because we were spinning. */
      if (atomic_load(&eng.tq_len) > 0 && !atomic_load(&eng.stopping))
        continue;
      break;
    }
    eng.idle++;
    uint32_t w = __atomic_load_n(&eng.pool_word, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&eng.pool_lock);
    if (atomic_load(&eng.want_primary) == 0 && atomic_load(&eng.tq_len) == 0)
      nxi_futex_wait(&eng.pool_word, w, NULL);
    pthread_mutex_lock(&eng.pool_lock);
    eng.idle--;
    pthread_mutex_unlock(&eng.pool_lock);
  }
  return thread_end(self);
}

/* Hooks called by the thread module (threads/nxi_thread.h). */

static int hook_wait(const uint32_t *word, uint32_t old,
                     const struct timespec *abstime) {
  if (!nxi_ready() || atomic_load(&eng.stopping))
    return NX_EAGAIN;
  atomic_fetch_add(&eng.waiters, 1);
  uint64_t start = now_ns();
  uint64_t budget = eng.spin_ns + YIELD_US * 1000ull;
  int r = NX_EAGAIN;
  int spun_out = 0; /* past the spin phase: drive even beside a handler */
  int past_pure = 0; /* spun SPIN_PURE_NS since the last work */
  for (unsigned i = 1;; i++) {
    if (__atomic_load_n(word, __ATOMIC_ACQUIRE) != old) {
      r = 0;
      break;
    }
    if (!nxi_ready() || atomic_load_explicit(&eng.stopping,
                                             memory_order_relaxed)) {
      r = NX_EAGAIN; /* starting or stopping: just sleep */
      break;
    }
    int ps = atomic_load_explicit(&eng.primary_state, memory_order_relaxed);
    int drives = me.driving > 0 || nxi_rt.poll_mode ||
                 (ps != PRIMARY_SPIN && (ps != PRIMARY_RUNNING || spun_out));
    int n = 0;
    if (drives) {
      unsigned gen;
      if (drive_begin(&gen)) {
        n = poll_once(gen);
        drive_end(gen);
        if (n > 0) {
          /* Work came: the wait is busy, not idle. */
          start = now_ns();
          spun_out = past_pure = 0;
        }
      }
    }
    int queued = atomic_load_explicit(&eng.tq_len, memory_order_relaxed) > 0;
    if (n > 0 && !queued)
      continue; /* poll again at once */
    /* Yield rather than spin when what this thread waits for comes from
     * a runtime thread: a threaded handler is queued for one, or the
     * primary drives (after SPIN_PURE_NS of spinning). That thread may
     * need this CPU: mpirun binds each rank, waiter and primary alike, to
     * one core, and two unbound processes with two busy threads each
     * share two cores here. Spinning beside it, the waiter kept it off the
     * CPU until the spin phase ended (8 B threaded RSR over mpi: 117 us;
     * with the yields: 10 us; docs/performance.md). */
    int yield = queued || (!drives && past_pure);
    if (!yield && (i & 63) != 0) {
      nxi_cpu_relax();
      continue;
    }
    if (abstime != NULL && past(abstime)) {
      r = NX_ETIMEDOUT;
      break;
    }
    uint64_t waited = now_ns() - start;
    past_pure = waited >= SPIN_PURE_NS;
    if (waited < eng.spin_ns) {
      if (yield)
        sched_yield();
      continue;
    }
    spun_out = 1;
    if (waited < budget) {
      sched_yield();
      continue;
    }
    if (!nxi_rt.poll_mode || me.driving > 0)
      break; /* sleep in the kernel; the primary (or a new one) drives */
    /* Poll mode: nobody else drives, so sleep in epoll and come back;
     * nx_cond_signal wakes us through the eventfd. */
    sleep_epoll(WAITER_SLEEP_MS, word, old);
  }
  atomic_fetch_sub(&eng.waiters, 1);
  return r;
}

static void promote(void) {
  pthread_mutex_lock(&eng.pool_lock);
  atomic_store(&eng.want_primary, 1);
  pool_kick_locked();
  pthread_mutex_unlock(&eng.pool_lock);
}

/* A thread is about to sleep in the kernel: if it drives progress, it lets
 * go; if it is the primary (a threaded handler blocking), another thread
 * becomes primary and this one keeps running the handler. */
static void hook_block(void) {
  drive_lose();
  if (me.primary) {
    me.primary = 0;
    promote();
  }
}

static void hook_unblock(void) {}

static void hook_signal(const uint32_t *word) {
  (void)word;
  /* Only poll-mode waiters sleep in epoll for a condition variable; the
   * primary's sleep does not care about the program's own signals. */
  if (atomic_load(&eng.word_sleepers) > 0) {
    uint64_t one = 1;
    ssize_t w = write(eng.evfd, &one, sizeof(one));
    (void)w;
  }
}

static const struct nxi_thread_hooks hooks = {
    .wait = hook_wait,
    .block = hook_block,
    .unblock = hook_unblock,
    .signal = hook_signal,
};

/* Lifecycle. */

int nxi_progress_init(void) {
  memset(&eng, 0, sizeof(eng));
  nxi_mpscq_init(&eng.recvq);
  eng.spin_ns = (uint64_t)nxi_rt.spin_us * 1000u;
  pthread_mutex_init(&eng.tq_lock, NULL);
  pthread_mutex_init(&eng.pool_lock, NULL);
  eng.epfd = epoll_create1(EPOLL_CLOEXEC);
  eng.evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (eng.epfd < 0 || eng.evfd < 0 || nxi_progress_add_fd(eng.evfd) < 0) {
    if (eng.epfd >= 0)
      close(eng.epfd);
    if (eng.evfd >= 0)
      close(eng.evfd);
    return NX_ENOMEM;
  }
  atomic_store(&eng.primary_state, PRIMARY_SLEEP);
  nxi_thread_hooks_set(&hooks);
  return 0;
}

void nxi_progress_start(void) {
  if (!nxi_rt.poll_mode)
    spawn(1, NULL);
}

/* Stops the runtime threads. Returns the number still running handlers
 * after a grace period (they are blocked in program code). */
static int stop_threads(void) {
  atomic_store(&eng.stopping, 1);
  uint64_t deadline = now_ns() + 2000000000ull;
  while (atomic_load(&eng.live) > 0 && now_ns() < deadline) {
    uint64_t one = 1;
    ssize_t w = write(eng.evfd, &one, sizeof(one));
    (void)w;
    __atomic_fetch_add(&eng.pool_word, 1, __ATOMIC_SEQ_CST);
    nxi_futex_wake(&eng.pool_word, 1 << 30);
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  return atomic_load(&eng.live);
}

int nxi_progress_finalize(void) {
  int left = stop_threads();
  reap(); /* those that ended; any left run program code */
  nxi_thread_hooks_set(NULL);
  if (left > 0) {
    /* They run program code and may touch their contexts and buffers at
     * any time: leave everything they can reach in place. */
    nxi_log(0, NULL,
            "%d handler thread(s) still blocked at nx_finalize; their "
            "contexts are left allocated",
            left);
    return left;
  }
  /* Drop what was never dispatched. */
  unsigned gen;
  if (drive_begin(&gen)) {
    struct nxi_qnode *q;
    while ((q = nxi_mpscq_pop(&eng.recvq)) != NULL)
      nxi_buffer_handler_done(NXI_CONTAINER_OF(q, struct nx_buffer, qnode));
    drive_end(gen);
  }
  struct nx_buffer *b;
  while ((b = tq_pop()) != NULL) {
    nxi_context_put(b->ctx);
    nxi_buffer_handler_done(b);
  }
  close(eng.epfd);
  close(eng.evfd);
  return 0;
}

