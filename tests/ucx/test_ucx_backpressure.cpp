// Backpressure in the ucx module: at most NX_UCX_QUEUE_MAX bytes and
// NX_UCX_QUEUE_FRAMES frames in flight to a peer that does not take them;
// then NX_EAGAIN (NX_RSR_NONBLOCK) or a send that waits until the peer
// catches up, losing nothing.
#include <catch2/catch.hpp>

#include "runtime_guard.h"
#define NX_HARNESS_UCX
#include "peer_harness.h"

using namespace ucx_test;

namespace {

const unsigned stall_ms = 1500;

struct flood {
  int accepted = 0;        // sends taken before the first refusal
  int refused = 0;         // what that refusal said
  uint64_t refused_ms = 0; // when, from the stall's start
  uint64_t waited_ms = 0;  // when the blocking send after it returned
};

// A peer stalled for stall_ms (its driver asleep) is sent numbered RSRs of
// `size` bytes with NX_RSR_NONBLOCK until one is refused (at most `tries`),
// then one blocking send; every one must arrive, once, in order. The
// caller has set the environment (the peer inherits it) before this starts
// the runtime; `unset` is unset once it has.
flood stalled_flood(size_t size, int tries, const char *unset) {
  runtime_guard rt;
  if (unset != nullptr)
    unsetenv(unset);
  REQUIRE(rt.init_rc() == 0);
  client_scope cs;
  REQUIRE(cs.ok());
  peer_process peer;
  REQUIRE(peer.start() == 0);
  REQUIRE(echo_round_trip(peer.gp, cs.me, 1, 8));

  long stalled = the_client.stalled.get();
  uint64_t t0 = now_ms();
  REQUIRE(send_stall(peer.gp, cs.me, stall_ms) == 0);
  REQUIRE(the_client.stalled.wait_for(stalled + 1, 10) == stalled + 1);
  flood f;
  for (int i = 0; i < tries; i++) {
    f.refused =
        send_seq(peer.gp, 0, (uint64_t)f.accepted, size, NX_RSR_NONBLOCK);
    if (f.refused != 0)
      break;
    f.accepted++;
  }
  f.refused_ms = now_ms() - t0;
  // A blocking send waits (driving progress) until there is room again.
  REQUIRE(send_seq(peer.gp, 0, (uint64_t)f.accepted, size) == 0);
  f.waited_ms = now_ms() - t0;
  uint64_t st[STAT_COUNT];
  REQUIRE(peer_stats(peer.gp, cs.me, st, 30));
  CHECK(st[STAT_SEQ_FRAMES] == (uint64_t)f.accepted + 1);
  CHECK(st[STAT_SEQ_BAD] == 0);
  return f;
}

} // namespace

TEST_CASE("a stalled receiver: sends past NX_UCX_QUEUE_MAX say NX_EAGAIN or "
          "wait, and all arrive in order",
          "[ucx]") {
  setup_env();
  setenv("NX_UCX_QUEUE_MAX", "1m", 1);
  // 256 KiB each: rendezvous, so each stays in flight until the peer
  // fetches it, which it cannot while stalled.
  flood f = stalled_flood(256u << 10, 64, "NX_UCX_QUEUE_MAX");
  INFO("stall " << stall_ms << " ms; refused after " << f.refused_ms
                << " ms; the blocking send returned after " << f.waited_ms
                << " ms");
  CHECK(f.refused == NX_EAGAIN);
  CHECK(f.accepted >= 1);
  CHECK(f.accepted <= 5); // 1 MiB in flight, plus the one that crossed it
  CHECK(f.refused_ms < stall_ms);
  CHECK(f.waited_ms >= stall_ms - 100);
}

// Small RSRs fill UCX's shared-memory FIFO to a stalled peer; past it each
// send is a request that waits in UCX, and at most NX_UCX_QUEUE_FRAMES
// (default 32) of those may be in flight: about a hundred sends are taken,
// not the million that NX_UCX_QUEUE_MAX's bytes alone (64 MiB) would take.
TEST_CASE("a stalled receiver: small sends past NX_UCX_QUEUE_FRAMES say "
          "NX_EAGAIN or wait, and all arrive in order",
          "[ucx]") {
  setup_env();
  unsetenv("NX_UCX_QUEUE_FRAMES");
  flood f = stalled_flood(8, 100000, nullptr);
  INFO("accepted " << f.accepted << " sends of 8 B before "
                   << nx_err_name(f.refused) << ", " << f.refused_ms
                   << " ms into the stall");
  CHECK(f.refused == NX_EAGAIN);
  CHECK(f.accepted >= 32);
  CHECK(f.accepted <= 2000); // the FIFO's elements, then 32 requests
  CHECK(f.refused_ms < stall_ms);
  CHECK(f.waited_ms >= stall_ms - 100);
}
