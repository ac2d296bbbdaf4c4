// Backpressure in the ucx module: at most NX_UCX_QUEUE_MAX bytes in flight
// to a peer that does not take them; then NX_EAGAIN (NX_RSR_NONBLOCK) or a
// send that waits until the peer catches up, losing nothing.
#include <catch2/catch.hpp>

#include "runtime_guard.h"
#define NX_HARNESS_UCX
#include "peer_harness.h"

using namespace ucx_test;

TEST_CASE("a stalled receiver: sends past NX_UCX_QUEUE_MAX say NX_EAGAIN or "
          "wait, and all arrive in order",
          "[ucx]") {
  setup_env();
  setenv("NX_UCX_QUEUE_MAX", "1m", 1); // the peer inherits it too
  runtime_guard rt;
  unsetenv("NX_UCX_QUEUE_MAX");
  REQUIRE(rt.init_rc() == 0);
  client_scope cs;
  REQUIRE(cs.ok());
  peer_process peer;
  REQUIRE(peer.start() == 0);
  REQUIRE(echo_round_trip(peer.gp, cs.me, 1, 8));

  const unsigned stall_ms = 1500;
  long stalled = the_client.stalled.get();
  uint64_t t0 = now_ms();
  REQUIRE(send_stall(peer.gp, cs.me, stall_ms) == 0);
  REQUIRE(the_client.stalled.wait_for(stalled + 1, 10) == stalled + 1);

  // 256 KiB each: rendezvous, so each stays in flight until the peer
  // fetches it, which it cannot while stalled.
  const size_t size = 256u << 10;
  int accepted = 0, r = 0;
  for (int i = 0; i < 64; i++) {
    r = send_seq(peer.gp, 0, (uint64_t)accepted, size, NX_RSR_NONBLOCK);
    if (r != 0)
      break;
    accepted++;
  }
  CHECK(r == NX_EAGAIN);
  CHECK(accepted >= 1);
  CHECK(accepted <= 5); // 1 MiB in flight, plus the one that crossed it
  uint64_t refused_at = now_ms();
  // A blocking send waits (driving progress) until there is room again.
  REQUIRE(send_seq(peer.gp, 0, (uint64_t)accepted, size) == 0);
  accepted++;
  uint64_t waited = now_ms() - refused_at;
  INFO("stall " << stall_ms << " ms; refused after " << refused_at - t0
                << " ms; the blocking send waited " << waited << " ms");
  CHECK(refused_at - t0 < stall_ms);
  CHECK(now_ms() - t0 >= stall_ms - 100);
  uint64_t st[STAT_COUNT];
  REQUIRE(peer_stats(peer.gp, cs.me, st, 30));
  CHECK(st[STAT_SEQ_FRAMES] == (uint64_t)accepted);
  CHECK(st[STAT_SEQ_BAD] == 0);
}

// Small RSRs fill UCX's shared-memory FIFO to a stalled peer; past it each
// send is a request that waits in UCX, and at most NX_UCX_QUEUE_FRAMES
// (default 32) of those may be in flight: a few hundred sends are taken,
// not the thousands that NX_UCX_QUEUE_MAX's bytes alone (64 MiB) would
// take, and the rest wait or say NX_EAGAIN. All arrive, in order.
TEST_CASE("a stalled receiver: small sends past NX_UCX_QUEUE_FRAMES say "
          "NX_EAGAIN or wait, and all arrive in order",
          "[ucx]") {
  setup_env();
  unsetenv("NX_UCX_QUEUE_FRAMES");
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  client_scope cs;
  REQUIRE(cs.ok());
  peer_process peer;
  REQUIRE(peer.start() == 0);
  REQUIRE(echo_round_trip(peer.gp, cs.me, 1, 8));

  const unsigned stall_ms = 1500;
  long stalled = the_client.stalled.get();
  uint64_t t0 = now_ms();
  REQUIRE(send_stall(peer.gp, cs.me, stall_ms) == 0);
  REQUIRE(the_client.stalled.wait_for(stalled + 1, 10) == stalled + 1);

  int accepted = 0, r = 0;
  for (int i = 0; i < 100000; i++) {
    r = send_seq(peer.gp, 0, (uint64_t)accepted, 8, NX_RSR_NONBLOCK);
    if (r != 0)
      break;
    accepted++;
  }
  uint64_t refused_at = now_ms();
  INFO("accepted " << accepted << " sends of 8 B before " << nx_err_name(r)
                   << ", " << refused_at - t0 << " ms into the stall");
  CHECK(r == NX_EAGAIN);
  CHECK(accepted >= 32);
  CHECK(accepted <= 2000); // the FIFO's elements, then 32 requests
  CHECK(refused_at - t0 < stall_ms);
  // A blocking send waits (driving progress) until there is room again.
  REQUIRE(send_seq(peer.gp, 0, (uint64_t)accepted, 8) == 0);
  accepted++;
  CHECK(now_ms() - t0 >= stall_ms - 100);
  uint64_t st[STAT_COUNT];
  REQUIRE(peer_stats(peer.gp, cs.me, st, 30));
  CHECK(st[STAT_SEQ_FRAMES] == (uint64_t)accepted);
  CHECK(st[STAT_SEQ_BAD] == 0);
}
