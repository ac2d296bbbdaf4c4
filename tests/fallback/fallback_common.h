// What test_fallback.cpp and its peer program (fallback_peer.cpp) agree
// on: the handlers, the numbered RSR streams and their payloads, how a
// receiver records a stream, how a sender counts what the error callback
// reports, and the layout of the peer's final report.
//
// Handlers of the peer (P):
//   "start"  gp: the test's gp; P starts its "seq" stream to it
//   "seq"    u64 index, u64 n, bytes[n]: the test's one-way stream
//   "ping"   u64 index, u64 n, bytes[n] -> "pong" with the same index
//   "stop"   P sends on until at least FB_AFTER_MIN of its "seq" RSRs went
//            after its route changed, then sends "report"
//   "quit"   P finalizes and exits 0
// Handlers of the test (T): "seq" (P's stream), "pong", "report".
#ifndef NX_TESTS_FALLBACK_COMMON_H
#define NX_TESTS_FALLBACK_COMMON_H

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "nexus.h"
#include "pattern.h"

// The most RSRs one stream may carry (a receiver keeps a byte per index).
const uint64_t FB_STREAM_MAX = 1u << 16;
// The peer's stream pauses here until the test says "stop" (a bound on
// the traffic while the test waits).
const uint64_t FB_PEER_PAUSE = 2000;
// RSRs each sender sends on its stream after it saw its route change.
const uint64_t FB_AFTER_MIN = 200;
// The test kills tcp's connection once it sent this many RSRs.
const uint64_t FB_KILL_FROM = 160;
// Every 16th RSR of a stream carries 1 MiB, every 4th around the kill;
// the others up to 4 KiB.
inline uint64_t fb_size(uint64_t index) {
  bool near_kill = index >= FB_KILL_FROM - 10 && index < FB_KILL_FROM + 200;
  return index % 16 == 11 || (near_kill && index % 4 == 3)
             ? (uint64_t)1 << 20
             : 16 + (index * 131) % 4000;
}
// The payload seed of RSR `index` of the stream `handler` (its id).
inline uint64_t fb_seed(nx_handler_id_t handler, uint64_t index) {
  return (uint64_t)handler << 32 ^ index;
}

// Whether the streams are sent with NX_RSR_ORDERED (FB_ORDERED=1 in the
// environment, which the peer inherits): then what the module could not
// deliver is sent again over the next route, what the broken connection
// swallowed is skipped after the fence, and nothing after it is held back
// for good; the checks are the same.
inline unsigned fb_flags() {
  static const unsigned flags =
      getenv("FB_ORDERED") != nullptr && getenv("FB_ORDERED")[0] == '1'
          ? NX_RSR_ORDERED
          : 0;
  return flags;
}

// Sends RSR `index` of the stream `name` to `to`. Returns
// nx_rsr_send_flags's result (or the first failing call's).
inline int fb_send(const nx_gp_t &to, const char *name, uint64_t index) {
  uint64_t n = fb_size(index);
  nx_buffer_t *b;
  int r = nx_rsr_init_name(&b, &to, name,
                           2 * nx_sizeof_int64(1) + nx_sizeof_bytes(n));
  if (r != 0)
    return r;
  std::vector<uint8_t> data(n);
  pattern_fill(data.data(), n, fb_seed(nx_handler_id(name), index));
  if ((r = nx_put_uint64(b, index)) != 0 || (r = nx_put_uint64(b, n)) != 0 ||
      (r = nx_put_bytes(b, data.data(), n)) != 0) {
    nx_buffer_release(b);
    return r;
  }
  return nx_rsr_send_flags(b, fb_flags());
}

// What a receiver saw of one stream. Handlers fill it (on the driver),
// the program reads it.
struct fb_record {
  std::mutex m;
  uint64_t count = 0;     // RSRs received
  uint64_t bad_order = 0; // ... with an index not above the last one's
  uint64_t bad_data = 0;  // ... unreadable, or with the wrong contents
  int64_t last = -1;
  std::vector<uint8_t> seen = std::vector<uint8_t>(FB_STREAM_MAX);

  // Reads RSR (u64 index, u64 n, bytes[n]) of the stream `handler` from
  // `buf`. Returns its index, or -1 when it could not be read.
  int64_t receive(nx_handler_id_t handler, nx_buffer_t *buf) {
    uint64_t index = 0, n = 0;
    bool ok = nx_get_uint64(buf, &index) == 0 && nx_get_uint64(buf, &n) == 0 &&
              index < FB_STREAM_MAX && n == fb_size(index);
    if (ok) {
      std::vector<uint8_t> data(n);
      ok = nx_get_bytes(buf, data.data(), n) == 0 &&
           pattern_check(data.data(), n, fb_seed(handler, index)) == n;
    }
    std::lock_guard<std::mutex> g(m);
    count++;
    if (!ok) {
      bad_data++;
      return -1;
    }
    if ((int64_t)index <= last)
      bad_order++;
    last = (int64_t)index;
    seen[index] = 1;
    return (int64_t)index;
  }

  // Indices in [from, to) that did not arrive.
  uint64_t missing(uint64_t from, uint64_t to) {
    std::lock_guard<std::mutex> g(m);
    uint64_t n = 0;
    for (uint64_t i = from; i < to && i < FB_STREAM_MAX; i++)
      n += seen[i] == 0;
    return n;
  }
};

// What the error callback told a sender: RSRs lost on the failed route,
// by the handler they were for, and destinations reported lost.
struct fb_losses {
  std::atomic<uint64_t> seq{0}, ping{0}, pong{0}, other{0};
  std::atomic<uint64_t> process{0}; // handler 0: a process lost
  std::atomic<int> last_err{0};
};

inline void fb_on_error(int err, uint64_t context, uint32_t handler,
                        void *arg) {
  auto *l = static_cast<fb_losses *>(arg);
  l->last_err = err;
  if (handler == 0 && (context & 0xffffffffu) == 0)
    l->process++;
  else if (handler == nx_handler_id("seq"))
    l->seq++;
  else if (handler == nx_handler_id("ping"))
    l->ping++;
  else if (handler == nx_handler_id("pong"))
    l->pong++;
  else
    l->other++;
}

// The peer's report: FB_R_COUNT u64s, two char[16] (its route to the test
// before and after), then the bytes of its "seq" and "ping" records'
// `seen`, FB_STREAM_MAX each.
enum fb_report_field {
  FB_R_SEQ_SENT,        // "seq" RSRs P sent (nx_rsr_send returned 0)
  FB_R_SEQ_SEND_FAILS,  // ... whose nx_rsr_send failed
  FB_R_SEQ_FIRST_AFTER, // the first one sent after P's route changed
  FB_R_PONG_SENT,
  FB_R_PONG_SEND_FAILS,
  FB_R_PONG_FIRST_AFTER,
  FB_R_LOST_SEQ, // P's error callback: "seq" RSRs lost
  FB_R_LOST_PONG,
  FB_R_LOST_OTHER,
  FB_R_LOST_PROCESS, // ... processes lost (handler 0)
  FB_R_PEERS_FAILED, // P's nx_stats_t
  FB_R_ROUTE_FALLBACKS,
  FB_R_RSR_FAILED,
  FB_R_RX_SEQ, // P's record of the test's "seq" stream
  FB_R_RX_SEQ_BAD_ORDER,
  FB_R_RX_SEQ_BAD_DATA,
  FB_R_RX_PING, // ... and of its "ping"s
  FB_R_RX_PING_BAD_ORDER,
  FB_R_RX_PING_BAD_DATA,
  FB_R_FLUSH, // -nx_flush()'s result before the report: 0 when all settled
  FB_R_COUNT
};
const size_t FB_PROTO_LEN = 16;

#endif // NX_TESTS_FALLBACK_COMMON_H
