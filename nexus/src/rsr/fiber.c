/* Lazy threaded handlers (fiber.h). A threaded handler runs on a stack taken
 * from a pool, switched to with Boost.Context's fcontext (two switches when
 * it returns). When it waits on a nexus condition variable or a contended
 * nexus mutex it parks: it switches back to whoever resumed it, which goes
 * on; whoever bumps the word it waits on makes it runnable (the thread
 * queue, engine.h), and a runtime thread resumes it there, maybe on another
 * OS thread than the one it started on.
 *
 * Migrating between threads has one trap: a compiler may keep the address
 * of a thread-local variable in a register across a call, and read the old
 * thread's copy after the switch. So the functions that switch and then
 * touch thread-locals do so only through calls that cannot be inlined
 * (NXI_NOIPA), and the state a handler keeps in thread-locals (its context,
 * the mutexes it holds) is swapped by the resumer, which never migrates. */
#include "rsr/dispatch.h"
#include "rsr/fiber.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/driver.h"
#include "contexts/context.h"
#include "engine/engine.h"
#include "rsr/stages.h"
#include "base/trace.h"
#include "rsr/order.h"
#include "threads/nxi_thread.h"

#if defined(__SANITIZE_ADDRESS__)
#define FIBER_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#define FIBER_TSAN 1
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FIBER_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define FIBER_TSAN 1
#endif
#endif
#ifdef FIBER_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef FIBER_TSAN
#include <sanitizer/tsan_interface.h>
#endif

#ifdef NXI_HAVE_FCONTEXT

/* Boost.Context's switch (libboost_context), declared here as the C
 * functions they are: jump_fcontext saves the caller's registers on its
 * stack, switches to `to` and passes `data`; it returns when something
 * jumps back, with where that came from. */
typedef void *fctx_t;
struct fctx_transfer {
  fctx_t fctx;
  void *data;
};
extern struct fctx_transfer jump_fcontext(fctx_t to, void *data);
extern fctx_t make_fcontext(void *sp, size_t size,
                            void (*fn)(struct fctx_transfer));

/* What a fiber asks of its resumer when it switches back. */
#define REQ_DONE ((void *)1) /* the handler returned: pool the fiber */
#define REQ_PARK ((void *)2) /* park it on f->word */
#define REQ_EXIT ((void *)3) /* the handler called nx_thread_exit: free it */
/* A handler called on a carrying stack (nxi_fiber_dispatch) returned after
 * it parked: the stack's frames below it are a loop another stack took
 * over. Pool it afresh (or free it: the sanitizers keep a record of the
 * frames they saw entered). */
#define REQ_RESET ((void *)4)

/* A stack this small carries no polling on (fiber_carry): the modules'
 * progress runs there then. */
#define CARRY_STACK_MIN (256u * 1024u)

#define FREE_MAX 64       /* idle fibers kept for reuse */
#define PARK_BUCKETS 256u /* parked fibers, hashed by the word they wait on */

struct nxi_fiber {
  fctx_t fctx;                /* where it goes on, while switched out */
  fctx_t back;                /* where it returns to: its resumer */
  char *map;                  /* its stack's mapping, guard page first */
  size_t map_size;            /* the mapping's size */
  struct nx_buffer *job;      /* the RSR whose handler it runs */
  nx_context_t *self_ctx;     /* its nx_context_self(), while switched out */
  struct nxi_thread_state ts; /* its mutex count and identity, switched out */
  const uint32_t *word;       /* parked: the word it waits on, */
  uint32_t old;               /* and the value it waits to change */
  struct nxi_fiber *next;     /* in the free list or a park bucket */
  struct nxi_fiber **pprev;
  struct nxi_fiber *all_next, *all_prev; /* every fiber (fib.all) */
  int idle;                              /* pooled: free to take */
  /* A handler (`job`) runs on it, not the polling it may carry on. */
  unsigned char running;
  /* The handlers nxi_run runs on its thread below it (nxi_eng_me.handlers
   * as it came in): more, and one of those runs inside its handler. */
  int depth;
  /* It carries on its starting thread's polling once its first handler
   * returned, if that handler never parked (fiber_carry). */
  unsigned char carry;
  /* It carries that polling now: a threaded handler dispatched there is
   * called on it (nxi_fiber_dispatch). */
  unsigned char carrying;
  /* Its handler parked while it carried: that polling went back to the
   * thread, and the stack ends with the handler (REQ_RESET). */
  unsigned char displaced;
  const uint32_t *carry_word; /* the wait it carries on (NULL: a runtime */
  uint32_t carry_old;         /* thread's loop), and the value it waits on */
  int (*carry_drain)(unsigned gen); /* the dispatcher's queue, run */
#ifdef FIBER_ASAN
  void *asan_fake;       /* its fake stack, while switched out */
  const void *back_base; /* its resumer's stack */
  size_t back_size;
#endif
#ifdef FIBER_TSAN
  void *tsan;      /* its ThreadSanitizer fiber */
  void *tsan_back; /* its resumer's */
#endif
};

static struct {
  int on;
  int carry; /* stacks are big enough to carry polling on */
  size_t stack_size;
  size_t page;
  pthread_mutex_t lock; /* the free list and `all` */
  struct nxi_fiber *free;
  int nfree;
  struct nxi_fiber *all; /* every fiber, to free the idle ones at the end */
  unsigned epoch;        /* bumped when they are: older spares are gone */
  pthread_mutex_t park_lock;
  struct nxi_fiber *parked_at[PARK_BUCKETS];
  atomic_int parked;
} fib = {.lock = PTHREAD_MUTEX_INITIALIZER,
         .park_lock = PTHREAD_MUTEX_INITIALIZER};

/* The fiber running on this thread, NULL on the thread's own stack
 * (fiber.h: nxi_fiber_cur). */
NXI_TLS struct nxi_fiber *nxi_fiber_cur;

/* One idle fiber kept by each thread, taken before the shared free list:
 * a handler that returns at once then costs no lock. Valid only while its
 * epoch is the pool's (nxi_fiber_fini frees every idle fiber). */
static NXI_TLS struct {
  struct nxi_fiber *f;
  unsigned epoch;
  int registered; /* spare_key set: the spare goes back when the thread ends */
} spare;
static pthread_key_t spare_key;
static pthread_once_t spare_once = PTHREAD_ONCE_INIT;

static NXI_NOIPA struct nxi_fiber *cur_get(void) { return nxi_fiber_cur; }

static void fiber_main(struct fctx_transfer t);

/* Frees a fiber; fib.lock held (it leaves `all`). */
static void stack_free(struct nxi_fiber *f) {
  if (f->all_prev != NULL)
    f->all_prev->all_next = f->all_next;
  else
    fib.all = f->all_next;
  if (f->all_next != NULL)
    f->all_next->all_prev = f->all_prev;
#ifdef FIBER_ASAN
  /* Frames left on it are poisoned; a later mapping there must not be. */
  __asan_unpoison_memory_region(f->map, f->map_size);
#endif
#ifdef FIBER_TSAN
  __tsan_destroy_fiber(f->tsan);
#endif
  munmap(f->map, f->map_size);
  free(f);
}

static struct nxi_fiber *fiber_new(void) {
  struct nxi_fiber *f = calloc(1, sizeof(*f));
  if (f == NULL)
    return NULL;
  f->map_size = fib.page + fib.stack_size;
  f->map = mmap(NULL, f->map_size, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (f->map == MAP_FAILED) {
    free(f);
    return NULL;
  }
  /* A guard page under the stack: an overflow faults at once. */
  if (mprotect(f->map, fib.page, PROT_NONE) != 0) {
    munmap(f->map, f->map_size);
    free(f);
    return NULL;
  }
  f->fctx = make_fcontext(f->map + f->map_size, fib.stack_size, fiber_main);
#ifdef FIBER_TSAN
  f->tsan = __tsan_create_fiber(0);
#endif
  pthread_mutex_lock(&fib.lock);
  f->all_next = fib.all;
  if (fib.all != NULL)
    fib.all->all_prev = f;
  fib.all = f;
  pthread_mutex_unlock(&fib.lock);
  return f;
}

static struct nxi_fiber *fiber_get(void) {
  struct nxi_fiber *f = spare.f;
  unsigned epoch = __atomic_load_n(&fib.epoch, __ATOMIC_RELAXED);
  if (f != NULL && spare.epoch == epoch) {
    spare.f = NULL;
    __atomic_store_n(&f->idle, 0, __ATOMIC_RELAXED);
    return f;
  }
  pthread_mutex_lock(&fib.lock);
  f = fib.free;
  if (f != NULL) {
    fib.free = f->next;
    fib.nfree--;
    __atomic_store_n(&f->idle, 0, __ATOMIC_RELAXED);
  }
  pthread_mutex_unlock(&fib.lock);
  return f != NULL ? f : fiber_new();
}

/* Puts `f` on the shared free list, or frees it when the list is full. */
static void fiber_put_shared(struct nxi_fiber *f) {
  pthread_mutex_lock(&fib.lock);
  if (fib.nfree < FREE_MAX) {
    f->next = fib.free;
    fib.free = f;
    fib.nfree++;
  } else {
    stack_free(f);
  }
  pthread_mutex_unlock(&fib.lock);
}

/* A thread that ends gives its spare back. */
static void spare_release(void *unused) {
  (void)unused;
  struct nxi_fiber *f = spare.f;
  spare.f = NULL;
  if (f != NULL && spare.epoch == __atomic_load_n(&fib.epoch, __ATOMIC_RELAXED))
    fiber_put_shared(f);
}

static void spare_key_make(void) {
  if (pthread_key_create(&spare_key, spare_release) != 0)
    spare_key = (pthread_key_t)-1;
}

static void fiber_put(struct nxi_fiber *f) {
  __atomic_store_n(&f->idle, 1, __ATOMIC_RELAXED);
  unsigned epoch = __atomic_load_n(&fib.epoch, __ATOMIC_RELAXED);
  if (spare.f == NULL || spare.epoch != epoch) {
    if (!spare.registered) {
      pthread_once(&spare_once, spare_key_make);
      if (spare_key == (pthread_key_t)-1 ||
          pthread_setspecific(spare_key, (void *)1) != 0) {
        fiber_put_shared(f); /* no way to get it back at thread exit */
        return;
      }
      spare.registered = 1;
    }
    spare.f = f;
    spare.epoch = epoch;
    return;
  }
  fiber_put_shared(f);
}

/* The fiber side of a switch: back to the resumer with request `req`; on
 * return (maybe on another thread) notes the new resumer. */
static NXI_NOIPA void came_in(struct nxi_fiber *f, struct fctx_transfer t) {
  f->back = t.fctx;
  f->depth = nxi_eng_me.handlers;
#ifdef FIBER_ASAN
  __sanitizer_finish_switch_fiber(f->asan_fake, &f->back_base, &f->back_size);
#endif
}

static NXI_NOIPA void switch_out(struct nxi_fiber *f, void *req) {
#ifdef FIBER_ASAN
  /* NULL for a stack left for good: ASan frees its fake stack. */
  __sanitizer_start_switch_fiber(
      req == REQ_EXIT || req == REQ_RESET ? NULL : &f->asan_fake, f->back_base,
      f->back_size);
#endif
#ifdef FIBER_TSAN
  __tsan_switch_to_fiber(f->tsan_back, 0);
#endif
  struct fctx_transfer t = jump_fcontext(f->back, req);
  came_in(f, t);
}

static void fiber_carry(struct nxi_fiber *f);

/* A handler's RSR is done: its ordered stream's turn passes, the buffer
 * and the context reference go. No thread-locals: it may run on another
 * thread than the handler started on. */
static void job_end(struct nx_buffer *b, struct nx_context *ctx) {
  nxi_order_end(b);
  nxi_buffer_handler_done(b);
  nxi_context_put(ctx);
}

static void fiber_main(struct fctx_transfer t) {
  struct nxi_fiber *f = t.data;
  came_in(f, t);
  for (;;) {
    struct nx_buffer *b = f->job;
    struct nx_context *ctx = b->ctx;
    f->running = 1;
    nxi_stage_handled(b); /* as it starts (nxi_run) */
    if (nxi_tracing())
      nxi_run_traced(b, ctx);
    else
      b->fn(ctx, (void *)(uintptr_t)b->address, b);
    f->running = 0;
    job_end(b, ctx);
    if (f->carry) /* cleared if it parked: maybe on another thread now */
      fiber_carry(f);
    switch_out(f, REQ_DONE);
  }
}

/* The end of a handler called on a carrying stack that parked meanwhile
 * (fiber_call): the frames below it are a loop of the thread it left,
 * which went on without them. Never returns into them. */
static NXI_NOIPA __attribute__((noreturn)) void
fiber_end_displaced(struct nxi_fiber *f, struct nx_buffer *b,
                    struct nx_context *ctx) {
  job_end(b, ctx);
  switch_out(f, REQ_RESET);
  abort(); /* never resumed */
}

/* Calls threaded handler `b` on carrying stack `f` (nxi_fiber_dispatch):
 * no switch. It has an identity of its own (the stack's), as on a stack
 * started for it; if it parks, the thread takes its polling back and the
 * handler ends on this stack wherever it resumes. */
static int fiber_call(struct nxi_fiber *f, struct nx_buffer *b) {
  nxi_ts_add(NXI_TS_LAZY_STARTED, 1);
  f->job = b;
  b->fiber = f;
  f->ts.locks = 0;
  f->ts.id = (uint64_t)(uintptr_t)f;
  nxi_thread_state_swap(&f->ts);
  struct nx_context *ctx = b->ctx;
  nx_context_t *old = nxi_context_swap(ctx);
  f->running = 1;
  f->depth = nxi_eng_me.handlers;
  nxi_stage_handled(b);
  if (nxi_tracing())
    nxi_run_traced(b, ctx);
  else
    b->fn(ctx, (void *)(uintptr_t)b->address, b);
  f->running = 0;
  if (f->displaced)
    fiber_end_displaced(f, b, ctx);
  /* Never parked: still on the thread that called it. */
  nxi_context_swap(old);
  nxi_thread_state_swap(&f->ts);
  f->job = NULL;
  job_end(b, ctx);
  return 0;
}

/* Whether a stack should carry its thread's polling on now. */
static inline int carry_worth(const struct nxi_fiber *f) {
  if (f->carry_word != NULL
          ? __atomic_load_n(f->carry_word, __ATOMIC_ACQUIRE) != f->carry_old
          : !nxi_eng_me.primary ||
                atomic_load_explicit(&nxi_eng.waiters, memory_order_relaxed) >
                    0)
    return 0;
  return nxi_ready() &&
         !atomic_load_explicit(&nxi_eng.stopping, memory_order_relaxed) &&
         atomic_load_explicit(&nxi_eng.tq_len, memory_order_relaxed) == 0 &&
         !(nxi_mpscq_idle(&nxi_eng.recvq) && nxi_mpscq_idle(&nxi_eng.ctlq) &&
           !nxi_drive_q_any());
}

/* Its first handler returned without parking, on the thread that started
 * it: the stack carries on that thread's polling (its wait, or a runtime
 * thread's loop) for a batch of what is queued already (what that handler
 * sent to a context of this process, say), and threaded handlers among it
 * are calls (fiber_call): a second handler costs no switch. Not when the
 * queue is empty or the wait is over, nor where the thread's own loop
 * would decide otherwise (the primary deferring to a waiter, a handler
 * queued for a runtime thread, the role lost); the modules are polled by
 * the thread's loop, not here. Not inlined: it reads thread-locals, and the
 * handler before it may have run elsewhere (it did not, or `carry` would be 0;
 * the compiler does not know that). */
static NXI_NOIPA void fiber_carry(struct nxi_fiber *f) {
  f->carry = 0;
  if (!carry_worth(f))
    return; /* the usual case between processes: nothing queued yet */
  f->carrying = 1;
  nxi_thread_state_swap(&f->ts); /* the thread's identity, as on its stack */
  /* One batch: the thread's loop polls the modules (and runs the
   * runtime's clock) between batches, and must not wait behind a queue
   * that a sender on another thread keeps full. */
  unsigned gen;
  if (nxi_drive_begin(&gen)) {
    f->carry_drain(gen);
    nxi_drive_end(gen);
  }
  f->carrying = 0;
  nxi_thread_state_swap(&f->ts);
}

static unsigned bucket_of(const uint32_t *word) {
  uintptr_t a = (uintptr_t)word;
  return (unsigned)((a >> 2) ^ (a >> 12)) % PARK_BUCKETS;
}

/* Makes a parked or just-parking fiber runnable: a runtime thread takes
 * its RSR off the thread queue and resumes it. */
static void runnable(struct nxi_fiber *f) { nxi_tq_push(f->job); }

/* The resumer's side of a park, once the fiber has switched out: it waits
 * in its bucket unless the word changed meanwhile. The count goes up
 * before the word is read, and a waker bumps the word before it reads the
 * count, so one of them sees the other. */
static void park_commit(struct nxi_fiber *f) {
  atomic_fetch_add_explicit(&nxi_rt.lazy_parked, 1, memory_order_relaxed);
  pthread_mutex_lock(&fib.park_lock);
  atomic_fetch_add(&fib.parked, 1);
  if (__atomic_load_n(f->word, __ATOMIC_SEQ_CST) != f->old) {
    atomic_fetch_sub(&fib.parked, 1);
    pthread_mutex_unlock(&fib.park_lock);
    runnable(f);
    return;
  }
  struct nxi_fiber **head = &fib.parked_at[bucket_of(f->word)];
  f->next = *head;
  if (f->next != NULL)
    f->next->pprev = &f->next;
  f->pprev = head;
  *head = f;
  pthread_mutex_unlock(&fib.park_lock);
}

/* Runs `f` on this thread until it returns or parks. The resumer never
 * migrates, so it may keep thread-locals across the switch. */
void nxi_fiber_resume(struct nxi_fiber *f) {
  struct nxi_fiber *prev = nxi_fiber_cur;
  nxi_fiber_cur = f;
  nx_context_t *my_ctx = nxi_context_swap(f->self_ctx);
  nxi_thread_state_swap(&f->ts);
#ifdef FIBER_ASAN
  void *fake = NULL;
  __sanitizer_start_switch_fiber(&fake, f->map + fib.page, fib.stack_size);
#endif
#ifdef FIBER_TSAN
  f->tsan_back = __tsan_get_current_fiber();
  __tsan_switch_to_fiber(f->tsan, 0);
#endif
  struct fctx_transfer t = jump_fcontext(f->fctx, f);
#ifdef FIBER_ASAN
  __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#endif
  f->fctx = t.fctx;
  nxi_thread_state_swap(&f->ts);
  f->self_ctx = nxi_context_swap(my_ctx);
  nxi_fiber_cur = prev;
  if (t.data == REQ_EXIT) {
    pthread_mutex_lock(&fib.lock);
    stack_free(f);
    pthread_mutex_unlock(&fib.lock);
  } else if (t.data == REQ_DONE) {
    f->job = NULL;
    fiber_put(f);
  } else if (t.data == REQ_RESET) {
    f->job = NULL;
    f->displaced = 0;
#if defined(FIBER_ASAN) || defined(FIBER_TSAN)
    pthread_mutex_lock(&fib.lock);
    stack_free(f);
    pthread_mutex_unlock(&fib.lock);
#else
    f->fctx = make_fcontext(f->map + f->map_size, fib.stack_size, fiber_main);
    fiber_put(f);
#endif
  } else {
    /* Parked: it carries nothing on from now on; a handler called while
     * it carried takes the stack with it (fiber_call). */
    f->carry = 0;
    if (f->carrying) {
      f->carrying = 0;
      f->displaced = 1;
    }
    park_commit(f);
  }
}

/* Starts `b`'s handler on a stack of its own; with `word` (a wait's, or
 * NXI_CARRY_LOOP) the stack carries on the thread's polling afterwards
 * (fiber_carry). */
#define NXI_CARRY_LOOP ((const uint32_t *)1)
static int fiber_launch(struct nx_buffer *b, const uint32_t *word, uint32_t old,
                        int (*drain)(unsigned gen)) {
  struct nxi_fiber *f = fiber_get();
  if (f == NULL)
    return NX_ENOMEM;
  nxi_ts_add(NXI_TS_LAZY_STARTED, 1); /* on the resumer's own thread */
  f->carry = word != NULL;
  f->carry_word = word != NXI_CARRY_LOOP ? word : NULL;
  f->carry_old = old;
  f->carry_drain = drain;
  f->job = b;
  f->self_ctx = b->ctx;
  f->ts.locks = 0;
  f->ts.id = (uint64_t)(uintptr_t)f; /* unlike any pthread_t: its own object */
  b->fiber = f;
  nxi_fiber_resume(f);
  return 0;
}

int nxi_fiber_start(struct nx_buffer *b) {
  return fiber_launch(b, NULL, 0, NULL);
}

int nxi_fiber_dispatch(struct nx_buffer *b, int (*drain)(unsigned gen)) {
  struct nxi_fiber *f = nxi_fiber_cur;
  if (f != NULL) {
    /* On a carrying stack outside any handler: a call. Else (inside a
     * handler) on a stack of its own, on top, as before. */
    if (f->carrying && !f->running && nxi_eng_me.handlers == 0)
      return fiber_call(f, b);
    return fiber_launch(b, NULL, 0, NULL);
  }
  /* On the thread's own stack, dispatched by its outermost loop: the new
   * stack may carry that loop on. */
  const uint32_t *word = NULL;
  if (fib.carry && nxi_eng_me.handlers == 0) {
    if (nxi_eng_me.waiting == 1)
      word = nxi_eng_me.wait_word;
    else if (nxi_eng_me.waiting == 0 && nxi_eng_me.primary)
      word = NXI_CARRY_LOOP;
  }
  return fiber_launch(b, word, nxi_eng_me.wait_old, drain);
}

/* Whether this thread's driver lock is taken by frames on the running
 * stack: a handler run inside this one's by a timed wait that drove. The
 * stack must not park holding it: it would resume elsewhere and let go of
 * another thread's hold (driver.h). The caller blocks as a thread does
 * (waiter.c, hook_block gives the lock away). */
static NXI_NOIPA int holds_driver(void) { return nxi_driving(); }

int nxi_fiber_can_park(void) {
  /* Not from inside a module's progress (waiter.c, hook_block): the
   * thread would go on driving with that module's call still open on the
   * parked stack. */
  struct nxi_fiber *f = cur_get();
  return f != NULL && f->running && nxi_thread_locks_held() == 0 &&
         !nxi_eng_me.polling && !holds_driver();
}

int nxi_fiber_park(const uint32_t *word, uint32_t old) {
  struct nxi_fiber *f = cur_get();
  /* A handler that holds a mutex keeps its thread: the mutex belongs to
   * the thread it was locked on. */
  if (f == NULL || !f->running || nxi_thread_locks_held() != 0 ||
      holds_driver())
    return NX_EAGAIN;
  f->word = word;
  f->old = old;
  switch_out(f, REQ_PARK);
  return 0;
}

void nxi_fiber_exit(void) {
  struct nxi_fiber *f = cur_get();
  /* Not from a handler that nxi_run runs inside this one's (a
   * non-threaded handler dispatched by its wait): that one is the
   * caller, and it runs on a thread not its own. */
  if (f == NULL || !f->running || nxi_eng_me.handlers != f->depth)
    return;
  struct nx_buffer *b = f->job;
  struct nx_context *ctx = b->ctx;
  job_end(b, ctx);
  switch_out(f, REQ_EXIT);
  abort(); /* never resumed */
}

void nxi_fiber_wake(const uint32_t *word, int n) {
  if (atomic_load(&fib.parked) == 0)
    return;
  struct nxi_fiber *woken = NULL;
  pthread_mutex_lock(&fib.park_lock);
  struct nxi_fiber *f = fib.parked_at[bucket_of(word)];
  while (f != NULL && n > 0) {
    struct nxi_fiber *next = f->next;
    if (f->word == word) {
      *f->pprev = next;
      if (next != NULL)
        next->pprev = f->pprev;
      atomic_fetch_sub(&fib.parked, 1);
      f->next = woken;
      woken = f;
      n--;
    }
    f = next;
  }
  pthread_mutex_unlock(&fib.park_lock);
  while (woken != NULL) {
    struct nxi_fiber *next = woken->next;
    runnable(woken);
    woken = next;
  }
}

int nxi_fiber_init(int on, size_t stack_size) {
  long page = sysconf(_SC_PAGESIZE);
  fib.page = page > 0 ? (size_t)page : 4096;
  fib.stack_size = (stack_size + fib.page - 1) / fib.page * fib.page;
  fib.on = on;
  fib.carry = fib.stack_size >= CARRY_STACK_MIN;
  atomic_store(&fib.parked, 0);
  memset(fib.parked_at, 0, sizeof(fib.parked_at));
  return 0;
}

int nxi_fiber_fini(void) {
  int busy = 0; /* handlers parked, waiting to resume, or running */
  pthread_mutex_lock(&fib.lock);
  struct nxi_fiber *f = fib.all;
  while (f != NULL) {
    struct nxi_fiber *next = f->all_next;
    if (__atomic_load_n(&f->idle, __ATOMIC_RELAXED))
      stack_free(f);
    else
      busy++;
    f = next;
  }
  fib.free = NULL;
  fib.nfree = 0;
  /* Every thread's spare is gone. */
  __atomic_store_n(&fib.epoch, fib.epoch + 1, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&fib.lock);
  return busy;
}

int nxi_fiber_enabled(void) { return fib.on; }

int nxi_in_handler(void) {
  struct nxi_fiber *f = cur_get();
  return nxi_eng_me.handlers > 0 || (f != NULL && f->running);
}

#else /* no fcontext: threaded handlers run on runtime threads */

NXI_TLS struct nxi_fiber *nxi_fiber_cur; /* never set */

int nxi_fiber_init(int on, size_t stack_size) {
  (void)on;
  (void)stack_size;
  return 0;
}
int nxi_fiber_fini(void) { return 0; }
int nxi_fiber_enabled(void) { return 0; }
int nxi_fiber_start(struct nx_buffer *b) {
  (void)b;
  return NX_ENOMEM;
}
int nxi_fiber_dispatch(struct nx_buffer *b, int (*drain)(unsigned gen)) {
  (void)b;
  (void)drain;
  return NX_ENOMEM;
}
void nxi_fiber_resume(struct nxi_fiber *f) { (void)f; }
int nxi_fiber_park(const uint32_t *word, uint32_t old) {
  (void)word;
  (void)old;
  return NX_EAGAIN;
}
int nxi_fiber_can_park(void) { return 0; }
void nxi_fiber_exit(void) {}
void nxi_fiber_wake(const uint32_t *word, int n) {
  (void)word;
  (void)n;
}
int nxi_in_handler(void) { return nxi_eng_me.handlers > 0; }

#endif
