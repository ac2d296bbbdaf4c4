/* Confirmations: the runtime's own messages that settle the ledger
 * (ledger.h). A sender asks a peer how many of its RSRs ran there
 * ("nx.ledger.ask": u32 process, u8 route generations, u8 fence, a gp to
 * answer to, u64 its clock); the peer answers with a count per generation
 * ("nx.ledger.tell": u32 process, u8 generations, u8 fence, u64 each, then
 * u64 the asker's clock and u64 its own). The clocks are CLOCK_MONOTONIC
 * ns, 0 unless the asker traces: a traced process measures its clock's
 * offset to each peer it asks (docs/tracing.md, "Clocks"). nx_flush
 * asks until every RSR this process accepted for another is settled, and
 * nx_finalize flushes, then tells its peers their final counts unasked. Both
 * messages travel outside the ledger (NXI_FRAME_F_CTL). */
#include <time.h>

#include "rsr/dispatch.h"
#include "base/trace.h"
#include "services/confirm.h"
#include "contexts/context.h"
#include "modules/dlist.h"
#include "engine/engine.h"
#include "rsr/fiber.h"
#include "rsr/stages.h"
#include "services/ledger.h"
#include "nxu_time.h"
#include "rsr/order.h"
#include "rsr/send.h"

#define ASK "nx.ledger.ask"
#define TELL "nx.ledger.tell"
#define GONE "nx.ledger.gone"
#define ACK "nx.ledger.ack"
/* Most peers one round of nx_flush asks; the rest wait a round. */
#define ROUND_MAX 64
/* "gone" is believed only about a process that left a question
 * unanswered this long: any peer can send it, and a live process answers
 * in far less. */
#define GONE_WAIT_NS (1000 * 1000 * 1000ull)

static nx_mutex_t flush_m;
static nx_cond_t flush_c;
/* Processes told their final counts that have not acknowledged them
 * (nx_finalize waits a while for them): under flush_m. */
#define AWAIT_MAX 1024
static uint32_t awaiting[AWAIT_MAX];
static int nawaiting;
static atomic_uint settled_gen;

/* Tells `proc` how many of its RSRs of generations `gens` ran here; they
 * count as told once sent, or in any case if `always`. `fence` is the
 * answer's fence byte (ledger.h): 0 asked, 1 a fence's, or
 * NXI_LEDGER_TELL_FINAL, which `proc` acknowledges. Returns 0 (sent) or a
 * negative code. */
static int send_tell(uint32_t proc, struct nxi_dlist *dl, unsigned gens,
                     int fence, int always, uint64_t asked_at) {
  nx_gp_t to = nxi_initial_gp(proc, dl);
  nx_buffer_t *b;
  uint64_t counts[NXI_FRAME_GENS];
  for (unsigned g = 0; g < NXI_FRAME_GENS; g++)
    counts[g] = nxi_ledger_handled_from(proc, g);
  int r = nx_rsr_init_name(&b, &to, TELL, 32 + 8 * NXI_FRAME_GENS);
  if (r == 0) {
    b->ctl = NXI_FRAME_F_CTL;
    r = nx_put_uint32(b, nxi_rt.proc_id);
    if (r == 0)
      r = nx_put_uint8(b, (uint8_t)gens);
    if (r == 0)
      r = nx_put_uint8(b, (uint8_t)fence); /* 0, 1 or TELL_FINAL */
    for (unsigned g = 0; r == 0 && g < NXI_FRAME_GENS; g++)
      if (gens & 1u << g)
        r = nx_put_uint64(b, counts[g]);
    /* The asker's clock back, and this process's, read as late as can be:
     * the asker's offset estimate is off by at most half the round trip,
     * less what the answer waited between this read and its send. */
    if (r == 0)
      r = nx_put_uint64(b, asked_at);
    if (r == 0)
      r = nx_put_uint64(b, asked_at != 0 ? nxu_now_ns() : 0);
    if (r == 0)
      r = nx_rsr_send(b);
    else
      nx_buffer_release(b);
  }
  for (unsigned g = 0; g < NXI_FRAME_GENS && (r == 0 || always); g++)
    if (gens & 1u << g)
      nxi_ledger_told(proc, g, counts[g]);
  return r;
}

/* Asks `proc` for its counts of generations `gens`, with a fence if
 * `fence` (answered after the RSRs that arrived before the question);
 * `flags` NX_RSR_NONBLOCK where the asker must not wait for room (the
 * driver's tick, a sender's window). */
static void ask_flags(uint32_t proc, struct nxi_dlist *dl, unsigned gens,
                      int fence, unsigned flags) {
  struct nxi_dlist *self = atomic_load(&nxi_rt.self_dl);
  nx_gp_t to = nxi_initial_gp(proc, dl);
  nx_gp_t me = nxi_initial_gp(nxi_rt.proc_id, self);
  nx_buffer_t *b;
  if (nx_rsr_init_name(&b, &to, ASK, 72 + self->len) < 0)
    return;
  uint64_t clock = nxi_tracing() ? nxu_now_ns() : 0;
  b->ctl = NXI_FRAME_F_CTL | (fence ? NXI_FRAME_F_FENCE : 0);
  if (nx_put_uint32(b, nxi_rt.proc_id) < 0 ||
      nx_put_uint8(b, (uint8_t)gens) < 0 ||
      nx_put_uint8(b, (uint8_t)(fence != 0)) < 0 || nx_put_gp(b, &me) < 0 ||
      nx_put_uint64(b, clock) < 0) {
    nx_buffer_release(b);
    return;
  }
  /* A request that finds the queue full is asked again later. A failed
   * route reports the process lost. */
  if (nx_rsr_send_flags(b, flags) == 0)
    nxi_ledger_asked(proc, clock);
}

/* A malformed confirmation message, or one in another process's name (its
 * process is not its frame's origin) or sent as an ordinary RSR: dropped
 * and counted as a bad frame, as any bad input from a peer (docs/design.md
 * section 9). */
static void refuse(const nx_buffer_t *b, const char *what) {
  atomic_fetch_add(&nxi_rt.drop_bad_frame, 1);
  nxi_log(1, NULL,
          "dropped a malformed or forged %s from process %#x (header flags "
          "%#x)",
          what, (unsigned)nxi_ctxid_proc(b->source), (unsigned)b->hflags);
}

/* Whether `b` came as a confirmation message from process `proc`. */
static int from(const nx_buffer_t *b, uint32_t proc) {
  return (b->hflags & NXI_FRAME_F_CTL) && proc != 0 &&
         proc == nxi_ctxid_proc(b->source);
}

/* The ledger's stage: never waits for room (the driver's tick asks too). */
static void ask(uint32_t proc, struct nxi_dlist *dl, unsigned gens, int fence) {
  ask_flags(proc, dl, gens, fence, NX_RSR_NONBLOCK);
}

static void on_ask(nx_context_t *ctx, void *address, nx_buffer_t *b) {
  (void)ctx;
  (void)address;
  uint32_t proc;
  uint8_t gens, fence;
  uint64_t asked_at;
  nx_gp_t reply = NX_GP_NULL;
  /* A process asks about itself, with a gp to itself to answer to. */
  if (nx_get_uint32(b, &proc) < 0 || !from(b, proc) ||
      nx_get_uint8(b, &gens) < 0 || nx_get_uint8(b, &fence) < 0 ||
      nx_get_gp(b, &reply) < 0 || nxi_ctxid_proc(reply.context) != proc ||
      nx_get_uint64(b, &asked_at) < 0) {
    refuse(b, "question");
    nx_gp_release(&reply);
    return;
  }
  nxi_ledger_route(proc, reply.protos);
  send_tell(proc, reply.protos, gens, fence != 0, 0, asked_at);
  /* What the failed route lost never comes: ordered streams from that
   * process stop waiting for it. */
  if (fence)
    nxi_order_skip(proc);
  nx_gp_release(&reply);
}

/* The ledger's stage: an ordered RSR its module could not deliver goes
 * again, with its number, over the route its process has now. */
static int resend(struct nx_buffer *b) {
  uint64_t context = b->context;
  uint32_t handler = b->handler;
  struct nxi_dlist *dl = nxi_dlist_of_proc(nxi_ctxid_proc(context));
  int r = NX_EUNREACH;
  if (dl != NULL) {
    b->dl = dl;
    r = nxi_route_resend(b);
    nxi_dlist_release(dl);
    if (r == NX_EAGAIN)
      return r;
  } else {
    nxi_buffer_free(b);
  }
  if (r < 0)
    nxi_drop(r, context, handler);
  return r;
}

/* The ledger's stage: `b` is a confirmation message for a process that is
 * not this one. A question gets "gone" back: that process ended (this
 * one runs at its address now), and what it did not confirm is lost. */
static void answer_gone(struct nx_buffer *b) {
  uint32_t proc;
  uint8_t gens, fence;
  nx_gp_t reply;
  if (b->handler != nx_handler_id(ASK) || nx_get_uint32(b, &proc) < 0 ||
      proc == 0 || nx_get_uint8(b, &gens) < 0 || nx_get_uint8(b, &fence) < 0 ||
      nx_get_gp(b, &reply) < 0)
    return;
  nx_buffer_t *out;
  if (nxi_ctxid_proc(reply.context) == proc &&
      nx_rsr_init_name(&out, &reply, GONE, 16) == 0) {
    out->ctl = NXI_FRAME_F_CTL;
    if (nx_put_uint32(out, nxi_ctxid_proc(b->context)) == 0)
      nx_rsr_send_flags(out, NX_RSR_NONBLOCK);
    else
      nx_buffer_release(out);
  }
  nx_gp_release(&reply);
}

static void on_gone(nx_context_t *ctx, void *address, nx_buffer_t *b) {
  (void)ctx;
  (void)address;
  uint32_t proc;
  /* Sent by the process that now runs where `proc` ran, never by `proc`.
   * Any peer could claim that `proc` is gone: it counts only once `proc`
   * has left this process's question unanswered for GONE_WAIT_NS. What
   * `proc` did not confirm is then reported lost (nxi_ledger_lost), but
   * its routes are not failed: the address they lead to serves the
   * process that answered, and a gp (a forged one, too) may have given a
   * list of another process `proc`'s name (dlist.c, interning), which
   * failing `proc`'s lists would cut off. */
  if (!(b->hflags & NXI_FRAME_F_CTL) || nx_get_uint32(b, &proc) < 0 ||
      proc == 0 || proc == nxi_rt.proc_id ||
      proc == nxi_ctxid_proc(b->source)) {
    refuse(b, "\"gone\"");
    return;
  }
  if (nxi_ledger_silent_for(proc, GONE_WAIT_NS))
    nxi_ledger_lost(proc, NX_EPEERDEAD);
}

/* Answers are taken as they are delivered (nxi_ledger_take_tell); one
 * that reaches its handler after all (malformed, in another process's
 * name, or sent as an ordinary RSR) is dropped here. */
static void on_tell(nx_context_t *ctx, void *address, nx_buffer_t *b) {
  (void)ctx;
  (void)address;
  refuse(b, "answer");
}

/* `proc` is no longer waited for (it acknowledged, or cannot). */
static void unawait(uint32_t proc) {
  nx_mutex_lock(&flush_m);
  for (int i = 0; i < nawaiting; i++)
    if (awaiting[i] == proc) {
      awaiting[i] = awaiting[--nawaiting];
      break;
    }
  nx_mutex_unlock(&flush_m);
}

/* The ledger's stage: `proc` told this process its final counts. */
static void send_ack(uint32_t proc, struct nxi_dlist *dl) {
  nx_gp_t to = nxi_initial_gp(proc, dl);
  nx_buffer_t *b;
  if (nx_rsr_init_name(&b, &to, ACK, 16) < 0)
    return;
  b->ctl = NXI_FRAME_F_CTL;
  if (nx_put_uint32(b, nxi_rt.proc_id) == 0)
    nx_rsr_send_flags(b, NX_RSR_NONBLOCK);
  else
    nx_buffer_release(b);
}

static void on_ack(nx_context_t *ctx, void *address, nx_buffer_t *b) {
  (void)ctx;
  (void)address;
  uint32_t proc;
  if (nx_get_uint32(b, &proc) < 0 || !from(b, proc)) {
    refuse(b, "acknowledgement");
    return;
  }
  unawait(proc);
  nx_cond_broadcast(&flush_c);
}

/* The ledger's stage: entries settled; flushing threads look again. It
 * runs where an answer is delivered, inside a module's progress, so it
 * takes no nexus mutex: one that is contended hands the driver's role to
 * another thread, which would then enter the module's progress while
 * this one is still inside it. A waiter that looked just before the
 * count moved sleeps until its next question is due (100 ms at most). */
static void wake(void) {
  atomic_fetch_add(&settled_gen, 1);
  nx_cond_broadcast(&flush_c);
}

/* The messages the ledger needs sent (ledger.h), and what the route layer
 * tells it (modules/dlist.h). */
static const struct nxi_ledger_stages ledger_stages = {
    .ask = ask,
    .ack = send_ack,
    .gone = answer_gone,
    .resend = resend,
    .wake = wake,
};

static const struct nxi_route_stages route_stages = {
    .lost = nxi_ledger_lost,
    .rerouted = nxi_ledger_rerouted,
    .known = nxi_ledger_known,
};

int nxi_confirm_init(void) {
  int r = nx_mutex_init(&flush_m);
  if (r < 0)
    return r;
  if ((r = nx_cond_init(&flush_c)) < 0)
    goto err_mutex;
  r = nx_handler_register(nxi_rt.initial, ASK, on_ask, NX_HANDLER_NONTHREADED,
                          NULL);
  if (r == 0)
    r = nx_handler_register(nxi_rt.initial, TELL, on_tell,
                            NX_HANDLER_NONTHREADED, NULL);
  if (r == 0)
    r = nx_handler_register(nxi_rt.initial, GONE, on_gone,
                            NX_HANDLER_NONTHREADED, NULL);
  if (r == 0)
    r = nx_handler_register(nxi_rt.initial, ACK, on_ack, NX_HANDLER_NONTHREADED,
                            NULL);
  if (r < 0)
    goto err_cond;
  nxi_ledger_tell_id = nx_handler_id(TELL);
  nxi_ledger_stages_set(&ledger_stages);
  nawaiting = 0;
  nxi_route_stages_set(&route_stages);
  return 0;

err_cond:
  nx_cond_destroy(&flush_c);
err_mutex:
  nx_mutex_destroy(&flush_m);
  return r;
}

void nxi_confirm_tell_all(int final) {
  uint32_t procs[ROUND_MAX];
  unsigned gens[ROUND_MAX];
  struct nxi_dlist *dls[ROUND_MAX];
  int n, told = 0;
  /* Each round marks its peers told: the next finds the others. */
  for (int round = 0; round < 1024; round++) {
    if ((n = nxi_ledger_untold(procs, gens, dls, ROUND_MAX)) == 0)
      break;
    for (int i = 0; i < n; i++) {
      /* Added first: the acknowledgement may come before the send returns.
       * A tell that could not be sent is not waited for. */
      if (final) {
        nx_mutex_lock(&flush_m);
        if (nawaiting < AWAIT_MAX)
          awaiting[nawaiting++] = procs[i];
        nx_mutex_unlock(&flush_m);
      }
      int r = send_tell(procs[i], dls[i], gens[i],
                        final ? NXI_LEDGER_TELL_FINAL : 0, 1, 0);
      if (r < 0)
        nxi_log(1, NULL, "nx_finalize: counts to process %#x not sent: %s",
                (unsigned)procs[i], nx_strerror(r));
      if (final && r < 0)
        unawait(procs[i]);
      told += r == 0;
      nxi_dlist_release(dls[i]);
    }
  }
  if (final && told > 0)
    nxi_log(2, NULL, "nx_finalize: final counts told to %d process(es)", told);
}

void nxi_confirm_wait_acks(int timeout_ms) {
  struct timespec ts = nxu_realtime_in((uint64_t)timeout_ms * 1000000u);
  /* Waiting here drives progress (waiter.c). */
  nx_mutex_lock(&flush_m);
  for (;;) {
    /* A process found lost meanwhile acknowledges nothing. */
    for (int i = 0; i < nawaiting;)
      if (nxi_ledger_is_lost(awaiting[i]))
        awaiting[i] = awaiting[--nawaiting];
      else
        i++;
    if (nawaiting == 0 || nx_cond_timedwait(&flush_c, &flush_m, &ts) != 0)
      break;
  }
  if (nawaiting > 0)
    nxi_log(1, NULL,
            "nx_finalize: %d process(es) did not acknowledge their final "
            "counts within %d ms",
            nawaiting, timeout_ms);
  nawaiting = 0;
  nx_mutex_unlock(&flush_m);
}

/* Flushes every process's RSRs, or `only`'s (when it is not 0). */
static int flush(uint32_t only, int timeout_ms) {
  uint64_t start = nxu_now_ns();
  uint64_t deadline =
      timeout_ms < 0 ? UINT64_MAX : start + (uint64_t)timeout_ms * 1000000u;
  /* Ask at once, then less often while answers are slow (up to 100 ms
   * apart): a peer handles the RSRs before the request, in order. */
  uint64_t gap_ns = 1000000u, next_ask = start;
  int r = 0;
  for (;;) {
    uint32_t procs[ROUND_MAX];
    struct nxi_dlist *dls[ROUND_MAX];
    unsigned gens[ROUND_MAX];
    uint64_t pending;
    unsigned gen = atomic_load(&settled_gen);
    int n = nxi_ledger_unsettled(procs, dls, gens, ROUND_MAX, &pending);
    if (only != 0)
      pending = nxi_ledger_pending_of(only);
    uint64_t now = nxu_now_ns();
    int asking = pending > 0 && now >= next_ask && now < deadline;
    for (int i = 0; i < n; i++) {
      if (asking && (only == 0 || procs[i] == only))
        ask(procs[i], dls[i], gens[i], 0);
      nxi_dlist_release(dls[i]);
    }
    if (pending == 0)
      break;
    if (now >= deadline) {
      nxi_log(1, NULL, "flush: %llu RSR(s) to %s not confirmed in %d ms",
              (unsigned long long)pending, only ? "one process" : "peers",
              timeout_ms);
      r = NX_ETIMEDOUT;
      break;
    }
    if (asking) {
      next_ask = now + gap_ns;
      gap_ns = gap_ns < 100000000u ? gap_ns * 2 : gap_ns;
    }
    /* Until an answer settles something, the next request is due, or the
     * deadline: waiting here drives progress (waiter.c). */
    uint64_t until = next_ask < deadline ? next_ask : deadline;
    struct timespec ts = nxu_realtime_in(until > now ? until - now : 0);
    nx_mutex_lock(&flush_m);
    while (atomic_load(&settled_gen) == gen &&
           nx_cond_timedwait(&flush_c, &flush_m, &ts) == 0)
      ;
    nx_mutex_unlock(&flush_m);
  }
  return r;
}

int nxi_confirm_flush(int timeout_ms) { return flush(0, timeout_ms); }

void nxi_confirm_clock_end(uint32_t only, int timeout_ms) {
  if (!nxi_tracing())
    return;
  uint32_t procs[ROUND_MAX];
  struct nxi_dlist *dls[ROUND_MAX];
  int n = nxi_ledger_probe_targets(only, procs, dls, ROUND_MAX);
  for (int i = 0; i < n; i++) {
    ask(procs[i], dls[i], 0, 0); /* no counts: the clocks alone */
    nxi_dlist_release(dls[i]);
  }
  /* The answers come as progress runs: waiting drives it (waiter.c). */
  uint64_t deadline = nxu_now_ns() + (uint64_t)timeout_ms * 1000000u;
  while (n > 0 && nxi_ledger_probes_out(only) > 0 && nxu_now_ns() < deadline) {
    struct timespec ts = nxu_realtime_in(1000000u);
    nx_mutex_lock(&flush_m);
    nx_cond_timedwait(&flush_c, &flush_m, &ts);
    nx_mutex_unlock(&flush_m);
  }
}

void nxi_confirm_drain(int timeout_ms) {
  uint64_t deadline = nxu_now_ns() + (uint64_t)timeout_ms * 1000000u;
  while (atomic_load(&nxi_ctl_inflight) > 0 && nxu_now_ns() < deadline)
    nxi_progress_help();
}

int nxi_confirm_flush_proc(uint32_t proc, int timeout_ms) {
  return flush(proc, timeout_ms);
}

int nx_flush(int timeout_ms) {
  if (timeout_ms < -1)
    return NX_EINVAL;
  if (!nxi_ready())
    return NX_ENOTINIT;
  if (nxi_in_handler())
    return NX_EBUSY; /* the answers need the progress this handler holds */
  return nxi_confirm_flush(timeout_ms);
}

void nxi_confirm_finalize(void) {
  nxi_route_stages_set(NULL);
  nxi_ledger_stages_set(NULL);
  nx_cond_destroy(&flush_c);
  nx_mutex_destroy(&flush_m);
}
