// Bad input to the runtime: RSRs for unknown handlers and destroyed
// contexts are dropped, counted and reported; misuse of the API returns
// NX_E* codes; nothing crashes or hangs.
#include <catch2/catch.hpp>

#include <mutex>
#include <string>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "latch.h"
#include "nexus.h"
#include "runtime_guard.h"

namespace {

struct drop_log {
  latch drops;
  std::atomic<int> last_err{0};
  std::atomic<uint64_t> last_ctx{0};
  std::atomic<uint32_t> last_handler{0};
};

void on_drop(int err, uint64_t ctx, uint32_t handler, void *arg) {
  auto *log = static_cast<drop_log *>(arg);
  log->last_err = err;
  log->last_ctx = ctx;
  log->last_handler = handler;
  log->drops.add();
}

struct hits {
  latch n;
};
void on_hit(nx_context_t *ctx, void *, nx_buffer_t *) {
  static_cast<hits *>(nx_context_data(ctx))->n.add();
}
// For RSRs whose delivery the test does not wait for.
void on_nothing(nx_context_t *, void *, nx_buffer_t *) {}

int hit_init(nx_context_t *ctx, void *arg) {
  nx_context_set_data(ctx, arg);
  return nx_handler_register(ctx, "hit", on_hit, NX_HANDLER_NONTHREADED,
                             nullptr);
}

void send(const nx_gp_t *gp, const char *handler) {
  nx_buffer_t *b;
  REQUIRE(nx_rsr_init_name(&b, gp, handler, 0) == 0);
  REQUIRE(nx_rsr_send(b) == 0);
}

} // namespace

TEST_CASE("an RSR for an unknown handler is dropped, counted and reported",
          "[badinput]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  drop_log log;
  REQUIRE(nx_error_cb_set(on_drop, &log) == 0);
  hits h;
  nx_gp_t gp;
  REQUIRE(nx_context_create_local(hit_init, &h, &gp) == 0);
  send(&gp, "no-such-handler");
  REQUIRE(log.drops.wait_for(1) == 1);
  CHECK(log.last_err == NX_ENOHANDLER);
  CHECK(log.last_ctx == nx_gp_context(&gp));
  CHECK(log.last_handler == nx_handler_id("no-such-handler"));
  // The context keeps serving.
  send(&gp, "hit");
  REQUIRE(h.n.wait_for(1) == 1);
  nx_stats_t s;
  REQUIRE(nx_stats_get(&s) == 0);
  CHECK(s.drop_no_handler == 1);
  // A handler of another context is not this context's.
  hits h2;
  nx_gp_t other;
  REQUIRE(nx_context_create_local(
              [](nx_context_t *ctx, void *arg) {
                nx_context_set_data(ctx, arg);
                return nx_handler_register(ctx, "only-here", on_hit,
                                           NX_HANDLER_NONTHREADED, nullptr);
              },
              &h2, &other) == 0);
  send(&gp, "only-here");
  REQUIRE(log.drops.wait_for(2) == 2);
  CHECK(h2.n.get() == 0);
  REQUIRE(nx_error_cb_set(nullptr, nullptr) == 0);
  nx_gp_release(&other);
  nx_gp_release(&gp);
}

namespace {
// Records the order in which callbacks ran (a digit per callback).
struct call_order {
  std::mutex m;
  std::string seen;
  latch n;
};
template <char Tag> void on_drop_tagged(int, uint64_t, uint32_t, void *arg) {
  auto *o = static_cast<call_order *>(arg);
  {
    std::lock_guard<std::mutex> g(o->m);
    o->seen += Tag;
  }
  o->n.add();
}
std::atomic<int> removed_inside{1}, add_inside{0}, set_inside{0};
std::atomic<int> inner_handle{0};
// Removes another callback from inside a call, and tries to add one.
void on_drop_remover(int, uint64_t, uint32_t, void *arg) {
  auto *o = static_cast<call_order *>(arg);
  if (inner_handle > 0) {
    removed_inside = nx_error_cb_remove(inner_handle);
    inner_handle = 0;
  }
  // Checked by the test's thread (Catch2 asserts on one thread only).
  add_inside = nx_error_cb_add(on_drop_tagged<'x'>, arg);
  set_inside = nx_error_cb_set(on_drop_tagged<'x'>, arg);
  {
    std::lock_guard<std::mutex> g(o->m);
    o->seen += 'r';
  }
  o->n.add();
}
} // namespace

TEST_CASE("several error callbacks: each is called, in order; removed ones "
          "are not; misuse gets a code",
          "[badinput]") {
  CHECK(nx_error_cb_add(on_drop_tagged<'a'>, nullptr) == NX_ENOTINIT);
  CHECK(nx_error_cb_remove(1) == NX_ENOTINIT);
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  call_order o;
  CHECK(nx_error_cb_add(nullptr, &o) == NX_EINVAL);
  int ha = nx_error_cb_add(on_drop_tagged<'a'>, &o);
  int hb = nx_error_cb_add(on_drop_tagged<'b'>, &o);
  REQUIRE(ha > 0);
  REQUIRE(hb > 0);
  CHECK(ha != hb);
  REQUIRE(nx_error_cb_set(on_drop_tagged<'s'>, &o) == 0);
  hits h;
  nx_gp_t gp;
  REQUIRE(nx_context_create_local(hit_init, &h, &gp) == 0);
  send(&gp, "no-such-handler");
  REQUIRE(o.n.wait_for(3) == 3);
  {
    std::lock_guard<std::mutex> g(o.m);
    CHECK(o.seen == "sab"); // the program's first, then in the order added
    o.seen.clear();
  }
  // Removed: not called again; a second removal and a made-up handle fail.
  REQUIRE(nx_error_cb_remove(ha) == 0);
  CHECK(nx_error_cb_remove(ha) == NX_ENOENT);
  CHECK(nx_error_cb_remove(0) == NX_ENOENT);
  CHECK(nx_error_cb_remove(-5) == NX_ENOENT);
  CHECK(nx_error_cb_remove(ha + 1) == NX_ENOENT);
  REQUIRE(nx_error_cb_set(nullptr, nullptr) == 0);
  send(&gp, "no-such-handler");
  REQUIRE(o.n.wait_for(4) == 4);
  {
    std::lock_guard<std::mutex> g(o.m);
    CHECK(o.seen == "b");
    o.seen.clear();
  }
  // From inside a callback: another is removed at once (this call still
  // reaches the callbacks before it only), adding and setting are refused.
  int hr = nx_error_cb_add(on_drop_remover, &o);
  REQUIRE(hr > 0);
  inner_handle = nx_error_cb_add(on_drop_tagged<'c'>, &o);
  REQUIRE(inner_handle > 0);
  send(&gp, "no-such-handler");
  REQUIRE(o.n.wait_for(6) == 6);
  CHECK(removed_inside == 0);
  CHECK(add_inside == NX_EBUSY);
  CHECK(set_inside == NX_EBUSY);
  send(&gp, "no-such-handler");
  REQUIRE(o.n.wait_for(8) == 8);
  {
    std::lock_guard<std::mutex> g(o.m);
    CHECK(o.seen == "brbr");
  }
  // 15 may be added; the 16th is refused, and removals make room again.
  std::vector<int> more;
  for (;;) {
    int hh = nx_error_cb_add(on_drop_tagged<'m'>, &o);
    if (hh < 0) {
      CHECK(hh == NX_ENOMEM);
      break;
    }
    more.push_back(hh);
  }
  CHECK(more.size() == 13); // b and the remover hold two of the 15
  REQUIRE(nx_error_cb_remove(more.back()) == 0);
  CHECK(nx_error_cb_add(on_drop_tagged<'m'>, &o) > 0);
  nx_stats_t s;
  REQUIRE(nx_stats_get(&s) == 0);
  CHECK(s.drop_no_handler == 4);
  nx_gp_release(&gp);
}

TEST_CASE("an RSR for a destroyed context is dropped and counted",
          "[badinput]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  drop_log log;
  REQUIRE(nx_error_cb_set(on_drop, &log) == 0);
  hits h;
  nx_gp_t gp;
  REQUIRE(nx_context_create_local(hit_init, &h, &gp) == 0);
  REQUIRE(nx_context_destroy(&gp) == 0);
  CHECK(nx_context_destroy(&gp) == NX_ENOCONTEXT);
  send(&gp, "hit");
  REQUIRE(log.drops.wait_for(1) == 1);
  CHECK(log.last_err == NX_ENOCONTEXT);
  CHECK(h.n.get() == 0);
  nx_stats_t s;
  REQUIRE(nx_stats_get(&s) == 0);
  CHECK(s.drop_no_context == 1);
  nx_gp_release(&gp);
}

namespace {
struct reader_report {
  latch done;
  int past_end = 0, wrong_type = 0, then_ok = 0, bad_release = 0;
};
void on_read(nx_context_t *ctx, void *, nx_buffer_t *b) {
  auto *r = static_cast<reader_report *>(nx_context_data(ctx));
  int32_t v;
  int64_t w;
  r->wrong_type = nx_get_int64(b, &w);
  r->then_ok = nx_get_int32(b, &v) == 0 && v == 42 ? 0 : -1;
  r->past_end = nx_get_int32(b, &v);
  r->bad_release = nx_buffer_release(b); // not retained: refused
  r->done.add();
}
} // namespace

TEST_CASE("inside a handler, a bad get errs and the buffer stays usable",
          "[badinput]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  reader_report rep;
  nx_gp_t gp;
  REQUIRE(nx_context_create_local(
              [](nx_context_t *ctx, void *arg) {
                nx_context_set_data(ctx, arg);
                return nx_handler_register(ctx, "read", on_read,
                                           NX_HANDLER_THREADED, nullptr);
              },
              &rep, &gp) == 0);
  nx_buffer_t *b;
  REQUIRE(nx_rsr_init_name(&b, &gp, "read", 8) == 0);
  REQUIRE(nx_put_int32(b, 42) == 0);
  REQUIRE(nx_rsr_send(b) == 0);
  REQUIRE(rep.done.wait_for(1) == 1);
  CHECK(rep.wrong_type == NX_ETYPE);
  CHECK(rep.then_ok == 0);
  CHECK(rep.past_end == NX_ERANGE);
  CHECK(rep.bad_release == NX_EINVAL);
  nx_gp_release(&gp);
}

TEST_CASE("misuse of the API returns error codes", "[badinput]") {
  SECTION("before nx_init") {
    nx_gp_t gp = NX_GP_NULL;
    nx_buffer_t *b = nullptr;
    nx_stats_t s;
    nx_node_t node;
    CHECK(nx_finalize() == NX_ENOTINIT);
    CHECK(nx_gp_make(nullptr, &gp) == NX_ENOTINIT);
    CHECK(nx_buffer_create(8, &b) == NX_ENOTINIT);
    CHECK(nx_context_create_local(nullptr, nullptr, &gp) == NX_ENOTINIT);
    CHECK(nx_poll() == NX_ENOTINIT);
    CHECK(nx_stats_get(&s) == NX_ENOTINIT);
    CHECK(nx_node_self(&node) == NX_ENOTINIT);
    CHECK(nx_context_self() == nullptr);
    CHECK(nx_gp_protocol(&gp) == nullptr);
  }
  SECTION("a bad NX_KEY is refused") {
    for (const char *key : {"abc", "zz000000000000000000000000000000"}) {
      setenv("NX_KEY", key, 1);
      CHECK(nx_init(nullptr, nullptr) == NX_EINVAL);
    }
    setenv("NX_KEY", "00112233445566778899aabbccddeeff", 1);
    CHECK(nx_init(nullptr, nullptr) == 0);
    CHECK(nx_finalize() == 0);
    unsetenv("NX_KEY");
  }
  SECTION("a bad NX_PROGRESS is refused") {
    setenv("NX_PROGRESS", "sometimes", 1);
    CHECK(nx_init(nullptr, nullptr) == NX_EINVAL);
    unsetenv("NX_PROGRESS");
    CHECK(nx_finalize() == NX_ENOTINIT);
  }
  SECTION("a malformed core setting fails nx_init, never reads as 0") {
    struct {
      const char *name, *value;
    } bad[] = {{"NX_SPIN_US", "abc"},       {"NX_SPIN_US", "-1"},
               {"NX_SPIN_US", "2000000"},   {"NX_DEBUG", "yes"},
               {"NX_BUFFER_CACHE", "12q"},  {"NX_CREATE_TIMEOUT", "0"},
               {"NX_CREATE_TIMEOUT", "1m"}, {"NX_CTL_FD", "stdin"}};
    for (const auto &b : bad) {
      INFO(b.name << "=" << b.value);
      setenv(b.name, b.value, 1);
      CHECK(nx_init(nullptr, nullptr) == NX_EINVAL);
      unsetenv(b.name);
    }
    CHECK(nx_finalize() == NX_ENOTINIT);
    setenv("NX_SPIN_US", "0", 1);
    CHECK(nx_init(nullptr, nullptr) == 0);
    CHECK(nx_finalize() == 0);
    unsetenv("NX_SPIN_US");
  }
  SECTION("after nx_init") {
    runtime_guard rt;
    REQUIRE(rt.init_rc() == 0);
    nx_gp_t initial;
    REQUIRE(nx_gp_make(nullptr, &initial) == 0);
    CHECK(nx_context_destroy(&initial) == NX_EBUSY);
    CHECK(nx_context_destroy(nullptr) == NX_EINVAL);
    CHECK(nx_context_create_local(nullptr, nullptr, nullptr) == NX_EINVAL);
    nx_context_t *self = nx_context_self();
    CHECK(nx_handler_register(nullptr, "x", on_hit, 0, nullptr) == NX_EINVAL);
    CHECK(nx_handler_register(self, nullptr, on_hit, 0, nullptr) == NX_EINVAL);
    CHECK(nx_handler_register(self, "", on_hit, 0, nullptr) == NX_EINVAL);
    CHECK(nx_handler_register(self, "x", nullptr, 0, nullptr) == NX_EINVAL);
    CHECK(nx_handler_register(self, "x", on_hit, 7, nullptr) == NX_EINVAL);
    CHECK(nx_stats_get(nullptr) == NX_EINVAL);
    CHECK(nx_node_self(nullptr) == NX_EINVAL);
    CHECK(nx_buffer_release(nullptr) == NX_EINVAL);
    CHECK(nx_buffer_retain(nullptr) == NX_EINVAL);
    // Size hints no memory can hold fail cleanly instead of wrapping.
    nx_buffer_t *b = nullptr;
    CHECK(nx_buffer_create(SIZE_MAX, &b) == NX_ENOMEM);
    CHECK(nx_buffer_create(SIZE_MAX - 100, &b) == NX_ENOMEM);
    CHECK(nx_rsr_init(&b, &initial, 1, SIZE_MAX) == NX_ENOMEM);
    CHECK(b == nullptr);
    // An unsent RSR buffer cannot be retained: nx_rsr_send takes it.
    REQUIRE(nx_handler_register(self, "sink", on_nothing, 0, nullptr) == 0);
    REQUIRE(nx_rsr_init_name(&b, &initial, "sink", 0) == 0);
    CHECK(nx_buffer_retain(b) == NX_EINVAL);
    CHECK(nx_rsr_send(b) == 0);
    nx_gp_release(&initial);
  }
}

TEST_CASE("handler names whose ids collide are refused", "[badinput]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  // Two names with the same 32-bit FNV-1a hash.
  REQUIRE(nx_handler_id("h1340180") == nx_handler_id("h84337"));
  nx_context_t *self = nx_context_self();
  nx_handler_id_t id = 0;
  REQUIRE(nx_handler_register(self, "h1340180", on_hit, 0, &id) == 0);
  CHECK(id == nx_handler_id("h1340180"));
  CHECK(nx_handler_register(self, "h84337", on_hit, 0, nullptr) ==
        NX_ECOLLISION);
  // Re-registering the same name replaces it.
  CHECK(nx_handler_register(self, "h1340180", on_hit, 1, nullptr) == 0);
}

TEST_CASE("a context whose init fails is not created", "[badinput]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  nx_gp_t gp = NX_GP_NULL;
  CHECK(nx_context_create_local(
            [](nx_context_t *, void *) { return (int)NX_EACCES; }, nullptr,
            &gp) == NX_EACCES);
  CHECK(nx_gp_is_null(&gp));
}

namespace {
// What nx_finalize returned where it must not stop the runtime, and what a
// nested nx_init/nx_finalize pair returned in a handler.
struct finalize_inside {
  latch n;
  std::atomic<int> rc_nonthreaded{1}, rc_threaded{1}, rc_errcb{1};
  std::atomic<int> rc_errcb_init{1};
  std::atomic<int> rc_nested_init{1}, rc_nested_fini{1};
};
finalize_inside *fin_world;

void fin_nonthreaded(nx_context_t *, void *, nx_buffer_t *) {
  fin_world->rc_nonthreaded = nx_finalize();
  fin_world->n.add();
}
void fin_threaded(nx_context_t *, void *, nx_buffer_t *) {
  fin_world->rc_threaded = nx_finalize();
  fin_world->n.add();
}
void fin_nested(nx_context_t *, void *, nx_buffer_t *) {
  fin_world->rc_nested_init = nx_init(nullptr, nullptr);
  fin_world->rc_nested_fini = nx_finalize();
  fin_world->n.add();
}
void fin_errcb(int, uint64_t, uint32_t, void *) {
  fin_world->rc_errcb_init = nx_init(nullptr, nullptr);
  fin_world->rc_errcb = nx_finalize();
  fin_world->n.add();
}
int fin_init(nx_context_t *ctx, void *) {
  int r = nx_handler_register(ctx, "nonthreaded", fin_nonthreaded,
                              NX_HANDLER_NONTHREADED, nullptr);
  if (r == 0)
    r = nx_handler_register(ctx, "threaded", fin_threaded, NX_HANDLER_THREADED,
                            nullptr);
  if (r == 0)
    r = nx_handler_register(ctx, "nested", fin_nested, NX_HANDLER_NONTHREADED,
                            nullptr);
  return r;
}
} // namespace

TEST_CASE("nx_finalize from a handler, nx_init and nx_finalize from an error "
          "callback: NX_EBUSY, and the runtime goes on; a nested "
          "nx_init/nx_finalize pair in a handler counts",
          "[badinput]") {
  // Before: from a non-threaded handler it stopped the runtime under the
  // handler (0, then NX_ENOTINIT for the program's own nx_finalize).
  finalize_inside w;
  fin_world = &w;
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  nx_gp_t gp;
  REQUIRE(nx_context_create_local(fin_init, nullptr, &gp) == 0);
  send(&gp, "nonthreaded");
  send(&gp, "threaded");
  send(&gp, "nested");
  REQUIRE(w.n.wait_for(3) == 3);
  CHECK(w.rc_nonthreaded == NX_EBUSY);
  CHECK(w.rc_threaded == NX_EBUSY);
  CHECK(w.rc_nested_init == 0);
  CHECK(w.rc_nested_fini == 0);
  REQUIRE(nx_error_cb_set(fin_errcb, nullptr) == 0);
  send(&gp, "no-such-handler");
  REQUIRE(w.n.wait_for(4) == 4);
  CHECK(w.rc_errcb_init == NX_EBUSY);
  CHECK(w.rc_errcb == NX_EBUSY);
  REQUIRE(nx_error_cb_set(nullptr, nullptr) == 0);
  // Still running: an RSR runs, and the program's nx_finalize stops it.
  send(&gp, "nested");
  REQUIRE(w.n.wait_for(5) == 5);
  nx_gp_release(&gp);
  CHECK(rt.finalize() == 0);
  fin_world = nullptr;
}
