// Tests of threaded handlers (nexus/src/progress.c): a handler that blocks
// until a later RSR wakes it does not deadlock, the pool grows when every
// pooled thread is blocked, and new-thread handlers get their own thread.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <pthread.h>

#include "latch.h"
#include "nexus.h"
#include "runtime_guard.h"

namespace {

struct gate {
  nx_mutex_t m;
  nx_cond_t c;
  bool open = false;
  latch started;
  latch finished;
  gate() {
    nx_mutex_init(&m);
    nx_cond_init(&c);
  }
};

// Threaded: announces itself, then blocks until the gate opens.
void on_block(nx_context_t *ctx, void *, nx_buffer_t *) {
  auto *g = static_cast<gate *>(nx_context_data(ctx));
  g->started.add();
  nx_mutex_lock(&g->m);
  while (!g->open)
    nx_cond_wait(&g->c, &g->m);
  nx_mutex_unlock(&g->m);
  g->finished.add();
}

// Non-threaded: opens the gate.
void on_open(nx_context_t *ctx, void *, nx_buffer_t *) {
  auto *g = static_cast<gate *>(nx_context_data(ctx));
  nx_mutex_lock(&g->m);
  g->open = true;
  nx_cond_broadcast(&g->c);
  nx_mutex_unlock(&g->m);
}

int gate_init(nx_context_t *ctx, void *arg) {
  nx_context_set_data(ctx, arg);
  int r = nx_handler_register(ctx, "block", on_block, NX_HANDLER_THREADED,
                              nullptr);
  if (r == 0)
    r = nx_handler_register(ctx, "open", on_open, NX_HANDLER_NONTHREADED,
                            nullptr);
  return r;
}

void send(const nx_gp_t *gp, const char *handler) {
  nx_buffer_t *b;
  REQUIRE(nx_rsr_init_name(&b, gp, handler, 0) == 0);
  REQUIRE(nx_rsr_send(b) == 0);
}

void blocked_until_later_rsr(int blockers) {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  gate g;
  nx_gp_t gp;
  REQUIRE(nx_context_create_local(gate_init, &g, &gp) == 0);
  for (int i = 0; i < blockers; i++)
    send(&gp, "block");
  // Every blocker must be running (and blocked) before the wake-up is sent:
  // the main thread must not be the one stuck inside a handler.
  REQUIRE(g.started.wait_for(blockers) == blockers);
  CHECK(g.finished.get() == 0);
  send(&gp, "open");
  REQUIRE(g.finished.wait_for(blockers) == blockers);
  nx_stats_t s;
  REQUIRE(nx_stats_get(&s) == 0);
  // Each blocked handler holds a thread; the pool grew to carry them.
  CHECK(s.threads_created >= (uint64_t)blockers);
  REQUIRE(nx_context_destroy(&gp) == 0);
  nx_gp_release(&gp);
}

} // namespace

TEST_CASE("a threaded handler blocks until a later RSR wakes it",
          "[threaded]") {
  SECTION("one blocker") { blocked_until_later_rsr(1); }
  SECTION("16 blockers: the pool grows") { blocked_until_later_rsr(16); }
  SECTION("NX_PROGRESS=poll") {
    setenv("NX_PROGRESS", "poll", 1);
    blocked_until_later_rsr(4);
    unsetenv("NX_PROGRESS");
  }
}

namespace {
struct where {
  latch ran;
  std::atomic<bool> on_main{false};
  pthread_t main_thread;
};
void on_where(nx_context_t *ctx, void *, nx_buffer_t *) {
  auto *w = static_cast<where *>(nx_context_data(ctx));
  if (pthread_equal(pthread_self(), w->main_thread))
    w->on_main = true;
  w->ran.add();
}
} // namespace

TEST_CASE("threaded and new-thread handlers never run on the application "
          "thread that waits",
          "[threaded]") {
  for (int kind : {NX_HANDLER_THREADED, NX_HANDLER_NEW_THREAD}) {
    runtime_guard rt;
    REQUIRE(rt.init_rc() == 0);
    where w;
    w.main_thread = pthread_self();
    nx_gp_t gp;
    struct arg_t {
      where *w;
      int kind;
    } arg{&w, kind};
    REQUIRE(nx_context_create_local(
                [](nx_context_t *ctx, void *a) {
                  auto *p = static_cast<arg_t *>(a);
                  nx_context_set_data(ctx, p->w);
                  return nx_handler_register(ctx, "where", on_where, p->kind,
                                             nullptr);
                },
                &arg, &gp) == 0);
    nx_stats_t before, after;
    REQUIRE(nx_stats_get(&before) == 0);
    for (int i = 0; i < 50; i++)
      send(&gp, "where");
    // The main thread drives progress while it waits here.
    REQUIRE(w.ran.wait_for(50) == 50);
    CHECK_FALSE(w.on_main);
    REQUIRE(nx_stats_get(&after) == 0);
    if (kind == NX_HANDLER_NEW_THREAD)
      CHECK(after.threads_created - before.threads_created >= 50);
    nx_gp_release(&gp);
  }
}
