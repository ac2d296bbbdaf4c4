// Threads and the ucx module: several application threads send at once
// while other threads drive progress; every RSR arrives exactly once, in
// its thread's order.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "runtime_guard.h"
#define NX_HARNESS_UCX
#include "peer_harness.h"

using namespace ucx_test;

TEST_CASE_METHOD(
    session,
    "4 threads x 2,000 RSRs to one receiver: each delivered once, in "
    "each thread's order",
    "[ucx][threading]") {
  peer_process peer;
  REQUIRE(peer.start() == 0);
  const int threads = 4, per_thread = 2000;
  std::atomic<int> failures{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; t++)
    ts.emplace_back([&, t] {
      for (int i = 0; i < per_thread; i++)
        if (send_seq(peer.gp, (uint32_t)t, (uint64_t)i, i % 3 == 0 ? 64 : 8) !=
            0)
          failures++;
    });
  for (auto &t : ts)
    t.join();
  CHECK(failures == 0);
  // Each thread's "seq" frames precede this request on the one endpoint.
  uint64_t st[STAT_COUNT];
  REQUIRE(peer_stats(peer.gp, cs.me, st, 30));
  CHECK(st[STAT_SEQ_FRAMES] == (uint64_t)(threads * per_thread));
  CHECK(st[STAT_SEQ_BAD] == 0);
}

TEST_CASE_METHOD(session,
                 "4 threads exchange small and rendezvous-sized RSRs at once",
                 "[ucx][threading]") {
  peer_process peer;
  REQUIRE(peer.start() == 0);
  const int threads = 4, per_thread = 60;
  const long before = the_client.echoed.get();
  std::atomic<int> failures{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; t++)
    ts.emplace_back([&, t] {
      for (int i = 0; i < per_thread; i++) {
        uint64_t tag = (uint64_t)t * 1000 + (uint64_t)i;
        if (send_echo(peer.gp, cs.me, tag, i % 2 == 0 ? 1024 : 100000) != 0)
          failures++;
      }
    });
  for (auto &t : ts)
    t.join();
  CHECK(failures == 0);
  const long want = threads * per_thread;
  CHECK(the_client.echoed.wait_for(before + want, 30) == before + want);
  CHECK(the_client.echo_bad == 0);
  std::vector<uint64_t> tags;
  {
    std::lock_guard<std::mutex> g(the_client.m);
    tags = the_client.tags;
  }
  std::sort(tags.begin(), tags.end());
  CHECK(std::adjacent_find(tags.begin(), tags.end()) == tags.end());
  CHECK(tags.size() == (size_t)want);
}
