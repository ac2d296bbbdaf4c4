// Stress test of the RSR path: 8 threads x 10,000 RSRs to 4 in-process
// contexts; every RSR is delivered exactly once, with non-threaded and with
// threaded handlers, with a progress thread and in poll mode.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "latch.h"
#include "nexus.h"
#include "runtime_guard.h"

namespace {

constexpr int kThreads = 8;
constexpr int kPerThread = 10000;
constexpr int kContexts = 4;

struct sink {
  // seen[t * kPerThread + i] counts deliveries of RSR i of thread t.
  std::unique_ptr<std::atomic<uint8_t>[]> seen {
    new std::atomic<uint8_t>[ kThreads * kPerThread ]()
  };
  std::atomic<int> bad{0};
  latch total;
};

void on_item(nx_context_t *ctx, void *, nx_buffer_t *b) {
  auto *s = static_cast<sink *>(nx_context_data(ctx));
  int32_t t = -1, i = -1;
  if (nx_get_int32(b, &t) != 0 || nx_get_int32(b, &i) != 0 || t < 0 ||
      t >= kThreads || i < 0 || i >= kPerThread) {
    s->bad++;
  } else {
    s->seen[t * kPerThread + i]++;
  }
  s->total.add();
}

int sink_init(nx_context_t *ctx, void *arg) {
  auto *pair = static_cast<std::pair<sink *, int> *>(arg);
  nx_context_set_data(ctx, pair->first);
  return nx_handler_register(ctx, "item", on_item, pair->second, nullptr);
}

void stress(int kind) {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  std::vector<std::unique_ptr<sink>> sinks;
  std::vector<nx_gp_t> gps(kContexts);
  for (int c = 0; c < kContexts; c++) {
    sinks.emplace_back(new sink);
    std::pair<sink *, int> arg{sinks.back().get(), kind};
    REQUIRE(nx_context_create_local(sink_init, &arg, &gps[c]) == 0);
  }
  std::atomic<int> send_errors{0};
  std::vector<std::thread> threads;
  nx_handler_id_t id = nx_handler_id("item");
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; i++) {
        nx_buffer_t *b;
        const nx_gp_t *to = &gps[(t + i) % kContexts];
        if (nx_rsr_init(&b, to, id, 16) != 0 || nx_put_int32(b, t) != 0 ||
            nx_put_int32(b, i) != 0 || nx_rsr_send(b) != 0)
          send_errors++;
      }
    });
  }
  for (auto &th : threads)
    th.join();
  REQUIRE(send_errors == 0);
  // Each context receives a quarter of every thread's RSRs.
  const long per_ctx = (long)kThreads * kPerThread / kContexts;
  for (int c = 0; c < kContexts; c++)
    REQUIRE(sinks[c]->total.wait_for(per_ctx, 120) == per_ctx);
  for (int c = 0; c < kContexts; c++) {
    CHECK(sinks[c]->bad == 0);
    long wrong = 0;
    for (int t = 0; t < kThreads; t++)
      for (int i = 0; i < kPerThread; i++) {
        int expected = (t + i) % kContexts == c ? 1 : 0;
        if (sinks[c]->seen[t * kPerThread + i].load() != expected)
          wrong++;
      }
    CHECK(wrong == 0);
  }
  nx_stats_t s;
  REQUIRE(nx_stats_get(&s) == 0);
  CHECK(s.drop_no_handler == 0);
  CHECK(s.drop_no_context == 0);
  for (auto &gp : gps) {
    REQUIRE(nx_context_destroy(&gp) == 0);
    nx_gp_release(&gp);
  }
}

} // namespace

TEST_CASE("8 threads x 10,000 RSRs to 4 contexts, each delivered once",
          "[rsr][stress]") {
  SECTION("non-threaded handlers") { stress(NX_HANDLER_NONTHREADED); }
  SECTION("threaded handlers") { stress(NX_HANDLER_THREADED); }
  SECTION("non-threaded handlers, NX_PROGRESS=poll") {
    setenv("NX_PROGRESS", "poll", 1);
    stress(NX_HANDLER_NONTHREADED);
    unsetenv("NX_PROGRESS");
  }
  SECTION("threaded handlers, NX_PROGRESS=poll") {
    setenv("NX_PROGRESS", "poll", 1);
    stress(NX_HANDLER_THREADED);
    unsetenv("NX_PROGRESS");
  }
}
