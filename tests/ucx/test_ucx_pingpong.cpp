// The ucx module between two real processes (a process context running
// ucx_peer): the route and what carries it, round trips from 0 B to 64 MiB
// (eager and rendezvous) with contents checked, waking sleeping progress
// engines through the event fd, and one sender's order across both paths.
#include <catch2/catch.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <string>
#include <vector>

#include "runtime_guard.h"
#define NX_HARNESS_UCX
#include "peer_harness.h"

using namespace ucx_test;

namespace {

const nx_module_info_t *find_module(const char *name, nx_module_info_t *info) {
  for (int i = 0; i < nx_module_count(); i++)
    if (nx_module_info(i, info) == 0 && std::string(info->name) == name)
      return info;
  return nullptr;
}

} // namespace

TEST_CASE("RSRs to another process go over ucx, which says what carries them",
          "[ucx][threading]") {
  setup_env();
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  nx_module_info_t mi;
  REQUIRE(find_module("ucx", &mi) != nullptr);
  REQUIRE(mi.loaded == 1);
  CHECK(std::string(mi.backend).rfind("UCX 1.", 0) == 0);
  client_scope cs;
  REQUIRE(cs.ok());
  {
    peer_process peer;
    REQUIRE(peer.start() == 0);
    const char *proto = nx_gp_protocol(&peer.gp);
    REQUIRE(proto != nullptr);
    CHECK(std::string(proto) == "ucx");
    REQUIRE(echo_round_trip(peer.gp, cs.me, 1, 8));
    char info[256];
    REQUIRE(nx_gp_protocol_info(&peer.gp, info, sizeof(info)) == 0);
    std::string s(info);
    INFO("nx_gp_protocol_info: " << s);
    CHECK(s.rfind("ucx: ", 0) == 0);
    CHECK(s.find('/') !=
          std::string::npos); // transport/device, e.g. sysv/memory
    // A small buffer gets a truncated, terminated line.
    char tiny[8];
    REQUIRE(nx_gp_protocol_info(&peer.gp, tiny, sizeof(tiny)) == 0);
    CHECK(std::string(tiny) == s.substr(0, 7));
  }
  CHECK(no_children());
}

TEST_CASE_METHOD(session, "ping-pong from 0 B to 64 MiB, contents checked",
                 "[ucx]") {
  peer_process peer;
  REQUIRE(peer.start() == 0);
  const size_t sizes[] = {0, 8, 1024, 65536, 1u << 20, 16u << 20, 64u << 20};
  uint64_t tag = 100;
  for (size_t n : sizes) {
    INFO("payload " << n << " bytes");
    for (int rep = 0; rep < (n <= 65536 ? 20 : 2); rep++)
      REQUIRE(echo_round_trip(peer.gp, cs.me, tag++, n, 30));
  }
  uint64_t st[STAT_COUNT];
  REQUIRE(peer_stats(peer.gp, cs.me, st));
  CHECK(st[STAT_DROP_BAD_FRAME] == 0);
  nx_stats_t s;
  REQUIRE(nx_stats_get(&s) == 0);
  CHECK(s.drop_bad_frame == 0);
  CHECK(s.rsr_failed == 0);
}

TEST_CASE_METHOD(
    session,
    "after idling, both progress engines sleep and the UCX event fd "
    "wakes them",
    "[ucx]") {
  peer_process peer;
  REQUIRE(peer.start() == 0);
  REQUIRE(echo_round_trip(peer.gp, cs.me, 1, 8));
  // After 30 ms of quiet every driver on both sides sleeps in epoll (the
  // engine sleeps after 1 ms idle); a wake-up the module failed to arm for
  // would cost the engine's 100 ms poll interval, on each side.
  std::vector<uint64_t> ms;
  for (int i = 0; i < 9; i++) {
    sleep_ms(30);
    uint64_t t0 = now_ms();
    REQUIRE(echo_round_trip(peer.gp, cs.me, 10 + (uint64_t)i,
                            i % 3 == 2 ? 100000 : 8));
    ms.push_back(now_ms() - t0);
  }
  std::sort(ms.begin(), ms.end());
  INFO("round trips after 30 ms idle (ms): " << ms[0] << " .. " << ms[8]);
  CHECK(ms[4] < 50); // the median
  // And asleep means asleep: an event fd left readable (never drained by
  // arming) would keep the engine polling at full speed.
  struct rusage r0, r1;
  getrusage(RUSAGE_SELF, &r0);
  uint64_t t0 = now_ms();
  sleep_ms(500);
  getrusage(RUSAGE_SELF, &r1);
  auto us = [](const struct rusage &r) {
    return (uint64_t)(r.ru_utime.tv_sec + r.ru_stime.tv_sec) * 1000000u +
           (uint64_t)(r.ru_utime.tv_usec + r.ru_stime.tv_usec);
  };
  uint64_t cpu_ms = (us(r1) - us(r0)) / 1000u, wall_ms = now_ms() - t0;
  INFO("CPU while idle: " << cpu_ms << " ms in " << wall_ms << " ms");
  CHECK(cpu_ms * 4 < wall_ms);
}

TEST_CASE_METHOD(
    session,
    "one sender's RSRs arrive in order across eager and rendezvous sizes",
    "[ucx]") {
  peer_process peer;
  REQUIRE(peer.start() == 0);
  // Small frames go eager and complete at once; large ones (rendezvous)
  // complete only when the receiver's fetch does: without ordering, the
  // small ones behind a large one would overtake it.
  const size_t sizes[] = {8,  200u << 10, 0,        1u << 20,
                          16, 40u << 10,  3u << 20, 100};
  const int count = 240;
  for (int i = 0; i < count; i++)
    REQUIRE(send_seq(peer.gp, 0, (uint64_t)i, sizes[i % 8]) == 0);
  // "stats" leaves after every "seq" and is answered after them.
  uint64_t st[STAT_COUNT];
  REQUIRE(peer_stats(peer.gp, cs.me, st, 30));
  CHECK(st[STAT_SEQ_FRAMES] == (uint64_t)count);
  CHECK(st[STAT_SEQ_BAD] == 0);
}

TEST_CASE_METHOD(session, "small frames of every length arrive intact",
                 "[ucx]") {
  peer_process peer;
  REQUIRE(peer.start() == 0);
  // The receiver copies a payload of 8 to 32 bytes with two overlapping
  // moves (ucx_rx.c, copy_payload); "seq" frames of 0 to 40 bytes of data
  // have payloads from below to above its bounds, each byte checked.
  const int count = 41;
  for (int i = 0; i < count; i++)
    REQUIRE(send_seq(peer.gp, 1, (uint64_t)i, (size_t)i) == 0);
  uint64_t st[STAT_COUNT];
  REQUIRE(peer_stats(peer.gp, cs.me, st, 30));
  CHECK(st[STAT_SEQ_FRAMES] == (uint64_t)count);
  CHECK(st[STAT_SEQ_BAD] == 0);
}

// Shared-memory FIFO elements of different sizes in the two processes (the
// module sets 256 bytes unless UCX_MM_FIFO_ELEM_SIZE says otherwise; UCX's
// sender indexes the receiver's FIFO with its own size): the peer is not
// reached over ucx, and the RSRs go another way, intact.
TEST_CASE("a peer whose FIFO element size differs is reached another way",
          "[ucx]") {
  setenv("NX_PROTOCOLS", "ucx,tcp,local", 1);
  unsetenv("NX_UCX_QUEUE_MAX");
  unsetenv("UCX_MM_FIFO_ELEM_SIZE");
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  client_scope cs;
  REQUIRE(cs.ok());
  {
    peer_process peer;
    REQUIRE(peer.start("fifo128") == 0);
    const char *proto = nx_gp_protocol(&peer.gp);
    REQUIRE(proto != nullptr);
    CHECK(std::string(proto) == "tcp");
    uint64_t tag = 1;
    for (size_t n : {8, 100, 200, 1000, 65536})
      for (int rep = 0; rep < 10; rep++)
        REQUIRE(echo_round_trip(peer.gp, cs.me, tag++, n, 20));
  }
  CHECK(no_children());
}
