// Tests of the tcp module (protocols/tcp) with a second process: RSR
// round trips for payloads from 0 B to 64 MiB, many RSRs from one sender
// in order, several threads sending at once.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "runtime_guard.h"
#define NX_HARNESS_TCP
#include "peer_harness.h"

using namespace tcp_test;

TEST_CASE_METHOD(session,
                 "RSR ping-pong with another process over tcp, 0 B to 64 MiB",
                 "[tcp]") {
  peer_process peer;
  REQUIRE(peer.start() == "");
  const char *proto = nx_gp_protocol(&peer.gp);
  REQUIRE(proto != nullptr);
  CHECK(std::string(proto) == "tcp");

  const size_t sizes[] = {0, 1, 8, 1024, 64 << 10, 1 << 20, 16 << 20, 64 << 20};
  uint64_t tag = 1;
  for (size_t n : sizes) {
    INFO("payload of " << n << " bytes");
    int reps = n <= (64u << 10) ? 20 : n <= (1u << 20) ? 4 : 1;
    for (int i = 0; i < reps; i++)
      REQUIRE(echo_round_trip(peer.gp, cs.me, tag++, n, 60));
  }
  CHECK(the_client.echo_bad == 0);

  uint64_t s[STAT_COUNT];
  REQUIRE(peer_stats(peer.gp, cs.me, s));
  CHECK(s[STAT_DROP_BAD_FRAME] == 0);
  CHECK(s[STAT_DROP_NO_CONTEXT] == 0);
  CHECK(s[STAT_DROP_NO_HANDLER] == 0);
  // The connection this process opened carries the replies too.
  CHECK(s[STAT_SOCKETS] == 1);
  nx_stats_t mine;
  REQUIRE(nx_stats_get(&mine) == 0);
  CHECK(mine.drop_bad_frame == 0);
  CHECK(peer.quit() == 0);
}

TEST_CASE_METHOD(session, "many RSRs in a row from one sender arrive in order",
                 "[tcp]") {
  peer_process peer;
  REQUIRE(peer.start() == "");
  const uint64_t count = 5000;
  long before = the_client.echoed.get();
  for (uint64_t i = 0; i < count; i++) {
    // Mostly small frames, now and then one the socket cannot take at
    // once: the frames behind it queue, none may overtake it.
    size_t n = i % 250 == 0 ? (size_t)600000 : (size_t)(i % 7) * 13;
    REQUIRE(send_echo(peer.gp, cs.me, i, n) == 0);
  }
  REQUIRE(the_client.echoed.wait_for(before + (long)count, 60) ==
          before + (long)count);
  CHECK(the_client.echo_bad == 0);
  std::vector<uint64_t> tags;
  {
    std::lock_guard<std::mutex> g(the_client.m);
    tags = the_client.tags;
  }
  REQUIRE(tags.size() == count);
  uint64_t out_of_order = 0;
  for (uint64_t i = 0; i < count; i++)
    if (tags[i] != i)
      out_of_order++;
  CHECK(out_of_order == 0);
  CHECK(peer.quit() == 0);
}

TEST_CASE_METHOD(
    session,
    "several threads sending at once: every RSR arrives exactly once, "
    "each thread's in order",
    "[tcp]") {
  peer_process peer;
  REQUIRE(peer.start() == "");
  const int threads = 4;
  const uint64_t per_thread = 400;
  std::atomic<int> failures{0};
  long before = the_client.echoed.get();
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; t++)
    workers.emplace_back([&, t] {
      for (uint64_t i = 0; i < per_thread; i++) {
        uint64_t tag = (uint64_t)t << 32 | i;
        size_t n = i % 40 == 0 ? (size_t)300000 : (size_t)(i % 64);
        if (send_echo(peer.gp, cs.me, tag, n) != 0)
          failures++;
      }
    });
  for (auto &w : workers)
    w.join();
  CHECK(failures == 0);
  long total = threads * (long)per_thread;
  REQUIRE(the_client.echoed.wait_for(before + total, 60) == before + total);
  CHECK(the_client.echo_bad == 0);
  std::vector<uint64_t> tags;
  {
    std::lock_guard<std::mutex> g(the_client.m);
    tags = the_client.tags;
  }
  REQUIRE(tags.size() == (size_t)total);
  std::vector<uint64_t> next(threads, 0);
  int out_of_order = 0, foreign = 0;
  for (uint64_t tag : tags) {
    uint64_t t = tag >> 32, i = tag & 0xffffffffu;
    if (t >= (uint64_t)threads) {
      foreign++;
      continue;
    }
    if (i != next[t])
      out_of_order++;
    next[t] = i + 1;
  }
  CHECK(foreign == 0);
  CHECK(out_of_order == 0);
  std::sort(tags.begin(), tags.end());
  CHECK(std::adjacent_find(tags.begin(), tags.end()) == tags.end());
  CHECK(peer.quit() == 0);
}
