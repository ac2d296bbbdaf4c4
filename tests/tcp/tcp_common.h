// What the tcp tests and their peer program (tcp_peer.cpp) agree on: the
// handlers the peer serves, the layout of their buffers, and how the peer
// hands its gp to the test through a pipe. The payload pattern is
// tests/common/pattern.h's.
#ifndef NX_TESTS_TCP_COMMON_H
#define NX_TESTS_TCP_COMMON_H

#include <cstddef>
#include <cstdint>

#include "pattern.h"

// Handlers of the peer (in its initial context):
//   "echo"      gp reply, u64 tag, u64 n, bytes[n]  -> "echoed" at reply:
//               u64 tag, u64 n, bytes[n] (the same bytes)
//   "stats"     gp reply                            -> "stats" at reply:
//               u64[STAT_COUNT]
//   "stall"     gp reply, u32 ms                    -> "stalled" at reply,
//               then sleeps ms in the handler (its driver stops reading)
//   "sink"      u64 index, u64 n, bytes[n]          counted and checked
//   "introduce" gp                                  the target of "blast"
//   "blast"     u32 count, u64 start (CLOCK_REALTIME ns): from that time,
//               the peer's main thread sends `count` "seq" RSRs to the
//               introduced gp
//   "seq"       u64 n                               counted, order checked
//   "quit"                                          the peer finalizes, exits 0
enum peer_stat {
  STAT_RSR_SENT,
  STAT_RSR_HANDLED,
  STAT_DROP_NO_HANDLER,
  STAT_DROP_NO_CONTEXT,
  STAT_DROP_BAD_FRAME,
  STAT_SINK_FRAMES, // "sink" RSRs received
  STAT_SINK_BAD,    // ... out of order or with wrong contents
  STAT_SEQ_FRAMES,  // "seq" RSRs received
  STAT_SEQ_BAD,     // ... out of order
  STAT_SOCKETS,     // connected TCP sockets the peer holds
  STAT_BLAST_FAILS, // "seq" sends that failed
  STAT_COUNT
};

// The peer writes this header, then `len` gp bytes, to the pipe fd it is
// given as argv[1].
struct peer_hello {
  uint32_t magic; // PEER_HELLO_MAGIC
  uint32_t format;
  uint32_t port; // its IPv4 listening port
  uint32_t pad;
  uint64_t len;
};
#define PEER_HELLO_MAGIC 0x5054584eu

// The "sink" payload of RSR `index` is seeded by this (so a sender can
// prepare a few payloads and reuse them).
inline uint64_t sink_seed(uint64_t index) { return index % 16; }

// A cheaper check for the flood: every 4093rd byte and the last one.
inline bool pattern_sample_ok(const uint8_t *p, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; i += 4093)
    if (p[i] != pattern_byte(seed, i))
      return false;
  return n == 0 || p[n - 1] == pattern_byte(seed, n - 1);
}

#endif // NX_TESTS_TCP_COMMON_H
