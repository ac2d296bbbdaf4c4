// A peer process that dies under the tcp module: killed with SIGKILL in
// the middle of a ping-pong, or gone before the first connection. Sends
// then fail with NX_EPEERDEAD, the program hears of it through its error
// callback within a bounded time, and nothing hangs. And one that ends
// normally: the last counts its nx_finalize tells are acknowledged.
#include <catch2/catch.hpp>

#include <atomic>
#include <csignal>
#include <thread>

#include "capture_stderr.h"
#include "runtime_guard.h"
#define NX_HARNESS_TCP
#include "peer_harness.h"

using namespace tcp_test;

namespace {

struct deaths {
  latch n;
  std::atomic<int> peer_dead{0};    // process-wide reports (handler 0)
  std::atomic<int> rsr_lost{0};     // accepted RSRs lost with the peer
  std::atomic<uint64_t> context{0}; // of the last process-wide report
};

void on_error(int err, uint64_t context, uint32_t handler, void *arg) {
  auto *d = static_cast<deaths *>(arg);
  if (err == NX_EPEERDEAD && handler == 0) {
    d->context = context;
    d->peer_dead++;
  } else if (err == NX_EPEERDEAD) {
    d->rsr_lost++;
  }
  d->n.add();
  // Wake this test's waiters too, as a program waiting for replies would.
  the_client.echoed.add(0);
}

// Waits until `pred` holds, at most `seconds`.
template <class F> bool wait_until(deaths &d, F pred, int seconds = 10) {
  uint64_t end = now_ms() + (uint64_t)seconds * 1000u;
  while (!pred()) {
    if (now_ms() >= end)
      return false;
    d.n.wait_for(d.n.get() + 1, 1);
  }
  return true;
}

// Sends echoes of `size` bytes until one fails; SIGKILLs the peer from
// another thread after `kill_after_ms`. Returns the failing send's code.
int pingpong_until_death(peer_process &peer, const nx_gp_t &me, size_t size,
                         unsigned kill_after_ms) {
  pid_t pid = peer.pid;
  std::thread killer([pid, kill_after_ms] {
    sleep_ms(kill_after_ms);
    kill(pid, SIGKILL);
  });
  int r = 0;
  uint64_t tag = 1000;
  uint64_t end = now_ms() + 20000;
  while (r == 0 && now_ms() < end) {
    long before = the_client.echoed.get();
    r = send_echo(peer.gp, me, tag++, size);
    if (r == 0)
      the_client.echoed.wait_for(before + 1, 1);
  }
  killer.join();
  return r;
}

} // namespace

TEST_CASE_METHOD(session,
                 "kill -9 of the peer in the middle of a ping-pong: sends fail "
                 "with NX_EPEERDEAD, the error callback hears of it",
                 "[tcp]") {
  deaths d;
  REQUIRE(nx_error_cb_set(on_error, &d) == 0);
  size_t size = GENERATE(as<size_t>{}, 64, 4u << 20);
  INFO("payload of " << size << " bytes");
  peer_process peer;
  REQUIRE(peer.start() == "");
  REQUIRE(echo_round_trip(peer.gp, cs.me, 1, size));
  uint64_t t0 = now_ms();
  CHECK(pingpong_until_death(peer, cs.me, size, 100) == NX_EPEERDEAD);
  CHECK(now_ms() - t0 < 15000);
  // The process-wide report names every context of the dead process.
  REQUIRE(wait_until(d, [&] { return d.peer_dead > 0; }));
  CHECK(d.peer_dead == 1);
  CHECK(d.context == (nx_gp_context(&peer.gp) & ~(uint64_t)0xffffffffu));
  // Later sends fail at once.
  uint64_t t1 = now_ms();
  CHECK(send_echo(peer.gp, cs.me, 7, 10) == NX_EPEERDEAD);
  CHECK(send_echo(peer.gp, cs.me, 8, 1 << 20) == NX_EPEERDEAD);
  CHECK(now_ms() - t1 < 1000);
  nx_stats_t s;
  REQUIRE(nx_stats_get(&s) == 0);
  CHECK(s.peers_failed == 1);
  nx_error_cb_set(nullptr, nullptr);
}

TEST_CASE_METHOD(
    session,
    "a thread waiting for a reply from a peer that dies wakes through "
    "the error callback",
    "[tcp]") {
  deaths d;
  REQUIRE(nx_error_cb_set(on_error, &d) == 0);
  peer_process peer;
  REQUIRE(peer.start() == "");
  REQUIRE(echo_round_trip(peer.gp, cs.me, 1, 10));
  // The peer sleeps in a handler, so the echo below is never answered.
  REQUIRE(send_stall(peer.gp, cs.me, 60000) == 0);
  REQUIRE(the_client.stalled.wait_for(1, 10) == 1);
  REQUIRE(send_echo(peer.gp, cs.me, 2, 10) == 0);
  pid_t pid = peer.pid;
  std::thread killer([pid] {
    sleep_ms(200);
    kill(pid, SIGKILL);
  });
  uint64_t t0 = now_ms();
  // Wakes without sending anything more.
  CHECK(wait_until(d, [&] { return d.peer_dead > 0; }));
  CHECK(now_ms() - t0 < 5000);
  killer.join();
  CHECK(d.peer_dead == 1);
  CHECK(send_echo(peer.gp, cs.me, 3, 10) == NX_EPEERDEAD);
  nx_error_cb_set(nullptr, nullptr);
}

TEST_CASE_METHOD(session,
                 "a peer gone before the first connection: the RSR is reported "
                 "lost, later sends fail",
                 "[tcp]") {
  deaths d;
  REQUIRE(nx_error_cb_set(on_error, &d) == 0);
  peer_process peer;
  REQUIRE(peer.start() == "");
  // It quits on a "quit" from us, which needs a connection: kill it
  // instead, so nothing was ever connected.
  peer.kill_now();
  // Accepted (the connection is made lazily), then lost with the peer.
  CHECK(send_echo(peer.gp, cs.me, 1, 10) == 0);
  CHECK(wait_until(d, [&] { return d.rsr_lost > 0 && d.peer_dead > 0; }));
  CHECK(d.rsr_lost == 1);
  CHECK(d.peer_dead == 1);
  CHECK(send_echo(peer.gp, cs.me, 2, 10) == NX_EPEERDEAD);
  nx_stats_t s;
  REQUIRE(nx_stats_get(&s) == 0);
  CHECK(s.rsr_failed == 1);
  nx_error_cb_set(nullptr, nullptr);
}

TEST_CASE_METHOD(session,
                 "a peer's final counts (RSRs it ran while nx_finalize waited) "
                 "reach the sender and are acknowledged at once",
                 "[tcp]") {
  // nx_finalize tells its peers their counts, waits until its own RSRs
  // were handled (docs/design.md section 9), and then tells the counts
  // that grew meanwhile as final ones, which each peer acknowledges. B's
  // wait is made long: its RSRs went to A, which is stopped (SIGSTOP) for
  // 1.4 s. Meanwhile this process keeps sending B RSRs, which B runs:
  // those counts go as final ones, to this process. They once went marked
  // as a fence's answer: never acknowledged, so B waited its whole second
  // and said so ("did not acknowledge", at NX_DEBUG=1).
  //
  // A is stopped rather than held in a handler of ours: then this process
  // had an RSR of its own unconfirmed at A, and A's answer to it, at the
  // end of the hold, woke this process's driver, which asked B for its
  // counts at once; B's answer then told them just before its final round
  // did, which found nothing left to tell (about one run in four).
  // Whether B has final counts to tell still depends on timing (an answer
  // of B's may go after the last RSR it ran), so the case runs again, up
  // to 3 times, until B told final counts; the checks are on that run.
  auto run_once = [&]() {
    peer_process a;
    REQUIRE(a.start() == "");
    std::string out = capture_stderr([&] {
      peer_process b;
      REQUIRE(b.start({"NX_DEBUG=2"}) == "");
      REQUIRE(introduce(b.gp, a.gp) == 0);
      REQUIRE(kill(a.pid, SIGSTOP) == 0);
      std::thread resume([&] {
        sleep_ms(1400);
        kill(a.pid, SIGCONT);
      });
      // CHECK, not REQUIRE, until `resume` is joined: A must go on.
      CHECK(blast(b.gp, 10, 0) == 0); // to A: unconfirmed while A stops
      // RSRs to B until it has ended (those after its end are lost, and
      // reported to this process: not what this case checks).
      std::atomic<bool> stop{false};
      std::thread sender([&] {
        for (uint64_t i = 0; !stop; i++) {
          nx_buffer_t *buf;
          if (nx_rsr_init_name(&buf, &b.gp, "seq", nx_sizeof_int64(1)) != 0)
            break;
          if (nx_put_uint64(buf, i) != 0) {
            nx_buffer_release(buf);
            break;
          }
          if (nx_rsr_send(buf) != 0)
            break;
          sleep_ms(2);
        }
      });
      sleep_ms(100);
      CHECK(b.quit() == 0); // B finalizes, waits for A, and exits
      stop = true;
      sender.join();
      resume.join();
    });
    CHECK(a.quit() == 0);
    return out;
  };
  std::string err;
  for (int attempt = 1; attempt <= 3; attempt++) {
    err = run_once();
    if (err.find("final counts told to 1 process") != std::string::npos)
      break;
    std::printf("attempt %d: B had no final counts to tell\n", attempt);
  }
  INFO(err);
  CHECK(err.find("final counts told to 1 process") != std::string::npos);
  CHECK(err.find("did not acknowledge their final counts") ==
        std::string::npos);
}
