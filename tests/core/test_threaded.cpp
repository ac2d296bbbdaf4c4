// Tests of threaded handlers (the engine: nexus/src/dispatch.c, primary.c,
// waiter.c): a handler that blocks until a later RSR wakes it does not
// deadlock, the pool grows when every pooled thread is blocked, and new-thread
// handlers get their own thread.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <ctime>
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
  int r =
      nx_handler_register(ctx, "block", on_block, NX_HANDLER_THREADED, nullptr);
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

namespace {
// H1 waits for A, then sets B; H2 waits for B. If H2 ran nested inside H1's
// wait (on H1's stack), B could never be set: a deadlock.
struct chain {
  nx_mutex_t m;
  nx_cond_t c;
  bool a = false, b = false;
  latch started1, started2, done;
  chain() {
    nx_mutex_init(&m);
    nx_cond_init(&c);
  }
  void wait_flag(bool chain::*flag) {
    nx_mutex_lock(&m);
    while (!(this->*flag))
      nx_cond_wait(&c, &m);
    nx_mutex_unlock(&m);
  }
  void set_flag(bool chain::*flag) {
    nx_mutex_lock(&m);
    this->*flag = true;
    nx_cond_broadcast(&c);
    nx_mutex_unlock(&m);
  }
};
void on_h1(nx_context_t *ctx, void *, nx_buffer_t *) {
  auto *c = static_cast<chain *>(nx_context_data(ctx));
  c->started1.add();
  c->wait_flag(&chain::a);
  c->set_flag(&chain::b);
  c->done.add();
}
void on_h2(nx_context_t *ctx, void *, nx_buffer_t *) {
  auto *c = static_cast<chain *>(nx_context_data(ctx));
  c->started2.add();
  c->wait_flag(&chain::b);
  c->done.add();
}
void on_a(nx_context_t *ctx, void *, nx_buffer_t *) {
  static_cast<chain *>(nx_context_data(ctx))->set_flag(&chain::a);
}
} // namespace

TEST_CASE("a waiting threaded handler never runs another threaded handler "
          "on its own stack",
          "[threaded]") {
  // No spin phase: H1 drives progress from its wait at once, which is when
  // it could be tempted to run H2 itself.
  setenv("NX_SPIN_US", "0", 1);
  runtime_guard rt;
  unsetenv("NX_SPIN_US");
  REQUIRE(rt.init_rc() == 0);
  chain ch;
  nx_gp_t gp;
  REQUIRE(nx_context_create_local(
              [](nx_context_t *ctx, void *arg) {
                nx_context_set_data(ctx, arg);
                int r = nx_handler_register(ctx, "h1", on_h1,
                                            NX_HANDLER_THREADED, nullptr);
                if (r == 0)
                  r = nx_handler_register(ctx, "h2", on_h2, NX_HANDLER_THREADED,
                                          nullptr);
                if (r == 0)
                  r = nx_handler_register(ctx, "a", on_a,
                                          NX_HANDLER_NONTHREADED, nullptr);
                return r;
              },
              &ch, &gp) == 0);
  send(&gp, "h1");
  REQUIRE(ch.started1.wait_for(1) == 1);
  send(&gp, "h2");
  // Do not drive progress here: leave H2 to the runtime threads (and to H1,
  // which is driving while it waits).
  struct timespec pause = {0, 20 * 1000 * 1000};
  nanosleep(&pause, nullptr);
  REQUIRE(ch.started2.wait_for(1, 10) == 1);
  send(&gp, "a");
  CHECK(ch.done.wait_for(2, 10) == 2);
  nx_gp_release(&gp);
}
