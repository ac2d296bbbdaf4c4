// A new user's misuse over a real tcp connection (issue 16): an RSR buffer
// sent twice is refused with NX_EINVAL before the module sees it again;
// the peer gets each RSR once.
#include <catch2/catch.hpp>

#include "runtime_guard.h"
#define NX_HARNESS_TCP
#include "peer_harness.h"

using namespace tcp_test;

TEST_CASE_METHOD(session, "tcp: an RSR buffer sent twice is refused",
                 "[tcp][rsr]") {
  peer_process peer;
  REQUIRE(peer.start() == "");
  uint64_t tag = 1;
  REQUIRE(echo_round_trip(peer.gp, cs.me, tag++, 100));
  uint64_t base[STAT_COUNT] = {};
  REQUIRE(peer_stats(peer.gp, cs.me, base));
  const int n = 200;
  for (int i = 0; i < n; i++) {
    nx_buffer_t *b;
    REQUIRE(nx_rsr_init_name(&b, &peer.gp, "nothing_here", 16) == 0);
    REQUIRE(nx_put_int32(b, i) == 0);
    REQUIRE(nx_rsr_send(b) == 0);
    CHECK(nx_rsr_send(b) == NX_EINVAL); // queued in the module, or freed
  }
  // The peer dropped each of them exactly once (no such handler there).
  uint64_t s[STAT_COUNT] = {};
  uint64_t end = now_ms() + 10000;
  do
    REQUIRE(peer_stats(peer.gp, cs.me, s));
  while (s[STAT_DROP_NO_HANDLER] - base[STAT_DROP_NO_HANDLER] < (uint64_t)n &&
         now_ms() < end && (sleep_ms(20), true));
  CHECK(s[STAT_DROP_NO_HANDLER] - base[STAT_DROP_NO_HANDLER] == (uint64_t)n);
  CHECK(echo_round_trip(peer.gp, cs.me, tag++, 100));
  CHECK(peer.quit() == 0);
}
