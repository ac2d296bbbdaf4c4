// Tests of nexus/src/contexts/context.c: in-process context creation (init runs
// first, in the new context), context data, handler tables per context,
// and many create/destroy cycles.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "latch.h"
#include "nexus.h"
#include "runtime_guard.h"

namespace {
struct init_probe {
  nx_context_t *seen = nullptr;
  uint64_t id = 0;
  int runs = 0;
};
int probe_init(nx_context_t *ctx, void *arg) {
  auto *p = static_cast<init_probe *>(arg);
  p->seen = nx_context_self(); // init runs inside the new context
  p->id = nx_context_id(ctx);
  p->runs++;
  nx_context_set_data(ctx, arg);
  return 0;
}
} // namespace

TEST_CASE("context creation runs init in the new context first", "[context]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  nx_context_t *initial = nx_context_self();
  REQUIRE(initial != nullptr);
  init_probe p;
  nx_gp_t gp;
  REQUIRE(nx_context_create_local(probe_init, &p, &gp) == 0);
  CHECK(p.runs == 1);
  CHECK(p.seen != initial);
  CHECK(p.id == nx_gp_context(&gp));
  CHECK(nx_gp_address(&gp) == &p); // the gp names the context data
  CHECK(nx_context_data(p.seen) == &p);
  CHECK(nx_context_self() == initial); // back in the creator's context
  CHECK(nx_gp_context(&gp) != nx_context_id(initial));
  REQUIRE(nx_context_destroy(&gp) == 0);
  nx_gp_release(&gp);
}

TEST_CASE("a context with no init is idle but reachable", "[context]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  nx_gp_t gp;
  REQUIRE(nx_context_create_local(nullptr, nullptr, &gp) == 0);
  CHECK(std::string(nx_gp_protocol(&gp)) == "local");
  REQUIRE(nx_context_destroy(&gp) == 0);
  nx_gp_release(&gp);
}

TEST_CASE("1,000 contexts created and destroyed", "[context]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  std::vector<nx_gp_t> gps(1000);
  std::vector<uint64_t> ids;
  for (auto &gp : gps) {
    init_probe p;
    REQUIRE(nx_context_create_local(probe_init, &p, &gp) == 0);
    ids.push_back(nx_gp_context(&gp));
  }
  std::sort(ids.begin(), ids.end());
  CHECK(std::unique(ids.begin(), ids.end()) == ids.end()); // ids are unique
  for (auto &gp : gps) {
    REQUIRE(nx_context_destroy(&gp) == 0);
    nx_gp_release(&gp);
  }
}

namespace {
latch *calls;
void first(nx_context_t *, void *, nx_buffer_t *) { calls->add(1); }
void second(nx_context_t *, void *, nx_buffer_t *) { calls->add(100); }
} // namespace

TEST_CASE("registering a name again replaces its handler", "[context]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  latch l;
  calls = &l;
  nx_context_t *self = nx_context_self();
  // Enough names to make the table grow (and be copied) several times.
  for (int i = 0; i < 100; i++)
    REQUIRE(nx_handler_register(self, ("filler" + std::to_string(i)).c_str(),
                                first, 0, nullptr) == 0);
  REQUIRE(nx_handler_register(self, "h", first, 0, nullptr) == 0);
  nx_gp_t me;
  REQUIRE(nx_gp_make(nullptr, &me) == 0);
  nx_buffer_t *b;
  REQUIRE(nx_rsr_init_name(&b, &me, "h", 0) == 0);
  REQUIRE(nx_rsr_send(b) == 0);
  REQUIRE(l.wait_for(1) == 1);
  REQUIRE(nx_handler_register(self, "h", second, 0, nullptr) == 0);
  REQUIRE(nx_rsr_init_name(&b, &me, "h", 0) == 0);
  REQUIRE(nx_rsr_send(b) == 0);
  CHECK(l.wait_for(101) == 101);
  REQUIRE(nx_rsr_init_name(&b, &me, "filler99", 0) == 0);
  REQUIRE(nx_rsr_send(b) == 0);
  CHECK(l.wait_for(102) == 102);
  nx_gp_release(&me);
}
