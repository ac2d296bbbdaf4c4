/* Remote service requests: start a buffer for a handler at a gp, then hand the
 * sealed frame to the chosen protocol. */
#include "rsr/dispatch.h"
#include "buffers/buf.h"
#include "contexts/context.h"
#include "modules/dlist.h"
#include "engine/engine.h"
#include "buffers/frame.h"
#include "rsr/stages.h"
#include "rsr/order.h"
#include "rsr/send.h"
#include "base/trace.h"
#include "modules/module.h"

int nx_rsr_init(nx_buffer_t **buf, const nx_gp_t *gp, nx_handler_id_t handler,
                size_t size_hint) {
  if (buf == NULL || gp == NULL || gp->context == 0 || gp->protos == NULL ||
      handler == 0)
    return NX_EINVAL;
  if (!nxi_ready())
    return NX_ENOTINIT;
  struct nx_buffer *b = nxi_buffer_alloc(size_hint);
  if (b == NULL)
    return NX_ENOMEM;
  b->kind = NXI_BUF_SEND;
  b->handler = handler;
  b->context = gp->context;
  b->address = gp->address;
  b->dl = gp->protos;
  atomic_store_explicit(&b->urefs, NXI_UREFS_RSR, memory_order_release);
  *buf = b;
  return 0;
}
int nx_rsr_init_name(nx_buffer_t **buf, const nx_gp_t *gp, const char *handler,
                     size_t size_hint) {
  if (handler == NULL || handler[0] == '\0')
    return NX_EINVAL;
  return nx_rsr_init(buf, gp, nx_handler_id(handler), size_hint);
}

/* Counts one more (n = 1) or one less (n = -1) in `count`, or in this
 * thread's rsr_sent when `count` is NULL (a program's RSR). */
static void count_add(atomic_uint_fast64_t *count, int n) {
  if (count == NULL)
    nxi_count_sent(n);
  else if (n > 0)
    atomic_fetch_add_explicit(count, 1, memory_order_relaxed);
  else
    atomic_fetch_sub_explicit(count, 1, memory_order_relaxed);
}

/* The module has a transfer to progress: poll it every round again
 * (dispatch.c). Written only when it changes: senders on several threads
 * would otherwise bounce the line. */
static inline void mark_sent(struct nxi_module *m) {
  if (!atomic_load_explicit(&m->sent, memory_order_relaxed))
    atomic_store_explicit(&m->sent, 1, memory_order_relaxed);
}

/* The program's RSR, as its NXT_SEND records it: taken from the buffer
 * before the module has it (it may be gone after), recorded once the
 * module took it (a send refused, with NX_EAGAIN say, is no RSR sent). */
struct send_rec {
  uint64_t source, dest, bytes, t;
  uint32_t handler;
  uint8_t module;
  uint16_t flags;
};

/* `b`, about to go to `rt`'s module, into *t; 1, or 0 when it is in the
 * trace already (a resend) or now (`wire` 0: it stays in this process,
 * where nothing refuses it). `b` counts as traced unless trace_sent says
 * its module refused it. */
static __attribute__((noinline, cold)) int
trace_take(struct nx_buffer *b, const struct nxi_route *rt, struct send_rec *t,
           int wire) {
  if (b->traced)
    return 0;
  b->traced = 1;
  uint16_t f = (b->order != 0 ? NXT_F_ORDERED : 0) |
               (b->xr != NULL && b->xr->bytes != 0 ? NXT_F_BYREF : 0);
  if (!wire) {
    nxi_trace_send(b->source, b->context, b->handler, nxi_buffer_wire_len(b),
                   nxi_module_index(rt->mod), f, nxi_trace_stamp());
    return 0;
  }
  t->source = b->source;
  t->dest = b->context;
  t->bytes = nxi_buffer_wire_len(b);
  t->handler = b->handler;
  t->module = nxi_module_index(rt->mod);
  t->flags = f;
  t->t = nxi_trace_stamp();
  return 1;
}

/* After the module's answer `r`: the record if it took the RSR; else `b`
 * (still the caller's) goes untraced, to be taken again when it goes. */
static __attribute__((noinline, cold)) void
trace_sent(const struct send_rec *t, int r, struct nx_buffer *b) {
  if (r >= 0)
    nxi_trace_send(t->source, t->dest, t->handler, t->bytes, t->module,
                   t->flags, t->t);
  else
    b->traced = 0;
}

/* A send waits for room in a full queue (`begin`), or waited. */
static __attribute__((noinline, cold)) void
trace_wait(int begin, uint64_t source, uint64_t dest,
           const struct nxi_module *m) {
  nxi_trace_event(begin ? NXT_WAIT_BEGIN : NXT_WAIT_END, source, dest, 0, 0,
                  m != NULL ? nxi_module_index(m) : 0xff, 0, 0, 0);
}

/* The module's send flags for `b`: the caller's, and NX_PROTOCOL_SEND_EXEMPT
 * (protocol.h) for the runtime's own messages, for what a handler sends
 * (threaded ones too: a handler waiting for room would poll on its stack,
 * and the threaded handlers that poll dispatches would wait and poll on
 * theirs, one inside the other) and for what is sent from inside progress
 * (a frame a gateway passes on). The bound on frames paces the program's
 * own threads. */
static inline unsigned module_flags(const struct nx_buffer *b, unsigned flags) {
  if ((b->hflags & NXI_FRAME_F_CTL) || nxi_driving() || nxi_current != NULL)
    flags |= NX_PROTOCOL_SEND_EXEMPT;
  return flags;
}

/* Hands the sealed frame to the route's module. The buffer is the module's
 * unless this fails. */
static int send_on(struct nx_buffer *b, struct nxi_route *rt, unsigned flags,
                   atomic_uint_fast64_t *count) {
  flags = module_flags(b, flags);
  nxi_buffer_refs_status(b, 0);
  count_add(count, 1);
  struct send_rec tr;
  int traced = count == NULL && nxi_tracing() && trace_take(b, rt, &tr, 1);
  /* A full queue to the peer: help the transfers along, then try again
   * (memory stays bounded; the module says when it has room). */
  int r, waited = 0;
  uint64_t source = 0, dest = 0; /* of a wait traced: `b` goes when sent */
  for (;;) {
    /* An endpoint reported dead gets no more sends. */
    if ((r = nx_endpoint_failed(rt->ep)) != 0)
      break;
    if (traced) /* the attempt that may take it: after what ran meanwhile */
      tr.t = nxi_trace_stamp();
    r = rt->mod->ops->send(rt->mod->state, rt->ep, &b->frame, flags);
    if (r != NX_EAGAIN || (flags & NX_RSR_NONBLOCK))
      break;
    if (!waited && nxi_tracing()) {
      waited = 1;
      source = b->source;
      dest = b->context;
      trace_wait(1, source, dest, rt->mod);
    }
    nxi_progress_help();
  }
  if (traced) /* before the wait's end, stamped before it */
    trace_sent(&tr, r, b);
  if (waited)
    trace_wait(0, source, dest, rt->mod);
  if (r < 0)
    count_add(count, -1);
  else
    mark_sent(rt->mod);
  return r;
}

/* Seals `b` for its list's route and sends it. A route whose send fails
 * (not for a full queue) is replaced by the next candidate and the RSR
 * goes there (dlist.c); a list runs out of candidates long before this
 * loop's bound. A frame a gateway passes on (`forwarding`) goes over a
 * direct route only, and counts as forwarded; it keeps its header's flags
 * (its source and order travel in the buffer), and its sender's ledger
 * keeps it. Every other RSR for another process is entered in the ledger
 * (stages.h: reliability) before its send, and voided if it is not accepted. On
 * a failure the buffer is freed, except for NX_EAGAIN with `keep`; on success
 * *ask is the peer to ask for confirmations (the ask stage). */
static int route_send(struct nx_buffer *b, unsigned flags, int forwarding,
                      int keep, struct nxi_peer **ask_peer) {
  int r = 0;
  struct nxi_route *hop = NULL;
  uint16_t hflags = b->ctl;
  int ask = 0, note = !forwarding && !b->ctl;
  if (forwarding)
    hflags = b->hflags;
  b->peer = NULL;
  struct nxi_peer *peer = NULL;
  for (int tries = 0; tries < 2 * NXI_MAX_MODULES + 2; tries++) {
    struct nxi_route *rt;
    if ((r = nxi_dlist_route(b->dl, &rt)) < 0)
      break;
    if (forwarding && rt->via != NULL) {
      r = NX_EUNREACH; /* one hop: gateways do not pass frames on to others */
      break;
    }
    hop = rt;
    /* Through a gateway: sent over the gateway's own route. */
    if (rt->via != NULL && (r = nxi_dlist_route(rt->via, &hop)) < 0) {
      if (nxi_route_fail(rt, r))
        continue;
      break;
    }
    nxi_buffer_seal(b);
    /* Values put by reference: sent from where they are by a module that
     * takes that many iovecs, copied into the data once for any other. */
    if (b->frame.iovcnt > 2 &&
        (uint32_t)b->frame.iovcnt > hop->mod->ops->iov_max) {
      if ((r = nxi_buffer_flatten(b)) < 0)
        break;
      nxi_buffer_seal(b);
    }
    /* The receiver counts what it handled per origin and route
     * generation (stages.h); a gateway tells the origin of losses. Entered
     * in the ledger with the generation of the route it goes on. */
    if (note) {
      ask = nxi_rel()->note(b, rt->gen);
      peer = b->peer;
      hflags = (uint16_t)(rt->gen << NXI_FRAME_GEN_SHIFT);
    }
    b->hflags = hflags;
    if (hflags != 0)
      nxi_frame_hdr_set_flags(b->hdr, hflags);
    /* The runtime's own messages count in no counter of the program's. */
    static atomic_uint_fast64_t ctl_sent;
    r = send_on(b, hop, flags,
                (hflags & NXI_FRAME_F_CTL) ? &ctl_sent
                : forwarding               ? &nxi_rt.rsr_forwarded
                                           : NULL);
    if (r >= 0 && (hflags & NXI_FRAME_F_CTL) && !forwarding)
      atomic_fetch_add(&nxi_ctl_inflight, 1);
    if (r == NX_PROTOCOL_SENT) {
      nxi_send_done(b, 0); /* sent at once: no send_done comes */
      r = 0;
    }
    if (r >= 0 || r == NX_EAGAIN || !nxi_route_fail(hop, r))
      break;
    nxi_rel()->voided(b); /* entered again for the next route */
  }
  *ask_peer = NULL;
  if (r < 0) {
    nxi_rel()->voided(b); /* not accepted: the caller has the error */
    if (keep && r == NX_EAGAIN)
      return r;
    nxi_buffer_refs_status(b, r);
    nxi_buffer_free(b);
  } else if (ask) {
    *ask_peer = peer; /* `b` may be gone: the module owns it */
  }
  return r;
}

/* route_send, then the confirmation question it found due. */
static int send_and_ask(struct nx_buffer *b, unsigned flags, int forwarding,
                        int keep) {
  struct nxi_peer *peer;
  int r = route_send(b, flags, forwarding, keep, &peer);
  if (peer != NULL)
    nxi_rel()->ask(peer);
  return r;
}

int nxi_route_send(struct nx_buffer *b, unsigned flags, int forwarding) {
  return send_and_ask(b, flags, forwarding, 0);
}

int nxi_route_resend(struct nx_buffer *b) {
  return send_and_ask(b, NX_RSR_NONBLOCK, 0, 1);
}

/* An RSR of an ordered stream (order.h): numbered and sent under the
 * stream's send lock, so that numbers leave in the order they are taken,
 * and a number is used only once the module accepted its RSR. The lock is
 * never held while progress runs (handlers there may send on the same
 * stream): a full queue lets it go, helps progress, and tries again. */
static __attribute__((noinline)) int ordered_send(struct nx_buffer *b,
                                                  unsigned flags) {
  struct nxi_ostream *s = nxi_order_stream(b->source, b->context);
  if (s == NULL) {
    nxi_buffer_refs_status(b, NX_ENOMEM);
    nxi_buffer_free(b);
    return NX_ENOMEM;
  }
  int waited = 0;
  uint64_t source = 0, dest = 0; /* of a wait traced: `b` goes when sent */
  for (;;) {
    struct nxi_peer *peer;
    b->order = nxi_order_send_begin(s);
    int r = route_send(b, flags | NX_RSR_NONBLOCK, 0,
                       !(flags & NX_RSR_NONBLOCK), &peer);
    nxi_order_send_end(s, r >= 0);
    if (peer != NULL)
      nxi_rel()->ask(peer);
    if (r != NX_EAGAIN || (flags & NX_RSR_NONBLOCK)) {
      if (waited)
        trace_wait(0, source, dest, NULL);
      return r;
    }
    if (!waited && nxi_tracing()) {
      waited = 1;
      source = b->source;
      dest = b->context;
      trace_wait(1, source, dest, NULL);
    }
    nxi_progress_help(); /* the module's queue is full: let it drain */
  }
}

/* The fast path (docs/design.md, "The RSR path: fast and slow"): an
 * unordered RSR of the program's, with no values by reference, to a
 * destination whose cached route is direct and up. Straight through: seal,
 * account, one call into the module. Returns 0 (sent), NX_EAGAIN (a full
 * queue with NX_RSR_NONBLOCK: `b` freed), or NXI_SLOW when it does not
 * apply or the module refused the frame otherwise, having undone what it
 * did: route_send then takes the RSR from the start. */
#define NXI_SLOW 1

/* fast_send's part for a module that puts frames on a wire: sealed,
 * entered by reliability (stages.h) with the generation of its route, one
 * call into the module. Out of line: the in-process RSR pays none of its
 * registers. */
static __attribute__((noinline)) int
wire_send(struct nx_buffer *b, struct nxi_route *rt, unsigned flags) {
  nxi_buffer_seal(b);
  int ask = 0;
  if (nxi_ctxid_proc(b->context) != nxi_rt.proc_id) {
    ask = nxi_rel()->note(b, rt->gen);
  } else {
    b->peer = NULL;
    b->gen = (uint8_t)rt->gen;
  }
  struct nxi_peer *peer = b->peer;
  b->hflags = (uint16_t)(rt->gen << NXI_FRAME_GEN_SHIFT);
  if (b->hflags != 0)
    nxi_frame_hdr_set_flags(b->hdr, b->hflags);
  /* In the trace once the module took it. */
  struct send_rec tr;
  int traced = nxi_tracing() && trace_take(b, rt, &tr, 1);
  /* Counted before the module has it: a handler that reads nx_stats never
   * sees its own RSR handled but not yet sent. */
  nxi_count_sent(1);
  int r = rt->mod->ops->send(rt->mod->state, rt->ep, &b->frame,
                             module_flags(b, flags));
  if (traced)
    trace_sent(&tr, r, b);
  if (r < 0) {
    nxi_count_sent(-1);
    nxi_rel()->voided(b);
    if (r != NX_EAGAIN || !(flags & NX_RSR_NONBLOCK))
      return NXI_SLOW;  /* a full queue to wait on, or a route that failed */
    nxi_buffer_free(b); /* full, and the caller does not wait */
    return r;
  }
  if (r == NX_PROTOCOL_SENT)
    nxi_buffer_free(b); /* sent at once, and no RSR of the runtime's */
  /* `b` may be gone: the module owns it. */
  mark_sent(rt->mod);
  if (ask)
    nxi_rel()->ask(peer);
  return 0;
}

static inline int fast_send(struct nx_buffer *b, unsigned flags) {
  struct nxi_dlist *dl = b->dl;
  struct nxi_route *rt = atomic_load_explicit(&dl->route, memory_order_acquire);
  if (rt == NULL || rt->via != NULL || b->xr != NULL || b->ctl != 0 ||
      atomic_load_explicit(&dl->failed, memory_order_relaxed) != 0 ||
      atomic_load_explicit(&rt->failed, memory_order_relaxed) != 0 ||
      nx_endpoint_failed(rt->ep))
    return NXI_SLOW;
  if (!rt->mod->ops->in_process)
    return wire_send(b, rt, flags);
  /* A frame that stays in this process needs no wire header (its
   * receiver reads the buffer's fields: protocol.h, in_process) and is
   * entered nowhere: a module whose frames stay here would only hand it
   * back, so the core hands it over itself, as core_handover does, a call
   * into the module and one back the fewer. It holds no values by
   * reference and is no runtime message (tested above): it is queued as it
   * is (nxi_requeue_local: on the driver's own queue when this thread holds
   * the driver lock), and in the trace at once (never refused). Counted
   * before it is queued, as wire_send counts. */
  if (__builtin_expect(nxi_ctxid_proc(b->context) != nxi_rt.proc_id, 0)) {
    (void)nxi_rel()->note(b, rt->gen); /* an earlier run's context, say */
  } else {
    b->peer = NULL;
    b->gen = (uint8_t)rt->gen;
  }
  b->hflags = (uint16_t)(rt->gen << NXI_FRAME_GEN_SHIFT);
  if (nxi_tracing())
    trace_take(b, rt, NULL, 0);
  nxi_count_sent(1);
  b->kind = NXI_BUF_RECV;
  b->pos = 0;
  nxi_requeue_local(b);
  return 0;
}

int nx_rsr_send_flags(nx_buffer_t *b, unsigned flags) {
  /* A buffer already sent (or released) may be freed, reused or queued
   * in a module by now: only its `urefs` word may be read (a slot of
   * type-stable memory, bufmem.c), and taking it decides. */
  unsigned unsent = NXI_UREFS_RSR;
  if (b == NULL ||
      !atomic_compare_exchange_strong_explicit(
          &b->urefs, &unsent, 0, memory_order_acquire, memory_order_relaxed))
    return NX_EINVAL;
  /* From here on the buffer is the runtime's. */
  atomic_store_explicit(&b->refs, 1, memory_order_relaxed);
  b->source = nxi_context_self_id();
  if (!nxi_ready()) {
    nxi_buffer_refs_status(b, NX_ENOTINIT);
    nxi_buffer_free(b);
    return NX_ENOTINIT;
  }
  if (flags & NX_RSR_ORDERED)
    return ordered_send(b, flags & ~NX_RSR_ORDERED);
  int r = fast_send(b, flags);
  if (r != NXI_SLOW)
    return r;
  return nxi_route_send(b, flags, 0);
}

int nx_rsr_send(nx_buffer_t *b) { return nx_rsr_send_flags(b, 0); }

void nxi_send_done(struct nx_buffer *b, int status) {
  if (b->ctl)
    atomic_fetch_sub(&nxi_ctl_inflight, 1);
  if (status < 0) {
    int open = nxi_rel()->voided(b);
    /* An ordered RSR of this process's goes again over the next route
     * (stages.h); one a gateway passed on is its sender's to report. */
    if (open && b->order != 0 && !b->ctl &&
        nxi_ctxid_proc(b->source) == nxi_rt.proc_id && nxi_rel()->resend(b))
      return;
    nxi_buffer_refs_status(b, status);
    if (open && !b->ctl)
      nxi_drop(status, b->context, b->handler);
  }
  nxi_buffer_free(b);
}
