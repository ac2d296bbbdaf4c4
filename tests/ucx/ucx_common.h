/* What the ucx tests and their peer program (ucx_peer.c) agree on: the handlers
 * the peer serves and the layout of their buffers ("echo" and "stall" are
 * tests/common/peer_handlers.h's, the payload pattern pattern.h's). */
#ifndef NX_TESTS_UCX_COMMON_H
#define NX_TESTS_UCX_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "pattern.h"

/* The peer runs as a process context (nx_context_create), with
 * argv[1] = "serve", "parent" (which first creates a second peer, its
 * own process context, whose gp it hands out through "pid") or "fifo128"
 * (serves with UCX_MM_FIFO_ELEM_SIZE=128 set before nx_init). Handlers of
 * its initial context:
 *   "echo"   gp reply, u64 tag, u64 n, bytes[n]  -> "echoed" at reply:
 *            u64 tag, u64 n, bytes[n] (the same bytes)
 *   "seq"    u32 stream, u64 index, u64 n, bytes[n] (pattern seeded by
 *            seq_seed(stream, index)): counted; per stream, indexes must
 *            come 0, 1, 2, ... with intact contents
 *   "stats"  gp reply -> "stats" at reply: u64[STAT_COUNT]
 *   "pid"    gp reply -> "pid" at reply: u64 pid, gp (in "parent" mode the
 *            second peer's, else the peer's own)
 *   "stall"  gp reply, u32 ms -> "stalled" at reply, then sleeps ms in the
 *            handler, so its driver stops
 * Streams are numbered below SEQ_STREAMS. */
#define SEQ_STREAMS 16

enum peer_stat {
  STAT_SEQ_FRAMES, /* "seq" RSRs received */
  STAT_SEQ_BAD,    /* ... out of order, repeated, or with wrong contents */
  STAT_RSR_HANDLED,
  STAT_DROP_BAD_FRAME,
  STAT_PEERS_FAILED,
  STAT_COUNT
};

static inline uint64_t seq_seed(uint32_t stream, uint64_t index) {
  return ((uint64_t)stream << 40) ^ index;
}

#endif /* NX_TESTS_UCX_COMMON_H */
