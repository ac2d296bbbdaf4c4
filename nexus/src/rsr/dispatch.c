/* Running what arrived: polling the modules, looking up each RSR's context and
 * handler, and running it here or queueing it for a runtime thread. */
#include <pthread.h>
#include <sched.h>
#include <string.h>

#include "rsr/dispatch.h"
#include "contexts/context.h"
#include "modules/dlist.h"
#include "base/driver.h"
#include "engine/engine.h"
#include "rsr/fiber.h"
#include "buffers/frame.h"
#include "rsr/stages.h"
#include "modules/module.h"
#include "nxu_time.h"
#include "rsr/order.h"
#include "base/trace.h"

#define BATCH 64

/* What follows a handler that nxi_run ran: its ordered stream's turn
 * passes, the buffer and the context reference go. */
static inline void run_end(struct nx_buffer *b, struct nx_context *ctx) {
  nxi_order_end(b);
  nxi_buffer_handler_done(b);
  nxi_context_put(ctx);
}

/* nxi_run's body, inline in dispatch: the common RSR runs its handler with
 * no call between the poll and the handler but the handler's own. */
static inline __attribute__((always_inline)) void run(struct nx_buffer *b) {
  struct nx_context *ctx = b->ctx;
  /* Counted as its handler starts: what the handler does (wake the thread
   * that then finalizes, say) comes after its sender can hear of it. */
  nxi_stage_handled(b);
  nx_context_t *old = nxi_context_swap(ctx);
  nxi_eng_me.handlers++;
  if (nxi_tracing())
    nxi_run_traced(b, ctx);
  else
    b->fn(ctx, (void *)(uintptr_t)b->address, b);
  nxi_eng_me.handlers--;
  nxi_context_swap(old);
  run_end(b, ctx);
}

void nxi_run(struct nx_buffer *b) { run(b); }

void nxi_run_queued(struct nx_buffer *b) {
  if (b->fiber != NULL) {
    nxi_fiber_resume(b->fiber);
  } else if (!nxi_fiber_enabled() || nxi_fiber_start(b) != 0) {
    nxi_run(b);
  }
}

/* nx_thread_exit in a new-thread handler ends its thread (it is the
 * handler's own): the handler's end and the thread's run here, as the
 * thread unwinds. */
static void new_thread_exited(void *self) {
  struct nx_buffer *b = nxi_rthread_arg(self);
  nxi_eng_me.handlers--;
  nxi_context_swap(NULL);
  run_end(b, b->ctx);
  nxi_rthread_end(self);
}

/* A thread of its own for one NX_HANDLER_NEW_THREAD handler. */
static void *new_thread_main(void *self) {
  nxi_eng_me.handler_thread = 1;
  pthread_cleanup_push(new_thread_exited, self);
  nxi_run(nxi_rthread_arg(self));
  pthread_cleanup_pop(0);
  return nxi_rthread_end(self);
}

/* An ordered RSR (order.h) waits for its turn; one whose turn a fence
 * skipped is dropped unrun and uncounted: its sender reports it. Returns 1
 * when `b` may go on. */
static int await_turn(struct nx_buffer *b, struct nx_context *ctx) {
  int r = nxi_order_admit(b);
  if (r > 0)
    return 1;
  if (r < 0) {
    nxi_log(1, NULL, "an ordered RSR came after its turn was skipped");
    nxi_buffer_handler_done(b);
  }
  if (ctx != NULL)
    nxi_context_put(ctx);
  return 0;
}

static int drain_queued(unsigned gen);

static void dispatch(struct nx_buffer *b) {
  struct nx_context *ctx = nxi_context_get(b->context);
  if (ctx == NULL) {
    /* For another process: a gateway passes it on. */
    if (nxi_ctxid_proc(b->context) != nxi_rt.proc_id &&
        atomic_load_explicit(&nxi_gateway, memory_order_acquire)->forward(b))
      return;
    if (b->hflags & NXI_FRAME_F_CTL) {
      /* A question for an earlier run of this process (its id changes
       * with each nx_init, the transport's address may not): the asker
       * hears that process is gone (the gone stage). Nothing is reported. */
      nxi_rel()->gone(b);
      nxi_buffer_handler_done(b);
      return;
    }
  }
  /* Not yet admitted (one released from holding comes back admitted). */
  if (b->order != 0 && b->ostream == NULL && !await_turn(b, ctx))
    return;
  if (ctx == NULL) {
    /* Reported here: its sender's ledger counts it as settled. */
    nxi_stage_handled(b);
    nxi_drop(NX_ENOCONTEXT, b->context, b->handler);
    nxi_order_end(b);
    nxi_buffer_handler_done(b);
    return;
  }
  const struct nxi_handler *h = nxi_handler_find(ctx, b->handler);
  if (h == NULL) {
    nxi_stage_handled(b);
    nxi_drop(NX_ENOHANDLER, b->context, b->handler);
    nxi_order_end(b);
    nxi_buffer_handler_done(b);
    nxi_context_put(ctx);
    return;
  }
  b->ctx = ctx;
  b->fn = h->fn;
  /* Under the driver lock: a plain store is enough. The runtime's own
   * messages are not the program's RSRs. */
  if (!(b->hflags & NXI_FRAME_F_CTL))
    atomic_store_explicit(
        &nxi_rt.rsr_handled,
        atomic_load_explicit(&nxi_rt.rsr_handled, memory_order_relaxed) + 1,
        memory_order_relaxed);
  switch (h->kind) {
  case NX_HANDLER_THREADED:
    b->fiber = NULL; /* not started: nxi_run_queued starts it */
    b->threaded = 1;
    /* On a stack of its own, here if this thread may wait for it: a
     * runtime thread, or one waiting in nexus (engine.h). */
    if (nxi_fiber_enabled() && (nxi_eng_me.runtime || nxi_eng_me.waiting)) {
      if (nxi_eng_me.primary)
        nxi_engine_set_state(NXI_PRIMARY_RUNNING);
      /* Run it without the driver lock: a handler that blocks in the
       * kernel must not stop every other thread from driving. */
      struct nxi_drive_hold held = nxi_drive_suspend();
      int r = nxi_fiber_dispatch(b, drain_queued);
      nxi_drive_resume(held);
      if (r == 0)
        return;
    }
    /* Inline only on a runtime thread that runs no other handler: a
     * threaded handler that blocks must never sit on top of code (a waiting
     * application thread, or another handler) that might be what wakes it. */
    if (!nxi_eng_me.runtime || nxi_eng_me.handlers > 0) {
      nxi_tq_push(b);
      return;
    }
    break;
  case NX_HANDLER_NEW_THREAD:
    b->fiber = NULL;
    b->threaded = 1;
    if (nxi_rthread_spawn(new_thread_main, b) != 0)
      nxi_tq_push(b); /* no new thread to be had: a pooled one runs it */
    return;
  default: break;
  }
  if (nxi_eng_me.primary)
    nxi_engine_set_state(NXI_PRIMARY_RUNNING);
  run(b);
}

/* The policy's clock, kept by the driver: read every POLL_CLOCK_EVERY
 * rounds only. A clock read (about 20 ns here) is what a whole round of
 * idle cheap modules costs, and the policy's times are tens of
 * microseconds and more. */
#define POLL_CLOCK_EVERY 8
static uint64_t poll_now;
static unsigned poll_rounds;

/* Calls the module's progress with a batch for the frames it completes
 * (nexus/protocol.h), dispatched by deliver_batch once it returned. */
static int progress(struct nxi_module *m, nx_frame_batch_t *batch) {
  nxi_eng_me.polling++;
  int r = m->ops->progress(m->state, batch);
  nxi_eng_me.polling--;
  return r;
}

static struct nx_buffer *buffer_of(nx_frame_t *f) {
  return NXI_CONTAINER_OF(f, struct nx_buffer, frame);
}

/* The frames of one poll, once the module returned: a single one, with
 * nothing queued (a frame queued earlier may come from the same sender,
 * and goes first), is dispatched at once, with no queue round trip and no
 * wake-up; otherwise they are queued in order (a handler may give the
 * driver lock away, and the rest must not wait for this thread). A full
 * batch already went to the queue ahead of them (nx_frame_batch_add). The
 * runtime's own messages take their usual way (nxi_deliver). */
static void deliver_batch(nx_frame_batch_t *batch) {
  if (batch->count == 1 &&
      !(buffer_of(batch->frames[0])->hflags & NXI_FRAME_F_CTL) &&
      nxi_mpscq_idle(&nxi_eng.recvq) && nxi_mpscq_idle(&nxi_eng.ctlq)) {
    dispatch(buffer_of(batch->frames[0]));
    return;
  }
  for (int i = 0; i < batch->count; i++)
    nxi_deliver(buffer_of(batch->frames[i]));
}

/* Polls module `m` if the policy says so (engine.h): always while it is
 * hot; while cold, once its next turn has come, timing the poll to keep
 * its cost known. Returns the events it handled. */
static int poll_module(struct nxi_module *m, uint64_t now, int all) {
  /* `sent` is looked at (and cleared) only when the module would turn
   * cold: while it is hot, senders find it set and do not write it, so a
   * busy sender and the driver do not pass its line back and forth. */
  if (now >= m->hot_until &&
      atomic_load_explicit(&m->sent, memory_order_relaxed)) {
    atomic_store_explicit(&m->sent, 0, memory_order_relaxed);
    m->hot_until = now + NXI_HOT_NS;
  }
  int r;
  nx_frame_batch_t batch;
  batch.count = 0;
  if (now < m->hot_until) {
    r = progress(m, &batch);
  } else if (all || now >= m->next_poll) {
    uint64_t t0 = nxu_now_ns();
    r = progress(m, &batch);
    uint64_t t1 = nxu_now_ns();
    m->poll_ns = (m->poll_ns * 7 + (t1 - t0)) / 8;
    uint64_t gap = m->poll_ns * NXI_POLL_SHARE;
    gap = gap < NXI_COLD_MIN_NS   ? NXI_COLD_MIN_NS
          : gap > NXI_COLD_MAX_NS ? NXI_COLD_MAX_NS
                                  : gap;
    m->next_poll = t1 + gap;
    poll_now = t1;
  } else {
    return 0;
  }
  if (r > 0)
    m->hot_until = now + NXI_HOT_NS;
  /* Last: after this the driver lock may be gone. */
  if (batch.count > 0)
    deliver_batch(&batch);
  return r > 0 ? r : 0;
}

/* Runs up to a batch of the RSRs queued (runtime messages first, the
 * driver's own queue last), while
 * this thread holds the driver lock at generation `gen`. */
static inline int run_queued(unsigned gen) {
  int n = 0;
  for (int i = 0; i < BATCH && nxi_drive_gen() == gen; i++) {
    /* A pop of an empty queue is its idle test (mpscq.h). */
    struct nxi_qnode *q = nxi_mpscq_pop(&nxi_eng.ctlq);
    if (q == NULL)
      q = nxi_mpscq_pop(&nxi_eng.recvq);
    if (q == NULL) /* behind what other threads queued (driver.h) */
      q = nxi_drive_q_take();
    if (q == NULL)
      break;
    dispatch(NXI_CONTAINER_OF(q, struct nx_buffer, qnode));
    n++;
  }
  return n;
}

/* The same, out of line: a stack that carries a thread's polling on runs
 * the queue through it (fiber.c). */
static int drain_queued(unsigned gen) { return run_queued(gen); }

/* Losses to report from the driver (nxi_drop_later): a few at a time in
 * practice (a placed frame whose sender died midway); beyond LATER_MAX
 * waiting, the rest are counted and logged, not lost silently. */
#define LATER_MAX 256
static struct {
  pthread_mutex_t lock;
  unsigned n, missed;
  struct {
    int err;
    uint32_t handler;
    uint64_t context;
  } e[LATER_MAX];
} later = {.lock = PTHREAD_MUTEX_INITIALIZER};
static atomic_int later_pending;

void nxi_drop_later(int err, uint64_t context, uint32_t handler) {
  pthread_mutex_lock(&later.lock);
  if (later.n < LATER_MAX) {
    later.e[later.n].err = err;
    later.e[later.n].context = context;
    later.e[later.n].handler = handler;
    later.n++;
  } else {
    later.missed++;
  }
  pthread_mutex_unlock(&later.lock);
  atomic_store_explicit(&later_pending, 1, memory_order_release);
  nxi_progress_wake();
}

/* Reports the losses noted by nxi_drop_later; returns how many. A loss
 * callback may block and give the driver lock away (waiter.c, hook_block):
 * the caller looks at the generation before it goes on. */
static __attribute__((noinline)) unsigned drops_report(void) {
  atomic_store_explicit(&later_pending, 0, memory_order_relaxed);
  pthread_mutex_lock(&later.lock);
  unsigned n = later.n, missed = later.missed;
  __typeof__(later.e[0]) e[LATER_MAX];
  memcpy(e, later.e, n * sizeof(e[0]));
  later.n = later.missed = 0;
  pthread_mutex_unlock(&later.lock);
  for (unsigned i = 0; i < n; i++)
    nxi_drop(e[i].err, e[i].context, e[i].handler);
  if (missed != 0) {
    atomic_fetch_add(&nxi_rt.rsr_failed, missed);
    nxi_log(0, NULL,
            "%u more RSRs lost at this end could not be reported "
            "one by one",
            missed);
  }
  return n + missed;
}

int nxi_poll_once(unsigned gen) {
  int n = 0;
  /* Each step below may run a callback that blocks and gives the driver
   * lock away (a loss report, a handler): the next one runs only while
   * this thread still holds it, as the poll clock and the modules' poll
   * policy are the holder's alone. */
  if (atomic_load_explicit(&later_pending, memory_order_acquire)) {
    n = (int)drops_report();
    if (nxi_drive_gen() != gen)
      return n;
  }
  int nmods = nxi_module_count_loaded();
  int all = atomic_load_explicit(&nxi_eng.poll_all, memory_order_relaxed);
  if (all)
    atomic_store_explicit(&nxi_eng.poll_all, 0, memory_order_relaxed);
  if (all || ++poll_rounds >= POLL_CLOCK_EVERY || poll_now == 0) {
    poll_rounds = 0;
    poll_now = nxu_now_ns();
  }
  uint64_t now = poll_now;
  /* A handler dispatched straight from a poll may block and give the
   * driver lock away: then this round stops. */
  for (int i = 0; i < nmods && nxi_drive_gen() == gen; i++) {
    struct nxi_module *m = nxi_module_loaded(i);
    if (m->ops->progress != NULL) /* NULL: nothing to poll (protocol.h) */
      n += poll_module(m, now, all);
  }
  if (nxi_drive_gen() != gen)
    return n;
  if (nxi_dlist_fallbacks_due()) { /* routes failed: the next candidates */
    n += nxi_dlist_fallbacks();
    if (nxi_drive_gen() != gen)
      return n;
  }
  nxi_stage_tick(now);
  return n + run_queued(gen); /* which looks at the generation itself */
}

int nxi_poll_before_sleep(void) {
  unsigned gen;
  if (!nxi_drive_begin(&gen))
    return 0;
  atomic_store_explicit(&nxi_eng.poll_all, 1, memory_order_relaxed);
  int n = nxi_poll_once(gen);
  /* Nothing anywhere: arm the modules whose fds signal only when armed. */
  int nmods = nxi_module_count_loaded();
  for (int i = 0; i < nmods && n == 0 && nxi_drive_gen() == gen; i++) {
    struct nxi_module *m = nxi_module_loaded(i);
    if (m->ops->arm != NULL) {
      int r = m->ops->arm(m->state);
      if (r > 0) {
        m->hot_until = nxu_now_ns() + NXI_HOT_NS;
        n += r;
      }
    }
  }
  nxi_drive_end(gen);
  return n;
}

static void enqueue_ctl(struct nx_buffer *b) {
  nxi_mpscq_push(&nxi_eng.ctlq, &b->qnode);
  nxi_progress_wake();
}

/* A frame delivered outside a module's progress (a module thread, a send
 * to a local context), or one of a poll's batch of several: queued. */
void nxi_deliver(struct nx_buffer *b) {
  uint16_t hflags = b->hflags;
  if (hflags & NXI_FRAME_F_CTL) {
    /* An answer for this process (a gateway passes others on). A fence
     * takes its turn behind what arrived before it (services/ledger.h). */
    if (nxi_ctxid_proc(b->context) == nxi_rt.proc_id && nxi_rel()->take(b))
      return;
    if (!(hflags & NXI_FRAME_F_FENCE) && nxi_queued()) {
      b->pos = 0;
      enqueue_ctl(b); /* ahead of the backlog */
      return;
    }
  }
  nxi_requeue(b);
}

void nxi_progress_help(void) {
  unsigned gen;
  if (nxi_drive_begin(&gen)) {
    int n = nxi_poll_once(gen);
    nxi_drive_end(gen);
    if (n > 0)
      return;
  }
  sched_yield();
}

int nx_poll(void) {
  if (!nxi_ready())
    return NX_ENOTINIT;
  unsigned gen;
  if (!nxi_drive_begin(&gen))
    return 0;
  int n = nxi_poll_once(gen);
  nxi_drive_end(gen);
  return n;
}
