// Tests of nexus/src/modules/module.c with fixture modules: a good module, two
// of another ABI version (a newer one and the one before this), one missing a
// mandatory slot, one whose init fails and one with a bad launcher table;
// NX_PROTOCOLS order; and malformed frame headers handed to the core
// through the fixture's receive path.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <map>
#include <string>
#include <unistd.h>

#include "latch.h"
#include "nexus.h"
#include "nexus/protocol.h"
#include "runtime_guard.h"

namespace {

struct env_guard {
  env_guard(const char *protocols) {
    setenv("NX_PROTO_PATH", FIXTURE_DIR, 1);
    if (protocols != nullptr)
      setenv("NX_PROTOCOLS", protocols, 1);
    else
      unsetenv("NX_PROTOCOLS");
  }
  ~env_guard() {
    unsetenv("NX_PROTO_PATH");
    unsetenv("NX_PROTOCOLS");
  }
};

std::map<std::string, nx_module_info_t> modules() {
  std::map<std::string, nx_module_info_t> out;
  int n = nx_module_count();
  for (int i = 0; i < n; i++) {
    nx_module_info_t m;
    REQUIRE(nx_module_info(i, &m) == 0);
    out[m.name] = m;
  }
  return out;
}

struct hits {
  latch n;
};
void on_hit(nx_context_t *ctx, void *, nx_buffer_t *b) {
  int32_t v = 0;
  if (nx_get_int32(b, &v) == 0 && v == 7)
    static_cast<hits *>(nx_context_data(ctx))->n.add();
}
int hit_init(nx_context_t *ctx, void *arg) {
  nx_context_set_data(ctx, arg);
  return nx_handler_register(ctx, "hit", on_hit, NX_HANDLER_NONTHREADED,
                             nullptr);
}

} // namespace

TEST_CASE("the loader loads good modules and says why it skips the others",
          "[loader]") {
  env_guard env("fixture,local,badabi,noslot,initfail");
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  auto m = modules();
  REQUIRE(m.size() == 5);
  CHECK(m["fixture"].loaded == 1);
  CHECK(m["fixture"].rank == 0); // NX_PROTOCOLS order
  CHECK(m["local"].loaded == 1);
  CHECK(m["local"].rank == 1);
  CHECK(m["badabi"].loaded == 0);
  CHECK(m["badabi"].error == NX_EABI);
  CHECK(std::string(m["badabi"].reason).find("ABI version") !=
        std::string::npos);
  CHECK(m["noslot"].loaded == 0);
  CHECK(m["noslot"].error == NX_EMODULE);
  CHECK(std::string(m["noslot"].reason).find("send") != std::string::npos);
  CHECK(m["initfail"].loaded == 0);
  CHECK(m["initfail"].error == NX_EUNREACH);
  CHECK(std::string(m["initfail"].reason) ==
        "backend not reachable (test fixture)");
  // A name with no module file fails nx_init (tests/core/test_harden.cpp).
  CHECK(std::string(m["fixture"].path).find(FIXTURE_DIR) == 0);
}

TEST_CASE("a module of any other ABI version is refused before any of its "
          "slots runs",
          "[loader]") {
  // oldabi is a complete table that says ABI 7, every slot of which aborts;
  // badabi says a version from the future. No other ABI ever shipped: the
  // loader takes only NX_PROTOCOL_ABI_VERSION.
  env_guard env("oldabi,badabi,local");
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  auto m = modules();
  REQUIRE(m.size() == 3);
  for (const char *name : {"oldabi", "badabi"}) {
    INFO(name << ": " << m[name].reason);
    CHECK(m[name].loaded == 0);
    CHECK(m[name].error == NX_EABI);
    CHECK(m[name].rank == -1);
  }
  std::string only =
      "this core speaks only " + std::to_string(NX_PROTOCOL_ABI_VERSION);
  CHECK(std::string(m["oldabi"].reason) ==
        "wrong ABI version " + std::to_string(NX_PROTOCOL_ABI_VERSION - 1) +
            ", " + only);
  CHECK(std::string(m["badabi"].reason) ==
        "wrong ABI version " + std::to_string(NX_PROTOCOL_ABI_VERSION + 998) +
            ", " + only);
  CHECK(m["local"].loaded == 1);
  CHECK(m["local"].rank == 0);
}

TEST_CASE("a launcher table that breaks its rules is refused, with why",
          "[loader]") {
  env_guard env("badlaunch,local");
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  auto m = modules();
  REQUIRE(m.count("badlaunch") == 1);
  CHECK(m["badlaunch"].loaded == 0);
  CHECK(m["badlaunch"].error == NX_EMODULE);
  CHECK(std::string(m["badlaunch"].reason).find("ctl_close") !=
        std::string::npos);
}

#if NX_TEST_HAVE_OFI
TEST_CASE("ofi is loaded only when NX_PROTOCOLS names it", "[loader]") {
  // Unset and empty both mean the default set, which leaves ofi out (its
  // libraries cost a process 0.3-0.4 s to load) and says why.
  for (const char *dflt : {static_cast<const char *>(nullptr), ""}) {
    INFO("NX_PROTOCOLS=" << (dflt ? "\"\"" : "(unset)"));
    env_guard env(dflt);
    runtime_guard rt;
    REQUIRE(rt.init_rc() == 0);
    auto m = modules();
    REQUIRE(m.count("ofi") == 1);
    CHECK(m["ofi"].loaded == 0);
    CHECK(m["ofi"].error == NX_ENOTSUP);
    CHECK(std::string(m["ofi"].reason).find("NX_PROTOCOLS") !=
          std::string::npos);
    CHECK(m["local"].loaded == 1);
  }
  env_guard env("local,ofi");
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  auto m = modules();
  REQUIRE(m.count("ofi") == 1);
  INFO("ofi: " << m["ofi"].reason);
  CHECK(m["ofi"].loaded == 1);
  CHECK(m["ofi"].rank == 1);
}
#endif

TEST_CASE("NX_PROTOCOLS order picks the protocol; without it, cost does",
          "[loader]") {
  for (const char *order :
       {"fixture,local", "local,fixture", (const char *)nullptr}) {
    env_guard env(order);
    runtime_guard rt;
    REQUIRE(rt.init_rc() == 0);
    hits h;
    nx_gp_t gp;
    REQUIRE(nx_context_create_local(hit_init, &h, &gp) == 0);
    std::string expect =
        order != nullptr && std::strcmp(order, "fixture,local") == 0
            ? "fixture"
            : "local"; // local costs 0, fixture 5
    INFO("NX_PROTOCOLS=" << (order ? order : "(unset)"));
    REQUIRE(nx_gp_protocol(&gp) != nullptr);
    CHECK(std::string(nx_gp_protocol(&gp)) == expect);
    // The RSR goes through the chosen module (the fixture copies the frame
    // through the core's receive path) and arrives.
    for (int i = 0; i < 100; i++) {
      nx_buffer_t *b;
      REQUIRE(nx_rsr_init_name(&b, &gp, "hit", 8) == 0);
      REQUIRE(nx_put_int32(b, 7) == 0);
      REQUIRE(nx_rsr_send(b) == 0);
    }
    CHECK(h.n.wait_for(100) == 100);
    nx_gp_release(&gp);
  }
}

TEST_CASE("a module list that loads nothing fails nx_init", "[loader]") {
  env_guard env("badabi,initfail");
  CHECK(nx_init(nullptr, nullptr) == NX_EUNREACH);
  CHECK(nx_finalize() == NX_ENOTINIT);
}

TEST_CASE("malformed frame headers are refused and counted",
          "[loader][badinput]") {
  env_guard env("fixture,local");
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  void *h =
      dlopen(FIXTURE_DIR "/libnx_proto_fixture.so", RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(h != nullptr);
  using inject_fn = int (*)(const void *, const void *, size_t);
  auto inject = reinterpret_cast<inject_fn>(dlsym(h, "nx_fixture_inject"));
  REQUIRE(inject != nullptr);

  hits hh;
  nx_gp_t gp;
  REQUIRE(nx_context_create_local(hit_init, &hh, &gp) == 0);
  // A good header, built by hand from docs/design.md's layout.
  uint8_t payload[5] = {5 /* int32 tag */, 7, 0, 0, 0};
  auto good = [&](uint8_t *hdr) {
    std::memset(hdr, 0, NX_FRAME_HDR_SIZE);
    uint32_t magic = NX_FRAME_MAGIC, handler = nx_handler_id("hit");
    uint64_t ctx = nx_gp_context(&gp), len = sizeof(payload);
    std::memcpy(hdr, &magic, 4);
    hdr[4] = NX_FRAME_VERSION;
    hdr[5] = NX_FORMAT_LITTLE;
    std::memcpy(hdr + 8, &handler, 4);
    std::memcpy(hdr + 16, &ctx, 8);
    std::memcpy(hdr + 32, &len, 8);
  };
  uint8_t hdr[NX_FRAME_HDR_SIZE];
  good(hdr);
  REQUIRE(inject(hdr, payload, sizeof(payload)) == 0);
  REQUIRE(hh.n.wait_for(1) == 1);

  nx_stats_t before, after;
  REQUIRE(nx_stats_get(&before) == 0);
  good(hdr);
  hdr[0] ^= 0xff; // magic
  CHECK(inject(hdr, payload, sizeof(payload)) == NX_EPROTO);
  good(hdr);
  hdr[4] = 99; // version
  CHECK(inject(hdr, payload, sizeof(payload)) == NX_EPROTO);
  good(hdr);
  hdr[5] = 7; // data format
  CHECK(inject(hdr, payload, sizeof(payload)) == NX_EPROTO);
  good(hdr);
  std::memset(hdr + 16, 0, 8); // context 0
  CHECK(inject(hdr, payload, sizeof(payload)) == NX_EPROTO);
  good(hdr);
  uint64_t huge = 1ull << 60; // a frame announcing 2^60 bytes
  std::memcpy(hdr + 32, &huge, 8);
  CHECK(inject(hdr, payload, sizeof(payload)) == NX_EPROTO);
  good(hdr);
  std::memset(hdr + 8, 0, 4); // handler id 0 (no name hashes to it)
  CHECK(inject(hdr, payload, sizeof(payload)) == NX_EPROTO);
  REQUIRE(nx_stats_get(&after) == 0);
  CHECK(after.drop_bad_frame - before.drop_bad_frame == 6);

  // And a well-formed frame still gets through afterwards.
  good(hdr);
  REQUIRE(inject(hdr, payload, sizeof(payload)) == 0);
  CHECK(hh.n.wait_for(2) == 2);
  nx_gp_release(&gp);
  dlclose(h);
}

namespace {
void count_release(void *arg, void *) {
  static_cast<std::atomic<int> *>(arg)->fetch_add(1);
}
} // namespace

TEST_CASE("frame_wrap delivers a payload in the module's memory and gives it "
          "back once; bad calls are refused",
          "[loader][badinput]") {
  env_guard env("fixture,local");
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  void *h =
      dlopen(FIXTURE_DIR "/libnx_proto_fixture.so", RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(h != nullptr);
  using wrap_fn =
      int (*)(const void *, void *, size_t, void (*)(void *, void *), void *);
  auto wrap = reinterpret_cast<wrap_fn>(dlsym(h, "nx_fixture_wrap"));
  REQUIRE(wrap != nullptr);
  hits hh;
  nx_gp_t gp;
  REQUIRE(nx_context_create_local(hit_init, &hh, &gp) == 0);
  alignas(16) uint8_t mem[16] = {0};
  uint8_t *payload = mem + 8; // 8-aligned, as UCX's data
  const uint8_t v[5] = {5 /* int32 tag */, 7, 0, 0, 0};
  std::memcpy(payload, v, sizeof(v));
  uint8_t hdr[NX_FRAME_HDR_SIZE] = {0};
  uint32_t magic = NX_FRAME_MAGIC, handler = nx_handler_id("hit");
  uint64_t ctx = nx_gp_context(&gp), len = sizeof(v);
  std::memcpy(hdr, &magic, 4);
  hdr[4] = NX_FRAME_VERSION;
  hdr[5] = NX_FORMAT_LITTLE;
  std::memcpy(hdr + 8, &handler, 4);
  std::memcpy(hdr + 16, &ctx, 8);
  std::memcpy(hdr + 32, &len, 8);

  std::atomic<int> released{0};
  nx_stats_t before, after;
  REQUIRE(nx_stats_get(&before) == 0);
  CHECK(wrap(hdr, mem + 4, len, count_release, &released) == NX_EINVAL);
  CHECK(wrap(hdr, payload, len, nullptr, &released) == NX_EINVAL);
  CHECK(wrap(hdr, payload, len - 1, count_release, &released) == NX_EPROTO);
  REQUIRE(nx_stats_get(&after) == 0);
  CHECK(after.drop_bad_frame - before.drop_bad_frame == 1);
  CHECK(released == 0); // an error never releases

  REQUIRE(wrap(hdr, payload, len, count_release, &released) == 0);
  REQUIRE(hh.n.wait_for(1) == 1); // read in place: the value 7
  for (int i = 0; i < 5000 && released == 0; i++)
    usleep(1000);
  CHECK(released == 1);
  nx_gp_release(&gp);
  dlclose(h);
}

TEST_CASE("a full send queue makes nx_rsr_send wait, or fail with "
          "NX_RSR_NONBLOCK",
          "[loader][rsr]") {
  env_guard env("fixture,local");
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  void *h =
      dlopen(FIXTURE_DIR "/libnx_proto_fixture.so", RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(h != nullptr);
  auto set_full =
      reinterpret_cast<void (*)(int)>(dlsym(h, "nx_fixture_set_full"));
  REQUIRE(set_full != nullptr);
  hits hh;
  nx_gp_t gp;
  REQUIRE(nx_context_create_local(hit_init, &hh, &gp) == 0);
  REQUIRE(std::string(nx_gp_protocol(&gp)) == "fixture");
  nx_buffer_t *b;
  // Blocking: retried until the module takes it.
  set_full(5);
  REQUIRE(nx_rsr_init_name(&b, &gp, "hit", 8) == 0);
  REQUIRE(nx_put_int32(b, 7) == 0);
  CHECK(nx_rsr_send(b) == 0);
  CHECK(hh.n.wait_for(1) == 1);
  // Non-blocking: refused at once; the buffer is gone, nothing arrives.
  set_full(1);
  REQUIRE(nx_rsr_init_name(&b, &gp, "hit", 8) == 0);
  REQUIRE(nx_put_int32(b, 7) == 0);
  CHECK(nx_rsr_send_flags(b, NX_RSR_NONBLOCK) == NX_EAGAIN);
  REQUIRE(nx_rsr_init_name(&b, &gp, "hit", 8) == 0);
  REQUIRE(nx_put_int32(b, 7) == 0);
  CHECK(nx_rsr_send_flags(b, NX_RSR_NONBLOCK) == 0);
  CHECK(hh.n.wait_for(2) == 2);
  nx_gp_release(&gp);
  dlclose(h);
}

namespace {
struct failures {
  latch n;
  std::atomic<int> err{0};
  std::atomic<uint64_t> ctx{0};
  std::atomic<uint32_t> handler{1};
};
void on_failure(int err, uint64_t ctx, uint32_t handler, void *arg) {
  auto *f = static_cast<failures *>(arg);
  f->err = err;
  f->ctx = ctx;
  f->handler = handler;
  f->n.add();
}
// A context in this process reached over the fixture module, with one RSR
// delivered through it and `f` as the error callback's record. Returns the
// fixture's nx_fixture_fail_peer, which fails that endpoint.
void (*fixture_route(failures &f, hits &hh, nx_gp_t &gp))(void) {
  void *h =
      dlopen(FIXTURE_DIR "/libnx_proto_fixture.so", RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(h != nullptr);
  auto fail_peer =
      reinterpret_cast<void (*)(void)>(dlsym(h, "nx_fixture_fail_peer"));
  dlclose(h); // RTLD_NOLOAD took a reference; the runtime holds its own
  REQUIRE(fail_peer != nullptr);
  REQUIRE(nx_error_cb_set(on_failure, &f) == 0);
  REQUIRE(nx_context_create_local(hit_init, &hh, &gp) == 0);
  REQUIRE(std::string(nx_gp_protocol(&gp)) == "fixture");
  nx_buffer_t *b;
  REQUIRE(nx_rsr_init_name(&b, &gp, "hit", 8) == 0);
  REQUIRE(nx_put_int32(b, 7) == 0);
  REQUIRE(nx_rsr_send(b) == 0);
  REQUIRE(hh.n.wait_for(1) == 1);
  return fail_peer;
}
} // namespace

TEST_CASE("a dead peer fails later RSRs and is reported once",
          "[loader][badinput]") {
  env_guard env("fixture"); // nothing else reaches the context
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  failures f;
  hits hh;
  nx_gp_t gp;
  auto fail_peer = fixture_route(f, hh, gp);
  nx_buffer_t *b;

  fail_peer();
  CHECK(f.n.get() == 1);
  CHECK(f.err == NX_EPEERDEAD);
  CHECK(f.handler == 0);
  CHECK((f.ctx >> 32) == (nx_gp_context(&gp) >> 32)); // the whole process
  CHECK((uint32_t)f.ctx == 0);
  REQUIRE(nx_rsr_init_name(&b, &gp, "hit", 8) == 0);
  CHECK(nx_rsr_send(b) == NX_EPEERDEAD);
  fail_peer(); // reported once
  CHECK(f.n.get() == 1);
  nx_stats_t s;
  REQUIRE(nx_stats_get(&s) == 0);
  CHECK(s.peers_failed == 1);
  CHECK(hh.n.get() == 1);
  REQUIRE(nx_error_cb_set(nullptr, nullptr) == 0);
  nx_gp_release(&gp);
}

TEST_CASE("a failed route falls back to the next module that reaches the "
          "destination",
          "[loader][badinput]") {
  env_guard env("fixture,local");
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  failures f;
  hits hh;
  nx_gp_t gp;
  auto fail_peer = fixture_route(f, hh, gp);
  nx_buffer_t *b;

  // The fixture's endpoint fails; local reaches the same process, so the
  // process is not lost: the next send goes over local.
  fail_peer();
  CHECK(f.n.get() == 0);
  REQUIRE(nx_rsr_init_name(&b, &gp, "hit", 8) == 0);
  REQUIRE(nx_put_int32(b, 7) == 0);
  CHECK(nx_rsr_send(b) == 0);
  CHECK(hh.n.wait_for(2) == 2);
  CHECK(std::string(nx_gp_protocol(&gp)) == "local");
  nx_stats_t s;
  REQUIRE(nx_stats_get(&s) == 0);
  CHECK(s.route_fallbacks == 1);
  CHECK(s.peers_failed == 0);
  CHECK(f.n.get() == 0);
  // A second report of the same endpoint changes nothing: the core heard
  // the first (its `failed` word), and the route is local's now.
  fail_peer();
  REQUIRE(nx_rsr_init_name(&b, &gp, "hit", 8) == 0);
  REQUIRE(nx_put_int32(b, 7) == 0);
  CHECK(nx_rsr_send(b) == 0);
  CHECK(hh.n.wait_for(3) == 3);
  REQUIRE(nx_stats_get(&s) == 0);
  CHECK(s.route_fallbacks == 1);
  CHECK(s.peers_failed == 0);
  CHECK(f.n.get() == 0);
  REQUIRE(nx_error_cb_set(nullptr, nullptr) == 0);
  nx_gp_release(&gp);
}
