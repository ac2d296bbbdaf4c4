// Backpressure in the tcp module: a receiver that stops reading is flooded
// with 1 GiB of RSRs (1024 x 1 MiB). The sender's queue is bounded: its
// memory stays near the 64 MiB bound, far below 1 GiB; a non-blocking send
// sees NX_EAGAIN; blocking sends complete once the receiver reads again,
// and every RSR arrives, in order, intact.
#include <catch2/catch.hpp>

#include <malloc.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
// From <sanitizer/allocator_interface.h>, which not every gcc installs.
extern "C" size_t __sanitizer_get_current_allocated_bytes(void);
#define NX_TEST_SANITIZED 1
#endif

#include "runtime_guard.h"
#define NX_HARNESS_TCP
#include "peer_harness.h"

using namespace tcp_test;

namespace {

// Bytes the program has allocated and not freed.
size_t heap_in_use() {
#ifdef NX_TEST_SANITIZED
  return __sanitizer_get_current_allocated_bytes();
#else
  struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
#endif
}

// A "VmRSS"/"VmHWM" line of /proc/self/status, in bytes.
[[maybe_unused]] size_t vm_bytes(const char *field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.compare(0, std::strlen(field), field) == 0 &&
        line[std::strlen(field)] == ':')
      return (size_t)std::stoull(line.substr(std::strlen(field) + 1)) * 1024;
  return 0;
}

int send_sink(const nx_gp_t &peer, uint64_t index,
              const std::vector<uint8_t> &payload, unsigned flags) {
  nx_buffer_t *b;
  int r = nx_rsr_init_name(&b, &peer, "sink",
                           2 * nx_sizeof_int64(1) +
                               nx_sizeof_bytes(payload.size()));
  if (r != 0)
    return r;
  if ((r = nx_put_uint64(b, index)) != 0 ||
      (r = nx_put_uint64(b, payload.size())) != 0 ||
      (r = nx_put_bytes(b, payload.data(), payload.size())) != 0) {
    nx_buffer_release(b);
    return r;
  }
  return nx_rsr_send_flags(b, flags);
}

} // namespace

TEST_CASE_METHOD(
    session,
    "a slow receiver flooded with 1 GiB: the sender's memory stays "
    "bounded, NX_EAGAIN without blocking, everything arrives",
    "[tcp]") {
  peer_process peer;
  REQUIRE(peer.start() == "");
  REQUIRE(echo_round_trip(peer.gp, cs.me, 1, 10)); // connected

  const size_t chunk = 1 << 20;
  const uint64_t count = 1024;
  const size_t queue_bound = (size_t)64 << 20; // NX_TCP_QUEUE_MAX's default
  std::vector<std::vector<uint8_t>> payloads(16);
  for (uint64_t s = 0; s < payloads.size(); s++) {
    payloads[s].resize(chunk);
    pattern_fill(payloads[s].data(), chunk, s);
  }

  // The peer's driver sleeps in a handler: nobody reads on its side. The
  // queue (64 MiB of copies) must fill within the stall: under TSan on a
  // loaded 2-core machine that took 2.6 s, 5.0 s and 6.3 s (2026-11-29).
#ifdef NX_TEST_SANITIZED
  const unsigned stall_ms = 15000;
#else
  const unsigned stall_ms = 2000;
#endif
  REQUIRE(send_stall(peer.gp, cs.me, stall_ms) == 0);
  REQUIRE(the_client.stalled.wait_for(1, 10) == 1);
  uint64_t t0 = now_ms();

  size_t heap0 = heap_in_use(), heap_peak = heap0;
#ifndef NX_TEST_SANITIZED
  size_t hwm0 = vm_bytes("VmHWM");
#endif
  bool eagain = false;
  uint64_t eagain_ms = 0, queued_before_eagain = 0;
  for (uint64_t i = 0; i < count; i++) {
    const std::vector<uint8_t> &payload = payloads[sink_seed(i)];
    int r = send_sink(peer.gp, i, payload, eagain ? 0 : NX_RSR_NONBLOCK);
    if (r == NX_EAGAIN && !eagain) {
      eagain = true;
      eagain_ms = now_ms() - t0;
      queued_before_eagain = i;
      r = send_sink(peer.gp, i, payload, 0); // the runtime freed that one
    }
    REQUIRE(r == 0);
    heap_peak = std::max(heap_peak, heap_in_use());
  }
  uint64_t sent_ms = now_ms() - t0;

  uint64_t s[STAT_COUNT] = {};
  uint64_t end = now_ms() + 60000;
  do
    REQUIRE(peer_stats(peer.gp, cs.me, s, 60));
  while (s[STAT_SINK_FRAMES] < count && now_ms() < end && (sleep_ms(50), true));
  CHECK(s[STAT_SINK_FRAMES] == count);
  CHECK(s[STAT_SINK_BAD] == 0);

  INFO("NX_EAGAIN after " << queued_before_eagain << " RSRs, " << eagain_ms
                          << " ms into the stall; all sent after " << sent_ms
                          << " ms; heap grew by " << (heap_peak - heap0)
                          << " bytes");
  CHECK(eagain);
  CHECK(eagain_ms < stall_ms);    // the queue filled while nobody read
  CHECK(sent_ms >= stall_ms / 2); // blocking sends waited for the reader
  // The queue bound plus the frame being built, a few in flight through
  // send_done, and the allocator's slack: far below the 1 GiB sent.
  CHECK(heap_peak - heap0 < queue_bound + ((size_t)24 << 20));
#ifndef NX_TEST_SANITIZED
  // Resident memory: the sanitizers keep freed memory in quarantine.
  size_t hwm = vm_bytes("VmHWM");
  CHECK(hwm - hwm0 < queue_bound + ((size_t)64 << 20));
#endif
  CHECK(peer.quit() == 0);
}
