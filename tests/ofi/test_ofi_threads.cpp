// Tests of the ofi module with a second process that need threads or many
// RSRs: several threads sending at once (each RSR exactly once, each
// thread's in order), and one sender's RSRs, small and large mixed,
// arriving in order. Also run under ThreadSanitizer.
#include <catch2/catch.hpp>

#include <string>
#include <thread>
#include <vector>

#define NX_HARNESS_OFI
#include "peer_harness.h"
#include "runtime_guard.h"

using namespace ofi_test;

namespace {

// Sends "count" for (thread, index) with a few pattern bytes.
int send_count(const nx_gp_t &peer, uint32_t t, uint32_t i) {
  size_t n = i % 5 == 0 ? 0 : (size_t)(i % 13) * 9;
  uint8_t data[128];
  pattern_fill(data, n, (uint64_t)t << 32 | i);
  nx_buffer_t *b;
  int r = nx_rsr_init_name(&b, &peer, "count",
                           2 * nx_sizeof_int32(1) + nx_sizeof_int64(1) +
                               nx_sizeof_bytes(n));
  if (r != 0)
    return r;
  if ((r = nx_put_uint32(b, t)) != 0 || (r = nx_put_uint32(b, i)) != 0 ||
      (r = nx_put_uint64(b, n)) != 0 || (r = nx_put_bytes(b, data, n)) != 0) {
    nx_buffer_release(b);
    return r;
  }
  return nx_rsr_send(b);
}

} // namespace

TEST_CASE_METHOD(
    session,
    "4 threads x 2,000 RSRs to one receiver: each exactly once, each "
    "thread's in order",
    "[ofi][threading]") {
  OFI_SKIP_UNLESS_LOADED();
  {
    peer_context peer;
    REQUIRE(peer.start() == 0);
    REQUIRE(std::string(nx_gp_protocol(&peer.gp)) == "ofi");
    const int threads = 4;
    const uint32_t per_thread = 2000;
    std::atomic<int> failures{0};
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; t++)
      workers.emplace_back([&, t] {
        for (uint32_t i = 0; i < per_thread; i++)
          if (send_count(peer.gp, (uint32_t)t, i) != 0)
            failures++;
      });
    for (auto &w : workers)
      w.join();
    CHECK(failures == 0);
    // The report is sent after the joins, so after every count: frames
    // from one process are delivered in the order they were sent.
    uint64_t rep[REPORT_COUNT];
    REQUIRE(peer_stats(peer.gp, cs.me, rep, 30));
    CHECK(rep[REPORT_COUNTED] == (uint64_t)threads * per_thread);
    CHECK(rep[REPORT_DUPLICATES] == 0);
    CHECK(rep[REPORT_OUT_OF_ORDER] == 0);
    CHECK(rep[REPORT_BAD_BYTES] == 0);
    CHECK(rep[REPORT_DROP_BAD_FRAME] == 0);
  }
  CHECK(no_children());
}

TEST_CASE_METHOD(session,
                 "one sender's RSRs arrive in order, small and large mixed",
                 "[ofi][threading]") {
  OFI_SKIP_UNLESS_LOADED();
  {
    peer_context peer;
    REQUIRE(peer.start() == 0);
    const uint32_t count = 2000;
    long before = the_client.seq.get();
    nx_buffer_t *b;
    REQUIRE(nx_rsr_init_name(&b, &peer.gp, "blast",
                             nx_sizeof_gp(&cs.me) + nx_sizeof_int32(1)) == 0);
    REQUIRE(nx_put_gp(b, &cs.me) == 0);
    REQUIRE(nx_put_uint32(b, count) == 0);
    REQUIRE(nx_rsr_send(b) == 0);
    REQUIRE(the_client.seq.wait_for(before + (long)count, 40) ==
            before + (long)count);
    CHECK(the_client.seq_bad == 0);
    std::vector<uint64_t> seqs;
    {
      std::lock_guard<std::mutex> g(the_client.m);
      seqs = the_client.seqs;
    }
    REQUIRE(seqs.size() == count);
    uint64_t out_of_order = 0;
    for (uint32_t i = 0; i < count; i++)
      if (seqs[i] != i)
        out_of_order++;
    CHECK(out_of_order == 0);
    uint64_t rep[REPORT_COUNT];
    REQUIRE(peer_stats(peer.gp, cs.me, rep));
    CHECK(rep[REPORT_BLAST_FAILS] == 0);
  }
  CHECK(no_children());
}
