// The driver lock given away inside a poll (nexus/src/rsr/dispatch.c,
// nxi_poll_once): a loss report's callback that blocks on a contended nexus
// mutex gives the lock away (waiter.c, hook_block), and the poll that made
// the report must go no further: the next holder polls meanwhile, and the
// poll's clock and the modules' poll policy are the holder's alone. Under
// ThreadSanitizer a poll that went on shows as a race with the next
// holder's (stop 58's CI: pvm_place_tcp, a sender killed in the middle of a
// placed value). White-box: the report is queued as a module queues one
// (nxi_drop_later), so the test links the core itself.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <thread>

#include "nexus.h"
#include "runtime_guard.h"

// rsr/dispatch.h's, declared here: that header (its buffers/buf.h) is C
// only.
extern "C" void nxi_drop_later(int err, uint64_t context, uint32_t handler);

namespace {

constexpr uint32_t kHandler = 0x4e58; // no handler of this process's

struct world {
  nx_mutex_t m;
  std::atomic<int> entered{0};
  std::atomic<int> left{0};
  std::atomic<int> err{0};
  world() { nx_mutex_init(&m); }
  ~world() { nx_mutex_destroy(&m); }
};

// The program's callback: blocks on a mutex the test thread holds.
void on_loss(int err, uint64_t, uint32_t handler, void *arg) {
  auto *w = static_cast<world *>(arg);
  if (handler != kHandler)
    return;
  w->err = err;
  w->entered++;
  nx_mutex_lock(&w->m);
  nx_mutex_unlock(&w->m);
  w->left++;
}

bool wait_for(const std::atomic<int> &v, int target) {
  for (int i = 0; i < 10000 && v.load() < target; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return v.load() >= target;
}

// Polls for `ms` milliseconds.
void poll_for(int ms) {
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < end)
    nx_poll();
}

} // namespace

TEST_CASE("a loss callback that blocks ends the poll that reported it",
          "[threading]") {
  // No progress thread: the two threads below are the only drivers.
  setenv("NX_PROGRESS", "poll", 1);
  runtime_guard rt;
  unsetenv("NX_PROGRESS");
  REQUIRE(rt.init_rc() == 0);
  world w;
  REQUIRE(nx_error_cb_set(on_loss, &w) == 0);
  for (int round = 0; round < 5; round++) {
    INFO("round " << round);
    nx_mutex_lock(&w.m);
    nxi_drop_later(NX_EPEERDEAD, nx_context_id(nx_context_self()), kHandler);
    // Its poll reports the loss, and blocks in the callback.
    std::thread reporter([] { nx_poll(); });
    REQUIRE(wait_for(w.entered, round + 1));
    // Driven from here meanwhile: the reporter gave the lock away when it
    // went to sleep on the mutex.
    poll_for(20);
    nx_mutex_unlock(&w.m);
    // Still driven while the reporter comes back out of its callback.
    poll_for(20);
    reporter.join();
    CHECK(w.left.load() == round + 1);
    CHECK(w.err.load() == NX_EPEERDEAD);
  }
  REQUIRE(nx_error_cb_set(nullptr, nullptr) == 0);
  CHECK(rt.finalize() == 0);
}
