/* The bottom of the core: runtime-wide state and counters, logging, drop
 * reporting and context ids, used by every other file of nexus/src. */
#ifndef NXI_RT_H
#define NXI_RT_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "nexus.h"
#include "nexus/protocol.h"
#include "nxu_wire.h"

#define NXI_CONTAINER_OF(ptr, type, member)                                    \
  ((type *)((char *)(ptr)-offsetof(type, member)))

#define NXI_CACHELINE 64

/* Thread-locals of libnexus use the initial-exec model: a plain
 * fs-relative access instead of a __tls_get_addr call on every RSR. */
#define NXI_TLS _Thread_local __attribute__((tls_model("initial-exec")))

/* The most modules one process loads, and so the most descriptors a list
 * carries (one per module). */
#define NXI_MAX_MODULES 16

struct nxi_dlist;

/* Runtime-wide state. */
struct nxi_runtime {
  atomic_int refs;
  int poll_mode;
  int explicit_order; /* NX_PROTOCOLS set: its order beats module cost */
  unsigned spin_us;
  unsigned debug;
  uint32_t proc_id;
  uint8_t process_uuid[16];
  uint8_t host_uuid[16];
  uint8_t key[NX_KEY_SIZE]; /* the computation's key (NX_KEY, or random) */
  nx_context_t *initial;
  /* Descriptors of this process's contexts; replaced (not freed) when a
   * gateway is added (nxi_dlist_self_add). */
  struct nxi_dlist *_Atomic self_dl;
  atomic_uint_fast64_t rsr_handled, drop_no_handler, drop_no_context,
      drop_bad_frame, threads_created, rsr_failed, peers_failed, lazy_parked,
      rsr_forwarded, route_fallbacks, rsr_placed;
  atomic_int drops_logged;
};

extern struct nxi_runtime nxi_rt;

/* Counters the RSR paths bump, one set per thread, so that no cache line
 * is shared on the path (docs/design.md, "The RSR path"): only the owning
 * thread writes its set (relaxed loads and stores, no locked operation),
 * and nx_stats_get sums every thread's. A thread's set is listed at its
 * first count and folded into the retired sums when the thread ends. */
enum {
  NXI_TS_SENT,         /* nx_stats_t rsr_sent */
  NXI_TS_LAZY_STARTED, /* nx_stats_t lazy_started */
  NXI_TS_COUNT
};
struct nxi_tstats {
  atomic_uint_fast64_t n[NXI_TS_COUNT];
  struct nxi_tstats *next;
  int listed;
};
extern NXI_TLS struct nxi_tstats nxi_ts;
void nxi_tstats_list(void);
/* Adds `n` (+1, or -1 to take back a count) to this thread's counter
 * `which` (NXI_TS_*). */
static inline void nxi_ts_add(int which, int n) {
  if (!nxi_ts.listed)
    nxi_tstats_list();
  atomic_store_explicit(
      &nxi_ts.n[which],
      atomic_load_explicit(&nxi_ts.n[which], memory_order_relaxed) +
          (uint_fast64_t)(int64_t)n,
      memory_order_relaxed);
}
static inline void nxi_count_sent(int n) { nxi_ts_add(NXI_TS_SENT, n); }

static inline int nxi_ready(void) {
  return atomic_load_explicit(&nxi_rt.refs, memory_order_acquire) > 0;
}

/* Zeroes the counters and the error callback (nx_init). */
void nxi_rt_reset(void);

/* Remembers a handler's name (nx_handler_register), for drop reports. */
void nxi_handler_name_note(uint32_t id, const char *name);
/* Counts a dropped RSR and reports it (with the handler's name when this
 * process registered it somewhere). */
void nxi_drop(int err, uint64_t context, uint32_t handler);
/* Reports to the error callback that process `proc` is gone. */
void nxi_report_proc(int status, uint32_t proc);
/* `proc` was this process's id in a run that ended (nx_init, before it
 * draws a new one); nxi_proc_is_former then says 1 for it. */
void nxi_proc_retire(uint32_t proc);
/* 1 if `proc` is the process id of an earlier run of this process. */
int nxi_proc_is_former(uint32_t proc);
/* Whether the calling thread runs an error callback (nx_error_cb_set). */
int nxi_in_error_cb(void);
void nxi_vlog(int level, const char *module, const char *fmt, va_list ap);
void nxi_log(int level, const char *module, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Context ids: the id of the process (random, non-zero) in the high 32
 * bits, the context's index within that process in the low 32. */
static inline uint64_t nxi_ctxid(uint32_t proc, uint32_t index) {
  return (uint64_t)proc << 32 | index;
}
static inline uint32_t nxi_ctxid_proc(uint64_t id) {
  return (uint32_t)(id >> 32);
}
static inline uint32_t nxi_ctxid_index(uint64_t id) { return (uint32_t)id; }

#endif /* NXI_RT_H */
