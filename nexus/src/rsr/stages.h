/* The RSR layer's stages (stages.c; docs/design.md, "Stages"): the points
 * of the send and receive paths where the services above it (services/:
 * reliability, gateways) do their part. A service registers its table at
 * init and removes it at finalize; the RSR layer calls through the table
 * and never names a service. With nothing registered a stage does nothing
 * (the defaults in stages.c say what "nothing" is for each). */
#ifndef NXI_STAGES_H
#define NXI_STAGES_H

#include "buffers/buf.h"
#include "buffers/frame.h"

struct nxi_peer;

/* Reliability (services/ledger.c): "nothing accepted is lost without a
 * report" (docs/design.md section 9). */
struct nxi_reliability_stages {
  /* Before an RSR `b` for another process goes on a route of generation
   * `gen`: entered (b->peer, b->seq, b->gen). Returns 1 when the peer
   * should be asked for its count after the send (ask). Default: 0. */
  int (*note)(struct nx_buffer *b, unsigned gen);
  /* The entry of `b` is voided (not accepted after all, or its module
   * failed it). Returns 1 if the caller reports the RSR, 0 if reliability
   * did already. Default: 1. */
  int (*voided)(struct nx_buffer *b);
  /* Asks peer `p` for its counts (note returned 1). Default: nothing. */
  void (*ask)(struct nxi_peer *p);
  /* An ordered RSR its module could not deliver, entry voided: returns 1
   * if reliability took `b` to send it again. Default: 0. */
  int (*resend)(struct nx_buffer *b);
  /* A received RSR from another process was handled (or dropped and
   * reported) here; called before its handler runs. Default: nothing. */
  void (*handled)(const struct nx_buffer *b);
  /* A runtime message (NXI_FRAME_F_CTL) for this process as it is
   * delivered: returns 1 if reliability took it there (an answer settles
   * entries before its sender can be reported gone). Default: 0. */
  int (*take)(struct nx_buffer *b);
  /* A runtime message for a context that is not here: answered "gone"
   * or dropped; the caller releases `b`. Default: nothing. */
  void (*gone)(struct nx_buffer *b);
  /* The driver's clock (every poll round once `now` reaches
   * nxi_stage_tick_at): reliability's timers. Default: nothing. */
  void (*tick)(uint64_t now);
};

/* Gateways (services/gateway.c): a received frame for a context of another
 * process is passed on. Returns 1 if `forward` took `b`. */
struct nxi_gateway_stages {
  int (*forward)(struct nx_buffer *b);
};

/* The tables in use (never NULL: the defaults when nothing registered). */
extern const struct nxi_reliability_stages *_Atomic nxi_reliability;
extern const struct nxi_gateway_stages *_Atomic nxi_gateway;

/* Registers `s` (NULL: back to the defaults). */
void nxi_reliability_stages_set(const struct nxi_reliability_stages *s);
void nxi_gateway_stages_set(const struct nxi_gateway_stages *s);

static inline const struct nxi_reliability_stages *nxi_rel(void) {
  return atomic_load_explicit(&nxi_reliability, memory_order_acquire);
}

/* When the tick stage runs next (ns, nxu_now_ns); 0: at the next round.
 * Reliability writes it. */
extern atomic_uint_fast64_t nxi_stage_tick_at;
static inline void nxi_stage_tick(uint64_t now) {
  if (now >= atomic_load_explicit(&nxi_stage_tick_at, memory_order_relaxed))
    nxi_rel()->tick(now);
}

/* Runtime messages a module accepted and has not yet completed
 * (send_done): nx_finalize lets its last ones out before the modules go. */
extern atomic_long nxi_ctl_inflight;

/* A received RSR `b` was handled here (or dropped and reported): counted
 * by reliability when it came from another process and is not the
 * runtime's own. Inline: an RSR from this process costs a test. */
static inline void nxi_stage_handled(const struct nx_buffer *b) {
  uint32_t origin = nxi_ctxid_proc(b->source);
  if (origin != 0 && origin != nxi_rt.proc_id && !(b->hflags & NXI_FRAME_F_CTL))
    nxi_rel()->handled(b);
}

#endif /* NXI_STAGES_H */
