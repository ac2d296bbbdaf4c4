// Tests of threaded handlers (the engine: nexus/src/rsr/dispatch.c, fiber.c,
// primary.c, waiter.c): a handler that blocks until a later RSR wakes it does
// not deadlock; lazily (NX_THREADED=lazy, the default) it parks on a stack of
// its own and holds no thread, on runtime threads (NX_THREADED=thread) the
// pool grows when every pooled thread is blocked; new-thread handlers get
// their own thread.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <pthread.h>
#include <vector>
#include <unistd.h>

#include "capture_stderr.h"
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

// Whether threaded handlers run lazily in this build and setting.
bool lazy_mode() {
  const char *t = std::getenv("NX_THREADED");
  return NX_TEST_HAVE_FCONTEXT && (t == nullptr || std::strcmp(t, "lazy") == 0);
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
  if (lazy_mode()) {
    // Each parked; none held a thread of its own.
    CHECK(s.lazy_started >= (uint64_t)blockers);
    CHECK(s.lazy_parked >= (uint64_t)blockers);
    if (blockers > 4)
      CHECK(s.threads_created < (uint64_t)blockers);
  } else {
    // Each blocked handler holds a thread; the pool grew to carry them.
    CHECK(s.threads_created >= (uint64_t)blockers);
    CHECK(s.lazy_started == 0);
  }
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
  SECTION("NX_THREADED=thread: 16 blockers") {
    setenv("NX_THREADED", "thread", 1);
    blocked_until_later_rsr(16);
    unsetenv("NX_THREADED");
  }
  SECTION("NX_THREADED=thread, NX_PROGRESS=poll") {
    setenv("NX_THREADED", "thread", 1);
    setenv("NX_PROGRESS", "poll", 1);
    blocked_until_later_rsr(4);
    unsetenv("NX_PROGRESS");
    unsetenv("NX_THREADED");
  }
}

namespace {
struct where {
  latch ran;
  std::atomic<bool> on_main{false};
  std::atomic<bool> on_main_stack{false};
  pthread_t main_thread;
  const char *main_stack; // an address in the main thread's stack
};
void on_where(nx_context_t *ctx, void *, nx_buffer_t *) {
  auto *w = static_cast<where *>(nx_context_data(ctx));
  char here;
  if (pthread_equal(pthread_self(), w->main_thread)) {
    w->on_main = true;
    // Within 8 MiB below the waiting frame: the main thread's own stack.
    if (&here < w->main_stack && w->main_stack - &here < (8l << 20))
      w->on_main_stack = true;
  }
  w->ran.add();
}
} // namespace

TEST_CASE("new-thread handlers never run on the application thread that "
          "waits; threaded ones only on a stack of their own",
          "[threaded]") {
  for (int kind : {NX_HANDLER_THREADED, NX_HANDLER_NEW_THREAD}) {
    runtime_guard rt;
    REQUIRE(rt.init_rc() == 0);
    where w;
    char top;
    w.main_thread = pthread_self();
    w.main_stack = &top;
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
    // A waiting thread may start a lazy threaded handler, on its own stack.
    if (kind == NX_HANDLER_NEW_THREAD || !lazy_mode())
      CHECK_FALSE(w.on_main);
    CHECK_FALSE(w.on_main_stack);
    REQUIRE(nx_stats_get(&after) == 0);
    if (kind == NX_HANDLER_NEW_THREAD)
      CHECK(after.threads_created - before.threads_created >= 50);
    if (kind == NX_HANDLER_THREADED && lazy_mode())
      CHECK(after.lazy_started - before.lazy_started == 50);
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

// Lazy threaded handlers (NX_THREADED=lazy): parking on a contended mutex, a
// handler that cannot park (it holds a mutex) and so runs another on top of
// its own stack, one that blocks in a system call, and timed waits.
namespace {

struct lazy_world {
  nx_mutex_t big; // the contended mutex
  nx_mutex_t m;
  nx_cond_t c;
  bool flag = false;
  long count = 0;
  std::atomic<int> started{0};
  std::atomic<int> bad{0};
  std::atomic<int> returned{0};
  int pipe_fd = -1;
  latch done;
  lazy_world() {
    nx_mutex_init(&big);
    nx_mutex_init(&m);
    nx_cond_init(&c);
  }
};

lazy_world *lw(nx_context_t *ctx) {
  return static_cast<lazy_world *>(nx_context_data(ctx));
}

// Threaded: takes the contended mutex.
void on_count(nx_context_t *ctx, void *, nx_buffer_t *) {
  lazy_world *w = lw(ctx);
  w->started++;
  uint64_t id = nx_thread_id();
  if (nx_mutex_lock(&w->big) != 0) {
    w->bad++;
    return;
  }
  // Parked and resumed, maybe on another OS thread: the same identity.
  if (nx_thread_id() != id || id == 0)
    w->bad++;
  w->count++;
  if (nx_mutex_unlock(&w->big) != 0)
    w->bad++;
  if (nx_context_self() != ctx)
    w->bad++;
  w->done.add();
}

// Threaded: waits for the flag while it holds `big`, so it cannot park; its
// wait drives progress and runs "setter" on a stack on top of its own.
void on_holder(nx_context_t *ctx, void *, nx_buffer_t *) {
  lazy_world *w = lw(ctx);
  nx_mutex_lock(&w->big);
  nx_mutex_lock(&w->m);
  w->started++;
  while (!w->flag)
    nx_cond_wait(&w->c, &w->m);
  nx_mutex_unlock(&w->m);
  nx_mutex_unlock(&w->big);
  w->done.add();
}

// Threaded: sets the flag.
void on_setter(nx_context_t *ctx, void *, nx_buffer_t *) {
  lazy_world *w = lw(ctx);
  nx_mutex_lock(&w->m);
  w->flag = true;
  nx_cond_broadcast(&w->c);
  nx_mutex_unlock(&w->m);
  w->done.add();
}

// Threaded: blocks in read(2) until the test writes the pipe.
void on_reader(nx_context_t *ctx, void *, nx_buffer_t *) {
  lazy_world *w = lw(ctx);
  w->started++;
  char c;
  if (read(w->pipe_fd, &c, 1) != 1)
    w->bad++;
  w->done.add();
}

// Non-threaded: counts.
void on_tick(nx_context_t *ctx, void *, nx_buffer_t *) { lw(ctx)->done.add(); }

// Threaded: ends itself with nx_thread_exit (after a park, so on whatever
// thread resumed it); nothing after that call runs.
void on_quit(nx_context_t *ctx, void *, nx_buffer_t *) {
  lazy_world *w = lw(ctx);
  nx_mutex_lock(&w->m);
  while (!w->flag)
    nx_cond_wait(&w->c, &w->m);
  nx_mutex_unlock(&w->m);
  w->done.add();
  nx_thread_exit(nullptr);
  w->bad++;
}

// Non-threaded: nx_thread_exit must not end the thread it runs on (the
// driver's, or a waiting one's); the call returns.
void on_quit_here(nx_context_t *ctx, void *, nx_buffer_t *) {
  lazy_world *w = lw(ctx);
  nx_thread_exit(nullptr);
  w->returned++;
  w->done.add();
}

// New-thread: ends its own thread; nothing after the call runs.
void on_quit_new(nx_context_t *ctx, void *, nx_buffer_t *) {
  lazy_world *w = lw(ctx);
  w->done.add();
  nx_thread_exit(nullptr);
  w->bad++;
}

// Threaded: a timed wait that times out (a timed wait does not park).
void on_timed(nx_context_t *ctx, void *, nx_buffer_t *) {
  lazy_world *w = lw(ctx);
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  t.tv_nsec += 20 * 1000 * 1000;
  if (t.tv_nsec >= 1000000000L) {
    t.tv_sec++;
    t.tv_nsec -= 1000000000L;
  }
  nx_mutex_lock(&w->m);
  int r = 0;
  while (!w->flag && r == 0)
    r = nx_cond_timedwait(&w->c, &w->m, &t);
  nx_mutex_unlock(&w->m);
  if (r != NX_ETIMEDOUT)
    w->bad++;
  w->done.add();
}

int lazy_init(nx_context_t *ctx, void *arg) {
  nx_context_set_data(ctx, arg);
  struct {
    const char *name;
    nx_handler_fn fn;
    int kind;
  } hs[] = {{"count", on_count, NX_HANDLER_THREADED},
            {"holder", on_holder, NX_HANDLER_THREADED},
            {"setter", on_setter, NX_HANDLER_THREADED},
            {"reader", on_reader, NX_HANDLER_THREADED},
            {"tick", on_tick, NX_HANDLER_NONTHREADED},
            {"quit", on_quit, NX_HANDLER_THREADED},
            {"quit_here", on_quit_here, NX_HANDLER_NONTHREADED},
            {"quit_new", on_quit_new, NX_HANDLER_NEW_THREAD},
            {"timed", on_timed, NX_HANDLER_THREADED}};
  for (auto &h : hs) {
    int r = nx_handler_register(ctx, h.name, h.fn, h.kind, nullptr);
    if (r != 0)
      return r;
  }
  return 0;
}

// A runtime with one context that has the handlers above; `w` is its data.
struct lazy_fixture {
  runtime_guard rt;
  lazy_world w;
  nx_gp_t gp = NX_GP_NULL;
  lazy_fixture() {
    REQUIRE(rt.init_rc() == 0);
    REQUIRE(nx_context_create_local(lazy_init, &w, &gp) == 0);
  }
  ~lazy_fixture() { nx_gp_release(&gp); }
};

// Waits without entering nexus (so that no handler starts on this thread).
bool sleep_until(const std::atomic<int> &v, int target) {
  for (int i = 0; i < 30000 && v.load() < target; i++) {
    struct timespec t = {0, 1000 * 1000};
    nanosleep(&t, nullptr);
  }
  return v.load() >= target;
}

} // namespace

TEST_CASE("lazy threaded handlers park on a contended mutex", "[threaded]") {
  if (!lazy_mode())
    return; // NX_THREADED=thread, or built without Boost.Context
  lazy_fixture f;
  lazy_world &w = f.w;
  nx_gp_t &gp = f.gp;
  nx_stats_t before, after;
  REQUIRE(nx_stats_get(&before) == 0);
  REQUIRE(nx_mutex_lock(&w.big) == 0);
  const int n = 100;
  for (int i = 0; i < n; i++)
    send(&gp, "count");
  // All start on the progress thread and park behind this thread's lock.
  // `started` counts before the lock is tried: wait for the parks too, or
  // the last handler may find the lock free.
  REQUIRE(sleep_until(w.started, n));
  for (int i = 0; i < 30000; i++) {
    REQUIRE(nx_stats_get(&after) == 0);
    if (after.lazy_parked - before.lazy_parked >= (uint64_t)n)
      break;
    struct timespec t = {0, 1000 * 1000};
    nanosleep(&t, nullptr);
  }
  REQUIRE(nx_mutex_unlock(&w.big) == 0);
  REQUIRE(w.done.wait_for(n) == n);
  REQUIRE(nx_stats_get(&after) == 0);
  CHECK(w.count == n);
  CHECK(w.bad.load() == 0);
  CHECK(after.lazy_parked - before.lazy_parked >= (uint64_t)n);
  CHECK(after.threads_created - before.threads_created < 8);
}

TEST_CASE("a lazy handler that holds a mutex waits on its thread and runs "
          "the next handler on top of its stack",
          "[threaded]") {
  if (!lazy_mode())
    return;
  setenv("NX_SPIN_US", "0", 1);
  lazy_fixture f;
  unsetenv("NX_SPIN_US");
  lazy_world &w = f.w;
  nx_gp_t &gp = f.gp;
  send(&gp, "holder");
  REQUIRE(sleep_until(w.started, 1));
  // "count" wants the mutex the holder keeps; if it starts on top of the
  // holder's stack (same OS thread) it must wait for it, not be taken for
  // its owner.
  send(&gp, "count");
  REQUIRE(sleep_until(w.started, 2));
  send(&gp, "setter");
  CHECK(w.done.wait_for(3, 30) == 3);
  CHECK(w.count == 1);
  CHECK(w.bad.load() == 0);
}

TEST_CASE("a lazy handler blocked in a system call does not stop progress",
          "[threaded]") {
  if (!lazy_mode())
    return;
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  lazy_world w;
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  w.pipe_fd = fds[0];
  nx_gp_t gp;
  REQUIRE(nx_context_create_local(lazy_init, &w, &gp) == 0);
  send(&gp, "reader");
  REQUIRE(sleep_until(w.started, 1));
  // The reader holds the progress thread: other RSRs still run.
  for (int i = 0; i < 100; i++)
    send(&gp, "tick");
  CHECK(w.done.wait_for(100, 30) == 100);
  REQUIRE(write(fds[1], "x", 1) == 1);
  CHECK(w.done.wait_for(101, 30) == 101);
  CHECK(w.bad.load() == 0);
  nx_gp_release(&gp);
  close(fds[0]);
  close(fds[1]);
}

TEST_CASE("nx_thread_exit in a lazy handler ends the handler, not its thread",
          "[threaded]") {
  if (!lazy_mode())
    return;
  lazy_fixture f;
  lazy_world &w = f.w;
  nx_gp_t &gp = f.gp;
  nx_stats_t before, after;
  REQUIRE(nx_stats_get(&before) == 0);
  for (int i = 0; i < 20; i++)
    send(&gp, "quit");
  nx_mutex_lock(&w.m);
  w.flag = true;
  nx_cond_broadcast(&w.c);
  nx_mutex_unlock(&w.m);
  CHECK(w.done.wait_for(20, 30) == 20);
  // The threads they ran on go on: more RSRs are handled.
  for (int i = 0; i < 20; i++)
    send(&gp, "count");
  CHECK(w.done.wait_for(40, 30) == 40);
  CHECK(w.bad.load() == 0);
  REQUIRE(nx_stats_get(&after) == 0);
  CHECK(after.threads_created - before.threads_created < 8);
}

TEST_CASE("nx_thread_exit in a non-threaded handler returns and says so; in "
          "a new-thread handler it ends that thread, and nx_finalize finds "
          "nothing left",
          "[threaded]") {
  // In any mode (lazy or not). Before: the non-threaded handler ended the
  // progress thread (nothing ran after it), and nx_finalize returned
  // NX_EBUSY for the new-thread handlers' ended threads.
  lazy_world w;
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  nx_gp_t gp = NX_GP_NULL;
  REQUIRE(nx_context_create_local(lazy_init, &w, &gp) == 0);
  std::string err = capture_stderr([&] {
    for (int i = 0; i < 5; i++)
      send(&gp, "quit_here");
    CHECK(w.done.wait_for(5, 30) == 5);
  });
  CHECK(w.returned.load() == 5);
  const std::string said = "nx_thread_exit called in a handler that runs on "
                           "a thread not its own";
  size_t at = err.find(said);
  CHECK(at != std::string::npos);
  if (at != std::string::npos)
    CHECK(err.find(said, at + 1) == std::string::npos); // said once
  // The thread those ran on goes on: more RSRs are handled.
  for (int i = 0; i < 5; i++)
    send(&gp, "tick");
  CHECK(w.done.wait_for(10, 30) == 10);
  nx_stats_t before, after;
  REQUIRE(nx_stats_get(&before) == 0);
  for (int i = 0; i < 5; i++)
    send(&gp, "quit_new");
  CHECK(w.done.wait_for(15, 30) == 15);
  REQUIRE(nx_stats_get(&after) == 0);
  CHECK(w.bad.load() == 0);
  CHECK(after.rsr_handled - before.rsr_handled == 5);
  nx_gp_release(&gp);
  CHECK(rt.finalize() == 0);
}

TEST_CASE("a timed wait in a lazy handler times out", "[threaded]") {
  lazy_fixture f;
  lazy_world &w = f.w;
  nx_gp_t &gp = f.gp;
  for (int i = 0; i < 4; i++)
    send(&gp, "timed");
  CHECK(w.done.wait_for(4, 30) == 4);
  CHECK(w.bad.load() == 0);
}

namespace {
// A relay of lazy handlers on one condition variable: handler i waits until
// the token is i, then passes it on. Sent in reverse order by several
// application threads at once, so that they all park first; every pass
// wakes all of them (broadcast), and all but one park again.
struct relay {
  nx_mutex_t m;
  nx_cond_t c;
  int token = -1;
  std::atomic<int> arrived{0};
  std::atomic<int> bad{0};
  latch done;
  relay() {
    nx_mutex_init(&m);
    nx_cond_init(&c);
  }
};

void on_relay(nx_context_t *ctx, void *, nx_buffer_t *buf) {
  auto *r = static_cast<relay *>(nx_context_data(ctx));
  int32_t i = -1;
  if (nx_get_int32(buf, &i) != 0) {
    r->bad++;
    return;
  }
  uint64_t id = nx_thread_id();
  nx_mutex_lock(&r->m);
  r->arrived++;
  while (r->token != i)
    nx_cond_wait(&r->c, &r->m);
  r->token = i + 1;
  nx_cond_broadcast(&r->c);
  nx_mutex_unlock(&r->m);
  if (nx_thread_id() != id || nx_context_self() != ctx)
    r->bad++;
  r->done.add();
}

void relay_run(int n, int senders) {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  relay r;
  nx_gp_t gp;
  REQUIRE(nx_context_create_local(
              [](nx_context_t *ctx, void *arg) {
                nx_context_set_data(ctx, arg);
                return nx_handler_register(ctx, "relay", on_relay,
                                           NX_HANDLER_THREADED, nullptr);
              },
              &r, &gp) == 0);
  struct job {
    nx_gp_t *gp;
    int first, step, n;
  };
  std::vector<job> jobs;
  for (int s = 0; s < senders; s++)
    jobs.push_back({&gp, n - 1 - s, senders, n});
  std::vector<nx_thread_t> threads(senders);
  for (int s = 0; s < senders; s++)
    REQUIRE(nx_thread_create(
                &threads[s],
                [](void *a) -> void * {
                  auto *j = static_cast<job *>(a);
                  for (int i = j->first; i >= 0; i -= j->step) {
                    nx_buffer_t *b;
                    if (nx_rsr_init_name(&b, j->gp, "relay", 4) != 0 ||
                        nx_put_int32(b, i) != 0 || nx_rsr_send(b) != 0)
                      return (void *)1;
                  }
                  return nullptr;
                },
                &jobs[s]) == 0);
  for (int s = 0; s < senders; s++) {
    void *res = nullptr;
    REQUIRE(nx_thread_join(threads[s], &res) == 0);
    CHECK(res == nullptr);
  }
  // Drive without waiting in nexus (no handler starts on this thread): in
  // poll mode nothing else dispatches the RSRs.
  for (int i = 0; i < 30000 && r.arrived.load() < n; i++) {
    nx_poll();
    struct timespec t = {0, 100 * 1000};
    nanosleep(&t, nullptr);
  }
  REQUIRE(r.arrived.load() == n);
  nx_mutex_lock(&r.m);
  r.token = 0;
  nx_cond_broadcast(&r.c);
  nx_mutex_unlock(&r.m);
  CHECK(r.done.wait_for(n, 120) == n);
  CHECK(r.token == n);
  CHECK(r.bad.load() == 0);
  nx_gp_release(&gp);
}
} // namespace

TEST_CASE("a relay of threaded handlers parked on one condition variable",
          "[threaded]") {
  SECTION("lazy or as configured") { relay_run(200, 4); }
  SECTION("NX_PROGRESS=poll") {
    setenv("NX_PROGRESS", "poll", 1);
    relay_run(100, 3);
    unsetenv("NX_PROGRESS");
  }
}

namespace {
// Handlers of every kind call nx_flush and nx_gateway_use, which a handler
// may not (rsr.h, gp.h: NX_EBUSY); a lazy threaded handler, on a stack of
// its own, is a handler too.
std::atomic<int> busy_flush[3], busy_gw[3];
latch *busy_done;
nx_gp_t busy_gw_gp; // a gp that says it names a gateway (another process)

void busy_check(int kind) {
  busy_flush[kind] = nx_flush(0);
  busy_gw[kind] = nx_gateway_use(&busy_gw_gp);
  busy_done->add();
}
void busy0(nx_context_t *, void *, nx_buffer_t *) { busy_check(0); }
void busy1(nx_context_t *, void *, nx_buffer_t *) { busy_check(1); }
void busy2(nx_context_t *, void *, nx_buffer_t *) { busy_check(2); }

void busy_run() {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  for (int k = 0; k < 3; k++)
    busy_flush[k] = busy_gw[k] = 1;
  latch done;
  busy_done = &done;
  nx_context_t *self = nx_context_self();
  REQUIRE(nx_handler_register(self, "busy0", busy0, NX_HANDLER_NONTHREADED,
                              nullptr) == 0);
  REQUIRE(nx_handler_register(self, "busy1", busy1, NX_HANDLER_THREADED,
                              nullptr) == 0);
  REQUIRE(nx_handler_register(self, "busy2", busy2, NX_HANDLER_NEW_THREAD,
                              nullptr) == 0);
  nx_gp_t gp;
  REQUIRE(nx_gp_make(nullptr, &gp) == 0);
  // A gateway's gp as another process would see it: made while this
  // process is one, under another process id.
  REQUIRE(nx_gateway_enable() == 0);
  REQUIRE(nx_gp_make(nullptr, &busy_gw_gp) == 0);
  busy_gw_gp.context ^= (uint64_t)1 << 32;
  send(&gp, "busy0");
  send(&gp, "busy1");
  send(&gp, "busy2");
  REQUIRE(done.wait_for(3) == 3);
  for (int k = 0; k < 3; k++) {
    INFO("handler kind " << k);
    CHECK(busy_flush[k] == NX_EBUSY);
    CHECK(busy_gw[k] == NX_EBUSY);
  }
  nx_gp_release(&busy_gw_gp);
  nx_gp_release(&gp);
}
} // namespace

TEST_CASE("nx_flush and nx_gateway_use refuse every kind of handler",
          "[threaded]") {
  SECTION("lazy or as configured") { busy_run(); }
  SECTION("NX_THREADED=thread") {
    setenv("NX_THREADED", "thread", 1);
    busy_run();
    unsetenv("NX_THREADED");
  }
}

namespace {
// A burst of threaded RSRs to one context, queued before any runs: the
// stack the first one starts on carries the dispatching loop on, and the
// others are calls there (docs/design.md, "Carrying the loop on"); every
// eighth blocks on a condition variable, so the loop goes back to its
// thread and the blocked handler keeps the stack. Each runs once, keeps
// its identity and context across the wait, and those that wait at once
// have identities of their own. The main thread's condition variable is
// signalled only when what it waits for is there: a signal ends the
// carrying of its wait.
constexpr int BURST = 64;
constexpr int BLOCKERS = BURST / 8;
struct burst_state {
  nx_mutex_t m;
  nx_cond_t c;    // the main thread waits on it
  nx_cond_t gate; // the blockers wait on it
  int arrived = 0, done = 0;
  bool open = false;
  int seen[BURST] = {};
  std::vector<uint64_t> waiting_ids;
  int bad = 0;
  burst_state() {
    nx_mutex_init(&m);
    nx_cond_init(&c);
    nx_cond_init(&gate);
  }
  bool all_but_blockers() const {
    return done == BURST - BLOCKERS && arrived == BURST;
  }
};

void on_burst(nx_context_t *ctx, void *, nx_buffer_t *buf) {
  auto *s = static_cast<burst_state *>(nx_context_data(ctx));
  int32_t i = -1;
  int got = nx_get_int32(buf, &i);
  uint64_t id = nx_thread_id();
  nx_mutex_lock(&s->m);
  if (got != 0 || i < 0 || i >= BURST) {
    s->bad++;
    i = 0;
  }
  s->seen[i]++;
  s->arrived++;
  if (i % 8 == 7) {
    s->waiting_ids.push_back(id);
    if (s->all_but_blockers())
      nx_cond_signal(&s->c);
    while (!s->open)
      nx_cond_wait(&s->gate, &s->m);
    if (nx_thread_id() != id || nx_context_self() != ctx)
      s->bad++;
  }
  s->done++;
  if (s->all_but_blockers() || s->done == BURST)
    nx_cond_signal(&s->c);
  nx_mutex_unlock(&s->m);
}

void burst_run() {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  nx_stats_t before;
  REQUIRE(nx_stats_get(&before) == 0);
  burst_state s;
  nx_gp_t gp;
  REQUIRE(nx_context_create_local(
              [](nx_context_t *ctx, void *arg) {
                nx_context_set_data(ctx, arg);
                return nx_handler_register(ctx, "burst", on_burst,
                                           NX_HANDLER_THREADED, nullptr);
              },
              &s, &gp) == 0);
  for (int round = 0; round < 3; round++) {
    nx_mutex_lock(&s.m);
    s.arrived = s.done = 0;
    s.open = false;
    s.waiting_ids.clear();
    for (int &n : s.seen)
      n = 0;
    nx_mutex_unlock(&s.m);
    for (int i = 0; i < BURST; i++) {
      nx_buffer_t *b;
      REQUIRE(nx_rsr_init_name(&b, &gp, "burst", 4) == 0);
      REQUIRE(nx_put_int32(b, i) == 0);
      REQUIRE(nx_rsr_send(b) == 0);
    }
    // This thread waits in nexus: it (or the primary) dispatches.
    nx_mutex_lock(&s.m);
    while (!s.all_but_blockers())
      REQUIRE(nx_cond_wait(&s.c, &s.m) == 0);
    std::vector<uint64_t> ids = s.waiting_ids;
    s.open = true;
    nx_cond_broadcast(&s.gate);
    while (s.done < BURST)
      REQUIRE(nx_cond_wait(&s.c, &s.m) == 0);
    nx_mutex_unlock(&s.m);
    INFO("round " << round);
    CHECK(s.bad == 0);
    for (int i = 0; i < BURST; i++) {
      INFO("RSR " << i);
      CHECK(s.seen[i] == 1);
    }
    REQUIRE(ids.size() == (size_t)BLOCKERS);
    std::sort(ids.begin(), ids.end());
    CHECK(std::unique(ids.begin(), ids.end()) == ids.end());
  }
  nx_stats_t after;
  REQUIRE(nx_stats_get(&after) == 0);
  if (lazy_mode()) {
    CHECK(after.lazy_started - before.lazy_started >= 3u * BURST);
    CHECK(after.lazy_parked - before.lazy_parked >= 3u * BLOCKERS);
  }
  REQUIRE(nx_context_destroy(&gp) == 0);
  nx_gp_release(&gp);
}
} // namespace

TEST_CASE("a burst of threaded handlers, some blocking: each runs once and "
          "keeps its identity",
          "[threaded]") {
  SECTION("lazy or as configured") { burst_run(); }
  SECTION("NX_PROGRESS=poll") {
    setenv("NX_PROGRESS", "poll", 1);
    burst_run();
    unsetenv("NX_PROGRESS");
  }
  SECTION("NX_HANDLER_STACK=64k: no stack carries the loop on") {
    setenv("NX_HANDLER_STACK", "64k", 1);
    burst_run();
    unsetenv("NX_HANDLER_STACK");
  }
}

namespace {
// A non-threaded handler that waits, run inside a lazy handler's timed wait
// (a timed wait does not park: it drives). The inner wait must not park the
// lazy handler's stack: frames on it hold the driver lock, and a stack that
// parked holding it resumes on another thread and lets go of that thread's
// hold instead (nexus/src/rsr/fiber.c, holds_driver).
struct nested_world {
  nx_mutex_t m;
  nx_cond_t c;
  bool inner_go = false;
  bool outer_go = false;
  std::atomic<int> in_timed{0};
  std::atomic<int> inner_in{0};
  std::atomic<int> timed_out{0};
  latch done;
  nested_world() {
    nx_mutex_init(&m);
    nx_cond_init(&c);
  }
};

// Threaded: waits (timed) until on_go.
void on_outer(nx_context_t *ctx, void *, nx_buffer_t *) {
  auto *w = static_cast<nested_world *>(nx_context_data(ctx));
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += 60;
  nx_mutex_lock(&w->m);
  w->in_timed++;
  int rc = 0;
  while (!w->outer_go && rc != NX_ETIMEDOUT)
    rc = nx_cond_timedwait(&w->c, &w->m, &deadline);
  if (!w->outer_go)
    w->timed_out++;
  nx_mutex_unlock(&w->m);
  w->done.add();
}

// Non-threaded: waits (untimed) until on_go.
void on_inner(nx_context_t *ctx, void *, nx_buffer_t *) {
  auto *w = static_cast<nested_world *>(nx_context_data(ctx));
  nx_mutex_lock(&w->m);
  w->inner_in++;
  while (!w->inner_go)
    nx_cond_wait(&w->c, &w->m);
  nx_mutex_unlock(&w->m);
  w->done.add();
}

// Non-threaded: lets both go.
void on_go(nx_context_t *ctx, void *, nx_buffer_t *) {
  auto *w = static_cast<nested_world *>(nx_context_data(ctx));
  nx_mutex_lock(&w->m);
  w->inner_go = w->outer_go = true;
  nx_cond_broadcast(&w->c);
  nx_mutex_unlock(&w->m);
  w->done.add();
}

int nested_init(nx_context_t *ctx, void *arg) {
  nx_context_set_data(ctx, arg);
  int r =
      nx_handler_register(ctx, "outer", on_outer, NX_HANDLER_THREADED, nullptr);
  if (r == 0)
    r = nx_handler_register(ctx, "inner", on_inner, NX_HANDLER_NONTHREADED,
                            nullptr);
  if (r == 0)
    r = nx_handler_register(ctx, "go", on_go, NX_HANDLER_NONTHREADED, nullptr);
  return r;
}
} // namespace

TEST_CASE("a handler that waits inside a lazy handler's timed wait does not "
          "take the lazy handler's stack away",
          "[threaded]") {
  for (int round = 0; round < 20; round++) {
    runtime_guard rt;
    REQUIRE(rt.init_rc() == 0);
    nested_world w;
    nx_gp_t gp;
    REQUIRE(nx_context_create_local(nested_init, &w, &gp) == 0);
    send(&gp, "outer");
    REQUIRE(sleep_until(w.in_timed, 1));
    send(&gp, "inner");
    // Whoever drives runs it: the outer handler's wait, usually.
    REQUIRE(sleep_until(w.inner_in, 1));
    send(&gp, "go");
    // This thread waits in nexus too (a timed wait: it drives).
    CHECK(w.done.wait_for(3, 60) == 3);
    CHECK(w.timed_out.load() == 0);
    REQUIRE(nx_context_destroy(&gp) == 0);
    nx_gp_release(&gp);
    CHECK(rt.finalize() == 0);
  }
}
