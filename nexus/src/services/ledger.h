/* The ledger (ledger.c): per peer process, the RSRs this process accepted
 * for it that it has not yet heard were handled there, and how many of that
 * peer's RSRs ran here. It keeps the rule of docs/design.md section 9: an
 * accepted RSR is handled at its destination, or its sender hears of its
 * loss. The RSR layer reaches it through the reliability stages it
 * registers (rsr/stages.h); it sends nothing itself: confirm.c sends the
 * messages through the ledger's own stages (struct nxi_ledger_stages). */
#ifndef NXI_LEDGER_H
#define NXI_LEDGER_H

#include "buffers/buf.h"

/* RSRs to one process after which its sender asks for confirmation. */
#define NXI_LEDGER_WINDOW 256u

struct nxi_peer;

/* Sending. An RSR `b` for another process is entered before its send on a
 * route of generation `gen` (b->peer, b->seq, b->gen); returns 1 when the peer
 * should be asked for its count now (call nxi_ledger_ask after the send). The
 * entry is voided when the RSR is not accepted after all (the caller got the
 * error) or its module reported it failed (send_done: reported there). */
int nxi_ledger_note(struct nx_buffer *b, unsigned gen);
/* Returns 1 if the caller should report the RSR (its entry was open, or it
 * had none), 0 if the ledger reported it already. */
int nxi_ledger_void(struct nx_buffer *b);

/* The driver's clock tick (the reliability tick stage, every poll round
 * once due): every NXI_LEDGER_TICK_NS, peers whose RSRs stayed unconfirmed
 * for 200 ms with no request out are asked, so that what a peer handled is
 * known here soon, even when this process sends nothing more. */
#define NXI_LEDGER_TICK_NS (10 * 1000 * 1000ull)
void nxi_ledger_tick_run(uint64_t now);

/* Asks `p` for its counts, through the ask stage confirm.c registers. */
void nxi_ledger_ask(struct nxi_peer *p);

/* A question went to `proc` (confirm.c), carrying `clock` (0: none): the
 * first since its last answer starts the silence nxi_ledger_silent_for
 * measures; the answer that echoes `clock` gives a clock offset. */
void nxi_ledger_asked(uint32_t proc, uint64_t clock);
/* Tracing, at the end (nx_finalize, or a process context's destroy): the
 * live peers this process has a route to (`only` that one, if not 0;
 * references to their lists, up to `max`), to ask once more for the
 * clock offset at the end; and how many questions to them that carried
 * a clock are still unanswered. */
int nxi_ledger_probe_targets(uint32_t only, uint32_t *procs,
                             struct nxi_dlist **dls, int max);
int nxi_ledger_probes_out(uint32_t only);
/* Whether `proc` has left a question unanswered for `ns` or longer. */
int nxi_ledger_silent_for(uint32_t proc, uint64_t ns);

/* Process `proc` says it has handled `count` of this process's RSRs of
 * generation `gen`: the oldest entries of that generation are settled. */
void nxi_ledger_confirm(uint32_t proc, unsigned gen, uint64_t count);
/* ... in answer to a fence about `gens`: what of those generations is
 * still unconfirmed was lost with its route, and is reported. */
void nxi_ledger_fenced(uint32_t proc, unsigned gens);
/* The fence byte of an answer: 0 asked, 1 a fence's, 2 the final counts a
 * process tells as it finalizes, which the receiver acknowledges
 * ("nx.ledger.ack", sent by the driver's tick through the ack stage
 * confirm.c registers), so that the finalizing process waits until they
 * arrived. */
#define NXI_LEDGER_TELL_FINAL 2
/* A route to `proc` of generation `gen` failed with `status` and another
 * replaced it (the route layer's rerouted stage): 100 ms later its unconfirmed
 * RSRs are asked about with a fence over the new route, and what the answer
 * does not confirm (or all of it, when no answer came within 2 s) is reported
 * with `status`. */
void nxi_ledger_rerouted(uint32_t proc, unsigned gen, int status);
/* The handler id of that answer (confirm.c sets it). A received answer is
 * taken where it is delivered (nxi_deliver): it settles entries before
 * the module reports its sender gone, when that was the sender's last
 * word. An answer whose process is not its frame's origin (the high half
 * of its `source`) is not taken. Returns 1 if it took (and released)
 * `b`. */
extern uint32_t nxi_ledger_tell_id;
int nxi_ledger_take_tell(struct nx_buffer *b);
/* A confirmation message `b` for a process that is not (or no longer)
 * this one: a question is answered "gone" through the gone stage confirm.c
 * registers; anything else is dropped unreported. */
void nxi_ledger_gone(struct nx_buffer *b);
/* Process `proc` is gone: every entry it has not confirmed is reported to
 * the error callback with `status`, one RSR at a time. */
void nxi_ledger_lost(uint32_t proc, int status);

/* An ordered RSR (order.h) that its module could not deliver, its entry
 * voided: rather than reported lost, it is sent again over the process's
 * next route by the driver's tick, through the resend stage of confirm.c,
 * with its number, so that what follows it in its stream is not held
 * back for good. Returns 1 if it took `b`. A duplicate (the module could
 * not tell it was delivered) is dropped by its number at the receiver.
 * nx_flush counts these RSRs as unsettled until they are sent again. The
 * stage returns 0 (sent), NX_EAGAIN (kept for the next tick) or another
 * negative code (freed and reported). */
int nxi_ledger_resend(struct nx_buffer *b);

/* Receiving: the received RSR `b` was handled (or dropped, and reported
 * here) in this process. Counted for its origin and generation, unless it
 * came from this process or is the runtime's own; an origin that is not a
 * peer (never sent to, never asking) is counted among a bounded set of
 * strays (ledger.c), not given a peer. Call it before the handler runs
 * (the handler may release `b`). The RSR layer calls it through the
 * handled stage, for an RSR from another process only
 * (nxi_stage_handled). */
void nxi_ledger_handled_from_peer(const struct nx_buffer *b);
/* How many of process `proc`'s RSRs of generation `gen` were handled
 * here. */
uint64_t nxi_ledger_handled_from(uint32_t proc, unsigned gen);

/* Flushing. Writes up to `max` processes that have unconfirmed RSRs into
 * procs (with a list to reach each, retained: release them, and the
 * generations to ask about) and returns their number; the total of
 * unconfirmed RSRs goes to *pending. */
int nxi_ledger_unsettled(uint32_t *procs, struct nxi_dlist **dls,
                         unsigned *gens, int max, uint64_t *pending);
/* Whether process `proc` was found lost. */
int nxi_ledger_is_lost(uint32_t proc);
/* Unconfirmed RSRs to process `proc`. */
uint64_t nxi_ledger_pending_of(uint32_t proc);
/* Reports every unconfirmed RSR with `status` and settles it; returns how
 * many. */
uint64_t nxi_ledger_report_all(int status);
/* Up to `max` processes whose RSRs ran here since this process last told
 * them (with a list to reach each, retained, and the generations whose
 * counts grew). */
int nxi_ledger_untold(uint32_t *procs, unsigned *gens, struct nxi_dlist **dls,
                      int max);
/* Process `proc` was told `count` for generation `gen`. */
void nxi_ledger_told(uint32_t proc, unsigned gen, uint64_t count);
/* A list that reaches `proc` is `dl` (from a request it sent, naming the
 * list to answer to): kept in place of any other, so that this process
 * can tell it its count unasked. */
void nxi_ledger_route(uint32_t proc, struct nxi_dlist *dl);
/* The same for a process the ledger already knows (it sent here or was
 * sent to), with no list yet, a stray included: the route layer's known
 * stage. */
void nxi_ledger_known(uint32_t proc, struct nxi_dlist *dl);

/* The ledger's stages (docs/design.md, "Stages"): the messages it needs
 * sent, which confirm.c sends and registers at nx_init (NULL: none; then
 * nothing is asked, acknowledged or answered, and RSRs to send again are
 * reported instead).
 *  - ask: asks `proc` (over `dl`) for its counts of the generations in
 *    `gens` (a bit each), as a fence if `fence`;
 *  - ack: acknowledges `proc`'s final counts (NXI_LEDGER_TELL_FINAL);
 *  - gone: answers a question `b` for a process that is not this one;
 *  - resend: sends an ordered RSR again (nxi_ledger_resend);
 *  - wake: entries settled (wakes nothing by itself): waiters recheck. */
struct nxi_ledger_stages {
  void (*ask)(uint32_t proc, struct nxi_dlist *dl, unsigned gens, int fence);
  void (*ack)(uint32_t proc, struct nxi_dlist *dl);
  void (*gone)(struct nx_buffer *b);
  int (*resend)(struct nx_buffer *b);
  void (*wake)(void);
};
void nxi_ledger_stages_set(const struct nxi_ledger_stages *s);

/* nx_init and nx_finalize: the ledger starts empty and is freed; it
 * registers its reliability stages with the RSR layer (rsr/stages.h) and
 * removes them. */
void nxi_ledger_init(void);
void nxi_ledger_finalize(void);

#endif /* NXI_LEDGER_H */
