/* Tracing (docs/tracing.md): with NX_TRACE=<dir>, this process writes what
 * it does to an event log in <dir> (base/trace_format.h), which nxtrace
 * turns into one OTF2 archive for the computation. Off by default; then
 * each trace point is one test of a plain flag that never changes while
 * the runtime runs, and predicted not taken. */
#ifndef NXI_TRACE_H
#define NXI_TRACE_H

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "base/rt.h"
#include "base/trace_format.h"

/* Set by nxi_trace_start before the runtime sends or handles anything,
 * cleared by nxi_trace_stop after it stopped: read without a fence.
 * Hidden: a test is then one compare with memory and a jump, not a load
 * of its address first. */
extern int nxi_trace_on __attribute__((visibility("hidden")));

static inline int nxi_tracing(void) {
  return __builtin_expect(nxi_trace_on, 0);
}

/* At nx_init, once the process's id is known: opens the log if NX_TRACE
 * names a folder (creating it). Returns 0, or NX_EIO/NX_EINVAL when it
 * is set and the log cannot be written (nx_init fails: a trace that was
 * asked for is not silently missing). */
int nxi_trace_start(void);
/* At nx_finalize, last: writes every thread's records and closes the
 * log. Later events are not recorded. */
void nxi_trace_stop(void);

/* Records one event (trace_format.h names the fields each type uses);
 * call only when nxi_tracing(). `bytes` saturates at UINT32_MAX. */
void nxi_trace_event(uint8_t type, uint64_t ctx, uint64_t peer,
                     uint32_t handler, uint64_t bytes, uint8_t module,
                     uint16_t flags, uint32_t aux, uint64_t x);
/* Records a name (NXT_DEF_HANDLER, NXT_DEF_MODULE). */
void nxi_trace_name(uint8_t type, uint64_t ctx, uint32_t handler,
                    uint8_t module, const char *name);
/* Each thread's buffer of records (trace.c keeps the list of them). 16
 * KiB, some 200 RSRs: with 48 a traced RSR cost 114-125 ns in
 * bench_rsr_local, with 16 79-94 (docs/performance.md, "Tracing"). */
#define NXI_TB_BYTES (16 * 1024)
struct nxi_tbuf {
  atomic_int busy;        /* its thread is putting a record in (own()) */
  atomic_int open;        /* records are taken (between start and stop) */
  int free;               /* its thread ended: another may take it */
  uint32_t used;          /* bytes of records in buf */
  uint64_t last_write;    /* when it was last written (a stamp) */
  uint64_t runs;          /* handler runs numbered by this thread */
  struct nxi_tbuf *next;  /* every buffer, under trace.c's list lock */
  struct nxt_chunk chunk; /* written with the records; tick0 and mono0
                             read together at the last write */
  _Alignas(8) uint8_t buf[NXI_TB_BYTES];
};

/* This thread's buffer (NULL before its first record), and what the
 * inline records below need: whether they may take the fast way (stamps
 * from the time-stamp counter, and membarrier(2) for nxi_trace_stop), the
 * high half of this process's context ids, and the longest a record
 * waits in a buffer, in stamps. Set by nxi_trace_start. */
extern NXI_TLS struct nxi_tbuf *nxi_tb __attribute__((visibility("hidden")));
extern int nxi_trace_fast __attribute__((visibility("hidden")));
extern uint32_t nxi_trace_proc __attribute__((visibility("hidden")));
extern uint64_t nxi_trace_flush __attribute__((visibility("hidden")));

/* The records of every RSR, in their compact forms (trace_format.h):
 * its send; its handler's begin, which returns the run's number; and its
 * end, given that number (marked MOVED when it is another thread's).
 * Inline, with the common case straight through (a stamp, a few stores,
 * no call); the rest out of line (trace.c): a first record, a full or old
 * buffer, a stop under way, no usable counter, a context of another
 * process. */
void nxi_trace_send_slow(uint64_t ctx, uint64_t peer, uint32_t handler,
                         uint64_t bytes, uint8_t module, uint16_t flags,
                         uint64_t t);
/* The stamp of an event now, for a record made later (a send's, once its
 * module took it: nxi_trace_send); the counter's where records take the
 * fast way. */
uint64_t nxi_trace_stamp_slow(void);
uint64_t nxi_trace_begin_slow(uint64_t ctx, uint64_t peer, uint32_t handler,
                              uint64_t bytes, uint16_t flags);
void nxi_trace_end_slow(uint64_t run, uint16_t flags);

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define NXI_TRACE_TSC 1
static inline uint64_t nxi_trace_tsc(void) { return __rdtsc(); }
#else
#define NXI_TRACE_TSC 0
static inline uint64_t nxi_trace_tsc(void) { return 0; }
#endif

static inline uint64_t nxi_trace_stamp(void) {
  return nxi_trace_fast ? nxi_trace_tsc() : nxi_trace_stamp_slow();
}

/* This thread's buffer, owned (trace.c, own()), with room for `len` more
 * bytes and not due to be written at stamp `t`; or NULL: the slow way
 * then. */
static inline __attribute__((always_inline)) struct nxi_tbuf *
nxi_trace_own_at(uint32_t len, uint64_t t) {
  struct nxi_tbuf *tb = nxi_tb;
  if (!nxi_trace_fast || tb == NULL)
    return NULL;
  atomic_store_explicit(&tb->busy, 1, memory_order_relaxed);
  atomic_signal_fence(memory_order_seq_cst);
  if (!atomic_load_explicit(&tb->open, memory_order_acquire) ||
      tb->used + len > NXI_TB_BYTES || t - tb->last_write >= nxi_trace_flush) {
    atomic_store_explicit(&tb->busy, 0, memory_order_release);
    return NULL;
  }
  return tb;
}

/* The same, stamped now: the stamp in *now. */
static inline __attribute__((always_inline)) struct nxi_tbuf *
nxi_trace_own(uint32_t len, uint64_t *now) {
  *now = nxi_trace_tsc(); /* used only when the fast way is taken */
  return nxi_trace_own_at(len, *now);
}

/* Puts the `len` bytes at `r` in the owned buffer and lets it go. */
static inline void nxi_trace_put(struct nxi_tbuf *tb, const void *r,
                                 uint32_t len) {
  memcpy(tb->buf + tb->used, r, len);
  tb->used += len;
  atomic_store_explicit(&tb->busy, 0, memory_order_release);
}

static inline uint32_t nxi_trace_sat32(uint64_t v) {
  return v >= UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

/* The compact forms hold the low half of a context of this process. */
static inline int nxi_trace_mine(uint64_t ctx) {
  return ctx >> 32 == nxi_trace_proc && (uint32_t)ctx != 0;
}

/* A compact send or begin (NXT_SEND_C, NXT_BEGIN_C) of a context that
 * nxi_trace_mine, stamped `now`: here and in trace.c's slow way alike. */
static inline struct nxt_send nxi_trace_compact(uint8_t type, uint8_t module,
                                                uint16_t flags,
                                                uint32_t handler, uint64_t ctx,
                                                uint64_t bytes, uint64_t peer,
                                                uint64_t now) {
  return (struct nxt_send){
      type, module, flags, handler, (uint32_t)ctx, nxi_trace_sat32(bytes),
      peer, now};
}

/* A send, stamped `t` (nxi_trace_stamp, taken as it began): recorded
 * once its module took the RSR, so that one refused is not in the trace,
 * with the time it was handed over (its run never begins before it). */
static inline void nxi_trace_send(uint64_t ctx, uint64_t peer, uint32_t handler,
                                  uint64_t bytes, uint8_t module,
                                  uint16_t flags, uint64_t t) {
  struct nxi_tbuf *tb;
  if (nxi_trace_mine(ctx) &&
      (tb = nxi_trace_own_at(sizeof(struct nxt_send), t)) != NULL) {
    struct nxt_send r = nxi_trace_compact(NXT_SEND_C, module, flags, handler,
                                          ctx, bytes, peer, t);
    nxi_trace_put(tb, &r, sizeof(r));
    return;
  }
  nxi_trace_send_slow(ctx, peer, handler, bytes, module, flags, t);
}

static inline uint64_t nxi_trace_begin(uint64_t ctx, uint64_t peer,
                                       uint32_t handler, uint64_t bytes,
                                       uint16_t flags) {
  uint64_t now;
  struct nxi_tbuf *tb;
  if (nxi_trace_mine(ctx) &&
      (tb = nxi_trace_own(sizeof(struct nxt_send), &now)) != NULL) {
    /* Its number is its chunk's next (trace_format.h): not written. */
    uint64_t run = tb->chunk.thread << 40 | ++tb->runs;
    struct nxt_send r = nxi_trace_compact(NXT_BEGIN_C, 0xff, flags, handler,
                                          ctx, bytes, peer, now);
    nxi_trace_put(tb, &r, sizeof(r));
    return run;
  }
  return nxi_trace_begin_slow(ctx, peer, handler, bytes, flags);
}

static inline void nxi_trace_end(uint64_t run, uint16_t flags) {
  uint64_t now;
  struct nxi_tbuf *tb;
  if (run != 0 &&
      (tb = nxi_trace_own(sizeof(struct nxt_end_s), &now)) != NULL) {
    if (run >> 40 == tb->chunk.thread) {
      struct nxt_end_s r = {NXT_END_S, 0, flags, (uint32_t)run, now};
      nxi_trace_put(tb, &r, sizeof(r));
      return;
    }
    atomic_store_explicit(&tb->busy, 0, memory_order_release);
  }
  nxi_trace_end_slow(run, flags); /* on another thread: MOVED */
}

#endif
