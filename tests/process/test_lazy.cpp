// Lazy threaded handlers between processes (nexus/src/rsr/fiber.c): many
// handlers park at once in one process, each on its own condition variable,
// and RSRs from another process resume them one by one. Parked handlers hold
// no thread.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "latch.h"
#include "nexus.h"
#include "runtime_guard.h"

#if defined(__SANITIZE_THREAD__)
// ThreadSanitizer keeps a large state per fiber: fewer handlers there.
#define PARKED 1000
#else
#define PARKED 10000
#endif

namespace {

struct slot {
  nx_mutex_t m;
  nx_cond_t c;
  bool go = false;
  slot() {
    nx_mutex_init(&m);
    nx_cond_init(&c);
  }
};

struct world {
  std::vector<slot> slots{PARKED};
  std::atomic<int> parked_before_release{0};
  std::atomic<int> released{0};
  std::atomic<int> wrong_context{0};
  latch done;
};

int32_t slot_of(nx_buffer_t *buf) {
  int32_t i = -1;
  if (nx_get_int32(buf, &i) != 0 || i < 0 || i >= PARKED)
    return -1;
  return i;
}

// Threaded: waits until its slot is released.
void on_park(nx_context_t *ctx, void *, nx_buffer_t *buf) {
  auto *w = static_cast<world *>(nx_context_data(ctx));
  int32_t i = slot_of(buf);
  if (i < 0)
    return;
  slot &s = w->slots[i];
  nx_mutex_lock(&s.m);
  if (w->released.load() == 0)
    w->parked_before_release++;
  while (!s.go)
    nx_cond_wait(&s.c, &s.m);
  nx_mutex_unlock(&s.m);
  // Resumed, maybe on another thread: still in its own context.
  if (nx_context_self() != ctx)
    w->wrong_context++;
  w->done.add();
}

// Non-threaded: releases one slot.
void on_release(nx_context_t *ctx, void *, nx_buffer_t *buf) {
  auto *w = static_cast<world *>(nx_context_data(ctx));
  int32_t i = slot_of(buf);
  if (i < 0)
    return;
  slot &s = w->slots[i];
  w->released++;
  nx_mutex_lock(&s.m);
  s.go = true;
  nx_cond_signal(&s.c);
  nx_mutex_unlock(&s.m);
}

nx_node_t local_node() {
  nx_node_t node;
  REQUIRE(nx_nodes_acquire("localhost", 1, &node) == 0);
  return node;
}

} // namespace

TEST_CASE("parked threaded handlers are resumed by RSRs from another process",
          "[lazy]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  world w;
  nx_gp_t me;
  REQUIRE(nx_context_create_local(
              [](nx_context_t *ctx, void *arg) {
                nx_context_set_data(ctx, arg);
                int r = nx_handler_register(ctx, "park", on_park,
                                            NX_HANDLER_THREADED, nullptr);
                if (r == 0)
                  r = nx_handler_register(ctx, "release", on_release,
                                          NX_HANDLER_NONTHREADED, nullptr);
                return r;
              },
              &w, &me) == 0);
  nx_node_t node = local_node();
  nx_gp_t child;
  REQUIRE(nx_context_create(&node, CHILD_EXE, nullptr, &child) == 0);
  nx_stats_t before, after;
  REQUIRE(nx_stats_get(&before) == 0);

  nx_buffer_t *b;
  REQUIRE(nx_rsr_init_name(&b, &child, "storm", 64) == 0);
  REQUIRE(nx_put_gp(b, &me) == 0);
  REQUIRE(nx_put_int32(b, PARKED) == 0);
  REQUIRE(nx_rsr_send(b) == 0);

  CHECK(w.done.wait_for(PARKED, 300) == PARKED);
  REQUIRE(nx_stats_get(&after) == 0);
  // Every "park" arrived before the first "release": all waited at once.
  CHECK(w.parked_before_release.load() == PARKED);
  CHECK(w.wrong_context.load() == 0);
  CHECK(after.lazy_started - before.lazy_started == (uint64_t)PARKED);
  CHECK(after.lazy_parked - before.lazy_parked >= (uint64_t)PARKED);
  // They held no threads: the pool stayed small.
  CHECK(after.threads_created - before.threads_created < 16);
  REQUIRE(nx_context_destroy(&child) == 0);
  nx_gp_release(&child);
  nx_gp_release(&me);
}
